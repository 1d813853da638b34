"""The sans-I/O host core: ``Host``, its connections, events and validation rules.

See ``docs/host.md``.  The public names are those of ``__all__``; the
modules hold them: ``core`` (the host: connections, sequencing, the
protocol's commands), ``commands`` (the session, chat and terminal
helpers), ``durable`` (what the host does with a store), ``store`` (the
store interface, ``MemoryStore``), ``authorize`` (users kept apart: the
``authorize`` hook, ``OwnershipPolicy``), ``persistence`` (the channel table and
the journal), ``connection``, ``events``, ``replay``, ``validation``,
``sessions``, ``content``, ``limits``.
"""

from __future__ import annotations

from .authorize import Authorize, Operation, OwnerKey, OwnershipPolicy, default_owner_key
from .connection import ConnectionState, HostConnection
from .core import (
    HOLD,
    ClientAction,
    Hold,
    Host,
    HostObserver,
    ProtocolNotificationParams,
    Reject,
    Review,
    ReviewVerdict,
)
from .events import (
    ClientActionApplied,
    ClientIdClaimed,
    ClientRequestParams,
    ClientRequestResult,
    ConnectionClosed,
    ErrorData,
    ErrorReceived,
    Event,
    Initialized,
    Reconnected,
    RequestReceived,
    Responder,
    ResponseReceived,
    ServerRequestParams,
    ServerRequestResult,
    StoreFailed,
    TypedRequest,
    Unsubscribed,
)
from .limits import HostLimits
from .replay import ReplayBuffer, ReplayEntry
from .store import HostStore, MemoryStore, StoreError
from .validation import ValidationContext, validate

__all__ = [
    "HOLD",
    "Authorize",
    "Operation",
    "OwnerKey",
    "OwnershipPolicy",
    "default_owner_key",
    "ClientAction",
    "Hold",
    "Reject",
    "Review",
    "ReviewVerdict",
    "ClientActionApplied",
    "ClientIdClaimed",
    "ClientRequestParams",
    "ClientRequestResult",
    "ConnectionClosed",
    "ConnectionState",
    "ErrorData",
    "ErrorReceived",
    "Event",
    "Host",
    "HostConnection",
    "HostLimits",
    "HostObserver",
    "HostStore",
    "Initialized",
    "MemoryStore",
    "ProtocolNotificationParams",
    "Reconnected",
    "ReplayBuffer",
    "ReplayEntry",
    "RequestReceived",
    "Responder",
    "ResponseReceived",
    "ServerRequestParams",
    "ServerRequestResult",
    "StoreError",
    "StoreFailed",
    "TypedRequest",
    "Unsubscribed",
    "ValidationContext",
    "validate",
]
