"""The sans-I/O client connection: AHP's client half over any ordered transport.

A :class:`ClientConnection` is one client's side of one AHP connection.  It
does no I/O: its methods *return the bytes to send* (one JSON-RPC message
each), and :meth:`ClientConnection.receive_data` takes one message the host
sent and returns what it meant, as :data:`Event` values.  Underneath, a
:class:`~agenthost_protocol.reconciler.ClientReconciler` keeps the confirmed,
pending and optimistic state of every subscribed channel.

It numbers requests (integers from 1, never reused, not even across a
reconnect, so a late answer on a dead transport never matches a new request),
matches responses to them by id, types every result and error by the method
that was called, and keeps the negotiated protocol version.

Errors follow h11 (see :mod:`agenthost_protocol.errors`): a call the protocol
or the connection's state forbids raises
:class:`~agenthost_protocol.errors.LocalProtocolError` and changes nothing.
What the *host* gets wrong never raises: it comes back as a
:class:`ProtocolViolation` event.  Most violations are fatal: the connection
enters the sticky :attr:`ClientState.CLOSED` state, every pending request
fails, and the caller should close the transport and call
:meth:`~ClientConnection.connection_lost` (after which :meth:`~ClientConnection.reconnect`
on a new transport is possible: the reconciler never takes half of a bad
message).  Two kinds are not fatal, because they cannot desynchronise the
state: a malformed *request* from the host (answered with the error, whose
bytes are in :attr:`ProtocolViolation.reply`), and a malformed notification
other than ``action`` (dropped).

A connection is not thread-safe; drive it from one task or thread.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from enum import Enum
from types import MappingProxyType
from typing import Any, Final, Generic, TypeAlias, TypeVar, cast, overload

from attrs import field, frozen

from . import types as t
from . import wire
from .errors import (
    InvalidParams,
    InvalidRequest,
    LocalProtocolError,
    MethodNotFound,
    ProtocolError,
    RemoteProtocolError,
)
from .methods import (
    METHODS,
    CommandResult,
    Direction,
    Method,
    ServerRequestParams,
    ServerRequestResult,
    request_method,
)
from .reconciler import ClientReconciler, Received, ReconnectOutcome
from .reducers import Clock
from .types import (
    ActionEnvelope,
    ActionType,
    AhpErrorCode,
    AuthRequiredErrorData,
    ClientCapabilities,
    Implementation,
    InitializeParams,
    InitializeResult,
    JsonRpcError,
    JsonRpcErrorResponse,
    JsonRpcNotification,
    JsonRpcRequest,
    JsonRpcSuccessResponse,
    PermissionDeniedErrorData,
    PingParams,
    ReconnectReplayResult,
    ReconnectSnapshotResult,
    Snapshot,
    SnapshotState,
    StateAction,
    SubscribeParams,
    SubscribeResult,
    SubscribeView,
    SubscriptionDeliveryOptions,
    UnknownAction,
    UnsubscribeParams,
    UnsupportedProtocolVersionErrorData,
)
from .versions import (
    ACTION_INTRODUCED_IN,
    SUPPORTED_PROTOCOL_VERSIONS,
    is_action_known_to_version,
)

__all__ = [
    "ERROR_DATA_TYPES",
    "ActionReceived",
    "ClientConnection",
    "ClientState",
    "Event",
    "FailureReason",
    "Initialized",
    "NotificationParams",
    "NotificationReceived",
    "ProtocolViolation",
    "Reconnected",
    "RequestFailed",
    "RequestResult",
    "Responder",
    "ResponseReceived",
    "ServerRequestParams",
    "ServerRequestReceived",
    "TypedServerRequest",
]

P = TypeVar("P")
R = TypeVar("R")

ERROR_DATA_TYPES: Final[Mapping[int, type]] = MappingProxyType({
    AhpErrorCode.UNSUPPORTED_PROTOCOL_VERSION: UnsupportedProtocolVersionErrorData,
    AhpErrorCode.AUTH_REQUIRED: AuthRequiredErrorData,
    AhpErrorCode.PERMISSION_DENIED: PermissionDeniedErrorData,
})
"""The AHP error codes whose ``data`` has a typed shape, and that shape."""

# Requests that change the connection's own state have methods of their own.
_DEDICATED: Final = frozenset({"initialize", "reconnect", "subscribe"})


class ClientState(str, Enum):
    """Where a :class:`ClientConnection` is in its life."""

    IDLE = "idle"
    """Not initialized: only :meth:`~ClientConnection.initialize` and ``ping``."""
    INITIALIZING = "initializing"
    """``initialize`` sent, no answer yet."""
    OPEN = "open"
    """Initialized (or reconnected): everything may be sent."""
    DISCONNECTED = "disconnected"
    """Was open, then the transport was lost (or ``reconnect`` failed): the
    state is kept; :meth:`~ClientConnection.reconnect` resumes it on a new
    transport, :meth:`~ClientConnection.initialize` starts afresh."""
    RECONNECTING = "reconnecting"
    """``reconnect`` sent, no answer yet."""
    CLOSED = "closed"
    """The host violated the protocol: nothing more is sent or received on this
    transport.  :meth:`~ClientConnection.connection_lost` leaves this state."""


class FailureReason(str, Enum):
    """Why a request failed (:class:`RequestFailed`)."""

    ERROR_RESPONSE = "error-response"
    """The host answered with an error."""
    CONNECTION_LOST = "connection-lost"
    """The transport was lost before an answer came."""
    PROTOCOL_VIOLATION = "protocol-violation"
    """The host's answer was malformed, or the host broke the protocol elsewhere
    and the connection closed."""


# -- events ---------------------------------------------------------------------


@frozen(kw_only=True)
class Initialized:
    """The host accepted ``initialize``; the connection is open."""

    id: int
    protocol_version: str
    """The negotiated version, also :attr:`ClientConnection.negotiated_version`."""
    server_seq: int
    server_info: Implementation | None
    snapshots: tuple[Snapshot, ...]
    """The ``initialSubscriptions`` snapshots, already tracked by the reconciler."""
    result: InitializeResult = field(repr=False)
    """The whole result (``defaultDirectory``, ``telemetry`` ...)."""


RequestResult: TypeAlias = (
    t.InitializeResult | t.ReconnectResult | t.SubscribeResult | CommandResult | None
)
"""The result of any client-to-server request, by method (``None`` for ``null``
results); narrow it with ``isinstance`` or ``match``."""

NotificationParams: TypeAlias = t.ProtocolNotification
"""The params of a protocol notification other than ``action``."""


@frozen(kw_only=True)
class ResponseReceived:
    """A request succeeded.  ``result`` has the method's result class (``None`` for
    methods whose result is ``null``); a ``subscribe`` snapshot is already tracked."""

    id: int
    method: str
    params: object = field(repr=False)
    """The params the request was sent with."""
    result: RequestResult

    def result_for(self, method: Method[P, R]) -> R:
        """``result`` typed as ``method``'s (``methods.LIST_SESSIONS`` ...); raises
        :class:`~agenthost_protocol.errors.LocalProtocolError` if this is the
        answer to another method."""
        if method.name != self.method:
            raise LocalProtocolError(f"this answers {self.method!r}, not {method.name!r}")
        return method.check_result(self.result)


@frozen(kw_only=True)
class RequestFailed:
    """A request will never succeed.  Every request ends in exactly one
    :class:`ResponseReceived`, :class:`Initialized`, :class:`Reconnected` or
    :class:`RequestFailed`."""

    id: int
    method: str
    params: object = field(repr=False)
    reason: FailureReason
    error: JsonRpcError | None = None
    """The host's error for ``ERROR_RESPONSE`` (``data`` typed by
    :data:`ERROR_DATA_TYPES` where the code has a typed shape and the data fits
    it, else raw JSON); for ``PROTOCOL_VIOLATION`` the violation as an error
    object; ``None`` for ``CONNECTION_LOST``."""


@frozen(kw_only=True)
class ActionReceived:
    """An ``action`` notification, reconciled (echo, foreign, rejected ...)."""

    channel: str
    received: Received


@frozen(kw_only=True)
class NotificationReceived:
    """A protocol notification (``root/progress``, ``auth/required`` ...) with typed params."""

    method: str
    params: NotificationParams


@frozen(kw_only=True)
class ServerRequestReceived:
    """The host asks something (``resourceRead``, ``createResourceWatch`` ...).

    Answer it once with :attr:`responder`, whose methods return the bytes to send.
    """

    id: int | str
    method: str
    params: ServerRequestParams
    responder: Responder[ServerRequestResult] = field(repr=False, eq=False)

    def narrow(self, method: Method[P, R]) -> TypedServerRequest[P, R] | None:
        """This request typed as ``method``'s, or ``None`` if it is another method's::

            if (request := event.narrow(methods.RESOURCE_READ)) is not None:
                send(request.respond(ResourceReadResult(...)))  # checked statically
        """
        if method.name != self.method or not isinstance(self.params, method.params):
            return None
        return TypedServerRequest(id=self.id, method=method, params=self.params,
                                  responder=cast("Responder[R]", self.responder))


@frozen(kw_only=True)
class TypedServerRequest(Generic[P, R]):
    """A :class:`ServerRequestReceived` narrowed to one method."""

    id: int | str
    method: Method[P, R]
    params: P
    responder: Responder[R] = field(repr=False, eq=False)

    def respond(self, result: R) -> bytes:
        """The success response to send (see :meth:`Responder.respond`)."""
        return self.responder.respond(result)

    def error(self, code: int, message: str, data: object = None) -> bytes:
        """The error response to send (see :meth:`Responder.error`)."""
        return self.responder.error(code, message, data)


@frozen(kw_only=True)
class Reconnected:
    """The host answered ``reconnect``; the connection is open again."""

    id: int
    outcome: ReconnectOutcome
    """What the replay or snapshots did: dropped pending actions, removed channels."""


@frozen(kw_only=True)
class ProtocolViolation:
    """The host sent something out of protocol (see the module docs for which are fatal)."""

    error: RemoteProtocolError
    fatal: bool
    """Whether the connection closed (:attr:`ClientState.CLOSED`)."""
    reply: bytes | None = None
    """The error response to send, when JSON-RPC asks for one (a malformed
    request, or a message whose id could not be read)."""


Event: TypeAlias = (
    Initialized
    | ResponseReceived
    | RequestFailed
    | ActionReceived
    | NotificationReceived
    | ServerRequestReceived
    | Reconnected
    | ProtocolViolation
)
"""Everything :meth:`ClientConnection.receive_data` and
:meth:`ClientConnection.connection_lost` return."""


class Responder(Generic[R]):
    """Answers one request from the host; each method returns the bytes to send."""

    __slots__ = ("_conn", "_id", "_method")

    def __init__(self, conn: ClientConnection, request_id: int | str, method: str) -> None:
        self._conn = conn
        self._id = request_id
        self._method = method

    @property
    def id(self) -> int | str:
        return self._id

    @property
    def method(self) -> str:
        return self._method

    def respond(self, result: R) -> bytes:
        """The success response.  ``result`` must be of the method's result class.

        Raises :class:`LocalProtocolError` if it is not, or if the request was
        already answered or died with its connection.
        """
        METHODS[self._method].check_result(result)
        self._conn._take_server_request(self._id)
        return _encode(JsonRpcSuccessResponse(id=self._id, result=result))

    def error(self, code: int, message: str, data: object = None) -> bytes:
        """The error response (``data`` a model value such as
        :class:`~agenthost_protocol.types.PermissionDeniedErrorData`, or JSON)."""
        if isinstance(code, bool) or not isinstance(code, int):
            raise LocalProtocolError("an error code is an integer")
        if not isinstance(message, str):
            raise LocalProtocolError("an error message is a string")
        self._conn._take_server_request(self._id)
        return _encode(
            JsonRpcErrorResponse(
                id=self._id, error=JsonRpcError(code=int(code), message=message, data=data)
            )
        )


@frozen(kw_only=True)
class _Pending:
    method: str
    params: object
    channel: str | None = None
    """For ``subscribe``: the channel asked for."""


def _encode(message: object) -> bytes:
    return wire.dumps(message).encode("utf-8")


_new: Final = object.__new__
_set: Final = object.__setattr__


def _action_received(channel: str, received: Received) -> ActionReceived:
    """``ActionReceived(channel=..., received=...)`` for the streaming path: what its
    frozen attrs ``__init__`` does (two slots stored), without the call."""
    event = _new(ActionReceived)
    _set(event, "channel", channel)
    _set(event, "received", received)
    return event


def _action_envelope(obj: Any) -> ActionEnvelope | None:
    """The envelope of ``obj``, the parsed JSON of an ``action`` notification, decoded
    as ``wire.parse_message`` decodes it, without the message around it; ``None``
    for any other message, or one that the hook refuses (``parse_message`` then
    reports it, alike).  The streaming path."""
    if (
        type(obj) is dict
        and obj.get("method") == "action"
        and "id" not in obj
        and obj.get("jsonrpc") == "2.0"
        and "params" in obj
    ):
        try:
            return _envelope_hook()(obj["params"], ActionEnvelope)
        except Exception:
            return None
    return None


@functools.cache
def _envelope_hook() -> Callable[[Any, Any], ActionEnvelope]:
    """The structure hook of ``action``'s params, the one ``wire.parse_message`` uses
    (looked up on first use: building it costs at import)."""
    info = METHODS["action"]
    assert info.params is ActionEnvelope and Direction.SERVER_TO_CLIENT in info.directions
    hook: Callable[[Any, Any], ActionEnvelope] = wire.converter.get_structure_hook(info.params)
    return hook


# -- the connection -------------------------------------------------------------------


class ClientConnection:
    """The client side of one AHP connection.

    ``client_id`` is sent in ``initialize`` and ``reconnect``; keep it for the
    life of the client.  ``protocol_versions`` is the offer, most preferred
    first.  ``clock`` is the reducers' clock (epoch milliseconds; ``None``:
    the wall clock) and ``on_unknown`` sees every unknown action applied, as
    for :class:`~agenthost_protocol.reconciler.ClientReconciler`.
    """

    def __init__(
        self,
        client_id: str,
        *,
        protocol_versions: Sequence[str] = SUPPORTED_PROTOCOL_VERSIONS,
        clock: Clock | None = None,
        client_info: Implementation | None = None,
        locale: str | None = None,
        on_unknown: Callable[[UnknownAction], None] | None = None,
    ) -> None:
        if not isinstance(client_id, str):
            raise LocalProtocolError("client_id is a string")
        versions = _versions(protocol_versions)
        if client_info is not None and not isinstance(client_info, Implementation):
            raise LocalProtocolError("client_info is an Implementation")
        self._client_id = client_id
        self._versions = versions
        self._clock = clock
        self._client_info = client_info
        self._locale = locale
        self._on_unknown = on_unknown
        self._state = ClientState.IDLE
        self._next_id = 1
        self._pending: dict[int, _Pending] = {}
        self._server_requests: set[int | str] = set()
        self._reconciler: ClientReconciler | None = None
        self._negotiated: str | None = None
        self._offered: tuple[str, ...] = ()
        # channels subscribed, stateless ones included (the reconciler tracks
        # only those with state)
        self._subscriptions: set[str] = set()

    # -- reading ----------------------------------------------------------------------

    @property
    def client_id(self) -> str:
        return self._client_id

    @property
    def connection_state(self) -> ClientState:
        """Where the connection is in its life."""
        return self._state

    @property
    def protocol_versions(self) -> tuple[str, ...]:
        """The versions offered by default, most preferred first."""
        return self._versions

    @property
    def negotiated_version(self) -> str | None:
        """The version the host chose in ``initialize`` (kept across reconnects)."""
        return self._negotiated

    @property
    def reconciler(self) -> ClientReconciler:
        """The reconciler (confirmed and pending state); exists once initialized."""
        if self._reconciler is None:
            raise LocalProtocolError("the connection was never initialized")
        return self._reconciler

    @property
    def subscriptions(self) -> frozenset[str]:
        """The subscribed channels, stateless ones included."""
        return frozenset(self._subscriptions)

    @property
    def pending_requests(self) -> Mapping[int, str]:
        """Unanswered requests: id -> method."""
        return MappingProxyType({i: p.method for i, p in self._pending.items()})

    def state(self, channel: str) -> SnapshotState:
        """The state of ``channel`` to render: :meth:`optimistic`."""
        return self.reconciler.optimistic(channel)

    def optimistic(self, channel: str) -> SnapshotState:
        """The state to render: confirmed plus our pending actions."""
        return self.reconciler.optimistic(channel)

    def confirmed(self, channel: str) -> SnapshotState:
        """The state the host has acknowledged."""
        return self.reconciler.confirmed(channel)

    # -- sending ----------------------------------------------------------------------

    def initialize(
        self,
        *,
        initial_subscriptions: Iterable[str] = (),
        capabilities: ClientCapabilities | None = None,
        protocol_versions: Sequence[str] | None = None,
    ) -> bytes:
        """The ``initialize`` request.  Allowed when idle or disconnected (a fresh
        start: the old state is dropped when the host answers).
        ``protocol_versions`` overrides the offer for this attempt, e.g. with
        :func:`~agenthost_protocol.versions.select_version_from_supported` after a
        ``-32005``."""
        self._require(ClientState.IDLE, ClientState.DISCONNECTED)
        offered = self._versions if protocol_versions is None else _versions(protocol_versions)
        channels = _channels(initial_subscriptions)
        if capabilities is not None and not isinstance(capabilities, ClientCapabilities):
            raise LocalProtocolError("capabilities is a ClientCapabilities")
        params = InitializeParams(
            protocol_versions=offered,
            client_id=self._client_id,
            client_info=self._client_info,
            initial_subscriptions=channels or None,
            locale=self._locale,
            capabilities=capabilities,
        )
        data = self._send_request("initialize", params)
        self._offered = offered
        self._state = ClientState.INITIALIZING
        return data

    def ping(self) -> bytes:
        """The ``ping`` request (allowed before ``initialize``, as the spec says)."""
        self._require_not_closed()
        return self._send_request("ping", PingParams())

    def subscribe(
        self,
        channel: str,
        *,
        delivery: SubscriptionDeliveryOptions | None = None,
        view: SubscribeView | None = None,
    ) -> bytes:
        """The ``subscribe`` request; its snapshot is tracked when the answer comes."""
        self._require(ClientState.OPEN)
        if not isinstance(channel, str):
            raise LocalProtocolError("a channel is a URI string")
        asked = any(p.channel == channel for p in self._pending.values())
        if channel in self._subscriptions or asked:
            raise LocalProtocolError(f"channel {channel!r} is already subscribed")
        params = SubscribeParams(channel=channel, delivery=delivery, view=view)
        return self._send_request("subscribe", params, channel=channel)

    def unsubscribe(self, channel: str) -> bytes:
        """The ``unsubscribe`` notification; the channel's pending actions are
        dropped unanswered (envelopes still in flight are then ignored)."""
        self._require(ClientState.OPEN)
        if channel not in self._subscriptions:
            raise LocalProtocolError(f"channel {channel!r} is not subscribed")
        if channel in self.reconciler.channels:
            self.reconciler.unsubscribe(channel)
        self._subscriptions.discard(channel)
        return _encode(JsonRpcNotification(method="unsubscribe",
                                           params=UnsubscribeParams(channel=channel)))

    def dispatch(self, channel: str, action: StateAction) -> bytes:
        """Apply ``action`` optimistically and return the ``dispatchAction`` to send.

        Raises :class:`LocalProtocolError`, changing nothing, unless the
        connection is open, ``channel`` tracked, ``action`` known to the
        negotiated version (the host rejects any other, and cannot tell this
        connection so) and dispatchable there (see
        :meth:`~agenthost_protocol.reconciler.ClientReconciler.dispatch`).
        """
        self._require(ClientState.OPEN)
        version = self._negotiated
        kind = getattr(action, "type", None)
        wire_type = kind.value if isinstance(kind, ActionType) else kind
        if (
            version is not None
            and not isinstance(action, UnknownAction)
            and wire_type in ACTION_INTRODUCED_IN
            and not is_action_known_to_version(action, version)
        ):
            # other mistakes (not an action, not dispatchable ...) are the reconciler's to refuse
            raise LocalProtocolError(
                f"{wire_type!r} is unknown to the negotiated protocol version {version}",
                path="$.params.action.type",
            )
        params = self.reconciler.dispatch(channel, action)
        return _encode(JsonRpcNotification(method="dispatchAction", params=params))

    @overload
    def request(self, method: Method[P, R], params: P) -> tuple[int, bytes]: ...
    @overload
    def request(self, method: str, params: object) -> tuple[int, bytes]: ...
    def request(self, method: Method[P, R] | str, params: object) -> tuple[int, bytes]:
        """Any other client-to-server request: its id and the bytes to send.

        ``method`` is a :mod:`~agenthost_protocol.methods` constant
        (``methods.LIST_SESSIONS`` ...: ``params`` is then checked statically,
        and :meth:`ResponseReceived.result_for` types the answer) or a method
        name.  ``params`` must be the method's params class.  ``initialize``,
        ``reconnect`` and ``subscribe`` have methods of their own.
        """
        name = method if isinstance(method, str) else method.name
        if name in _DEDICATED:
            raise LocalProtocolError(f"use ClientConnection.{name}() for {name!r}")
        info = request_method(name, Direction.CLIENT_TO_SERVER)
        if info is None:
            raise LocalProtocolError(f"{name!r} is not a client-to-server request")
        if name == "ping":
            self._require_not_closed()
        else:
            self._require(ClientState.OPEN)
        info.check_params(params)
        request_id = self._next_id
        return request_id, self._send_request(name, params)

    def reconnect(self) -> bytes:
        """The ``reconnect`` request for a new transport, built from the reconciler.

        Allowed when disconnected; the answer is applied by the reconciler
        (:class:`Reconnected`).  Stateless subscriptions are not resumed:
        subscribe to them again.
        """
        self._require(ClientState.DISCONNECTED)
        data = self._send_request("reconnect", self.reconciler.reconnect_params())
        self._state = ClientState.RECONNECTING
        return data

    # -- receiving --------------------------------------------------------------------

    def receive_data(self, data: bytes | str) -> list[Event]:
        """Take one JSON-RPC message from the host; return what it meant.

        Never raises for what the host sent (see :class:`ProtocolViolation`);
        raises :class:`LocalProtocolError` in the closed state, or for
        ``data`` that is neither ``bytes`` nor ``str``.
        """
        self._require_not_closed()
        if not isinstance(data, (bytes, bytearray, memoryview, str)):
            raise LocalProtocolError(f"receive_data takes bytes or str, not {type(data).__name__}")
        try:
            obj = wire.parse_json(data)
        except RemoteProtocolError as e:
            return self._not_json(e)
        envelope = _action_envelope(obj)
        if envelope is not None:
            return self._on_action(envelope)
        return self._on_parsed(obj)

    def _receive_batch(self, messages: Sequence[bytes | str]) -> list[Event]:
        """:meth:`receive_data` of each of ``messages`` in order: their events, in order.

        The same events, and the same state, but the ``action`` notifications
        between two other messages are reconciled together (a run of
        streamed text in one reduction, see ``ClientReconciler._receive_many``).
        Stops after a message that closes the connection (its fatal
        :class:`ProtocolViolation` among the events): those after it are not
        read.  Raises what :meth:`receive_data` raises, before reading any
        message (the closed state, a message neither ``bytes`` nor ``str``).
        An exception of the application's own clock or ``on_unknown`` goes
        through as there, but the events of the messages before it, whose
        changes stand, go with it.
        """
        self._require_not_closed()
        for data in messages:
            if not isinstance(data, (bytes, bytearray, memoryview, str)):
                raise LocalProtocolError(
                    f"receive_data takes bytes or str, not {type(data).__name__}")
        events: list[Event] = []
        run: list[ActionEnvelope] = []
        for data in messages:
            try:
                obj = wire.parse_json(data)
            except RemoteProtocolError as e:
                obj = e
            else:
                envelope = _action_envelope(obj)
                if envelope is not None and self._reconciler is not None:
                    run.append(envelope)
                    continue
            if run:
                self._reconcile(run, events)
                run = []
                if self._state is ClientState.CLOSED:
                    return events
            if isinstance(obj, RemoteProtocolError):
                events.extend(self._not_json(obj))
            else:
                events.extend(self._on_parsed(obj))
            if self._state is ClientState.CLOSED:
                return events
        if run:
            self._reconcile(run, events)
        return events

    def _reconcile(self, run: list[ActionEnvelope], events: list[Event]) -> None:
        """Reconcile the envelopes of ``run``, in order, their events added to ``events``."""
        reconciler = self._reconciler
        assert reconciler is not None
        received: list[Received] = []
        error: RemoteProtocolError | None = None
        try:
            reconciler._receive_many(run, received)
        except RemoteProtocolError as e:
            error = e
        for one in received:
            events.append(_action_received(one.envelope.channel, one))
        if error is not None:
            events.extend(self._fatal(error))

    def _not_json(self, error: RemoteProtocolError) -> list[Event]:
        # not JSON: JSON-RPC answers with "id": null, and nothing more can be trusted
        response = error.response()
        return self._fatal(error, None if response is None else _encode_raw(response))

    def _on_parsed(self, obj: Any) -> list[Event]:
        """What the parsed JSON ``obj`` of a message means (its whole decoding)."""
        try:
            message = wire.parse_message(obj, result_method=self._method_of)
        except RemoteProtocolError as e:
            return self._bad_message(obj, e)
        if isinstance(message, JsonRpcRequest):
            return self._on_request(message)
        if isinstance(message, JsonRpcNotification):
            return self._on_notification(message)
        if isinstance(message, JsonRpcSuccessResponse):
            return self._on_result(message)
        return self._on_error(message)

    def connection_lost(self) -> list[Event]:
        """The transport is gone: every pending request fails (``CONNECTION_LOST``).

        The tracked state is kept; an initialized connection becomes
        :attr:`ClientState.DISCONNECTED` (ready for :meth:`reconnect`), any
        other :attr:`ClientState.IDLE`.  Server requests not yet answered die
        with the transport.
        """
        events: list[Event] = [
            RequestFailed(id=i, method=p.method, params=p.params,
                          reason=FailureReason.CONNECTION_LOST)
            for i, p in self._pending.items()
        ]
        self._pending.clear()
        self._server_requests.clear()
        self._state = (
            ClientState.DISCONNECTED if self._reconciler is not None else ClientState.IDLE
        )
        return events

    # -- internals ----------------------------------------------------------------------

    def _require(self, *states: ClientState) -> None:
        if self._state not in states:
            allowed = " or ".join(s.value for s in states)
            raise LocalProtocolError(
                f"not allowed while the connection is {self._state.value} (only when {allowed})"
            )

    def _require_not_closed(self) -> None:
        if self._state is ClientState.CLOSED:
            raise LocalProtocolError(
                "the connection is closed (the host violated the protocol): close the "
                "transport and call connection_lost()"
            )

    def _send_request(self, method: str, params: object, channel: str | None = None) -> bytes:
        request_id = self._next_id
        data = _encode(JsonRpcRequest(id=request_id, method=method, params=params))
        # counted only once encoded: a value that cannot be written changes nothing
        self._next_id += 1
        self._pending[request_id] = _Pending(method=method, params=params, channel=channel)
        return data

    def _method_of(self, request_id: object) -> str | None:
        """The method of our pending request ``request_id``: how its result is typed."""
        pending = self._pending.get(request_id) if isinstance(request_id, int) else None
        return None if pending is None else pending.method

    def _take_server_request(self, request_id: int | str) -> None:
        if request_id not in self._server_requests:
            raise LocalProtocolError(
                f"request {request_id!r} of the host was already answered or died with "
                "its connection"
            )
        self._server_requests.discard(request_id)

    def _fatal(self, error: RemoteProtocolError, reply: bytes | None = None) -> list[Event]:
        """Close the connection: the host broke the protocol, fail everything pending."""
        events: list[Event] = [ProtocolViolation(error=error, fatal=True, reply=reply)]
        events.extend(_violated(i, p, error) for i, p in self._pending.items())
        self._pending.clear()
        self._server_requests.clear()
        self._state = ClientState.CLOSED
        return events

    def _bad_message(self, obj: object, error: RemoteProtocolError) -> list[Event]:
        """Classify a message ``parse_message`` refused (``obj`` is its parsed JSON)."""
        response = error.response()
        reply = None if response is None else _encode_raw(response)
        if isinstance(obj, dict) and isinstance(obj.get("method"), str):
            if "id" in obj:
                # a malformed request: JSON-RPC answers it, the connection goes on
                return [ProtocolViolation(error=error, fatal=False, reply=reply)]
            if obj["method"] != "action":
                # a malformed protocol notification carries no state: drop it
                return [ProtocolViolation(error=error, fatal=False)]
            # losing an envelope would make the confirmed state diverge from the host's
            return self._fatal(error)
        request_id = error.request_id
        pending = self._pending.pop(request_id, None) if isinstance(request_id, int) else None
        events = self._fatal(error, reply)
        if pending is not None:
            # our own request's answer is malformed: it fails, and the connection with it
            events.insert(1, _violated(request_id, pending, error))
        return events

    def _on_request(self, message: JsonRpcRequest[Any]) -> list[Event]:
        info = METHODS[message.method]
        if Direction.SERVER_TO_CLIENT not in info.directions:
            error = MethodNotFound(
                f"{message.method!r} is not a host-to-client request", path="$.method",
                request_id=message.id,
            )
            reply = _encode_raw(error.response())
            return [ProtocolViolation(error=error, fatal=False, reply=reply)]
        if message.id in self._server_requests:
            # two live requests with one id: no answer could say which it is for
            return self._fatal(InvalidRequest(
                f"request id {message.id!r} reused while unanswered", path="$.id",
                request_id=message.id, respond=False,
            ))
        self._server_requests.add(message.id)
        return [ServerRequestReceived(
            id=message.id, method=message.method, params=message.params,
            responder=Responder[ServerRequestResult](self, message.id, message.method),
        )]

    def _on_notification(self, message: JsonRpcNotification[Any]) -> list[Event]:
        info = METHODS[message.method]
        if Direction.SERVER_TO_CLIENT not in info.directions:
            error = MethodNotFound(
                f"{message.method!r} is not a host-to-client notification", path="$.method",
                respond=False,
            )
            return [ProtocolViolation(error=error, fatal=False)]
        if message.method != "action":
            return [NotificationReceived(method=message.method, params=message.params)]
        return self._on_action(message.params)

    def _on_action(self, envelope: ActionEnvelope) -> list[Event]:
        reconciler = self._reconciler
        if reconciler is None:
            return self._fatal(InvalidRequest(
                "an action notification before initialize", path="$.method", respond=False
            ))
        try:
            received = reconciler.receive(envelope)
        except RemoteProtocolError as e:
            return self._fatal(e)
        return [_action_received(envelope.channel, received)]

    def _on_result(self, message: JsonRpcSuccessResponse[Any]) -> list[Event]:
        request_id = message.id
        pending = self._pending.pop(request_id, None) if isinstance(request_id, int) else None
        if pending is None or not isinstance(request_id, int):
            return self._fatal(InvalidRequest(
                f"a response to {request_id!r}, which is no pending request",
                path="$.id", request_id=request_id, respond=False,
            ))
        result = message.result
        try:
            if pending.method == "initialize":
                return self._initialized(request_id, pending, result)
            if pending.method == "reconnect":
                return self._reconnected(request_id, result)
            if pending.method == "subscribe":
                self._subscribed(pending, result)
        except RemoteProtocolError as e:
            events = self._fatal(e)
            events.insert(1, _violated(request_id, pending, e))
            return events
        return [ResponseReceived(id=request_id, method=pending.method, params=pending.params,
                                 result=result)]

    def _initialized(
        self, request_id: int, pending: _Pending, result: InitializeResult
    ) -> list[Event]:
        if result.protocol_version not in self._offered:
            raise InvalidParams(
                f"the host chose {result.protocol_version!r}, which was not offered",
                path="$.result.protocolVersion", request_id=request_id, respond=False,
            )
        assert isinstance(pending.params, InitializeParams)
        asked = set(pending.params.initial_subscriptions or ())
        reconciler = ClientReconciler(
            self._client_id, now=self._clock, on_unknown=self._on_unknown,
            server_seq=result.server_seq,
        )
        for index, snapshot in enumerate(result.snapshots):
            path = f"$.result.snapshots[{index}]"
            if snapshot.resource not in asked:
                raise InvalidParams(
                    f"a snapshot of {snapshot.resource!r}, which was not asked for",
                    path=f"{path}.resource", respond=False,
                )
            try:
                reconciler.subscribe(snapshot)
            except LocalProtocolError as e:  # a second snapshot of one channel
                raise InvalidParams(e.message, path=f"{path}.resource", respond=False) from None
        self._reconciler = reconciler
        self._negotiated = result.protocol_version
        self._subscriptions = asked
        self._state = ClientState.OPEN
        return [Initialized(
            id=request_id, protocol_version=result.protocol_version,
            server_seq=result.server_seq, server_info=result.server_info,
            snapshots=result.snapshots, result=result,
        )]

    def _reconnected(
        self, request_id: int, result: ReconnectReplayResult | ReconnectSnapshotResult
    ) -> list[Event]:
        outcome = self.reconciler.apply_reconnect(result)
        self._subscriptions = set(self.reconciler.channels)
        self._state = ClientState.OPEN
        return [Reconnected(id=request_id, outcome=outcome)]

    def _subscribed(self, pending: _Pending, result: SubscribeResult) -> None:
        snapshot = result.snapshot
        assert pending.channel is not None
        if snapshot is not None:
            if snapshot.resource != pending.channel:
                raise InvalidParams(
                    f"subscribed to {pending.channel!r}, got a snapshot of {snapshot.resource!r}",
                    path="$.result.snapshot.resource", respond=False,
                )
            try:
                self.reconciler.subscribe(snapshot)
            except LocalProtocolError as e:
                raise InvalidParams(e.message, path="$.result.snapshot", respond=False) from None
        self._subscriptions.add(pending.channel)

    def _on_error(self, message: JsonRpcErrorResponse) -> list[Event]:
        request_id = message.id
        pending = self._pending.pop(request_id, None) if isinstance(request_id, int) else None
        if pending is None or not isinstance(request_id, int):
            what = "an unreadable message" if request_id is None else f"{request_id!r}"
            return self._fatal(InvalidRequest(
                f"an error response to {what}, which is no pending request "
                f"({message.error.code}: {message.error.message})",
                path="$.id", request_id=request_id, respond=False,
            ))
        if pending.method == "initialize":
            self._state = ClientState.IDLE if self._reconciler is None else ClientState.DISCONNECTED
        elif pending.method == "reconnect":
            self._state = ClientState.DISCONNECTED
        return [RequestFailed(
            id=request_id, method=pending.method, params=pending.params,
            reason=FailureReason.ERROR_RESPONSE, error=_typed_error(message.error),
        )]


def _violated(request_id: int, pending: _Pending, error: RemoteProtocolError) -> RequestFailed:
    return RequestFailed(
        id=request_id, method=pending.method, params=pending.params,
        reason=FailureReason.PROTOCOL_VIOLATION,
        error=JsonRpcError(code=int(error.code), message=str(error)),
    )


def _typed_error(error: JsonRpcError) -> JsonRpcError:
    data_type = ERROR_DATA_TYPES.get(error.code)
    if data_type is None or error.data is None:
        return error
    try:
        data: object = wire.structure(error.data, data_type)
    except ProtocolError:
        # the data is informational: keep what the host sent rather than lose the error
        return error
    return JsonRpcError(code=error.code, message=error.message, data=data)


def _encode_raw(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _versions(value: Sequence[str]) -> tuple[str, ...]:
    if isinstance(value, str) or not all(isinstance(v, str) for v in value):
        raise LocalProtocolError("protocol_versions is a sequence of version strings")
    versions = tuple(value)
    if not versions:
        raise LocalProtocolError("protocol_versions must offer at least one version")
    return versions


def _channels(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        raise LocalProtocolError("initial_subscriptions is a sequence of URIs, not one string")
    channels = tuple(value)
    if not all(isinstance(c, str) for c in channels):
        raise LocalProtocolError("initial_subscriptions holds URI strings")
    return channels
