"""A bound on log lines of one kind, for lines a peer can cause at will (refused
handshakes, connections closed unopened): the log must not grow with the flood."""

from __future__ import annotations

import logging
import time

__all__ = ["LogQuota"]


class LogQuota:
    """At most ``burst`` log lines of one kind per ``period`` seconds; the lines left
    out are counted and said in one line (on ``logger``) when the next period starts."""

    def __init__(self, what: str, logger: logging.Logger, burst: int = 20,
                 period: float = 10.0) -> None:
        self.what = what
        self.burst = burst
        self.period = period
        self._log = logger
        self._start = -period
        self._used = 0
        self._left_out = 0

    def allow(self) -> bool:
        """Whether to log the next line of this kind."""
        now = time.monotonic()
        if now - self._start >= self.period:
            if self._left_out:
                self._log.warning("%d more %s in the last %.0f s (not logged one by one)",
                                  self._left_out, self.what, now - self._start)
            self._start, self._used, self._left_out = now, 0, 0
        if self._used < self.burst:
            self._used += 1
            return True
        self._left_out += 1
        return False
