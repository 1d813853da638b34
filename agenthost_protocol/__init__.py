"""agenthost-protocol: a pure, I/O-free Python implementation of the Agent Host Protocol."""

from __future__ import annotations

from ._version import __version__

__all__ = ["__version__"]
