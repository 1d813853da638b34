"""The version registry, negotiation and per-version filtering (``agenthost_protocol.versions``)."""

from __future__ import annotations

import json
import pickle
import typing
from collections import Counter
from importlib import resources

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agenthost_protocol.errors import (
    LocalProtocolError,
    RemoteProtocolError,
    UnsupportedProtocolVersion,
)
from agenthost_protocol.semver import InvalidVersion, parse_version, satisfies
from agenthost_protocol.types import (
    ActionEnvelope,
    ActionOrigin,
    ActionType,
    ChangesetClearedAction,
    ChangesetFilesReviewChangedAction,
    ChangesetOperationStatusChangedAction,
    ChatDraftChangedAction,
    ChatTruncatedAction,
    ChatTurnCancelledAction,
    ChatTurnsLoadedAction,
    ChatWorkingDirectorySetAction,
    ClientCapabilities,
    InitializeParams,
    ProtocolNotification,
    SessionActiveClientRemovedAction,
    SessionCustomizationRemovedAction,
    SessionMcpServerStopRequestedAction,
    SessionReadyAction,
    SessionTitleChangedAction,
    StateAction,
    TerminalInputAction,
    UnknownAction,
    UnsupportedProtocolVersionErrorData,
)
from agenthost_protocol.types._tags import ACTION_CLASSES
from agenthost_protocol.versions import (
    ACTION_INTRODUCED_IN,
    CAPABILITY_INTRODUCED_IN,
    FEATURE_INTRODUCED_IN,
    IS_CLIENT_DISPATCHABLE,
    NOTIFICATION_INTRODUCED_IN,
    PROTOCOL_VERSION,
    SUPPORTED_PROTOCOL_VERSIONS,
    Feature,
    PeerProfile,
    VersionNegotiationFailed,
    are_compatible,
    compare_protocol_versions,
    filter_envelope_for_version,
    filter_envelopes_for_version,
    filter_notification_for_version,
    is_action_known_to_version,
    is_client_dispatchable,
    is_feature_available,
    is_notification_known_to_version,
    negotiate_protocol_version,
    select_version_from_supported,
)

V = tuple[int, int, int]
small = st.integers(min_value=0, max_value=3)
triples = st.tuples(small, small, small)
versions = triples.map(lambda t: ".".join(map(str, t)))
big_versions = st.tuples(*[st.integers(0, 10**9)] * 3).map(lambda t: ".".join(map(str, t)))
junk = st.sampled_from(
    ["", "0.5", "v0.5.0", "0.5.0-rc.1", "0.5.0\n", "\u0660.5.0", "latest", "^0.5.0", "*"]
)


def union_action_types() -> set[str]:
    """The ``type`` of every class in the ``StateAction`` union."""
    out = set()
    for cls in typing.get_args(StateAction):
        if cls is UnknownAction:
            continue
        default = attrs.fields_dict(cls)["type"].default
        assert isinstance(default, ActionType)
        out.add(default.value)
    return out


# -- constants and maps -------------------------------------------------------------


def test_protocol_version_constants() -> None:
    assert PROTOCOL_VERSION == "0.7.0"
    assert SUPPORTED_PROTOCOL_VERSIONS == ("0.7.0", "0.6.0", "0.5.2", "0.5.1")
    assert SUPPORTED_PROTOCOL_VERSIONS[0] == PROTOCOL_VERSION
    parsed = [parse_version(v) for v in SUPPORTED_PROTOCOL_VERSIONS]
    assert parsed == sorted(set(parsed), reverse=True)  # strictly descending, no duplicates


def test_maps_match_the_bundled_spec_registry() -> None:
    registry = json.loads(
        resources.files("agenthost_protocol").joinpath("_corpus/registry.json").read_text("utf-8")
    )
    assert registry["protocolVersion"] == PROTOCOL_VERSION
    assert tuple(registry["supportedProtocolVersions"]) == SUPPORTED_PROTOCOL_VERSIONS
    assert registry["actionIntroducedIn"] == ACTION_INTRODUCED_IN
    assert registry["notificationIntroducedIn"] == NOTIFICATION_INTRODUCED_IN
    assert registry["isClientDispatchable"] == IS_CLIENT_DISPATCHABLE


def test_action_maps_are_exhaustive_over_the_action_union() -> None:
    types = union_action_types()
    assert len(types) == 85
    assert len(typing.get_args(StateAction)) == 87  # 86 action classes + UnknownAction
    assert set(ACTION_INTRODUCED_IN) == types
    assert set(IS_CLIENT_DISPATCHABLE) == types
    assert {t.value for t in ActionType} == types
    assert {ActionType(t).value for t in ACTION_CLASSES} == types


def test_notification_map_is_exhaustive_over_the_notification_union() -> None:
    methods = pytest.importorskip("agenthost_protocol.methods")
    server_notifications = {
        name: m.params
        for name, m in methods.METHODS.items()
        if m.kind == methods.MessageKind.NOTIFICATION
        and methods.Direction.SERVER_TO_CLIENT in m.directions
        and name != "action"
    }
    assert set(NOTIFICATION_INTRODUCED_IN) == set(server_notifications)
    assert set(server_notifications.values()) == set(typing.get_args(ProtocolNotification))
    assert len(NOTIFICATION_INTRODUCED_IN) == 8
    assert NOTIFICATION_INTRODUCED_IN["root/progress"] == "0.5.0"


def test_map_values() -> None:
    by_version = Counter(ACTION_INTRODUCED_IN.values())
    assert by_version == {  # inventory §2
        "0.1.0": 27, "0.2.0": 8, "0.3.0": 2, "0.4.0": 32, "0.5.0": 4,
        "0.5.1": 3, "0.5.2": 2, "0.6.0": 3, "0.7.0": 4,
    }
    assert sum(IS_CLIENT_DISPATCHABLE.values()) == 38
    dispatchable = Counter(t.split("/")[0] for t, ok in IS_CLIENT_DISPATCHABLE.items() if ok)
    assert dispatchable == {
        "root": 1, "session": 11, "chat": 15, "terminal": 5, "changeset": 1, "annotations": 5,
    }
    assert "session/modelChanged" not in ACTION_INTRODUCED_IN
    assert IS_CLIENT_DISPATCHABLE["changeset/filesReviewChanged"]
    for version in [*ACTION_INTRODUCED_IN.values(), *NOTIFICATION_INTRODUCED_IN.values()]:
        assert compare_protocol_versions(version, PROTOCOL_VERSION) <= 0


def test_feature_table_is_complete() -> None:
    assert set(FEATURE_INTRODUCED_IN) == set(Feature)
    assert FEATURE_INTRODUCED_IN[Feature.CHAT_CHANNELS] == "0.4.0"
    assert FEATURE_INTRODUCED_IN[Feature.MULTIPLE_ACTIVE_CLIENTS] == "0.5.0"
    assert FEATURE_INTRODUCED_IN[Feature.MCP_APPS] == CAPABILITY_INTRODUCED_IN["mcpApps"]
    assert {f.name for f in attrs.fields(ClientCapabilities)} == {"mcp_apps"}


# -- comparison -----------------------------------------------------------------------


@given(big_versions, big_versions)
def test_compare_agrees_with_numeric_tuples(a: str, b: str) -> None:
    ta, tb = (tuple(map(int, x.split("."))) for x in (a, b))
    expected = (ta > tb) - (ta < tb)
    assert compare_protocol_versions(a, b) == expected
    assert compare_protocol_versions(b, a) == -expected  # antisymmetric
    assert compare_protocol_versions(a, a) == 0  # reflexive


@given(versions, versions, versions)
def test_compare_is_transitive(a: str, b: str, c: str) -> None:
    if compare_protocol_versions(a, b) <= 0 and compare_protocol_versions(b, c) <= 0:
        assert compare_protocol_versions(a, c) <= 0


@given(st.lists(big_versions, min_size=1, max_size=8))
def test_compare_is_a_total_order(values: list[str]) -> None:
    import functools

    ordered = sorted(values, key=functools.cmp_to_key(compare_protocol_versions))
    assert [parse_version(v) for v in ordered] == sorted(parse_version(v) for v in values)


def test_compare_examples() -> None:
    assert compare_protocol_versions("0.10.0", "0.9.0") == 1
    assert compare_protocol_versions("0.4.0", "0.5.0") == -1
    assert compare_protocol_versions("1.0.0", "1.0.0") == 0
    # The reference's parseSemver converts each group with Number(): leading zeros are kept out.
    assert compare_protocol_versions("0.07.0", "0.7.0") == 0
    assert compare_protocol_versions("00.010.00", "0.9.0") == 1


@pytest.mark.parametrize(
    "bad", ["0.5", "v0.5.0", "0.5.0-rc.1", "", " 0.5.0", "0.5.0\n", "0.\uff15.0", "0.5.0.0"]
)
def test_compare_rejects_malformed_input(bad: str) -> None:
    with pytest.raises(InvalidVersion) as info:
        compare_protocol_versions(bad, "0.5.0")
    assert isinstance(info.value, LocalProtocolError)
    with pytest.raises(InvalidVersion):
        compare_protocol_versions("0.5.0", bad)
    with pytest.raises(InvalidVersion):
        are_compatible(bad, "0.5.0")


def test_compare_rejects_non_strings() -> None:
    with pytest.raises(InvalidVersion):
        compare_protocol_versions(None, "0.5.0")  # type: ignore[arg-type]
    with pytest.raises(InvalidVersion):
        compare_protocol_versions(["0.5.0"], "0.5.0")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("0.5.0", "0.5.3", True),
        ("0.5.0", "0.4.0", False),
        ("0.5.0", "1.5.0", False),
        ("1.2.0", "1.9.4", True),
        ("1.0.0", "2.0.0", False),
        ("0.0.1", "0.0.2", True),  # same 0.MINOR
    ],
)
def test_are_compatible_examples(a: str, b: str, expected: bool) -> None:
    assert are_compatible(a, b) is expected


@given(triples, triples)
def test_are_compatible_laws(a: V, b: V) -> None:
    sa, sb = (".".join(map(str, t)) for t in (a, b))
    expected = a[0] == b[0] and (a[0] >= 1 or a[1] == b[1])
    assert are_compatible(sa, sb) is expected
    assert are_compatible(sb, sa) is expected
    assert are_compatible(sa, sa)


# -- knowing actions and notifications -----------------------------------------------


@pytest.mark.parametrize("version", [*SUPPORTED_PROTOCOL_VERSIONS, "0.1.0", "0.2.0", "9.0.0"])
def test_action_knowledge_follows_the_map(version: str) -> None:
    for action_type, since in ACTION_INTRODUCED_IN.items():
        expected = compare_protocol_versions(since, version) <= 0
        assert is_action_known_to_version(action_type, version) is expected
        assert is_action_known_to_version(ActionType(action_type), version) is expected


def test_action_knowledge_examples() -> None:
    assert is_action_known_to_version("session/titleChanged", "0.3.0")
    assert not is_action_known_to_version("chat/turnStarted", "0.3.0")
    assert is_action_known_to_version("chat/turnStarted", "0.4.0")
    assert not is_action_known_to_version("session/activeClientSet", "0.4.0")
    assert is_action_known_to_version("session/activeClientSet", "0.5.0")
    assert not is_action_known_to_version("annotations/set", "0.3.0")
    assert is_action_known_to_version(SessionReadyAction(), "0.3.0")
    assert is_action_known_to_version(SessionTitleChangedAction(title="t"), "0.1.0")


def test_unknown_actions_are_unknown_to_every_version() -> None:
    raw = {"type": "session/ready"}
    assert not is_action_known_to_version(UnknownAction(type="session/ready", raw=raw), "9.9.9")
    assert not is_action_known_to_version(UnknownAction(type="x/y", raw={}), "9.9.9")
    assert not is_action_known_to_version("session/turnStarted", "0.3.0")  # gone since 0.4.0
    assert not is_action_known_to_version("x/y", "9.9.9")
    assert not is_action_known_to_version(object(), "9.9.9")  # type: ignore[arg-type]
    assert not is_client_dispatchable(UnknownAction(type="session/titleChanged", raw={}))
    assert not is_client_dispatchable("x/y")


def test_malformed_versions_raise_even_when_the_answer_is_no() -> None:
    with pytest.raises(InvalidVersion):
        is_action_known_to_version("x/y", "0.5")
    with pytest.raises(InvalidVersion):
        is_action_known_to_version(UnknownAction(type="x", raw={}), "0.5")
    with pytest.raises(InvalidVersion):
        is_notification_known_to_version("nope", "0.5")
    with pytest.raises(InvalidVersion):
        is_notification_known_to_version("action", "0.5")


def test_client_dispatchable() -> None:
    for action_type, dispatchable in IS_CLIENT_DISPATCHABLE.items():
        assert is_client_dispatchable(action_type) is dispatchable
        assert is_client_dispatchable(ActionType(action_type)) is dispatchable
    assert is_client_dispatchable(TerminalInputAction(data="ls\n"))
    assert not is_client_dispatchable(SessionReadyAction())


@pytest.mark.parametrize("version", ["0.1.0", "0.2.0", *SUPPORTED_PROTOCOL_VERSIONS])
def test_notification_knowledge_follows_the_map(version: str) -> None:
    for method, since in NOTIFICATION_INTRODUCED_IN.items():
        expected = compare_protocol_versions(since, version) <= 0
        assert is_notification_known_to_version(method, version) is expected
    assert is_notification_known_to_version("action", version)
    for other in ("dispatchAction", "unsubscribe", "root/future", "initialize"):
        assert not is_notification_known_to_version(other, version)


def test_notification_examples() -> None:
    assert not is_notification_known_to_version("otlp/exportLogs", "0.1.0")
    assert is_notification_known_to_version("otlp/exportLogs", "0.2.0")
    assert is_notification_known_to_version("root/sessionAdded", "0.1.0")
    assert is_notification_known_to_version("root/progress", "0.5.1")
    assert not is_notification_known_to_version("root/progress", "0.4.0")


# -- filtering --------------------------------------------------------------------------


def envelope(action: StateAction, seq: int = 1) -> ActionEnvelope:
    return ActionEnvelope(channel="ahp-session:/s", action=action, server_seq=seq)


def test_filter_envelope() -> None:
    old = envelope(SessionTitleChangedAction(title="t"))
    unknown = envelope(UnknownAction(type="session/futureThing", raw={"type": "x"}))
    assert filter_envelope_for_version(old, "0.3.0") is old
    assert filter_envelope_for_version(unknown, "9.9.9") is None
    with pytest.raises(InvalidVersion):
        filter_envelope_for_version(old, "bad")


ACTION_POOL: list[StateAction] = [
    SessionReadyAction(),  # 0.1.0
    ChangesetClearedAction(),  # 0.2.0
    SessionCustomizationRemovedAction(id="c"),  # 0.2.0
    ChangesetOperationStatusChangedAction(operation_id="o", status="idle"),  # 0.3.0
    ChatTruncatedAction(),  # 0.4.0
    ChatTurnCancelledAction(turn_id="t", duration=0),  # 0.4.0
    ChatDraftChangedAction(),  # 0.5.0
    ChatTurnsLoadedAction(turns=()),  # 0.5.1
    SessionMcpServerStopRequestedAction(id="m"),  # 0.5.2
    ChangesetFilesReviewChangedAction(files=(), reviewed=True),  # 0.6.0
    ChatWorkingDirectorySetAction(directory="file:///w"),  # 0.7.0
    SessionActiveClientRemovedAction(client_id="c"),  # 0.5.0
    UnknownAction(type="session/ready", raw={"type": "session/ready"}),  # never
]


@given(st.lists(st.sampled_from(ACTION_POOL), max_size=20), versions)
def test_filter_envelopes_keeps_exactly_the_known_ones_in_order(
    actions: list[StateAction], version: str
) -> None:
    envelopes = [envelope(a, i) for i, a in enumerate(actions)]
    kept = filter_envelopes_for_version(envelopes, version)
    expected = tuple(
        e
        for e in envelopes
        if not isinstance(e.action, UnknownAction)
        and parse_version(ACTION_INTRODUCED_IN[e.action.type.value]) <= parse_version(version)
    )
    assert kept == expected
    assert [e.server_seq for e in kept] == sorted(e.server_seq for e in kept)
    for e in envelopes:
        single = filter_envelope_for_version(e, version)
        assert single is (e if e in expected else None)


def test_filter_envelopes_mixed() -> None:
    title = envelope(SessionTitleChangedAction(title="a"), 1)
    ready = envelope(SessionReadyAction(), 2)
    unknown = envelope(UnknownAction(type="x/y", raw={}), 3)
    assert filter_envelopes_for_version([title, unknown, ready], "0.3.0") == (title, ready)
    assert filter_envelopes_for_version(iter([unknown]), "0.5.0") == ()
    with pytest.raises(InvalidVersion):
        filter_envelopes_for_version([], "nope")


def test_filter_notification() -> None:
    title = envelope(SessionTitleChangedAction(title="a"))
    unknown = envelope(UnknownAction(type="x/y", raw={}))
    params = object()
    assert filter_notification_for_version("action", title, "0.3.0") is title
    assert filter_notification_for_version("action", unknown, "0.5.0") is None
    assert filter_notification_for_version("otlp/exportLogs", params, "0.2.0") is params
    assert filter_notification_for_version("otlp/exportLogs", params, "0.1.0") is None
    assert filter_notification_for_version("root/progress", params, "0.5.0") is params
    assert filter_notification_for_version("root/progress", params, "0.4.0") is None
    assert filter_notification_for_version("root/future", params, "0.7.0") is None
    raw_chat = {"channel": "ahp-chat:/c", "action": {"type": "chat/delta"}, "serverSeq": 1}
    assert filter_notification_for_version("action", raw_chat, "0.4.0") is raw_chat
    assert filter_notification_for_version("action", raw_chat, "0.3.0") is None
    assert filter_notification_for_version("action", {"action": "nope"}, "0.5.0") is None
    assert filter_notification_for_version("action", None, "0.5.0") is None
    with pytest.raises(InvalidVersion):
        filter_notification_for_version("action", None, "0.5")


# -- negotiation ------------------------------------------------------------------------


def test_negotiation_examples() -> None:
    assert negotiate_protocol_version(["0.8.0", "0.7.0", "0.6.0"]) == "0.7.0"
    assert negotiate_protocol_version(("0.5.1", "0.7.0")) == "0.5.1"  # the client's order wins
    assert negotiate_protocol_version(["garbage", "0.6.0"]) == "0.6.0"
    assert negotiate_protocol_version(["0.07.0"]) == "0.07.0"  # leading zeros: equal to 0.7.0
    with pytest.raises(VersionNegotiationFailed):
        negotiate_protocol_version(["0.5.0"])  # the unreleased pre-release is not spoken
    assert negotiate_protocol_version(["0.3.7"], ["^0.3.0"]) == "0.3.7"
    assert negotiate_protocol_version(["0.2.0", "0.1.0"], [">=0.1.0 <0.3.0"]) == "0.2.0"
    assert negotiate_protocol_version(iter(["0.5.2"])) == "0.5.2"


def test_negotiation_failure_carries_code_and_data() -> None:
    with pytest.raises(VersionNegotiationFailed) as info:
        negotiate_protocol_version(["0.2.0", "0.1.0"])
    error = info.value
    assert isinstance(error, UnsupportedProtocolVersion)
    assert isinstance(error, RemoteProtocolError)
    assert error.code == -32005
    assert error.data == {"supportedVersions": ["0.7.0", "0.6.0", "0.5.2", "0.5.1"]}
    assert error.error_data == UnsupportedProtocolVersionErrorData(
        supported_versions=("0.7.0", "0.6.0", "0.5.2", "0.5.1")
    )
    assert error.offered == ("0.2.0", "0.1.0")
    assert error.to_error() == {
        "code": -32005,
        "message": str(error),
        "data": {"supportedVersions": ["0.7.0", "0.6.0", "0.5.2", "0.5.1"]},
    }
    assert "'0.2.0'" in str(error)
    clone = pickle.loads(pickle.dumps(error))
    assert type(clone) is VersionNegotiationFailed
    assert clone.data == error.data
    assert str(clone) == str(error)


def test_negotiation_failure_keeps_ranges_and_abbreviates_offers() -> None:
    with pytest.raises(VersionNegotiationFailed) as info:
        negotiate_protocol_version([f"9.9.{i}" for i in range(100)], [">=0.1.0 <0.3.0", "^0.5.0"])
    assert info.value.data == {"supportedVersions": [">=0.1.0 <0.3.0", "^0.5.0"]}
    assert "92 more" in str(info.value)
    assert len(str(info.value)) < 300
    with pytest.raises(VersionNegotiationFailed):
        negotiate_protocol_version([])
    with pytest.raises(VersionNegotiationFailed):
        negotiate_protocol_version(["x" * 10_000, 5])  # type: ignore[list-item]


def test_negotiation_rejects_caller_mistakes() -> None:
    with pytest.raises(LocalProtocolError):
        negotiate_protocol_version("0.5.0")
    with pytest.raises(LocalProtocolError):
        negotiate_protocol_version(["0.5.0"], "0.5.0")
    with pytest.raises(LocalProtocolError):
        negotiate_protocol_version(["0.5.0"], [])
    with pytest.raises(InvalidVersion):
        negotiate_protocol_version(["0.5.0"], ["0.5.0", "not a version"])


@given(st.lists(st.one_of(versions, junk), max_size=8), st.lists(versions, min_size=1, max_size=5))
def test_negotiation_picks_the_first_offered_supported_entry(
    offered: list[str], supported: list[str]
) -> None:
    common = [v for v in offered if v in supported]
    if not common:
        with pytest.raises(VersionNegotiationFailed) as info:
            negotiate_protocol_version(offered, supported)
        assert info.value.data == {"supportedVersions": supported}
        assert info.value.code == -32005
        return
    chosen = negotiate_protocol_version(offered, supported)
    assert chosen == common[0]
    assert chosen in offered
    assert chosen in supported


@given(st.lists(versions, min_size=1, max_size=6, unique=True), st.randoms(use_true_random=False))
def test_negotiation_honours_every_client_order(offered: list[str], rnd: typing.Any) -> None:
    supported = SUPPORTED_PROTOCOL_VERSIONS
    shuffled = list(offered)
    rnd.shuffle(shuffled)
    for order in (offered, shuffled):
        acceptable = [v for v in order if v in supported]
        if acceptable:
            assert negotiate_protocol_version(order, supported) == acceptable[0]
        else:
            with pytest.raises(VersionNegotiationFailed):
                negotiate_protocol_version(order, supported)


range_specs = st.one_of(
    versions,
    versions.map(lambda v: f"^{v}"),
    versions.map(lambda v: f"~{v}"),
    st.tuples(versions, versions).map(lambda p: f">={p[0]} <{p[1]}"),
)


@given(
    st.lists(st.one_of(versions, junk), max_size=8), st.lists(range_specs, min_size=1, max_size=4)
)
def test_negotiation_with_ranges(offered: list[str], supported: list[str]) -> None:
    def acceptable(v: str) -> bool:
        try:
            parse_version(v)
        except InvalidVersion:
            return False
        return any(satisfies(v, spec) for spec in supported)

    common = [v for v in offered if acceptable(v)]
    if common:
        assert negotiate_protocol_version(offered, supported) == common[0]
    else:
        with pytest.raises(VersionNegotiationFailed):
            negotiate_protocol_version(offered, supported)


def test_select_version_from_supported() -> None:
    assert select_version_from_supported(["0.6.0"]) == "0.6.0"
    assert select_version_from_supported([">=0.1.0 <0.6.0"]) == "0.5.2"
    assert select_version_from_supported(["^0.5.1", "junk"]) == "0.5.2"
    assert select_version_from_supported(["junk", "0.5.0"]) is None
    data = UnsupportedProtocolVersionErrorData(supported_versions=("^0.5.0", "0.6.0"))
    assert select_version_from_supported(data) == "0.6.0"
    old = UnsupportedProtocolVersionErrorData(supported_versions=("^0.2.0", "0.3.0"))
    assert select_version_from_supported(old) is None
    assert select_version_from_supported(old, ["0.2.9", "0.3.0"]) == "0.2.9"
    with pytest.raises(InvalidVersion):
        select_version_from_supported(["*"], ["bad"])


@given(st.lists(range_specs, max_size=4), st.lists(versions, min_size=1, max_size=5))
def test_select_then_negotiate_round_trip(host: list[str], client: list[str]) -> None:
    # A client retrying with the selected version always gets it accepted.
    chosen = select_version_from_supported(host, client)
    if chosen is None:
        if host:
            with pytest.raises(VersionNegotiationFailed):
                negotiate_protocol_version(client, host)
    else:
        assert negotiate_protocol_version([chosen], host) == chosen
        assert negotiate_protocol_version(client, host) == chosen


# -- features and peer profiles ------------------------------------------------------------


def test_features_by_version() -> None:
    assert not is_feature_available(Feature.CHAT_CHANNELS, "0.3.0")
    assert is_feature_available(Feature.CHAT_CHANNELS, "0.4.0")
    assert is_feature_available(Feature.ANNOTATIONS, "0.4.0")
    assert not is_feature_available(Feature.MULTIPLE_ACTIVE_CLIENTS, "0.4.0")
    assert is_feature_available(Feature.MULTIPLE_ACTIVE_CLIENTS, "0.5.0")
    assert not is_feature_available(Feature.TELEMETRY, "0.1.0")
    assert is_feature_available(Feature.TELEMETRY, "0.3.0")
    for feature in Feature:
        if feature is not Feature.MCP_APPS:
            assert is_feature_available(feature, PROTOCOL_VERSION)


def test_mcp_apps_needs_the_capability() -> None:
    declared = ClientCapabilities(mcp_apps={})
    assert not is_feature_available(Feature.MCP_APPS, "0.5.0")
    assert not is_feature_available(Feature.MCP_APPS, "0.5.0", ClientCapabilities())
    assert is_feature_available(Feature.MCP_APPS, "0.5.0", declared)
    assert is_feature_available(Feature.MCP_APPS, "0.3.0", declared)
    assert not is_feature_available(Feature.MCP_APPS, "0.2.0", declared)


def test_peer_profile() -> None:
    params = InitializeParams(
        protocol_versions=("0.8.0", "0.5.1"),
        client_id="c",
        capabilities=ClientCapabilities(mcp_apps={}),
    )
    peer = PeerProfile.negotiate(params)
    assert peer == PeerProfile("0.5.1", ClientCapabilities(mcp_apps={}))
    assert peer.knows_action("chat/turnStarted")
    assert peer.knows_action("chat/turnsLoaded")  # 0.5.1
    assert not peer.knows_action("session/mcpServerStartRequested")  # 0.5.2
    assert not peer.knows_action("chat/workingDirectorySet")  # 0.7.0
    assert peer.knows_notification("otlp/exportTraces")
    assert peer.knows_notification("root/progress")
    assert peer.may_dispatch("chat/turnStarted")
    assert not peer.may_dispatch("chat/delta")  # server-only
    assert not peer.may_dispatch("changeset/filesReviewChanged")  # unknown to 0.5.1
    assert peer.supports(Feature.MCP_APPS)
    assert peer.supports(Feature.CHAT_CHANNELS)
    assert peer.supports(Feature.MULTIPLE_ACTIVE_CLIENTS)
    title = envelope(SessionTitleChangedAction(title="t"))
    unknown = envelope(UnknownAction(type="x/y", raw={}))
    newer = envelope(ChatWorkingDirectorySetAction(directory="file:///w"))
    assert peer.filter_envelope(title) is title
    assert peer.filter_envelope(unknown) is None
    assert peer.filter_envelope(newer) is None
    assert peer.filter_envelopes([unknown, title, newer]) == (title,)
    assert peer.filter_notification("action", unknown) is None
    assert peer.filter_notification("root/sessionRemoved", 1) == 1

    plain = PeerProfile.negotiate(InitializeParams(protocol_versions=("0.6.0",), client_id="c"))
    assert plain.capabilities is None
    assert not plain.supports(Feature.MCP_APPS)
    assert plain.supports(Feature.ANNOTATIONS)
    assert plain.may_dispatch("changeset/filesReviewChanged")

    with pytest.raises(VersionNegotiationFailed):
        PeerProfile.negotiate(InitializeParams(protocol_versions=("0.5.0",), client_id="c"))
    with pytest.raises(InvalidVersion):
        PeerProfile("latest")
    assert PeerProfile("0.5.0", None).knows_action(SessionReadyAction())


def test_envelope_origin_does_not_matter() -> None:
    with_origin = ActionEnvelope(
        channel="ahp-session:/s",
        action=SessionTitleChangedAction(title="t"),
        server_seq=3,
        origin=ActionOrigin(client_id="c", client_seq=1),
    )
    assert filter_envelope_for_version(with_origin, "0.3.0") is with_origin


def test_registry_block_is_what_the_tool_writes_from_the_bundled_registry() -> None:
    import importlib.util
    from pathlib import Path

    tool_path = Path(__file__).resolve().parent.parent / "tools" / "gen_registry.py"
    spec = importlib.util.spec_from_file_location("gen_registry", tool_path)
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert tool.main(["--check"]) == 0
    source = tool.VERSIONS.read_text(encoding="utf-8")
    stale = source.replace('"chat/delta": "0.4.0"', '"chat/delta": "0.3.0"')
    registry = json.loads((tool.BUNDLED_SPEC / "registry.json").read_text(encoding="utf-8"))
    assert tool.updated_source(stale, registry) == source
