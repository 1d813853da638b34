"""The replay buffer: the recent envelopes a ``reconnect`` may replay.

Bounded by a number of envelopes and by the bytes of their 0.7.0 encoding,
whichever is hit first; appending is O(1) amortised (the oldest entries are
evicted as the new one comes in), and lookup by ``serverSeq`` is a dict
access.  The host gives every ``serverSeq`` to exactly one envelope and
records it here, so the buffer always holds a contiguous run of sequence
numbers, ``(floor, last]``: a client that saw ``floor`` or later can be
replayed to, an older one gets snapshots.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from attrs import frozen

from .. import types as t
from ..errors import LocalProtocolError

__all__ = ["ReplayBuffer", "ReplayEntry"]


@frozen(kw_only=True)
class ReplayEntry:
    """One recorded envelope."""

    envelope: t.ActionEnvelope
    only_to: str | None
    """The ``clientId`` a rejection was sent to; ``None``: every subscriber."""
    size: int
    """The bytes of its encoding, what counts against the byte bound."""


class ReplayBuffer:
    """The last envelopes, bounded by count and by bytes."""

    def __init__(self, *, max_envelopes: int, max_bytes: int, floor: int = 0) -> None:
        if max_envelopes < 0 or max_bytes < 0:
            raise LocalProtocolError("replay bounds must not be negative")
        self.max_envelopes = max_envelopes
        self.max_bytes = max_bytes
        self._order: deque[int] = deque()
        self._entries: dict[int, ReplayEntry] = {}
        self._bytes = 0
        self._floor = floor
        self._last = floor

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size_bytes(self) -> int:
        """The bytes held (sum of the entries' sizes)."""
        return self._bytes

    @property
    def floor(self) -> int:
        """The highest ``serverSeq`` no longer held: a client must have seen at least this."""
        return self._floor

    def append(self, envelope: t.ActionEnvelope, *, size: int, only_to: str | None = None) -> None:
        """Record the envelope of the next ``serverSeq``, evicting the oldest as needed."""
        seq = envelope.server_seq
        if seq != self._last + 1:
            raise LocalProtocolError(f"serverSeq {seq} does not follow {self._last}")
        self._last = seq
        entry = ReplayEntry(envelope=envelope, only_to=only_to, size=size)
        self._order.append(seq)
        self._entries[seq] = entry
        self._bytes += size
        while self._order and (
            len(self._order) > self.max_envelopes or self._bytes > self.max_bytes
        ):
            oldest = self._order.popleft()
            self._bytes -= self._entries.pop(oldest).size
            self._floor = oldest

    def truncate(self, seq: int) -> None:
        """Forget the entries after ``seq`` (a batch its store could not keep)."""
        while self._order and self._order[-1] > seq:
            self._bytes -= self._entries.pop(self._order.pop()).size
        self._last = min(self._last, seq)
        self._floor = min(self._floor, seq)

    def get(self, seq: int) -> ReplayEntry | None:
        """The entry of ``seq``, or ``None`` if it is not (or no longer) held."""
        return self._entries.get(seq)

    def can_replay_after(self, seq: int) -> bool:
        """Whether every envelope after ``seq`` is still held."""
        return self._floor <= seq <= self._last

    def after(self, seq: int) -> Iterator[ReplayEntry]:
        """The entries after ``seq``, oldest first (from the floor if ``seq`` is older)."""
        for s in range(max(seq, self._floor) + 1, self._last + 1):
            yield self._entries[s]
