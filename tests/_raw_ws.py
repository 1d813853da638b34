"""Raw WebSocket frames, built by hand as an attacker's script would (RFC 6455)."""

from __future__ import annotations

import os

__all__ = ["masked_text_frame"]


def masked_text_frame(text: str, mask: bytes | None = None) -> bytes:
    """One client-to-server text frame (RFC 6455: clients mask), with a random mask key
    or ``mask`` (``b"\\0\\0\\0\\0"``: valid, and no per-byte work for megabytes)."""
    payload = text.encode()
    n = len(payload)
    if n < 126:
        header = bytes([0x81, 0x80 | n])
    elif n < 65536:
        header = bytes([0x81, 0x80 | 126]) + n.to_bytes(2, "big")
    else:
        header = bytes([0x81, 0x80 | 127]) + n.to_bytes(8, "big")
    mask = os.urandom(4) if mask is None else mask
    masked = (payload if mask == b"\0\0\0\0"
              else bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
    return header + mask + masked
