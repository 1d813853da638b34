"""Bounds on the text fields that make a chat big: every chat stays openable.

A chat's snapshot is trimmed to the newest turns that fit one message and
the rest is paged (``turnsNextCursor``, ``fetchTurns``); that only works if
each turn fits, and each action's envelope too.  So the host bounds, as an
action is applied, the fields a peer can make arbitrarily large:

* a **message's text** (``chat/turnStarted``, ``chat/pendingMessageSet``,
  ``chat/draftChanged``) over :attr:`Bounds.field_bytes` goes **by
  reference**: the whole text is stored (``resourceRead`` reads it) and
  attached as a ``MessageResourceAttachment`` (the spec's form for content
  "not delivered inline"), and the text keeps a preview ending with a line
  that says so;
* a **title** (``session/titleChanged``, ``session/chatUpdated``) over
  :attr:`Bounds.title_bytes` is **cut** with a visible marker (a title has
  no reference form);
* a **markdown or reasoning part** (``chat/responsePart`` and the
  ``chat/delta`` / ``chat/reasoning`` appends that grow it) is **cut** with a
  visible marker once it reaches :attr:`Bounds.field_bytes` (its deltas
  target the part by id, which a ``contentRef`` part has not); appends after
  the cut carry no text.

Pure: nothing here does I/O.
"""

from __future__ import annotations

import weakref
from typing import Final

from attrs import evolve, frozen

from .. import types as t
from .. import wire
from .content import ContentStore, by_reference

__all__ = [
    "ENVELOPE_ROOM",
    "MESSAGE_PREVIEW_BYTES",
    "Bounds",
    "PartSizes",
    "TurnSizes",
    "bound_action",
    "cut_text",
    "page_chunks",
    "shrink_turn",
    "snapshot_budget",
]

ENVELOPE_ROOM: Final = 64 * 1024
"""Bytes of a message kept for what wraps a snapshot or a page (the JSON-RPC
answer, the envelope, the chat's other fields are measured; this is slack)."""

MESSAGE_PREVIEW_BYTES: Final = 16 * 1024
"""The text a message sent by reference keeps inline (its start)."""

SIDE_BYTES: Final = 64 * 1024
"""The longest queued, steering or draft message kept inline."""

TITLE_BYTES: Final = 16 * 1024
"""The longest title kept; a longer one is cut."""


def snapshot_budget(max_message_size: int) -> int:
    """The bytes a snapshot or a page of turns may take in a ``max_message_size`` message."""
    return max(1024, max_message_size - ENVELOPE_ROOM)


@frozen(kw_only=True)
class Bounds:
    """The field limits derived from a host's message limit."""

    field_bytes: int
    """The longest message text or response part kept whole (a quarter of the
    snapshot budget: a turn with a message and a long reply still fits)."""
    turn_bytes: int
    """The most text the markdown and reasoning parts of one turn hold together
    (half the snapshot budget: with the message, a turn fits one message)."""
    side_bytes: int = SIDE_BYTES
    """The longest queued, steering or draft message kept inline (they add up in
    the chat's state, outside its turns: 64 queued ones at most, 4 MiB)."""
    title_bytes: int = TITLE_BYTES
    preview_bytes: int = MESSAGE_PREVIEW_BYTES

    @classmethod
    def for_message_size(cls, max_message_size: int) -> Bounds:
        budget = snapshot_budget(max_message_size)
        field = max(1024, budget // 4)
        return cls(field_bytes=field, turn_bytes=max(field, budget // 2),
                   side_bytes=min(SIDE_BYTES, field), title_bytes=min(TITLE_BYTES, field),
                   preview_bytes=min(MESSAGE_PREVIEW_BYTES, field // 2))


def _utf8_len(text: str) -> int:
    # an ASCII text needs no encoding to know; a lone surrogate is measured, not
    # refused here (encoding the action refuses it, naming the field)
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def cut_text(text: str, max_bytes: int, note: str) -> str:
    """``text`` cut (at a character) so that it and ``note`` fit ``max_bytes`` UTF-8 bytes."""
    room = max(0, max_bytes - len(note.encode("utf-8")))
    head = text.encode("utf-8", "surrogatepass")[:room]
    for _ in range(4):  # at most three bytes of a cut character to drop
        try:
            return head.decode("utf-8", "surrogatepass") + note
        except UnicodeDecodeError:
            head = head[:-1]
    return head.decode("utf-8", "replace") + note


def _by_reference(message: t.Message, bounds: Bounds, store: ContentStore,
                  owner: str | None, limit: int) -> t.Message:
    size = _utf8_len(message.text)
    if size <= limit:
        return message
    ref = store.put_text(message.text, owner=owner)
    label = "message.txt"
    note = (f"\n\n[message cut here: {size} bytes in all; the whole text is the "
            f"attachment {label!r}]")
    attachment = t.MessageResourceAttachment(
        label=label, display_kind="document", uri=ref.uri, size_hint=ref.size_hint,
        content_type=ref.content_type)
    return evolve(message, text=cut_text(message.text, bounds.preview_bytes, note),
                  attachments=(*(message.attachments or ()), attachment))


def _title(title: str, bounds: Bounds) -> str:
    size = _utf8_len(title)
    if size <= bounds.title_bytes:
        return title
    return cut_text(title, bounds.title_bytes, f" [title cut: {size} bytes in all]")


PART_CUT_NOTE: Final = "\n\n[the rest of this part was cut: it is over the host's size limit]"


class _TurnSizes:
    __slots__ = ("parts", "total")

    def __init__(self) -> None:
        self.parts: dict[str, int] = {}
        """part id -> its UTF-8 bytes; ``-1``: cut (appends carry nothing more)."""
        self.total = 0


class PartSizes:
    """The UTF-8 bytes of the markdown and reasoning parts of the active turns, so
    that an append is checked without measuring the part again."""

    def __init__(self) -> None:
        self._turns: dict[tuple[str, str], _TurnSizes] = {}

    def __len__(self) -> int:
        return len(self._turns)

    def drop_turn(self, channel: str, turn_id: str) -> None:
        self._turns.pop((channel, turn_id), None)

    def drop_channel(self, channel: str) -> None:
        for key in [k for k in self._turns if k[0] == channel]:
            del self._turns[key]

    def _turn(self, channel: str, state: t.ChatState, turn_id: str) -> _TurnSizes:
        sizes = self._turns.get((channel, turn_id))
        if sizes is None:
            # a turn not seen grow here (a host restored from its store): measured once
            sizes = self._turns[(channel, turn_id)] = _TurnSizes()
            turn = state.active_turn
            if turn is not None and turn.id == turn_id:
                for part in turn.response_parts:
                    if isinstance(part, t.MarkdownResponsePart | t.ReasoningResponsePart):
                        size = _utf8_len(part.content)
                        sizes.total += size
                        sizes.parts[part.id] = -1 if part.content.endswith(PART_CUT_NOTE) \
                            else size
        return sizes

    def _kept(self, sizes: _TurnSizes, part_id: str, text: str, bounds: Bounds) -> str:
        size = sizes.parts.get(part_id, 0)
        if size < 0:
            return ""
        added = _utf8_len(text)
        room = min(bounds.field_bytes - size, bounds.turn_bytes - sizes.total)
        if added <= room:
            sizes.parts[part_id] = size + added
            sizes.total += added
            return text
        kept = cut_text(text, room, PART_CUT_NOTE)
        sizes.parts[part_id] = -1
        sizes.total += _utf8_len(kept)
        return kept

    def append(self, channel: str, state: t.ChatState, *, turn_id: str, part_id: str,
               text: str, bounds: Bounds) -> str:
        """What of ``text`` to append to the part: all of it, or its start and the
        marker when the part or its turn reaches its limit, or nothing after."""
        return self._kept(self._turn(channel, state, turn_id), part_id, text, bounds)

    def started(self, channel: str, state: t.ChatState, turn_id: str, part: t.ResponsePart,
                bounds: Bounds) -> t.ResponsePart:
        """``part`` as the turn gets it (its content bounded as an append is)."""
        if not isinstance(part, t.MarkdownResponsePart | t.ReasoningResponsePart):
            return part
        sizes = self._turn(channel, state, turn_id)
        sizes.parts.pop(part.id, None)
        kept = self._kept(sizes, part.id, part.content, bounds)
        return part if kept is part.content else evolve(part, content=kept)


def bound_action(
    channel: str,
    state: t.SnapshotState,
    action: t.StateAction,
    *,
    bounds: Bounds,
    store: ContentStore,
    parts: PartSizes,
) -> t.StateAction:
    """``action`` with its big text fields bounded (see the module); ``action`` itself
    when nothing is over."""
    match action:
        case t.ChatTurnStartedAction(message=message):
            bounded = _by_reference(message, bounds, store, channel, bounds.field_bytes)
            return action if bounded is message else evolve(action, message=bounded)
        case t.ChatPendingMessageSetAction(message=message):
            bounded = _by_reference(message, bounds, store, channel, bounds.side_bytes)
            return action if bounded is message else evolve(action, message=bounded)
        case t.ChatDraftChangedAction(draft=t.Message() as draft):
            bounded = _by_reference(draft, bounds, store, channel, bounds.side_bytes)
            return action if bounded is draft else evolve(action, draft=bounded)
        case t.SessionTitleChangedAction(title=title):
            cut = _title(title, bounds)
            return action if cut is title else evolve(action, title=cut)
        case t.SessionChatUpdatedAction(changes=changes) if changes.title is not None:
            cut = _title(changes.title, bounds)
            return action if cut is changes.title else evolve(
                action, changes=evolve(changes, title=cut))
        case t.ChatResponsePartAction(turn_id=turn_id, part=part) if isinstance(
            state, t.ChatState
        ):
            bounded_part = parts.started(channel, state, turn_id, part, bounds)
            return action if bounded_part is part else evolve(action, part=bounded_part)
        case t.ChatDeltaAction(turn_id=turn_id, part_id=part_id, content=text) | \
                t.ChatReasoningAction(turn_id=turn_id, part_id=part_id, content=text) if (
                    isinstance(state, t.ChatState)):
            kept = parts.append(channel, state, turn_id=turn_id, part_id=part_id, text=text,
                                bounds=bounds)
            return action if kept is text else evolve(action, content=kept)
        case t.ChatTurnCompleteAction(turn_id=turn_id) | t.ChatTurnCancelledAction(
            turn_id=turn_id
        ) | t.ChatErrorAction(turn_id=turn_id):
            parts.drop_turn(channel, turn_id)
        case t.ChatToolCallCompleteAction() | t.ChatToolCallContentChangedAction() | \
                t.ChatToolCallReadyAction():
            # what an agent did not fold (a client's result): over the field limit
            return by_reference(action, store, bounds.field_bytes, channel)
    return action


def shrink_turn(turn: t.Turn, budget: int) -> t.Turn:
    """``turn`` with its message and markdown/reasoning texts cut (each with the
    marker) so that together they take about half of ``budget``: the last resort
    for a turn too big alone for one message (a host restarted with a smaller
    limit than the one its chats were made under)."""
    texts = 1 + sum(isinstance(part, t.MarkdownResponsePart | t.ReasoningResponsePart)
                    for part in turn.response_parts)
    cap = max(256, budget // (2 * texts))
    message = turn.message
    if _utf8_len(message.text) > cap:
        message = evolve(message, text=cut_text(message.text, cap, PART_CUT_NOTE))
    parts = tuple(
        evolve(part, content=cut_text(part.content, cap, PART_CUT_NOTE))
        if isinstance(part, t.MarkdownResponsePart | t.ReasoningResponsePart)
        and _utf8_len(part.content) > cap else part
        for part in turn.response_parts
    )
    return evolve(turn, message=message, response_parts=parts)


def page_chunks(turns: tuple[t.Turn, ...], budget: int) -> list[tuple[t.Turn, ...]]:
    """``turns`` (oldest first) in runs that each fit ``budget`` bytes, newest run first;
    a turn too big alone is :func:`shrunk <shrink_turn>`.  ``[()]`` for no turns."""
    chunks: list[tuple[t.Turn, ...]] = []
    run: list[t.Turn] = []
    room = budget
    for given in reversed(turns):
        turn = given
        size = len(wire.dumps(turn)) + 1
        if size > budget:
            turn = shrink_turn(turn, budget)
            size = len(wire.dumps(turn)) + 1
        if size > room and run:
            chunks.append(tuple(reversed(run)))
            run, room = [], budget
        run.append(turn)
        room -= size
    if run or not chunks:
        chunks.append(tuple(reversed(run)))
    return chunks


class TurnSizes:
    """The encoded bytes of completed turns, measured once per turn object.

    A completed turn never changes (a truncation or a fork makes other
    objects), so trimming a snapshot or a page again costs no encoding;
    an entry goes when its turn is collected."""

    def __init__(self) -> None:
        self._sizes: dict[int, tuple[weakref.ref[t.Turn], int]] = {}

    def __len__(self) -> int:
        return len(self._sizes)

    def size(self, turn: t.Turn) -> int:
        key = id(turn)
        entry = self._sizes.get(key)
        if entry is not None and entry[0]() is turn:
            return entry[1]
        size = len(wire.dumps(turn))
        sizes = self._sizes

        def gone(ref: weakref.ref[t.Turn], key: int = key) -> None:
            # an id is reused only after its object is gone: drop only our own entry
            if (current := sizes.get(key)) is not None and current[0] is ref:
                del sizes[key]

        self._sizes[key] = (weakref.ref(turn, gone), size)
        return size
