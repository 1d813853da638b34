"""The reducer of a chat channel ``ahp-chat:/<id>`` (``ChatState``).

Spec: the 22 ``chat/*`` action types (23 classes: ``chat/toolCallConfirmed``
is approved or denied), all introduced in 0.4.0.  They cover the turn
lifecycle (start, streamed text and reasoning, response parts, usage, the
three ways a turn ends), the six-state tool-call machine, pending (steering
and queued) messages, input requests and truncation.

Rules worth knowing (inventory §2, §2.3):

* Every turn-scoped action is a no-op unless ``turnId`` names the active turn.
* A turn ends (``chat/turnComplete``, ``chat/turnCancelled``, ``chat/error``)
  by forcing every unfinished tool call to ``cancelled`` (reason ``skipped``),
  appending a ``Turn``, clearing the active turn and the input requests.
* ``status`` keeps its flag bits (``IS_READ``, ``IS_ARCHIVED``, unknown bits)
  and gets its activity bits recomputed (:mod:`._status`) after every action
  that can change them; ``chat/turnStarted`` and ``chat/inputRequested`` also
  clear ``IS_READ``.
* ``modifiedAt`` (an ISO-8601 string from the clock) is touched by turn start
  and end, input requests and truncation; never by streaming or tool calls.

Every action that changes nothing returns ``state`` itself, so embedders can
compare with ``is``.

Streaming is the hot path (``docs/performance.md``): ``chat/delta`` is
tested before any routing; the text is appended to the part's ``TextBuffer``
(amortised O(len(delta)), older states keep their text); the part is found
through a memo of the previous append instead of a scan; and the part, the
active turn and the state are rebuilt by generated copy functions
(:func:`_replacer`) several times cheaper than :func:`attrs.evolve`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar, get_args

import attrs
from attrs import AttrsInstance
from typing_extensions import TypeIs, assert_never

from ..types import (
    ActiveTurn,
    ChatAction,
    ChatDeltaAction,
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
    ChatTurnStartedAction,
    ChatUsageAction,
    ConfirmationOption,
    ErrorInfo,
    MarkdownResponsePart,
    PendingMessage,
    PendingMessageKind,
    ReasoningResponsePart,
    ResponsePart,
    SessionStatus,
    StateAction,
    ToolCallCancellationReason,
    ToolCallCancelledState,
    ToolCallCompletedState,
    ToolCallConfirmationReason,
    ToolCallPendingConfirmationState,
    ToolCallPendingResultConfirmationState,
    ToolCallResponsePart,
    ToolCallRunningState,
    ToolCallState,
    ToolCallStreamingState,
    Turn,
    TurnState,
    UnknownAction,
    UnknownResponsePart,
    UnknownToolCallState,
)
from ..types._text import TextBuffer
from ._clock import Clock, iso_timestamp, now_ms
from ._status import chat_status, without_flag

__all__ = ["chat_reducer"]

_T = TypeVar("_T", bound=AttrsInstance)

# ─── Fast copies ─────────────────────────────────────────────────────────────
#
# ``attrs.evolve`` looks the fields up, builds a keyword dict and re-runs
# ``__init__`` with its converters, and a frozen ``__init__`` stores every
# field through ``object.__setattr__``: about 3 µs for a ``ChatState`` on the
# benchmark machine, while a streamed delta has to copy three objects.  The
# functions generated below copy a frozen, slotted model instance in a few
# hundred nanoseconds: they build the copy as an instance of a private
# subclass whose ``__setattr__`` is the plain slot store, then retype it to
# the model class (allowed because the subclass adds no slots, so the layouts
# are identical).  The result is an ordinary, frozen instance of the model
# class.  Converters are not run, so callers pass values of the stored type
# (a ``TextBuffer`` for a ``_content`` slot).

_KEEP: Final[Any] = object()
_BUILDING: dict[type, type] = {}


def _copier(cls: type[_T], name: str, params: str, values: dict[str, str]) -> Callable[..., _T]:
    """Generate ``def name(__old, <params>)`` storing ``values[field]`` (else the old value)."""
    fields = attrs.fields(cls)
    if (
        "__slots__" not in cls.__dict__
        or hasattr(cls, "__attrs_post_init__")
        or any(field.validator is not None for field in fields)
    ):
        raise TypeError(f"{cls.__name__}: fast copies need a slotted class without validators")
    building = _BUILDING.get(cls)
    if building is None:
        building = _BUILDING[cls] = type(
            f"_Building{cls.__name__}",
            (cls,),
            {
                "__slots__": (),
                "__setattr__": object.__setattr__,
                "__delattr__": object.__delattr__,
            },
        )
    lines = [f"def {name}(__old, {params}):", "    __new = _new(_building)"]
    for field in fields:
        value = values.get(field.name, f"__old.{field.name}")
        lines.append(f"    __new.{field.name} = {value}")
    lines += ["    __new.__class__ = _cls", "    return __new"]
    namespace: dict[str, Any] = {
        "_KEEP": _KEEP,
        "_new": object.__new__,
        "_building": building,
        "_cls": cls,
    }
    exec("\n".join(lines), namespace)
    function: Callable[..., _T] = namespace[name]
    return function


def _evolver(cls: type[_T]) -> Callable[..., _T]:
    """A fast ``attrs.evolve(old, **changes)`` for ``cls`` (keyword arguments, by attribute)."""
    names = [field.name for field in attrs.fields(cls)]
    return _copier(
        cls,
        f"_evolve_{cls.__name__}",
        "*, " + ", ".join(f"{name}=_KEEP" for name in names),
        {name: f"__old.{name} if {name} is _KEEP else {name}" for name in names},
    )


def _replacer(cls: type[_T], *names: str) -> Callable[..., _T]:
    """A copy of ``cls`` with the fields ``names`` replaced (positional arguments, in order).

    Faster than :func:`_evolver` (no defaults, no tests): for the streaming path.
    """
    known = attrs.fields_dict(cls)
    assert all(name in known for name in names), names
    return _copier(
        cls,
        f"_{cls.__name__}_with_{'_'.join(name.strip('_') for name in names)}",
        ", ".join(names),
        {name: name for name in names},
    )


_evolve_state: Final = _evolver(ChatState)
_evolve_turn: Final = _evolver(ActiveTurn)
# The streaming path: one replacer per object on the way to a text part.
_state_with_turn: Final = _replacer(ChatState, "active_turn")
_turn_with_parts: Final = _replacer(ActiveTurn, "response_parts")
_markdown_with_content: Final = _replacer(MarkdownResponsePart, "_content")
_reasoning_with_content: Final = _replacer(ReasoningResponsePart, "_content")
# Streamed tool-call input (``chat/toolCallDelta``).
_streaming_with_input: Final = _replacer(
    ToolCallStreamingState, "meta", "_partial_input", "invocation_message"
)
_tool_part_with_call: Final = _replacer(ToolCallResponsePart, "tool_call")

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

    Pure: ``state`` is never modified, and older states stay valid.  Actions
    of other channels and :class:`~agenthost_protocol.types.UnknownAction`
    (after calling ``on_unknown``) return ``state`` itself, as does every
    action that changes nothing (wrong turn, unknown part or tool call, a
    transition the tool-call state machine does not allow, ...).  Never
    raises on well-typed input.  ``now`` supplies ``modifiedAt`` (epoch
    milliseconds, rendered as ``toISOString`` does; the wall clock when
    ``None``).
    """
    if type(action) is ChatDeltaAction:  # the hot path, ahead of the routing
        return _append_text(state, action, MarkdownResponsePart, _markdown_with_content)
    if not _is_chat_action(action):
        return state
    match action:
        # Streaming first: the match tests its cases in order.
        case ChatDeltaAction():
            return _append_text(state, action, MarkdownResponsePart, _markdown_with_content)
        case ChatReasoningAction():
            return _append_text(state, action, ReasoningResponsePart, _reasoning_with_content)
        case ChatToolCallDeltaAction():
            return _update_tool_call(state, action.turn_id, action.tool_call_id, action, _delta)
        case ChatResponsePartAction(turn_id=turn_id, part=part):
            return _append_part(state, turn_id, part)
        case ChatToolCallStartAction():
            streaming = ToolCallStreamingState(
                tool_call_id=action.tool_call_id,
                tool_name=action.tool_name,
                display_name=action.display_name,
                contributor=action.contributor,
                meta=action.meta,
            )
            return _append_part(state, action.turn_id, ToolCallResponsePart(tool_call=streaming))
        case ChatToolCallReadyAction():
            return _update_tool_call(
                state, action.turn_id, action.tool_call_id, action, _ready, recompute=True
            )
        case ChatToolCallApprovedAction():
            return _update_tool_call(
                state, action.turn_id, action.tool_call_id, action, _approved, recompute=True
            )
        case ChatToolCallDeniedAction():
            return _update_tool_call(
                state, action.turn_id, action.tool_call_id, action, _denied, recompute=True
            )
        case ChatToolCallCompleteAction():
            return _update_tool_call(
                state, action.turn_id, action.tool_call_id, action, _complete, recompute=True
            )
        case ChatToolCallResultConfirmedAction():
            return _update_tool_call(
                state,
                action.turn_id,
                action.tool_call_id,
                action,
                _result_confirmed,
                recompute=True,
            )
        case ChatToolCallContentChangedAction():
            return _update_tool_call(
                state, action.turn_id, action.tool_call_id, action, _content_changed
            )
        case ChatUsageAction(turn_id=turn_id, usage=usage):
            turn = state.active_turn
            if turn is None or turn.id != turn_id:
                return state
            return _state_with_turn(state, _evolve_turn(turn, usage=usage))
        case ChatTurnStartedAction():
            return _turn_started(state, action, now)
        case ChatTurnCompleteAction(turn_id=turn_id):
            return _end_turn(state, turn_id, TurnState.COMPLETE, None, now)
        case ChatTurnCancelledAction(turn_id=turn_id):
            return _end_turn(state, turn_id, TurnState.CANCELLED, None, now)
        case ChatErrorAction(turn_id=turn_id, error=error):
            return _end_turn(state, turn_id, TurnState.ERROR, error, now)
        case ChatPendingMessageSetAction(kind=kind, id=message_id, message=message):
            return _pending_message_set(state, kind, PendingMessage(id=message_id, message=message))
        case ChatPendingMessageRemovedAction(kind=kind, id=message_id):
            return _pending_message_removed(state, kind, message_id)
        case ChatQueuedMessagesReorderedAction(order=order):
            return _queued_messages_reordered(state, order)
        case ChatInputRequestedAction(request=request):
            return _input_requested(state, request, now)
        case ChatInputAnswerChangedAction():
            return _input_answer_changed(state, action, now)
        case ChatInputCompletedAction(request_id=request_id):
            return _input_completed(state, request_id, now)
        case ChatTruncatedAction(turn_id=turn_id):
            return _truncated(state, turn_id, now)
        case UnknownAction():
            if on_unknown is not None:
                on_unknown(action)
            return state
        case _:
            assert_never(action)


# The last timestamp rendered, ``(epoch ms, ISO string)``: actions come in
# bursts within one millisecond, and rendering costs microseconds.
_last_timestamp: tuple[int, str] = (-1, "")


def _timestamp(now: Clock | None) -> str:
    """``modifiedAt`` for now: ``toISOString`` form, e.g. ``1970-01-01T00:00:09.999Z``."""
    global _last_timestamp  # noqa: PLW0603  (the memo above)
    ms = now_ms(now)
    last_ms, text = _last_timestamp
    if ms != last_ms:
        text = iso_timestamp(ms)
        _last_timestamp = (ms, text)
    return text


# ─── Response parts ──────────────────────────────────────────────────────────


def _raw_get(raw: object, key: str) -> object:
    """``raw[key]`` of an unknown variant's wire object (``None`` when absent)."""
    return raw.get(key) if isinstance(raw, Mapping) else None


# The last part a text append went to: ``(parts, part_id, index)``, where
# ``parts`` is the ``response_parts`` tuple that append *produced*.  The next
# delta of a stream usually targets the same part of exactly that tuple, and
# then the scan for the first part with that id can be skipped: the parts
# before ``index`` are the very objects that were scanned last time, and the
# part at ``index`` kept its id and kind.  A pure memo: results are identical
# without it.  One module-level tuple, replaced (never mutated) in one store,
# so concurrent reducers can only miss it, never misread it; it keeps the
# last ``response_parts`` tuple alive until the next append.
_last_append: tuple[tuple[ResponsePart, ...], str, int] = ((), "", -1)


def _append_text(
    state: ChatState,
    action: ChatDeltaAction | ChatReasoningAction,
    part_class: type[MarkdownResponsePart] | type[ReasoningResponsePart],
    with_content: Callable[[Any, TextBuffer], ResponsePart],
) -> ChatState:
    """``chat/delta`` and ``chat/reasoning``: append to the first part with that id.

    No-op when the turn is not the active one, no part has that id, or the
    first part with that id is not of ``part_class`` (markdown for a delta,
    reasoning for reasoning).  The hot path of a streaming agent.
    """
    global _last_append  # noqa: PLW0603  (the memo above)
    turn = state.active_turn
    text = action.content
    if turn is None or turn.id != action.turn_id or not text:
        return state
    part_id = action.part_id
    parts = turn.response_parts
    last_parts, last_id, index = _last_append
    if last_parts is not parts or last_id != part_id:
        index = _find_text_part(parts, part_id)
        if index < 0:
            return state
    part = parts[index]
    if type(part) is not part_class:
        return state
    new_part = with_content(part, part._content.appended(text))
    if index == len(parts) - 1:
        new_parts = parts[:index] + (new_part,)  # noqa: RUF005  (faster than unpacking)
    else:
        new_parts = parts[:index] + (new_part,) + parts[index + 1 :]  # noqa: RUF005
    _last_append = (new_parts, part_id, index)
    return _state_with_turn(state, _turn_with_parts(turn, new_parts))


def _find_text_part(parts: tuple[ResponsePart, ...], part_id: str) -> int:
    """The index of the first part whose id is ``part_id``, or -1.

    Markdown and reasoning parts match on ``id``, tool-call parts on
    ``toolCall.toolCallId``, unknown parts on a raw ``id``; content-ref and
    system-notification parts have no id and never match.
    """
    for index, part in enumerate(parts):
        kind = type(part)
        if kind is MarkdownResponsePart or kind is ReasoningResponsePart:
            if part.id == part_id:  # type: ignore[union-attr]
                return index
        elif kind is ToolCallResponsePart:
            tool_call = part.tool_call  # type: ignore[union-attr]
            if type(tool_call) is not UnknownToolCallState:
                if tool_call.tool_call_id == part_id:  # type: ignore[union-attr]
                    return index
            elif _raw_get(tool_call.raw, "toolCallId") == part_id:
                return index
        elif kind is UnknownResponsePart and _raw_get(part.raw, "id") == part_id:  # type: ignore[union-attr]
            return index
    return -1


def _append_part(state: ChatState, turn_id: str, part: ResponsePart) -> ChatState:
    turn = state.active_turn
    if turn is None or turn.id != turn_id:
        return state
    return _state_with_turn(state, _turn_with_parts(turn, (*turn.response_parts, part)))


# ─── Tool calls ──────────────────────────────────────────────────────────────

_A = TypeVar("_A")


def _update_tool_call(
    state: ChatState,
    turn_id: str,
    tool_call_id: str,
    action: _A,
    update: Callable[[ToolCallState, _A], ToolCallState],
    *,
    recompute: bool = False,
) -> ChatState:
    """Apply ``update`` to every tool call of the active turn with that id.

    ``update`` returns its argument unchanged when the transition is not
    allowed; when no tool call changes, ``state`` itself is returned (the
    status is not recomputed then, unlike the TypeScript reducer, which may
    "repair" an inconsistent status on a no-op).  With ``recompute`` the
    activity bits of the new state's status are recomputed.
    """
    turn = state.active_turn
    if turn is None or turn.id != turn_id:
        return state
    parts = turn.response_parts
    new_parts: list[ResponsePart] | None = None
    for index, part in enumerate(parts):
        if type(part) is not ToolCallResponsePart:
            continue
        tool_call = part.tool_call
        if isinstance(tool_call, UnknownToolCallState) or tool_call.tool_call_id != tool_call_id:
            continue
        updated = update(tool_call, action)
        if updated is tool_call:
            continue
        if new_parts is None:
            new_parts = list(parts)
        new_parts[index] = _tool_part_with_call(part, updated)
    if new_parts is None:
        return state
    new_turn = _turn_with_parts(turn, tuple(new_parts))
    if not recompute:
        return _state_with_turn(state, new_turn)
    status = chat_status(state.status, new_turn, state.input_requests)
    return _evolve_state(state, active_turn=new_turn, status=status)


def _delta(tc: ToolCallState, action: ChatToolCallDeltaAction) -> ToolCallState:
    """``chat/toolCallDelta``: streaming only; append the input, maybe update message and meta."""
    if type(tc) is not ToolCallStreamingState:
        return tc
    buffer = tc._partial_input
    invocation_message = action.invocation_message
    return _streaming_with_input(
        tc,
        tc.meta if action.meta is None else action.meta,
        TextBuffer.of(action.content) if buffer is None else buffer.appended(action.content),
        tc.invocation_message if invocation_message is None else invocation_message,
    )


def _ready(tc: ToolCallState, action: ChatToolCallReadyAction) -> ToolCallState:
    """``chat/toolCallReady``: from streaming, or from running (re-confirmation)."""
    if type(tc) is not ToolCallStreamingState and type(tc) is not ToolCallRunningState:
        return tc
    meta = tc.meta if action.meta is None else action.meta
    if action.confirmed:
        return ToolCallRunningState(
            tool_call_id=tc.tool_call_id,
            tool_name=tc.tool_name,
            display_name=tc.display_name,
            contributor=tc.contributor,
            meta=meta,
            invocation_message=action.invocation_message,
            tool_input=action.tool_input,
            confirmed=action.confirmed,
        )
    return ToolCallPendingConfirmationState(
        tool_call_id=tc.tool_call_id,
        tool_name=tc.tool_name,
        display_name=tc.display_name,
        contributor=tc.contributor,
        meta=meta,
        invocation_message=action.invocation_message,
        tool_input=action.tool_input,
        confirmation_title=action.confirmation_title,
        edits=action.edits,
        editable=action.editable,
        options=action.options,
    )


def _selected_option(
    options: tuple[ConfirmationOption, ...] | None, option_id: str | None
) -> ConfirmationOption | None:
    if not option_id or not options:
        return None
    return next((option for option in options if option.id == option_id), None)


def _approved(tc: ToolCallState, action: ChatToolCallApprovedAction) -> ToolCallState:
    """``chat/toolCallConfirmed`` (approved): pending-confirmation → running."""
    if type(tc) is not ToolCallPendingConfirmationState:
        return tc
    edited = action.edited_tool_input
    return ToolCallRunningState(
        tool_call_id=tc.tool_call_id,
        tool_name=tc.tool_name,
        display_name=tc.display_name,
        contributor=tc.contributor,
        meta=tc.meta if action.meta is None else action.meta,
        invocation_message=tc.invocation_message,
        tool_input=tc.tool_input if edited is None else edited,
        confirmed=action.confirmed,
        selected_option=_selected_option(tc.options, action.selected_option_id),
    )


def _denied(tc: ToolCallState, action: ChatToolCallDeniedAction) -> ToolCallState:
    """``chat/toolCallConfirmed`` (denied): pending-confirmation → cancelled."""
    if type(tc) is not ToolCallPendingConfirmationState:
        return tc
    return ToolCallCancelledState(
        tool_call_id=tc.tool_call_id,
        tool_name=tc.tool_name,
        display_name=tc.display_name,
        contributor=tc.contributor,
        meta=tc.meta if action.meta is None else action.meta,
        invocation_message=tc.invocation_message,
        tool_input=tc.tool_input,
        reason=action.reason,
        reason_message=action.reason_message,
        user_suggestion=action.user_suggestion,
        selected_option=_selected_option(tc.options, action.selected_option_id),
    )


def _complete(tc: ToolCallState, action: ChatToolCallCompleteAction) -> ToolCallState:
    """``chat/toolCallComplete``: from running, or from pending-confirmation (``not-needed``)."""
    if type(tc) is ToolCallRunningState:
        confirmed = tc.confirmed
        selected_option = tc.selected_option
    elif type(tc) is ToolCallPendingConfirmationState:
        confirmed = ToolCallConfirmationReason.NOT_NEEDED
        selected_option = None
    else:
        return tc
    result = action.result
    # Both outcomes carry the same fields; only the status differs.
    finished = (
        ToolCallPendingResultConfirmationState
        if action.requires_result_confirmation
        else ToolCallCompletedState
    )
    return finished(
        tool_call_id=tc.tool_call_id,
        tool_name=tc.tool_name,
        display_name=tc.display_name,
        contributor=tc.contributor,
        meta=tc.meta if action.meta is None else action.meta,
        invocation_message=tc.invocation_message,
        tool_input=tc.tool_input,
        confirmed=confirmed,
        selected_option=selected_option,
        success=result.success,
        past_tense_message=result.past_tense_message,
        content=result.content,
        structured_content=result.structured_content,
        error=result.error,
    )


def _result_confirmed(
    tc: ToolCallState, action: ChatToolCallResultConfirmedAction
) -> ToolCallState:
    """``chat/toolCallResultConfirmed``: pending-result-confirmation → completed or cancelled."""
    if type(tc) is not ToolCallPendingResultConfirmationState:
        return tc
    meta = tc.meta if action.meta is None else action.meta
    if action.approved:
        return ToolCallCompletedState(
            tool_call_id=tc.tool_call_id,
            tool_name=tc.tool_name,
            display_name=tc.display_name,
            contributor=tc.contributor,
            meta=meta,
            invocation_message=tc.invocation_message,
            tool_input=tc.tool_input,
            confirmed=tc.confirmed,
            selected_option=tc.selected_option,
            success=tc.success,
            past_tense_message=tc.past_tense_message,
            content=tc.content,
            structured_content=tc.structured_content,
            error=tc.error,
        )
    return ToolCallCancelledState(
        tool_call_id=tc.tool_call_id,
        tool_name=tc.tool_name,
        display_name=tc.display_name,
        contributor=tc.contributor,
        meta=meta,
        invocation_message=tc.invocation_message,
        tool_input=tc.tool_input,
        reason=ToolCallCancellationReason.RESULT_DENIED,
        selected_option=tc.selected_option,
    )


def _content_changed(tc: ToolCallState, action: ChatToolCallContentChangedAction) -> ToolCallState:
    """``chat/toolCallContentChanged``: running only; replace ``content``, maybe ``_meta``."""
    if type(tc) is not ToolCallRunningState:
        return tc
    meta = tc.meta if action.meta is None else action.meta
    return attrs.evolve(tc, content=action.content, meta=meta)


def _force_cancel(part: ResponsePart) -> ResponsePart:
    """The part as a finished turn keeps it: unfinished tool calls become ``cancelled``."""
    if type(part) is not ToolCallResponsePart:
        return part
    tc = part.tool_call
    if isinstance(tc, (ToolCallCompletedState, ToolCallCancelledState)):
        return part
    if isinstance(tc, UnknownToolCallState):
        return part  # a status from a newer peer: not ours to judge
    if isinstance(tc, ToolCallStreamingState):
        invocation_message = "" if tc.invocation_message is None else tc.invocation_message
        tool_input = None
    else:
        invocation_message = tc.invocation_message
        tool_input = tc.tool_input
    cancelled = ToolCallCancelledState(
        tool_call_id=tc.tool_call_id,
        tool_name=tc.tool_name,
        display_name=tc.display_name,
        contributor=tc.contributor,
        meta=tc.meta,
        invocation_message=invocation_message,
        tool_input=tool_input,
        reason=ToolCallCancellationReason.SKIPPED,
    )
    return ToolCallResponsePart(tool_call=cancelled)


# ─── Turn lifecycle ──────────────────────────────────────────────────────────


def _turn_started(state: ChatState, action: ChatTurnStartedAction, now: Clock | None) -> ChatState:
    """``chat/turnStarted``: a fresh active turn (replacing any), IS_READ cleared."""
    turn = ActiveTurn(id=action.turn_id, message=action.message, response_parts=())
    status = without_flag(
        chat_status(state.status, turn, state.input_requests), SessionStatus.IS_READ
    )
    steering = state.steering_message
    queued = state.queued_messages
    consumed = action.queued_message_id
    if consumed:
        if steering is not None and steering.id == consumed:
            steering = None
        if queued is not None:
            kept = tuple(message for message in queued if message.id != consumed)
            queued = (queued if len(kept) == len(queued) else kept) or None
    return _evolve_state(
        state,
        active_turn=turn,
        status=status,
        modified_at=_timestamp(now),
        steering_message=steering,
        queued_messages=queued,
    )


def _end_turn(
    state: ChatState,
    turn_id: str,
    end: TurnState,
    error: ErrorInfo | None,
    now: Clock | None,
) -> ChatState:
    """``chat/turnComplete`` / ``turnCancelled`` / ``error``: archive the active turn."""
    turn = state.active_turn
    if turn is None or turn.id != turn_id:
        return state
    parts = turn.response_parts
    finished = Turn(
        id=turn.id,
        message=turn.message,
        response_parts=tuple(_force_cancel(part) for part in parts),
        usage=turn.usage,
        state=end,
        error=error,
    )
    return _evolve_state(
        state,
        turns=(*state.turns, finished),
        active_turn=None,
        input_requests=None,
        modified_at=_timestamp(now),
        status=chat_status(state.status, None, None, error=end is TurnState.ERROR),
    )


def _truncated(state: ChatState, turn_id: str | None, now: Clock | None) -> ChatState:
    """``chat/truncated``: keep the turns up to and including ``turn_id`` (none without it)."""
    if turn_id is None:
        turns: tuple[Any, ...] = ()
    else:
        index = next((i for i, turn in enumerate(state.turns) if turn.id == turn_id), -1)
        if index < 0:
            return state
        turns = state.turns[: index + 1]
        if len(turns) == len(state.turns):
            turns = state.turns
    return _evolve_state(
        state,
        turns=turns,
        active_turn=None,
        input_requests=None,
        modified_at=_timestamp(now),
        status=chat_status(state.status, None, None),
    )


# ─── Pending messages ────────────────────────────────────────────────────────


def _pending_message_set(
    state: ChatState, kind: PendingMessageKind | str, entry: PendingMessage
) -> ChatState:
    """``chat/pendingMessageSet``: replace the steering message, or upsert a queued one.

    A kind this library does not know is a no-op.
    """
    if kind == PendingMessageKind.STEERING:
        return _evolve_state(state, steering_message=entry)
    if kind != PendingMessageKind.QUEUED:
        return state
    queued = state.queued_messages or ()
    for index, message in enumerate(queued):
        if message.id == entry.id:
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
    if kind != PendingMessageKind.QUEUED:
        return state
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


def _find_request(state: ChatState, request_id: str) -> int:
    requests = state.input_requests
    if requests:
        for index, request in enumerate(requests):
            if request.id == request_id:
                return index
    return -1


def _input_requested(state: ChatState, request: ChatInputRequest, now: Clock | None) -> ChatState:
    """``chat/inputRequested``: upsert by id (keeping old answers unless new ones come)."""
    requests = state.input_requests or ()
    index = _find_request(state, request.id)
    if index < 0:
        requests = (*requests, request)
    else:
        old = requests[index]
        if request.answers is None and old.answers is not None:
            request = attrs.evolve(request, answers=old.answers)
        requests = (*requests[:index], request, *requests[index + 1 :])
    status = without_flag(
        chat_status(state.status, state.active_turn, requests), SessionStatus.IS_READ
    )
    return _evolve_state(state, input_requests=requests, status=status, modified_at=_timestamp(now))


def _input_answer_changed(
    state: ChatState, action: ChatInputAnswerChangedAction, now: Clock | None
) -> ChatState:
    """``chat/inputAnswerChanged``: set (or, without ``answer``, delete) one draft answer."""
    index = _find_request(state, action.request_id)
    if index < 0:
        return state
    requests = state.input_requests
    assert requests is not None
    request = requests[index]
    answers = dict(request.answers) if request.answers else {}
    if action.answer is None:
        answers.pop(action.question_id, None)
    else:
        answers[action.question_id] = action.answer
    updated = attrs.evolve(request, answers=answers or None)
    return _evolve_state(
        state,
        input_requests=(*requests[:index], updated, *requests[index + 1 :]),
        modified_at=_timestamp(now),
    )


def _input_completed(state: ChatState, request_id: str, now: Clock | None) -> ChatState:
    """``chat/inputCompleted``: remove the request (its ``answers`` payload is not applied)."""
    index = _find_request(state, request_id)
    if index < 0:
        return state
    requests = state.input_requests
    assert requests is not None
    remaining = (*requests[:index], *requests[index + 1 :]) or None
    return _evolve_state(
        state,
        input_requests=remaining,
        modified_at=_timestamp(now),
        status=chat_status(state.status, state.active_turn, remaining),
    )
