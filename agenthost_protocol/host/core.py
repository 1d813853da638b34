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
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict, deque
from collections.abc import Iterator, Sequence
from typing import TypeAlias, cast

from attrs import evolve

from .. import types as t
from .. import wire
from ..channels import ROOT_CHANNEL, STATE_TYPES, ChannelKind, channel_kind
from ..errors import InvalidParams, LocalProtocolError, ProtocolError
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
from .connection import ConnectionState, HostConnection
from .events import (
    ClientActionApplied,
    ClientRequestParams,
    ClientRequestResult,
    ConnectionClosed,
    ErrorReceived,
    Event,
    Initialized,
    Reconnected,
    RequestReceived,
    Responder,
    ResponseReceived,
    ServerRequestResult,
)
from .replay import ReplayBuffer
from .validation import ValidationContext, check_chat_source, validate

__all__ = ["Host", "ProtocolNotificationParams"]

ProtocolNotificationParams: TypeAlias = (
    t.SessionAddedParams
    | t.SessionRemovedParams
    | t.SessionSummaryChangedParams
    | t.ProgressParams
    | t.AuthRequiredParams
    | t.OtlpExportLogsParams
    | t.OtlpExportTracesParams
    | t.OtlpExportMetricsParams
)
"""The params of the protocol notifications sent with :meth:`Host.notify`."""


def encode_envelope(envelope: t.ActionEnvelope) -> bytes:
    """The ``action`` notification carrying ``envelope``, as sent on the wire.

    A module function so that tests can count encodings.
    """
    msg = t.JsonRpcNotification(method="action", params=envelope)
    return wire.dumps(msg).encode("utf-8")


def encode_notification(method: str, params: ProtocolNotificationParams) -> bytes:
    """A protocol notification as sent on the wire."""
    return wire.dumps(t.JsonRpcNotification(method=method, params=params)).encode("utf-8")


class Host:
    """The authoritative state of every channel and one :class:`HostConnection` per transport.

    ``clock`` returns epoch milliseconds; it stamps chat ``modifiedAt`` in the
    reducers and the timestamps the session helpers write.
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
        list_page_size: int = 100,
        default_directory: str | None = None,
        completion_trigger_characters: tuple[str, ...] | None = None,
        terminal_command_prefix: str | None = None,
        telemetry: t.TelemetryCapabilities | None = None,
    ) -> None:
        if remembered_clients < 0 or list_page_size < 1:
            raise LocalProtocolError("remembered_clients >= 0 and list_page_size >= 1 please")
        # fail now, not at the first initialize, on a malformed supported list
        with contextlib.suppress(VersionNegotiationFailed):
            negotiate_protocol_version(["0.0.0"], supported_versions)
        self._clock = clock
        self.server_info = server_info
        self.supported_versions = tuple(supported_versions)
        self._seq = 0
        self._states: dict[str, t.SnapshotState | None] = {
            ROOT_CHANNEL: root if root is not None else t.RootState(agents=())
        }
        self._subscribers: dict[str, dict[HostConnection, None]] = {ROOT_CHANNEL: {}}
        self._connections: dict[HostConnection, None] = {}
        self._events: deque[Event] = deque()
        self._replay = ReplayBuffer(
            max_envelopes=replay_max_envelopes, max_bytes=replay_max_bytes
        )
        self._clients: OrderedDict[str, str] = OrderedDict()
        self._remembered = remembered_clients
        self._numbers = 0
        self._default_directory = default_directory
        self._completion_trigger_characters = completion_trigger_characters
        self._terminal_command_prefix = terminal_command_prefix
        self._telemetry = telemetry
        self._sessions = sessions.SessionBook(list_page_size)

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

    def state(self, uri: str) -> t.SnapshotState | None:
        """The state of channel ``uri`` (``None`` for a stateless one); ``KeyError`` if absent."""
        return self._states[uri]

    def remembered_version(self, client_id: str) -> str | None:
        """The version ``client_id`` negotiated, if it is still remembered for ``reconnect``."""
        return self._clients.get(client_id)

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

    def connect(self) -> HostConnection:
        """A new connection, waiting for ``initialize`` (or ``reconnect``)."""
        self._numbers += 1
        conn = HostConnection(self, self._numbers)
        self._connections[conn] = None
        return conn

    def _close(self, conn: HostConnection, reason: str) -> None:
        if conn.state is ConnectionState.CLOSED:
            return
        conn.state = ConnectionState.CLOSED
        for uri in conn.subscriptions:
            self._subscribers.get(uri, {}).pop(conn, None)
        conn._subscriptions.clear()
        conn._pending.clear()
        self._connections.pop(conn, None)
        self._events.append(ConnectionClosed(connection=conn, reason=reason))

    def _remember(self, client_id: str, version: str) -> None:
        if self._remembered == 0:
            return
        self._clients[client_id] = version
        self._clients.move_to_end(client_id)
        while len(self._clients) > self._remembered:
            self._clients.popitem(last=False)

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

    def remove_channel(self, uri: str) -> None:
        """Remove channel ``uri``; its subscribers stop hearing of it, actions to it are ignored."""
        if uri == ROOT_CHANNEL:
            raise LocalProtocolError("the root channel cannot be removed")
        if uri not in self._states:
            raise LocalProtocolError(f"no channel {uri!r}")
        del self._states[uri]
        for conn in self._subscribers.pop(uri, {}):
            conn._subscriptions.pop(uri, None)
        self._sessions.forget_channel(uri)

    def snapshot(self, uri: str) -> t.Snapshot | None:
        """A snapshot of stateful channel ``uri`` as of now (``None`` if stateless)."""
        state = self._states[uri]
        if state is None:
            return None
        return t.Snapshot(resource=uri, state=state, from_seq=self._seq)

    # -- sequencing --

    def dispatch(self, channel: str, action: t.StateAction) -> t.ActionEnvelope:
        """Apply a server action to ``channel``, sequence it and send it to the subscribers."""
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
        self._states[channel] = reduce(channel, state, action, now=self._clock)
        return self._sequence(channel, action, origin, None, None)

    def _sequence(
        self,
        channel: str,
        action: t.StateAction,
        origin: t.ActionOrigin | None,
        rejection: str | None,
        only: HostConnection | None,
    ) -> t.ActionEnvelope:
        self._seq += 1
        envelope = t.ActionEnvelope(
            channel=channel,
            action=action,
            server_seq=self._seq,
            origin=origin,
            rejection_reason=rejection,
        )
        data = encode_envelope(envelope)
        only_to = origin.client_id if rejection is not None and origin is not None else None
        self._replay.append(envelope, size=len(data), only_to=only_to)
        subscribers = self._subscribers.get(channel, {})
        if only is None:
            recipients: tuple[HostConnection, ...] = tuple(subscribers)
        else:
            # a client's reconciler refuses envelopes of channels it does not
            # track, so a dispatcher that is not subscribed learns nothing
            recipients = (only,) if only in subscribers else ()
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
                conn._queue(data)
        return envelope

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
        data: bytes | None = None
        known: dict[str | None, bool] = {}
        for conn in tuple(self._subscribers.get(params.channel, ())):
            version = conn.protocol_version
            if version not in known:
                known[version] = version is not None and (
                    filter_notification_for_version(method, params, version) is not None
                )
            if known[version]:
                if data is None:
                    data = encode_notification(method, params)
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
            if isinstance(params, t.InitializeParams):
                self._initialize(conn, request_id, params)
            elif isinstance(params, t.ReconnectParams):
                self._reconnect(conn, request_id, params)
            else:
                conn._send_error(request_id, JsonRpcErrorCode.INVALID_REQUEST,
                                 "initialize must be the first request", None)
            return
        if isinstance(params, t.InitializeParams):
            conn._send_error(request_id, JsonRpcErrorCode.INVALID_REQUEST,
                             "the connection is already initialized", None)
        elif isinstance(params, t.ReconnectParams):
            self._reconnect(conn, request_id, params)
        elif isinstance(params, t.SubscribeParams):
            self._subscribe(conn, request_id, params)
        else:
            responder: Responder[ClientRequestResult | None] = Responder(
                conn, request_id, method
            )
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
            conn._subscriptions.pop(params.channel, None)
            self._subscribers.get(params.channel, {}).pop(conn, None)
        elif isinstance(params, t.DispatchActionParams):
            self._client_action(conn, params)

    # -- the core commands --

    def _initialize(
        self, conn: HostConnection, request_id: t.JsonRpcId, params: t.InitializeParams
    ) -> None:
        try:
            version = negotiate_protocol_version(params.protocol_versions, self.supported_versions)
        except VersionNegotiationFailed as e:
            conn._send_error(request_id, e.code, str(e), e.error_data)
            self._close(conn, "unsupported protocol version")
            return
        self._open(conn, params.client_id, version)
        snapshots = []
        for uri in params.initial_subscriptions or ():
            if uri in self._states:
                self._subscribe_to(conn, uri)
                snapshot = self.snapshot(uri)
                if snapshot is not None:
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
        conn._send_result(request_id, result)
        self._events.append(Initialized(
            connection=conn, client_id=params.client_id, protocol_version=version
        ))

    def _open(self, conn: HostConnection, client_id: str, version: str) -> None:
        conn.state = ConnectionState.OPEN
        conn.client_id = client_id
        conn.protocol_version = version
        self._remember(client_id, version)

    def _subscribe_to(self, conn: HostConnection, uri: str) -> None:
        conn._subscriptions[uri] = None
        self._subscribers[uri][conn] = None

    def _reconnect(
        self, conn: HostConnection, request_id: t.JsonRpcId, params: t.ReconnectParams
    ) -> None:
        if conn.state is ConnectionState.OPEN:
            if params.client_id != conn.client_id:
                conn._send_error(request_id, JsonRpcErrorCode.INVALID_PARAMS,
                                 "clientId differs from this connection's", None)
                return
            version = conn.protocol_version
        else:
            version = self._clients.get(params.client_id)
        if version is None:
            conn._send_error(request_id, JsonRpcErrorCode.INVALID_PARAMS,
                             f"unknown clientId {params.client_id!r}: send initialize", None)
            return
        self._open(conn, params.client_id, version)
        for uri in conn.subscriptions:
            self._subscribers.get(uri, {}).pop(conn, None)
        conn._subscriptions.clear()
        live = [uri for uri in params.subscriptions if uri in self._states]
        last = params.last_seen_server_seq
        result: t.ReconnectReplayResult | t.ReconnectSnapshotResult
        replayed = self._replay.can_replay_after(last)
        if replayed:
            for uri in live:
                self._subscribe_to(conn, uri)
            actions = tuple(
                entry.envelope
                for entry in self._replay.after(last)
                if entry.envelope.channel in conn._subscriptions
                and entry.only_to in (None, params.client_id)
                and is_action_known_to_version(entry.envelope.action, version)
            )
            missing = tuple(uri for uri in params.subscriptions if uri not in self._states)
            result = t.ReconnectReplayResult(actions=actions, missing=missing)
        else:
            snapshots = []
            for uri in live:
                snapshot = self.snapshot(uri)
                if snapshot is not None:
                    # a stateless channel gets no snapshot: the client drops it
                    # and subscribes again from the live edge
                    self._subscribe_to(conn, uri)
                    snapshots.append(snapshot)
            result = t.ReconnectSnapshotResult(snapshots=tuple(snapshots))
        conn._send_result(request_id, result)
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
        self._subscribe_to(conn, uri)
        conn._send_result(request_id, t.SubscribeResult(snapshot=self.snapshot(uri)))

    def _client_action(self, conn: HostConnection, params: t.DispatchActionParams) -> None:
        state = self._states.get(params.channel)
        if state is None or conn.client_id is None or conn.protocol_version is None:
            return
        origin = t.ActionOrigin(client_id=conn.client_id, client_seq=params.client_seq)
        session = self._session_of(params.channel, state)
        ctx = ValidationContext(
            client_id=conn.client_id,
            version=conn.protocol_version,
            session=session,
            capabilities=self._capabilities(session),
        )
        reason = validate(params.channel, state, params.action, ctx)
        if reason is not None:
            self._sequence(params.channel, params.action, origin, reason, conn)
        else:
            envelope = self._apply(params.channel, state, params.action, origin)
            # the embedder's agent reacts to client actions (a turn started, a
            # tool call confirmed) after they are applied, in sequence order
            self._events.append(ClientActionApplied(connection=conn, envelope=envelope))

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

    # -- session and chat bookkeeping (see sessions.py) --

    def create_session(
        self,
        uri: str,
        *,
        provider: str,
        title: str = "",
        working_directories: tuple[str, ...] | None = None,
        config: t.SessionConfigState | None = None,
    ) -> t.SessionState:
        """Add session ``uri`` in lifecycle ``creating`` (answer ``createSession`` after this)."""
        state = sessions.new_session(provider, title, working_directories, config)
        self.add_channel(uri, state)
        self._sessions.created(uri, wire_time(self._clock()))
        return state

    def ready_session(
        self, uri: str, *, default_chat: str, chat_title: str = ""
    ) -> t.SessionSummary:
        """Give session ``uri`` its default chat, make it ``ready`` and announce it.

        Creates the chat channel, dispatches ``session/chatAdded``,
        ``session/defaultChatChanged`` and ``session/ready``, then sends
        ``root/sessionAdded`` to the root's subscribers.  Returns the summary.
        """
        self._session_state(uri)
        now = wire_time(self._clock())
        chat = sessions.new_chat(default_chat, chat_title, now)
        self.add_channel(default_chat, chat)
        self._sessions.chat_added(default_chat, uri)
        self.dispatch(uri, t.SessionChatAddedAction(summary=sessions.chat_summary(chat)))
        self.dispatch(uri, t.SessionDefaultChatChangedAction(default_chat=default_chat))
        self.dispatch(uri, t.SessionReadyAction())
        summary = self.session_summary(uri)
        added = t.SessionAddedParams(channel=ROOT_CHANNEL, summary=summary)
        self.notify("root/sessionAdded", added)
        return summary

    def fail_session(self, uri: str, error: t.ErrorInfo) -> t.ActionEnvelope:
        """Dispatch ``session/creationFailed`` on session ``uri``."""
        self._session_state(uri)
        return self.dispatch(uri, t.SessionCreationFailedAction(error=error))

    def add_chat(self, session: str, chat: str, *, title: str = "") -> t.ChatState:
        """Add chat ``chat`` to ``session``: its channel and ``session/chatAdded``."""
        self._session_state(session)
        state = sessions.new_chat(chat, title, wire_time(self._clock()))
        self.add_channel(chat, state)
        self._sessions.chat_added(chat, session)
        self.dispatch(session, t.SessionChatAddedAction(summary=sessions.chat_summary(state)))
        return state

    def answer_create_chat(self, event: RequestReceived) -> t.ChatState | None:
        """Answer a ``createChat`` request: check it, create the chat, ``session/chatAdded``.

        Errors: ``SessionNotFound`` (-32001) for an unknown session,
        ``AlreadyExists`` (-32010) for a taken URI, ``InvalidParams`` for a URI
        that is not a chat's or a source or working directories that
        :func:`~agenthost_protocol.host.validation.check_chat_source` refuses.
        A fork copies the source's turns up to the named one and its working
        directories; a side chat records its origin.  Returns the new chat's
        state, or ``None`` when the request was refused; starting a turn for
        ``initialMessage`` is the agent's business.
        """
        params = event.params
        if not isinstance(params, t.CreateChatParams):
            raise LocalProtocolError(f"{event.method} is not createChat")
        session = self._states.get(params.channel)
        if not isinstance(session, t.SessionState):
            event.responder.error(AhpErrorCode.SESSION_NOT_FOUND, f"no session {params.channel!r}")
            return None
        if params.chat in self._states:
            event.responder.error(AhpErrorCode.ALREADY_EXISTS, f"{params.chat!r} exists")
            return None
        if channel_kind(params.chat) is not ChannelKind.CHAT:
            event.responder.error(JsonRpcErrorCode.INVALID_PARAMS, "not a chat URI")
            return None
        chats = {chat.resource: chat for chat in self._chat_states(session)}
        source = params.source
        reason = check_chat_source(
            session, params.chat, source, chats, self._capabilities(session),
            working_directories=params.working_directories,
        )
        if reason is not None:
            event.responder.error(JsonRpcErrorCode.INVALID_PARAMS, reason)
            return None
        state = sessions.new_chat(params.chat, "", wire_time(self._clock()))
        if isinstance(source, t.ForkChatSource):
            origin = chats[source.chat]
            kept = [turn.id for turn in origin.turns].index(source.turn_id) + 1
            state = evolve(
                state,
                origin=t.ForkChatOrigin(chat=source.chat, turn_id=source.turn_id),
                turns=origin.turns[:kept],
                working_directories=origin.working_directories,
            )
        else:
            if isinstance(source, t.SideChatSource):
                state = evolve(state, origin=t.SideChatOrigin(
                    chat=source.chat, turn_id=source.turn_id, selection=source.selection
                ))
            state = evolve(state, working_directories=params.working_directories)
        self.add_channel(params.chat, state)
        self._sessions.chat_added(params.chat, params.channel)
        added = t.SessionChatAddedAction(summary=sessions.chat_summary(state))
        self.dispatch(params.channel, added)
        event.responder.respond(None)
        return state

    def dispose_session(self, uri: str) -> None:
        """Remove session ``uri``, its chats and annotations channel.

        Then sends ``root/sessionRemoved`` to the root's subscribers.
        """
        state = self._session_state(uri)
        for chat in [c.resource for c in state.chats] + list(self._sessions.chats_of(uri)):
            if chat in self._states:
                self.remove_channel(chat)
        annotations = uri + "/annotations"
        if annotations in self._states:
            self.remove_channel(annotations)
        self.remove_channel(uri)
        removed = t.SessionRemovedParams(channel=ROOT_CHANNEL, session=uri)
        self.notify("root/sessionRemoved", removed)

    def session_summary(self, uri: str) -> t.SessionSummary:
        """The ``SessionSummary`` of session ``uri`` from its current state."""
        state = self._session_state(uri)
        created = self._sessions.created_at(uri) or wire_time(self._clock())
        return sessions.summary_of(uri, state, created, self._chat_states(state))

    def list_sessions(self, params: t.ListSessionsParams) -> t.ListSessionsResult:
        """One page of the ready sessions made by :meth:`create_session`, oldest first.

        Sessions still ``creating`` (or whose creation failed) are not listed:
        they have not been announced with ``root/sessionAdded`` either.
        Raises :class:`~agenthost_protocol.errors.InvalidParams` for an
        unknown cursor or a ``limit`` below 1.
        """
        uris, next_cursor = self._sessions.page(params.cursor, params.limit, self._is_ready)
        items = tuple(self.session_summary(uri) for uri in uris)
        return t.ListSessionsResult(items=items, next_cursor=next_cursor)

    def answer_list_sessions(self, event: RequestReceived) -> None:
        """Answer a ``listSessions`` request with :meth:`list_sessions` (or its error)."""
        if not isinstance(event.params, t.ListSessionsParams):
            raise LocalProtocolError(f"{event.method} is not listSessions")
        try:
            result = self.list_sessions(event.params)
        except InvalidParams as e:
            event.responder.error(e.code, str(e))
            return
        event.responder.respond(result)

    def fetch_turns(
        self,
        event: RequestReceived,
        turns: tuple[t.Turn, ...],
        next_cursor: str | None = None,
    ) -> None:
        """Answer ``fetchTurns``: dispatch ``chat/turnsLoaded`` with ``turns``, then ``{}``.

        A ``cursor`` that is not the chat's ``turnsNextCursor`` is answered
        with ``InvalidParams`` and nothing is dispatched; so is a chat that
        does not exist (``NotFound``).
        """
        params = event.params
        if not isinstance(params, t.FetchTurnsParams):
            raise LocalProtocolError(f"{event.method} is not fetchTurns")
        state = self._states.get(params.channel)
        if not isinstance(state, t.ChatState):
            event.responder.error(AhpErrorCode.NOT_FOUND, f"no chat {params.channel!r}")
            return
        if params.cursor is not None and params.cursor != state.turns_next_cursor:
            event.responder.error(JsonRpcErrorCode.INVALID_PARAMS, "unknown cursor")
            return
        self.dispatch(
            params.channel, t.ChatTurnsLoadedAction(turns=turns, turns_next_cursor=next_cursor)
        )
        event.responder.respond(t.FetchTurnsResult())

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


def wire_time(ms: int) -> str:
    """Epoch milliseconds as the spec's ISO timestamps."""
    return sessions.iso(ms)
