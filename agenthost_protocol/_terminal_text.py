"""Text from a host, made safe to write to the user's terminal (emulator).

Not about AHP terminals (``ahp-terminal:`` channels): this is what the
commands (``chat``, ``sessions``, ``check-host``, ``check-traffic``) do to
every string a host or its agent provides before writing it to stdout or
stderr.  An agent's reply could
otherwise carry escape sequences that retitle the window, write the
clipboard (OSC 52), clear the screen, or move the cursor back over the
``Allow? [y/N]`` prompt and forge it; bidi controls could make a tool's
input read differently from what runs.

Pure (no I/O), below every layer, so that any of them can use it;
``agenthost_protocol.cli.terminal`` re-exports :func:`safe_text`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

__all__ = ["safe_json", "safe_text"]

# Inclusive ranges of the code points a terminal may act on rather than show:
# C0 without \t and \n (\r included: it would let text overwrite the prompt
# line), DEL, C1 (a lone 0x9B is CSI on some terminals, so ESC is not the only
# way in), and the bidi embeddings, overrides, isolates and marks.
_UNSAFE_RANGES: Final = (
    (0x00, 0x08),
    (0x0B, 0x1F),
    (0x7F, 0x9F),
    (0x061C, 0x061C),
    (0x200E, 0x200F),
    (0x202A, 0x202E),
    (0x2066, 0x2069),
)

_UNSAFE: Final = re.compile(
    "[" + "".join(f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in _UNSAFE_RANGES) + "]"
)


def _escape(code: int) -> str:
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


_ESCAPES: Final[Mapping[int, str]] = MappingProxyType({
    code: _escape(code) for lo, hi in _UNSAFE_RANGES for code in range(lo, hi + 1)
})


def safe_text(text: str) -> str:
    """``text`` with every control character shown escaped (``\\x1b``, ``\\x9b``, ``\\u202e``).

    Escaped: C0 controls but newline and tab, carriage return included; DEL;
    C1 controls; the bidi controls U+061C, U+200E, U+200F, U+202A-U+202E and
    U+2066-U+2069.  Everything else (any other non-ASCII text, backslashes)
    is kept; text with nothing to escape is returned as is.

    Each character is escaped on its own, so text that arrives in pieces
    (streamed deltas) is safe piece by piece: an escape sequence split
    between two pieces loses its ESC in the first.
    """
    if _UNSAFE.search(text) is None:
        return text
    return text.translate(_ESCAPES)


# What json.dumps(ensure_ascii=False) leaves as it is and a terminal may act on: C0
# is escaped already, but not DEL, C1, the bidi controls, nor a lone surrogate (which
# UTF-8 cannot even write)
_JSON_UNSAFE: Final = re.compile(_UNSAFE.pattern[:-1] + r"\ud800-\udfff]")


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def safe_json(text: str) -> str:
    """JSON text (``json.dumps(..., ensure_ascii=False)``) with each character
    :func:`safe_text` escapes, and each lone surrogate, written as a ``\\uXXXX``
    escape: the same JSON (it parses to the same value), safe to print.

    Those characters can only be inside JSON strings, where ``\\uXXXX`` means
    them; everything else (any other non-ASCII text) is kept as it is."""
    if _JSON_UNSAFE.search(text) is None:
        return text
    return _JSON_UNSAFE.sub(_json_escape, text)
