"""A stateless chat API in front of an AHP chat: the Symposium "history actor", sans-I/O.

Chat-completion style APIs (VS Code's language-model provider, OpenAI-style
``messages``) send the *whole* conversation with every request.  An AHP chat
is stateful: the agent behind it remembers every turn.  The bridge keeps, per
conversation, what the caller has acknowledged (*committed*) and the
exchange in flight (*provisional*: the new messages of the last request and
the reply streamed back so far), and decides from each new history what is
new and what the caller threw away:

* the history extends ``committed + provisional``: the caller accepted the
  reply; the provisional exchange is committed and the rest is new;
* it leaves the provisional exchange (the caller cancelled, edited its
  message, or rejected a tool call): the provisional turn is cancelled
  (pending confirmations denied first) and the new messages start a turn;
* it leaves the committed history (an older message was edited): the AHP
  chat is truncated after the last turn that still matches
  (``chat/truncated``), and what follows is sent again.

The actions it returns are *client* actions (``chat/turnStarted``,
``chat/turnCancelled``, ``chat/toolCallConfirmed``, ``chat/toolCallComplete``,
``chat/inputCompleted``, ``chat/truncated``, ``session/activeClientSet``):
dispatch them through a client connection (``client_id`` is that client) so
the host validates them and its agent sees ``ClientActionApplied``.  Feed
every action applied on the chat (every envelope of the chat channel, the
bridge's own echoes included) to :meth:`HistoryConversation.observe`: the
agent's reply comes back as response events for the request being
streamed.  A reply that pauses for the caller (a tool call to confirm, a
tool the caller runs, an input request) ends the stream with a ``tool_call``
part; the caller's next request brings the ``tool_result``.

:class:`HistoryConversation` is one conversation (one AHP chat);
:class:`HistoryActor` routes requests to conversations by their history, as
Symposium's actor does, creating chats for histories no conversation knows.
``docs/bridges.md`` has the tables and the sequence diagrams.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final, Literal, TypeAlias

from attrs import field, frozen

from .. import types as t
from ..reducers._clock import iso_timestamp
from .acp import AhpDispatch
from .pi_frames import JsonValue

__all__ = [
    "CONFIRMATION_TOOL",
    "INPUT_TOOL",
    "HistoryActor",
    "HistoryConversation",
    "HistoryMatch",
    "HistoryMessage",
    "HistoryOutput",
    "HistoryPart",
    "RequestId",
    "ResponseCancelled",
    "ResponseComplete",
    "ResponseError",
    "ResponseEvent",
    "ResponsePart",
    "TextPart",
    "ThinkingPart",
    "ToolCallPart",
    "ToolResultPart",
    "match_history",
    "normalize",
]

log = logging.getLogger(__name__)

RequestId: TypeAlias = int | str
"""The caller's id of one request (a JSON-RPC id, say)."""

Role: TypeAlias = Literal["user", "assistant", "system", "tool"]

CONFIRMATION_TOOL: Final = "ahp_confirm_tool_call"
"""The pseudo-tool a reply calls when an AHP tool call waits for confirmation."""

INPUT_TOOL: Final = "ahp_input_request"
"""The pseudo-tool a reply calls when the agent asks for input."""

_ECHOES: Final = 256

_DENY: Final = frozenset({"no", "deny", "denied", "reject", "rejected", "cancel", "false"})


# -- the stateless side's messages ---------------------------------------------------------


def _canonical(value: JsonValue) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


@frozen
class TextPart:
    """Text of a message."""

    text: str


@frozen
class ThinkingPart:
    """Reasoning text of an assistant message (never compared: callers may drop it)."""

    text: str


@frozen
class ToolCallPart:
    """An assistant's call of a tool the caller runs (or a pseudo-tool)."""

    tool_call_id: str
    tool_name: str
    parameters: JsonValue = field(eq=False)
    _key: str = field(init=False, repr=False)
    """The parameters as canonical JSON: equality is JSON equality."""

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_key", _canonical(self.parameters))


@frozen
class ToolResultPart:
    """The caller's result for a tool call, in a later request."""

    tool_call_id: str
    result: str
    is_error: bool = False


HistoryPart: TypeAlias = TextPart | ThinkingPart | ToolCallPart | ToolResultPart
"""One part of a message."""


@frozen
class HistoryMessage:
    """One message of a stateless request's history."""

    role: Role
    content: tuple[HistoryPart, ...]


def normalize(message: HistoryMessage) -> HistoryMessage:
    """``message`` as it is compared: consecutive text merged, empty text and thinking dropped.

    Callers echo an assistant message in their own shape: as one text or as
    the chunks it was streamed in, with or without its reasoning.  Merging
    and dropping make those echoes equal to what the bridge recorded.
    """
    parts: list[HistoryPart] = []
    for part in message.content:
        if isinstance(part, ThinkingPart):
            continue
        if isinstance(part, TextPart):
            if not part.text:
                continue
            if parts and isinstance(parts[-1], TextPart):
                parts[-1] = TextPart(parts[-1].text + part.text)
                continue
        parts.append(part)
    content = tuple(parts)
    return message if content == message.content else HistoryMessage(message.role, content)


@frozen
class HistoryMatch:
    """How an incoming history relates to ``committed + provisional``."""

    kind: Literal["extend", "diverged-provisional", "diverged-committed"]
    prefix: int
    """How many leading messages are equal."""
    new: tuple[HistoryMessage, ...]
    """The incoming messages after the committed and provisional ones (``extend``), or
    after the committed ones (``diverged-provisional``), or after the common prefix."""


def match_history(committed: Sequence[HistoryMessage], provisional: Sequence[HistoryMessage],
                  incoming: Sequence[HistoryMessage]) -> HistoryMatch:
    """Compare normalized histories: does ``incoming`` extend ``committed + provisional``?"""
    known = [*committed, *provisional]
    prefix = 0
    for a, b in zip(known, incoming, strict=False):
        if a != b:
            break
        prefix += 1
    if prefix == len(known):
        return HistoryMatch(kind="extend", prefix=prefix, new=tuple(incoming[prefix:]))
    if prefix >= len(committed):
        return HistoryMatch(kind="diverged-provisional", prefix=prefix,
                            new=tuple(incoming[len(committed):]))
    return HistoryMatch(kind="diverged-committed", prefix=prefix, new=tuple(incoming[prefix:]))


# -- outputs -------------------------------------------------------------------------------


@frozen
class ResponsePart:
    """Stream ``part`` to the caller of request ``request_id``."""

    request_id: RequestId
    part: HistoryPart


@frozen
class ResponseComplete:
    """The reply to ``request_id`` is complete (it may end on a tool call)."""

    request_id: RequestId


@frozen
class ResponseError:
    """The reply to ``request_id`` failed (the AHP turn ended with ``chat/error``)."""

    request_id: RequestId
    message: str


@frozen
class ResponseCancelled:
    """The stream of ``request_id`` stopped without a reply (superseded, replaced, truncated)."""

    request_id: RequestId
    reason: str


ResponseEvent: TypeAlias = ResponsePart | ResponseComplete | ResponseError | ResponseCancelled
"""What goes back to the stateless caller."""


@frozen(kw_only=True)
class HistoryOutput:
    """What one input produced: AHP actions to dispatch and events for the caller, in order."""

    actions: tuple[AhpDispatch, ...] = ()
    events: tuple[ResponseEvent, ...] = ()
    created_chat: str | None = None
    """:class:`HistoryActor`: a new conversation's chat URI; ``createChat`` it before
    dispatching ``actions``."""
    forgotten: tuple[str, ...] = ()
    """:class:`HistoryActor`: chats of conversations dropped to stay within the bound."""


# -- the AHP side, as the bridge sees it ----------------------------------------------------

_ToolStatus: TypeAlias = Literal["streaming", "pending", "running", "done"]
_PauseKind: TypeAlias = Literal["confirm", "client", "input"]


class _Tool:
    __slots__ = ("client", "input", "name", "options", "status", "title")

    def __init__(self, name: str, client: str | None) -> None:
        self.name = name
        self.client = client
        self.status: _ToolStatus = "streaming"
        self.input: str | None = None
        self.title: str | None = None
        self.options: tuple[t.ConfirmationOption, ...] = ()


class _Pause:
    """Something the agent waits for and only the caller can give (one tool call part)."""

    __slots__ = ("announced", "kind", "target")

    def __init__(self, kind: _PauseKind, target: str) -> None:
        self.kind = kind
        self.target = target
        """The AHP tool call id or input request id."""
        self.announced = False


class _Turn:
    __slots__ = ("id", "parts", "pauses", "requests", "started_ms", "tools")

    def __init__(self, turn_id: str, started_ms: int) -> None:
        self.id = turn_id
        self.started_ms = started_ms
        self.parts: dict[str, str] = {}
        self.tools: dict[str, _Tool] = {}
        self.requests: dict[str, t.ChatInputRequest] = {}
        self.pauses: dict[str, _Pause] = {}
        """Keyed by the tool call id of the part streamed to the caller."""


def _text(value: t.StringOrMarkdown | None) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else value.markdown


def _parse_input(tool_input: t.ToolInput | None) -> JsonValue:
    if isinstance(tool_input, str):
        try:
            value: JsonValue = json.loads(tool_input)
        except ValueError:
            return {"input": tool_input}
        return value
    return {}


def _render(messages: Iterable[HistoryMessage]) -> str:
    """The prompt text for messages the agent never saw.

    Only user text when there is no assistant message among them (the usual
    case: one new user message); a transcript when there is (a conversation
    that started elsewhere, or one sent again after a truncation), since AHP
    cannot import turns.
    """
    items = [normalize(m) for m in messages if m.role != "system"]
    texts = [(m.role, " ".join(p.text for p in m.content if isinstance(p, TextPart)))
             for m in items]
    if not any(role == "assistant" for role, _ in texts):
        return "\n\n".join(text for role, text in texts if role == "user" and text)
    lines = []
    for role, text in texts:
        if text and role in ("user", "assistant"):
            lines.append(f"{'User' if role == 'user' else 'Assistant'}: {text}")
    return "\n\n".join(lines)


# -- one conversation ---------------------------------------------------------------------


class HistoryConversation:
    """One stateless conversation mapped onto the AHP chat ``chat`` of ``session``.

    ``client_id`` is the AHP client the actions are dispatched as (tools the
    caller offers are published as its tools, and their calls come back
    with it as contributor).  ``clock`` gives epoch ms, ``new_id`` turn
    ids.  ``truncate``: cut history the caller edited from the AHP chat
    (``chat/truncated``) instead of leaving the old turns in the agent's
    context.  ``include_thinking``: stream reasoning as thinking parts.
    ``confirmation_tool`` / ``input_tool``: the pseudo-tool names the caller
    knows (it must offer them to its user or model as tools).
    """

    def __init__(
        self,
        *,
        session: str,
        chat: str,
        client_id: str,
        clock: Callable[[], int],
        new_id: Callable[[], str],
        truncate: bool = True,
        include_thinking: bool = True,
        confirmation_tool: str = CONFIRMATION_TOOL,
        input_tool: str = INPUT_TOOL,
    ) -> None:
        self.session = session
        self.chat = chat
        self.client_id = client_id
        self._clock = clock
        self._new_id = new_id
        self._truncate = truncate
        self._thinking = include_thinking
        self._confirmation_tool = confirmation_tool
        self._input_tool = input_tool
        self._committed: list[HistoryMessage] = []
        self._owners: list[str | None] = []
        """The AHP turn each committed message belongs to."""
        self._provisional: list[HistoryMessage] = []
        self._reply: list[HistoryPart] = []
        """The assistant message being streamed (the end of provisional)."""
        self._provisional_turn: str | None = None
        self._turn: _Turn | None = None
        self._finished: dict[str, None] = {}
        """The turns in the chat's ``turns``, oldest first, as far as the bridge knows: a
        truncation can only keep one of those, and only drops those."""
        self._streaming: RequestId | None = None
        self._tools: tuple[t.ToolDefinition, ...] | None = None
        self._actions: list[AhpDispatch] = []
        self._events: list[ResponseEvent] = []
        self._echoes: deque[t.StateAction] = deque(maxlen=_ECHOES)
        """The bridge's own actions not yet seen again: their effect is already mirrored, and
        an echo coming after a later decision (a truncation observed once the next turn has
        started) must not undo it.  Bounded, for embedders that do not feed echoes back."""

    # -- views -------------------------------------------------------------------------

    @property
    def committed(self) -> tuple[HistoryMessage, ...]:
        return tuple(self._committed)

    @property
    def provisional(self) -> tuple[HistoryMessage, ...]:
        reply = self._reply_message()
        return (*self._provisional, reply) if reply is not None else tuple(self._provisional)

    @property
    def streaming(self) -> RequestId | None:
        """The request whose reply is being streamed."""
        return self._streaming

    @property
    def turn_id(self) -> str | None:
        """The AHP turn of this conversation that is active, as the bridge sees it."""
        return None if self._turn is None else self._turn.id

    def match(self, messages: Sequence[HistoryMessage]) -> HistoryMatch:
        """How ``messages`` relate to this conversation (nothing changes)."""
        return match_history(self._committed, self.provisional, [normalize(m) for m in messages])

    # -- inputs ------------------------------------------------------------------------

    def request(self, request_id: RequestId, messages: Sequence[HistoryMessage],
                tools: Sequence[t.ToolDefinition] | None = None) -> HistoryOutput:
        """A request with the conversation's whole history; its reply starts streaming."""
        try:
            self._request(request_id, messages, tools)
        except Exception:
            # totality: a bug is logged, never raised into the host; what was decided before
            # it is still returned, so the chat and the bridge's view agree
            log.exception("history bridge: failed handling request %r", request_id)
        return self._drain()

    def _request(self, request_id: RequestId, messages: Sequence[HistoryMessage],
                 tools: Sequence[t.ToolDefinition] | None) -> None:
        if tools is not None:
            self._publish(tuple(tools))
        if self._streaming is not None:
            self._events.append(ResponseCancelled(self._streaming, "superseded by a new request"))
            self._streaming = None
        incoming = [normalize(m) for m in messages]
        provisional = self.provisional
        found = match_history(self._committed, provisional, incoming)
        if found.kind == "extend":
            self._commit(provisional)
            self._provisional = list(found.new)
            self._extend(request_id, found.new)
        elif found.kind == "diverged-provisional":
            ended_before = self._provisional_turn is not None and self._turn is None
            self._reject()
            if ended_before and self._truncate:
                # the caller dropped a reply whose turn had ended: cut it from the agent too
                # (a turn still running is only cancelled, as Symposium does)
                cut = self._boundary(len(self._committed))
                self._truncate_to(cut)
                self._provisional = incoming[cut:]
                self._prompt(request_id, incoming[cut:])
            else:
                self._provisional = incoming[len(self._committed):]
                self._prompt(request_id, incoming[found.prefix:])
        else:
            self._reject()
            if self._truncate:
                cut = self._boundary(found.prefix)
                self._truncate_to(cut)
            else:
                cut = found.prefix
                self._committed = incoming[:cut]
                self._owners = [None] * cut
            self._provisional = incoming[cut:]
            self._prompt(request_id, incoming[cut:])

    def cancel(self, request_id: RequestId) -> HistoryOutput:
        """The caller cancelled request ``request_id``: its turn is cancelled."""
        if self._streaming == request_id:
            self._streaming = None
            turn = self._turn
            if turn is not None:
                self._deny_pending(turn)
                self._end_own(turn)
        return self._drain()

    def observe(self, action: t.StateAction) -> HistoryOutput:
        """An action applied on the chat (any origin, the bridge's own echoes included)."""
        try:
            self._observe(action)
        except Exception:
            # totality: an action the bridge mishandles is logged, never raised into the host
            log.exception("history bridge: failed observing %r", action)
        return self._drain()

    # -- plumbing ----------------------------------------------------------------------

    def _drain(self) -> HistoryOutput:
        out = HistoryOutput(actions=tuple(self._actions), events=tuple(self._events))
        self._actions.clear()
        self._events.clear()
        return out

    def _act(self, action: t.StateAction) -> None:
        self._actions.append(AhpDispatch(self.chat, action))
        self._echoes.append(action)

    def _publish(self, tools: tuple[t.ToolDefinition, ...]) -> None:
        if tools == self._tools:
            return
        self._tools = tools
        self._actions.append(AhpDispatch(self.session, t.SessionActiveClientSetAction(
            active_client=t.SessionActiveClient(client_id=self.client_id, tools=tools))))

    def _reply_message(self) -> HistoryMessage | None:
        if not self._reply:
            return None
        return normalize(HistoryMessage("assistant", tuple(self._reply)))

    def _commit(self, provisional: Sequence[HistoryMessage]) -> None:
        self._committed.extend(provisional)
        self._owners.extend([self._provisional_turn] * len(provisional))
        self._provisional = []
        self._reply = []

    def _boundary(self, prefix: int) -> int:
        """The end of the last whole, ended turn within the first ``prefix`` messages.

        A turn's messages may go on into the provisional exchange (a tool
        result continues the turn that asked for it): such a turn is not whole.
        """
        owners = [*self._owners, *[self._provisional_turn] * len(self.provisional)]
        cut = 0
        for i, owner in enumerate(owners[:prefix]):
            following = owners[i + 1] if i + 1 < len(owners) else None
            if owner is None or (owner != following and owner in self._finished):
                cut = i + 1
        return cut

    def _truncate_to(self, cut: int) -> None:
        """``chat/truncated`` after the turn that ends at message ``cut``; forget the rest."""
        keep = next((o for o in reversed(self._owners[:cut]) if o in self._finished), None)
        dropped = [o for o in self._owners[cut:] if o is not None]
        if self._provisional_turn is not None:
            dropped.append(self._provisional_turn)
        if any(o in self._finished for o in dropped) or self._turn is not None:
            self._act(t.ChatTruncatedAction(turn_id=keep))
            self._turn = None
            if keep is None:
                self._finished.clear()
            else:
                ids = list(self._finished)
                self._finished = dict.fromkeys(ids[: ids.index(keep) + 1])
        self._committed = self._committed[:cut]
        self._owners = self._owners[:cut]
        self._provisional = []
        self._reply = []
        self._provisional_turn = None

    def _reject(self) -> None:
        """The caller left the provisional exchange: cancel its turn if it still runs."""
        turn = self._turn
        if turn is not None:
            self._deny_pending(turn)
            self._end_own(turn)
        self._reply = []

    def _deny_pending(self, turn: _Turn) -> None:
        # a refused confirmation says "denied" in the transcript rather than "skipped"
        for call_id, tool in turn.tools.items():
            if tool.status == "pending":
                tool.status = "done"
                self._act(t.ChatToolCallDeniedAction(
                    turn_id=turn.id, tool_call_id=call_id,
                    reason=t.ToolCallCancellationReason.DENIED))

    def _end_own(self, turn: _Turn) -> None:
        duration = max(0, self._clock() - turn.started_ms)
        self._act(t.ChatTurnCancelledAction(turn_id=turn.id, duration=duration))
        self._turn_ended(turn)

    def _turn_ended(self, turn: _Turn, *, kept: bool = True) -> None:
        """``turn`` is no longer active; ``kept``: it ended into the chat's ``turns`` (a turn
        replaced by another ``chat/turnStarted`` or cut by a truncation is gone)."""
        if self._turn is turn:
            self._turn = None
        if kept:
            self._finished[turn.id] = None

    def _prompt(self, request_id: RequestId, unseen: Sequence[HistoryMessage]) -> None:
        text = _render(unseen)
        if not text:
            self._events.append(ResponseComplete(request_id))
            self._provisional_turn = None
            return
        now = self._clock()
        turn = _Turn(self._new_id(), now)
        self._turn = turn
        self._provisional_turn = turn.id
        self._streaming = request_id
        self._act(t.ChatTurnStartedAction(
            turn_id=turn.id, started_at=iso_timestamp(now),
            message=t.Message(text=text, origin=t.MessageOrigin(kind=t.MessageKind.USER)),
        ))

    def _extend(self, request_id: RequestId, new: Sequence[HistoryMessage]) -> None:
        results = [p for m in new for p in m.content if isinstance(p, ToolResultPart)]
        asks = any(m.role == "user" and any(isinstance(p, TextPart) for p in m.content)
                   for m in new)
        turn = self._turn
        if not new:
            # the same history again (a retry): nothing new to ask or answer.  A reply still
            # streaming goes to this request; otherwise it is complete as it is
            if turn is not None and not any(p.announced for p in turn.pauses.values()):
                self._streaming = request_id
                self._announce(turn)
            else:
                self._events.append(ResponseComplete(request_id))
            return
        if asks or (turn is None and not results):
            if turn is not None:
                # a new question while the agent waits on the caller: Symposium's soft cancel
                self._deny_pending(turn)
                self._end_own(turn)
            self._prompt(request_id, new)
            return
        if turn is None:
            self._events.append(ResponseComplete(request_id))
            return
        answered = set()
        for result in results:
            pause = turn.pauses.get(result.tool_call_id)
            if pause is None or not pause.announced:
                log.info("history: a result for unknown tool call %r ignored",
                         result.tool_call_id)
                continue
            answered.add(result.tool_call_id)
            self._resolve(turn, result.tool_call_id, pause, result)
        for call_id, pause in list(turn.pauses.items()):
            if pause.announced and call_id not in answered:
                # announced, but the caller sent no result: it will not; let the agent go on
                self._resolve(turn, call_id, pause, None)
        self._streaming = request_id
        self._announce(turn)

    def _resolve(self, turn: _Turn, call_id: str, pause: _Pause,
                 result: ToolResultPart | None) -> None:
        del turn.pauses[call_id]
        if pause.kind == "input":
            request = turn.requests.pop(pause.target, None)
            if request is None:
                return
            response, answers = self._answers(request, result)
            self._act(t.ChatInputCompletedAction(request_id=pause.target, response=response,
                                                 answers=answers))
            return
        tool = turn.tools.get(pause.target)
        if tool is None:
            return
        if pause.kind == "confirm":
            if tool.status != "pending":
                return
            refused = result is None or result.is_error or (
                result.result.strip().lower() in _DENY)
            chosen = None if result is None else next(
                (o.id for o in tool.options
                 if result.result.strip() in (o.id, o.label)), None)
            if chosen is not None:
                refused = next(o.kind for o in tool.options if o.id == chosen) == (
                    t.ConfirmationOptionKind.DENY)
            if refused:
                tool.status = "done"
                self._act(t.ChatToolCallDeniedAction(
                    turn_id=turn.id, tool_call_id=pause.target,
                    reason=t.ToolCallCancellationReason.DENIED, selected_option_id=chosen))
            else:
                tool.status = "running"
                self._act(t.ChatToolCallApprovedAction(
                    turn_id=turn.id, tool_call_id=pause.target,
                    confirmed=t.ToolCallConfirmationReason.USER_ACTION,
                    selected_option_id=chosen))
                self._client_pause(turn, pause.target, tool)
            return
        if tool.status != "running":
            return
        tool.status = "done"
        failed = result is None or result.is_error
        text = "the caller sent no result" if result is None else result.result
        self._act(t.ChatToolCallCompleteAction(
            turn_id=turn.id, tool_call_id=pause.target,
            result=t.ToolCallResult(
                success=not failed,
                past_tense_message=f"Ran {tool.name}" if not failed else f"{tool.name} failed",
                content=(t.ToolResultTextContent(text=text),),
                error=t.ToolCallError(message=text) if failed else None,
            ),
        ))

    @staticmethod
    def _answers(request: t.ChatInputRequest, result: ToolResultPart | None
                 ) -> tuple[t.ChatInputResponseKind, Mapping[str, t.ChatInputAnswer] | None]:
        """The caller's answer text as AHP answers: a JSON object by question id, or a
        plain value for a request with one question."""
        if result is None or result.is_error:
            return t.ChatInputResponseKind.CANCEL, None
        questions = [q for q in request.questions or () if not isinstance(
            q, t.UnknownChatInputQuestion)]
        raw: dict[str, object]
        try:
            parsed = json.loads(result.result)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            raw = parsed
        elif len(questions) == 1:
            raw = {questions[0].id: parsed if parsed is not None else result.result}
        else:
            return t.ChatInputResponseKind.DECLINE, None
        answers: dict[str, t.ChatInputAnswer] = {}
        for question in questions:
            value = _answer_value(question, raw.get(question.id))
            if value is not None:
                answers[question.id] = t.ChatInputAnswered(
                    state=t.ChatInputAnswerState.SUBMITTED, value=value)
            elif question.required:
                return t.ChatInputResponseKind.DECLINE, None
        return t.ChatInputResponseKind.ACCEPT, answers or None

    # -- the agent's reply ---------------------------------------------------------------

    def _observe(self, action: t.StateAction) -> None:
        if action in self._echoes:
            self._echoes.remove(action)
            return
        turn = self._turn
        match action:
            case t.ChatTurnStartedAction(turn_id=turn_id):
                if turn is not None and turn.id != turn_id:
                    # another client started a turn: AHP replaced ours, which is gone
                    self._turn_ended(turn, kept=False)
                    self._stop("the turn was replaced")
                return
            case t.ChatTruncatedAction(turn_id=keep):
                if keep is None or keep not in self._finished:
                    # cut before everything, or after a turn that is not ours (which may or
                    # may not exist): assume the worst and forget them all.  Believing a turn
                    # gone when it is not only makes a later truncation keep less; believing
                    # it there when it is gone would make the bridge emit no-ops
                    self._finished.clear()
                else:
                    ids = list(self._finished)
                    self._finished = dict.fromkeys(ids[: ids.index(keep) + 1])
                if turn is not None:
                    self._turn_ended(turn, kept=False)
                    self._stop("the chat was truncated")
                return
            case _:
                pass
        if turn is None:
            return
        match action:
            case t.ChatResponsePartAction(turn_id=turn_id, part=part) if turn_id == turn.id:
                if isinstance(part, t.MarkdownResponsePart):
                    turn.parts[part.id] = "markdown"
                    self._say(TextPart(part.content))
                elif isinstance(part, t.ReasoningResponsePart):
                    turn.parts[part.id] = "reasoning"
                    self._say(ThinkingPart(part.content))
            case t.ChatDeltaAction(turn_id=turn_id, part_id=part_id, content=content):
                if turn_id == turn.id and turn.parts.get(part_id) == "markdown":
                    self._say(TextPart(content))
            case t.ChatReasoningAction(turn_id=turn_id, part_id=part_id, content=content):
                if turn_id == turn.id and turn.parts.get(part_id) == "reasoning":
                    self._say(ThinkingPart(content))
            case t.ChatToolCallStartAction(turn_id=turn_id, tool_call_id=call_id) if (
                turn_id == turn.id and call_id not in turn.tools
            ):
                contributor = action.contributor
                client = (contributor.client_id
                          if isinstance(contributor, t.ToolCallClientContributor) else None)
                turn.tools[call_id] = _Tool(action.tool_name, client)
            case t.ChatToolCallReadyAction(turn_id=turn_id, tool_call_id=call_id) if (
                turn_id == turn.id
            ):
                self._ready(turn, action)
            case t.ChatToolCallApprovedAction(turn_id=turn_id, tool_call_id=call_id) if (
                turn_id == turn.id
            ):
                tool = turn.tools.get(call_id)
                if tool is not None and tool.status == "pending":
                    tool.status = "running"
                    self._drop_pause(turn, call_id)
                    self._client_pause(turn, call_id, tool)
            case t.ChatToolCallDeniedAction(turn_id=turn_id, tool_call_id=call_id) | (
                t.ChatToolCallCompleteAction(turn_id=turn_id, tool_call_id=call_id)
            ) if turn_id == turn.id:
                tool = turn.tools.get(call_id)
                if tool is not None and tool.status in ("pending", "running"):
                    tool.status = "done"
                    self._drop_pause(turn, call_id)
            case t.ChatInputRequestedAction(request=request):
                turn.requests[request.id] = request
                if request.id not in turn.pauses:
                    turn.pauses[request.id] = _Pause("input", request.id)
                self._announce(turn)
            case t.ChatInputCompletedAction(request_id=request_id):
                if turn.requests.pop(request_id, None) is not None:
                    self._drop_pause(turn, request_id)
            case t.ChatTurnCompleteAction(turn_id=turn_id) if turn_id == turn.id:
                self._turn_ended(turn)
                self._finish(ResponseComplete)
            case t.ChatTurnCancelledAction(turn_id=turn_id) if turn_id == turn.id:
                self._turn_ended(turn)
                self._stop("the turn was cancelled")
            case t.ChatErrorAction(turn_id=turn_id, error=error) if turn_id == turn.id:
                self._turn_ended(turn)
                if self._streaming is not None:
                    self._events.append(ResponseError(self._streaming, error.message))
                    self._streaming = None
            case _:
                pass

    def _ready(self, turn: _Turn, action: t.ChatToolCallReadyAction) -> None:
        tool = turn.tools.get(action.tool_call_id)
        if tool is None or tool.status not in ("streaming", "running", "pending"):
            return
        tool.input = action.tool_input if isinstance(action.tool_input, str) else tool.input
        if action.confirmed is not None:
            tool.status = "running"
            self._drop_pause(turn, action.tool_call_id)
            self._client_pause(turn, action.tool_call_id, tool)
            return
        tool.status = "pending"
        tool.title = _text(action.confirmation_title) or _text(action.invocation_message)
        if action.options is not None:
            tool.options = action.options
        turn.pauses.setdefault(action.tool_call_id, _Pause("confirm", action.tool_call_id))
        self._announce(turn)

    def _client_pause(self, turn: _Turn, call_id: str, tool: _Tool) -> None:
        """A running call of a tool the caller offered: the caller runs it."""
        if tool.client != self.client_id:
            return
        turn.pauses[call_id] = _Pause("client", call_id)
        self._announce(turn)

    def _drop_pause(self, turn: _Turn, key: str) -> None:
        turn.pauses.pop(key, None)

    def _announce(self, turn: _Turn) -> None:
        """Stream every pause the caller has not seen, then end the stream (it must answer)."""
        request_id = self._streaming
        if request_id is None:
            return
        fresh = [(k, p) for k, p in turn.pauses.items() if not p.announced]
        if not fresh:
            return
        for call_id, pause in fresh:
            pause.announced = True
            self._say(self._pause_part(turn, call_id, pause))
        self._finish(ResponseComplete)

    def _pause_part(self, turn: _Turn, call_id: str, pause: _Pause) -> ToolCallPart:
        if pause.kind == "input":
            request = turn.requests.get(pause.target)
            questions: list[JsonValue] = []
            for question in (request.questions or ()) if request is not None else ():
                if isinstance(question, t.UnknownChatInputQuestion):
                    continue
                item: dict[str, JsonValue] = {"id": question.id, "kind": str(question.kind.value),
                                              "message": question.message,
                                              "required": bool(question.required)}
                if isinstance(question, (t.ChatInputSingleSelectQuestion,
                                         t.ChatInputMultiSelectQuestion)):
                    item["options"] = [{"id": o.id, "label": o.label} for o in question.options]
                questions.append(item)
            message = None if request is None else request.message
            return ToolCallPart(call_id, self._input_tool,
                                {"message": message, "questions": questions})
        tool = turn.tools[pause.target]
        if pause.kind == "client":
            return ToolCallPart(call_id, tool.name, _parse_input(tool.input))
        options: list[JsonValue] = [{"id": o.id, "label": o.label, "kind": str(o.kind)}
                                    for o in tool.options]
        return ToolCallPart(call_id, self._confirmation_tool, {
            "tool": tool.name, "title": tool.title, "input": tool.input, "options": options,
        })

    def _say(self, part: HistoryPart) -> None:
        request_id = self._streaming
        if request_id is None:
            return
        if isinstance(part, ThinkingPart) and not self._thinking:
            return
        if isinstance(part, (TextPart, ThinkingPart)) and not part.text:
            return
        self._reply.append(part)
        self._events.append(ResponsePart(request_id, part))

    def _finish(self, event: type[ResponseComplete]) -> None:
        if self._streaming is not None:
            self._events.append(event(self._streaming))
            self._streaming = None

    def _stop(self, reason: str) -> None:
        if self._streaming is not None:
            self._events.append(ResponseCancelled(self._streaming, reason))
            self._streaming = None


def _answer_value(question: t.ChatInputQuestion, raw: object) -> t.ChatInputAnswerValue | None:
    """One answer from a JSON value, if it fits the question."""
    if raw is None:
        return None
    if isinstance(question, t.ChatInputBooleanQuestion):
        if isinstance(raw, bool):
            return t.ChatInputBooleanAnswerValue(value=raw)
        if isinstance(raw, str) and raw.strip().lower() in ("yes", "true", "no", "false"):
            return t.ChatInputBooleanAnswerValue(value=raw.strip().lower() in ("yes", "true"))
        return None
    if isinstance(question, t.ChatInputNumberQuestion):
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            return t.ChatInputNumberAnswerValue(value=float(raw))
        return None
    if isinstance(question, t.ChatInputSingleSelectQuestion):
        for option in question.options:
            if raw in (option.id, option.label):
                return t.ChatInputSelectedAnswerValue(value=option.id)
        if question.allow_freeform_input and isinstance(raw, str):
            return t.ChatInputSelectedAnswerValue(value=raw, freeform_values=(raw,))
        return None
    if isinstance(question, t.ChatInputMultiSelectQuestion):
        picked = raw if isinstance(raw, list) else [raw]
        ids = [o.id for o in question.options for p in picked if p in (o.id, o.label)]
        return t.ChatInputSelectedManyAnswerValue(value=tuple(dict.fromkeys(ids))) if ids else None
    if isinstance(question, t.ChatInputTextQuestion) and isinstance(raw, (str, int, float)):
        return t.ChatInputTextAnswerValue(value=str(raw))
    return None


# -- many conversations ---------------------------------------------------------------------


class HistoryActor:
    """Routes stateless requests to conversations by their history (Symposium's actor).

    A request goes to the conversation its history extends, else to one
    whose provisional exchange it leaves (at least one message in common:
    an empty common prefix means an unrelated conversation, not a
    cancellation), preferring the longest common prefix and then the most
    recent.  A history that edits a conversation's *committed* messages
    starts a new conversation here: two unrelated chats may share their
    first messages, and truncating one for the other would destroy it.  A
    new conversation's chat URI comes from ``new_chat`` and is returned as
    :attr:`HistoryOutput.created_chat`.  At most ``max_conversations`` are
    kept (least recently used forgotten first, never one that streams).
    """

    def __init__(
        self,
        *,
        session: str,
        client_id: str,
        clock: Callable[[], int],
        new_id: Callable[[], str],
        new_chat: Callable[[], str],
        max_conversations: int = 64,
        include_thinking: bool = True,
        confirmation_tool: str = CONFIRMATION_TOOL,
        input_tool: str = INPUT_TOOL,
    ) -> None:
        if max_conversations < 1:
            raise ValueError("max_conversations must be positive")
        self.session = session
        self.client_id = client_id
        self._clock = clock
        self._new_id = new_id
        self._new_chat = new_chat
        self._max = max_conversations
        self._thinking = include_thinking
        self._confirmation_tool = confirmation_tool
        self._input_tool = input_tool
        self._conversations: dict[str, HistoryConversation] = {}
        """By chat URI, least recently used first."""
        self._tools: tuple[t.ToolDefinition, ...] | None = None

    @property
    def conversations(self) -> tuple[HistoryConversation, ...]:
        return tuple(self._conversations.values())

    def conversation(self, chat: str) -> HistoryConversation | None:
        return self._conversations.get(chat)

    def request(self, request_id: RequestId, messages: Sequence[HistoryMessage],
                tools: Sequence[t.ToolDefinition] | None = None) -> HistoryOutput:
        """Route a request; a new conversation when no history matches."""
        published: tuple[AhpDispatch, ...] = ()
        if tools is not None and tuple(tools) != self._tools:
            self._tools = tuple(tools)
            published = (AhpDispatch(self.session, t.SessionActiveClientSetAction(
                active_client=t.SessionActiveClient(client_id=self.client_id,
                                                    tools=self._tools))),)
        best: tuple[bool, int, int] | None = None
        chosen: HistoryConversation | None = None
        for rank, conversation in enumerate(self._conversations.values()):
            found = conversation.match(messages)
            known = len(conversation.committed) + len(conversation.provisional)
            if found.kind == "diverged-committed" or (found.prefix == 0 and known > 0):
                continue
            key = (found.kind == "extend", found.prefix, rank)
            if best is None or key > best:
                best, chosen = key, conversation
        created = None
        forgotten: list[str] = []
        if chosen is None:
            created = self._new_chat()
            chosen = HistoryConversation(session=self.session, chat=created,
                                         client_id=self.client_id, clock=self._clock,
                                         new_id=self._new_id, truncate=False,
                                         include_thinking=self._thinking,
                                         confirmation_tool=self._confirmation_tool,
                                         input_tool=self._input_tool)
            self._conversations[created] = chosen
        else:
            self._conversations.pop(chosen.chat)
            self._conversations[chosen.chat] = chosen
        out = chosen.request(request_id, messages)
        if created is not None:
            forgotten = self._evict()
        return HistoryOutput(actions=published + out.actions, events=out.events,
                             created_chat=created, forgotten=tuple(forgotten))

    def cancel(self, request_id: RequestId) -> HistoryOutput:
        """The caller cancelled ``request_id``."""
        for conversation in self._conversations.values():
            if conversation.streaming == request_id:
                return conversation.cancel(request_id)
        return HistoryOutput()

    def observe(self, chat: str, action: t.StateAction) -> HistoryOutput:
        """An action applied on ``chat``."""
        conversation = self._conversations.get(chat)
        return HistoryOutput() if conversation is None else conversation.observe(action)

    def _evict(self) -> list[str]:
        forgotten = []
        for chat, conversation in list(self._conversations.items()):
            if len(self._conversations) <= self._max:
                break
            if conversation.streaming is None:
                del self._conversations[chat]
                forgotten.append(chat)
        return forgotten
