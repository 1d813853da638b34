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
tested before any routing; a hint left on the streamed text spares the scan
for the part while deltas keep going to the turn's newest part (see
:func:`_append_text`); the text is appended to the part's ``TextBuffer``
(amortised O(len(delta)), older states keep their text and branches share
it); and the part, the active turn and the state are rebuilt by one
generated function (:func:`_text_rebuilder`), several times cheaper than
:func:`attrs.evolve`.  The module holds no mutable state: reducing is a
function of the arguments only (the hint is a checked fact about immutable
values, kept in the text's storage).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import (
    TYPE_CHECKING,
    Any,
    Final,
    ParamSpec,
    TypeAlias,
    TypedDict,
    TypeVar,
    cast,
    get_args,
)

import attrs
from attrs import AttrsInstance
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
from ._clock import Clock, iso_timestamp, now_ms
from ._status import chat_status, without_flag

__all__ = ["chat_reducer"]

_T = TypeVar("_T", bound=AttrsInstance)
_P = ParamSpec("_P")
_V = TypeVar("_V")

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
# class.  Converters are not run by the copies, so callers pass values of the
# stored type (a ``TextBuffer`` for a ``_content`` slot); the constructors of
# :func:`_builder` run them, as ``__init__`` does.

_KEEP: Final[Any] = object()


def _copy_code(
    cls: type, old: str, new: str, values: Mapping[str, str]
) -> tuple[list[str], dict[str, Any]]:
    """The body lines that build ``new`` as a copy of ``old`` (variable names) and their globals.

    Each field gets ``values[field]`` (an expression), else the old value.
    """
    fields = attrs.fields(cls)
    if (
        "__slots__" not in cls.__dict__
        or hasattr(cls, "__attrs_post_init__")
        or any(field.validator is not None for field in fields)
    ):
        raise TypeError(f"{cls.__name__}: fast copies need a slotted class without validators")
    # One private subclass per generated function: nothing shared, nothing to
    # register anywhere.
    # Its ``__init__`` is ``object.__init__``, so that calling it allocates
    # the object faster than ``object.__new__(building)`` does.
    building = type(
        f"_Building{cls.__name__}",
        (cls,),
        {
            "__slots__": (),
            "__init__": object.__init__,
            "__setattr__": object.__setattr__,
            "__delattr__": object.__delattr__,
        },
    )
    lines = [f"    {new} = _building_{new}()"]
    for field in fields:
        lines.append(f"    {new}.{field.name} = {values.get(field.name, f'{old}.{field.name}')}")
    lines.append(f"    {new}.__class__ = _class_{new}")
    return lines, {f"_building_{new}": building, f"_class_{new}": cls}


def _generate(name: str, params: str, body: list[str], namespace: dict[str, Any]) -> Any:
    """Compile ``def name(params): body`` with ``namespace`` as its globals."""
    namespace.update(_KEEP=_KEEP)
    exec("\n".join([f"def {name}({params}):", *body]), namespace)
    return namespace[name]


def _copier(cls: type[_T], name: str, params: str, values: dict[str, str]) -> Callable[..., _T]:
    """Generate ``def name(__old, <params>)`` storing ``values[field]`` (else the old value)."""
    body, namespace = _copy_code(cls, "__old", "__new", values)
    function: Callable[..., _T] = _generate(
        name, f"__old, {params}", [*body, "    return __new"], namespace
    )
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


def _builder(cls: Callable[_P, _T]) -> Callable[_P, _T]:
    """A fast constructor of ``cls``: the same keyword arguments, defaults and converters.

    The attrs ``__init__`` of a frozen class stores each field through a call
    of ``object.__setattr__``; this one stores them as a copy does.
    """
    model = cast("type[_T]", cls)
    params: list[str] = []
    values: dict[str, str] = {}
    namespace: dict[str, Any] = {}
    for field in attrs.fields(model):
        name = field.alias
        if field.default is attrs.NOTHING:
            params.append(name)
        elif isinstance(field.default, attrs.Factory):  # type: ignore[arg-type]
            raise TypeError(f"{model.__name__}.{field.name}: a factory default")
        else:
            namespace[f"_default_{name}"] = field.default
            params.append(f"{name}=_default_{name}")
        if field.converter is None:
            values[field.name] = name
        else:
            namespace[f"_convert_{name}"] = field.converter
            values[field.name] = f"_convert_{name}({name})"
    body, names = _copy_code(model, "", "__new", values)
    function: Callable[_P, _T] = _generate(
        f"_new_{model.__name__}",
        "*, " + ", ".join(params),
        [*body, "    return __new"],
        {**namespace, **names},
    )
    return function


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


_evolve_state: Final = _evolver(ChatState)
# The streaming path.
_with_markdown_text: Final = _text_rebuilder(MarkdownResponsePart)
_with_reasoning_text: Final = _text_rebuilder(ReasoningResponsePart)
_with_turn_parts: Final = _parts_rebuilder()
_state_with_turn: Final = _replacer(ChatState, "active_turn")
_turn_with_parts: Final = _replacer(ActiveTurn, "response_parts")
# Tool calls: streamed input, the part around a new call, the recomputed status.
_streaming_with_input: Final = _replacer(
    ToolCallStreamingState, "meta", "_partial_input", "invocation_message"
)
_tool_part_with_call: Final = _replacer(ToolCallResponsePart, "tool_call")
_state_with_status: Final = _replacer(ChatState, "status")
# What the tool-call state machine and the turn lifecycle build.
_new_streaming: Final = _builder(ToolCallStreamingState)
_new_pending_confirmation: Final = _builder(ToolCallPendingConfirmationState)
_new_running: Final = _builder(ToolCallRunningState)
_new_auth_required: Final = _builder(ToolCallAuthRequiredState)
_new_pending_result_confirmation: Final = _builder(ToolCallPendingResultConfirmationState)
_new_completed: Final = _builder(ToolCallCompletedState)
_new_cancelled: Final = _builder(ToolCallCancelledState)
_new_tool_part: Final = _builder(ToolCallResponsePart)
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
    if type(action) is ChatDeltaAction:  # the hot path, ahead of the routing
        # The usual case of ``_append_text`` (see there), inlined: one call less.
        turn = state.active_turn
        if turn is not None and turn.id == action.turn_id:
            parts = turn.response_parts
            if parts:
                part = parts[-1]
                text = action.content
                if type(part) is MarkdownResponsePart and part.id == action.part_id and text:
                    buffer = part._content
                    line = buffer._line
                    hint = None if line is None else line.hint
                    if hint is not None and hint[1] == part.id and hint[0] == parts[:-1]:
                        return _with_markdown_text(
                            state, turn, hint[0], (), part, buffer.appended(text)
                        )
        return _append_text(state, action, MarkdownResponsePart, _with_markdown_text)
    if type(action) not in _CHAT_ACTIONS:  # ``_is_chat_action``, without the call
        return state
    if TYPE_CHECKING:
        assert _is_chat_action(action)
    match action:
        # The match tests its cases in order: the most frequent (streaming) first.
        case ChatReasoningAction():
            return _append_text(state, action, ReasoningResponsePart, _with_reasoning_text)
        case ChatToolCallDeltaAction():
            return _update_tool_calls(state, action, _tool_call_delta)
        case ChatResponsePartAction(turn_id=turn_id, part=part):
            return _append_part(state, turn_id, part)
        case ChatToolCallStartAction():
            streaming = _new_streaming(
                tool_call_id=action.tool_call_id,
                tool_name=action.tool_name,
                display_name=action.display_name,
                intention=action.intention,
                contributor=action.contributor,
                meta=action.meta,
            )
            return _append_part(state, action.turn_id, _new_tool_part(tool_call=streaming))
        case ChatToolCallReadyAction():
            return _transition(state, action, _ready)
        case ChatToolCallCompleteAction():
            return _transition(state, action, _complete)
        case ChatTurnStartedAction():
            return _turn_started(state, action, now)
        case ChatTurnCompleteAction():
            return _end_turn(state, action, TurnState.COMPLETE, None, now)
        case ChatTurnCancelledAction():
            return _end_turn(state, action, TurnState.CANCELLED, None, now)
        case ChatErrorAction(error=error):
            return _end_turn(state, action, TurnState.ERROR, error, now)
        case ChatToolCallApprovedAction():
            return _transition(state, action, _approved)
        case ChatToolCallDeniedAction():
            return _transition(state, action, _denied)
        case ChatToolCallResultConfirmedAction():
            return _transition(state, action, _result_confirmed)
        case ChatToolCallAuthRequiredAction():
            return _transition(state, action, _auth_required)
        case ChatToolCallAuthResolvedAction():
            return _transition(state, action, _auth_resolved)
        case ChatToolCallContentChangedAction():
            return _update_tool_calls(state, action, _content_changed)
        case ChatUsageAction(turn_id=turn_id, usage=usage):
            turn = state.active_turn
            if turn is None or turn.id != turn_id or turn.usage == usage:
                return state
            return _state_with_turn(state, attrs.evolve(turn, usage=usage))
        case ChatActivityChangedAction(activity=activity):
            if state.activity == activity:
                return state
            return _evolve_state(state, activity=activity)
        case ChatWorkingDirectorySetAction(directory=directory):
            directories = state.working_directories
            if directories is not None and directory in directories:
                return state
            return _evolve_state(state, working_directories=(*(directories or ()), directory))
        case ChatWorkingDirectoryRemovedAction(directory=directory):
            directories = state.working_directories
            if directories is None or directory not in directories:
                return state
            index = directories.index(directory)
            # An empty tuple stays: ``[]`` means "no access", absent means "inherit".
            remaining = directories[:index] + directories[index + 1 :]
            return _evolve_state(state, working_directories=remaining)
        case ChatPendingMessageSetAction(kind=kind, id=message_id, message=message):
            return _pending_message_set(state, kind, PendingMessage(id=message_id, message=message))
        case ChatPendingMessageRemovedAction(kind=kind, id=message_id):
            return _pending_message_removed(state, kind, message_id)
        case ChatQueuedMessagesReorderedAction(order=order):
            return _queued_messages_reordered(state, order)
        case ChatDraftChangedAction(draft=draft):
            if state.draft == draft:
                return state
            return _evolve_state(state, draft=draft)
        case ChatInputRequestedAction(request=request):
            return _input_requested(state, request, now)
        case ChatInputAnswerChangedAction():
            return _input_answer_changed(state, action, now)
        case ChatInputCompletedAction():
            return _input_completed(state, action, now)
        case ChatTruncatedAction(turn_id=turn_id):
            return _truncated(state, turn_id, now)
        case ChatTurnsLoadedAction():
            return _turns_loaded(state, action)
        case ChatDeltaAction():  # handled above; here for the type checker
            return _append_text(state, action, MarkdownResponsePart, _with_markdown_text)
        case UnknownAction():
            if on_unknown is not None:
                on_unknown(action)
            return state
        case _:
            assert_never(action)


def _timestamp(now: Clock | None) -> str:
    """``modifiedAt`` for now: ``toISOString`` form, e.g. ``1970-01-01T00:00:09.999Z``."""
    return iso_timestamp(now_ms(now))


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
    reasoning for reasoning), or the text is empty.  The hot path of a
    streaming agent, hence the scan inlined here rather than a call (and the
    usual case, a hint that holds, written out again in ``chat_reducer``).

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
        # A stream appends to its newest part, delta after delta.  The append
        # before left a hint on the text's line: the parts before it, none of
        # which has this id.  If they are still the parts before it, this part
        # is the first with the id, and the scan below is not needed.
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
        line.hint = (before, part_id)
    for earlier in before:
        if type(earlier) is MarkdownResponsePart or type(earlier) is ReasoningResponsePart:
            line = earlier._content._line
            if line is not None:
                line.hint = None
    return rebuild(state, turn, before, (), part, buffer)


def _append_part(state: ChatState, turn_id: str, part: ResponsePart) -> ChatState:
    turn = state.active_turn
    if turn is None or turn.id != turn_id:
        return state
    return _with_turn_parts(state, turn, (*turn.response_parts, part))


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
    any of these actions, even one that changes no tool call.
    """
    new = _update_tool_calls(state, action, update)
    status = chat_status(new.status, new.active_turn)
    if status != new.status:
        new = _state_with_status(new, status)
    return new


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
    meta = _or(action.meta, tc.meta)
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
        new = _new_running(
            tool_call_id=tc.tool_call_id,
            tool_name=tc.tool_name,
            display_name=tc.display_name,
            intention=intention,
            contributor=contributor,
            meta=meta,
            invocation_message=action.invocation_message,
            tool_input=tool_input,
            confirmed=action.confirmed,
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
        _new_pending_result_confirmation
        if action.requires_result_confirmation and not isinstance(tc, ToolCallAuthRequiredState)
        else _new_completed
    )
    return finished(
        tool_call_id=tc.tool_call_id,
        tool_name=tc.tool_name,
        display_name=tc.display_name,
        intention=tc.intention,
        contributor=tc.contributor,
        meta=tc.meta if action.meta is None else action.meta,
        invocation_message=tc.invocation_message,
        tool_input=tc.tool_input,
        confirmed=confirmed,
        selected_option=selected_option,
        success=result.success,
        past_tense_message=result.past_tense_message,
        content=content,
        structured_content=result.structured_content,
        error=result.error,
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
    return attrs.evolve(tc, content=action.content, meta=meta)


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
    status = without_flag(chat_status(state.status, turn), SessionStatus.IS_READ)
    steering = state.steering_message
    queued = state.queued_messages
    consumed = action.queued_message_id
    if consumed:
        if steering is not None and steering.id == consumed:
            steering = None
        if queued is not None:
            kept = tuple(message for message in queued if message.id != consumed)
            queued = (queued if len(kept) == len(queued) else kept) or None
    new = _evolve_state(
        state,
        active_turn=turn,
        status=status,
        modified_at=_timestamp(now),
        steering_message=steering,
        queued_messages=queued,
    )
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
            # The turn is over: the hint for the next delta goes (see ``_append_text``).
            line = part._content._line  # type: ignore[union-attr]
            if line is not None:
                line.hint = None
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
    return _evolve_state(
        state,
        turns=(*state.turns, finished),
        active_turn=None,
        modified_at=_timestamp(now),
        status=chat_status(state.status, None, error=end is TurnState.ERROR),
    )


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
            request = attrs.evolve(request, answers=old.request.answers)
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
    request = attrs.evolve(part.request, answers=answers or None)
    new_turn = _with_part(turn, index, attrs.evolve(part, request=request))
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
    request = attrs.evolve(part.request, answers=answers or None)
    new_turn = _with_part(
        turn, index, InputRequestResponsePart(request=request, response=action.response)
    )
    return _evolve_state(
        state,
        active_turn=new_turn,
        status=chat_status(state.status, new_turn),
        modified_at=_timestamp(now),
    )
