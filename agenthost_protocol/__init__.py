"""agenthost-protocol: a pure, I/O-free Python implementation of the Agent Host Protocol.

Where to start, by what you want to do:

* serve an agent: :mod:`agenthost_protocol.agent` (subclass ``Agent``, write
  ``turn``; ``run(agent)`` or ``agenthost-protocol serve --agent module:attr``);
  see ``docs/agents.md``;
* write a client: :func:`agenthost_protocol.aio.client.connect` (asyncio), or
  the sans-I/O :mod:`agenthost_protocol.client` on a transport of your own;
  see ``docs/client.md``;
* test an implementation: :mod:`agenthost_protocol.conformance` (the official
  corpus), :func:`agenthost_protocol.reduce` and
  :mod:`agenthost_protocol.testing.strategies` (hypothesis); see ``docs/testing.md``.

The agent layer and the asyncio client need asyncio (and the ``ws`` extra
for WebSocket), the strategies hypothesis (extra ``testing``); importing
this package imports none of them.

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

Importing the package is cheap: each re-exported name imports its module on
first use (PEP 562), so ``import agenthost_protocol`` does not build the
model's classes until a program touches one.
"""

from __future__ import annotations

from ._version import __version__

# ``typing`` costs more to import than the rest of this module: not at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

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

# Where each re-exported name lives (the module is imported on first access).
_EXPORTS: dict[str, str] = {
    "ROOT_CHANNEL": "channels",
    "ChannelKind": "channels",
    "channel_kind": "channels",
    "InvalidParams": "errors",
    "InvalidRequest": "errors",
    "LocalProtocolError": "errors",
    "MethodNotFound": "errors",
    "ParseError": "errors",
    "ProtocolError": "errors",
    "RemoteProtocolError": "errors",
    "UnsupportedProtocolVersion": "errors",
    "ClientReconciler": "reconciler",
    "reduce": "reducers",
    "PROTOCOL_VERSION": "versions",
    "SUPPORTED_PROTOCOL_VERSIONS": "versions",
    "negotiate_protocol_version": "versions",
    "dump": "wire",
    "dumps": "wire",
    "parse_action": "wire",
    "parse_envelope": "wire",
    "parse_message": "wire",
    "structure": "wire",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module  # noqa: PLC0415  # only on first use

    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups are plain module attributes
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
