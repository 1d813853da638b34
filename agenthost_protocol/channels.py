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
from .errors import LocalProtocolError

__all__ = [
    "ACTION_UNIONS",
    "ROOT_CHANNEL",
    "STATE_TYPES",
    "ChannelKind",
    "annotations_channel",
    "channel_kind",
    "session_of_annotations",
]

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


_SESSION_PREFIX: Final = "ahp-session:/"
_ANNOTATIONS_SUFFIX: Final = "/annotations"


def channel_kind(uri: str) -> ChannelKind | None:
    """The kind of channel ``uri`` names by its scheme, or ``None`` if unrecognised.

    A session's annotations channel is told apart by the spec's grammar,
    ``ahp-session:/<id>/annotations`` with a non-empty ``<id>`` free of ``/``;
    anything else under ``ahp-session:`` is a session (so the session whose id
    is ``annotations``, ``ahp-session:/annotations``, is a session).
    """
    if uri.startswith("ahp-root:"):
        return ChannelKind.ROOT
    if uri.startswith("ahp-session:"):
        if _annotations_session_id(uri) is not None:
            return ChannelKind.ANNOTATIONS
        return ChannelKind.SESSION
    for scheme, kind in _SCHEMES:
        if uri.startswith(scheme):
            return kind
    return None


def _annotations_session_id(uri: str) -> str | None:
    if not (uri.startswith(_SESSION_PREFIX) and uri.endswith(_ANNOTATIONS_SUFFIX)):
        return None
    session_id = uri[len(_SESSION_PREFIX) : -len(_ANNOTATIONS_SUFFIX)]
    return session_id if session_id and "/" not in session_id else None


def annotations_channel(session: str) -> str:
    """The annotations channel of the session channel ``session``.

    Raises :class:`~agenthost_protocol.errors.LocalProtocolError` when
    ``session`` is not an ``ahp-session:/<id>`` URI.
    """
    session_id = session[len(_SESSION_PREFIX) :] if session.startswith(_SESSION_PREFIX) else ""
    if not session_id or "/" in session_id:
        raise LocalProtocolError(f"{session!r} is not a session channel URI")
    return session + _ANNOTATIONS_SUFFIX


def session_of_annotations(uri: str) -> str | None:
    """The session channel whose annotations channel ``uri`` is, or ``None``."""
    session_id = _annotations_session_id(uri)
    return None if session_id is None else _SESSION_PREFIX + session_id


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
