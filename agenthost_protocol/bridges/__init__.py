"""Agent bridges: other agent protocols behind an AHP host, as pure sans-I/O mappers.

Each bridge maps one agent session: agent events in, AHP actions out (for
``Host.dispatch``); AHP client actions in, agent messages out.  Ids, content
URIs and clocks come from the caller.  See ``docs/bridges.md``.

* :mod:`agenthost_protocol.bridges.acp`: the Agent Client Protocol
  (:class:`~agenthost_protocol.bridges.acp.AcpBridge`); pure, no dependency;
* :mod:`agenthost_protocol.bridges.pi`: pi / xcsh in RPC mode
  (:class:`~agenthost_protocol.bridges.pi.PiBridge`; JSON Lines frames in
  :mod:`~agenthost_protocol.bridges.pi_frames`);
* :mod:`agenthost_protocol.bridges.history`: stateless chat APIs (full
  histories per request) as AHP chats, after the Symposium history actor
  (:class:`~agenthost_protocol.bridges.history.HistoryActor`).

Names are exported lazily, so importing this package imports no bridge (and
no optional dependency) until a name is used.  The runners that put agent
processes behind a host do I/O and live in the agent layer:
:mod:`agenthost_protocol.agent.acp_runner` and
:mod:`agenthost_protocol.agent.pi_runner`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from .acp import (
        AcpBridge,
        AcpErrorReply,
        AcpNotification,
        AcpReply,
        AcpRequest,
        AcpSessionSetup,
        AhpDispatch,
        BridgeOutput,
        PromptCapabilities,
    )
    from .history import (
        HistoryActor,
        HistoryConversation,
        HistoryMessage,
        HistoryOutput,
        match_history,
    )
    from .pi import PiBridge, PiDialect, PiOutput
    from .pi_frames import JsonLinesDecoder, MalformedLine, encode_frame

# name -> the module (relative to this package) that defines it
_LAZY: Final[Mapping[str, str]] = MappingProxyType({
    "AcpBridge": ".acp",
    "AcpErrorReply": ".acp",
    "AcpNotification": ".acp",
    "AcpReply": ".acp",
    "AcpRequest": ".acp",
    "AcpSessionSetup": ".acp",
    "AhpDispatch": ".acp",
    "BridgeOutput": ".acp",
    "PromptCapabilities": ".acp",
    "HistoryActor": ".history",
    "HistoryConversation": ".history",
    "HistoryMessage": ".history",
    "HistoryOutput": ".history",
    "match_history": ".history",
    "PiBridge": ".pi",
    "PiDialect": ".pi",
    "PiOutput": ".pi",
    "JsonLinesDecoder": ".pi_frames",
    "MalformedLine": ".pi_frames",
    "encode_frame": ".pi_frames",
})

__all__ = [
    "AcpBridge",
    "AcpErrorReply",
    "AcpNotification",
    "AcpReply",
    "AcpRequest",
    "AcpSessionSetup",
    "AhpDispatch",
    "BridgeOutput",
    "HistoryActor",
    "HistoryConversation",
    "HistoryMessage",
    "HistoryOutput",
    "JsonLinesDecoder",
    "MalformedLine",
    "PiBridge",
    "PiDialect",
    "PiOutput",
    "PromptCapabilities",
    "encode_frame",
    "match_history",
]


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
