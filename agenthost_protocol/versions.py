"""AHP protocol versions: the registry, negotiation and per-version filtering.

AHP versions are strict SemVer ``MAJOR.MINOR.PATCH`` strings, negotiated once
in ``initialize``: the client offers ``protocolVersions`` (most preferred
first), the host answers with one of them or with ``UnsupportedProtocolVersion``
(``-32005``), and both use that version for the rest of the connection.

The three registry maps record, per action type and per notification method,
the version that introduced it, and which actions a client may dispatch.  A
host uses them to never send a peer something its negotiated version does not
know (:func:`filter_envelope_for_version`, :func:`filter_notification_for_version`,
or a :class:`PeerProfile` built from the handshake).

The registry records introductions only, never removals or shape changes,
exactly like the spec's ``types/version/registry.ts``: ``chat/draftChanged`` is
"0.5.0" although 0.5.0 itself is no longer supported, and a 0.6.0 peer
"knows" ``chat/turnStarted`` although its ``startedAt`` only became required
in a later release.  The wire differences between supported versions are
listed by ``agenthost-protocol compat`` (``docs/versioning.md``).

The registry block below is generated from the bundled ``registry.json`` by
``tools/gen_registry.py``.

:class:`~agenthost_protocol.types.UnknownAction` (an action whose type this
library does not know) is treated as unknown to *every* version, whatever its
``type`` field says: a host must not forward what it cannot vouch for.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from enum import Enum
from functools import lru_cache
from types import MappingProxyType
from typing import Any, Final, TypeAlias, TypeVar

from attrs import field, frozen

from .errors import InvalidParams, LocalProtocolError, UnsupportedProtocolVersion
from .semver import (
    InvalidVersion,
    Version,
    VersionRange,
    matches_any,
    parse_range,
    parse_version,
)
from .types.actions import ActionEnvelope, StateAction, UnknownAction
from .types.commands import ClientCapabilities, InitializeParams
from .types.enums import ActionType
from .types.error_codes import UnsupportedProtocolVersionErrorData

__all__ = [
    "ACTION_INTRODUCED_IN",
    "CAPABILITY_INTRODUCED_IN",
    "FEATURE_INTRODUCED_IN",
    "IS_CLIENT_DISPATCHABLE",
    "NOTIFICATION_INTRODUCED_IN",
    "PROTOCOL_VERSION",
    "SUPPORTED_PROTOCOL_VERSIONS",
    "ActionLike",
    "Feature",
    "PeerProfile",
    "VersionNegotiationFailed",
    "are_compatible",
    "compare_protocol_versions",
    "filter_envelope_for_version",
    "filter_envelopes_for_version",
    "filter_notification_for_version",
    "is_action_known_to_version",
    "is_client_dispatchable",
    "is_feature_available",
    "is_notification_known_to_version",
    "negotiate_protocol_version",
    "select_version_from_supported",
]

# BEGIN GENERATED REGISTRY (tools/gen_registry.py; do not edit)
PROTOCOL_VERSION: Final = "0.7.0"
"""The AHP version this library implements."""

SUPPORTED_PROTOCOL_VERSIONS: Final[tuple[str, ...]] = ("0.7.0", "0.6.0", "0.5.2", "0.5.1")
"""Versions this library can speak, most preferred first."""

ACTION_INTRODUCED_IN: Final[Mapping[str, str]] = MappingProxyType({
    "root/agentsChanged": "0.1.0",
    "root/activeSessionsChanged": "0.1.0",
    "session/ready": "0.1.0",
    "session/creationFailed": "0.1.0",
    "session/chatAdded": "0.4.0",
    "session/chatRemoved": "0.4.0",
    "session/chatUpdated": "0.4.0",
    "session/defaultChatChanged": "0.4.0",
    "session/titleChanged": "0.1.0",
    "session/serverToolsChanged": "0.1.0",
    "session/activeClientSet": "0.5.0",
    "session/activeClientRemoved": "0.5.0",
    "session/workingDirectorySet": "0.7.0",
    "session/workingDirectoryRemoved": "0.7.0",
    "session/inputNeededSet": "0.5.1",
    "session/inputNeededRemoved": "0.5.1",
    "session/customizationsChanged": "0.1.0",
    "session/customizationToggled": "0.1.0",
    "session/customizationUpdated": "0.1.0",
    "session/customizationRemoved": "0.2.0",
    "session/mcpServerStateChanged": "0.3.0",
    "session/mcpServerStartRequested": "0.5.2",
    "session/mcpServerStopRequested": "0.5.2",
    "session/isReadChanged": "0.1.0",
    "session/isArchivedChanged": "0.1.0",
    "session/activityChanged": "0.1.0",
    "session/changesetsChanged": "0.2.0",
    "session/configChanged": "0.1.0",
    "session/metaChanged": "0.1.0",
    "chat/turnStarted": "0.4.0",
    "chat/delta": "0.4.0",
    "chat/responsePart": "0.4.0",
    "chat/toolCallStart": "0.4.0",
    "chat/toolCallDelta": "0.4.0",
    "chat/toolCallReady": "0.4.0",
    "chat/toolCallConfirmed": "0.4.0",
    "chat/toolCallComplete": "0.4.0",
    "chat/toolCallResultConfirmed": "0.4.0",
    "chat/toolCallContentChanged": "0.4.0",
    "chat/toolCallAuthRequired": "0.6.0",
    "chat/toolCallAuthResolved": "0.6.0",
    "chat/turnComplete": "0.4.0",
    "chat/turnCancelled": "0.4.0",
    "chat/error": "0.4.0",
    "chat/activityChanged": "0.5.0",
    "chat/workingDirectorySet": "0.7.0",
    "chat/workingDirectoryRemoved": "0.7.0",
    "chat/usage": "0.4.0",
    "chat/reasoning": "0.4.0",
    "chat/pendingMessageSet": "0.4.0",
    "chat/pendingMessageRemoved": "0.4.0",
    "chat/queuedMessagesReordered": "0.4.0",
    "chat/draftChanged": "0.5.0",
    "chat/inputRequested": "0.4.0",
    "chat/inputAnswerChanged": "0.4.0",
    "chat/inputCompleted": "0.4.0",
    "chat/truncated": "0.4.0",
    "chat/turnsLoaded": "0.5.1",
    "changeset/statusChanged": "0.2.0",
    "changeset/fileSet": "0.2.0",
    "changeset/fileRemoved": "0.2.0",
    "changeset/filesReviewChanged": "0.6.0",
    "changeset/contentChanged": "0.4.0",
    "changeset/operationsChanged": "0.2.0",
    "changeset/operationStatusChanged": "0.3.0",
    "changeset/cleared": "0.2.0",
    "annotations/set": "0.4.0",
    "annotations/updated": "0.4.0",
    "annotations/removed": "0.4.0",
    "annotations/entrySet": "0.4.0",
    "annotations/entryRemoved": "0.4.0",
    "root/terminalsChanged": "0.1.0",
    "root/configChanged": "0.1.0",
    "terminal/data": "0.1.0",
    "terminal/input": "0.1.0",
    "terminal/resized": "0.1.0",
    "terminal/claimed": "0.1.0",
    "terminal/titleChanged": "0.1.0",
    "terminal/cwdChanged": "0.1.0",
    "terminal/exited": "0.1.0",
    "terminal/cleared": "0.1.0",
    "terminal/commandDetectionAvailable": "0.1.0",
    "terminal/commandExecuted": "0.1.0",
    "terminal/commandFinished": "0.1.0",
    "resourceWatch/changed": "0.2.0",
})
"""Action ``type`` -> the protocol version that introduced it (all 85)."""

NOTIFICATION_INTRODUCED_IN: Final[Mapping[str, str]] = MappingProxyType({
    "root/sessionAdded": "0.1.0",
    "root/sessionRemoved": "0.1.0",
    "root/sessionSummaryChanged": "0.1.0",
    "root/progress": "0.5.0",
    "auth/required": "0.1.0",
    "otlp/exportLogs": "0.2.0",
    "otlp/exportTraces": "0.2.0",
    "otlp/exportMetrics": "0.2.0",
})
"""Notification method -> introducing version (``action`` is versioned per action type)."""

IS_CLIENT_DISPATCHABLE: Final[Mapping[str, bool]] = MappingProxyType({
    "root/agentsChanged": False,
    "root/activeSessionsChanged": False,
    "root/terminalsChanged": False,
    "root/configChanged": True,
    "session/ready": False,
    "session/creationFailed": False,
    "session/chatAdded": False,
    "session/chatRemoved": False,
    "session/chatUpdated": False,
    "session/defaultChatChanged": False,
    "session/titleChanged": True,
    "session/serverToolsChanged": False,
    "session/activeClientSet": True,
    "session/activeClientRemoved": True,
    "session/workingDirectorySet": True,
    "session/workingDirectoryRemoved": True,
    "session/inputNeededSet": False,
    "session/inputNeededRemoved": False,
    "session/customizationsChanged": False,
    "session/customizationToggled": True,
    "session/customizationUpdated": False,
    "session/customizationRemoved": False,
    "session/mcpServerStateChanged": False,
    "session/mcpServerStartRequested": True,
    "session/mcpServerStopRequested": True,
    "session/isReadChanged": True,
    "session/isArchivedChanged": True,
    "session/activityChanged": False,
    "session/changesetsChanged": False,
    "session/configChanged": True,
    "session/metaChanged": False,
    "chat/turnStarted": True,
    "chat/delta": False,
    "chat/responsePart": False,
    "chat/toolCallStart": False,
    "chat/toolCallDelta": False,
    "chat/toolCallReady": False,
    "chat/toolCallConfirmed": True,
    "chat/toolCallComplete": True,
    "chat/toolCallResultConfirmed": True,
    "chat/toolCallContentChanged": True,
    "chat/toolCallAuthRequired": False,
    "chat/toolCallAuthResolved": False,
    "chat/turnComplete": False,
    "chat/turnCancelled": True,
    "chat/error": False,
    "chat/activityChanged": False,
    "chat/workingDirectorySet": True,
    "chat/workingDirectoryRemoved": True,
    "chat/usage": False,
    "chat/reasoning": False,
    "chat/pendingMessageSet": True,
    "chat/pendingMessageRemoved": True,
    "chat/queuedMessagesReordered": True,
    "chat/draftChanged": True,
    "chat/inputRequested": False,
    "chat/inputAnswerChanged": True,
    "chat/inputCompleted": True,
    "chat/truncated": True,
    "chat/turnsLoaded": False,
    "changeset/statusChanged": False,
    "changeset/fileSet": False,
    "changeset/fileRemoved": False,
    "changeset/filesReviewChanged": True,
    "changeset/contentChanged": False,
    "changeset/operationsChanged": False,
    "changeset/operationStatusChanged": False,
    "changeset/cleared": False,
    "annotations/set": True,
    "annotations/updated": True,
    "annotations/removed": True,
    "annotations/entrySet": True,
    "annotations/entryRemoved": True,
    "terminal/data": False,
    "terminal/input": True,
    "terminal/resized": True,
    "terminal/claimed": True,
    "terminal/titleChanged": True,
    "terminal/cwdChanged": False,
    "terminal/exited": False,
    "terminal/cleared": True,
    "terminal/commandDetectionAvailable": False,
    "terminal/commandExecuted": False,
    "terminal/commandFinished": False,
    "resourceWatch/changed": False,
})
"""Action ``type`` -> whether a client may dispatch it (38 of 85 may)."""
# END GENERATED REGISTRY

CAPABILITY_INTRODUCED_IN: Final[Mapping[str, str]] = MappingProxyType({
    "mcpApps": "0.3.0",
})
"""``ClientCapabilities`` wire field -> the version that introduced it."""

_ACTION_METHOD: Final = "action"
"""The notification carrying an ``ActionEnvelope``: versioned per action type."""

_MAX_SHOWN: Final = 8

ActionLike: TypeAlias = StateAction | ActionType | str
"""An action object, an :class:`ActionType`, or an action ``type`` string."""

_P = TypeVar("_P")


_parse_cached = lru_cache(maxsize=128)(parse_version)


def _parse(text: object) -> Version:
    if isinstance(text, str):
        return _parse_cached(text)
    return parse_version(text)  # type: ignore[arg-type]  # raises InvalidVersion


def _known(introduced_in: str | None, version: str) -> bool:
    # asked per envelope per version on every fan-out: the answer, not only the
    # parse, is memoised (a malformed version raises, and is never cached)
    try:
        return _known_cached(introduced_in, version)
    except TypeError:  # an unhashable "version": refused as malformed below
        return _known_uncached(introduced_in, version)


def _known_uncached(introduced_in: str | None, version: str) -> bool:
    peer = _parse(version)  # validate even when the answer is "no"
    return introduced_in is not None and _parse(introduced_in) <= peer


_known_cached = lru_cache(maxsize=1024)(_known_uncached)


def _action_type(action: ActionLike) -> str | None:
    if isinstance(action, UnknownAction):
        return None
    tp = action if isinstance(action, str) else getattr(action, "type", None)
    if isinstance(tp, ActionType):
        return tp.value
    return tp if isinstance(tp, str) else None


# -- comparison --------------------------------------------------------------


def compare_protocol_versions(a: str, b: str) -> int:
    """``-1``, ``0`` or ``1`` as ``a`` is lower than, equal to or higher than ``b``.

    Both must be strict ``MAJOR.MINOR.PATCH`` strings, compared numerically
    (``"0.10.0" > "0.9.0"``); anything else raises
    :class:`~agenthost_protocol.semver.InvalidVersion` (a ``LocalProtocolError``).
    """
    va, vb = _parse(a), _parse(b)
    return (va > vb) - (va < vb)


def are_compatible(a: str, b: str) -> bool:
    """Whether the spec guarantees that peers speaking ``a`` and ``b`` interoperate.

    True for the same ``MAJOR >= 1``, or the same pre-1.0 ``0.MINOR``; any
    other pair is not guaranteed compatible.
    """
    va, vb = _parse(a), _parse(b)
    return va.major == vb.major and (va.major >= 1 or va.minor == vb.minor)


# -- the registry -------------------------------------------------------------


def is_action_known_to_version(action: ActionLike, version: str) -> bool:
    """Whether a peer speaking ``version`` knows this action type.

    ``action`` is an action object, an :class:`ActionType` or a type string.
    True iff the action's introducing version is at most ``version``.  Type
    strings this library does not know, and every
    :class:`~agenthost_protocol.types.UnknownAction`, are unknown to every
    version.  ``version`` must be well formed.
    """
    tp = _action_type(action)
    return _known(None if tp is None else ACTION_INTRODUCED_IN.get(tp), version)


def is_notification_known_to_version(method: str, version: str) -> bool:
    """Whether a peer speaking ``version`` knows the server notification ``method``.

    The eight protocol notifications are looked up in
    :data:`NOTIFICATION_INTRODUCED_IN`.  ``action`` exists in every version
    and so is known, but what it carries is versioned per action type: filter
    its envelope with :func:`filter_envelope_for_version` (or call
    :func:`filter_notification_for_version`).  Any other method, including
    the client-to-server notifications, is not a server notification: False.
    """
    if method == _ACTION_METHOD:
        _parse(version)
        return True
    return _known(NOTIFICATION_INTRODUCED_IN.get(method), version)


def is_client_dispatchable(action: ActionLike) -> bool:
    """Whether a client may dispatch this action (``IS_CLIENT_DISPATCHABLE``).

    False for unknown type strings and for every ``UnknownAction``.
    """
    tp = _action_type(action)
    return tp is not None and IS_CLIENT_DISPATCHABLE.get(tp, False)


# -- per-version filtering ----------------------------------------------------


def filter_envelope_for_version(envelope: ActionEnvelope, version: str) -> ActionEnvelope | None:
    """``envelope`` if a peer speaking ``version`` knows its action, else ``None``.

    Dropping an envelope leaves a gap in the ``serverSeq`` values that peer
    sees; ``serverSeq`` is global across channels, so clients already expect gaps.
    """
    return envelope if is_action_known_to_version(envelope.action, version) else None


def filter_envelopes_for_version(
    envelopes: Iterable[ActionEnvelope], version: str
) -> tuple[ActionEnvelope, ...]:
    """The envelopes a peer speaking ``version`` knows, in order (e.g. a ``reconnect`` replay)."""
    _parse(version)
    return tuple(e for e in envelopes if is_action_known_to_version(e.action, version))


def filter_notification_for_version(method: str, params: _P, version: str) -> _P | None:
    """``params`` if a peer speaking ``version`` may receive notification ``method``, else ``None``.

    For ``action``, ``params`` is the ``ActionEnvelope`` (or its raw JSON
    object) and the decision follows its action type.  For the other methods
    it follows :data:`NOTIFICATION_INTRODUCED_IN`; methods that are not
    server notifications are dropped.
    """
    if method != _ACTION_METHOD:
        return params if is_notification_known_to_version(method, version) else None
    if isinstance(params, ActionEnvelope):
        return params if is_action_known_to_version(params.action, version) else None
    action = params.get("action") if isinstance(params, Mapping) else None
    tp = action.get("type") if isinstance(action, Mapping) else None
    if isinstance(tp, str) and is_action_known_to_version(tp, version):
        return params
    _parse(version)
    return None


# -- negotiation --------------------------------------------------------------


def _shown(values: Sequence[object]) -> str:
    items = []
    for value in values[:_MAX_SHOWN]:
        text = repr(value)
        items.append(text if len(text) <= 40 else text[:37] + "...")
    if len(values) > _MAX_SHOWN:
        items.append(f"... ({len(values) - _MAX_SHOWN} more)")
    return "[" + ", ".join(items) + "]"


class VersionNegotiationFailed(UnsupportedProtocolVersion):
    """No offered protocol version is supported (``-32005``).

    ``data`` is the wire object ``{"supportedVersions": [...]}`` to answer
    with (:meth:`to_error` builds the whole JSON-RPC error); per the spec the
    host then closes the connection.  :attr:`error_data` is the same as the
    typed :class:`~agenthost_protocol.types.UnsupportedProtocolVersionErrorData`.
    """

    def __init__(self, offered: Sequence[object], supported: Sequence[str]) -> None:
        self.offered: tuple[object, ...] = tuple(offered)
        """What the client offered, as received."""
        self.supported_versions: tuple[str, ...] = tuple(supported)
        """What this side supports: exact versions or SemVer ranges."""
        super().__init__(
            f"none of the offered protocol versions {_shown(self.offered)} is supported; "
            f"supported: {', '.join(self.supported_versions)}",
            data={"supportedVersions": list(self.supported_versions)},
        )

    @property
    def error_data(self) -> UnsupportedProtocolVersionErrorData:
        """The error ``data`` as its typed model class."""
        return UnsupportedProtocolVersionErrorData(supported_versions=self.supported_versions)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.offered, self.supported_versions))


def _supported_ranges(supported: Sequence[str]) -> tuple[VersionRange, ...]:
    if isinstance(supported, str):
        raise LocalProtocolError("supported must be a sequence of versions, not one string")
    if not supported:
        raise LocalProtocolError("supported must name at least one version")
    return tuple(parse_range(entry) for entry in supported)


def negotiate_protocol_version(
    offered: Iterable[str], supported: Sequence[str] = SUPPORTED_PROTOCOL_VERSIONS
) -> str:
    """The version a host answers ``initialize`` with: the first entry of the
    client's ``offered`` list (``InitializeParams.protocol_versions``) that the
    host supports.

    The client's preference order wins, as the spec asks; a client listing
    its versions newest first thereby gets the highest common version.
    ``supported`` entries are exact versions or SemVer ranges
    (``">=0.3.0 <0.6.0"``); malformed ones are the caller's mistake and raise
    :class:`~agenthost_protocol.semver.InvalidVersion`.  Offered entries that
    are not strict ``MAJOR.MINOR.PATCH`` strings are skipped (they cannot be
    spoken).  The returned string is the offered entry itself.

    Raises :class:`VersionNegotiationFailed` (``-32005``, carrying
    ``supportedVersions``) when nothing matches, including an empty offer.
    """
    if isinstance(offered, str):
        raise LocalProtocolError("offered must be a sequence of versions, not one string")
    ranges = _supported_ranges(supported)
    received: tuple[object, ...] = tuple(offered)
    for entry in received:
        if not isinstance(entry, str):
            continue
        try:
            version = _parse(entry)
        except InvalidVersion:
            continue
        if any(r.matches(version) for r in ranges):
            return entry
    raise VersionNegotiationFailed(received, supported)


def select_version_from_supported(
    supported: UnsupportedProtocolVersionErrorData | Iterable[str],
    candidates: Iterable[str] = SUPPORTED_PROTOCOL_VERSIONS,
) -> str | None:
    """Client side of a ``-32005``: the first of ``candidates`` (the versions
    this client speaks, most preferred first) that the host's
    ``supportedVersions`` (exact versions or ranges) admits, or ``None``.

    Entries of ``supported`` that do not parse are skipped: they came from the
    peer; ``supported`` itself must be an array (any iterable but a string or a
    mapping), else
    :class:`~agenthost_protocol.errors.InvalidParams` is raised.  ``candidates``
    must be well formed.
    """
    if isinstance(supported, UnsupportedProtocolVersionErrorData):
        specs: tuple[object, ...] = supported.supported_versions
    elif isinstance(supported, Iterable) and not isinstance(supported, (str, bytes, Mapping)):
        specs = tuple(supported)
    else:
        # The host's ``supportedVersions`` is peer data: anything but an array
        # of strings is the peer's fault, not a crash.
        raise InvalidParams(
            f"supportedVersions must be an array of strings, got {type(supported).__name__}",
            path="$.supportedVersions",
        )
    texts = tuple(spec for spec in specs if isinstance(spec, str))
    for candidate in candidates:
        if matches_any(_parse(candidate), texts):
            return candidate
    return None


# -- features and capabilities ------------------------------------------------


class Feature(str, Enum):
    """Protocol features a host may have to withhold from an older or less
    capable peer.  Each is available from the version in
    :data:`FEATURE_INTRODUCED_IN`; :attr:`MCP_APPS` additionally needs the
    client to declare ``capabilities.mcpApps``.
    """

    CHANGESETS = "changesets"
    """Changeset channels and the ``changeset/*`` actions."""
    RESOURCE_WATCH = "resourceWatch"
    """``createResourceWatch`` and ``ahp-resource-watch:`` channels."""
    TELEMETRY = "telemetry"
    """OTLP telemetry channels (``otlp/*`` notifications, ``InitializeResult.telemetry``)."""
    MCP_SERVERS = "mcpServers"
    """First-class MCP server customizations and ``session/mcpServerStateChanged``."""
    MCP_APPS = "mcpApps"
    """``McpServerCustomization.mcpApp`` and the ``mcp://`` side channel (capability-gated)."""
    CHAT_CHANNELS = "chatChannels"
    """``ahp-chat:`` channels, the ``chat/*`` actions and the session's chat catalogue."""
    ANNOTATIONS = "annotations"
    """The annotations channel and the ``annotations/*`` actions."""
    MULTIPLE_ACTIVE_CLIENTS = "multipleActiveClients"
    """``SessionState.activeClients`` and ``session/activeClientSet`` / ``activeClientRemoved``."""


FEATURE_INTRODUCED_IN: Final[Mapping[Feature, str]] = MappingProxyType({
    Feature.CHANGESETS: ACTION_INTRODUCED_IN["changeset/statusChanged"],
    Feature.RESOURCE_WATCH: ACTION_INTRODUCED_IN["resourceWatch/changed"],
    Feature.TELEMETRY: NOTIFICATION_INTRODUCED_IN["otlp/exportLogs"],
    Feature.MCP_SERVERS: ACTION_INTRODUCED_IN["session/mcpServerStateChanged"],
    Feature.MCP_APPS: CAPABILITY_INTRODUCED_IN["mcpApps"],
    Feature.CHAT_CHANNELS: ACTION_INTRODUCED_IN["chat/turnStarted"],
    Feature.ANNOTATIONS: ACTION_INTRODUCED_IN["annotations/set"],
    Feature.MULTIPLE_ACTIVE_CLIENTS: ACTION_INTRODUCED_IN["session/activeClientSet"],
})
"""Feature -> the first version that has it (derived from the registry maps)."""

_CAPABILITY_GATED: Final[Mapping[Feature, str]] = MappingProxyType({Feature.MCP_APPS: "mcp_apps"})
"""Feature -> the ``ClientCapabilities`` attribute the client must set."""


def is_feature_available(
    feature: Feature, version: str, capabilities: ClientCapabilities | None = None
) -> bool:
    """Whether a host may use ``feature`` with a client that negotiated
    ``version`` and declared ``capabilities`` (absent means "none declared").
    """
    if not _known(FEATURE_INTRODUCED_IN[feature], version):
        return False
    attribute = _CAPABILITY_GATED.get(feature)
    return attribute is None or (
        capabilities is not None and getattr(capabilities, attribute) is not None
    )


def _check_version(_instance: object, _attribute: object, value: str) -> None:
    _parse(value)


@frozen
class PeerProfile:
    """What one connected client speaks: its negotiated version and declared
    capabilities.  A host builds it once per connection, with
    :meth:`negotiate` from the ``initialize`` params, and asks it before
    sending anything.
    """

    protocol_version: str = field(validator=_check_version)
    """The negotiated version."""
    capabilities: ClientCapabilities | None = None
    """The client's declared capabilities (``None``: none declared)."""

    @classmethod
    def negotiate(
        cls, params: InitializeParams, supported: Sequence[str] = SUPPORTED_PROTOCOL_VERSIONS
    ) -> PeerProfile:
        """Negotiate with :func:`negotiate_protocol_version`; raises
        :class:`VersionNegotiationFailed` when nothing matches."""
        version = negotiate_protocol_version(params.protocol_versions, supported)
        return cls(version, params.capabilities)

    def knows_action(self, action: ActionLike) -> bool:
        """:func:`is_action_known_to_version` for this peer."""
        return is_action_known_to_version(action, self.protocol_version)

    def knows_notification(self, method: str) -> bool:
        """:func:`is_notification_known_to_version` for this peer."""
        return is_notification_known_to_version(method, self.protocol_version)

    def may_dispatch(self, action: ActionLike) -> bool:
        """Whether this client may dispatch ``action``: client-dispatchable and
        known to its version."""
        return is_client_dispatchable(action) and self.knows_action(action)

    def supports(self, feature: Feature) -> bool:
        """:func:`is_feature_available` for this peer."""
        return is_feature_available(feature, self.protocol_version, self.capabilities)

    def filter_envelope(self, envelope: ActionEnvelope) -> ActionEnvelope | None:
        """:func:`filter_envelope_for_version` for this peer."""
        return filter_envelope_for_version(envelope, self.protocol_version)

    def filter_envelopes(self, envelopes: Iterable[ActionEnvelope]) -> tuple[ActionEnvelope, ...]:
        """:func:`filter_envelopes_for_version` for this peer."""
        return filter_envelopes_for_version(envelopes, self.protocol_version)

    def filter_notification(self, method: str, params: _P) -> _P | None:
        """:func:`filter_notification_for_version` for this peer."""
        return filter_notification_for_version(method, params, self.protocol_version)
