"""The host: authoritative channel state, sequencing, fan-out, the protocol commands.

Sans-I/O in the h11 sense: the :class:`Host` owns no socket, thread, timer
or wall clock.  Every input (a message on a :class:`HostConnection`, a call
such as :meth:`Host.dispatch`) runs to completion inside the call, queues
what each connection must be sent (``connection.data_to_send()``) and what
the embedder must handle (:meth:`Host.next_event`), and returns.  The same
inputs in the same order give the same outputs.

Policies the spec leaves open (see ``docs/host.md``):

* **Rejections** consume a ``serverSeq``, are sent only to the connection
  that dispatched the action (if it is subscribed to the channel and its
  version knows the action), are recorded in the replay buffer addressed to
  that ``clientId`` (a reconnect of that client replays them, of nobody else)
  and never reach a reducer.
* An action for a channel that does not exist, or for a stateless channel,
  is ignored: no echo, no ``serverSeq``.
* A valid client action goes to the embedder's ``review`` hook, if any,
  before it is sequenced: applied (possibly rewritten), rejected, or held
  until the embedder settles it (:meth:`Host.accept_held`,
  :meth:`Host.reject_held`).
* A ``subscribe`` with ``view.turns`` gets a chat snapshot trimmed to the
  last turns; the host pages the rest to that client alone (``fetchTurns``
  answered by the core), and sends it the hidden turns before any broadcast
  that would need them.  Any chat snapshot (view or not, in ``initialize`` and
  ``reconnect`` too) is trimmed the same way to the newest turns that fit one
  message; a replay that would not fit is answered with snapshots.
* Message texts, titles and response parts too big for a snapshot are
  bounded as actions are applied (by reference or cut with a marker:
  :mod:`.bounds`).
* Active clients that unsubscribe, reconnect without the session, or stay
  away longer than ``active_client_grace_ms`` are removed when the embedder
  calls :meth:`Host.expire_clients` (the core has no timer).
* A ``clientId`` is held by at most one open connection: a handshake that
  names one held by another connection waits for the embedder's probe of
  the holder (:class:`ClientIdClaimed`, :meth:`Host.settle_claim`).  A
  client sets and removes only its own ``activeClients`` entry.
* Per-connection budgets (:class:`HostLimits`): distinct subscriptions, and
  ``reconnect`` requests per minute.
* Users kept apart (``authorize``, :mod:`.authorize`): a session a
  connection's principal may not see looks like one that does not exist,
  and the root is narrowed per connection (``docs/host.md``).
"""

from __future__ import annotations

import contextlib
import secrets
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from enum import Enum
from typing import Final, Literal, Protocol, TypeAlias, cast

from attrs import evolve, frozen

from .. import types as t
from .. import wire
from ..channels import ROOT_CHANNEL, STATE_TYPES, ChannelKind, channel_kind
from ..errors import LocalProtocolError, ProtocolError
from ..methods import METHODS, Direction, MessageKind
from ..reducers import Clock, reduce
from ..types.error_codes import AhpErrorCode, JsonRpcErrorCode
from ..versions import (
    SUPPORTED_PROTOCOL_VERSIONS,
    VersionNegotiationFailed,
    filter_notification_for_version,
    is_action_known_to_version,
    negotiate_protocol_version,
)
from . import sessions
from .authorize import (
    Authorize,
    BoundOwnership,
    Operation,
    OwnerKey,
    OwnershipPolicy,
    default_owner_key,
    fail_closed,
)
from .bounds import (
    Bounds,
    PartSizes,
    TurnSizes,
    bound_action,
    shrink_turn,
    snapshot_budget,
)
from .coalescing import Coalescer, Held, is_mergeable
from .commands import Commands
from .connection import Claim, ConnectionState, HostConnection
from .content import CONTENT_SCHEME, ContentStore, by_reference
from .durable import Durable
from .events import (
    ClientActionApplied,
    ClientIdClaimed,
    ClientRequestParams,
    ClientRequestResult,
    ConnectionClosed,
    ErrorReceived,
    Event,
    Initialized,
    ProtocolNotificationParams,
    Reconnected,
    RequestReceived,
    Responder,
    ResponseReceived,
    ServerRequestResult,
    Unsubscribed,
)
from .limits import HostLimits
from .persistence import (
    ABSENT,
    ChannelTable,
    Journal,
)
from .replay import ReplayBuffer
from .store import (
    ClientRecord,
    HostStore,
    LogRecord,
)
from .validation import ValidationContext, check_family, validate

__all__ = [
    "HOLD",
    "ClientAction",
    "Hold",
    "Host",
    "HostObserver",
    "ProtocolNotificationParams",
    "Reject",
    "Review",
    "ReviewVerdict",
]



_NARROWED = (t.RootActiveSessionsChangedAction, t.RootTerminalsChangedAction)
"""The root actions an ``authorize`` policy narrows per connection."""


def _session_named(params: ProtocolNotificationParams) -> str | None:
    """The session a root notification is about (``None``: none)."""
    if isinstance(params, t.SessionAddedParams):
        return params.summary.resource
    if isinstance(params, t.SessionRemovedParams | t.SessionSummaryChangedParams):
        return params.session
    return None


def encode_envelope(envelope: t.ActionEnvelope) -> bytes:
    """The ``action`` notification carrying ``envelope``, as sent on the wire.

    A module function so that tests can count encodings.
    """
    msg = t.JsonRpcNotification(method="action", params=envelope)
    return wire.dumps(msg).encode("utf-8")


def encode_notification(method: str, params: ProtocolNotificationParams) -> bytes:
    """A protocol notification as sent on the wire."""
    return wire.dumps(t.JsonRpcNotification(method=method, params=params)).encode("utf-8")


@frozen(kw_only=True)
class ClientAction:
    """A client's ``dispatchAction`` that passed the host's validation, not yet sequenced.

    What the ``review`` hook sees, and what :meth:`Host.accept_held` and
    :meth:`Host.reject_held` take back.
    """

    number: int
    """Unique within the host, in order of arrival: tells apart two held actions
    that look the same (a client that started afresh reuses its ``clientSeq``\\ s)."""
    client_id: str
    protocol_version: str
    """The dispatching connection's negotiated version."""
    channel: str
    client_seq: int
    action: t.StateAction

    @property
    def origin(self) -> t.ActionOrigin:
        """The ``origin`` its envelope carries."""
        return t.ActionOrigin(client_id=self.client_id, client_seq=self.client_seq)


class Hold(Enum):
    """The type of :data:`HOLD`."""

    HOLD = "hold"


HOLD: Final = Hold.HOLD
"""A ``review`` verdict: the embedder keeps the action and settles it later."""


@frozen
class Reject:
    """A ``review`` verdict: reject the action with ``reason`` (its ``rejectionReason``)."""

    reason: str


ReviewVerdict: TypeAlias = t.StateAction | Reject | Literal[Hold.HOLD]
"""What ``review`` returns: the action to apply (the client's, or a rewrite of it),
a :class:`Reject`, or :data:`HOLD`."""

Review: TypeAlias = Callable[[ClientAction], ReviewVerdict]
"""The embedder's hook on valid client actions (``Host(review=...)``)."""

_TOOL_CALLS_IN_FLIGHT = (
    t.ToolCallRunningState,
    t.ToolCallAuthRequiredState,
    t.ToolCallPendingConfirmationState,
)
"""The states of a client tool call a removed client can no longer finish
(and that ``chat/toolCallComplete`` can end)."""


class HostObserver(Protocol):
    """Told of what the host does, as it does it (:attr:`Host.observer`): what an
    activity log needs, in one place for every agent and every transport.

    Called inside the host's calls, on its hot path: an observer returns
    quickly, never raises and never calls the host back to change it.
    """

    def applied(self, envelope: t.ActionEnvelope) -> None:
        """``envelope``'s action was applied to its channel (a client's or the server's).

        With a store, an action whose commit then fails is taken back
        (:class:`StoreFailed`); the observer has heard of it all the same.
        """
        ...

    def removed(self, uri: str) -> None:
        """Channel ``uri`` is gone (a session or chat disposed ...), not merely unloaded."""
        ...


class Host(Commands, Durable):
    """The authoritative state of every channel and one :class:`HostConnection` per transport.

    ``clock`` returns epoch milliseconds; it stamps chat ``modifiedAt`` in the
    reducers and the timestamps the session helpers write.  ``authorize``
    keeps users apart (an :class:`~.authorize.OwnershipPolicy`, or any
    ``authorize(principal, session, operation)``; ``None``: everyone may do
    everything); ``owner_key`` maps a principal to the owner key recorded with
    the sessions it creates (default: the policy's, else ``str`` principals as
    themselves).
    """

    def __init__(
        self,
        *,
        clock: Clock,
        server_info: t.Implementation | None = None,
        supported_versions: Sequence[str] = SUPPORTED_PROTOCOL_VERSIONS,
        root: t.RootState | None = None,
        replay_max_envelopes: int = 10_000,
        replay_max_bytes: int = 16 * 1024 * 1024,
        remembered_clients: int = 1024,
        remembered_clients_max_age_ms: int | None = 24 * 60 * 60 * 1000,
        remembered_clients_with_state: int = 32_768,
        remembered_clients_min_age_ms: int = 60 * 60 * 1000,
        active_client_grace_ms: int | None = 60_000,
        review: Review | None = None,
        list_page_size: int = 100,
        default_directory: str | None = None,
        completion_trigger_characters: tuple[str, ...] | None = None,
        terminal_command_prefix: str | None = None,
        telemetry: t.TelemetryCapabilities | None = None,
        limits: HostLimits | None = None,
        store: HostStore | None = None,
        loaded_channels: int = 512,
        unload_after_ms: int = 30_000,
        authorize: Authorize | OwnershipPolicy | None = None,
        owner_key: OwnerKey | None = None,
    ) -> None:
        if (remembered_clients < 0 or remembered_clients_with_state < 0 or list_page_size < 1
                or loaded_channels < 1):
            raise LocalProtocolError(
                "remembered_clients >= 0, remembered_clients_with_state >= 0, "
                "list_page_size >= 1 and loaded_channels >= 1 please")
        for name, value in (
            ("remembered_clients_min_age_ms", remembered_clients_min_age_ms),
            ("unload_after_ms", unload_after_ms),
            ("remembered_clients_max_age_ms", remembered_clients_max_age_ms),
            ("active_client_grace_ms", active_client_grace_ms),
        ):
            if value is not None and value < 0:
                raise LocalProtocolError(f"{name} must not be negative")
        # fail now, not at the first initialize, on a malformed supported list
        with contextlib.suppress(VersionNegotiationFailed):
            negotiate_protocol_version(["0.0.0"], supported_versions)
        self._clock = clock
        self.server_info = server_info
        self.supported_versions = tuple(supported_versions)
        self._seq = 0
        self._store = store
        self._states = ChannelTable(
            self._load if store is not None else None, self._load_failed
        )
        self._states[ROOT_CHANNEL] = root if root is not None else t.RootState(agents=())
        self._journal: Journal | None = None
        self._loaded_cap = loaded_channels
        self._unload_after = unload_after_ms
        self._used: dict[str, int] = {}
        self._commits = 0
        self._log_bytes: dict[str, int] = {}
        """Per stored channel: log bytes since its last snapshot (when to take the next)."""
        self._snap_bytes: dict[str, int] = {}
        self._listed: set[str] = set()
        """Stored sessions ``listSessions`` lists (those in memory are asked directly)."""
        self._written: dict[str, t.SessionSummary] = {}
        self._failed_snapshots: list[str] = []
        self._seen: set[str] = set()
        """Stored channels loaded at least once in this run (so not cut by a restart)."""
        self._cut: list[tuple[str, str]] = []
        self._subscribers: dict[str, dict[HostConnection, None]] = {ROOT_CHANNEL: {}}
        self._connections: dict[HostConnection, None] = {}
        self._online: dict[str, int] = {}
        """clientId to its open connections (at most one, but during a claim's settling)."""
        self._events: deque[Event] = deque()
        self._replay = ReplayBuffer(
            max_envelopes=replay_max_envelopes, max_bytes=replay_max_bytes
        )
        self._clients = sessions.ClientBook(
            remembered_clients, remembered_clients_max_age_ms,
            kept_capacity=remembered_clients_with_state,
            kept_min_age_ms=remembered_clients_min_age_ms)
        self._grace = active_client_grace_ms
        self._review = review
        self._held: dict[int, tuple[ClientAction, HostConnection]] = {}
        self._actions = 0
        self._views = sessions.ViewBook()
        self._coalescer = Coalescer(encode_envelope)
        self._coalescer.tracking = store is not None
        self._numbers = 0
        self._default_directory = default_directory
        self._completion_trigger_characters = completion_trigger_characters
        self._terminal_command_prefix = terminal_command_prefix
        self._telemetry = telemetry
        self._sessions = sessions.SessionBook(list_page_size)
        self._terminal_creators: dict[str, object] = {}
        """Under a policy: terminals a client claims -> the principal that created them."""
        self._authorize: Authorize | None
        if isinstance(authorize, OwnershipPolicy):
            self._authorize = authorize.bind(self._sessions.owned_by)
            self._owner_key: OwnerKey = owner_key or authorize.owner_key
        else:
            self._authorize = None if authorize is None else fail_closed(authorize)
            self._owner_key = owner_key or default_owner_key
        # under a policy, listSessions cursors must not count the sessions of others
        self._cursor_seal = (None if self._authorize is None
                             else sessions.CursorSeal(secrets.token_bytes(16)))
        self.observer: HostObserver | None = None
        """Told of every applied action and removed channel (``None``: nobody)."""
        self._limits = limits if limits is not None else HostLimits()
        self._bounds = Bounds.for_message_size(self._limits.max_message_size)
        self._parts = PartSizes()
        self._turn_sizes = TurnSizes()
        self.content = ContentStore(max_item_bytes=self._item_limit(self._limits))
        """Large content served by reference (:meth:`by_reference`, ``resourceRead``)."""
        if store is not None:
            self.content.fallback = self._stored_content
            self.content.on_put = self._content_put
            self.content.on_share = self._content_shared
            self._restore(store)

    @property
    def limits(self) -> HostLimits:
        """The per-connection budgets; may be replaced (an I/O layer applies its own)."""
        return self._limits

    @limits.setter
    def limits(self, limits: HostLimits) -> None:
        self._limits = limits
        self._bounds = Bounds.for_message_size(limits.max_message_size)
        self.content.max_item_bytes = self._item_limit(limits)

    @staticmethod
    def _item_limit(limits: HostLimits) -> int:
        # a stored item must fit one resourceRead answer, base64 and framing included
        return max(1, (limits.max_message_size - 4096) * 3 // 4)

    def by_reference(self, action: t.StateAction, channel: str | None = None) -> t.StateAction:
        """``action`` with every tool-result block over ``limits.inline_content_bytes``
        stored in :attr:`content` and sent as a ``ToolResultResourceContent``
        reference, which clients read with ``resourceRead`` (the core answers
        it).  For what an agent produced: a chat of any size stays openable.
        ``channel`` (the chat it goes to) owns what is stored: it is forgotten
        with the chat (and the forks that copied it)."""
        return by_reference(action, self.content, self._limits.inline_content_bytes, channel)

    # -- reading the state --

    @property
    def server_seq(self) -> int:
        """The last ``serverSeq`` given out (0 before the first envelope)."""
        return self._seq

    @property
    def replay(self) -> ReplayBuffer:
        """The replay buffer (read it; the host appends)."""
        return self._replay

    @property
    def connections(self) -> tuple[HostConnection, ...]:
        """The connections not closed yet, in connection order."""
        return tuple(self._connections)

    @property
    def channels(self) -> tuple[str, ...]:
        """Every channel the host holds, stateless ones included, in creation order."""
        return tuple(self._states)

    def has_channel(self, uri: str) -> bool:
        return uri in self._states

    def subscribers(self, uri: str) -> tuple[HostConnection, ...]:
        """The open connections subscribed to channel ``uri`` (none for an unknown one)."""
        return tuple(self._subscribers.get(uri, ()))

    def state(self, uri: str) -> t.SnapshotState | None:
        """The state of channel ``uri`` (``None`` for a stateless one); ``KeyError`` if absent."""
        return self._states[uri]

    def remembered_version(self, client_id: str) -> str | None:
        """The version ``client_id`` negotiated, if it is still remembered for ``reconnect``.

        An entry past ``remembered_clients_max_age_ms`` is forgotten on the way.
        """
        return self._clients.version(
            client_id, self._clock(), connected=self._connected(client_id)
        )

    @property
    def held_actions(self) -> tuple[ClientAction, ...]:
        """The client actions ``review`` held and the embedder has not settled, oldest first."""
        return tuple(held for held, _ in self._held.values())

    def now(self) -> int:
        """The injected clock."""
        return self._clock()

    # -- events --

    def next_event(self) -> Event | None:
        """The oldest event not read yet, or ``None``."""
        return self._events.popleft() if self._events else None

    def events(self) -> Iterator[Event]:
        """Drain the events, oldest first (events queued while iterating are included)."""
        while self._events:
            yield self._events.popleft()

    # -- connections --

    def connect(self, *, principal: object = None) -> HostConnection:
        """A new connection, waiting for ``initialize`` (or ``reconnect``).

        ``principal`` is who the transport's embedder authenticated (any
        object; ``None``: nobody in particular), kept as the connection's
        :attr:`~HostConnection.principal`.
        """
        self._numbers += 1
        conn = HostConnection(self, self._numbers, principal=principal)
        self._connections[conn] = None
        return conn

    def _close(self, conn: HostConnection, reason: str) -> None:
        if conn.state is ConnectionState.CLOSED:
            return
        self._coalescer.leave(conn)
        was_open = conn.state is ConnectionState.OPEN
        conn.state = ConnectionState.CLOSED
        conn._claim = None
        # what a reconnect would resume: such a client is not displaced by throwaways
        keep = bool(conn._subscriptions) or conn._dispatched
        leaving = conn.subscriptions
        for uri in leaving:
            self._subscribers.get(uri, {}).pop(conn, None)
        conn._subscriptions.clear()
        conn._pending.clear()
        self._connections.pop(conn, None)
        client_id, version = conn.client_id, conn.protocol_version
        if was_open and client_id is not None:
            left = self._online.get(client_id, 0) - 1
            if left > 0:
                self._online[client_id] = left
            else:
                self._online.pop(client_id, None)
        if was_open and client_id is not None and version is not None:
            now = self._clock()
            # the reconnect window opens when the client goes away, not when it came
            self._remember(client_id, version, now,
                           keep=keep or self._clients.kept(client_id)
                           or bool(self._active_in(client_id)))
            if (
                self._grace is not None
                and not self._connected(client_id)
                and self._active_in(client_id)
            ):
                self._clients.due_at(client_id, None, now + self._grace)
        self._events.append(ConnectionClosed(connection=conn, reason=reason,
                                             subscriptions=leaving))
        for claimant in [c for c in self._connections
                         if c._claim is not None and c._claim.holder is conn]:
            # the holder is gone: the claim needs no probe any more
            self._resume_claim(claimant)

    def _connected(self, client_id: str, channel: str | None = None) -> bool:
        """Whether ``client_id`` has an open connection (subscribed to ``channel``, if given)."""
        return any(
            conn.client_id == client_id
            and conn.state is ConnectionState.OPEN
            and (channel is None or channel in conn._subscriptions)
            for conn in self._connections
        )

    def _active_in(self, client_id: str) -> list[str]:
        """The sessions whose ``activeClients`` list ``client_id``."""
        return [
            uri
            for uri, state in self._states.items()
            if isinstance(state, t.SessionState)
            and any(active.client_id == client_id for active in state.active_clients)
        ]

    # -- users kept apart (``authorize``) --

    @property
    def authorize(self) -> Authorize | None:
        """The policy the host asks (an :class:`OwnershipPolicy` bound to this host's
        owners); ``None``: every connection may do everything (no policy)."""
        return self._authorize

    def session_owner(self, session: str) -> str | None:
        """The owner key recorded for ``session`` when it was created (``None``: nobody's)."""
        return self._sessions.owned_by(session)

    def may(self, principal: object, channel: str, operation: Operation) -> bool:
        """Whether ``principal`` may do ``operation`` on ``channel``, resolved to the
        session it belongs to; ``True`` without a policy, and for a channel that
        belongs to no session (the root, a terminal a client claims).  For an
        embedder's own requests and services (terminals, files)."""
        authorize = self._authorize
        if authorize is None:
            return True
        session = self._owning_session(channel)
        if session is not None:
            return authorize(principal, session, operation)
        if channel in self._terminal_creators:
            # a shell is no one else's business: a terminal a client claims is its
            # creator's (and an admin's, under the ownership policy)
            return self._same_principal(self._terminal_creators[channel], principal)
        return True

    def _same_principal(self, owner: object, principal: object) -> bool:
        """Whether ``principal`` may act as ``owner`` (the ownership policy: the same
        owner key, or an admin; another policy: equal principals)."""
        authorize = self._authorize
        if isinstance(authorize, BoundOwnership):
            return authorize.same(owner, principal)
        try:
            return owner is principal or bool(owner == principal)
        except Exception:  # the embedder's __eq__: a policy that fails refuses
            return False

    def _owning_session(self, uri: str) -> str | None:
        """The session ``uri`` belongs to: itself, the session of a chat, of its
        annotations, of a terminal it claims; ``None``: no session's."""
        # by prefix first: this runs for every client action under a policy
        if uri.startswith("ahp-session:"):
            if uri.endswith("/annotations") and channel_kind(uri) is ChannelKind.ANNOTATIONS:
                return uri.removesuffix("/annotations")
            return uri
        kind = ChannelKind.CHAT if uri.startswith("ahp-chat:") else channel_kind(uri)
        if kind is ChannelKind.CHAT:
            owner = self._sessions.owner_of(uri)
            if owner is None and self._states.is_loaded(uri):
                # a chat the helpers did not record: the session whose catalogue lists it
                for candidate in self._states.loaded:
                    state = self._states.get(candidate)
                    if isinstance(state, t.SessionState) and any(
                        chat.resource == uri for chat in state.chats
                    ):
                        return candidate
            return owner
        if kind is ChannelKind.TERMINAL and uri in self._states:
            state = self._states.get(uri)
            if isinstance(state, t.TerminalState) and isinstance(
                state.claim, t.TerminalSessionClaim
            ):
                return state.claim.session
        return None

    def _may_read(self, conn: HostConnection, uri: str) -> bool:
        """Whether ``conn`` may read stored content ``uri``: content no channel owns is
        anyone's, else it must be readable through one of the chats referencing it
        (content is stored once for identical bytes, so several may)."""
        owners = self.content.owners(uri) or self._stored_content_owners(uri)
        return not owners or any(
            self.may(conn.principal, owner, Operation.READ_CONTENT) for owner in owners
        )

    def _refused(
        self, conn: HostConnection, request_id: t.JsonRpcId, params: object
    ) -> bool:
        """Answer a request the policy refuses as the host answers one about a channel
        that does not exist (so existence does not leak); ``False``: not refused."""
        op = Operation.DISPATCH
        code: int = AhpErrorCode.NOT_FOUND
        uri: str | None
        match params:
            case t.SubscribeParams(channel=uri):
                op = Operation.SUBSCRIBE
                message = f"no channel {uri!r}"
            case t.FetchTurnsParams(channel=uri):
                op = Operation.FETCH_TURNS
                message = f"no chat {uri!r}"
            case t.ResourceReadParams(uri=uri) if uri.startswith(CONTENT_SCHEME):
                if self._may_read(conn, uri):
                    return False
                conn._send_error(request_id, AhpErrorCode.CONTENT_NOT_FOUND,
                                 f"no content {uri!r}", None)
                return True
            case t.CreateChatParams(channel=uri):
                op, code = Operation.CREATE_CHAT, AhpErrorCode.SESSION_NOT_FOUND
                message = f"no session {uri!r}"
            case t.DisposeSessionParams(channel=uri):
                op, code = Operation.DISPOSE, AhpErrorCode.SESSION_NOT_FOUND
                message = f"no session {uri!r}"
            case t.DisposeChatParams(channel=uri):
                op = Operation.DISPOSE
                message = f"no chat {uri!r}"
            case t.DisposeTerminalParams(channel=uri):
                op = Operation.DISPOSE
                message = f"no terminal {uri!r}"
            case t.CreateSessionParams(channel=uri):
                assert self._authorize is not None
                if self._authorize(conn.principal, uri, Operation.CREATE):
                    return False
                conn._send_error(request_id, AhpErrorCode.PERMISSION_DENIED,
                                 "this connection may not create sessions", None)
                return True
            case t.CreateTerminalParams(claim=t.TerminalSessionClaim(session=uri)):
                code = AhpErrorCode.SESSION_NOT_FOUND
                message = f"no session {uri!r}"
            case _:
                uri = getattr(params, "channel", None)
                message = f"no channel {uri!r}"
        if not isinstance(uri, str) or self.may(conn.principal, uri, op):
            return False
        conn._send_error(request_id, code, message, None)
        return True

    def _visible_counter(self) -> Callable[[object], int]:
        """How many listed sessions a principal may see, now."""
        authorize = self._authorize
        assert authorize is not None
        listed = self.listed_sessions()
        if isinstance(authorize, BoundOwnership):
            return authorize.counter(listed)
        return lambda principal: sum(1 for uri in listed
                                     if authorize(principal, uri, Operation.SEE))

    def _visible_terminals(
        self, principal: object, terminals: tuple[t.TerminalInfo, ...]
    ) -> tuple[t.TerminalInfo, ...]:
        authorize = self._authorize
        assert authorize is not None
        creators = self._terminal_creators
        return tuple(
            info for info in terminals
            if (authorize(principal, info.claim.session, Operation.SEE)
                if isinstance(info.claim, t.TerminalSessionClaim)
                else info.resource not in creators
                or self._same_principal(creators[info.resource], principal))
        )

    def _narrowed(
        self,
        principal: object,
        action: t.StateAction,
        counter: Callable[[object], int] | None = None,
    ) -> tuple[str, object, t.StateAction]:
        """A root action narrowing ``activeSessions`` or ``terminals`` as ``principal``
        sees it: which field, its value, the action carrying it."""
        if isinstance(action, t.RootActiveSessionsChangedAction):
            count = (counter or self._visible_counter())(principal)
            return "activeSessions", count, evolve(action, active_sessions=count)
        assert isinstance(action, t.RootTerminalsChangedAction)
        terminals = self._visible_terminals(principal, action.terminals)
        return "terminals", terminals, evolve(action, terminals=terminals)

    def _snapshot_for(self, conn: HostConnection, uri: str) -> t.Snapshot | None:
        """:meth:`snapshot` of ``uri`` as ``conn`` may see it: the root narrowed to its
        principal's sessions under a policy (and what it holds recorded)."""
        snapshot = self.snapshot(uri)
        if self._authorize is None or uri != ROOT_CHANNEL or snapshot is None:
            return snapshot
        state = snapshot.state
        assert isinstance(state, t.RootState)
        count, terminals = state.active_sessions, state.terminals
        if count is not None:
            count = self._visible_counter()(conn.principal)
        if terminals is not None:
            terminals = self._visible_terminals(conn.principal, terminals)
        conn._root_view = {"activeSessions": count, "terminals": terminals}
        return evolve(snapshot, state=evolve(state, active_sessions=count, terminals=terminals))

    def _send_narrowed(
        self, envelope: t.ActionEnvelope, recipients: tuple[HostConnection, ...]
    ) -> None:
        """Send a narrowed root action: each connection gets it as its principal sees
        it, and nothing when that changes nothing it holds (which would say that
        something it may not see changed)."""
        encoded: dict[object, tuple[str, object, bytes]] = {}
        counter = (self._visible_counter()
                   if isinstance(envelope.action, t.RootActiveSessionsChangedAction) else None)
        for conn in recipients:
            version = conn.protocol_version
            if version is None or not is_action_known_to_version(envelope.action, version):
                continue
            alike = conn._alike
            entry = encoded.get(alike)
            if entry is None:
                name, value, action = self._narrowed(conn.principal, envelope.action, counter)
                data = encode_envelope(evolve(envelope, action=action))
                if self._journal is not None:
                    self._journal.sent.append(data)  # dropped if the commit fails
                entry = encoded[alike] = (name, value, data)
            name, value, data = entry
            if name in conn._root_view and conn._root_view[name] == value:
                continue
            conn._root_view[name] = value
            conn._queue(data)

    def _narrowed_replay(
        self, conn: HostConnection, actions: tuple[t.ActionEnvelope, ...]
    ) -> tuple[t.ActionEnvelope, ...]:
        """A replay's narrowed root actions as ``conn``'s principal sees them now: only
        the last of each kind, which brings its root to what a snapshot would hold."""
        last: dict[type, int] = {}
        for n, envelope in enumerate(actions):
            if envelope.channel == ROOT_CHANNEL and isinstance(envelope.action, _NARROWED):
                last[type(envelope.action)] = n
        if not last:
            return actions
        conn._root_view = {}
        out = []
        for n, envelope in enumerate(actions):
            if envelope.channel == ROOT_CHANNEL and isinstance(envelope.action, _NARROWED):
                if last[type(envelope.action)] != n:
                    continue
                name, value, action = self._narrowed(conn.principal, envelope.action)
                conn._root_view[name] = value
                out.append(evolve(envelope, action=action))
            else:
                out.append(envelope)
        return tuple(out)

    def _seers(self, session: str) -> frozenset[HostConnection] | None:
        """The root's subscribers that may see ``session`` (``None``: no policy): asked
        before it goes, when the policy can still tell whose it was."""
        authorize = self._authorize
        if authorize is None:
            return None
        verdicts: dict[object, bool] = {}
        seers = []
        for conn in self._subscribers.get(ROOT_CHANNEL, ()):
            seen = verdicts.get(conn._alike)
            if seen is None:
                seen = verdicts[conn._alike] = authorize(conn.principal, session,
                                                         Operation.SEE)
            if seen:
                seers.append(conn)
        return frozenset(seers)

    # -- channels --

    def add_channel(self, uri: str, state: t.SnapshotState | None = None) -> None:
        """Create channel ``uri`` with ``state`` (``None``: a stateless channel such as OTLP)."""
        if uri in self._states:
            raise LocalProtocolError(f"channel {uri!r} already exists")
        kind = channel_kind(uri)
        if state is None:
            if kind is not None and kind.is_stateful:
                raise LocalProtocolError(f"{uri!r} is a {kind.value} channel: give its state")
        elif kind is not None and not isinstance(state, STATE_TYPES.get(kind, ())):
            raise LocalProtocolError(f"{uri!r} does not hold a {type(state).__name__}")
        self._states[uri] = state
        self._subscribers[uri] = {}
        journal = self._journal
        if journal is not None:
            journal.touch(uri, ABSENT)
            journal.added[uri] = None
            journal.removed.pop(uri, None)
            self._seen.add(uri)  # made in this run: a turn under way in it is live

    def remove_channel(self, uri: str) -> None:
        """Remove channel ``uri``; its subscribers stop hearing of it, actions to it are ignored."""
        if uri == ROOT_CHANNEL:
            raise LocalProtocolError("the root channel cannot be removed")
        if uri not in self._states:
            raise LocalProtocolError(f"no channel {uri!r}")
        journal = self._journal
        if journal is not None:
            journal.touch(uri, self._states[uri])
            journal.removed[uri] = None
            journal.added.pop(uri, None)
            entry = self._sessions.export(uri)
            journal.undo.append(lambda: self._sessions.reimport(uri, entry))
            if uri in self._listed:
                self._listed.discard(uri)
                journal.undo.append(lambda: self._listed.add(uri))
            for table in (self._log_bytes, self._snap_bytes, self._written):
                table.pop(uri, None)
        del self._states[uri]
        self.content.release(uri)
        self._parts.drop_channel(uri)
        # what was held of it was sent before the removal: it goes now
        self._coalescer.release_channel(uri)
        for conn in self._subscribers.pop(uri, {}):
            conn._subscriptions.pop(uri, None)
            conn._windows.pop(uri, None)
        self._sessions.forget_channel(uri)
        self._views.drop_chat(uri)
        observer = self.observer
        if observer is not None:
            observer.removed(uri)

    def snapshot(self, uri: str) -> t.Snapshot | None:
        """A snapshot of stateful channel ``uri`` as of now (``None`` if stateless)."""
        state = self._states[uri]
        if state is None:
            return None
        return t.Snapshot(resource=uri, state=state, from_seq=self._seq)

    # -- sequencing --

    def dispatch(self, channel: str, action: t.StateAction) -> t.ActionEnvelope:
        """Apply a server action to ``channel``, sequence it and send it to the subscribers.

        Atomic: an action that cannot be encoded (a lone surrogate, a NaN or
        an infinity in a value the caller built) raises
        :class:`~agenthost_protocol.errors.LocalProtocolError` naming the
        field, and changes nothing: not the state, not ``serverSeq``, not the
        replay buffer, nothing is sent.
        """
        state = self._states.get(channel)
        if state is None:
            raise LocalProtocolError(f"no stateful channel {channel!r}")
        return self._apply(channel, state, action, None)

    def _apply(
        self,
        channel: str,
        state: t.SnapshotState,
        action: t.StateAction,
        origin: t.ActionOrigin | None,
    ) -> t.ActionEnvelope:
        # a message, title or part too big for a snapshot goes by reference or is cut
        action = bound_action(channel, state, action, bounds=self._bounds, store=self.content,
                              parts=self._parts)
        if isinstance(state, t.ChatState) and isinstance(
            action, t.ChatTurnsLoadedAction | t.ChatTruncatedAction
        ):
            # what _unhide sends first must not go out for an action that then fails
            wire.dumps(action)
            self._unhide(channel, state, action)
        journal = self._journal
        if journal is None:
            new = reduce(channel, state, action, now=self._clock)
            # sequenced (encoded) before the state changes: a failure leaves both as they were
            envelope = self._sequence(channel, action, origin, None, None)
        else:
            # the clock is read once and stored with the record: loading the
            # channel replays it to the same state (modifiedAt included)
            ms = self._clock()
            new = reduce(channel, state, action, now=lambda: ms)
            envelope = self._sequence(channel, action, origin, None, None, ms=ms)
            journal.touch(channel, state)
        self._states[channel] = new
        if isinstance(new, t.ChatState) and not new.turns:
            # nothing is left to hide (``chat/truncated`` without a turn)
            self._views.drop_chat(channel)
        elif isinstance(new, t.TerminalState) and new is not state:
            self._sync_terminal(channel, new)
        observer = self.observer
        if observer is not None:
            observer.applied(envelope)
        return envelope

    def _sequence(
        self,
        channel: str,
        action: t.StateAction,
        origin: t.ActionOrigin | None,
        rejection: str | None,
        only_to: str | None,
        *,
        ms: int = 0,
    ) -> t.ActionEnvelope:
        """Give ``action`` the next ``serverSeq``, record it and send it.

        ``only_to`` addresses the envelope to one client (a rejection, a page
        of a view): its subscribed connections get it, a reconnect of that
        client replays it, nobody else hears of it.
        """
        envelope = t.ActionEnvelope(
            channel=channel,
            action=action,
            server_seq=self._seq + 1,
            origin=origin,
            rejection_reason=rejection,
        )
        data = encode_envelope(envelope)  # may raise: nothing is taken before it succeeds
        if len(data) > self._limits.max_message_size:
            raise LocalProtocolError(
                f"{action.type} on {channel} would be a {len(data)}-byte message, over the "
                f"{self._limits.max_message_size}-byte limit no client could take "
                "(large tool results go by reference: Host.by_reference)"
            )
        self._seq += 1
        self._replay.append(envelope, size=len(data), only_to=only_to)
        journal = self._journal
        if journal is not None:
            journal.log.append(LogRecord(seq=self._seq, channel=channel, data=data,
                                         only_to=only_to, ms=ms))
            self._log_bytes[channel] = self._log_bytes.get(channel, 0) + len(data)
        subscribers = self._subscribers.get(channel, {})
        if only_to is None:
            recipients: tuple[HostConnection, ...] = tuple(subscribers)
        else:
            # a client's reconciler refuses envelopes of channels it does not
            # track, so a dispatcher that is not subscribed learns nothing
            recipients = tuple(conn for conn in subscribers if conn.client_id == only_to)
        coalescer = self._coalescer
        mergeable = only_to is None and is_mergeable(envelope)
        if not mergeable and coalescer.holds(channel):
            coalescer.release_channel(channel)  # what was held goes before this
        if (
            self._authorize is not None
            and channel == ROOT_CHANNEL
            and only_to is None
            and isinstance(action, _NARROWED)
        ):
            self._send_narrowed(envelope, recipients)
            return envelope
        known: dict[str | None, bool] = {}
        for conn in recipients:
            version = conn.protocol_version
            if version not in known:
                # filtering never rewrites an envelope, so the one encoding
                # above serves every version that knows the action
                known[version] = version is not None and is_action_known_to_version(
                    action, version
                )
            if known[version]:
                windows = conn._windows
                window = windows.get(channel, 0) if windows and mergeable else 0
                if window:
                    coalescer.hold(conn, window, envelope, data, clock=self._clock,
                                   limit=self._limits.max_message_size // 2)
                else:
                    conn._queue(data)
        return envelope

    def _unhold(self, group: Held) -> None:
        self._coalescer.release(group)

    def deliver_due(self, *, until: int | None = None) -> None:
        """Queue the deltas held for coalescing whose window has passed by ``until``
        (epoch ms; the host's clock when ``None``).

        Only subscriptions with ``delivery.maxLatencyMs`` hold any; an
        embedder calls this when :meth:`next_delivery` says
        (``HostServer`` does, by its own timer).
        """
        if self._coalescer:
            self._coalescer.release_due(self._clock() if until is None else until)

    def next_delivery(self) -> int | None:
        """The epoch ms by which :meth:`deliver_due` must be called, or ``None``."""
        return self._coalescer.next_due()

    def notify(self, method: str, params: ProtocolNotificationParams) -> None:
        """Send a protocol notification to the subscribers of ``params.channel``.

        Each connection gets it only if its version knows ``method``; it is
        never replayed.
        """
        info = METHODS.get(method)
        if (
            method == "action"
            or info is None
            or info.kind is not MessageKind.NOTIFICATION
            or Direction.SERVER_TO_CLIENT not in info.directions
        ):
            raise LocalProtocolError(f"{method!r} is not a protocol notification")
        if not isinstance(params, info.params):
            raise LocalProtocolError(f"{method} takes {info.params.__name__}")
        self._notify(method, params, None)

    def _notify(
        self,
        method: str,
        params: ProtocolNotificationParams,
        seers: frozenset[HostConnection] | None,
    ) -> None:
        """:meth:`notify`; under a policy, a root notification about a session goes to
        the subscribers that may see it (``seers`` when they were asked before)."""
        data: bytes | None = None
        known: dict[str | None, bool] = {}
        session = None
        authorize = self._authorize
        if authorize is not None and params.channel == ROOT_CHANNEL:
            session = _session_named(params)
        verdicts: dict[object, bool] = {}
        for conn in tuple(self._subscribers.get(params.channel, ())):
            if session is not None:
                if seers is not None:
                    seen = conn in seers
                else:
                    alike = conn._alike
                    seen_now = verdicts.get(alike)
                    if seen_now is None:
                        assert authorize is not None
                        seen_now = verdicts[alike] = authorize(conn.principal, session,
                                                               Operation.SEE)
                    seen = seen_now
                if not seen:
                    continue
            version = conn.protocol_version
            if version not in known:
                known[version] = version is not None and (
                    filter_notification_for_version(method, params, version) is not None
                )
            if known[version]:
                if data is None:
                    data = encode_notification(method, params)
                    if self._journal is not None:
                        self._journal.sent.append(data)
                conn._queue(data)

    # -- input --

    def _receive(self, conn: HostConnection, data: bytes | str) -> None:
        if conn.state is ConnectionState.CLOSED:
            return
        try:
            msg = wire.parse_message(data, result_method=conn._pending.get)
        except ProtocolError as e:
            response = e.response()
            if response is not None:
                conn._send_json(response)
            elif isinstance(e.request_id, int) and e.request_id in conn._pending:
                # a client's answer to our request that does not decode
                method = conn._pending.pop(e.request_id)
                error = t.JsonRpcError(code=e.code, message=str(e))
                self._events.append(ErrorReceived(
                    connection=conn, request_id=e.request_id, method=method, error=error
                ))
            return
        match msg:
            case t.JsonRpcRequest(id=request_id, method=method, params=params):
                self._request(conn, request_id, method, params)
            case t.JsonRpcNotification(method=method, params=params):
                self._notification(conn, method, params)
            case t.JsonRpcSuccessResponse(id=int() as request_id, result=result):
                asked = conn._pending.pop(request_id, None)
                if asked is not None:
                    # parse_message typed the result by the method we asked
                    typed = cast(ServerRequestResult, result)
                    self._events.append(ResponseReceived(
                        connection=conn, request_id=request_id, method=asked, result=typed
                    ))
            case t.JsonRpcErrorResponse(id=int() as request_id, error=error):
                asked = conn._pending.pop(request_id, None)
                if asked is not None:
                    self._events.append(ErrorReceived(
                        connection=conn, request_id=request_id, method=asked, error=error
                    ))
            case _:
                pass  # an answer to nothing we asked: JSON-RPC never answers a response

    def _request(
        self, conn: HostConnection, request_id: t.JsonRpcId, method: str, params: object
    ) -> None:
        if Direction.CLIENT_TO_SERVER not in METHODS[method].directions:
            conn._send_error(request_id, JsonRpcErrorCode.METHOD_NOT_FOUND,
                             f"{method} is not a client-to-server request", None)
            return
        if method == "ping":
            conn._send_result(request_id, None)
            return
        if conn.state is ConnectionState.AWAITING_INITIALIZE:
            if conn._claim is not None:
                conn._send_error(request_id, JsonRpcErrorCode.INVALID_REQUEST,
                                 "the handshake of this connection is still in progress", None)
            elif isinstance(params, t.InitializeParams | t.ReconnectParams):
                self._handshake(conn, request_id, params)
            else:
                conn._send_error(request_id, JsonRpcErrorCode.INVALID_REQUEST,
                                 "initialize must be the first request", None)
            return
        if isinstance(params, t.InitializeParams):
            conn._send_error(request_id, JsonRpcErrorCode.INVALID_REQUEST,
                             "the connection is already initialized", None)
        elif self._authorize is not None and self._refused(conn, request_id, params):
            pass  # answered as if the channel did not exist
        elif isinstance(params, t.ReconnectParams):
            self._reconnect(conn, request_id, params)
        elif isinstance(params, t.SubscribeParams):
            self._subscribe(conn, request_id, params)
        elif isinstance(params, t.FetchTurnsParams) and self._page_view(conn, request_id, params):
            pass  # a page of the turns a view hid: the core's own cursor, the core's answer
        elif isinstance(params, t.ResourceReadParams) and params.uri.startswith(CONTENT_SCHEME):
            stored = self.content.read(params.uri, params.encoding)
            if stored is None:
                conn._send_error(request_id, AhpErrorCode.CONTENT_NOT_FOUND,
                                 f"no content {params.uri!r}", None)
            else:
                conn._send_result(request_id, stored)
        else:
            responder: Responder[ClientRequestResult | None] = Responder(
                conn, request_id, method
            )
            conn._unanswered.add(request_id)
            self._events.append(RequestReceived(
                connection=conn, request_id=request_id, method=method,
                # parse_message typed the params by method; every method left
                # here is one of ClientRequestParams
                params=cast("ClientRequestParams", params),
                responder=responder,
            ))

    def _notification(self, conn: HostConnection, method: str, params: object) -> None:
        # a server-to-client method from a client, or anything before the handshake:
        # notifications are never answered, so they are dropped
        if conn.state is not ConnectionState.OPEN:
            return
        if isinstance(params, t.UnsubscribeParams):
            if params.channel in conn._subscriptions:
                self._events.append(Unsubscribed(connection=conn, channel=params.channel))
            conn._subscriptions.pop(params.channel, None)
            self._subscribers.get(params.channel, {}).pop(conn, None)
            client_id = conn.client_id
            if conn._windows.pop(params.channel, None) is not None:
                held = conn._held
                if held is not None and held.channel == params.channel:
                    self._coalescer.release(held)
                if client_id is not None:
                    self._coalescer.clear_window(client_id, params.channel)
            session = self._states.get(params.channel)
            if client_id is not None and not self._connected(client_id, params.channel):
                self._views.drop(client_id, params.channel)
                if isinstance(session, t.SessionState) and any(
                    active.client_id == client_id for active in session.active_clients
                ):
                    # leaving the session's channel is leaving the session (the
                    # customizations guide); due at once, done by expire_clients
                    self._clients.due_at(client_id, params.channel, self._clock())
        elif isinstance(params, t.DispatchActionParams):
            self._client_action(conn, params)

    # -- the core commands --

    def _handshake(
        self,
        conn: HostConnection,
        request_id: t.JsonRpcId,
        params: t.InitializeParams | t.ReconnectParams,
        *,
        counted: bool = False,
    ) -> None:
        """``initialize`` or a first ``reconnect``, unless another open connection
        holds the clientId: then the embedder probes it first."""
        longest = self._limits.max_client_id_length
        if len(params.client_id) > longest:
            # remembered for reconnect: a huge one would cost that memory many times
            conn._send_error(request_id, JsonRpcErrorCode.INVALID_PARAMS,
                             f"clientId too long: at most {longest} characters", None)
            return
        holder = next(
            (
                other
                for other in self._connections
                if other is not conn
                and other.client_id == params.client_id
                and other.state is ConnectionState.OPEN
            ),
            None,
        )
        if isinstance(params, t.ReconnectParams) and not counted and not self._count_reconnect(
            conn, request_id
        ):
            return
        if holder is not None:
            conn._claim = Claim(request_id=request_id, params=params, holder=holder)
            self._events.append(ClientIdClaimed(
                connection=conn, holder=holder, client_id=params.client_id
            ))
        elif isinstance(params, t.InitializeParams):
            self._initialize(conn, request_id, params)
        else:
            self._reconnect(conn, request_id, params, counted=True)

    def settle_claim(
        self,
        claimant: HostConnection,
        *,
        holder_alive: bool,
        holder: HostConnection | None = None,
    ) -> None:
        """Settle a :class:`ClientIdClaimed`: the embedder probed the holder.

        ``holder`` is the connection that was probed (the event's
        ``holder``): a verdict about another one is stale (that holder
        closed, and the claimant now claims from its successor, a new event)
        and is ignored.  Pass it whenever probes may overlap.

        ``holder_alive``: the claim is refused with ``AlreadyExists``
        (``-32010``) and the holder keeps its clientId, its subscriptions
        and its pending actions.  Otherwise the holder is closed (as if its
        transport were lost: what was queued for it is dropped) and the
        claimant's handshake proceeds.  Nothing happens if the claim was
        settled meanwhile (the holder or the claimant closed).
        """
        claim = claimant._claim
        if claim is None or (holder is not None and claim.holder is not holder):
            return
        if not holder_alive:
            # its close resumes every claim on it, this one included
            claim.holder._outbox.clear()
            self._close(claim.holder, "its clientId was claimed by a new connection "
                        "and it did not answer a ping")
            return
        claimant._claim = None
        claimant._send_error(
            claim.request_id, AhpErrorCode.ALREADY_EXISTS,
            f"clientId {claim.params.client_id!r} is held by another open connection", None,
        )

    def _resume_claim(self, claimant: HostConnection) -> None:
        claim = claimant._claim
        if claim is None or claimant.state is not ConnectionState.AWAITING_INITIALIZE:
            return
        claimant._claim = None
        # a parked reconnect was counted when it came
        self._handshake(claimant, claim.request_id, claim.params, counted=True)

    def _unique_subscriptions(
        self, conn: HostConnection, request_id: t.JsonRpcId, uris: Sequence[str]
    ) -> list[str] | None:
        """``uris`` without duplicates, or ``None`` (answered) when over the budget."""
        unique = list(dict.fromkeys(uris))
        cap = self.limits.max_subscriptions
        if len(unique) > cap:
            conn._send_error(request_id, JsonRpcErrorCode.INVALID_PARAMS,
                             f"too many subscriptions: {len(unique)} channels, at most "
                             f"{cap} per connection", None)
            return None
        return unique

    def _initialize(
        self, conn: HostConnection, request_id: t.JsonRpcId, params: t.InitializeParams
    ) -> None:
        try:
            version = negotiate_protocol_version(params.protocol_versions, self.supported_versions)
        except VersionNegotiationFailed as e:
            conn._send_error(request_id, e.code, str(e), e.error_data)
            self._close(conn, "unsupported protocol version")
            return
        wanted = self._unique_subscriptions(conn, request_id, params.initial_subscriptions or ())
        if wanted is None:
            return
        self._open(conn, params.client_id, version)
        # a fresh start: whatever views the client had are gone with its state
        self._views.drop_client(params.client_id)
        self._coalescer.forget_client(params.client_id)
        snapshots = []
        room = self._budget()
        for uri in wanted:
            if uri in self._states and (
                self._authorize is None or self.may(conn.principal, uri, Operation.SUBSCRIBE)
            ):
                self._subscribe_to(conn, uri)
                snapshot = self._snapshot_for(conn, uri)
                if snapshot is not None:
                    snapshot, room = self._fitted(params.client_id, snapshot, room)
                    snapshots.append(snapshot)
        result = t.InitializeResult(
            protocol_version=version,
            server_seq=self._seq,
            server_info=self.server_info,
            snapshots=tuple(snapshots),
            default_directory=self._default_directory,
            completion_trigger_characters=self._completion_trigger_characters,
            terminal_command_prefix=self._terminal_command_prefix,
            telemetry=self._telemetry,
        )
        if not conn._send_result(request_id, result):
            self._close(conn, "the initialize answer was over the message limit")
            return
        self._events.append(Initialized(
            connection=conn, client_id=params.client_id, protocol_version=version
        ))

    def _has_live_views(self, client_id: str) -> bool:
        return client_id in self._online and self._views.has_client(client_id)

    def _open(self, conn: HostConnection, client_id: str, version: str) -> None:
        if conn.state is not ConnectionState.OPEN:
            self._online[client_id] = self._online.get(client_id, 0) + 1
        conn.state = ConnectionState.OPEN
        conn.client_id = client_id
        conn.protocol_version = version
        self._remember(client_id, version, self._clock())
        self._clients.cancel(client_id, None)

    def _remember(
        self, client_id: str, version: str, now: int, *, keep: bool | None = None
    ) -> None:
        evicted = self._clients.remember(client_id, version, now, keep=keep,
                                         live=self._has_live_views)
        for forgotten in evicted:
            # it can only initialize afresh now, which would drop them anyway
            self._views.drop_client(forgotten)
            self._coalescer.forget_client(forgotten)
        journal = self._journal
        if journal is not None:
            for gone in evicted:
                journal.clients.pop(gone, None)
                journal.forgotten[gone] = None
            if client_id not in evicted:
                journal.forgotten.pop(client_id, None)
                journal.clients[client_id] = ClientRecord(
                    client_id=client_id, version=version, touched=now,
                    keep=self._clients.kept(client_id))

    def _subscribe_to(self, conn: HostConnection, uri: str) -> None:
        conn._subscriptions[uri] = None
        self._subscribers.setdefault(uri, {})[conn] = None

    def _count_reconnect(self, conn: HostConnection, request_id: t.JsonRpcId) -> bool:
        """Count a ``reconnect`` against the budget; ``False`` (answered) when over it."""
        now = self._clock()
        window = conn._reconnects
        if window is None:  # most connections never reconnect: no deque for them
            window = conn._reconnects = deque()
        while window and now - window[0] >= 60_000:
            window.popleft()
        if len(window) >= self.limits.max_reconnects_per_minute:
            conn._send_error(request_id, JsonRpcErrorCode.INVALID_REQUEST,
                             f"too many reconnects: at most "
                             f"{self.limits.max_reconnects_per_minute} per minute on a "
                             "connection", None)
            return False
        window.append(now)
        return True

    def _reconnect(
        self,
        conn: HostConnection,
        request_id: t.JsonRpcId,
        params: t.ReconnectParams,
        *,
        counted: bool = False,
    ) -> None:
        if conn.state is ConnectionState.OPEN and params.client_id != conn.client_id:
            conn._send_error(request_id, JsonRpcErrorCode.INVALID_PARAMS,
                             "clientId differs from this connection's", None)
            return
        if not counted and not self._count_reconnect(conn, request_id):
            return
        now = self._clock()
        wanted = self._unique_subscriptions(conn, request_id, params.subscriptions)
        if wanted is None:
            return
        if conn.state is ConnectionState.OPEN:
            version = conn.protocol_version
        else:
            version = self._clients.version(
                params.client_id, self._clock(), connected=self._connected(params.client_id)
            )
        if version is None:
            conn._send_error(request_id, JsonRpcErrorCode.INVALID_PARAMS,
                             f"unknown clientId {params.client_id!r}: send initialize", None)
            return
        self._open(conn, params.client_id, version)
        before = conn.subscriptions
        for uri in before:
            self._subscribers.get(uri, {}).pop(conn, None)
        conn._subscriptions.clear()
        live = [uri for uri in wanted if uri in self._states and (
            self._authorize is None or self.may(conn.principal, uri, Operation.SUBSCRIBE))]
        last = params.last_seen_server_seq
        result: t.ReconnectReplayResult | t.ReconnectSnapshotResult
        entries = self._replay_entries(last)
        listed_live = set(live)
        if entries is not None and sum(
            entry.size for entry in entries
            if entry.envelope.channel in listed_live and entry.only_to in (None, params.client_id)
        ) > self._budget():
            # a replay too big for one message: snapshots (trimmed to fit) instead
            entries = None
        replayed = entries is not None
        if entries is not None:
            for uri in live:
                self._subscribe_to(conn, uri)
            actions = tuple(
                entry.envelope
                for entry in entries
                if entry.envelope.channel in conn._subscriptions
                and entry.only_to in (None, params.client_id)
                and is_action_known_to_version(entry.envelope.action, version)
            )
            if self._authorize is not None:
                actions = self._narrowed_replay(conn, actions)
            missing = tuple(uri for uri in wanted if uri not in listed_live)
            result = t.ReconnectReplayResult(actions=actions, missing=missing)
            # the client keeps its trimmed chats (and gets the pages sent meanwhile)
            self._views.drop_client(params.client_id, keep=conn._subscriptions.__contains__)
        else:
            self._views.drop_client(params.client_id)
            snapshots = []
            room = self._budget()
            for uri in live:
                snapshot = self._snapshot_for(conn, uri)
                if snapshot is not None:
                    # a stateless channel gets no snapshot: the client drops it
                    # and subscribes again from the live edge
                    self._subscribe_to(conn, uri)
                    snapshot, room = self._fitted(params.client_id, snapshot, room)
                    snapshots.append(snapshot)
            result = t.ReconnectSnapshotResult(snapshots=tuple(snapshots))
        for uri in before:
            if uri not in conn._subscriptions:
                self._events.append(Unsubscribed(connection=conn, channel=uri))
        if not conn._send_result(request_id, result):
            self._close(conn, "the reconnect answer was over the message limit")
            return
        self._coalescer.restore_windows(params.client_id, conn)
        listed = set(wanted)
        for session in self._active_in(params.client_id):
            if session not in listed:
                # back, but not in this session: it left it (the customizations guide)
                self._clients.due_at(params.client_id, session, now)
        self._events.append(Reconnected(
            connection=conn, client_id=params.client_id, protocol_version=version,
            replayed=replayed,
        ))

    def _subscribe(
        self, conn: HostConnection, request_id: t.JsonRpcId, params: t.SubscribeParams
    ) -> None:
        uri = params.channel
        if uri not in self._states:
            conn._send_error(request_id, AhpErrorCode.NOT_FOUND, f"no channel {uri!r}", None)
            return
        cap = self.limits.max_subscriptions
        if uri not in conn._subscriptions and len(conn._subscriptions) >= cap:
            conn._send_error(request_id, JsonRpcErrorCode.INVALID_PARAMS,
                             f"too many subscriptions: at most {cap} per connection", None)
            return
        snapshot = self._snapshot_for(conn, uri)
        client_id = conn.client_id
        if client_id is not None:
            self._views.drop(client_id, uri)
            if snapshot is not None:
                snapshot = self._trimmed(client_id, snapshot, params.view, self._budget())
        if conn._send_result(request_id, t.SubscribeResult(snapshot=snapshot)):
            self._subscribe_to(conn, uri)
            delivery = params.delivery
            wanted = 0 if delivery is None else delivery.max_latency_ms or 0
            # advisory (the spec): a window past the host's is the host's
            window = max(0, min(wanted, self._limits.max_delivery_latency_ms))
            if window or uri in conn._windows:
                self._coalescer.set_window(client_id, conn, uri, window)
        elif client_id is not None:
            self._views.drop(client_id, uri)

    def _budget(self) -> int:
        """The bytes a snapshot, a replay or a page of turns may take in one message."""
        return snapshot_budget(self._limits.max_message_size)

    def _fitted(self, client_id: str, snapshot: t.Snapshot, room: int) -> tuple[t.Snapshot, int]:
        """``snapshot`` trimmed to ``room`` bytes (one of several in an answer), and
        the room left after it (a channel other than a chat is taken as small:
        its big fields are bounded, see :mod:`.bounds`)."""
        snapshot, size = self._trim(client_id, snapshot, None, room)
        return snapshot, room - size - 1

    def _trimmed(
        self, client_id: str, snapshot: t.Snapshot, view: t.SubscribeView | None, budget: int
    ) -> t.Snapshot:
        """``snapshot`` of a chat cut to its newest turns, the cut recorded as a view.

        The last ``view.turns`` turns when asked for (the spec's view is
        advisory), and never more than fit ``budget`` bytes: a chat too big for
        one message opens on its newest turns, and the older ones page with
        ``fetchTurns`` (``turnsNextCursor``), whether or not a view was asked.
        Other channels, and chats that fit whole, are snapshotted whole.
        """
        return self._trim(client_id, snapshot, view, budget)[0]

    def _trim(
        self, client_id: str, snapshot: t.Snapshot, view: t.SubscribeView | None, budget: int
    ) -> tuple[t.Snapshot, int]:
        """:meth:`_trimmed`, and about the bytes of the snapshot sent (0: not a chat)."""
        state = snapshot.state
        if not isinstance(state, t.ChatState):
            return snapshot, 0
        # the snapshot's other fields, with room for a cursor this host would issue
        used = len(wire.dumps(evolve(
            snapshot, state=evolve(state, turns=(), turns_next_cursor="view-" + "0" * 20))))
        if not state.turns:
            return snapshot, used
        keep = len(state.turns)
        if view is not None and view.turns is not None and 0 <= view.turns < keep:
            keep = view.turns
        fits = 0
        for turn in reversed(state.turns[len(state.turns) - keep:]):
            size = self._turn_sizes.size(turn) + 1
            if used + size > budget:
                break
            used += size
            fits += 1
        if fits == len(state.turns):
            return snapshot, used
        hidden = len(state.turns) - fits
        recorded = self._views.set(
            client_id, snapshot.resource, hidden=hidden, page=max(fits, 1)
        )
        trimmed = evolve(state, turns=state.turns[hidden:], turns_next_cursor=recorded.cursor)
        return evolve(snapshot, state=trimmed), used

    def _page_view(
        self, conn: HostConnection, request_id: t.JsonRpcId, params: t.FetchTurnsParams
    ) -> bool:
        """Answer a ``fetchTurns`` of turns a view hid from this client; ``False`` if not one."""
        client_id = conn.client_id
        view = None if client_id is None else self._views.get(client_id, params.channel)
        state = self._states.get(params.channel)
        if (
            client_id is None
            or view is None
            or params.cursor not in (None, view.cursor)
            or not isinstance(state, t.ChatState)
        ):
            return False
        try:
            self._send_hidden(params.channel, state, client_id, view,
                              min(view.page, view.hidden))
        except LocalProtocolError as e:
            conn._send_error(request_id, JsonRpcErrorCode.INTERNAL_ERROR, str(e), None)
            return True
        conn._send_result(request_id, t.FetchTurnsResult())
        return True

    def _send_hidden(
        self, chat: str, state: t.ChatState, client_id: str, view: sessions.View, count: int
    ) -> None:
        """Send ``client_id`` the ``count`` newest of the turns its view hides, as its own
        ``chat/turnsLoaded``: the host's state has them already, so it is not reduced.

        Pages too large for one message are sent in smaller ones; a single turn
        too large alone (a host whose limit shrank since) is sent with its
        texts cut (:func:`~.bounds.shrink_turn`)."""
        budget = self._budget()
        while count > 1:
            turns = state.turns[view.hidden - count : view.hidden]
            room = budget
            for turn in turns:
                room -= self._turn_sizes.size(turn) + 1
                if room < 0:
                    break
            if room >= 0:
                break
            count //= 2
        left = view.hidden - count
        turns = state.turns[left : view.hidden]
        if count == 1 and self._turn_sizes.size(turns[0]) > budget:
            turns = (shrink_turn(turns[0], budget),)
        if left:
            cursor: str | None = self._views.set(
                client_id, chat, hidden=left, page=view.page
            ).cursor
        else:
            self._views.drop(client_id, chat)
            cursor = state.turns_next_cursor
        loaded = t.ChatTurnsLoadedAction(turns=turns, turns_next_cursor=cursor)
        self._sequence(chat, loaded, None, None, client_id)

    def _unhide(
        self,
        chat: str,
        state: t.ChatState,
        action: t.ChatTurnsLoadedAction | t.ChatTruncatedAction,
    ) -> None:
        """Before ``action`` goes to everyone, give each trimmed client the turns it needs.

        ``chat/turnsLoaded`` prepends to the turns a client holds, and
        ``chat/truncated`` of a turn the client does not hold would do nothing
        there: either would leave its state apart from the host's.
        """
        for client_id, view in self._views.of_chat(chat):
            if isinstance(action, t.ChatTruncatedAction) and not any(
                turn.id == action.turn_id for turn in state.turns[: view.hidden]
            ):
                continue
            left: sessions.View | None = view
            while left is not None:  # in pages when all of them would not fit one message
                self._send_hidden(chat, state, client_id, left, left.hidden)
                left = self._views.get(client_id, chat)

    def _client_action(self, conn: HostConnection, params: t.DispatchActionParams) -> None:
        state = self._states.get(params.channel)
        if state is None or conn.client_id is None or conn.protocol_version is None:
            return
        if self._authorize is not None and not self.may(
            conn.principal, params.channel, Operation.DISPATCH
        ):
            return  # ignored, as an action for a channel that does not exist is
        conn._dispatched = True
        self._actions += 1
        pending = ClientAction(
            number=self._actions,
            client_id=conn.client_id,
            protocol_version=conn.protocol_version,
            channel=params.channel,
            client_seq=params.client_seq,
            action=params.action,
        )
        self._settle(conn, pending, state, None, review=True)

    def _settle(
        self,
        conn: HostConnection,
        pending: ClientAction,
        state: t.SnapshotState,
        rewrite: t.StateAction | None,
        *,
        review: bool,
    ) -> t.ActionEnvelope | None:
        """Validate ``pending`` against ``state``, ask ``review`` if asked to, then reject,
        hold or apply it (as ``rewrite``, if given).  ``None``: held."""
        channel = pending.channel
        session = self._session_of(channel, state)
        ctx = ValidationContext(
            client_id=pending.client_id,
            version=pending.protocol_version,
            session=session,
            capabilities=self._capabilities(session),
        )
        reason = validate(channel, state, pending.action, ctx)
        action = pending.action if rewrite is None else rewrite
        if reason is None and review and self._review is not None:
            verdict = self._review(pending)
            current = self._states.get(channel)
            if current is None:
                return None  # the hook removed the channel: ignored, as for any gone channel
            # read again: the hook may have dispatched on this channel meanwhile
            state = current
            if verdict is HOLD:
                self._held[pending.number] = (pending, conn)
                return None
            if isinstance(verdict, Reject):
                reason = verdict.reason
            else:
                action = verdict
        if reason is not None:
            # the rejection carries what the client sent: its reconciler matches on it
            return self._sequence(channel, pending.action, pending.origin, reason,
                                  pending.client_id)
        if action is not pending.action and check_family(channel, state, action) is not None:
            raise LocalProtocolError(f"{action.type} is not an action of {channel!r}")
        envelope = self._apply(channel, state, action, pending.origin)
        if self._journal is not None:
            self._journal.applied.append((envelope, pending.client_id))
        # the embedder's agent reacts to client actions (a turn started, a
        # tool call confirmed) after they are applied, in sequence order
        self._events.append(ClientActionApplied(connection=conn, envelope=envelope))
        return envelope

    def accept_held(
        self, held: ClientAction, action: t.StateAction | None = None
    ) -> t.ActionEnvelope | None:
        """Settle an action ``review`` held: apply it (or ``action``, a rewrite of it).

        The host's rules run again first, on the state as it is now: if they
        reject the client's action, the returned envelope is its rejection.
        Returns ``None`` when the channel is gone meanwhile (ignored, no
        echo).  Raises ``LocalProtocolError`` for an action not held (or
        already settled) and for a rewrite of another channel's family.
        """
        state = self._states.get(held.channel)
        if state is not None and action is not None and check_family(
            held.channel, state, action
        ) is not None:
            raise LocalProtocolError(f"{action.type} is not an action of {held.channel!r}")
        conn = self._take_held(held)
        if state is None:
            return None
        return self._settle(conn, held, state, action, review=False)

    def reject_held(self, held: ClientAction, reason: str) -> t.ActionEnvelope | None:
        """Settle an action ``review`` held by rejecting it with ``reason``.

        The rejection goes to that client's connections subscribed to the
        channel, now or (replayed) at its reconnect.  ``None`` when the
        channel is gone; ``LocalProtocolError`` for an action not held.
        """
        self._take_held(held)
        if self._states.get(held.channel) is None:
            return None
        return self._sequence(held.channel, held.action, held.origin, reason, held.client_id)

    def _take_held(self, held: ClientAction) -> HostConnection:
        entry = self._held.get(held.number)
        if entry is None or entry[0] != held:
            raise LocalProtocolError(f"action #{held.number} is not held (or already settled)")
        del self._held[held.number]
        return entry[1]

    def _session_of(self, uri: str, state: t.SnapshotState) -> t.SessionState | None:
        if isinstance(state, t.SessionState):
            return state
        if not isinstance(state, t.ChatState):
            return None
        owner = self._sessions.owner_of(uri)
        if owner is None:
            # a chat the helpers did not create: find the session listing it
            for candidate in self._states.values():
                if isinstance(candidate, t.SessionState) and any(
                    chat.resource == uri for chat in candidate.chats
                ):
                    return candidate
            return None
        found = self._states.get(owner)
        return found if isinstance(found, t.SessionState) else None

    def _capabilities(self, session: t.SessionState | None) -> t.AgentCapabilities | None:
        root = self._states[ROOT_CHANNEL]
        if session is None or not isinstance(root, t.RootState):
            return None
        for agent in root.agents:
            if agent.provider == session.provider:
                return agent.capabilities
        return None

    # -- active clients and remembered clients --

    def remove_active_client(
        self, session: str, client_id: str, *, message: str = "the client left the session"
    ) -> tuple[t.ActionEnvelope, ...]:
        """Remove ``client_id`` from session ``session``'s active clients, and what was its.

        In this order: its unfinished client tool calls in the session's chats
        end with ``chat/toolCallComplete`` (``success: false``, ``message``),
        the session's ``inputNeeded`` entries asking it to execute a tool go
        (``session/inputNeededRemoved``), the customizations it contributed go
        (``session/customizationRemoved``), then ``session/activeClientRemoved``.
        Returns the envelopes, so the embedder's agent learns of the failed
        calls.  Raises ``LocalProtocolError`` if ``session`` is not a session.
        """
        state = self._session_state(session)
        out: list[t.ActionEnvelope] = []
        chats = dict.fromkeys([c.resource for c in state.chats]
                              + list(self._sessions.chats_of(session)))
        for chat in chats:
            chat_state = self._states.get(chat)
            turn = chat_state.active_turn if isinstance(chat_state, t.ChatState) else None
            if turn is None:
                continue
            for part in turn.response_parts:
                call = part.tool_call if isinstance(part, t.ToolCallResponsePart) else None
                contributor = getattr(call, "contributor", None)
                if (
                    isinstance(call, _TOOL_CALLS_IN_FLIGHT)
                    and isinstance(contributor, t.ToolCallClientContributor)
                    and contributor.client_id == client_id
                ):
                    result = t.ToolCallResult(success=False, past_tense_message=message)
                    out.append(self.dispatch(chat, t.ChatToolCallCompleteAction(
                        turn_id=turn.id, tool_call_id=call.tool_call_id, result=result,
                    )))
        for request in self._session_state(session).input_needed or ():
            if (
                isinstance(request, t.SessionToolClientExecutionRequest)
                and request.client_id == client_id
            ):
                out.append(self.dispatch(
                    session, t.SessionInputNeededRemovedAction(id=request.id)
                ))
        for customization in self._session_state(session).customizations or ():
            if getattr(customization, "client_id", None) == client_id:
                out.append(self.dispatch(session, t.SessionCustomizationRemovedAction(
                    id=getattr(customization, "id", ""),
                )))
        out.append(self.dispatch(session, t.SessionActiveClientRemovedAction(client_id=client_id)))
        return tuple(out)

    def expire_clients(self) -> tuple[t.ActionEnvelope, ...]:
        """Do what is due by the clock: the core has no timer, so call this on yours.

        * An active client (in a session's ``activeClients``) is removed with
          :meth:`remove_active_client` when it unsubscribed from the session,
          reconnected without it, or has had no open connection for
          ``active_client_grace_ms`` (the spec's grace period; ``None``: never
          for that reason).  Each condition is checked again now, so a client
          that came back in time stays.
        * Remembered clients idle for longer than
          ``remembered_clients_max_age_ms`` are forgotten (with their views).

        Returns the envelopes dispatched.  :meth:`next_deadline` says when
        there will next be something to do.
        """
        now = self._clock()
        out: list[t.ActionEnvelope] = []
        for client_id, session in self._clients.take_due(now):
            targets = self._active_in(client_id)
            if session is not None:
                targets = [uri for uri in targets if uri == session]
            for uri in targets:
                if not self._connected(client_id, uri if session is not None else None):
                    out.extend(self.remove_active_client(uri, client_id))
        for client_id in self._clients.prune(now, self._connected):
            self._views.drop_client(client_id)
            self._coalescer.forget_client(client_id)
            if self._journal is not None:  # nor kept on disk: a restart would revive it
                self._journal.clients.pop(client_id, None)
                self._journal.forgotten[client_id] = None
        return tuple(out)

    def next_deadline(self) -> int | None:
        """The earliest epoch ms at which :meth:`expire_clients` may have work, or ``None``."""
        times = [x for x in (self._clients.next_due(), self._clients.oldest_expiry())
                 if x is not None]
        return min(times, default=None)

    def _is_ready(self, uri: str) -> bool:
        state = self._states.get(uri)
        return isinstance(state, t.SessionState) and state.lifecycle == t.SessionLifecycle.READY

    def _session_state(self, uri: str) -> t.SessionState:
        state = self._states.get(uri)
        if not isinstance(state, t.SessionState):
            raise LocalProtocolError(f"no session {uri!r}")
        return state

    def _chat_states(self, session: t.SessionState) -> list[t.ChatState]:
        chats = []
        for summary in session.chats:
            state = self._states.get(summary.resource)
            if isinstance(state, t.ChatState):
                chats.append(state)
        return chats
