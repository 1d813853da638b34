"""Test helpers for AHP implementations.

:mod:`agenthost_protocol.testing.strategies` holds Hypothesis strategies for
every type of the model; it needs the ``testing`` extra
(``pip install 'agenthost-protocol[testing]'``).  This package itself imports
nothing, so importing it never pulls Hypothesis in.
"""

from __future__ import annotations

__all__: list[str] = []
