"""``TextBuffer``: the storage behind streamed text fields.

Agents stream text as thousands of small deltas.  Rebuilding an immutable
``str`` for every delta costs time proportional to the text so far, so a
stream of *n* deltas would cost O(n²).  A ``TextBuffer`` is an immutable
handle on a prefix of a shared, append-only chunk list: appending to the
newest handle extends the list in place (amortised O(len(delta))), appending
to an older handle copies its prefix first, and every handle keeps meaning
the same text forever.  Model classes expose the text as a plain ``str``
property and keep the buffer in a private slot.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["TextBuffer", "as_text", "optional_text"]


class _Chunks:
    """The shared, append-only storage of one line of text buffers."""

    __slots__ = ("head", "lock", "parts", "size")

    def __init__(self, text: str) -> None:
        # Reducers are pure, so two threads may extend or read the same state;
        # the check-then-append and the compaction must not interleave.
        self.lock = threading.Lock()
        self.parts = [text]
        self.size = len(text)
        self.head = len(text)
        """Length of ``parts[0]``, the part already joined."""

    def compact(self) -> None:
        """Join every part into one (callers hold ``lock``)."""
        if len(self.parts) > 1:
            # Handles index by length, so joining keeps every one of them valid.
            self.parts[:] = ["".join(self.parts)]
            self.head = self.size


class TextBuffer:
    """An immutable text value with cheap appends; compares equal to its text's buffers."""

    __slots__ = ("_chunks", "_size", "_value")

    def __init__(self, chunks: _Chunks, size: int, value: str | None) -> None:
        self._chunks = chunks
        self._size = size
        self._value = value

    @classmethod
    def of(cls, value: str | TextBuffer) -> TextBuffer:
        """Wrap ``value`` (a ``str``); an existing buffer is returned as is."""
        if isinstance(value, TextBuffer):
            return value
        return cls(_Chunks(value), len(value), value)

    @property
    def value(self) -> str:
        """The text, materialised once and cached."""
        value = self._value
        if value is None:
            chunks = self._chunks
            with chunks.lock:
                chunks.compact()
                whole = chunks.parts[0]
            value = whole if len(whole) == self._size else whole[: self._size]
            self._value = value
        return value

    def appended(self, text: str) -> TextBuffer:
        """A new buffer holding this text followed by ``text``."""
        chunks = self._chunks
        with chunks.lock:
            if chunks.size == self._size:
                parts = chunks.parts
                parts.append(text)
                size = chunks.size = chunks.size + len(text)
                # Join once the unjoined tail outgrows the head: bounded memory
                # (no object per tiny delta) at amortised linear cost.
                if len(parts) > 64 and size - chunks.head >= chunks.head:
                    chunks.compact()
                new = _new_buffer(TextBuffer)
                new._chunks = chunks
                new._size = size
                new._value = None
                return new
        # An older state is being extended: branch off a private copy.
        chunks = _Chunks(self.value + text)
        return TextBuffer(chunks, chunks.size, None)

    def __len__(self) -> int:
        return self._size

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TextBuffer):
            return self is other or (self._size == other._size and self.value == other.value)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return repr(self.value)

    def __reduce__(self) -> tuple[Any, ...]:
        return (TextBuffer.of, (self.value,))


_new_buffer = object.__new__


def as_text(value: str | TextBuffer) -> TextBuffer:
    """The attrs converter of streamed-text fields: ``TextBuffer.of``."""
    return TextBuffer.of(value)


def optional_text(value: str | TextBuffer | None) -> TextBuffer | None:
    """The attrs converter of optional streamed-text fields."""
    return None if value is None else TextBuffer.of(value)
