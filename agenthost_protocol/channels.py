"""Channel URIs: which kind of channel a URI names.

AHP scopes every action and notification to a channel URI.  Most kinds are
recognisable by scheme, with one trap: the annotations channel of a session
shares the session's ``ahp-session:`` scheme and is told apart by its
``/annotations`` suffix.  Terminal and changeset URIs may also be
server-defined (advertised in state), so callers that know what they
subscribed to should prefer that knowledge over :func:`channel_kind`.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from types import MappingProxyType
from typing import Any, Final

from . import types as t

__all__ = ["ACTION_UNIONS", "ROOT_CHANNEL", "STATE_TYPES", "ChannelKind", "channel_kind"]

ROOT_CHANNEL = "ahp-root://"
"""The one root channel of a host."""


class ChannelKind(str, Enum):
    """The kinds of channel; the value is the reducer name used by the conformance corpus."""

    ROOT = "root"
    SESSION = "session"
    CHAT = "chat"
    TERMINAL = "terminal"
    CHANGESET = "changeset"
    ANNOTATIONS = "annotations"
    RESOURCE_WATCH = "resourceWatch"
    OTLP = "otlp"
    MCP = "mcp"

    @property
    def is_stateful(self) -> bool:
        """Whether subscribing yields a snapshot and actions (OTLP and MCP do not)."""
        return self not in (ChannelKind.OTLP, ChannelKind.MCP)


_SCHEMES = (
    ("ahp-chat:", ChannelKind.CHAT),
    ("ahp-terminal:", ChannelKind.TERMINAL),
    ("ahp-changeset:", ChannelKind.CHANGESET),
    ("ahp-resource-watch:", ChannelKind.RESOURCE_WATCH),
    ("ahp-otlp:", ChannelKind.OTLP),
    ("mcp:", ChannelKind.MCP),
)


def channel_kind(uri: str) -> ChannelKind | None:
    """The kind of channel ``uri`` names by its scheme, or ``None`` if unrecognised."""
    if uri.startswith("ahp-root:"):
        return ChannelKind.ROOT
    if uri.startswith("ahp-session:"):
        if uri.rstrip("/").endswith("/annotations"):
            return ChannelKind.ANNOTATIONS
        return ChannelKind.SESSION
    for scheme, kind in _SCHEMES:
        if uri.startswith(scheme):
            return kind
    return None


STATE_TYPES: Final[Mapping[ChannelKind, type[Any]]] = MappingProxyType({
    ChannelKind.ROOT: t.RootState,
    ChannelKind.SESSION: t.SessionState,
    ChannelKind.CHAT: t.ChatState,
    ChannelKind.TERMINAL: t.TerminalState,
    ChannelKind.CHANGESET: t.ChangesetState,
    ChannelKind.ANNOTATIONS: t.AnnotationsState,
    ChannelKind.RESOURCE_WATCH: t.ResourceWatchState,
})
"""The state type of each stateful channel kind."""

ACTION_UNIONS: Final[Mapping[ChannelKind, Any]] = MappingProxyType({
    ChannelKind.ROOT: t.RootAction,
    ChannelKind.SESSION: t.SessionAction,
    ChannelKind.CHAT: t.ChatAction,
    ChannelKind.TERMINAL: t.TerminalAction,
    ChannelKind.CHANGESET: t.ChangesetAction,
    ChannelKind.ANNOTATIONS: t.AnnotationsAction,
    ChannelKind.RESOURCE_WATCH: t.ResourceWatchAction,
})
"""The action union (``ChatAction`` ...) of each stateful channel kind; each includes
``UnknownAction``."""
