"""Channel URIs: which kind of channel a URI names.

AHP scopes every action and notification to a channel URI.  Most kinds are
recognisable by scheme, with one trap: the annotations channel of a session
shares the session's ``ahp-session:`` scheme and is told apart by its
``/annotations`` suffix.  Terminal and changeset URIs may also be
server-defined (advertised in state), so callers that know what they
subscribed to should prefer that knowledge over :func:`channel_kind`.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["ROOT_CHANNEL", "ChannelKind", "channel_kind"]

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
