"""What the host is doing, as log lines: sessions, turns, tool calls, input requests.

:class:`ActivityLog` is a :class:`~agenthost_protocol.host.HostObserver`: the
host core tells it of every action it applies, a client's or the agent's, so
one observer covers every agent and every transport.  A
:class:`~agenthost_protocol.aio.HostServer` installs one on its host.

At ``INFO`` (logger ``agenthost_protocol.aio.activity``) it logs one line per
session created or disposed, turn started and ended (its outcome and how long
it took), tool call started and each change of its status, input request
asked and answered; at ``DEBUG``, also every action's type, channel and
``serverSeq``.  Each line starts with the session (and chat) it concerns, so
one session's lines can be found with ``grep``.  No line holds what a user
or an agent wrote: no message text, no title, no tool input or output, no
question or answer; only identifiers, kinds and counts, and an identifier a
peer chose is shown escaped and shortened (no line can be forged with it).

Cheap when its logger is above ``INFO``: one level check per action.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final

from .. import types as t
from ..channels import ChannelKind, channel_kind, session_of_annotations
from ..host import Host

__all__ = ["MAX_TRACKED_TURNS", "ActivityLog", "printable", "shown"]

log = logging.getLogger(__name__)

MAX_TRACKED_TURNS: Final = 4096
"""The most active turns whose start an :class:`ActivityLog` keeps (one per chat at most,
forgotten when the turn ends or its chat goes); past it the oldest is forgotten, and its
end reports the duration the agent gives."""

_MAX_OPEN_CALLS: Final = 256
"""The most unfinished tool calls, and input requests, kept per turn (to report those a
turn's end leaves)."""

_SHOWN_LENGTH: Final = 80


def shown(value: object, limit: int = _SHOWN_LENGTH) -> str:
    """``value`` fit for a log line: as it is when short, printable ASCII without spaces
    (an identifier), else quoted with its control and non-ASCII characters escaped, and
    cut to ``limit`` characters (a peer's string cannot forge or flood a line)."""
    text = str(value)
    if len(text) <= limit and text.isascii() and text.isprintable() and " " not in text \
            and text[:1] not in ("'", '"'):
        return text
    cut = text[:limit]
    return ascii(cut) + ("..." if len(text) > limit else "")


def printable(text: str, limit: int = 200) -> str:
    """``text`` (prose a peer may have written: a close reason ...) fit for a log line:
    its control and other unprintable characters escaped, cut to ``limit`` characters."""
    if len(text) <= limit and text.isprintable():
        return text
    out = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text[:limit])
    return out + ("..." if len(text) > limit else "")


def _name(kind: object) -> str:
    return shown(getattr(kind, "value", kind))


class _Turn:
    __slots__ = ("asks", "calls", "session", "started", "turn_id")

    def __init__(self, turn_id: str, session: str | None, started: float) -> None:
        self.turn_id = turn_id
        self.session = session
        self.started = started
        self.calls: dict[str, None] = {}
        """Tool calls started and not yet finished, in order."""
        self.asks: dict[str, None] = {}
        """Input requests asked and not yet completed, in order."""


class ActivityLog:
    """Logs what ``host`` does (see the module's doc); install it as ``host.observer``.

    It remembers when each active turn started, to log its duration: one entry
    per chat with a turn under way, forgotten when the turn ends, when the chat
    or its session is disposed, and, past ``max_turns``, oldest first.
    """

    def __init__(self, host: Host, *, logger: logging.Logger = log,
                 max_turns: int = MAX_TRACKED_TURNS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._host = host
        self._log = logger
        self._max_turns = max(1, max_turns)
        self._clock = clock
        self._turns: dict[str, _Turn] = {}
        """chat -> its active turn."""
        self._failed = False

    @property
    def tracked_turns(self) -> int:
        """The active turns whose start is remembered."""
        return len(self._turns)

    # -- the host's observer ----------------------------------------------------------

    def applied(self, envelope: t.ActionEnvelope) -> None:
        if not self._log.isEnabledFor(logging.INFO):
            return
        try:
            self._applied(envelope)
        except Exception:
            self._broken()

    def removed(self, uri: str) -> None:
        turns = self._turns
        turn = turns.pop(uri, None)
        kind = channel_kind(uri)
        if kind is ChannelKind.SESSION and turns:
            # its chats went first, as a rule; whatever is left of it goes now
            for chat in [c for c, tr in turns.items() if tr.session == uri]:
                del turns[chat]
        if not self._log.isEnabledFor(logging.INFO):
            return
        try:
            if kind is ChannelKind.SESSION:
                self._log.info("session %s: disposed", shown(uri))
            elif kind is ChannelKind.CHAT and turn is not None:
                where = self._where(uri, turn.session)
                self._log.info("%s: turn %s ended: its chat was disposed after %.2f s",
                               where, shown(turn.turn_id), self._clock() - turn.started)
            elif self._log.isEnabledFor(logging.DEBUG):
                self._log.debug("%s: removed", self._where(uri))
        except Exception:
            self._broken()

    def _broken(self) -> None:
        # a bug here must never break the host, nor flood the log: said once
        if not self._failed:
            self._failed = True
            self._log.warning("the activity log failed; it goes on, but may miss lines",
                              exc_info=True)

    # -- what each action says ----------------------------------------------------------

    def _where(self, channel: str, session: str | None = None) -> str:
        kind = channel_kind(channel)
        if kind is ChannelKind.SESSION:
            return f"session {shown(channel)}"
        if kind is ChannelKind.CHAT:
            owner = session if session is not None else self._host.owner_of(channel)
            if owner is None:
                return f"chat {shown(channel)}"
            if channel.removeprefix("ahp-chat:/") == owner.removeprefix("ahp-session:/"):
                return f"session {shown(owner)}"  # its default chat, named after it
            return f"session {shown(owner)} chat {shown(channel)}"
        if kind is ChannelKind.ANNOTATIONS:
            return f"session {shown(session_of_annotations(channel))} annotations"
        if kind is ChannelKind.ROOT:
            return "root"
        return f"{kind.value if kind is not None else 'channel'} {shown(channel)}"

    def _applied(self, envelope: t.ActionEnvelope) -> None:
        logger = self._log
        action = envelope.action
        debug = logger.isEnabledFor(logging.DEBUG)
        if not debug and type(action) not in _TOLD:
            return  # a delta, a usage report ...: nothing at info (the stream's hot path)
        channel = envelope.channel
        tracked = self._turns.get(channel)
        where = self._where(channel, tracked.session if tracked is not None else None)
        if debug:
            origin = envelope.origin
            by = "the host" if origin is None else f"client {shown(origin.client_id)}"
            logger.debug("%s: action %s (serverSeq %d, by %s)", where, _name(action.type),
                         envelope.server_seq, by)
        if isinstance(action, t.SessionReadyAction):
            state = self._host.state(channel)
            provider = getattr(state, "provider", None)
            logger.info("%s: created (provider %s)", where, shown(provider))
        elif isinstance(action, t.SessionCreationFailedAction):
            logger.info("%s: creation failed (%s)", where, shown(action.error.error_type))
        elif isinstance(action, t.ChatTurnStartedAction):
            self._turn_started(channel, where, action, envelope.origin)
        elif isinstance(action, t.ChatTurnCompleteAction | t.ChatTurnCancelledAction
                        | t.ChatErrorAction):
            self._turn_ended(channel, where, action)
        elif isinstance(action, _TOOL_CALL_ACTIONS):
            self._tool_call(where, tracked, action)
        elif isinstance(action, t.ChatInputRequestedAction):
            request = action.request
            questions = len(request.questions) if request.questions else 0
            if tracked is not None and len(tracked.asks) < _MAX_OPEN_CALLS:
                tracked.asks[request.id] = None
            logger.info("%s%s: input request %s asked (%d question%s)", where,
                        _in_turn(tracked), shown(request.id), questions,
                        "" if questions == 1 else "s")
        elif isinstance(action, t.ChatInputCompletedAction):
            response = action.response
            outcome = _INPUT_OUTCOMES.get(getattr(response, "value", response),
                                          f"completed ({_name(response)})")
            if tracked is not None:
                tracked.asks.pop(action.request_id, None)
            logger.info("%s%s: input request %s %s", where, _in_turn(tracked),
                        shown(action.request_id), outcome)

    def _turn_started(self, chat: str, where: str, action: t.ChatTurnStartedAction,
                      origin: t.ActionOrigin | None) -> None:
        session = self._host.owner_of(chat)
        turns = self._turns
        turns.pop(chat, None)  # a chat has one active turn: a new one replaces it
        turns[chat] = _Turn(action.turn_id, session, self._clock())
        while len(turns) > self._max_turns:
            del turns[next(iter(turns))]
        by = "" if origin is None else f" by client {shown(origin.client_id)}"
        self._log.info("%s: turn %s started%s", where, shown(action.turn_id), by)

    def _turn_ended(self, chat: str, where: str, action: t.ChatTurnCompleteAction
                    | t.ChatTurnCancelledAction | t.ChatErrorAction) -> None:
        turn = self._turns.get(chat)
        if turn is not None and turn.turn_id == action.turn_id:
            del self._turns[chat]
            seconds = self._clock() - turn.started
            for call in turn.calls:
                self._log.info("%s turn %s: tool call %s cancelled (its turn ended)",
                               where, shown(action.turn_id), shown(call))
            for ask in turn.asks:
                self._log.info("%s turn %s: input request %s unanswered when its turn ended",
                               where, shown(action.turn_id), shown(ask))
        else:
            seconds = max(0, action.duration) / 1000  # started before we looked: the agent's count
        if isinstance(action, t.ChatTurnCompleteAction):
            outcome = "completed"
        elif isinstance(action, t.ChatTurnCancelledAction):
            outcome = "cancelled"
        else:
            outcome = f"error ({shown(action.error.error_type)})"
        self._log.info("%s: turn %s ended: %s after %.2f s", where, shown(action.turn_id),
                       outcome, seconds)

    def _tool_call(self, where: str, tracked: _Turn | None, action: _ToolCallAction) -> None:
        call = action.tool_call_id
        calls = tracked.calls if tracked is not None and tracked.turn_id == action.turn_id \
            else None
        done = False
        if isinstance(action, t.ChatToolCallStartAction):
            status = f"started (tool {shown(action.tool_name)})"
            if calls is not None and len(calls) < _MAX_OPEN_CALLS:
                calls[call] = None
        elif isinstance(action, t.ChatToolCallReadyAction):
            status = ("needs confirmation" if action.confirmed is None
                      else f"running ({_name(action.confirmed)})")
        elif isinstance(action, t.ChatToolCallApprovedAction):
            status = f"approved ({_name(action.confirmed)}), running"
        elif isinstance(action, t.ChatToolCallDeniedAction):
            status, done = f"denied ({_name(action.reason)})", True
        elif isinstance(action, t.ChatToolCallCompleteAction):
            status = "completed" if action.result.success else "failed"
            if action.requires_result_confirmation:
                status += ", its result needs confirmation"
            else:
                done = True
        elif isinstance(action, t.ChatToolCallResultConfirmedAction):
            status = "result approved" if action.approved else "result denied"
            done = True
        elif isinstance(action, t.ChatToolCallAuthRequiredAction):
            status = "needs authentication"
        else:
            status = "authentication resolved"
        if done and calls is not None:
            calls.pop(call, None)
        self._log.info("%s turn %s: tool call %s %s", where, shown(action.turn_id),
                       shown(call), status)


_ToolCallAction = (
    t.ChatToolCallStartAction | t.ChatToolCallReadyAction | t.ChatToolCallApprovedAction
    | t.ChatToolCallDeniedAction | t.ChatToolCallCompleteAction
    | t.ChatToolCallResultConfirmedAction | t.ChatToolCallAuthRequiredAction
    | t.ChatToolCallAuthResolvedAction
)
_TOOL_CALL_ACTIONS: Final = (
    t.ChatToolCallStartAction, t.ChatToolCallReadyAction, t.ChatToolCallApprovedAction,
    t.ChatToolCallDeniedAction, t.ChatToolCallCompleteAction,
    t.ChatToolCallResultConfirmedAction, t.ChatToolCallAuthRequiredAction,
    t.ChatToolCallAuthResolvedAction,
)
_TOLD: Final = frozenset({
    t.SessionReadyAction, t.SessionCreationFailedAction, t.ChatTurnStartedAction,
    t.ChatTurnCompleteAction, t.ChatTurnCancelledAction, t.ChatErrorAction,
    t.ChatInputRequestedAction, t.ChatInputCompletedAction, *_TOOL_CALL_ACTIONS,
})
"""The actions that make a line at info."""
_INPUT_OUTCOMES: Final = {"accept": "answered", "decline": "declined", "cancel": "cancelled"}


def _in_turn(turn: _Turn | None) -> str:
    return "" if turn is None else f" turn {shown(turn.turn_id)}"
