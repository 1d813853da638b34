"""agenthost-protocol: a pure, I/O-free Python implementation of the Agent Host Protocol.

The package is a set of modules, each named for what it holds:

* :mod:`agenthost_protocol.types`: every AHP type (frozen attrs classes);
* :mod:`agenthost_protocol.wire`: the codec (``parse_message``, ``dump`` ...);
* :mod:`agenthost_protocol.reducers`: the pure reducers of the seven channels;
* :mod:`agenthost_protocol.versions`: version registry and negotiation;
* :mod:`agenthost_protocol.reconciler`: the client write-ahead reconciler;
* :mod:`agenthost_protocol.errors`: the exceptions;
* :mod:`agenthost_protocol.testing.strategies`: hypothesis strategies (extra ``testing``).

The names below are the ones most programs need, re-exported for
convenience.  What this package promises to keep stable is what the pages
under ``docs/`` document.
"""

from __future__ import annotations

from ._version import __version__
from .channels import ROOT_CHANNEL, ChannelKind, channel_kind
from .errors import (
    InvalidParams,
    InvalidRequest,
    LocalProtocolError,
    MethodNotFound,
    ParseError,
    ProtocolError,
    RemoteProtocolError,
    UnsupportedProtocolVersion,
)
from .reconciler import ClientReconciler
from .reducers import reduce
from .versions import (
    PROTOCOL_VERSION,
    SUPPORTED_PROTOCOL_VERSIONS,
    negotiate_protocol_version,
)
from .wire import dump, dumps, parse_action, parse_envelope, parse_message, structure

__all__ = [
    "PROTOCOL_VERSION",
    "ROOT_CHANNEL",
    "SUPPORTED_PROTOCOL_VERSIONS",
    "ChannelKind",
    "ClientReconciler",
    "InvalidParams",
    "InvalidRequest",
    "LocalProtocolError",
    "MethodNotFound",
    "ParseError",
    "ProtocolError",
    "RemoteProtocolError",
    "UnsupportedProtocolVersion",
    "__version__",
    "channel_kind",
    "dump",
    "dumps",
    "negotiate_protocol_version",
    "parse_action",
    "parse_envelope",
    "parse_message",
    "reduce",
    "structure",
]
