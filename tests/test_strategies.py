"""Sanity of ``agenthost_protocol.testing.strategies``: right classes, valid wire values,
every variant reachable (unknown ones included), consistent channels, good shrinking."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import attrs
import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from agenthost_protocol import types as t
from agenthost_protocol.channels import ChannelKind, channel_kind
from agenthost_protocol.testing import strategies as ahst
from agenthost_protocol.types._tags import ACTION_CLASSES, TAGGED_UNIONS
from agenthost_protocol.types._text import TextBuffer

pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")

EXPORTS = {name: getattr(t, name) for name in t.__all__}
CLASSES = {n: o for n, o in EXPORTS.items() if isinstance(o, type) and attrs.has(o)}
UNIONS = {n: o for n, o in EXPORTS.items() if get_origin(o) in (Union, types.UnionType)}
UNKNOWN = {
    unknown: (key, {getattr(tag, "value", tag) for tag in tags})
    for key, tags, unknown in TAGGED_UNIONS.values()
    if unknown is not None
}
UNKNOWN[t.UnknownAction] = ("type", {getattr(tag, "value", tag) for tag in ACTION_CLASSES})
STATES = {
    ChannelKind.ROOT: t.RootState,
    ChannelKind.SESSION: t.SessionState,
    ChannelKind.CHAT: t.ChatState,
    ChannelKind.TERMINAL: t.TerminalState,
    ChannelKind.CHANGESET: t.ChangesetState,
    ChannelKind.ANNOTATIONS: t.AnnotationsState,
    ChannelKind.RESOURCE_WATCH: t.ResourceWatchState,
}
ACTION_UNIONS = {
    ChannelKind.ROOT: t.RootAction,
    ChannelKind.SESSION: t.SessionAction,
    ChannelKind.CHAT: t.ChatAction,
    ChannelKind.TERMINAL: t.TerminalAction,
    ChannelKind.CHANGESET: t.ChangesetAction,
    ChannelKind.ANNOTATIONS: t.AnnotationsAction,
    ChannelKind.RESOURCE_WATCH: t.ResourceWatchAction,
}
FEW = settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
SEARCH = settings(
    max_examples=5000,
    database=None,
    phases=[Phase.generate],
    suppress_health_check=list(HealthCheck),
)


def reachable(strategy: st.SearchStrategy[Any], condition: Callable[[Any], bool]) -> Any:
    return find(strategy, condition, settings=SEARCH)


def minimal(strategy: st.SearchStrategy[Any], condition: Callable[[Any], bool]) -> Any:
    return find(
        strategy, condition,
        settings=settings(
            max_examples=5000,
            database=None,
            phases=[Phase.generate, Phase.shrink],  # not explain: slow on big values
            suppress_health_check=list(HealthCheck),
        ),
    )


def check_json(value: Any) -> None:
    """A JSON value as ``json`` produces it: no NaN/inf, int64 ints, no lone surrogates."""
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, int):
        assert -(2**63) <= value < 2**63
    elif isinstance(value, float):
        assert math.isfinite(value)
    elif isinstance(value, str):
        value.encode("utf-8")  # raises on lone surrogates
    elif isinstance(value, list):
        for v in value:
            check_json(v)
    else:
        assert isinstance(value, dict)
        for k, v in value.items():
            assert isinstance(k, str)
            check_json(k)
            check_json(v)


def walk(obj: Any) -> Any:
    """Every value nested in ``obj`` (attrs instances, tuples, mappings), ``obj`` included."""
    yield obj
    if attrs.has(type(obj)):
        for a in attrs.fields(type(obj)):
            yield from walk(getattr(obj, a.name))
    elif isinstance(obj, (tuple, list)):
        for v in obj:
            yield from walk(v)
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from walk(v)


# -- every type ---------------------------------------------------------------


def test_the_model_is_covered() -> None:
    assert len(CLASSES) >= 280
    assert len(UNIONS) >= 25
    assert len(UNKNOWN) == 19  # the open state unions of inventory §5.3 but StateAction


@pytest.mark.parametrize("cls", list(CLASSES.values()), ids=list(CLASSES))
@FEW
@given(data=st.data())
def test_classes_generate_their_instances(cls: type, data: st.DataObject) -> None:
    value = data.draw(ahst.from_type(cls))
    assert type(value) is cls
    for inner in walk(value):
        if isinstance(inner, (int, float, str)) and not isinstance(inner, bool):
            check_json(inner)


@pytest.mark.parametrize("alias", list(UNIONS.values()), ids=list(UNIONS))
@FEW
@given(data=st.data())
def test_union_aliases_generate_their_members(alias: Any, data: st.DataObject) -> None:
    value = data.draw(ahst.from_type(alias))
    members = tuple(get_origin(m) or m for m in get_args(alias))
    assert isinstance(value, members)


def reaches_all(
    strategy: st.SearchStrategy[Any], wanted: set[Any], key: Callable[[Any], Any]
) -> None:
    """Draw from ``strategy`` until ``key`` of the draws covers ``wanted``."""
    seen: set[Any] = set()

    def covered(value: Any) -> bool:
        seen.add(key(value))
        return seen >= wanted

    try:
        reachable(strategy, covered)
    except NoSuchExample:
        raise AssertionError(f"never drawn: {wanted - seen}") from None


@pytest.mark.parametrize("alias", list(UNIONS.values()), ids=list(UNIONS))
def test_every_member_of_every_union_is_reachable(alias: Any) -> None:
    reaches_all(ahst.from_type(alias), {get_origin(m) or m for m in get_args(alias)}, type)


def test_both_kinds_of_number_question_are_reachable() -> None:
    for kind in (t.ChatInputQuestionKind.NUMBER, t.ChatInputQuestionKind.INTEGER):
        reachable(ahst.from_type(t.ChatInputQuestion), lambda q, k=kind: q.kind == k)  # type: ignore[misc]


# -- unknown variants and open enums -----------------------------------------------


@pytest.mark.parametrize("cls", list(UNKNOWN), ids=[c.__name__ for c in UNKNOWN])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_unknown_variants_hold_an_unknown_tag_in_raw(cls: type, data: st.DataObject) -> None:
    key, known = UNKNOWN[cls]
    value = data.draw(ahst.from_type(cls))
    tag = getattr(value, key)
    assert isinstance(tag, str)
    assert tag not in known
    assert value.raw[key] == tag
    check_json(dict(value.raw))


def test_open_enums_are_mostly_members_sometimes_unknown() -> None:
    strategy = ahst.from_type(t.TurnState | str)
    reachable(strategy, lambda v: isinstance(v, t.TurnState))
    unknown = reachable(strategy, lambda v: not isinstance(v, t.TurnState))
    assert unknown not in {m.value for m in t.TurnState}
    assert minimal(strategy, lambda v: True) is t.TurnState.COMPLETE


@settings(max_examples=200, deadline=None)
@given(ahst.from_type(t.SessionStatus))
def test_session_status_fits_in_32_bits(status: t.SessionStatus) -> None:
    assert isinstance(status, t.SessionStatus)
    assert 0 <= status <= 2**32 - 1


def test_session_status_covers_known_combinations_and_unknown_bits() -> None:
    strategy = ahst.from_type(t.SessionStatus)
    reachable(strategy, lambda s: s == t.SessionStatus.INPUT_NEEDED | t.SessionStatus.IS_ARCHIVED)
    reachable(strategy, lambda s: s > 127 and (s & t.ACTIVITY_MASK) == t.SessionStatus.IDLE)
    reachable(strategy, lambda s: (s & t.ACTIVITY_MASK) not in (0, 1, 2, 8, 24))


# -- channels -------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(ChannelKind), ids=[k.value for k in ChannelKind])
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_channel_uris_are_of_their_kind(kind: ChannelKind, data: st.DataObject) -> None:
    assert channel_kind(data.draw(ahst.channel_uris(kind))) is kind


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(ahst.snapshots(), ahst.from_type(t.Snapshot)))
def test_snapshot_state_matches_its_resource(snapshot: t.Snapshot) -> None:
    kind = channel_kind(snapshot.resource)
    assert kind is not None
    assert type(snapshot.state) is STATES[kind]


@pytest.mark.parametrize("kind", list(STATES), ids=[k.value for k in STATES])
def test_snapshots_of_every_kind(kind: ChannelKind) -> None:
    reachable(ahst.from_type(t.Snapshot), lambda s: channel_kind(s.resource) is kind)
    snapshot = reachable(ahst.snapshots(kind), lambda s: True)
    assert type(snapshot.state) is STATES[kind]


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(ahst.envelopes(), ahst.from_type(t.ActionEnvelope)))
def test_envelope_channel_matches_its_action(envelope: t.ActionEnvelope) -> None:
    kind = channel_kind(envelope.channel)
    assert kind in ACTION_UNIONS
    assert isinstance(envelope.action, get_args(ACTION_UNIONS[kind]))
    if isinstance(envelope.action, t.UnknownAction):
        assert envelope.action.type.startswith(f"{kind.value}/")


@pytest.mark.parametrize("kind", list(ACTION_UNIONS), ids=[k.value for k in ACTION_UNIONS])
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_actions_of_one_channel(kind: ChannelKind, data: st.DataObject) -> None:
    action = data.draw(ahst.actions(channel=kind.value))
    assert isinstance(action, get_args(ACTION_UNIONS[kind]))
    if isinstance(action, t.UnknownAction):
        assert action.type.startswith(f"{kind.value}/")
        assert action.type not in UNKNOWN[t.UnknownAction][1]
    envelope = data.draw(ahst.envelopes(kind))
    assert channel_kind(envelope.channel) is kind


def test_actions_include_unknown_ones_unless_told_not_to() -> None:
    reachable(ahst.actions(), lambda a: isinstance(a, t.UnknownAction))
    reachable(ahst.actions("chat"), lambda a: isinstance(a, t.UnknownAction))
    with pytest.raises(NoSuchExample):
        find(ahst.actions(unknown=False), lambda a: isinstance(a, t.UnknownAction),
             settings=settings(max_examples=300, database=None, phases=[Phase.generate]))


def test_bad_channel_arguments() -> None:
    with pytest.raises(ValueError, match="unknown channel kind"):
        ahst.actions(channel="nope")
    with pytest.raises(ValueError, match="has no actions"):
        ahst.envelopes(channel=ChannelKind.OTLP)
    with pytest.raises(ValueError, match="has no state"):
        ahst.snapshots(channel="mcp")
    with pytest.raises(TypeError, match="not a channel state"):
        ahst.states(t.Turn)
    with pytest.raises(ValueError, match="max_depth"):
        ahst.from_type(t.Turn, max_depth=-1)
    with pytest.raises(TypeError, match="no strategy"):
        ahst.from_type(complex)


@pytest.mark.parametrize("cls", list(STATES.values()), ids=[c.__name__ for c in STATES.values()])
@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_states(cls: type, data: st.DataObject) -> None:
    assert type(data.draw(ahst.states(cls))) is cls
    assert isinstance(data.draw(ahst.states()), tuple(STATES.values()))


# -- field forms ------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(ahst.json_values())
def test_json_values_are_json(value: Any) -> None:
    check_json(value)
    assert json.loads(json.dumps(value, allow_nan=False)) == value


def test_json_values_cover_every_json_type() -> None:
    kinds = {type(None), bool, int, float, str, list, dict}
    reaches_all(ahst.json_values(), kinds, type)
    with pytest.raises(NoSuchExample):
        find(ahst.json_values(allow_null=False), lambda v: v is None,
             settings=settings(max_examples=300, database=None, phases=[Phase.generate]))


def test_float_fields_get_integers_and_fractions() -> None:
    strategy = ahst.from_type(float)
    reachable(strategy, lambda v: type(v) is int)
    reachable(strategy, lambda v: type(v) is float and not v.is_integer())


URI_RE = re.compile(r"^[a-z][a-z0-9+.-]*:")


@settings(max_examples=30, deadline=None)
@given(ahst.from_type(t.Icon), ahst.from_type(t.ContentRef))
def test_uri_fields_get_uris(icon: t.Icon, ref: t.ContentRef) -> None:
    assert URI_RE.match(icon.src)
    assert URI_RE.match(ref.uri)
    assert icon.src.isascii()


@settings(max_examples=10, deadline=None)
@given(ahst.from_type(t.PingParams))
def test_defaulted_channels_keep_their_default(params: t.PingParams) -> None:
    assert params.channel == "ahp-root://"


@settings(max_examples=20, deadline=None)
@given(ahst.from_type(t.MarkdownResponsePart), ahst.from_type(t.ToolCallStreamingState))
def test_streamed_text_is_passed_as_str(
    part: t.MarkdownResponsePart, state: t.ToolCallStreamingState
) -> None:
    assert isinstance(part.content, str)
    assert isinstance(attrs.fields(type(part))._content, attrs.Attribute)
    assert isinstance(part._content, TextBuffer)
    assert state.partial_input is None or isinstance(state.partial_input, str)


def test_multi_member_literals_take_every_member() -> None:
    strategy = ahst.from_type(t.ChatInputAnswered)
    for state in (t.ChatInputAnswerState.DRAFT, t.ChatInputAnswerState.SUBMITTED):
        reachable(strategy, lambda a, s=state: a.state == s)  # type: ignore[misc]


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    ahst.from_type(t.JsonRpcRequest[t.InitializeParams]),
    ahst.from_type(t.JsonRpcRequest),
    ahst.from_type(t.JsonRpcSuccessResponse[Any]),
)
def test_generic_messages(
    typed: t.JsonRpcRequest[t.InitializeParams],
    raw: t.JsonRpcRequest[Any],
    response: t.JsonRpcSuccessResponse[Any],
) -> None:
    assert typed.params is None or isinstance(typed.params, t.InitializeParams)
    check_json(raw.params)
    check_json(response.result)


# -- bounds and shrinking -----------------------------------------------------------


def _schema_depth(schema: t.ConfigPropertySchema | None) -> int:
    if schema is None:
        return 0
    children = [schema.items, schema.additional_properties, *(schema.properties or {}).values()]
    return 1 + max(_schema_depth(c) for c in children)


@pytest.mark.parametrize("max_depth", [0, 1, 3])
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_recursion_is_bounded(max_depth: int, data: st.DataObject) -> None:
    schema = data.draw(ahst.from_type(t.ConfigPropertySchema, max_depth=max_depth))
    assert _schema_depth(schema) <= max_depth + 1


def test_depth_is_reached() -> None:
    reachable(ahst.from_type(t.ConfigPropertySchema), lambda s: _schema_depth(s) >= 3)


def test_shrinks_to_absent_optionals_and_empty_collections() -> None:
    state = minimal(ahst.from_type(t.ChatState), lambda s: len(s.turns) > 0)
    assert len(state.turns) == 1
    for obj in (state, state.turns[0]):
        for a in attrs.fields(type(obj)):
            if a.default is None:
                assert getattr(obj, a.name) is None, a.name
    assert state.turns[0].response_parts == ()


def test_unknown_variants_shrink_to_their_tag() -> None:
    part = minimal(ahst.from_type(t.ResponsePart), lambda p: isinstance(p, t.UnknownResponsePart))
    assert part.raw == {"kind": part.kind}
    action = minimal(ahst.actions(), lambda a: isinstance(a, t.UnknownAction))
    assert action.raw == {"type": action.type}
    assert "/" in action.type


def test_unions_shrink_to_their_first_variant() -> None:
    assert type(minimal(ahst.from_type(t.ResponsePart), lambda p: True)) is t.MarkdownResponsePart
    assert minimal(ahst.from_type(t.SessionStatus), lambda s: True) == t.SessionStatus.IDLE


# -- packaging -----------------------------------------------------------------


def test_strategies_are_cached() -> None:
    assert ahst.from_type(t.ChatState) is ahst.from_type(t.ChatState)


def test_wire_values_are_json() -> None:
    value = reachable(ahst.wire_values(t.ChatState), lambda v: len(v["turns"]) > 0)
    check_json(value)


def test_register_type_strategies() -> None:
    ahst.register_type_strategies()
    union: Any = t.ResponsePart
    part = reachable(st.from_type(union), lambda p: isinstance(p, t.UnknownResponsePart))
    assert part.raw["kind"] == part.kind


def test_the_library_does_not_import_hypothesis() -> None:
    code = (
        "import sys, agenthost_protocol, agenthost_protocol.types, agenthost_protocol.wire, "
        "agenthost_protocol.testing; assert 'hypothesis' not in sys.modules, 'imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_documented_example_runs() -> None:
    doc = (Path(__file__).parent.parent / "docs" / "testing.md").read_text()
    code = re.search(r"```python\n(.*?)```", doc, re.S)
    assert code is not None
    namespace: dict[str, Any] = {}
    exec(compile(code.group(1), "docs/testing.md", "exec"), namespace)
    namespace["test_chat_state_round_trips"]()
    namespace["test_my_client_applies_chat_actions"]()
