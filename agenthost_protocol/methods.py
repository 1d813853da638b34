"""The AHP method table: every JSON-RPC method, its direction, params and result types.

38 method names: 27 client-to-server requests, 10 server-to-client requests
(the nine ``resource*`` commands and ``createResourceWatch``, which either
peer may send), 2 client notifications and 9 server notifications.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from types import MappingProxyType
from typing import Final, Generic, TypeAlias, TypeVar, cast

from attrs import frozen

from . import types as t
from .errors import LocalProtocolError
from .types import (
    ActionEnvelope,
    AuthenticateParams,
    AuthenticateResult,
    AuthRequiredParams,
    CompletionsParams,
    CompletionsResult,
    CreateChatParams,
    CreateResourceWatchParams,
    CreateResourceWatchResult,
    CreateSessionParams,
    CreateTerminalParams,
    DispatchActionParams,
    DisposeChatParams,
    DisposeSessionParams,
    DisposeTerminalParams,
    FetchTurnsParams,
    FetchTurnsResult,
    InitializeParams,
    InitializeResult,
    InvokeChangesetOperationParams,
    InvokeChangesetOperationResult,
    JsonRpcErrorResponse,
    JsonRpcNotification,
    JsonRpcRequest,
    JsonRpcSuccessResponse,
    ListSessionsParams,
    ListSessionsResult,
    OtlpExportLogsParams,
    OtlpExportMetricsParams,
    OtlpExportTracesParams,
    PingParams,
    ProgressParams,
    ReconnectParams,
    ReconnectResult,
    ResolveSessionConfigParams,
    ResolveSessionConfigResult,
    ResourceCopyParams,
    ResourceCopyResult,
    ResourceDeleteParams,
    ResourceDeleteResult,
    ResourceListParams,
    ResourceListResult,
    ResourceMkdirParams,
    ResourceMkdirResult,
    ResourceMoveParams,
    ResourceMoveResult,
    ResourceReadParams,
    ResourceReadResult,
    ResourceRequestParams,
    ResourceRequestResult,
    ResourceResolveParams,
    ResourceResolveResult,
    ResourceWriteParams,
    ResourceWriteResult,
    SessionAddedParams,
    SessionConfigCompletionsParams,
    SessionConfigCompletionsResult,
    SessionRemovedParams,
    SessionSummaryChangedParams,
    SubscribeParams,
    SubscribeResult,
    UnsubscribeParams,
)

__all__ = [
    "ACTION",
    "AUTHENTICATE",
    "AUTH_REQUIRED",
    "COMPLETIONS",
    "CREATE_CHAT",
    "CREATE_RESOURCE_WATCH",
    "CREATE_SESSION",
    "CREATE_TERMINAL",
    "DISPATCH_ACTION",
    "DISPOSE_CHAT",
    "DISPOSE_SESSION",
    "DISPOSE_TERMINAL",
    "FETCH_TURNS",
    "INITIALIZE",
    "INVOKE_CHANGESET_OPERATION",
    "LIST_SESSIONS",
    "METHODS",
    "OTLP_EXPORT_LOGS",
    "OTLP_EXPORT_METRICS",
    "OTLP_EXPORT_TRACES",
    "PING",
    "RECONNECT",
    "RESOLVE_SESSION_CONFIG",
    "RESOURCE_COPY",
    "RESOURCE_DELETE",
    "RESOURCE_LIST",
    "RESOURCE_MKDIR",
    "RESOURCE_MOVE",
    "RESOURCE_READ",
    "RESOURCE_REQUEST",
    "RESOURCE_RESOLVE",
    "RESOURCE_WRITE",
    "ROOT_PROGRESS",
    "ROOT_SESSION_ADDED",
    "ROOT_SESSION_REMOVED",
    "ROOT_SESSION_SUMMARY_CHANGED",
    "SESSION_CONFIG_COMPLETIONS",
    "SUBSCRIBE",
    "UNSUBSCRIBE",
    "AnyMessage",
    "CommandParams",
    "CommandResult",
    "Direction",
    "MessageKind",
    "Method",
    "NotificationParams",
    "RequestParams",
    "ServerRequestParams",
    "ServerRequestResult",
    "method_info",
    "request_method",
]

P = TypeVar("P")
R = TypeVar("R")


class Direction(str, Enum):
    """Who sends a method."""

    CLIENT_TO_SERVER = "client->server"
    SERVER_TO_CLIENT = "server->client"


class MessageKind(str, Enum):
    """Whether a method is a request (answered) or a notification."""

    REQUEST = "request"
    NOTIFICATION = "notification"


@frozen(kw_only=True)
class Method(Generic[P, R]):
    """One AHP method, typed by its params ``P`` and result ``R``.

    Each method is a module constant (``LIST_SESSIONS`` is a
    ``Method[ListSessionsParams, ListSessionsResult]``), the typed key the
    client's ``request``, the host's ``send_request`` and the events'
    ``narrow``/``result_for`` take, so that a method's params and result types
    are known statically, as lsprotocol's per-method classes make them.
    ``R`` is ``None`` for notifications and for requests whose result is
    ``null``.
    """

    name: str
    kind: MessageKind
    directions: frozenset[Direction]
    params: type[P]
    """The params class."""
    result: type[R] | None = None
    """The result class of a request (``None`` where the spec's result is ``null``)."""

    def params_of(self, message: object) -> P | None:
        """``message.params`` if ``message`` is a request or notification of
        this method (as :func:`~agenthost_protocol.wire.parse_message` returns
        them), else ``None``: the typed way to pick a method out of a stream."""
        if self.kind is MessageKind.REQUEST:
            matches = isinstance(message, JsonRpcRequest)
        else:
            matches = isinstance(message, JsonRpcNotification)
        if not matches or getattr(message, "method", None) != self.name:
            return None
        params = getattr(message, "params", None)
        return params if isinstance(params, self.params) else None

    def check_result(self, result: object) -> R:
        """``result``, typed, if it is this request's result type; raises
        :class:`~agenthost_protocol.errors.LocalProtocolError` otherwise."""
        if self.kind is not MessageKind.REQUEST:
            raise LocalProtocolError(f"{self.name!r} is a notification: it has no result")
        if self.result is None:
            if result is not None:
                raise LocalProtocolError(
                    f"{self.name!r} answers with a null result, not a {type(result).__name__}"
                )
            return cast(R, None)
        if not isinstance(result, self.result):
            raise LocalProtocolError(
                f"{self.name!r} answers with a {_type_name(self.result)}, "
                f"not a {type(result).__name__}"
            )
        return result

    def check_params(self, params: object) -> P:
        """``params``, typed, if of this method's params class; raises
        :class:`~agenthost_protocol.errors.LocalProtocolError` otherwise."""
        if not isinstance(params, self.params):
            raise LocalProtocolError(
                f"{self.name!r} takes {self.params.__name__}, not {type(params).__name__}"
            )
        return params


def _type_name(tp: object) -> str:
    members = getattr(tp, "__args__", None)  # ReconnectResult is a union of two classes
    if members:
        return " | ".join(_type_name(m) for m in members)
    return getattr(tp, "__name__", repr(tp))


_C2S = frozenset({Direction.CLIENT_TO_SERVER})
_S2C = frozenset({Direction.SERVER_TO_CLIENT})
_BOTH = _C2S | _S2C


def _req(
    name: str, params: type[P], result: type[R] | None, directions: frozenset[Direction] = _C2S
) -> Method[P, R]:
    return Method(name=name, kind=MessageKind.REQUEST, directions=directions,
                  params=params, result=result)


def _note(name: str, params: type[P], directions: frozenset[Direction]) -> Method[P, None]:
    return Method(name=name, kind=MessageKind.NOTIFICATION, directions=directions, params=params)


# -- client-to-server requests --
INITIALIZE: Final[Method[InitializeParams, InitializeResult]] = _req(
    "initialize", InitializeParams, InitializeResult)
PING: Final[Method[PingParams, None]] = _req("ping", PingParams, None)
RECONNECT: Final[Method[ReconnectParams, ReconnectResult]] = _req(
    "reconnect", ReconnectParams, ReconnectResult)  # type: ignore[arg-type]
SUBSCRIBE: Final[Method[SubscribeParams, SubscribeResult]] = _req(
    "subscribe", SubscribeParams, SubscribeResult)
CREATE_SESSION: Final[Method[CreateSessionParams, None]] = _req(
    "createSession", CreateSessionParams, None)
DISPOSE_SESSION: Final[Method[DisposeSessionParams, None]] = _req(
    "disposeSession", DisposeSessionParams, None)
CREATE_CHAT: Final[Method[CreateChatParams, None]] = _req("createChat", CreateChatParams, None)
DISPOSE_CHAT: Final[Method[DisposeChatParams, None]] = _req(
    "disposeChat", DisposeChatParams, None)
CREATE_TERMINAL: Final[Method[CreateTerminalParams, None]] = _req(
    "createTerminal", CreateTerminalParams, None)
DISPOSE_TERMINAL: Final[Method[DisposeTerminalParams, None]] = _req(
    "disposeTerminal", DisposeTerminalParams, None)
LIST_SESSIONS: Final[Method[ListSessionsParams, ListSessionsResult]] = _req(
    "listSessions", ListSessionsParams, ListSessionsResult)
FETCH_TURNS: Final[Method[FetchTurnsParams, FetchTurnsResult]] = _req(
    "fetchTurns", FetchTurnsParams, FetchTurnsResult)
AUTHENTICATE: Final[Method[AuthenticateParams, AuthenticateResult]] = _req(
    "authenticate", AuthenticateParams, AuthenticateResult)
RESOLVE_SESSION_CONFIG: Final[Method[ResolveSessionConfigParams, ResolveSessionConfigResult]] = (
    _req("resolveSessionConfig", ResolveSessionConfigParams, ResolveSessionConfigResult))
SESSION_CONFIG_COMPLETIONS: Final[
    Method[SessionConfigCompletionsParams, SessionConfigCompletionsResult]
] = _req("sessionConfigCompletions", SessionConfigCompletionsParams,
         SessionConfigCompletionsResult)
COMPLETIONS: Final[Method[CompletionsParams, CompletionsResult]] = _req(
    "completions", CompletionsParams, CompletionsResult)
INVOKE_CHANGESET_OPERATION: Final[
    Method[InvokeChangesetOperationParams, InvokeChangesetOperationResult]
] = _req("invokeChangesetOperation", InvokeChangesetOperationParams,
         InvokeChangesetOperationResult)

# -- requests either peer may send --
CREATE_RESOURCE_WATCH: Final[Method[CreateResourceWatchParams, CreateResourceWatchResult]] = (
    _req("createResourceWatch", CreateResourceWatchParams, CreateResourceWatchResult, _BOTH))
RESOURCE_READ: Final[Method[ResourceReadParams, ResourceReadResult]] = _req(
    "resourceRead", ResourceReadParams, ResourceReadResult, _BOTH)
RESOURCE_WRITE: Final[Method[ResourceWriteParams, ResourceWriteResult]] = _req(
    "resourceWrite", ResourceWriteParams, ResourceWriteResult, _BOTH)
RESOURCE_LIST: Final[Method[ResourceListParams, ResourceListResult]] = _req(
    "resourceList", ResourceListParams, ResourceListResult, _BOTH)
RESOURCE_COPY: Final[Method[ResourceCopyParams, ResourceCopyResult]] = _req(
    "resourceCopy", ResourceCopyParams, ResourceCopyResult, _BOTH)
RESOURCE_DELETE: Final[Method[ResourceDeleteParams, ResourceDeleteResult]] = _req(
    "resourceDelete", ResourceDeleteParams, ResourceDeleteResult, _BOTH)
RESOURCE_MOVE: Final[Method[ResourceMoveParams, ResourceMoveResult]] = _req(
    "resourceMove", ResourceMoveParams, ResourceMoveResult, _BOTH)
RESOURCE_RESOLVE: Final[Method[ResourceResolveParams, ResourceResolveResult]] = _req(
    "resourceResolve", ResourceResolveParams, ResourceResolveResult, _BOTH)
RESOURCE_MKDIR: Final[Method[ResourceMkdirParams, ResourceMkdirResult]] = _req(
    "resourceMkdir", ResourceMkdirParams, ResourceMkdirResult, _BOTH)
RESOURCE_REQUEST: Final[Method[ResourceRequestParams, ResourceRequestResult]] = _req(
    "resourceRequest", ResourceRequestParams, ResourceRequestResult, _BOTH)

# -- notifications --
UNSUBSCRIBE: Final[Method[UnsubscribeParams, None]] = _note(
    "unsubscribe", UnsubscribeParams, _C2S)
DISPATCH_ACTION: Final[Method[DispatchActionParams, None]] = _note(
    "dispatchAction", DispatchActionParams, _C2S)
ACTION: Final[Method[ActionEnvelope, None]] = _note("action", ActionEnvelope, _S2C)
ROOT_SESSION_ADDED: Final[Method[SessionAddedParams, None]] = _note(
    "root/sessionAdded", SessionAddedParams, _S2C)
ROOT_SESSION_REMOVED: Final[Method[SessionRemovedParams, None]] = _note(
    "root/sessionRemoved", SessionRemovedParams, _S2C)
ROOT_SESSION_SUMMARY_CHANGED: Final[Method[SessionSummaryChangedParams, None]] = _note(
    "root/sessionSummaryChanged", SessionSummaryChangedParams, _S2C)
ROOT_PROGRESS: Final[Method[ProgressParams, None]] = _note(
    "root/progress", ProgressParams, _S2C)
AUTH_REQUIRED: Final[Method[AuthRequiredParams, None]] = _note(
    "auth/required", AuthRequiredParams, _S2C)
OTLP_EXPORT_LOGS: Final[Method[OtlpExportLogsParams, None]] = _note(
    "otlp/exportLogs", OtlpExportLogsParams, _S2C)
OTLP_EXPORT_TRACES: Final[Method[OtlpExportTracesParams, None]] = _note(
    "otlp/exportTraces", OtlpExportTracesParams, _S2C)
OTLP_EXPORT_METRICS: Final[Method[OtlpExportMetricsParams, None]] = _note(
    "otlp/exportMetrics", OtlpExportMetricsParams, _S2C)

METHODS: Final[Mapping[str, Method[object, object]]] = MappingProxyType({
    m.name: cast("Method[object, object]", m)
    for m in (
        INITIALIZE, PING, RECONNECT, SUBSCRIBE,
        CREATE_SESSION, DISPOSE_SESSION, CREATE_CHAT, DISPOSE_CHAT,
        CREATE_TERMINAL, DISPOSE_TERMINAL, CREATE_RESOURCE_WATCH, LIST_SESSIONS,
        RESOURCE_READ, RESOURCE_WRITE, RESOURCE_LIST, RESOURCE_COPY, RESOURCE_DELETE,
        RESOURCE_MOVE, RESOURCE_RESOLVE, RESOURCE_MKDIR, RESOURCE_REQUEST,
        FETCH_TURNS, AUTHENTICATE, RESOLVE_SESSION_CONFIG, SESSION_CONFIG_COMPLETIONS,
        COMPLETIONS, INVOKE_CHANGESET_OPERATION,
        UNSUBSCRIBE, DISPATCH_ACTION, ACTION,
        ROOT_SESSION_ADDED, ROOT_SESSION_REMOVED, ROOT_SESSION_SUMMARY_CHANGED, ROOT_PROGRESS,
        AUTH_REQUIRED, OTLP_EXPORT_LOGS, OTLP_EXPORT_TRACES, OTLP_EXPORT_METRICS,
    )
})
"""Method name -> :class:`Method` (read-only).  Looked up by name the types
are only known at run time; the module constants carry them statically."""


def method_info(name: str) -> Method[object, object] | None:
    """The :class:`Method` called ``name``, or ``None`` for a method AHP does not define."""
    return METHODS.get(name)


def request_method(name: str, direction: Direction) -> Method[object, object] | None:
    """The :class:`Method` of the request ``name`` if it is sent in ``direction``, else ``None``."""
    info = METHODS.get(name)
    if info is None or info.kind is not MessageKind.REQUEST or direction not in info.directions:
        return None
    return info


# Typed unions of the params and results by direction, for code that handles
# "any request" and narrows with ``match``.  ``tests/test_wire.py`` checks them
# against the table above.

CommandParams: TypeAlias = (
    t.CreateSessionParams
    | t.DisposeSessionParams
    | t.CreateChatParams
    | t.DisposeChatParams
    | t.CreateTerminalParams
    | t.DisposeTerminalParams
    | t.CreateResourceWatchParams
    | t.ListSessionsParams
    | t.ResourceReadParams
    | t.ResourceWriteParams
    | t.ResourceListParams
    | t.ResourceCopyParams
    | t.ResourceDeleteParams
    | t.ResourceMoveParams
    | t.ResourceResolveParams
    | t.ResourceMkdirParams
    | t.ResourceRequestParams
    | t.FetchTurnsParams
    | t.AuthenticateParams
    | t.ResolveSessionConfigParams
    | t.SessionConfigCompletionsParams
    | t.CompletionsParams
    | t.InvokeChangesetOperationParams
)
"""The params of every client-to-server request but the protocol-level
``initialize``, ``ping``, ``reconnect`` and ``subscribe``."""

CommandResult: TypeAlias = (
    t.CreateResourceWatchResult
    | t.ListSessionsResult
    | t.ResourceReadResult
    | t.ResourceWriteResult
    | t.ResourceListResult
    | t.ResourceCopyResult
    | t.ResourceDeleteResult
    | t.ResourceMoveResult
    | t.ResourceResolveResult
    | t.ResourceMkdirResult
    | t.ResourceRequestResult
    | t.FetchTurnsResult
    | t.AuthenticateResult
    | t.ResolveSessionConfigResult
    | t.SessionConfigCompletionsResult
    | t.CompletionsResult
    | t.InvokeChangesetOperationResult
)
"""Their non-``null`` results."""

ServerRequestParams: TypeAlias = (
    t.CreateResourceWatchParams
    | t.ResourceReadParams
    | t.ResourceWriteParams
    | t.ResourceListParams
    | t.ResourceCopyParams
    | t.ResourceDeleteParams
    | t.ResourceMoveParams
    | t.ResourceResolveParams
    | t.ResourceMkdirParams
    | t.ResourceRequestParams
)
"""The params of the requests a host may send a client."""

ServerRequestResult: TypeAlias = (
    t.CreateResourceWatchResult
    | t.ResourceReadResult
    | t.ResourceWriteResult
    | t.ResourceListResult
    | t.ResourceCopyResult
    | t.ResourceDeleteResult
    | t.ResourceMoveResult
    | t.ResourceResolveResult
    | t.ResourceMkdirResult
    | t.ResourceRequestResult
)
"""Their results."""

RequestParams: TypeAlias = (
    t.InitializeParams | t.PingParams | t.ReconnectParams | t.SubscribeParams | CommandParams
)
"""The params of every AHP request, in either direction."""

NotificationParams: TypeAlias = (
    t.UnsubscribeParams | t.DispatchActionParams | t.ActionEnvelope | t.ProtocolNotification
)
"""The params of every AHP notification, in either direction."""

AnyMessage: TypeAlias = (
    JsonRpcRequest[RequestParams]
    | JsonRpcNotification[NotificationParams]
    | JsonRpcSuccessResponse[object]
    | JsonRpcErrorResponse
)
"""What :func:`~agenthost_protocol.wire.parse_message` returns: params typed by
method (narrow with ``match`` or a method's :meth:`Method.params_of`); a
result is typed when its request's method was given, else raw JSON."""
