"""Text from a host, made safe to write to the user's terminal: :func:`safe_text`.

It lives in :mod:`agenthost_protocol._terminal_text`, below every layer, so that
the layers under the commands can use it too; this is its name for the commands.
"""

from __future__ import annotations

from .._terminal_text import safe_json, safe_text

__all__ = ["safe_json", "safe_text"]
