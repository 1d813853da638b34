"""``TextBuffer``: the storage behind streamed text fields.

Agents stream text as thousands of small deltas.  Rebuilding an immutable
``str`` for every delta costs time proportional to the text so far, so a
stream of *n* deltas would cost O(n²).  A ``TextBuffer`` is an immutable
handle on a prefix of a shared, append-only *line* of text:

* appending to the newest handle of a line extends the line in place
  (amortised O(len(delta)));
* appending to an older handle starts a new line that *shares* the older
  text instead of copying it (O(len(delta)) as well): the new line refers to
  the older handle and holds only what was appended after it;
* every handle keeps meaning the same text forever, and reading it (``value``)
  joins the pieces once and caches the ``str``;
* a text never appended to (``TextBuffer.of``) has no line until its first
  append, and a text that will not grow any more can drop its line
  (``settle``: the chat reducer does so for the texts of a finished turn).

A line keeps its text compact: every :data:`_LOOSE` deltas are joined into a
block, and everything into one string whenever the blocks and loose deltas
outgrow that head, so one-character deltas do not cost a string object each,
and every character is copied about three times in all.

Model classes expose the text as a plain ``str`` property and keep the buffer
in a private slot.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["TextBuffer", "as_text", "optional_text"]

_LOOSE: Final = 32
"""How many deltas a line keeps as separate strings before joining them into a block."""


class _Line:
    """The shared storage of one line of text buffers.

    Its text is the text of ``prefix`` (the buffer the line branched off, of
    length ``base``; ``None`` and 0 for a line of its own) followed by the
    line's own text, ``parts``: ``parts[0]`` is the head, ``parts[1:loose]``
    are blocks of joined deltas and ``parts[loose:]`` the deltas not joined
    yet.  The line is only ever extended at the end, and joining parts keeps
    the text, so every handle, which knows only its length, stays valid.

    Reducers are pure, so two threads may extend or read the same state.
    Whoever changes ``parts`` (or ``size``, ``loose``, ``limit``) first takes
    the line's *baton*: it pops the one item of ``baton``, and puts it back
    when done.  ``list.pop`` and ``list.append`` are atomic, so this is a
    lock that is only ever tried, never waited for, at a fraction of the
    cost of a ``threading.Lock`` (whose ``with`` costs more than the rest of
    an append).  A thread that finds the baton taken does not wait: an
    append branches off a new line, and a read joins a copy of ``parts``
    (every change of ``parts`` is a single list operation, so a copy always
    holds a prefix-consistent text at least as long as any handle's).
    ``prefix`` and ``base`` never change.

    ``hint`` is not part of the text: the code that streams into a line may
    keep there a fact about immutable values that spares it work on the next
    append, which it must check before relying on it (the chat reducer keeps
    the parts before the part that holds the text, and the part's id: see
    ``reducers/chat.py``).
    """

    __slots__ = ("base", "baton", "hint", "limit", "loose", "parts", "prefix", "size")

    def __init__(self, prefix: TextBuffer | None, base: int, text: str) -> None:
        self.baton = [True]
        self.prefix = prefix
        self.base = base
        self.parts = [text]
        self.size = base + len(text)
        self.loose = 1
        self.limit = 1 + _LOOSE
        self.hint: Any = None

    def coalesce(self) -> None:
        """Join the loose deltas into a block, or everything into the head once it is outgrown.

        Called with the baton, when ``_LOOSE`` deltas are loose.  Each join is
        one list operation, so a reader's copy of ``parts`` is never torn.
        """
        parts = self.parts
        head = len(parts[0])
        if self.size - self.base - head >= head:  # the blocks and loose deltas outgrow the head
            parts[:] = ["".join(parts)]
        else:
            loose = self.loose
            parts[loose:] = ["".join(parts[loose:])]
        self.loose = len(parts)
        self.limit = self.loose + _LOOSE

    def own_text(self) -> str:
        """The line's own text, joined in place once (when the baton is free)."""
        baton = self.baton
        try:
            baton.pop()
        except IndexError:  # being extended or joined right now: read a copy
            parts = self.parts[:]
            return parts[0] if len(parts) == 1 else "".join(parts)
        try:
            parts = self.parts
            if len(parts) > 1:
                parts[:] = ["".join(parts)]
                self.loose = 1
                self.limit = 1 + _LOOSE
            return parts[0]
        finally:
            baton.append(True)


class TextBuffer:
    """An immutable text value with cheap appends; compares equal to its text's buffers."""

    __slots__ = ("_line", "_size", "_value")

    # ``_line`` is ``None`` for a text that was never appended to (``of``):
    # most texts are never extended (every part of a decoded snapshot), and
    # they cost no line until then.  ``_value`` is then always set.
    #
    # There is no ``__init__``: buffers are made by ``of`` and ``appended``
    # only, and ``TextBuffer()`` with ``object.__init__`` allocates faster
    # than ``object.__new__(TextBuffer)`` does (this is the streaming path).
    _line: _Line | None
    _size: int
    _value: str | None

    @classmethod
    def of(cls, value: str | TextBuffer) -> TextBuffer:
        """Wrap ``value`` (a ``str``); an existing buffer is returned as is."""
        if isinstance(value, TextBuffer):
            return value
        return _buffer(None, len(value), value)

    @property
    def value(self) -> str:
        """The text, materialised once and cached."""
        value = self._value
        if value is None:
            value = self._value = self._materialise()
        return value

    def settle(self) -> None:
        """Keep this text as one string, without the line it was streamed into.

        For a text that will not grow any more (a finished turn's): a line
        holds the deltas not joined yet, its lists and its own state, often
        more than the text.  The handle keeps meaning the same text (appending
        to it starts a new line, as for a text never appended to), and the
        line stays valid for the other handles that keep it.  Like reading
        ``value``, this changes a cache, never the value: the string is set
        before the line is dropped, so a thread reading this handle at the
        same time finds one or the other.
        """
        if self._line is not None:
            self._value = self.value
            self._line = None

    def _materialise(self) -> str:
        # Iterative, not recursive: branches of branches may nest deeply.
        pieces: list[str] = []
        buffer = self
        while True:
            line = buffer._line
            if line is None:  # settled since its value was found missing (``settle``)
                value = buffer._value
                assert value is not None  # a buffer without a line has its value
                pieces.append(value)
                break
            own = line.own_text()
            need = buffer._size - line.base
            pieces.append(own if len(own) == need else own[:need])
            prefix = line.prefix
            if prefix is None:
                break
            cached = prefix._value
            if cached is not None:
                pieces.append(cached)
                break
            buffer = prefix
        if len(pieces) == 1:
            return pieces[0]
        pieces.reverse()
        return "".join(pieces)

    def appended(self, text: str) -> TextBuffer:
        """A new buffer holding this text followed by ``text``."""
        if not text:
            return self
        line = self._line
        size = self._size
        if line is None:
            # The first append to this text: its line starts here.  (Each append
            # to a buffer without a line starts another, all sharing its ``str``.)
            value = self._value
            assert value is not None
            if not value:  # a part that starts empty, as streamed parts do
                line = _Line(None, 0, text)
                return _buffer(line, line.size, None)
            line = _Line(None, 0, value)
            line.parts.append(text)
            size = line.size = size + len(text)
            return _buffer(line, size, None)
        if line.size == size:  # the newest handle of its line, unless a thread is racing
            baton = line.baton
            try:
                baton.pop()
            except IndexError:  # another thread is at this line: branch off
                pass
            else:
                try:
                    if line.size == size:
                        parts = line.parts
                        parts.append(text)
                        size = line.size = size + len(text)
                        if len(parts) >= line.limit:
                            line.coalesce()
                        new = TextBuffer()
                        new._line = line
                        new._size = size
                        new._value = None
                        return new
                finally:
                    baton.append(True)
        # An older state is being extended: a new line that shares its text.
        line = _Line(self, size, text)
        return _buffer(line, line.size, None)

    def __len__(self) -> int:
        return self._size

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TextBuffer):
            if self is other:
                return True
            if self._size != other._size:
                return False
            line = self._line
            return (line is not None and line is other._line) or self.value == other.value
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return repr(self.value)

    def __reduce__(self) -> tuple[Any, ...]:
        return (TextBuffer.of, (self.value,))


def _buffer(line: _Line | None, size: int, value: str | None) -> TextBuffer:
    buffer = TextBuffer()
    buffer._line = line
    buffer._size = size
    buffer._value = value
    return buffer


def as_text(value: str | TextBuffer) -> TextBuffer:
    """The attrs converter of streamed-text fields: ``TextBuffer.of``."""
    return TextBuffer.of(value)


def optional_text(value: str | TextBuffer | None) -> TextBuffer | None:
    """The attrs converter of optional streamed-text fields."""
    return None if value is None else TextBuffer.of(value)
