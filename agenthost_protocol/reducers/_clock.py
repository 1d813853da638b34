"""The injectable clock of the reducers and the two timestamp forms of AHP."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timezone

__all__ = ["Clock", "epoch_ms", "iso_timestamp", "now_ms"]

Clock = Callable[[], int]
"""A zero-argument callable returning the time as integer epoch milliseconds."""


def now_ms(now: Clock | None) -> int:
    """Read ``now``, or the wall clock when it is ``None``."""
    if now is None:
        return time.time_ns() // 1_000_000
    return now()


def epoch_ms(now: Clock | None) -> int:
    """Session timestamps are epoch milliseconds."""
    return now_ms(now)


def iso_timestamp(ms: int) -> str:
    """Chat timestamps are ISO-8601 strings exactly as JavaScript's ``toISOString``.

    Always three fractional digits and a ``Z``: ``1970-01-01T00:00:09.999Z``.
    """
    seconds, millis = divmod(ms, 1000)
    dt = datetime.fromtimestamp(seconds, tz=timezone.utc)
    return f"{dt:%Y-%m-%dT%H:%M:%S}.{millis:03d}Z"
