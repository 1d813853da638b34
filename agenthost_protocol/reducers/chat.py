"""The reducer of a chat channel ``ahp-chat:/<id>`` (``ChatState``), AHP 0.7.0.

Spec: the 29 ``chat/*`` action types (30 classes: ``chat/toolCallConfirmed``
is approved or denied).  They cover the turn lifecycle (start, streamed text
and reasoning, response parts, usage, the three ways a turn ends), the
seven-state tool-call machine (with ``auth-required``), pending (steering and
queued) messages, the draft, input requests as response parts, working
directories, history paging and truncation.  The rules are those of the
TypeScript reference reducer (inventory §2, §2.3); this module gives the
same result for *any* sequence of actions, not only the fixtures'.

Rules worth knowing:

* Every turn-scoped action is a no-op unless ``turnId`` names the active turn.
  ``chat/inputRequested`` has no ``turnId``: it targets whatever turn is
  active, and is a no-op without one.
* Input requests live in the active turn as ``inputRequest`` parts.  A new
  request replaces the *unresolved* part with its id in place (keeping its
  draft answers unless the request brings its own), else it is appended.
  ``chat/inputAnswerChanged`` and ``chat/inputCompleted`` act on the
  unresolved part only; completing keeps the part, with ``response`` set and
  the final answers laid over the drafts.  A turn that ends keeps every part,
  so unanswered requests stay in the transcript.
* A turn ends (``chat/turnComplete``, ``chat/turnCancelled``, ``chat/error``)
  by forcing every unfinished tool call, ``auth-required`` included, to
  ``cancelled`` (reason ``skipped``) and appending a ``Turn`` that carries the
  active turn's ``startedAt`` and the action's ``duration`` (never below 0).
* Tool-call actions change *every* part of the active turn with that
  ``toolCallId`` (``chat/toolCallStart`` does not check for duplicates);
  ``chat/delta`` and ``chat/reasoning`` append to the *first* part with that
  id only, and only if it is of the right kind.
* ``status`` keeps its flag bits (``IS_READ``, ``IS_ARCHIVED``, unknown bits)
  and gets its activity bits recomputed (:mod:`._status`) by turn start and
  end, truncation, input requested and completed, and the six tool-call
  transitions (ready, confirmed, complete, result confirmed, auth required,
  auth resolved).  Those six recompute **even when no tool call matched**
  (wrong turn, unknown id, a transition the state machine refuses, no active
  turn), as the reference does: a late ``chat/toolCallComplete`` after
  ``chat/error`` turns the ``ERROR`` activity into ``IDLE``.
  ``chat/turnStarted`` and ``chat/inputRequested`` also clear ``IS_READ``.
* ``chat/toolCallReady`` works from ``streaming``, ``running`` and
  ``pending-confirmation``; what the action leaves out falls back to the
  call's current values (tool input, intention, and the confirmation fields
  of a pending call).  A contributor can be refined, but client ownership is
  fixed at ``chat/toolCallStart``.  An edited tool input is applied only over
  an inline (string) input, never over a ``ContentRef``.
* ``chat/toolCallAuthRequired`` applies only to a running call of an MCP
  contributor; ``chat/toolCallComplete`` from ``auth-required`` applies only
  with a failed result, always completes, and keeps the content produced
  before the pause.
* A tool call in a status this library does not know (from a newer peer) is
  left alone by every tool-call action, but a turn end cancels it like any
  other unfinished call, keeping the fields the reference keeps.
* ``chat/pendingMessageSet`` and ``chat/pendingMessageRemoved`` treat any
  kind other than ``steering`` as ``queued``, as the reference does.
* ``modifiedAt`` (``toISOString`` of the clock, see :mod:`._clock`) is
  stamped by turn start and end, ``chat/inputRequested``,
  ``chat/inputAnswerChanged``, ``chat/inputCompleted`` and
  ``chat/truncated``, and only when they apply.

A reducer returns ``state`` itself exactly when the result equals ``state``:
no-ops are ``is``-identical, and a changed state is never ``state``.

Streaming is the hot path (``docs/performance.md``): ``chat/delta`` is
tested before any routing, and its usual case is written into
``chat_reducer`` itself (generated at import, see :func:`_fused`): a hint
left on the streamed text spares the scan for the part while deltas keep
going to the turn's newest part (see :func:`_append_text`); the text is
appended to the part's ``TextBuffer`` (amortised O(len(delta)), older states
keep their text and branches share it); and the part, the active turn and
the state are rebuilt by generated copies (:mod:`._copy`), several times
cheaper than :func:`attrs.evolve`.  Other actions go through one lookup of
their class (``_HANDLERS``).  When a turn ends, its texts are kept as
strings without the lines they were streamed into
(:meth:`~agenthost_protocol.types._text.TextBuffer.settle`).  The module
holds no mutable state: reducing is a function of the arguments only (the
hint is a checked fact about immutable values, kept in the text's storage).
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, TypeAlias, TypedDict, TypeVar, get_args

from typing_extensions import TypeIs, assert_never

from .._json import json_equal
from ..errors import ProtocolError
from ..types import (
    ActiveTurn,
    ChatAction,
    ChatActivityChangedAction,
    ChatDeltaAction,
    ChatDraftChangedAction,
    ChatErrorAction,
    ChatInputAnswerChangedAction,
    ChatInputCompletedAction,
    ChatInputRequest,
    ChatInputRequestedAction,
    ChatPendingMessageRemovedAction,
    ChatPendingMessageSetAction,
    ChatQueuedMessagesReorderedAction,
    ChatReasoningAction,
    ChatResponsePartAction,
    ChatState,
    ChatToolCallApprovedAction,
    ChatToolCallAuthRequiredAction,
    ChatToolCallAuthResolvedAction,
    ChatToolCallCompleteAction,
    ChatToolCallContentChangedAction,
    ChatToolCallDeltaAction,
    ChatToolCallDeniedAction,
    ChatToolCallReadyAction,
    ChatToolCallResultConfirmedAction,
    ChatToolCallStartAction,
    ChatTruncatedAction,
    ChatTurnCancelledAction,
    ChatTurnCompleteAction,
    ChatTurnsLoadedAction,
    ChatTurnStartedAction,
    ChatUsageAction,
    ChatWorkingDirectoryRemovedAction,
    ChatWorkingDirectorySetAction,
    ConfirmationOption,
    ErrorInfo,
    InputRequestResponsePart,
    MarkdownResponsePart,
    PendingMessage,
    PendingMessageKind,
    ReasoningResponsePart,
    ResponsePart,
    SessionStatus,
    StateAction,
    StringOrMarkdown,
    ToolCallAuthRequiredState,
    ToolCallCancellationReason,
    ToolCallCancelledState,
    ToolCallClientContributor,
    ToolCallCompletedState,
    ToolCallConfirmationReason,
    ToolCallContributor,
    ToolCallMcpContributor,
    ToolCallPendingConfirmationState,
    ToolCallPendingResultConfirmationState,
    ToolCallResponsePart,
    ToolCallRunningState,
    ToolCallState,
    ToolCallStreamingState,
    ToolInput,
    Turn,
    TurnState,
    UnknownAction,
    UnknownResponsePart,
    UnknownToolCallState,
)
from ..types._text import TextBuffer
from ..types.enums import ACTIVITY_MASK
from . import _copy
from ._clock import Clock, iso_timestamp, now_ms
from ._copy import copier as _copier
from ._copy import copy_code as _copy_code
from ._copy import evolve as _evolve
from ._copy import evolver as _evolver
from ._copy import generate as _generate
from ._copy import replacer as _replacer
from ._status import (
    BLOCKING_TYPES,
    NOT_BLOCKING_TYPES,
    chat_status,
    status_of,
    without_flag,
)

__all__ = ["chat_reducer"]

_V = TypeVar("_V")

# ─── Fast copies ─────────────────────────────────────────────────────────────
#
# ``attrs.evolve`` costs about 3 µs for a ``ChatState``, while a streamed
# delta has to copy three objects: the copies are generated functions
# (:mod:`._copy`), and the usual cases of the streaming path are fused into
# one function each.


_TextRebuilder: TypeAlias = Callable[
    [ChatState, ActiveTurn, tuple[ResponsePart, ...], tuple[ResponsePart, ...], Any, TextBuffer],
    ChatState,
]


def _text_rebuilder(part_class: type) -> _TextRebuilder:
    """The copies of a streamed delta, fused: ``(state, turn, before, after, part, buffer)``.

    Returns ``state`` with its active ``turn`` holding the parts ``before``,
    ``part`` (of ``part_class``) with ``buffer`` as its text, and ``after``:
    the part, the parts tuple, the turn and the state are rebuilt in one call
    rather than three.
    """
    part_copy, part_names = _copy_code(part_class, "part", "new_part", {"_content": "buffer"})
    turn_copy, turn_names = _copy_code(
        ActiveTurn, "turn", "new_turn", {"response_parts": "new_parts"}
    )
    state_copy, state_names = _copy_code(
        ChatState, "state", "new_state", {"active_turn": "new_turn"}
    )
    body = [
        *part_copy,
        "    new_parts = before + (new_part,) + after if after else before + (new_part,)",
        *turn_copy,
        *state_copy,
        "    return new_state",
    ]
    rebuilder: _TextRebuilder = _generate(
        f"_with_{part_class.__name__}_text",
        "state, turn, before, after, part, buffer",
        body,
        {**part_names, **turn_names, **state_names},
    )
    return rebuilder


def _parts_rebuilder() -> Callable[[ChatState, ActiveTurn, tuple[ResponsePart, ...]], ChatState]:
    """``(state, turn, parts)``: ``state`` with its active ``turn`` holding ``parts``, fused."""
    turn_copy, turn_names = _copy_code(ActiveTurn, "turn", "new_turn", {"response_parts": "parts"})
    state_copy, state_names = _copy_code(
        ChatState, "state", "new_state", {"active_turn": "new_turn"}
    )
    rebuilder: Callable[[ChatState, ActiveTurn, tuple[ResponsePart, ...]], ChatState] = _generate(
        "_with_turn_parts",
        "state, turn, parts",
        [*turn_copy, *state_copy, "    return new_state"],
        {**turn_names, **state_names},
    )
    return rebuilder


# The usual case of a streamed delta, written out: the newest part of the
# turn, whose text line holds a hint that spares the scan (see
# ``_append_text``), extended at the newest handle of its line.  It is
# ``TextBuffer.appended`` and the three copies of ``_text_rebuilder`` in one
# body, and ``chat_reducer`` holds it for ``chat/delta`` (see ``_fused``): no
# call but the one into the reducer.  Anything else (another part, a branch,
# a thread at the line, an empty text, a wrong id) falls through to
# ``_append_text``, which decides everything.  ``{part_copy}`` and the other
# copies are filled in by ``_stream_code`` (at the indentation of ``#``).
_STREAM_BLOCK: Final = """\
turn = state.active_turn
if turn is not None:
    parts = turn.response_parts
    if parts:
        part = parts[-1]
        if type(part) is _part_class:
            buffer = part._content
            line = buffer._line
            if line is not None:
                hint = line.hint
                part_id = part.id
                if (
                    hint is not None
                    and part_id == action.part_id
                    and turn.id == action.turn_id
                    and hint[1] == part_id
                ):
                    before = hint[0]
                    text = action.content
                    size = buffer._size
                    if text and line.size == size and before == parts[:-1]:
                        baton = line.baton
                        try:
                            baton.pop()
                        except IndexError:
                            return _append_text(state, action, _part_class, _rebuild)
                        try:
                            newest = line.size == size
                            if newest:
                                chunks = line.parts
                                chunks.append(text)
                                size += len(text)
                                line.size = size
                                if len(chunks) >= line.limit:
                                    line.coalesce()
                        finally:
                            baton.append(True)
                        if newest:
                            buffer = _TextBuffer()
                            buffer._line = line
                            buffer._size = size
                            buffer._value = None
                            #{part_copy}
                            new_parts = before + (new_part,)
                            #{turn_copy}
                            #{state_copy}
                            return new_state
return _append_text(state, action, _part_class, _rebuild)
"""


def _stream_code(
    part_class: type, rebuild: _TextRebuilder, indent: str
) -> tuple[str, dict[str, Any]]:
    """The streaming block for ``part_class`` at ``indent``, and the globals it needs."""
    code = _STREAM_BLOCK
    namespace: dict[str, Any] = {
        "_part_class": part_class,
        "_rebuild": rebuild,
        "_TextBuffer": TextBuffer,
        "_append_text": _append_text,
    }
    for key, cls, old, new, values in (
        ("part_copy", part_class, "part", "new_part", {"_content": "buffer"}),
        ("turn_copy", ActiveTurn, "turn", "new_turn", {"response_parts": "new_parts"}),
        ("state_copy", ChatState, "state", "new_state", {"active_turn": "new_turn"}),
    ):
        lines, names = _copy_code(cls, old, new, values)
        namespace.update(names)
        at = code.index("#{" + key + "}")
        margin = code[code.rindex("\n", 0, at) + 1 : at]
        copied = "\n".join(margin + line.removeprefix("    ") for line in lines)
        code = code.replace(margin + "#{" + key + "}", copied)
    return textwrap.indent(code, indent), namespace


def _text_streamer(
    part_class: type, rebuild: _TextRebuilder
) -> Callable[[ChatState, ChatDeltaAction | ChatReasoningAction], ChatState]:
    """``chat/delta`` (markdown) or ``chat/reasoning``: the usual case written out, else
    ``_append_text``."""
    code, namespace = _stream_code(part_class, rebuild, "    ")
    name = f"_stream_{part_class.__name__}"
    streamer: Callable[[ChatState, ChatDeltaAction | ChatReasoningAction], ChatState] = (
        _generate(name, "state, action", code.rstrip("\n").split("\n"), namespace)
    )
    return streamer


def _parts_status_rebuilder() -> Callable[
    [ChatState, ActiveTurn, tuple[ResponsePart, ...], SessionStatus], ChatState
]:
    """``(state, turn, parts, status)``: ``state`` with ``status`` and its ``turn`` holding
    ``parts``, fused."""
    turn_copy, turn_names = _copy_code(ActiveTurn, "turn", "new_turn", {"response_parts": "parts"})
    state_copy, state_names = _copy_code(
        ChatState, "state", "new_state", {"active_turn": "new_turn", "status": "status"}
    )
    rebuilder: Callable[
        [ChatState, ActiveTurn, tuple[ResponsePart, ...], SessionStatus], ChatState
    ] = _generate(
        "_with_parts_and_status",
        "state, turn, parts, status",
        [*turn_copy, *state_copy, "    return new_state"],
        {**turn_names, **state_names},
    )
    return rebuilder


_builder: Final = _copy.builder
_evolve_state: Final = _evolver(ChatState)
# The streaming path.
_with_markdown_text: Final = _text_rebuilder(MarkdownResponsePart)
_with_reasoning_text: Final = _text_rebuilder(ReasoningResponsePart)
_with_turn_parts: Final = _parts_rebuilder()
_with_parts_and_status: Final = _parts_status_rebuilder()
_state_with_turn: Final = _replacer(ChatState, "active_turn")
_turn_with_parts: Final = _replacer(ActiveTurn, "response_parts")
# Tool calls: streamed input, the part around a new call, the recomputed status.
_streaming_with_input: Final = _replacer(
    ToolCallStreamingState, "meta", "_partial_input", "invocation_message"
)
_tool_part_with_call: Final = _replacer(ToolCallResponsePart, "tool_call")
_state_with_status: Final = _replacer(ChatState, "status")
# The turn lifecycle: what a turn's start and end change in the state.
_state_started: Final = _replacer(
    ChatState, "active_turn", "status", "modified_at", "steering_message", "queued_messages"
)
_state_ended: Final = _copier(
    ChatState,
    "_state_ended",
    "turns, modified_at, status",
    {"turns": "turns", "active_turn": "None", "modified_at": "modified_at", "status": "status"},
)
# What the tool-call state machine and the turn lifecycle build.
_new_streaming: Final = _builder(ToolCallStreamingState)
_new_pending_confirmation: Final = _builder(ToolCallPendingConfirmationState)
_new_running: Final = _builder(ToolCallRunningState)
_new_auth_required: Final = _builder(ToolCallAuthRequiredState)
_new_pending_result_confirmation: Final = _builder(ToolCallPendingResultConfirmationState)
_new_completed: Final = _builder(ToolCallCompletedState)
_new_cancelled: Final = _builder(ToolCallCancelledState)
_new_tool_part: Final = _builder(ToolCallResponsePart)
# Positional forms of the same, for the states every tool call goes through.
_BASE: Final = ("tool_call_id", "tool_name", "display_name", "intention", "contributor", "meta")
_FINISHED: Final = (
    *_BASE,
    "invocation_message",
    "tool_input",
    "confirmed",
    "selected_option",
    "success",
    "past_tense_message",
    "content",
    "structured_content",
    "error",
)
_make_streaming: Final = _copy.maker(ToolCallStreamingState, *_BASE)
_make_running: Final = _copy.maker(
    ToolCallRunningState, *_BASE, "invocation_message", "tool_input", "confirmed"
)
_make_completed: Final = _copy.maker(ToolCallCompletedState, *_FINISHED)
_make_pending_result_confirmation: Final = _copy.maker(
    ToolCallPendingResultConfirmationState, *_FINISHED
)
_make_tool_part: Final = _copy.maker(ToolCallResponsePart, "tool_call")
_new_active_turn: Final = _builder(ActiveTurn)
_new_turn: Final = _builder(Turn)

# ─── Routing ─────────────────────────────────────────────────────────────────

_CHAT_ACTIONS: Final[frozenset[type]] = frozenset(get_args(ChatAction))


def _is_chat_action(action: StateAction) -> TypeIs[ChatAction]:
    return type(action) in _CHAT_ACTIONS


def chat_reducer(
    state: ChatState,
    action: StateAction,
    *,
    now: Clock | None = None,
    on_unknown: Callable[[UnknownAction], None] | None = None,
) -> ChatState:
    """Apply one action to a chat state and return the new state.

    Pure: ``state`` is never modified, and older states stay valid.  Returns
    ``state`` itself exactly when the result equals it: actions of other
    channels, :class:`~agenthost_protocol.types.UnknownAction` (after calling
    ``on_unknown``) and every action that changes nothing (wrong turn,
    unknown part or tool call, a transition the tool-call state machine does
    not allow, a value set to what it already is, ...).  Never raises on
    well-typed input.  ``now`` supplies ``modifiedAt`` (epoch milliseconds,
    rendered as ``toISOString`` does; the wall clock when ``None``).
    """
    kind = type(action)
    if kind is ChatDeltaAction:  # the hot path, ahead of the routing
        return _stream_markdown(state, action)  # type: ignore[arg-type]
    if kind not in _CHAT_ACTIONS:  # ``_is_chat_action``, without the call
        return state
    # One lookup instead of a ``match`` that tests the classes one by one.
    return _HANDLERS[kind](state, action, now, on_unknown)


_OnUnknown: TypeAlias = Callable[[UnknownAction], None] | None
_Handler: TypeAlias = Callable[[ChatState, Any, Clock | None, _OnUnknown], ChatState]


def _on_reasoning(
    state: ChatState, action: ChatReasoningAction, now: Clock | None, on_unknown: _OnUnknown
) -> ChatState:
    return _stream_reasoning(state, action)


def _on_delta(
    state: ChatState, action: ChatDeltaAction, now: Clock | None, on_unknown: _OnUnknown
) -> ChatState:
    return _stream_markdown(state, action)  # handled in ``chat_reducer``; here for completeness


def _on_tool_call_delta(
    state: ChatState, action: ChatToolCallDeltaAction, now: Clock | None, on_unknown: _OnUnknown
) -> ChatState:
    return _update_tool_calls(state, action, _tool_call_delta)


def _on_response_part(
    state: ChatState, action: ChatResponsePartAction, now: Clock | None, on_unknown: _OnUnknown
) -> ChatState:
    turn = state.active_turn
    if turn is None or turn.id != action.turn_id:
        return state
    # Concatenation, not ``(*parts, part)``: one tuple built instead of a list and a tuple.
    return _with_turn_parts(state, turn, turn.response_parts + (action.part,))  # noqa: RUF005


def _on_tool_call_start(
    state: ChatState, action: ChatToolCallStartAction, now: Clock | None, on_unknown: _OnUnknown
) -> ChatState:
    turn = state.active_turn
    if turn is None or turn.id != action.turn_id:
        return state
    streaming = _make_streaming(
        action.tool_call_id,
        action.tool_name,
        action.display_name,
        action.intention,
        action.contributor,
        action.meta,
    )
    part = _make_tool_part(streaming)
    return _with_turn_parts(state, turn, turn.response_parts + (part,))  # noqa: RUF005


def _on_ready(
    state: ChatState, action: ChatToolCallReadyAction, now: Clock | None, on_unknown: _OnUnknown
) -> ChatState:
    return _transition(state, action, _ready)


def _on_complete(
    state: ChatState, action: ChatToolCallCompleteAction, now: Clock | None, on_unknown: _OnUnknown
) -> ChatState:
    return _transition(state, action, _complete)


def _on_turn_complete(
    state: ChatState, action: ChatTurnCompleteAction, now: Clock | None, on_unknown: _OnUnknown
) -> ChatState:
    return _end_turn(state, action, TurnState.COMPLETE, None, now)


def _on_turn_cancelled(
    state: ChatState, action: ChatTurnCancelledAction, now: Clock | None, on_unknown: _OnUnknown
) -> ChatState:
    return _end_turn(state, action, TurnState.CANCELLED, None, now)


def _on_error(
    state: ChatState, action: ChatErrorAction, now: Clock | None, on_unknown: _OnUnknown
) -> ChatState:
    return _end_turn(state, action, TurnState.ERROR, action.error, now)


def _on_approved(
    state: ChatState, action: ChatToolCallApprovedAction, now: Clock | None, on_unknown: _OnUnknown
) -> ChatState:
    return _transition(state, action, _approved)


def _on_denied(
    state: ChatState, action: ChatToolCallDeniedAction, now: Clock | None, on_unknown: _OnUnknown
) -> ChatState:
    return _transition(state, action, _denied)


def _on_result_confirmed(
    state: ChatState,
    action: ChatToolCallResultConfirmedAction,
    now: Clock | None,
    on_unknown: _OnUnknown,
) -> ChatState:
    return _transition(state, action, _result_confirmed)


def _on_auth_required(
    state: ChatState,
    action: ChatToolCallAuthRequiredAction,
    now: Clock | None,
    on_unknown: _OnUnknown,
) -> ChatState:
    return _transition(state, action, _auth_required)


def _on_auth_resolved(
    state: ChatState,
    action: ChatToolCallAuthResolvedAction,
    now: Clock | None,
    on_unknown: _OnUnknown,
) -> ChatState:
    return _transition(state, action, _auth_resolved)


def _on_content_changed(
    state: ChatState,
    action: ChatToolCallContentChangedAction,
    now: Clock | None,
    on_unknown: _OnUnknown,
) -> ChatState:
    return _update_tool_calls(state, action, _content_changed)


def _on_usage(
    state: ChatState, action: ChatUsageAction, now: Clock | None, on_unknown: _OnUnknown
) -> ChatState:
    turn = state.active_turn
    usage = action.usage
    if turn is None or turn.id != action.turn_id or turn.usage == usage:
        return state
    return _state_with_turn(state, _evolve(turn, usage=usage))


def _on_activity_changed(
    state: ChatState, action: ChatActivityChangedAction, now: Clock | None, on_unknown: _OnUnknown
) -> ChatState:
    activity = action.activity
    if state.activity == activity:
        return state
    return _evolve_state(state, activity=activity)


def _on_working_directory_set(
    state: ChatState,
    action: ChatWorkingDirectorySetAction,
    now: Clock | None,
    on_unknown: _OnUnknown,
) -> ChatState:
    directory = action.directory
    directories = state.working_directories
    if directories is not None and directory in directories:
        return state
    return _evolve_state(state, working_directories=(*(directories or ()), directory))


def _on_working_directory_removed(
    state: ChatState,
    action: ChatWorkingDirectoryRemovedAction,
    now: Clock | None,
    on_unknown: _OnUnknown,
) -> ChatState:
    directory = action.directory
    directories = state.working_directories
    if directories is None or directory not in directories:
        return state
    index = directories.index(directory)
    # An empty tuple stays: ``[]`` means "no access", absent means "inherit".
    remaining = directories[:index] + directories[index + 1 :]
    return _evolve_state(state, working_directories=remaining)


def _on_pending_message_set(
    state: ChatState, action: ChatPendingMessageSetAction, now: Clock | None, on_unknown: _OnUnknown
) -> ChatState:
    entry = PendingMessage(id=action.id, message=action.message)
    return _pending_message_set(state, action.kind, entry)


def _on_pending_message_removed(
    state: ChatState,
    action: ChatPendingMessageRemovedAction,
    now: Clock | None,
    on_unknown: _OnUnknown,
) -> ChatState:
    return _pending_message_removed(state, action.kind, action.id)


def _on_queued_messages_reordered(
    state: ChatState,
    action: ChatQueuedMessagesReorderedAction,
    now: Clock | None,
    on_unknown: _OnUnknown,
) -> ChatState:
    return _queued_messages_reordered(state, action.order)


def _on_draft_changed(
    state: ChatState, action: ChatDraftChangedAction, now: Clock | None, on_unknown: _OnUnknown
) -> ChatState:
    draft = action.draft
    if state.draft == draft:
        return state
    return _evolve_state(state, draft=draft)


def _on_input_requested(
    state: ChatState, action: ChatInputRequestedAction, now: Clock | None, on_unknown: _OnUnknown
) -> ChatState:
    return _input_requested(state, action.request, now)


def _on_input_answer_changed(
    state: ChatState,
    action: ChatInputAnswerChangedAction,
    now: Clock | None,
    on_unknown: _OnUnknown,
) -> ChatState:
    return _input_answer_changed(state, action, now)


def _on_input_completed(
    state: ChatState, action: ChatInputCompletedAction, now: Clock | None, on_unknown: _OnUnknown
) -> ChatState:
    return _input_completed(state, action, now)


def _on_truncated(
    state: ChatState, action: ChatTruncatedAction, now: Clock | None, on_unknown: _OnUnknown
) -> ChatState:
    return _truncated(state, action.turn_id, now)


def _on_turns_loaded(
    state: ChatState, action: ChatTurnsLoadedAction, now: Clock | None, on_unknown: _OnUnknown
) -> ChatState:
    return _turns_loaded(state, action)


def _on_turn_started(
    state: ChatState, action: ChatTurnStartedAction, now: Clock | None, on_unknown: _OnUnknown
) -> ChatState:
    return _turn_started(state, action, now)


def _on_unknown(
    state: ChatState, action: UnknownAction, now: Clock | None, on_unknown: _OnUnknown
) -> ChatState:
    if on_unknown is not None:
        on_unknown(action)
    return state


# Every class of ``ChatAction`` and its handler (checked at import below, and
# by the tests): the dispatch of ``chat_reducer``.  Read-only.
_HANDLERS: Final[Mapping[type, _Handler]] = MappingProxyType(
    {
        ChatDeltaAction: _on_delta,
        ChatReasoningAction: _on_reasoning,
        ChatResponsePartAction: _on_response_part,
        ChatToolCallStartAction: _on_tool_call_start,
        ChatToolCallDeltaAction: _on_tool_call_delta,
        ChatToolCallReadyAction: _on_ready,
        ChatToolCallApprovedAction: _on_approved,
        ChatToolCallDeniedAction: _on_denied,
        ChatToolCallCompleteAction: _on_complete,
        ChatToolCallResultConfirmedAction: _on_result_confirmed,
        ChatToolCallAuthRequiredAction: _on_auth_required,
        ChatToolCallAuthResolvedAction: _on_auth_resolved,
        ChatToolCallContentChangedAction: _on_content_changed,
        ChatTurnStartedAction: _on_turn_started,
        ChatTurnCompleteAction: _on_turn_complete,
        ChatTurnCancelledAction: _on_turn_cancelled,
        ChatErrorAction: _on_error,
        ChatUsageAction: _on_usage,
        ChatActivityChangedAction: _on_activity_changed,
        ChatWorkingDirectorySetAction: _on_working_directory_set,
        ChatWorkingDirectoryRemovedAction: _on_working_directory_removed,
        ChatPendingMessageSetAction: _on_pending_message_set,
        ChatPendingMessageRemovedAction: _on_pending_message_removed,
        ChatQueuedMessagesReorderedAction: _on_queued_messages_reordered,
        ChatDraftChangedAction: _on_draft_changed,
        ChatInputRequestedAction: _on_input_requested,
        ChatInputAnswerChangedAction: _on_input_answer_changed,
        ChatInputCompletedAction: _on_input_completed,
        ChatTruncatedAction: _on_truncated,
        ChatTurnsLoadedAction: _on_turns_loaded,
        UnknownAction: _on_unknown,
    }
)
if frozenset(_HANDLERS) != _CHAT_ACTIONS:  # a model change must come with its handler
    raise TypeError(f"chat actions without a handler: {_CHAT_ACTIONS - frozenset(_HANDLERS)}")


def _handler_of(action: ChatAction) -> _Handler:
    """The handler of ``action``, as a ``match`` that the type checker proves exhaustive
    (``assert_never``): ``_HANDLERS`` is this, by class, for one lookup instead of a
    scan of the cases (``tests/test_perf_reducers.py`` holds the two to each other)."""
    match action:
        case ChatDeltaAction():
            return _on_delta
        case ChatReasoningAction():
            return _on_reasoning
        case ChatResponsePartAction():
            return _on_response_part
        case ChatToolCallStartAction():
            return _on_tool_call_start
        case ChatToolCallDeltaAction():
            return _on_tool_call_delta
        case ChatToolCallReadyAction():
            return _on_ready
        case ChatToolCallApprovedAction():
            return _on_approved
        case ChatToolCallDeniedAction():
            return _on_denied
        case ChatToolCallCompleteAction():
            return _on_complete
        case ChatToolCallResultConfirmedAction():
            return _on_result_confirmed
        case ChatToolCallAuthRequiredAction():
            return _on_auth_required
        case ChatToolCallAuthResolvedAction():
            return _on_auth_resolved
        case ChatToolCallContentChangedAction():
            return _on_content_changed
        case ChatTurnStartedAction():
            return _on_turn_started
        case ChatTurnCompleteAction():
            return _on_turn_complete
        case ChatTurnCancelledAction():
            return _on_turn_cancelled
        case ChatErrorAction():
            return _on_error
        case ChatUsageAction():
            return _on_usage
        case ChatActivityChangedAction():
            return _on_activity_changed
        case ChatWorkingDirectorySetAction():
            return _on_working_directory_set
        case ChatWorkingDirectoryRemovedAction():
            return _on_working_directory_removed
        case ChatPendingMessageSetAction():
            return _on_pending_message_set
        case ChatPendingMessageRemovedAction():
            return _on_pending_message_removed
        case ChatQueuedMessagesReorderedAction():
            return _on_queued_messages_reordered
        case ChatDraftChangedAction():
            return _on_draft_changed
        case ChatInputRequestedAction():
            return _on_input_requested
        case ChatInputAnswerChangedAction():
            return _on_input_answer_changed
        case ChatInputCompletedAction():
            return _on_input_completed
        case ChatTruncatedAction():
            return _on_truncated
        case ChatTurnsLoadedAction():
            return _on_turns_loaded
        case UnknownAction():
            return _on_unknown
        case _:
            assert_never(action)


def _timestamp(now: Clock | None) -> str:
    """``modifiedAt`` for now: ``toISOString`` form, e.g. ``1970-01-01T00:00:09.999Z``."""
    return iso_timestamp(now_ms(now) if now is None else now())


def _settled(state: ChatState, new: ChatState) -> ChatState:
    """``state`` itself when ``new`` equals it, else ``new``.

    For the actions that rebuild the state wholesale (and stamp the time), so
    a repeat that changes nothing still comes back ``is``-identical.  The
    comparison is cheap: unchanged members are shared, and tuple and attrs
    equality test identity first.
    """
    if new is not state and new == state:
        return state
    return new


def _or(value: _V | None, fallback: _V | None) -> _V | None:
    """JavaScript's ``value ?? fallback`` (``None`` stands for ``undefined``)."""
    return fallback if value is None else value


# ─── Response parts ──────────────────────────────────────────────────────────


def _raw_get(raw: object, key: str) -> object:
    """``raw[key]`` of an unknown variant's wire object (``None`` when absent)."""
    return raw.get(key) if isinstance(raw, Mapping) else None


def _append_text(
    state: ChatState,
    action: ChatDeltaAction | ChatReasoningAction,
    part_class: type[MarkdownResponsePart] | type[ReasoningResponsePart],
    rebuild: _TextRebuilder,
) -> ChatState:
    """``chat/delta`` and ``chat/reasoning``: append to the first part with that id.

    No-op when the turn is not the active one, no part has that id, the
    first part with that id is not of ``part_class`` (markdown for a delta,
    reasoning for reasoning), or the text is empty.  The usual case of a
    stream, a hint that holds, is written out in the streamers
    (``_STREAM_TEMPLATE``), which come here for everything else.

    Markdown and reasoning parts match on ``id``, tool-call parts on
    ``toolCall.toolCallId`` (an unknown tool-call status on its raw
    ``toolCallId``), parts of an unknown kind on a raw ``id``; content-ref,
    system-notification and input-request parts have no id and never match.

    The hint: when the part found is the turn's last, its text's line keeps
    ``(parts before it, id)``.  It states that none of those parts has the
    id, which stays true since they are immutable; a later delta whose turn
    has exactly those parts before the same part id skips the scan.  Only
    the newest part of a turn keeps a hint, and ``_end_turn`` drops it.
    """
    turn = state.active_turn
    text = action.content
    if turn is None or turn.id != action.turn_id or not text:
        return state
    part_id = action.part_id
    parts = turn.response_parts
    if parts:
        # The hint holds, but the fast path did not apply (an older state
        # extended, a thread at the line): no scan, and no new hint (a branch
        # holds only what it appends).
        part = parts[-1]
        if type(part) is part_class and part.id == part_id:
            buffer = part._content
            line = buffer._line
            hint = None if line is None else line.hint
            if hint is not None and hint[1] == part_id and hint[0] == parts[:-1]:
                return rebuild(state, turn, hint[0], (), part, buffer.appended(text))
    index = -1
    for part in parts:
        index += 1
        kind = type(part)
        if kind is ToolCallResponsePart:
            tool_call = part.tool_call  # type: ignore[union-attr]
            if type(tool_call) is not UnknownToolCallState:
                if tool_call.tool_call_id == part_id:  # type: ignore[union-attr]
                    return state  # not a text part
            elif _raw_get(tool_call.raw, "toolCallId") == part_id:
                return state
        elif kind is MarkdownResponsePart or kind is ReasoningResponsePart:
            if part.id == part_id:  # type: ignore[union-attr]
                break
        elif kind is UnknownResponsePart and _raw_get(part.raw, "id") == part_id:  # type: ignore[union-attr]
            return state
    else:
        return state
    if kind is not part_class:
        return state
    buffer = part._content.appended(text)  # type: ignore[union-attr]
    before = parts[:index]
    if index < len(parts) - 1:
        return rebuild(state, turn, before, parts[index + 1 :], part, buffer)
    # The hint for the next delta.  Only the newest part of a turn keeps one,
    # so that the hints hold at most one tuple of parts per turn: the parts
    # before drop theirs.
    line = buffer._line
    if line is not None:  # (always: ``appended`` made it)
        # The part's own id: the fast path compares it with ``is`` first.
        line.hint = (before, part.id)  # type: ignore[union-attr]
    for earlier in before:
        if type(earlier) is MarkdownResponsePart or type(earlier) is ReasoningResponsePart:
            line = earlier._content._line
            if line is not None:
                line.hint = None
    return rebuild(state, turn, before, (), part, buffer)


_stream_markdown: Final = _text_streamer(MarkdownResponsePart, _with_markdown_text)
_stream_reasoning: Final = _text_streamer(ReasoningResponsePart, _with_reasoning_text)


# ─── Tool calls ──────────────────────────────────────────────────────────────

_ToolCallAction = TypeVar(
    "_ToolCallAction",
    ChatToolCallDeltaAction,
    ChatToolCallReadyAction,
    ChatToolCallApprovedAction,
    ChatToolCallDeniedAction,
    ChatToolCallCompleteAction,
    ChatToolCallResultConfirmedAction,
    ChatToolCallContentChangedAction,
    ChatToolCallAuthRequiredAction,
    ChatToolCallAuthResolvedAction,
)


def _update_tool_calls(
    state: ChatState,
    action: _ToolCallAction,
    update: Callable[[ToolCallState, _ToolCallAction], ToolCallState],
) -> ChatState:
    """Apply ``update`` to every tool call of the active turn with the action's id.

    ``update`` returns its argument itself when the transition is not allowed
    or changes nothing; when no tool call changes, ``state`` itself comes back.
    """
    turn = state.active_turn
    if turn is None or turn.id != action.turn_id:
        return state
    tool_call_id = action.tool_call_id
    parts = turn.response_parts
    new_parts: list[ResponsePart] | None = None
    last = len(parts) - 1
    for index, part in enumerate(parts):
        if type(part) is not ToolCallResponsePart:
            continue
        tool_call = part.tool_call
        # Every transition starts from a known status, so an unknown one never changes.
        if type(tool_call) is UnknownToolCallState or tool_call.tool_call_id != tool_call_id:  # type: ignore[union-attr]
            continue
        updated = update(tool_call, action)
        if updated is tool_call:
            continue
        new_part = _tool_part_with_call(part, updated)
        if new_parts is None:
            if index == last:  # the usual case: the newest part, and the only one changed
                return _with_turn_parts(state, turn, parts[:last] + (new_part,))  # noqa: RUF005
            new_parts = list(parts)
        new_parts[index] = new_part
    if new_parts is None:
        return state
    return _with_turn_parts(state, turn, tuple(new_parts))


def _transition(
    state: ChatState,
    action: _ToolCallAction,
    update: Callable[[ToolCallState, _ToolCallAction], ToolCallState],
) -> ChatState:
    """A tool-call transition that recomputes the status, whether or not a call matched.

    The reference recomputes unconditionally, so a stale activity (``ERROR``
    after ``chat/error``, or a status a snapshot got wrong) is corrected by
    any of these actions, even one that changes no tool call.  The result is
    that of ``_update_tool_calls`` followed by ``chat_status``, in one scan of
    the parts and one copy of the state.
    """
    turn = state.active_turn
    if turn is None:
        activity = _IDLE
        new_parts: list[ResponsePart] | None = None
    else:
        activity = _IN_PROGRESS
        new_parts = None
        # ``tool_call_id`` stays None on another turn: no call matches then.
        tool_call_id = action.tool_call_id if turn.id == action.turn_id else None
        parts = turn.response_parts
        for index, part in enumerate(parts):
            kind = type(part)
            if kind is ToolCallResponsePart:
                tool_call = part.tool_call  # type: ignore[union-attr]
                # Every transition starts from a known status, so an unknown one never changes.
                if (
                    type(tool_call) is not UnknownToolCallState
                    and tool_call.tool_call_id == tool_call_id  # type: ignore[union-attr]
                ):
                    updated = update(tool_call, action)
                    if updated is not tool_call:
                        if new_parts is None:
                            new_parts = list(parts)
                        new_parts[index] = _tool_part_with_call(part, updated)
                        tool_call = updated
                # The status rule of ``chat_status``, and its shortcut for the exact classes.
                call_kind = type(tool_call)
                if call_kind in BLOCKING_TYPES or (
                    call_kind not in NOT_BLOCKING_TYPES and isinstance(tool_call, _BLOCKING)
                ):
                    activity = _INPUT_NEEDED
            elif kind is InputRequestResponsePart and part.response is None:  # type: ignore[union-attr]
                activity = _INPUT_NEEDED
    status = state.status
    value = (int(status) & _FLAG_MASK) | activity
    if value != status or not isinstance(status, SessionStatus):
        status = status_of(value)
    if new_parts is None:
        return state if status is state.status else _state_with_status(state, status)
    assert turn is not None
    return _with_parts_and_status(state, turn, tuple(new_parts), status)


_BLOCKING: Final = (
    ToolCallPendingConfirmationState,
    ToolCallPendingResultConfirmationState,
    ToolCallAuthRequiredState,
)
_FLAG_MASK: Final = ~ACTIVITY_MASK
_IDLE: Final = int(SessionStatus.IDLE)
_IN_PROGRESS: Final = int(SessionStatus.IN_PROGRESS)
_INPUT_NEEDED: Final = int(SessionStatus.INPUT_NEEDED)
_STARTED_MASK: Final = _FLAG_MASK & ~int(SessionStatus.IS_READ)


# The statuses a transition can start from, and a turn end cancels.
_OpenToolCall: TypeAlias = (
    ToolCallStreamingState
    | ToolCallPendingConfirmationState
    | ToolCallRunningState
    | ToolCallAuthRequiredState
    | ToolCallPendingResultConfirmationState
)


class _ToolCallBase(TypedDict):
    """The fields a call keeps through every transition: the reference's ``tcBase``."""

    tool_call_id: str
    tool_name: str
    display_name: str
    intention: str | None
    contributor: ToolCallContributor | None
    meta: Mapping[str, Any] | None


class _PostConfirmation(TypedDict):
    """What a call carries from its confirmation on: running, auth-required and finished."""

    invocation_message: StringOrMarkdown
    tool_input: ToolInput | None
    confirmed: ToolCallConfirmationReason | str
    selected_option: ConfirmationOption | None


def _tc_base(tc: _OpenToolCall, meta: Mapping[str, Any] | None = None) -> _ToolCallBase:
    """The base fields of ``tc``, an action's ``_meta`` over its own (``tcBaseWithMeta``)."""
    # A literal, not ``_ToolCallBase(...)``: a class call costs more, for the same dict.
    return {
        "tool_call_id": tc.tool_call_id,
        "tool_name": tc.tool_name,
        "display_name": tc.display_name,
        "intention": tc.intention,
        "contributor": tc.contributor,
        "meta": _or(meta, tc.meta),
    }


def _post_confirmation(
    tc: ToolCallRunningState | ToolCallAuthRequiredState | ToolCallPendingResultConfirmationState,
) -> _PostConfirmation:
    return {
        "invocation_message": tc.invocation_message,
        "tool_input": tc.tool_input,
        "confirmed": tc.confirmed,
        "selected_option": tc.selected_option,
    }


def _tool_call_delta(tc: ToolCallState, action: ChatToolCallDeltaAction) -> ToolCallState:
    """``chat/toolCallDelta``: streaming only; append the input if given, maybe message and meta."""
    if type(tc) is not ToolCallStreamingState:
        return tc
    buffer = tc._partial_input
    content = action.content
    # Appending "" changes nothing, but it does start an (empty) input where
    # there was none, as ``(partialInput ?? '') + content`` does.
    if content is not None and (content or buffer is None):
        buffer = TextBuffer.of(content) if buffer is None else buffer.appended(content)
    meta = tc.meta if action.meta is None else action.meta
    invocation_message = (
        tc.invocation_message if action.invocation_message is None else action.invocation_message
    )
    if (
        buffer is tc._partial_input
        and (meta is tc.meta or json_equal(meta, tc.meta))
        and invocation_message == tc.invocation_message
    ):
        return tc
    return _streaming_with_input(tc, meta, buffer, invocation_message)


def _refined_contributor(
    current: ToolCallContributor | None, proposed: ToolCallContributor | None
) -> ToolCallContributor | None:
    """The contributor after ``chat/toolCallReady``: refined, but client ownership is fixed.

    A client contributor is set at ``chat/toolCallStart`` and names the one
    client that may execute and complete the call: ``toolCallReady`` may not
    hand the call to another client, take it away from the client, or give a
    host-side call to a client.
    """
    if proposed is None:
        return current
    if isinstance(current, ToolCallClientContributor):
        same_client = (
            isinstance(proposed, ToolCallClientContributor)
            and proposed.client_id == current.client_id
        )
        return proposed if same_client else current
    if isinstance(proposed, ToolCallClientContributor):
        return current
    return proposed


def _ready(tc: ToolCallState, action: ChatToolCallReadyAction) -> ToolCallState:
    """``chat/toolCallReady``: from streaming, running (re-confirmation) or pending-confirmation."""
    tool_input = action.tool_input
    if isinstance(tc, ToolCallStreamingState):
        pass  # nothing to fall back on: the input was still streaming
    elif isinstance(tc, (ToolCallRunningState, ToolCallPendingConfirmationState)):
        if tool_input is None:
            tool_input = tc.tool_input
    else:
        return tc
    # The one transition that may refine the intention and the contributor.
    # (The base fields are spelled out rather than taken from ``_tc_base``: a
    # dict and its unpacking cost more than the call itself, on the path of
    # every tool call.)
    intention = tc.intention if action.intention is None else action.intention
    contributor = _refined_contributor(tc.contributor, action.contributor)
    meta = tc.meta if action.meta is None else action.meta
    new: ToolCallState
    if action.confirmed:
        new = _make_running(
            tc.tool_call_id,
            tc.tool_name,
            tc.display_name,
            intention,
            contributor,
            meta,
            action.invocation_message,
            tool_input,
            action.confirmed,
        )
    else:
        # A call that was already pending keeps what this action does not restate.
        previous = tc if isinstance(tc, ToolCallPendingConfirmationState) else _NOTHING_PENDING
        new = _new_pending_confirmation(
            tool_call_id=tc.tool_call_id,
            tool_name=tc.tool_name,
            display_name=tc.display_name,
            intention=intention,
            contributor=contributor,
            meta=meta,
            invocation_message=action.invocation_message,
            tool_input=tool_input,
            confirmation_title=(
                previous.confirmation_title
                if action.confirmation_title is None
                else action.confirmation_title
            ),
            risk_assessment=(
                previous.risk_assessment
                if action.risk_assessment is None
                else action.risk_assessment
            ),
            edits=previous.edits if action.edits is None else action.edits,
            editable=previous.editable if action.editable is None else action.editable,
            options=previous.options if action.options is None else action.options,
        )
    # Only a call of the same status can be equal (and a test of the class is cheaper).
    return tc if type(new) is type(tc) and new == tc else new


# What a call that was not pending has to fall back on: nothing.
_NOTHING_PENDING: Final = ToolCallPendingConfirmationState(
    tool_call_id="", tool_name="", display_name="", invocation_message=""
)


def _selected_option(
    options: tuple[ConfirmationOption, ...] | None, option_id: str | None
) -> ConfirmationOption | None:
    if not option_id or options is None:
        return None
    return next((option for option in options if option.id == option_id), None)


def _approved(tc: ToolCallState, action: ChatToolCallApprovedAction) -> ToolCallState:
    """``chat/toolCallConfirmed`` (approved): pending-confirmation → running."""
    if not isinstance(tc, ToolCallPendingConfirmationState):
        return tc
    tool_input = tc.tool_input
    # A ContentRef input is edited by rewriting the resource it points to.
    if action.edited_tool_input is not None and isinstance(tool_input, str):
        tool_input = action.edited_tool_input
    return _new_running(
        **_tc_base(tc, action.meta),
        invocation_message=tc.invocation_message,
        tool_input=tool_input,
        confirmed=action.confirmed,
        selected_option=_selected_option(tc.options, action.selected_option_id),
    )


def _denied(tc: ToolCallState, action: ChatToolCallDeniedAction) -> ToolCallState:
    """``chat/toolCallConfirmed`` (denied): pending-confirmation → cancelled."""
    if not isinstance(tc, ToolCallPendingConfirmationState):
        return tc
    return _new_cancelled(
        **_tc_base(tc, action.meta),
        invocation_message=tc.invocation_message,
        tool_input=tc.tool_input,
        reason=action.reason,
        reason_message=action.reason_message,
        user_suggestion=action.user_suggestion,
        selected_option=_selected_option(tc.options, action.selected_option_id),
    )


def _complete(tc: ToolCallState, action: ChatToolCallCompleteAction) -> ToolCallState:
    """``chat/toolCallComplete``: from running, pending-confirmation or (failing) auth-required."""
    result = action.result
    content = result.content
    confirmed: ToolCallConfirmationReason | str
    if isinstance(tc, ToolCallRunningState):
        confirmed, selected_option = tc.confirmed, tc.selected_option
    elif isinstance(tc, ToolCallAuthRequiredState):
        # Execution never resumed after the auth challenge, so only a failure
        # (the client giving up) can end it; the content produced before the
        # pause is all the tool ever produced.
        if result.success:
            return tc
        confirmed, selected_option = tc.confirmed, tc.selected_option
        if content is None:
            content = tc.content
    elif isinstance(tc, ToolCallPendingConfirmationState):
        confirmed, selected_option = ToolCallConfirmationReason.NOT_NEEDED, None
    else:
        return tc
    # An abandoned auth challenge leaves no result to review.  (The fields are
    # spelled out rather than unpacked from ``_tc_base`` dicts: see ``_ready``.)
    finished = (
        _make_pending_result_confirmation
        if action.requires_result_confirmation and not isinstance(tc, ToolCallAuthRequiredState)
        else _make_completed
    )
    return finished(  # the order of ``_FINISHED``
        tc.tool_call_id,
        tc.tool_name,
        tc.display_name,
        tc.intention,
        tc.contributor,
        tc.meta if action.meta is None else action.meta,
        tc.invocation_message,
        tc.tool_input,
        confirmed,
        selected_option,
        result.success,
        result.past_tense_message,
        content,
        result.structured_content,
        result.error,
    )


def _result_confirmed(
    tc: ToolCallState, action: ChatToolCallResultConfirmedAction
) -> ToolCallState:
    """``chat/toolCallResultConfirmed``: pending-result-confirmation → completed or cancelled."""
    if not isinstance(tc, ToolCallPendingResultConfirmationState):
        return tc
    base = _tc_base(tc, action.meta)
    if action.approved:
        return _new_completed(
            **base,
            **_post_confirmation(tc),
            success=tc.success,
            past_tense_message=tc.past_tense_message,
            content=tc.content,
            structured_content=tc.structured_content,
            error=tc.error,
        )
    return _new_cancelled(
        **base,
        invocation_message=tc.invocation_message,
        tool_input=tc.tool_input,
        reason=ToolCallCancellationReason.RESULT_DENIED,
        selected_option=tc.selected_option,
    )


def _content_changed(tc: ToolCallState, action: ChatToolCallContentChangedAction) -> ToolCallState:
    """``chat/toolCallContentChanged``: running only; replace ``content``, maybe ``_meta``."""
    if not isinstance(tc, ToolCallRunningState):
        return tc
    meta = _or(action.meta, tc.meta)
    if action.content == tc.content and json_equal(meta, tc.meta):
        return tc
    return _evolve(tc, content=action.content, meta=meta)


def _auth_required(tc: ToolCallState, action: ChatToolCallAuthRequiredAction) -> ToolCallState:
    """``chat/toolCallAuthRequired``: running → auth-required, for an MCP server's call only."""
    if not isinstance(tc, ToolCallRunningState):
        return tc
    contributor = tc.contributor
    if not isinstance(contributor, ToolCallMcpContributor):
        return tc
    # Not ``_tc_base``: its ``contributor`` is typed for any status, and this
    # one requires an MCP server's, which only the check above establishes.
    return _new_auth_required(
        tool_call_id=tc.tool_call_id,
        tool_name=tc.tool_name,
        display_name=tc.display_name,
        intention=tc.intention,
        contributor=contributor,
        meta=_or(action.meta, tc.meta),
        **_post_confirmation(tc),
        content=tc.content,
        auth=action.auth,
    )


def _auth_resolved(tc: ToolCallState, action: ChatToolCallAuthResolvedAction) -> ToolCallState:
    """``chat/toolCallAuthResolved``: auth-required → running; the requirement is dropped."""
    if not isinstance(tc, ToolCallAuthRequiredState):
        return tc
    return _new_running(
        **_tc_base(tc, action.meta), **_post_confirmation(tc), content=tc.content
    )


def _force_cancel(part: ResponsePart) -> ResponsePart:
    """The part as a finished turn keeps it: unfinished tool calls become ``cancelled``."""
    if type(part) is not ToolCallResponsePart:
        return part
    tc = part.tool_call
    if isinstance(tc, (ToolCallCompletedState, ToolCallCancelledState)):
        return part
    if isinstance(tc, UnknownToolCallState):
        return _new_tool_part(tool_call=_cancelled_from_unknown(tc))
    if isinstance(tc, ToolCallStreamingState):
        invocation_message = "" if tc.invocation_message is None else tc.invocation_message
        tool_input = None
    else:
        invocation_message = tc.invocation_message
        tool_input = tc.tool_input
    cancelled = _new_cancelled(
        **_tc_base(tc),
        invocation_message=invocation_message,
        tool_input=tool_input,
        reason=ToolCallCancellationReason.SKIPPED,
    )
    return _new_tool_part(tool_call=cancelled)


# The fields of an unknown status that a cancelled call keeps (wire names).
_KEPT_ON_CANCEL: Final = (
    "toolCallId",
    "toolName",
    "displayName",
    "intention",
    "contributor",
    "_meta",
    "invocationMessage",
    "toolInput",
)


# What a cancelled call must have, and what the reference may leave out.
_REQUIRED_ON_CANCEL: Final = ("toolCallId", "toolName", "displayName", "invocationMessage")


def _cancelled_from_unknown(tc: UnknownToolCallState) -> ToolCallState:
    """A call in a status from a newer peer, cancelled as the reference cancels it.

    The reference cancels every status other than completed and cancelled,
    keeping the base fields, the invocation message and the tool input.  When
    the raw call lacks a field a cancelled call requires, the reference's
    result is ill-formed (no peer could decode it); the missing fields are
    then the empty string, so the result always decodes.
    """
    from .. import wire  # noqa: PLC0415  (only this rare path needs the codec)

    raw = tc.raw
    cancelled = {"status": "cancelled"}
    cancelled.update((key, raw[key]) for key in _KEPT_ON_CANCEL if raw.get(key) is not None)
    cancelled["reason"] = "skipped"
    try:
        known: ToolCallCancelledState = wire.structure(cancelled, ToolCallCancelledState)
    except ProtocolError:
        pass
    else:
        return known
    # The reference's result would lack a field a cancelled call requires (its
    # JSON omits the undefined), and a status every peer knows with a field
    # missing fails any decoder, a whole snapshot with it.  Where the reference
    # defines nothing, the empty string a streaming call cancels with stands in.
    for key in _REQUIRED_ON_CANCEL:
        if not isinstance(cancelled.get(key), str):
            cancelled[key] = ""
    try:
        return wire.structure(cancelled, ToolCallCancelledState)
    except ProtocolError:
        # a kept field of the wrong shape (a toolInput that is a number ...): the
        # call keeps only what a cancelled call must have
        bare = {key: cancelled[key] for key in ("status", "reason", *_REQUIRED_ON_CANCEL)}
        return wire.structure(bare, ToolCallCancelledState)


# ─── Turn lifecycle ──────────────────────────────────────────────────────────


def _turn_started(state: ChatState, action: ChatTurnStartedAction, now: Clock | None) -> ChatState:
    """``chat/turnStarted``: a fresh active turn (replacing any), IS_READ cleared."""
    turn = _new_active_turn(
        id=action.turn_id, started_at=action.started_at, message=action.message, response_parts=()
    )
    # ``without_flag(chat_status(status, turn), IS_READ)`` for a turn without parts.
    status = state.status
    value = (int(status) & _STARTED_MASK) | _IN_PROGRESS
    if value != status or not isinstance(status, SessionStatus):
        status = status_of(value)
    steering = state.steering_message
    queued = state.queued_messages
    consumed = action.queued_message_id
    if consumed:
        if steering is not None and steering.id == consumed:
            steering = None
        if queued is not None:
            kept = tuple(message for message in queued if message.id != consumed)
            queued = (queued if len(kept) == len(queued) else kept) or None
    new = _state_started(state, turn, status, _timestamp(now), steering, queued)
    if state.active_turn is None:  # the usual case: ``new`` has a turn, so it differs
        return new
    return _settled(state, new)


def _end_turn(
    state: ChatState,
    action: ChatTurnCompleteAction | ChatTurnCancelledAction | ChatErrorAction,
    end: TurnState,
    error: ErrorInfo | None,
    now: Clock | None,
) -> ChatState:
    """``chat/turnComplete`` / ``turnCancelled`` / ``error``: archive the active turn."""
    turn = state.active_turn
    if turn is None or turn.id != action.turn_id:
        return state
    parts: list[ResponsePart] = []
    for part in turn.response_parts:
        kind = type(part)
        if kind is ToolCallResponsePart:
            part = _force_cancel(part)  # noqa: PLW2901
        elif kind is MarkdownResponsePart or kind is ReasoningResponsePart:
            buffer = part._content  # type: ignore[union-attr]
            line = buffer._line
            if line is not None:
                # The turn is over: the hint for the next delta goes (see
                # ``_append_text``), and the finished turn keeps its text as
                # one string, without the line it was streamed into (the
                # deltas not joined yet, the lists, the line itself: often
                # more than the text).
                line.hint = None
                buffer.settle()
        parts.append(part)
    finished = _new_turn(
        id=turn.id,
        started_at=turn.started_at,
        # The duration is the producer's; a negative one would only confuse a display.
        duration=max(0, action.duration),
        message=turn.message,
        response_parts=tuple(parts),
        usage=turn.usage,
        state=end,
        error=error,
    )
    status = chat_status(state.status, None, error=end is TurnState.ERROR)
    return _state_ended(state, (*state.turns, finished), _timestamp(now), status)


def _truncated(state: ChatState, turn_id: str | None, now: Clock | None) -> ChatState:
    """``chat/truncated``: keep the turns up to and including ``turn_id`` (none without it)."""
    cursor = state.turns_next_cursor
    if turn_id is None:
        turns: tuple[Turn, ...] = ()
        cursor = None  # nothing older is left to page in
    else:
        index = next((i for i, turn in enumerate(state.turns) if turn.id == turn_id), -1)
        if index < 0:
            return state
        turns = state.turns[: index + 1]
    new = _evolve_state(
        state,
        turns=turns,
        turns_next_cursor=cursor,
        active_turn=None,
        modified_at=_timestamp(now),
        status=chat_status(state.status, None),
    )
    return _settled(state, new)


def _turns_loaded(state: ChatState, action: ChatTurnsLoadedAction) -> ChatState:
    """``chat/turnsLoaded``: prepend the older turns not already present; set the cursor."""
    present = {turn.id for turn in state.turns}
    older = tuple(turn for turn in action.turns if turn.id not in present)
    cursor = action.turns_next_cursor
    if not older and cursor == state.turns_next_cursor:
        return state
    turns = older + state.turns if older else state.turns
    return _evolve_state(state, turns=turns, turns_next_cursor=cursor)


# ─── Pending messages ────────────────────────────────────────────────────────


def _pending_message_set(
    state: ChatState, kind: PendingMessageKind | str, entry: PendingMessage
) -> ChatState:
    """``chat/pendingMessageSet``: replace the steering message, or upsert a queued one."""
    if kind == PendingMessageKind.STEERING:
        if state.steering_message == entry:
            return state
        return _evolve_state(state, steering_message=entry)
    queued = state.queued_messages or ()
    for index, message in enumerate(queued):
        if message.id == entry.id:
            if message == entry:
                return state
            updated = (*queued[:index], entry, *queued[index + 1 :])
            return _evolve_state(state, queued_messages=updated)
    return _evolve_state(state, queued_messages=(*queued, entry))


def _pending_message_removed(
    state: ChatState, kind: PendingMessageKind | str, message_id: str
) -> ChatState:
    """``chat/pendingMessageRemoved``: drop the matching pending message, if any."""
    if kind == PendingMessageKind.STEERING:
        steering = state.steering_message
        if steering is None or steering.id != message_id:
            return state
        return _evolve_state(state, steering_message=None)
    queued = state.queued_messages
    if queued is None:
        return state
    kept = tuple(message for message in queued if message.id != message_id)
    if len(kept) == len(queued):
        return state
    return _evolve_state(state, queued_messages=kept or None)


def _queued_messages_reordered(state: ChatState, order: tuple[str, ...]) -> ChatState:
    """``chat/queuedMessagesReordered``: listed ids first, then the rest in their old order.

    Unknown and repeated ids are ignored; no-op when there is no queue or the
    order does not change.
    """
    queued = state.queued_messages
    if queued is None:
        return state
    by_id = {message.id: message for message in queued}  # the last of a repeated id wins
    placed: set[str] = set()
    reordered: list[PendingMessage] = []
    for message_id in order:
        if message_id in by_id and message_id not in placed:
            placed.add(message_id)
            reordered.append(by_id[message_id])
    reordered.extend(message for message in queued if message.id not in placed)
    if len(reordered) == len(queued) and all(
        new is old for new, old in zip(reordered, queued, strict=True)
    ):
        return state
    return _evolve_state(state, queued_messages=tuple(reordered))


# ─── Input requests ──────────────────────────────────────────────────────────


def _open_input_request(parts: tuple[ResponsePart, ...], request_id: str) -> int:
    """The index of the first unresolved ``inputRequest`` part for ``request_id``, or -1."""
    for index, part in enumerate(parts):
        if (
            type(part) is InputRequestResponsePart
            and part.response is None
            and part.request.id == request_id
        ):
            return index
    return -1


def _open_request_part(
    turn: ActiveTurn | None, request_id: str
) -> tuple[ActiveTurn, int, InputRequestResponsePart] | None:
    """``turn``, the index and the part of the unresolved request ``request_id``; else None."""
    if turn is None:
        return None
    index = _open_input_request(turn.response_parts, request_id)
    if index < 0:
        return None
    part = turn.response_parts[index]
    assert type(part) is InputRequestResponsePart
    return turn, index, part


def _with_part(turn: ActiveTurn, index: int, part: ResponsePart) -> ActiveTurn:
    parts = turn.response_parts
    return _turn_with_parts(turn, (*parts[:index], part, *parts[index + 1 :]))


def _input_requested(state: ChatState, request: ChatInputRequest, now: Clock | None) -> ChatState:
    """``chat/inputRequested``: upsert an ``inputRequest`` part into the active turn."""
    turn = state.active_turn
    if turn is None:
        return state
    index = _open_input_request(turn.response_parts, request.id)
    if index < 0:
        new_turn = _turn_with_parts(
            turn, (*turn.response_parts, InputRequestResponsePart(request=request))
        )
    else:
        old = turn.response_parts[index]
        assert type(old) is InputRequestResponsePart
        # Drafts the clients already synced survive a re-sent request.
        if request.answers is None and old.request.answers is not None:
            request = _evolve(request, answers=old.request.answers)
        new_turn = _with_part(turn, index, InputRequestResponsePart(request=request))
    status = without_flag(chat_status(state.status, new_turn), SessionStatus.IS_READ)
    new = _evolve_state(state, active_turn=new_turn, status=status, modified_at=_timestamp(now))
    return _settled(state, new)


def _input_answer_changed(
    state: ChatState, action: ChatInputAnswerChangedAction, now: Clock | None
) -> ChatState:
    """``chat/inputAnswerChanged``: set (or, without ``answer``, delete) one draft answer."""
    found = _open_request_part(state.active_turn, action.request_id)
    if found is None:
        return state
    turn, index, part = found
    answers = dict(part.request.answers) if part.request.answers else {}
    if action.answer is None:
        answers.pop(action.question_id, None)
    else:
        answers[action.question_id] = action.answer
    request = _evolve(part.request, answers=answers or None)
    new_turn = _with_part(turn, index, _evolve(part, request=request))
    new = _evolve_state(state, active_turn=new_turn, modified_at=_timestamp(now))
    return _settled(state, new)


def _input_completed(
    state: ChatState, action: ChatInputCompletedAction, now: Clock | None
) -> ChatState:
    """``chat/inputCompleted``: resolve the part in place, final answers over the drafts."""
    found = _open_request_part(state.active_turn, action.request_id)
    if found is None:
        return state
    turn, index, part = found
    answers = {**(part.request.answers or {}), **(action.answers or {})}
    request = _evolve(part.request, answers=answers or None)
    new_turn = _with_part(
        turn, index, InputRequestResponsePart(request=request, response=action.response)
    )
    return _evolve_state(
        state,
        active_turn=new_turn,
        status=chat_status(state.status, new_turn),
        modified_at=_timestamp(now),
    )


# ─── The reducer, fused ──────────────────────────────────────────────────────


def _fused(reference: Callable[..., ChatState]) -> Callable[..., ChatState]:
    """``chat_reducer`` with the usual case of ``chat/delta`` written into it.

    The same routing as the ``def`` above (which documents and types it), one
    call less on the hot path: a delta costs about a microsecond, of which a
    call is a tenth.
    """
    code, namespace = _stream_code(MarkdownResponsePart, _with_markdown_text, "        ")
    body = [
        "    kind = type(action)",
        "    if kind is _ChatDeltaAction:",
        *code.rstrip("\n").split("\n"),
        "    if kind not in _CHAT_ACTIONS:",
        "        return state",
        "    return _HANDLERS[kind](state, action, now, on_unknown)",
    ]
    namespace.update(
        __name__=__name__,
        _ChatDeltaAction=ChatDeltaAction,
        _CHAT_ACTIONS=_CHAT_ACTIONS,
        _HANDLERS=_HANDLERS,
    )
    fused: Callable[..., ChatState] = _generate(
        "chat_reducer", "state, action, *, now=None, on_unknown=None", body, namespace
    )
    fused.__doc__ = reference.__doc__
    fused.__qualname__ = reference.__qualname__
    fused.__annotations__ = dict(reference.__annotations__)
    fused.__wrapped__ = reference  # type: ignore[attr-defined]
    return fused


if not TYPE_CHECKING:
    chat_reducer = _fused(chat_reducer)
