"""The protocol side of an :class:`~agenthost_protocol.agent.Agent`: :class:`AgentDriver`.

It is a :class:`~agenthost_protocol.aio.HostServer`'s event handler and does
what every agent needs and none should write:

* ``createSession`` (ready, with a default chat, the active client set),
  ``disposeSession``, ``createChat`` (forks and side chats; an initial
  message starts a turn), ``disposeChat``, ``listSessions``, ``fetchTurns``;
  the small commands answered with empty results; ``authenticate`` -32602
  (no protected resource is advertised); anything else -32601.  Every
  request is answered.
* a task per turn running the agent's ``turn`` coroutine, cancelled when a
  client cancels the turn, a new turn replaces it, its chat goes away or
  anything else leaves the chat without it (``chat/truncated``); a normal
  return ends the turn (``chat/turnComplete`` with its duration), an
  exception fails it (``chat/error`` with its text, repaired and cut to
  4 KiB by :func:`.dispatch.error_text`, the traceback logged), and the host
  goes on.  A task that catches its cancellation plays no more: what it
  does afterwards is dropped, and :meth:`AgentDriver.close` abandons it
  after :attr:`~AgentDriver.close_timeout`.  Queued messages start the next turn.  A session
  without a title gets one when a turn starts: the agent's
  :meth:`~.base.Agent.title_for` of its message.
* confirmations and input requests as futures the turn awaits (a client
  that completes a call waiting for confirmation approves it); session
  summaries kept in step (``session/chatUpdated``,
  ``root/sessionSummaryChanged``, ``activeSessions``); large tool outputs
  sent by reference; the server flushed after every step.

An agent that keeps state of its own gets hooks: ``create_session`` (async,
may fail the session), ``dispose_session`` (async), ``client_action``
(every client action on a session or chat), ``manages_chats`` (the agent
keeps confirmations, inputs and queued messages itself); and it dispatches
what it computed with :meth:`AgentDriver.dispatch_actions` and updates its
models with :meth:`AgentDriver.set_models`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Final, TypeVar

import attrs

from .. import types as t
from ..channels import ROOT_CHANNEL, ChannelKind, channel_kind
from ..errors import LocalProtocolError
from ..host import ClientActionApplied, Event, Host, RequestReceived
from ..host.sessions import iso
from ..types.error_codes import AhpErrorCode, JsonRpcErrorCode
from .base import Agent, AgentError, NewSession
from .dispatch import bounded_text, dispatch_agent_action, error_name, error_text
from .turn import Turn

if TYPE_CHECKING:
    from ..aio.terminals import TerminalService

__all__ = ["CLOSE_TIMEOUT", "NOT_SERVED", "UNSENDABLE_ERROR", "AgentDriver"]

log = logging.getLogger(__name__)

CLOSE_TIMEOUT: Final = 3.0
"""Seconds :meth:`AgentDriver.close` waits for the turns it cancelled, the sessions
being set up or resumed and the ``dispose_session`` hooks still running; what has
not ended by then is logged and abandoned (``serve --close-timeout``)."""

UNSENDABLE_ERROR: Final = ("the agent failed, and its error could not be sent "
                           "(the host's log has it)")
"""The text of the ``chat/error`` that ends a failed turn when even the repaired and
cut error text could not be dispatched."""

_QUEUED_BY_LIMIT: Final = 10_000
"""Queued messages whose sender's principal is remembered until their turn starts; the
oldest is forgotten past this (its turn then has no principal)."""

_HELD_LIMIT: Final = 1000
"""Client actions one session may have waiting for its resume; more are dropped."""

NOT_SERVED: Final = "ProviderNotServed"
"""The ``errorType`` of the ``chat/error`` that ends a turn in another agent's session
(its ``provider`` is not this agent's): the store holds it, no agent here plays it."""
_PROVIDER_SHOWN: Final = 80
"""The most characters of a stored provider id quoted in that error."""

A = TypeVar("A")
R = TypeVar("R")


class AgentDriver:
    """Drives ``agent`` on ``host``; ``flush`` sends what the host queued (the
    server's ``flush``).  Install :meth:`handle` as the server's handler."""

    def __init__(self, agent: Agent, host: Host, flush: Callable[[], None], *,
                 close_timeout: float = CLOSE_TIMEOUT) -> None:
        self.agent = agent
        self.close_timeout = close_timeout
        """Seconds :meth:`close` waits for what it stops (:data:`CLOSE_TIMEOUT`)."""
        self.host = host
        self._flush = flush
        self.terminals: TerminalService | None = None
        """The host's terminals, where ``Turn.run`` runs commands (``None``: none;
        ``serve`` sets it unless ``--no-terminals``)."""
        agent._driver = self
        info = agent.info()
        self._provider = info.provider
        self._one_chat = info.capabilities is None or info.capabilities.multiple_chats is None
        self._deferred = type(agent).create_session is not Agent.create_session
        """The agent sets its sessions up itself: they are ready once it is done."""
        self._creating: dict[str, asyncio.Task[None]] = {}
        """Sessions being set up by the agent -> the task waiting for it."""
        self._hooks: set[asyncio.Task[None]] = set()
        self._tasks: dict[str, tuple[Turn, asyncio.Task[None]]] = {}
        """chat -> (its turn, the task playing it)."""
        self._owner: dict[str, str] = {}
        """chat -> its session."""
        self._announced: dict[str, t.SessionSummary] = {}
        self._resuming: dict[str, asyncio.Task[str | None]] = {}
        """Stored sessions used again in this run -> the agent's resume_session."""
        self._abandoned: set[asyncio.Task[str | None]] = set()
        self._stopping: dict[asyncio.Task[None], Turn] = {}
        """Tasks of turns no longer played that were cancelled and have not ended yet."""
        self._held: dict[str, list[tuple[t.ActionEnvelope, object]]] = {}
        """Sessions whose resume runs -> the client actions on them (with the principal
        that sent each), given to the agent once it is done (what they ask for needs
        what it sets up)."""
        self._queued_by: dict[tuple[str, str], object] = {}
        """(chat, queued message id) -> the principal that queued it, for its turn."""
        self._confirmations: dict[tuple[str, str, str], asyncio.Future[bool]] = {}
        self._inputs: dict[tuple[str, str], asyncio.Future[t.ChatInputCompletedAction]] = {}
        self._turns = 0
        self._closed = False
        if host.store is not None:
            self._count_stored_sessions()  # the root's count includes what was stored
        self._commands: dict[str, Callable[[RequestReceived], object]] = {
            "createSession": self._create_session,
            "disposeSession": self._dispose_session,
            "createChat": self._create_chat,
            "disposeChat": self._dispose_chat,
            "listSessions": host.answer_list_sessions,
            "fetchTurns": lambda event: host.fetch_turns(event, ()),
            "completions": lambda event: event.responder.respond(t.CompletionsResult(items=())),
            "resolveSessionConfig": lambda event: event.responder.respond(
                t.ResolveSessionConfigResult(schema=t.SessionConfigSchema(properties={}),
                                             values={})),
            "sessionConfigCompletions": lambda event: event.responder.respond(
                t.SessionConfigCompletionsResult(items=())),
            # the spec: the resource must be one the host advertised, and none is
            "authenticate": lambda event: event.responder.error(
                JsonRpcErrorCode.INVALID_PARAMS, "this agent has no protected resources"),
        }

    @property
    def playing(self) -> int:
        """Turns whose task runs now."""
        return len(self._tasks)

    # -- the server's handler ---------------------------------------------------------

    def handle(self, event: Event) -> None:
        if isinstance(event, RequestReceived):
            channel = getattr(event.params, "channel", None)
            if isinstance(channel, str) and event.method != "disposeSession":
                # disposing a stored session needs no agent: nothing is resumed for it
                self._adopt(channel)
            command = self._commands.get(event.method)
            if command is None:
                event.responder.error(JsonRpcErrorCode.METHOD_NOT_FOUND,
                                      f"this agent does not support {event.method}")
                return
            later = command(event)
            if later is not True and not event.responder.answered:
                log.error("%s was left unanswered by the agent layer; answered "
                          "InternalError", event.method)
                event.responder.error(JsonRpcErrorCode.INTERNAL_ERROR,
                                      f"{event.method} was not answered")
        elif isinstance(event, ClientActionApplied):
            # the connection object outlives its socket: a sender gone since still has one
            self._client_action(event.envelope, event.connection.principal)

    def _client_action(self, envelope: t.ActionEnvelope, principal: object) -> None:
        uri, action = envelope.channel, envelope.action
        kind = channel_kind(uri)
        if kind is not ChannelKind.SESSION and kind is not ChannelKind.CHAT:
            return
        self._adopt(uri)
        session = uri if kind is ChannelKind.SESSION else self._owner.get(uri)
        if session is None or session not in self._announced:
            refusal = self._not_ours(uri if kind is ChannelKind.SESSION
                                     else self.host.owner_of(uri))
            if refusal is not None:
                # another agent's session (a store shared with it): readable, never played
                if kind is ChannelKind.CHAT:
                    self._refuse(uri, action, refusal)
                return
        held = self._held.get(session) if session is not None else None
        if held is not None:
            if len(held) < _HELD_LIMIT:
                held.append((envelope, principal))
            else:
                log.warning("session %s: %d client actions wait for its resume; %s dropped",
                            session, _HELD_LIMIT, action.type)
            return
        try:
            self.agent.client_action_by(uri, action, principal)
        except Exception:
            log.exception("the agent's client_action hook failed on %s", action.type)
        if kind is ChannelKind.SESSION:
            self._announce(uri)
            return
        self._mirror(uri)
        manages = type(self.agent).manages_chats
        match action:
            case t.ChatTurnStartedAction(turn_id=turn_id, message=message):
                self._start(uri, turn_id, message, principal)
            case t.ChatTurnCancelledAction(turn_id=turn_id):
                self._stop(uri, turn_id)
            case _ if manages:
                pass
            case t.ChatPendingMessageSetAction(kind=t.PendingMessageKind.QUEUED, id=queued):
                self._remember_queued(uri, queued, principal)
            case t.ChatPendingMessageRemovedAction(kind=t.PendingMessageKind.QUEUED, id=queued):
                self._queued_by.pop((uri, queued), None)
            case t.ChatToolCallApprovedAction(turn_id=turn_id, tool_call_id=call_id):
                self._decide(uri, turn_id, call_id, True)
            case t.ChatToolCallDeniedAction(turn_id=turn_id, tool_call_id=call_id):
                self._decide(uri, turn_id, call_id, False)
            case t.ChatToolCallCompleteAction(turn_id=turn_id, tool_call_id=call_id):
                # a client ran the call itself (the reducer allows it from pending-confirmation)
                self._decide(uri, turn_id, call_id, True)
            case t.ChatInputCompletedAction(request_id=request_id):
                future = self._inputs.pop((uri, request_id), None)
                if future is not None and not future.done():
                    future.set_result(action)
            case _:
                pass
        entry = self._tasks.get(uri)
        if entry is not None and not self._is_active(uri, entry[0].id):
            self._stop(uri)  # the chat lost the turn (truncated ...): stop playing it
        self._consume_queued(uri)

    # -- another agent's sessions (a store it shared) -----------------------------------

    def _not_ours(self, session: str | None) -> str | None:
        """Why this agent does not play ``session``: another provider's; ``None`` if ours
        (or not a session)."""
        if session is None or not self.host.has_channel(session):
            return None
        state = self.host.state(session)
        if not isinstance(state, t.SessionState) or state.provider == self._provider:
            return None
        return (f"this session belongs to provider {state.provider[:_PROVIDER_SHOWN]!r}, "
                f"and this host serves {self._provider[:_PROVIDER_SHOWN]!r}")

    def _refuse(self, chat: str, action: t.StateAction, reason: str) -> None:
        """End at once what a client began in a chat of another agent's session: a turn
        with ``chat/error``, a queued message by taking it out and refusing it as a turn
        (the turn the host would have started with it), so nothing waits for an agent
        that is not here."""
        state = self.host.state(chat) if self.host.has_channel(chat) else None
        if not isinstance(state, t.ChatState):
            return
        turn = state.active_turn
        if turn is None:
            # each queued message in order (their number bounds the loop): none stays
            for _ in range(len(state.queued_messages or ())):
                state = self.host.state(chat)
                if (not isinstance(state, t.ChatState) or state.active_turn is not None
                        or not state.queued_messages):
                    break
                first = state.queued_messages[0]
                self.host.dispatch(chat, t.ChatPendingMessageRemovedAction(
                    kind=t.PendingMessageKind.QUEUED, id=first.id))
                self._server_turn(chat, first.message, queued_id=first.id)
            return
        if not isinstance(action, t.ChatTurnStartedAction) or turn.id != action.turn_id:
            return
        log.info("turn %s of %s refused: %s", turn.id, chat, reason)
        self.dispatch_chat(chat, t.ChatErrorAction(
            turn_id=turn.id, duration=0,
            error=t.ErrorInfo(error_type=NOT_SERVED, message=reason)))

    # -- sessions from an earlier run (the host's store) -----------------------------

    def _adopt(self, uri: str) -> None:
        """Take on the stored session of ``uri`` (a session or one of its chats) the first
        time a client uses it in this run, and ask the agent to resume it."""
        kind = channel_kind(uri)
        if kind is ChannelKind.SESSION:
            session: str | None = uri
        elif kind is ChannelKind.CHAT:
            session = self._owner.get(uri) or self.host.owner_of(uri)
        else:
            return
        if session is None or session in self._announced or session in self._creating:
            return
        state = self.host.state(session) if self.host.has_channel(session) else None
        if (not isinstance(state, t.SessionState) or state.provider != self._provider
                or state.lifecycle != t.SessionLifecycle.READY or self._closed):
            return
        for chat in (*self.host.chats_of(session), *(c.resource for c in state.chats)):
            self._owner.setdefault(chat, session)
        self._announced[session] = self.host.session_summary(session)
        self._held[session] = []
        self._resuming[session] = asyncio.get_running_loop().create_task(
            self._resume(session, state))

    async def _resume(self, session: str, state: t.SessionState) -> str | None:
        reason: str | None
        try:
            reason = await self.agent.resume_session(session, state)
        except asyncio.CancelledError:
            self._held.pop(session, None)
            raise
        except Exception as e:
            reason = error_text(e)
            log.warning("session %s cannot be resumed: %s", session, reason)
        else:
            if reason is not None:
                reason = bounded_text(reason)
                log.info("session %s cannot be resumed: %s", session, reason)
        # what came meanwhile, in order (a turn it starts awaits this task's result)
        for envelope, principal in self._held.pop(session, []):
            self._client_action(envelope, principal)
        self._flush()
        return reason

    def _count_stored_sessions(self) -> None:
        count = len(self.host.listed_sessions())
        root = self.host.state(ROOT_CHANNEL)
        if isinstance(root, t.RootState) and root.active_sessions != count:
            self.host.dispatch(ROOT_CHANNEL, t.RootActiveSessionsChangedAction(
                active_sessions=count))

    # -- dispatching (what the Turn uses) ---------------------------------------------

    def dispatch_chat(self, chat: str, action: t.StateAction) -> bool:
        """Dispatch an agent's chat action (large content by reference, an unencodable
        value repaired, as :meth:`dispatch_actions` does), keep the catalogue and
        summaries in step, and send it; ``False`` when even the repaired action
        could not be dispatched (logged, dropped)."""
        done = dispatch_agent_action(self.host, chat, action, log) is not None
        self._mirror(chat)
        self._flush()
        return done

    def dispatch_session(self, session: str, action: t.StateAction) -> bool:
        """The same for an action on a session."""
        done = dispatch_agent_action(self.host, session, action, log) is not None
        self._announce(session)
        self._flush()
        return done

    def dispatch_actions(self, actions: Iterable[tuple[str, t.StateAction]]) -> None:
        """Dispatch actions the agent computed itself, ``(channel, action)`` in order:
        those on channels that are gone are dropped, large content goes by
        reference, an unencodable value is repaired (never fatal); then the
        catalogue and summaries are kept in step and the server flushed once."""
        chats: dict[str, None] = {}
        sessions: dict[str, None] = {}
        for channel, action in actions:
            if not self.host.has_channel(channel):
                continue
            dispatch_agent_action(self.host, channel, action, log)
            kind = channel_kind(channel)
            if kind is ChannelKind.CHAT:
                chats[channel] = None
            elif kind is ChannelKind.SESSION:
                sessions[channel] = None
        for chat in chats:
            self._mirror(chat)
        for session in sessions:
            self._announce(session)
        self._flush()

    def set_info(self, info: t.AgentInfo) -> None:
        """The agent's entry of the root state replaced by ``info`` (same provider;
        ``root/agentsChanged`` when it changed): a name learned at run time."""
        root = self.host.state(ROOT_CHANNEL)
        if not isinstance(root, t.RootState):
            return
        agents = tuple(info if a.provider == self._provider else a for a in root.agents)
        if info not in agents:
            agents = (*agents, info)
        if agents != root.agents:
            self.host.dispatch(ROOT_CHANNEL, t.RootAgentsChangedAction(agents=agents))
            self._flush()

    def set_models(self, models: tuple[t.SessionModelInfo, ...]) -> None:
        """The agent's models, learned at run time, into its entry of the root state
        (``root/agentsChanged`` when they changed)."""
        root = self.host.state(ROOT_CHANNEL)
        if not isinstance(root, t.RootState):
            return
        agents = tuple(attrs.evolve(a, models=models)
                       if a.provider == self._provider and a.models != models else a
                       for a in root.agents)
        if agents != root.agents:
            self.host.dispatch(ROOT_CHANNEL, t.RootAgentsChangedAction(agents=agents))
            self._flush()

    def expect_confirmation(self, chat: str, turn_id: str,
                            call_id: str) -> asyncio.Future[bool]:
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._confirmations[(chat, turn_id, call_id)] = future
        return future

    def expect_input(self, chat: str,
                     request_id: str) -> asyncio.Future[t.ChatInputCompletedAction]:
        future: asyncio.Future[t.ChatInputCompletedAction] = (
            asyncio.get_running_loop().create_future())
        self._inputs[(chat, request_id)] = future
        return future

    def _decide(self, chat: str, turn_id: str, call_id: str, approved: bool) -> None:
        future = self._confirmations.pop((chat, turn_id, call_id), None)
        if future is not None and not future.done():
            future.set_result(approved)

    def _mirror(self, chat: str) -> None:
        session = self._owner.get(chat)
        if session is not None and self.host.has_channel(session):
            self.host.mirror_chat(session, chat)
            self._announce(session)

    def _announce(self, session: str) -> None:
        old = self._announced.get(session)
        if old is not None and self.host.has_channel(session):
            self._announced[session] = self.host.announce_summary(session, old)

    def _count_sessions(self) -> None:
        # the listed sessions, stored ones included: not only those this run knows
        self.host.dispatch(ROOT_CHANNEL, t.RootActiveSessionsChangedAction(
            active_sessions=len(self.host.listed_sessions())))

    # -- turns --------------------------------------------------------------------------

    def _remember_queued(self, chat: str, queued: str, principal: object) -> None:
        if principal is None:
            return
        self._queued_by.pop((chat, queued), None)
        while len(self._queued_by) >= _QUEUED_BY_LIMIT:
            del self._queued_by[next(iter(self._queued_by))]
        self._queued_by[(chat, queued)] = principal

    def _start(self, chat: str, turn_id: str, message: t.Message,
               principal: object = None) -> None:
        if self._closed:
            return
        self._stop(chat)  # the turn it replaces
        session = self._owner.get(chat)
        refusal = self._not_ours(session or self.host.owner_of(chat))
        if refusal is not None:
            # a chat made in another agent's session, or a turn the host began there
            self._owner.pop(chat, None)
            log.info("turn %s of %s refused: %s", turn_id, chat, refusal)
            self.dispatch_chat(chat, t.ChatErrorAction(
                turn_id=turn_id, duration=0,
                error=t.ErrorInfo(error_type=NOT_SERVED, message=refusal)))
            return
        if session is None:
            return
        state = self.host.state(session)
        if isinstance(state, t.SessionState) and not state.title:
            title = self._call_agent(self.agent.title_for, message, "")
            if title:
                self.host.dispatch(session, t.SessionTitleChangedAction(title=title))
                self._announce(session)
        turn = Turn(self, session=session, chat=chat, turn_id=turn_id, message=message,
                    started_ms=self.host.now(), principal=principal)
        task = asyncio.get_running_loop().create_task(self._play(turn))
        self._tasks[chat] = (turn, task)

    def _stop(self, chat: str, turn_id: str | None = None) -> None:
        entry = self._tasks.get(chat)
        if entry is not None and (turn_id is None or entry[0].id == turn_id):
            del self._tasks[chat]
            self._let_go(*entry)
        for call in [k for k in self._confirmations if k[0] == chat]:
            self._confirmations.pop(call).cancel()
        for ask in [k for k in self._inputs if k[0] == chat]:
            self._inputs.pop(ask).cancel()

    def _let_go(self, turn: Turn, task: asyncio.Task[None]) -> None:
        """Stop playing ``turn``: its task is cancelled, and whatever it does from now
        on (it may catch the cancellation and go on) reaches no chat: the turn is
        no longer :meth:`playing <plays>`.  A task that lives on is kept, so that
        :meth:`close` waits for it (bounded) and names it if it will not end."""
        turn._playing = False
        task.cancel()
        if not task.done():
            self._stopping[task] = turn
            task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._stopping.pop(task, None)

    def plays(self, turn: Turn) -> bool:
        """Whether ``turn`` is still played: false once its turn ended, was cancelled or
        replaced, or the host closes, even while its task runs on."""
        return turn._playing

    def is_active(self, chat: str, turn_id: str) -> bool:
        """Whether ``turn_id`` is ``chat``'s active turn."""
        return self._is_active(chat, turn_id)

    def _live(self, turn: Turn) -> bool:
        # by identity first: a later turn that took the same id is not this one
        return turn._playing and self._is_active(turn.chat, turn.id)

    def _is_active(self, chat: str, turn_id: str) -> bool:
        state = self.host.state(chat) if self.host.has_channel(chat) else None
        return (isinstance(state, t.ChatState) and state.active_turn is not None
                and state.active_turn.id == turn_id)

    async def _play(self, turn: Turn) -> None:
        resuming = self._resuming.get(turn.session)
        if resuming is not None:
            # a cancelled turn must not cancel the session's resume, which others await
            reason = await asyncio.shield(resuming)
            if reason is not None:
                if self._live(turn):
                    self._end(turn, t.ChatErrorAction(
                        turn_id=turn.id, duration=0, error=t.ErrorInfo(
                            error_type="NotResumable", message=bounded_text(reason))))
                self._release(turn)
                return
        try:
            await self.agent.turn(turn)
        except asyncio.CancelledError:
            return  # a client's cancel (or a newer turn) ended it: the state says so already
        except Exception as e:
            log.exception("the agent failed in turn %s of %s", turn.id, turn.chat)
            if self._live(turn):
                self._end(turn, t.ChatErrorAction(
                    turn_id=turn.id, duration=self._duration(turn),
                    error=t.ErrorInfo(error_type=_error_type(e), message=error_text(e))))
        else:
            if self._live(turn):
                self._end(turn, t.ChatTurnCompleteAction(turn_id=turn.id,
                                                         duration=self._duration(turn)))
            elif not turn._playing and not self._closed:
                log.info("turn %s of %s ended on the wire before its task returned (it "
                         "caught the cancellation); what it did since was dropped",
                         turn.id, turn.chat)
        finally:
            self._release(turn)

    def _release(self, turn: Turn) -> None:
        turn._playing = False  # what its own tasks still do reaches no chat
        entry = self._tasks.get(turn.chat)
        if entry is not None and entry[1] is asyncio.current_task():
            del self._tasks[turn.chat]
            self._consume_queued(turn.chat)
            self._flush()

    def _duration(self, turn: Turn) -> int:
        return max(0, self.host.now() - turn.started_ms)

    def _end(self, turn: Turn, action: t.StateAction) -> None:
        if self.dispatch_chat(turn.chat, action):
            return
        # a bounded, repaired text that still cannot go (a hostile error type ...):
        # the turn ends all the same, with a text that always can
        log.error("could not end turn %s of %s with its %s; ending it with a fixed "
                  "message", turn.id, turn.chat, action.type)
        if not self.dispatch_chat(turn.chat, t.ChatErrorAction(
                turn_id=turn.id, duration=self._duration(turn),
                error=t.ErrorInfo(error_type="AgentError", message=UNSENDABLE_ERROR))):
            log.error("could not end turn %s of %s", turn.id, turn.chat)

    def _consume_queued(self, chat: str) -> None:
        state = self.host.state(chat) if self.host.has_channel(chat) else None
        if (not isinstance(state, t.ChatState) or state.active_turn is not None
                or not state.queued_messages or chat in self._tasks or self._closed
                or type(self.agent).manages_chats):
            return
        first = state.queued_messages[0]
        self.host.dispatch(chat, t.ChatPendingMessageRemovedAction(
            kind=t.PendingMessageKind.QUEUED, id=first.id))
        self._server_turn(chat, first.message, queued_id=first.id)

    def _server_turn(self, chat: str, message: t.Message, *, queued_id: str | None = None,
                     principal: object = None) -> None:
        """Start a turn the host begins itself (a queued message, a chat's initial one);
        its principal is the one that queued the message or created the chat."""
        if queued_id is not None:
            principal = self._queued_by.pop((chat, queued_id), principal)
        state = self.host.state(chat)
        if not isinstance(state, t.ChatState):
            return
        taken = {turn.id for turn in state.turns}
        while True:
            self._turns += 1
            turn_id = f"turn-{self._turns}"
            if turn_id not in taken:
                break
        if self.dispatch_chat(chat, t.ChatTurnStartedAction(
                turn_id=turn_id, started_at=iso(self.host.now()), message=message,
                queued_message_id=queued_id)):
            self._start(chat, turn_id, message, principal)

    # -- commands -----------------------------------------------------------------------

    def _create_session(self, event: RequestReceived) -> bool:
        """``createSession``; True when it is answered later (:attr:`Agent.answers_when_ready`)."""
        params = event.params
        if not isinstance(params, t.CreateSessionParams):
            raise LocalProtocolError(f"{event.method} is not createSession")
        uri = params.channel
        provider = self._provider
        if channel_kind(uri) is not ChannelKind.SESSION:
            event.responder.error(JsonRpcErrorCode.INVALID_PARAMS,
                                  f"{uri!r} is not a session URI (ahp-session:/<id>)")
            return False
        if self.host.has_channel(uri) or uri in self._creating:
            event.responder.error(AhpErrorCode.SESSION_ALREADY_EXISTS, f"{uri!r} exists")
            return False
        if params.provider is not None and params.provider != provider:
            event.responder.error(AhpErrorCode.PROVIDER_NOT_FOUND,
                                  f"no provider {params.provider!r}; this host has {provider!r}")
            return False
        if params.fork is not None:
            event.responder.error(JsonRpcErrorCode.INVALID_PARAMS,
                                  "this agent cannot fork sessions (fork a chat instead)")
            return False
        too_many = self.host.session_refusal(len(self._creating))
        if too_many is not None:
            event.responder.error(JsonRpcErrorCode.INVALID_REQUEST, too_many)
            return False
        if self._closed:
            event.responder.error(JsonRpcErrorCode.INTERNAL_ERROR, "the host is shutting down")
            return False
        directories = params.working_directories[:1] if params.working_directories else None
        setup = NewSession(uri=uri, chat=self._free_chat_uri(uri),
                           working_directories=directories, active_client=params.active_client,
                           principal=event.connection.principal)
        refusal = self._call_agent(self.agent.refuse_session, setup, None)
        if refusal is not None:
            event.responder.error(JsonRpcErrorCode.INTERNAL_ERROR, bounded_text(refusal))
            return False
        if type(self.agent).answers_when_ready:
            self._creating[uri] = asyncio.get_running_loop().create_task(
                self._set_up_first(event, setup, params), name=f"create_session of {uri}")
            return True
        self.host.create_session(uri, provider=provider, working_directories=directories,
                                 principal=event.connection.principal)
        event.responder.respond(None)
        if self._deferred:
            self._creating[uri] = asyncio.get_running_loop().create_task(
                self._set_up(setup, params), name=f"create_session of {uri}")
            return False
        self._ready(uri, setup.chat, params)
        return False

    async def _set_up(self, setup: NewSession, params: t.CreateSessionParams) -> None:
        uri = setup.uri
        try:
            await self.agent.create_session(setup)
        except Exception as e:
            text = error_text(e)
            log.warning("session %s failed: %s", uri, text)
            if self.host.has_channel(uri):
                self.host.fail_session(uri, t.ErrorInfo(error_type=_error_type(e),
                                                        message=text))
                self._flush()
            return
        finally:
            if self._creating.get(uri) is asyncio.current_task():
                del self._creating[uri]
        if self.host.has_channel(uri):
            self._ready(uri, setup.chat, params)
            self._flush()

    async def _set_up_first(self, event: RequestReceived, setup: NewSession,
                            params: t.CreateSessionParams) -> None:
        """The agent sets the session up, then it is created (ready or failed) and answered."""
        uri = setup.uri
        error: t.ErrorInfo | None = None
        config: t.SessionConfigState | None = None
        try:
            config = await self.agent.create_session(setup)
        except asyncio.CancelledError:
            if not event.responder.answered:
                event.responder.error(JsonRpcErrorCode.INTERNAL_ERROR,
                                      "the host is shutting down")
                self._flush()
            raise
        except Exception as e:
            error = t.ErrorInfo(error_type=_error_type(e), message=error_text(e))
            log.warning("session %s failed: %s", uri, error.message)
        finally:
            if self._creating.get(uri) is asyncio.current_task():
                del self._creating[uri]
        self.host.create_session(uri, provider=self._provider,
                                 working_directories=setup.working_directories, config=config,
                                 principal=event.connection.principal)
        event.responder.respond(None)
        if error is not None:
            self.host.fail_session(uri, error)
        else:
            self._ready(uri, setup.chat, params)
        self._flush()

    def _ready(self, uri: str, chat: str, params: t.CreateSessionParams) -> None:
        self._owner[chat] = uri
        self._announced[uri] = self.host.ready_session(uri, default_chat=chat)
        if params.active_client is not None:
            self.host.dispatch(uri, t.SessionActiveClientSetAction(
                active_client=params.active_client))
        self._count_sessions()
        if params.progress_token is not None:
            self.host.notify("root/progress", t.ProgressParams(
                channel=ROOT_CHANNEL, progress_token=params.progress_token, progress=1,
                total=1))
        self._hook(self.agent.session_created, uri)

    def _free_chat_uri(self, session: str) -> str:
        base = "ahp-chat:/" + session.removeprefix("ahp-session:/")
        uri, n = base, 1
        while self.host.has_channel(uri):
            n += 1
            uri = f"{base}-{n}"
        return uri

    def _dispose_session(self, event: RequestReceived) -> None:
        params = event.params
        if not isinstance(params, t.DisposeSessionParams):
            raise LocalProtocolError(f"{event.method} is not disposeSession")
        uri = params.channel
        if not isinstance(self.host.state(uri) if self.host.has_channel(uri) else None,
                          t.SessionState):
            event.responder.error(AhpErrorCode.SESSION_NOT_FOUND, f"no session {uri!r}")
            return
        resuming = self._resuming.pop(uri, None)
        if resuming is not None:
            resuming.cancel()
            self._abandoned.add(resuming)  # close waits for what it stops (a process)
            resuming.add_done_callback(self._abandoned.discard)
        creating = self._creating.pop(uri, None)
        if creating is not None:  # the agent was still setting it up: it stops
            creating.cancel()
            self._track(creating)
            self.host.dispose_session(uri)
            event.responder.respond(None)
            return
        for chat in [c for c, owner in self._owner.items() if owner == uri]:
            del self._owner[chat]
            self._stop(chat)
        listed = uri in self._announced or uri in self.host.listed_sessions()
        self.host.dispose_session(uri)
        self._announced.pop(uri, None)
        if listed:
            self._count_sessions()
        event.responder.respond(None)
        self._hook(self.agent.session_disposed, uri)
        self._track(asyncio.get_running_loop().create_task(
            self._dispose(uri), name=f"dispose_session of {uri}"))

    async def _dispose(self, uri: str) -> None:
        try:
            await self.agent.dispose_session(uri)
        except Exception:
            log.exception("the agent's dispose_session hook failed for %s", uri)

    def _track(self, task: asyncio.Task[None]) -> None:
        self._hooks.add(task)
        task.add_done_callback(self._hooks.discard)

    def _missing(self, event: RequestReceived, channel: str, code: int, what: str) -> bool:
        """Under an ``authorize`` policy, answer a request about a channel that does not
        exist as the host answers one the policy refuses, before any other refusal:
        the two must look alike (``docs/host.md``, "Users kept apart")."""
        if self.host.authorize is None or self.host.has_channel(channel):
            return False
        event.responder.error(code, f"no {what} {channel!r}")
        return True

    def _one_chat_only(self, event: RequestReceived) -> bool:
        if self._one_chat:
            event.responder.error(JsonRpcErrorCode.INVALID_PARAMS,
                                  "a session of this agent has exactly one chat")
        return self._one_chat

    def _create_chat(self, event: RequestReceived) -> None:
        params = event.params
        if not isinstance(params, t.CreateChatParams):
            raise LocalProtocolError(f"{event.method} is not createChat")
        if self._missing(event, params.channel, AhpErrorCode.SESSION_NOT_FOUND, "session"):
            return
        if self._one_chat_only(event):
            return
        refusal = self._not_ours(params.channel)
        if refusal is not None:
            event.responder.error(AhpErrorCode.PROVIDER_NOT_FOUND, refusal)
            return
        if self.host.answer_create_chat(event) is None:
            return
        self._owner[params.chat] = params.channel
        self._announce(params.channel)
        if params.initial_message is not None:
            self._server_turn(params.chat, params.initial_message,
                              principal=event.connection.principal)

    def _dispose_chat(self, event: RequestReceived) -> None:
        params = event.params
        if not isinstance(params, t.DisposeChatParams):
            raise LocalProtocolError(f"{event.method} is not disposeChat")
        if self._missing(event, params.channel, AhpErrorCode.NOT_FOUND, "chat"):
            return
        if self._one_chat_only(event):
            return
        self._stop(params.channel)
        session = self._owner.get(params.channel)
        if self.host.answer_dispose_chat(event):
            self._owner.pop(params.channel, None)
            if session is not None:
                self._announce(session)

    def _hook(self, hook: Callable[[str], None], uri: str) -> None:
        self._call_agent(hook, uri, None)

    def _call_agent(self, hook: Callable[[A], R], argument: A, fallback: R) -> R:
        try:
            return hook(argument)
        except Exception:
            log.exception("the agent's %s hook failed", getattr(hook, "__name__", "session"))
            return fallback

    # -- the end ------------------------------------------------------------------------

    async def close(self) -> None:
        """Cancel every turn (they stay as they are in the host's state), every session
        being set up or resumed, and wait for them and for the ``dispose_session``
        hooks still running: at most :attr:`close_timeout` seconds in all.  What has
        not ended by then (code that catches ``CancelledError`` and goes on, a hook
        that hangs) is logged, by session and turn, and abandoned: cancelled once
        more and no longer waited for; it reaches no chat any more."""
        self._closed = True
        waited: dict[asyncio.Task[None] | asyncio.Task[str | None], str] = {}
        for turn, task in self._tasks.values():
            self._let_go(turn, task)
        self._tasks.clear()
        for task, turn in self._stopping.items():
            waited[task] = f"turn {turn.id} of {turn.chat} (session {turn.session})"
        for uri, creating in self._creating.items():
            creating.cancel()
            waited[creating] = f"the agent's create_session of {uri}"
        for uri, resuming in self._resuming.items():
            resuming.cancel()
            waited[resuming] = f"the agent's resume_session of {uri}"
        for resuming in self._abandoned:
            resuming.cancel()
            waited[resuming] = "the agent's resume_session of a disposed session"
        self._creating.clear()
        self._resuming.clear()
        for decision in self._confirmations.values():
            decision.cancel()
        for answer in self._inputs.values():
            answer.cancel()
        self._confirmations.clear()
        self._inputs.clear()
        for hook in self._hooks:
            # not cancelled: a hook that releases what a session held (stops its
            # process) is let finish, within the same deadline
            waited.setdefault(hook, f"the agent's {hook.get_name()}")
        pending = {left for left in waited if not left.done()}
        if pending:
            _, pending = await asyncio.wait(pending, timeout=self.close_timeout)
        for left in sorted(pending, key=waited.__getitem__):
            log.warning("%s did not end within %g s of the close (it catches the "
                        "cancellation, or hangs): abandoned", waited[left],
                        self.close_timeout)
            left.cancel()


def _error_type(e: BaseException) -> str:
    return error_name(e.error_type) if isinstance(e, AgentError) else type(e).__name__
