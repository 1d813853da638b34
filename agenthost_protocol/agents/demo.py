"""The demo agent: a deterministic AHP agent that needs no model, sans-I/O.

:class:`DemoAgent` drives a :class:`~agenthost_protocol.host.Host`: it answers
the commands the host core leaves to the embedder (``createSession``,
``listSessions``, ``createChat`` ...) and plays a fixed script for every turn
a client starts.  It reads no clock (it uses ``host.now()``), opens no socket,
starts no task and sleeps nowhere: each turn is a queue of *steps*, and
whoever embeds the agent decides when the next step runs
(:meth:`DemoAgent.step`), e.g. a few milliseconds apart in
:mod:`agenthost_protocol.aio` or all at once in a test.  The same events and
steps in the same order give the same host state.

The script of a turn whose user message is ``TEXT`` (``T`` is the turn id):

1. when the turn starts: ``session/titleChanged`` to the message's first line
   if the session has no title yet;
2. ``chat/responsePart``: a reasoning part ``T.reasoning``, then
   ``chat/reasoning`` deltas streaming a sentence about the message;
3. ``chat/responsePart``: a markdown part ``T.reply``, then ``chat/delta``\\ s
   streaming ``You said:``, ``TEXT`` as a block quote and an announcement of
   the tool call (pieces of at least 4 words, at most 16 pieces);
4. ``chat/toolCallStart`` (``T.echo``, tool ``echo``), then
   ``chat/toolCallReady`` without ``confirmed``: the call waits in
   ``pending-confirmation`` for a client's ``chat/toolCallConfirmed``;
5. approved: ``chat/toolCallComplete`` with a successful result whose content
   is ``TEXT``, then a markdown part ``T.done`` saying so; denied (the reducer
   cancels the call): a markdown part ``T.done`` saying it did not run;
6. ``chat/turnComplete`` with the turn's ``duration`` by the host's clock.

A client's ``chat/turnCancelled`` (or anything else that ends or replaces the
turn) stops the script at once.  After every change of a chat's summary
fields the agent mirrors them into the session's catalogue
(``session/chatUpdated``), and after every change of a session's summary it
sends ``root/sessionSummaryChanged``.  A chat with no active turn starts its
first queued message (``chat/pendingMessageRemoved`` then ``chat/turnStarted``
with ``queuedMessageId``), as the spec says a host should; so does a
``createChat`` with an ``initialMessage``.  ``docs/serve.md`` has the details.

Every action the agent dispatches is one the reducers apply: before each step
it checks that the turn is still the chat's active turn, and the tool call's
status before completing it.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Callable
from enum import Enum
from typing import Final, TypeAlias

from .. import types as t
from ..channels import ROOT_CHANNEL, ChannelKind, channel_kind
from ..errors import LocalProtocolError
from ..host import ClientActionApplied, Event, Host, RequestReceived
from ..host.sessions import iso
from ..types.error_codes import AhpErrorCode, JsonRpcErrorCode

__all__ = [
    "DEMO_MODEL",
    "DEMO_PROVIDER",
    "DemoAgent",
    "TurnPhase",
    "TurnRun",
    "demo_agent_info",
    "demo_root_state",
]

DEMO_PROVIDER: Final = "demo"
"""The provider id of the demo agent in the root state."""

DEMO_MODEL: Final = t.SessionModelInfo(id="demo-echo", provider=DEMO_PROVIDER, name="Demo echo")
"""The one model the demo agent lists."""

TOOL_NAME: Final = "echo"
WORDS_PER_PIECE: Final = 4
MAX_PIECES: Final = 16
TITLE_LENGTH: Final = 60


def demo_agent_info() -> t.AgentInfo:
    """The demo agent as the root state lists it (multi-chat, fork and side chats)."""
    return t.AgentInfo(
        provider=DEMO_PROVIDER,
        display_name="Demo agent",
        description="A deterministic agent that echoes your message and runs one tool "
        "call that needs your confirmation.",
        models=(DEMO_MODEL,),
        capabilities=t.AgentCapabilities(
            multiple_chats=t.MultipleChatsCapability(fork=True, side_chat=True)
        ),
    )


def demo_root_state() -> t.RootState:
    """The root state of a host that runs only the demo agent."""
    return t.RootState(agents=(demo_agent_info(),), active_sessions=0)


class TurnPhase(str, Enum):
    """Where a turn of the script is."""

    STREAMING = "streaming"
    """Steps 2-4 are being played."""
    AWAITING_CONFIRMATION = "awaiting-confirmation"
    """The tool call waits for a client's ``chat/toolCallConfirmed``: no step is ready."""
    FINISHING = "finishing"
    """The tool call was resolved; steps 5-6 are being played."""
    DONE = "done"
    """The turn ended (completed, cancelled, replaced, or its chat went away)."""


class _End:
    """The last step: ``chat/turnComplete`` with the duration at the time it runs."""


_END: Final = _End()
_Step: TypeAlias = "t.StateAction | _End"


class TurnRun:
    """One turn the agent is playing: the steps left and where it is.

    Made by the agent; read :attr:`chat`, :attr:`turn_id`, :attr:`phase`
    and :attr:`runnable`, and pass it back to :meth:`DemoAgent.step`.
    """

    __slots__ = ("_steps", "chat", "phase", "started_ms", "text", "turn_id")

    def __init__(self, chat: str, turn_id: str, text: str, started_ms: int) -> None:
        self.chat = chat
        self.turn_id = turn_id
        self.text = text
        """The user message the turn answers."""
        self.started_ms = started_ms
        """``host.now()`` when the agent saw the turn start (the duration counts from it)."""
        self.phase = TurnPhase.STREAMING
        self._steps: deque[_Step] = deque()

    def __repr__(self) -> str:
        return f"<TurnRun {self.chat} {self.turn_id!r} {self.phase.value} steps={len(self._steps)}>"

    @property
    def runnable(self) -> bool:
        """Whether :meth:`DemoAgent.step` has a step to play now."""
        return self.phase in (TurnPhase.STREAMING, TurnPhase.FINISHING) and bool(self._steps)

    @property
    def steps_left(self) -> int:
        """How many steps are queued (the count grows when the tool call is resolved)."""
        return len(self._steps)


def _pieces(text: str) -> list[str]:
    """``text`` cut after whitespace into at most ``MAX_PIECES`` pieces of whole words."""
    words = [w for w in re.split(r"(?<=\s)(?=\S)", text) if w]
    size = max(WORDS_PER_PIECE, -(-len(words) // MAX_PIECES))
    return ["".join(words[i : i + size]) for i in range(0, len(words), size)]


def _quote(text: str) -> str:
    if not text.strip():
        return "> (an empty message)"
    return "\n".join("> " + line if line else ">" for line in text.splitlines())


def _title(text: str) -> str:
    line = next((s.strip() for s in text.splitlines() if s.strip()), "")
    if not line:
        return "Demo chat"
    return line if len(line) <= TITLE_LENGTH else line[: TITLE_LENGTH - 1].rstrip() + "…"


def _reasoning(text: str) -> str:
    return (
        f"The user wrote {len(text)} characters. I will repeat them, then ask before "
        f"running the {TOOL_NAME} tool on them."
    )


def _reply(text: str) -> str:
    return (
        f"You said:\n\n{_quote(text)}\n\nNow I will run the `{TOOL_NAME}` tool on your "
        "message. It needs your confirmation."
    )


APPROVED_TEXT: Final = f"The `{TOOL_NAME}` tool returned your message. Done."
DENIED_TEXT: Final = f"You denied the `{TOOL_NAME}` tool call, so it did not run. Done."




class DemoAgent:
    """The demo agent, driving ``host`` (whose root state should list :func:`demo_agent_info`).

    Hand it every host event with :meth:`handle`; play the turns' steps
    with :meth:`step` (:meth:`runnable` says which turns have one ready).
    """

    def __init__(self, host: Host) -> None:
        self._host = host
        self._runs: dict[str, TurnRun] = {}
        self._owner: dict[str, str] = {}
        """chat URI -> session URI, for the chats the agent knows."""
        self._announced: dict[str, t.SessionSummary] = {}
        """The summary each session was last announced with (sessionAdded / SummaryChanged)."""
        self._turns = 0
        self._commands: dict[str, Callable[[RequestReceived], None]] = {
            "createSession": self._create_session,
            "disposeSession": self._dispose_session,
            "createChat": self._create_chat,
            "disposeChat": self._dispose_chat,
            "listSessions": self._host.answer_list_sessions,
            "fetchTurns": self._fetch_turns,
            "completions": self._completions,
            "resolveSessionConfig": self._resolve_session_config,
            "sessionConfigCompletions": self._session_config_completions,
            "authenticate": self._authenticate,
        }

    @property
    def host(self) -> Host:
        return self._host

    @property
    def runs(self) -> tuple[TurnRun, ...]:
        """The turns being played (one per chat at most), in start order."""
        return tuple(self._runs.values())

    def runnable(self) -> tuple[TurnRun, ...]:
        """The turns with a step ready to play."""
        return tuple(run for run in self._runs.values() if run.runnable)

    # -- events --------------------------------------------------------------------

    def handle(self, event: Event) -> None:
        """React to one host event (requests are answered before this returns)."""
        if isinstance(event, RequestReceived):
            command = self._commands.get(event.method)
            if command is None:
                event.responder.error(
                    JsonRpcErrorCode.METHOD_NOT_FOUND,
                    f"the demo agent does not support {event.method}",
                )
            else:
                command(event)
        elif isinstance(event, ClientActionApplied):
            self._client_action(event.envelope)

    def _client_action(self, envelope: t.ActionEnvelope) -> None:
        uri = envelope.channel
        kind = channel_kind(uri)
        if kind is ChannelKind.SESSION:
            self._announce(uri)
            return
        if kind is not ChannelKind.CHAT:
            return
        self._mirror(uri)
        action = envelope.action
        run = self._runs.get(uri)
        if isinstance(action, t.ChatTurnStartedAction):
            if run is not None:
                self._drop(run)
            self._start_run(uri, action.turn_id, action.message.text)
        elif run is not None:
            self._resync(run)
        self._consume_queued(uri)

    # -- playing turns -------------------------------------------------------------

    def step(self, run: TurnRun) -> bool:
        """Play the next step of ``run``; whether another one is ready after it.

        A run that is not runnable (waiting for confirmation, done) is left
        alone; a run whose turn is no longer the chat's active turn is ended.
        """
        if not run.runnable:
            return False
        if not self._is_live(run):
            self._drop(run)
            return False
        item = run._steps.popleft()
        if isinstance(item, _End):
            duration = max(0, self._host.now() - run.started_ms)
            self._dispatch(run.chat, t.ChatTurnCompleteAction(turn_id=run.turn_id,
                                                              duration=duration))
            self._drop(run)
            self._consume_queued(run.chat)
            return False
        if self._applies(run, item):
            self._dispatch(run.chat, item)
        if isinstance(item, t.ChatToolCallReadyAction):
            run.phase = TurnPhase.AWAITING_CONFIRMATION
            self._resync(run)
        return run.runnable

    def _start_run(self, chat: str, turn_id: str, text: str) -> None:
        session = self._owner.get(chat)
        if session is not None:
            state = self._host.state(session)
            if isinstance(state, t.SessionState) and not state.title:
                self._host.dispatch(session, t.SessionTitleChangedAction(title=_title(text)))
                self._announce(session)
        run = TurnRun(chat, turn_id, text, self._host.now())
        reasoning_id, reply_id = f"{turn_id}.reasoning", f"{turn_id}.reply"
        steps: list[_Step] = [t.ChatResponsePartAction(
            turn_id=turn_id, part=t.ReasoningResponsePart(id=reasoning_id, content=""),
        )]
        steps += [t.ChatReasoningAction(turn_id=turn_id, part_id=reasoning_id, content=piece)
                  for piece in _pieces(_reasoning(text))]
        steps.append(t.ChatResponsePartAction(
            turn_id=turn_id, part=t.MarkdownResponsePart(id=reply_id, content=""),
        ))
        steps += [t.ChatDeltaAction(turn_id=turn_id, part_id=reply_id, content=piece)
                  for piece in _pieces(_reply(text))]
        steps.append(t.ChatToolCallStartAction(
            turn_id=turn_id, tool_call_id=self._tool_call_id(run), tool_name=TOOL_NAME,
            display_name="Echo", intention="Echo your message back",
        ))
        steps.append(t.ChatToolCallReadyAction(
            turn_id=turn_id, tool_call_id=self._tool_call_id(run),
            invocation_message="Echo your message back",
            tool_input=json.dumps({"text": text}, ensure_ascii=False),
            confirmation_title=f"Run the {TOOL_NAME} tool?",
        ))
        run._steps.extend(steps)
        self._runs[chat] = run

    @staticmethod
    def _tool_call_id(run: TurnRun) -> str:
        return f"{run.turn_id}.{TOOL_NAME}"

    def _resync(self, run: TurnRun) -> None:
        """Follow the chat's state: end a run whose turn is gone, resume a resolved tool call."""
        if not self._is_live(run):
            self._drop(run)
            return
        if run.phase is not TurnPhase.AWAITING_CONFIRMATION:
            return
        call = self._tool_call(run)
        if isinstance(call, t.ToolCallPendingConfirmationState):
            return
        done_id = f"{run.turn_id}.done"
        steps: list[_Step] = []
        if isinstance(call, t.ToolCallRunningState):
            steps.append(t.ChatToolCallCompleteAction(
                turn_id=run.turn_id, tool_call_id=self._tool_call_id(run),
                result=t.ToolCallResult(
                    success=True, past_tense_message="Echoed your message",
                    content=(t.ToolResultTextContent(text=run.text),),
                ),
            ))
        if isinstance(call, (t.ToolCallRunningState, t.ToolCallCompletedState)):
            steps.append(self._closing(run, done_id, APPROVED_TEXT))
        elif isinstance(call, t.ToolCallCancelledState):
            steps.append(self._closing(run, done_id, DENIED_TEXT))
        steps.append(_END)
        run._steps.clear()
        run._steps.extend(steps)
        run.phase = TurnPhase.FINISHING

    @staticmethod
    def _closing(run: TurnRun, part_id: str, text: str) -> t.ChatResponsePartAction:
        return t.ChatResponsePartAction(
            turn_id=run.turn_id, part=t.MarkdownResponsePart(id=part_id, content=text)
        )

    def _applies(self, run: TurnRun, action: t.StateAction) -> bool:
        """Whether the reducer would apply ``action`` (the turn is known to be live)."""
        if isinstance(action, t.ChatToolCallCompleteAction):
            return isinstance(self._tool_call(run), t.ToolCallRunningState)
        return True

    def _is_live(self, run: TurnRun) -> bool:
        chat = self._chat(run.chat)
        return (
            self._runs.get(run.chat) is run
            and chat is not None
            and chat.active_turn is not None
            and chat.active_turn.id == run.turn_id
        )

    def _tool_call(self, run: TurnRun) -> t.ToolCallState | None:
        chat = self._chat(run.chat)
        if chat is None or chat.active_turn is None:
            return None
        wanted = self._tool_call_id(run)
        for part in chat.active_turn.response_parts:
            if isinstance(part, t.ToolCallResponsePart) and (
                getattr(part.tool_call, "tool_call_id", None) == wanted
            ):
                return part.tool_call
        return None

    def _drop(self, run: TurnRun) -> None:
        run.phase = TurnPhase.DONE
        run._steps.clear()
        if self._runs.get(run.chat) is run:
            del self._runs[run.chat]

    def _consume_queued(self, chat: str) -> None:
        state = self._chat(chat)
        if state is None or state.active_turn is not None or not state.queued_messages:
            return
        first = state.queued_messages[0]
        self._start_server_turn(chat, first.message, queued_id=first.id)

    def _start_server_turn(
        self, chat: str, message: t.Message, *, queued_id: str | None = None
    ) -> None:
        state = self._chat(chat)
        if state is None:
            return
        taken = {turn.id for turn in state.turns}
        if state.active_turn is not None:
            taken.add(state.active_turn.id)
        while True:
            self._turns += 1
            turn_id = f"demo-turn-{self._turns}"
            if turn_id not in taken:
                break
        if queued_id is not None:
            self._dispatch(chat, t.ChatPendingMessageRemovedAction(
                kind=t.PendingMessageKind.QUEUED, id=queued_id
            ))
        self._dispatch(chat, t.ChatTurnStartedAction(
            turn_id=turn_id, started_at=iso(self._host.now()), message=message,
            queued_message_id=queued_id,
        ))
        old = self._runs.get(chat)
        if old is not None:
            self._drop(old)
        self._start_run(chat, turn_id, message.text)

    # -- keeping summaries in step ---------------------------------------------------

    def _dispatch(self, chat: str, action: t.StateAction) -> None:
        # the echo of a long message goes by reference, as any agent's big output
        self._host.dispatch(chat, self._host.by_reference(action))
        self._mirror(chat)

    def _mirror(self, chat: str) -> None:
        """``session/chatUpdated`` with the chat's summary fields the catalogue lacks."""
        session_uri = self._owner.get(chat)
        if session_uri is None:
            return
        self._host.mirror_chat(session_uri, chat)
        self._announce(session_uri)

    def _announce(self, session: str) -> None:
        """``root/sessionSummaryChanged`` with what changed since the last announcement."""
        old = self._announced.get(session)
        if old is not None and self._session(session) is not None:
            self._announced[session] = self._host.announce_summary(session, old)

    def _count_sessions(self) -> None:
        self._host.dispatch(
            ROOT_CHANNEL, t.RootActiveSessionsChangedAction(active_sessions=len(self._announced))
        )

    # -- commands --------------------------------------------------------------------

    def _create_session(self, event: RequestReceived) -> None:
        params = event.params
        if not isinstance(params, t.CreateSessionParams):
            raise LocalProtocolError(f"{event.method} is not createSession")
        uri = params.channel
        if channel_kind(uri) is not ChannelKind.SESSION:
            event.responder.error(JsonRpcErrorCode.INVALID_PARAMS,
                                  f"{uri!r} is not a session URI (ahp-session:/<id>)")
            return
        if self._host.has_channel(uri):
            event.responder.error(AhpErrorCode.SESSION_ALREADY_EXISTS, f"{uri!r} exists")
            return
        if params.provider is not None and params.provider != DEMO_PROVIDER:
            event.responder.error(AhpErrorCode.PROVIDER_NOT_FOUND,
                                  f"no provider {params.provider!r}; this host has "
                                  f"{DEMO_PROVIDER!r}")
            return
        if params.fork is not None:
            event.responder.error(JsonRpcErrorCode.INVALID_PARAMS,
                                  "the demo agent cannot fork sessions")
            return
        # without multipleWorkingDirectories only the first entry counts (spec)
        directories = params.working_directories[:1] if params.working_directories else None
        self._host.create_session(uri, provider=DEMO_PROVIDER, working_directories=directories)
        event.responder.respond(None)
        chat = self._free_chat_uri(uri)
        self._owner[chat] = uri
        self._announced[uri] = self._host.ready_session(uri, default_chat=chat)
        if params.active_client is not None:
            self._host.dispatch(uri, t.SessionActiveClientSetAction(
                active_client=params.active_client
            ))
        self._count_sessions()
        if params.progress_token is not None:
            # no long work to report, but a token asks for a final frame
            self._host.notify("root/progress", t.ProgressParams(
                channel=ROOT_CHANNEL, progress_token=params.progress_token, progress=1, total=1,
            ))

    def _free_chat_uri(self, session: str) -> str:
        base = "ahp-chat:/" + session.removeprefix("ahp-session:/")
        uri, n = base, 1
        while self._host.has_channel(uri):
            n += 1
            uri = f"{base}-{n}"
        return uri

    def _dispose_session(self, event: RequestReceived) -> None:
        params = event.params
        if not isinstance(params, t.DisposeSessionParams):
            raise LocalProtocolError(f"{event.method} is not disposeSession")
        uri = params.channel
        if self._session(uri) is None:
            event.responder.error(AhpErrorCode.SESSION_NOT_FOUND, f"no session {uri!r}")
            return
        for chat in [c for c, owner in self._owner.items() if owner == uri]:
            del self._owner[chat]
            run = self._runs.get(chat)
            if run is not None:
                self._drop(run)
        self._host.dispose_session(uri)
        if self._announced.pop(uri, None) is not None:
            self._count_sessions()
        event.responder.respond(None)

    def _create_chat(self, event: RequestReceived) -> None:
        params = event.params
        if not isinstance(params, t.CreateChatParams):
            raise LocalProtocolError(f"{event.method} is not createChat")
        if self._host.answer_create_chat(event) is None:
            return
        self._owner[params.chat] = params.channel
        self._announce(params.channel)
        if params.initial_message is not None:
            self._start_server_turn(params.chat, params.initial_message)

    def _dispose_chat(self, event: RequestReceived) -> None:
        params = event.params
        if not isinstance(params, t.DisposeChatParams):
            raise LocalProtocolError(f"{event.method} is not disposeChat")
        chat = params.channel
        if self._chat(chat) is None:
            event.responder.error(AhpErrorCode.NOT_FOUND, f"no chat {chat!r}")
            return
        run = self._runs.get(chat)
        if run is not None:
            self._drop(run)
        session = self._owner.pop(chat, None)
        self._host.remove_channel(chat)
        if session is not None and self._session(session) is not None:
            self._host.dispatch(session, t.SessionChatRemovedAction(chat=chat))
            self._announce(session)
        event.responder.respond(None)

    def _fetch_turns(self, event: RequestReceived) -> None:
        self._host.fetch_turns(event, ())  # the agent keeps no turns the state lacks

    def _completions(self, event: RequestReceived) -> None:
        event.responder.respond(t.CompletionsResult(items=()))

    def _resolve_session_config(self, event: RequestReceived) -> None:
        schema = t.SessionConfigSchema(properties={})
        event.responder.respond(t.ResolveSessionConfigResult(schema=schema, values={}))

    def _session_config_completions(self, event: RequestReceived) -> None:
        event.responder.respond(t.SessionConfigCompletionsResult(items=()))

    def _authenticate(self, event: RequestReceived) -> None:
        # the spec: the resource must be one the host advertised, and the demo advertises none
        event.responder.error(JsonRpcErrorCode.INVALID_PARAMS,
                              "the demo agent has no protected resources")

    # -- reading the host ------------------------------------------------------------

    def _chat(self, uri: str) -> t.ChatState | None:
        if not self._host.has_channel(uri):
            return None
        state = self._host.state(uri)
        return state if isinstance(state, t.ChatState) else None

    def _session(self, uri: str) -> t.SessionState | None:
        if not self._host.has_channel(uri):
            return None
        state = self._host.state(uri)
        return state if isinstance(state, t.SessionState) else None
