"""Limits both ends of the asyncio layer share (no imports: the client must stay light)."""

from __future__ import annotations

from typing import Final

DEFAULT_MAX_MESSAGE_SIZE: Final = 16 * 1024 * 1024
"""16 MiB: the largest message a host or a client accepts by default."""
