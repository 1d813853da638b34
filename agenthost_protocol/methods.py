"""The AHP method table: every JSON-RPC method, its direction, params and result types.

38 method names: 27 client-to-server requests, 10 server-to-client requests
(the nine ``resource*`` commands and ``createResourceWatch``, which either
peer may send), 2 client notifications and 9 server notifications.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Final, TypeAlias

from attrs import frozen

from . import types as t
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
    "METHODS",
    "Direction",
    "MessageKind",
    "Method",
    "method_info",
]


class Direction(str, Enum):
    """Who sends a method."""

    CLIENT_TO_SERVER = "client->server"
    SERVER_TO_CLIENT = "server->client"


class MessageKind(str, Enum):
    """Whether a method is a request (answered) or a notification."""

    REQUEST = "request"
    NOTIFICATION = "notification"


@frozen(kw_only=True)
class Method:
    """One AHP method."""

    name: str
    kind: MessageKind
    directions: frozenset[Direction]
    params: Any
    """The params class."""
    result: Any = None
    """The result type of a request (``None`` where the spec's result is ``null``)."""


_C2S = frozenset({Direction.CLIENT_TO_SERVER})
_S2C = frozenset({Direction.SERVER_TO_CLIENT})
_BOTH = _C2S | _S2C


def _req(name: str, params: Any, result: Any, directions: frozenset[Direction] = _C2S) -> Method:
    return Method(name=name, kind=MessageKind.REQUEST, directions=directions,
                  params=params, result=result)


def _note(name: str, params: Any, directions: frozenset[Direction]) -> Method:
    return Method(name=name, kind=MessageKind.NOTIFICATION, directions=directions, params=params)


METHODS: Final[dict[str, Method]] = {
    m.name: m
    for m in (
        _req("initialize", InitializeParams, InitializeResult),
        _req("ping", PingParams, None),
        _req("reconnect", ReconnectParams, ReconnectResult),
        _req("subscribe", SubscribeParams, SubscribeResult),
        _req("createSession", CreateSessionParams, None),
        _req("disposeSession", DisposeSessionParams, None),
        _req("createChat", CreateChatParams, None),
        _req("disposeChat", DisposeChatParams, None),
        _req("createTerminal", CreateTerminalParams, None),
        _req("disposeTerminal", DisposeTerminalParams, None),
        _req("createResourceWatch", CreateResourceWatchParams, CreateResourceWatchResult, _BOTH),
        _req("listSessions", ListSessionsParams, ListSessionsResult),
        _req("resourceRead", ResourceReadParams, ResourceReadResult, _BOTH),
        _req("resourceWrite", ResourceWriteParams, ResourceWriteResult, _BOTH),
        _req("resourceList", ResourceListParams, ResourceListResult, _BOTH),
        _req("resourceCopy", ResourceCopyParams, ResourceCopyResult, _BOTH),
        _req("resourceDelete", ResourceDeleteParams, ResourceDeleteResult, _BOTH),
        _req("resourceMove", ResourceMoveParams, ResourceMoveResult, _BOTH),
        _req("resourceResolve", ResourceResolveParams, ResourceResolveResult, _BOTH),
        _req("resourceMkdir", ResourceMkdirParams, ResourceMkdirResult, _BOTH),
        _req("resourceRequest", ResourceRequestParams, ResourceRequestResult, _BOTH),
        _req("fetchTurns", FetchTurnsParams, FetchTurnsResult),
        _req("authenticate", AuthenticateParams, AuthenticateResult),
        _req("resolveSessionConfig", ResolveSessionConfigParams, ResolveSessionConfigResult),
        _req("sessionConfigCompletions", SessionConfigCompletionsParams,
             SessionConfigCompletionsResult),
        _req("completions", CompletionsParams, CompletionsResult),
        _req("invokeChangesetOperation", InvokeChangesetOperationParams,
             InvokeChangesetOperationResult),
        _note("unsubscribe", UnsubscribeParams, _C2S),
        _note("dispatchAction", DispatchActionParams, _C2S),
        _note("action", ActionEnvelope, _S2C),
        _note("root/sessionAdded", SessionAddedParams, _S2C),
        _note("root/sessionRemoved", SessionRemovedParams, _S2C),
        _note("root/sessionSummaryChanged", SessionSummaryChangedParams, _S2C),
        _note("root/progress", ProgressParams, _S2C),
        _note("auth/required", AuthRequiredParams, _S2C),
        _note("otlp/exportLogs", OtlpExportLogsParams, _S2C),
        _note("otlp/exportTraces", OtlpExportTracesParams, _S2C),
        _note("otlp/exportMetrics", OtlpExportMetricsParams, _S2C),
    )
}
"""Method name -> :class:`Method`."""


def method_info(name: str) -> Method | None:
    """The :class:`Method` called ``name``, or ``None`` for a method AHP does not define."""
    return METHODS.get(name)


def request_method(name: str, direction: Direction) -> Method | None:
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
