"""The frozen wire shape and the bidirectional compatibility check (`compat`)."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import attrs
import pytest
from attrs import frozen

from agenthost_protocol import compat
from agenthost_protocol.compat import (
    FORMAT,
    Incompatibility,
    IncompatibilityKind,
    WireShape,
    check_wire_compatibility,
    compare_wire_shapes,
    describe_wire_shape,
    dumps_wire_shape,
    frozen_versions,
    load_wire_shape,
)
from agenthost_protocol.semver import InvalidVersion
from agenthost_protocol.types import ActionType
from agenthost_protocol.types._tags import ACTION_CLASSES
from agenthost_protocol.versions import PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS

ROOT = Path(__file__).resolve().parent.parent
TYPE = "SessionTitleChangedAction"


@pytest.fixture(scope="module")
def live() -> WireShape:
    return describe_wire_shape()


@pytest.fixture(scope="module")
def snapshot() -> WireShape:
    return load_wire_shape(PROTOCOL_VERSION)


def namespace() -> dict[str, object]:
    import agenthost_protocol.types as types_package

    return {name: getattr(types_package, name) for name in types_package.__all__}


def problems_text(problems: list[Incompatibility]) -> str:
    return "\n".join(map(str, problems))


# -- the bundled snapshots ---------------------------------------------------------


def test_the_current_version_is_frozen() -> None:
    assert PROTOCOL_VERSION in frozen_versions()


def test_only_supported_versions_keep_a_snapshot() -> None:
    # When a version stops being supported, its snapshot is removed.
    assert set(frozen_versions()) <= set(SUPPORTED_PROTOCOL_VERSIONS)


@pytest.mark.parametrize("version", frozen_versions())
def test_snapshots_are_canonical(version: str) -> None:
    shape = load_wire_shape(version)
    assert shape["format"] == FORMAT
    assert shape["protocolVersion"] == version
    text = (ROOT / "agenthost_protocol" / "_wire_shapes" / f"{version}.json").read_text("utf-8")
    assert dumps_wire_shape(shape) == text


def test_living_model_is_compatible_with_the_frozen_shapes() -> None:
    problems = check_wire_compatibility()
    assert problems == [], problems_text(problems)


def test_living_model_against_the_snapshot_in_both_directions(
    live: WireShape, snapshot: WireShape
) -> None:
    assert compare_wire_shapes(snapshot, live) == []
    # The reverse direction flags only what the model added since the freeze,
    # which must all be optional: nothing at all while they are identical.
    added = compare_wire_shapes(live, snapshot)
    assert all(p.kind is IncompatibilityKind.FIELD_REMOVED for p in added), problems_text(added)


def test_load_wire_shape_rejects_bad_names() -> None:
    with pytest.raises(InvalidVersion):
        load_wire_shape("../pyproject")
    with pytest.raises(InvalidVersion):
        load_wire_shape("0.5")
    with pytest.raises(FileNotFoundError):
        load_wire_shape("0.0.1")


# -- the describer --------------------------------------------------------------------


def test_describe_is_deterministic_and_json(live: WireShape) -> None:
    assert describe_wire_shape() == live
    assert json.loads(dumps_wire_shape(live)) == live
    assert live["protocolVersion"] == PROTOCOL_VERSION


def test_structs_list_wire_names_types_and_required(live: WireShape) -> None:
    types = live["types"]
    assert types["ActionEnvelope"] == {
        "kind": "struct",
        "fields": {
            "action": {"attribute": "action", "required": True, "type": "StateAction"},
            "channel": {"attribute": "channel", "required": True, "type": "string"},
            "origin": {"attribute": "origin", "required": False, "type": "ActionOrigin"},
            "rejectionReason": {
                "attribute": "rejection_reason",
                "required": False,
                "type": "string",
            },
            "serverSeq": {"attribute": "server_seq", "required": True, "type": "integer"},
        },
    }
    markdown = types["MarkdownResponsePart"]["fields"]
    assert markdown["content"] == {"attribute": "content", "required": True, "type": "string"}
    assert markdown["kind"]["type"] == '"markdown"'
    assert types["ErrorInfo"]["fields"]["_meta"]["attribute"] == "meta"
    assert types["InitializeParams"]["fields"]["channel"]["required"]  # a fixed value
    assert types["InitializeParams"]["fields"]["protocolVersions"]["type"] == "array<string>"
    approved = types["ChatToolCallApprovedAction"]["fields"]
    assert approved["approved"]["type"] == "true"
    assert approved["type"]["type"] == '"chat/toolCallConfirmed"'
    assert types["AuthRequiredParams"]["fields"]["reason"] == {
        "attribute": "reason",
        "required": False,
        "type": "AuthRequiredReason | string",
    }


def test_enums_and_unions(live: WireShape) -> None:
    types = live["types"]
    assert types["SessionStatus"] == {"kind": "enum", "values": [1, 2, 8, 24, 32, 64]}
    assert set(types["ActionType"]["values"]) == {t.value for t in ActionType}
    state_action = types["StateAction"]
    assert state_action["open"] and state_action["tag"] == "type"
    assert len(state_action["members"]) == 74
    assert types["ChatOrigin"] == {
        "kind": "union",
        "members": ["ForkChatOrigin", "ToolChatOrigin", "UserChatOrigin"],
        "open": True,
        "tag": "kind",
    }
    assert types["ChatToolCallConfirmedAction"]["tag"] == "approved"
    assert types["SnapshotState"]["tag"] is None
    assert types["JsonPrimitive"]["members"] == ["boolean", "integer", "null", "number", "string"]


def test_every_action_class_is_described(live: WireShape) -> None:
    for cls in ACTION_CLASSES.values():
        name = cls.__name__ if isinstance(cls, type) else "ChatToolCallConfirmedAction"
        assert live["types"][name]["kind"] in ("struct", "union")


def test_placeholders_and_framing_are_left_out(live: WireShape) -> None:
    names = set(live["types"])
    assert not {n for n in names if n.startswith("Unknown")}
    assert "JsonRpcRequest" not in names
    assert "JsonRpcId" not in names


def test_describer_refuses_what_it_cannot_describe() -> None:
    @frozen
    class Odd:
        values: set[int]

    with pytest.raises(TypeError, match="cannot describe"):
        describe_wire_shape({"Odd": Odd})

    @frozen
    class Dangling:
        value: NoSuchType  # type: ignore[name-defined]  # noqa: F821

    with pytest.raises(TypeError, match="unresolved"):
        describe_wire_shape({"Dangling": Dangling})


# -- the four cases, on a mutated copy of the living model ------------------------------
#
# Each test redefines one model class (the way an edit to the generated model
# would), describes the modified namespace and checks it against the frozen
# snapshot.


def title_action_without_title() -> type:
    @frozen(kw_only=True)
    class SessionTitleChangedAction:
        type: Literal[ActionType.SESSION_TITLE_CHANGED] = ActionType.SESSION_TITLE_CHANGED

    return SessionTitleChangedAction


def title_action_with_int_title() -> type:
    @frozen(kw_only=True)
    class SessionTitleChangedAction:
        type: Literal[ActionType.SESSION_TITLE_CHANGED] = ActionType.SESSION_TITLE_CHANGED
        title: int

    return SessionTitleChangedAction


def title_action_with_required_subtitle() -> type:
    @frozen(kw_only=True)
    class SessionTitleChangedAction:
        type: Literal[ActionType.SESSION_TITLE_CHANGED] = ActionType.SESSION_TITLE_CHANGED
        title: str
        sub_title: str

    return SessionTitleChangedAction


def title_action_with_optional_subtitle() -> type:
    @frozen(kw_only=True)
    class SessionTitleChangedAction:
        type: Literal[ActionType.SESSION_TITLE_CHANGED] = ActionType.SESSION_TITLE_CHANGED
        title: str
        sub_title: str | None = None

    return SessionTitleChangedAction


def check_with(make: Callable[[], type], snapshot: WireShape) -> list[Incompatibility]:
    ns = namespace()
    ns[TYPE] = make()
    return compare_wire_shapes(snapshot, describe_wire_shape(ns))


def test_removing_a_field_fails(snapshot: WireShape) -> None:
    problems = check_with(title_action_without_title, snapshot)
    assert [(p.type_name, p.field, p.kind) for p in problems] == [
        (TYPE, "title", IncompatibilityKind.FIELD_REMOVED)
    ]
    assert f"{TYPE}.title: field removed" in str(problems[0])
    assert problems[0].snapshot == PROTOCOL_VERSION


def test_changing_a_field_type_fails(snapshot: WireShape) -> None:
    problems = check_with(title_action_with_int_title, snapshot)
    assert [(p.type_name, p.field, p.kind) for p in problems] == [
        (TYPE, "title", IncompatibilityKind.FIELD_TYPE_CHANGED)
    ]
    assert f"{TYPE}.title: field type changed from string to integer" in str(problems[0])


def test_adding_a_required_field_fails(snapshot: WireShape) -> None:
    problems = check_with(title_action_with_required_subtitle, snapshot)
    assert [(p.type_name, p.field, p.kind) for p in problems] == [
        (TYPE, "subTitle", IncompatibilityKind.REQUIRED_FIELD_ADDED)
    ]
    assert f"{TYPE}.subTitle: required field added" in str(problems[0])


def test_adding_an_optional_field_passes(snapshot: WireShape) -> None:
    assert check_with(title_action_with_optional_subtitle, snapshot) == []


def test_a_nested_type_change_is_caught(snapshot: WireShape) -> None:
    @frozen(kw_only=True)
    class ActionOrigin:
        client_id: str
        client_seq: str

    ns = namespace()
    ns["ActionOrigin"] = ActionOrigin
    problems = compare_wire_shapes(snapshot, describe_wire_shape(ns))
    assert [str(p) for p in problems] == [
        f"[{PROTOCOL_VERSION}] ActionOrigin.clientSeq: field type changed from integer to string"
    ]


# -- every rule, on mutated copies of the description ---------------------------------


def mutate(shape: WireShape, change: Callable[[dict[str, Any]], None]) -> WireShape:
    changed = copy.deepcopy(shape)
    change(changed["types"])
    return changed


def kinds(problems: list[Incompatibility]) -> list[tuple[str, str | None, IncompatibilityKind]]:
    return [(p.type_name, p.field, p.kind) for p in problems]


def test_the_four_cases_on_the_description(live: WireShape) -> None:
    def remove(t: dict[str, Any]) -> None:
        del t[TYPE]["fields"]["title"]

    def retype(t: dict[str, Any]) -> None:
        t[TYPE]["fields"]["title"]["type"] = "integer"

    def add_required(t: dict[str, Any]) -> None:
        t[TYPE]["fields"]["x"] = {"attribute": "x", "required": True, "type": "string"}

    def add_optional(t: dict[str, Any]) -> None:
        t[TYPE]["fields"]["x"] = {"attribute": "x", "required": False, "type": "string"}

    assert kinds(compare_wire_shapes(live, mutate(live, remove))) == [
        (TYPE, "title", IncompatibilityKind.FIELD_REMOVED)
    ]
    assert kinds(compare_wire_shapes(live, mutate(live, retype))) == [
        (TYPE, "title", IncompatibilityKind.FIELD_TYPE_CHANGED)
    ]
    assert kinds(compare_wire_shapes(live, mutate(live, add_required))) == [
        (TYPE, "x", IncompatibilityKind.REQUIRED_FIELD_ADDED)
    ]
    assert compare_wire_shapes(live, mutate(live, add_optional)) == []


def test_required_ness_may_not_change(live: WireShape) -> None:
    def loosen(t: dict[str, Any]) -> None:
        t[TYPE]["fields"]["title"]["required"] = False

    def tighten(t: dict[str, Any]) -> None:
        t["ActionEnvelope"]["fields"]["origin"]["required"] = True

    assert kinds(compare_wire_shapes(live, mutate(live, loosen))) == [
        (TYPE, "title", IncompatibilityKind.FIELD_NOW_OPTIONAL)
    ]
    assert kinds(compare_wire_shapes(live, mutate(live, tighten))) == [
        ("ActionEnvelope", "origin", IncompatibilityKind.FIELD_NOW_REQUIRED)
    ]


def test_enum_values_may_be_added_not_removed(live: WireShape) -> None:
    def remove(t: dict[str, Any]) -> None:
        t["AuthRequiredReason"]["values"].remove("expired")

    def add(t: dict[str, Any]) -> None:
        t["AuthRequiredReason"]["values"].append("revoked")

    problems = compare_wire_shapes(live, mutate(live, remove))
    assert kinds(problems) == [("AuthRequiredReason", None, IncompatibilityKind.ENUM_VALUE_REMOVED)]
    assert "'expired'" in str(problems[0])
    assert compare_wire_shapes(live, mutate(live, add)) == []


def test_union_rules(live: WireShape) -> None:
    def remove(t: dict[str, Any]) -> None:
        t["ChatOrigin"]["members"].remove("ForkChatOrigin")

    def add(t: dict[str, Any]) -> None:
        t["ChatOrigin"]["members"].append("AgentChatOrigin")
        t["AgentChatOrigin"] = {"kind": "struct", "fields": {}}

    def retag(t: dict[str, Any]) -> None:
        t["ChatOrigin"]["tag"] = "type"

    def close(t: dict[str, Any]) -> None:
        t["ChatOrigin"]["open"] = False

    assert kinds(compare_wire_shapes(live, mutate(live, remove))) == [
        ("ChatOrigin", None, IncompatibilityKind.UNION_MEMBER_REMOVED)
    ]
    assert compare_wire_shapes(live, mutate(live, add)) == []
    assert kinds(compare_wire_shapes(live, mutate(live, retag))) == [
        ("ChatOrigin", None, IncompatibilityKind.UNION_TAG_CHANGED)
    ]
    assert kinds(compare_wire_shapes(live, mutate(live, close))) == [
        ("ChatOrigin", None, IncompatibilityKind.UNION_CLOSED)
    ]
    opened = mutate(live, close)
    assert compare_wire_shapes(opened, live) == []  # opening a union is fine


def test_types_may_be_added_not_removed_or_rekinded(live: WireShape) -> None:
    def remove(t: dict[str, Any]) -> None:
        del t["TextRange"]

    def rekind(t: dict[str, Any]) -> None:
        t["AuthRequiredReason"] = {"kind": "struct", "fields": {}}

    def add(t: dict[str, Any]) -> None:
        t["BrandNewThing"] = {"kind": "enum", "values": ["a"]}

    assert kinds(compare_wire_shapes(live, mutate(live, remove))) == [
        ("TextRange", None, IncompatibilityKind.TYPE_REMOVED)
    ]
    assert kinds(compare_wire_shapes(live, mutate(live, rekind))) == [
        ("AuthRequiredReason", None, IncompatibilityKind.KIND_CHANGED)
    ]
    assert compare_wire_shapes(live, mutate(live, add)) == []


def test_check_wire_compatibility_reports_against_the_snapshot(live: WireShape) -> None:
    def remove(t: dict[str, Any]) -> None:
        del t[TYPE]["fields"]["title"]

    problems = check_wire_compatibility(mutate(live, remove))
    assert kinds(problems) == [(TYPE, "title", IncompatibilityKind.FIELD_REMOVED)]


# -- the command line and the tool -------------------------------------------------------


def test_compat_main(capsys: pytest.CaptureFixture[str]) -> None:
    assert compat.main([]) == 0
    assert f"wire shape of {PROTOCOL_VERSION} is compatible" in capsys.readouterr().out


def test_compat_main_reports_problems(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], live: WireShape
) -> None:
    def remove(t: dict[str, Any]) -> None:
        del t[TYPE]["fields"]["title"]

    broken = mutate(live, remove)
    monkeypatch.setattr(compat, "describe_wire_shape", lambda: broken)
    assert compat.main([]) == 1
    captured = capsys.readouterr()
    assert f"{TYPE}.title: field removed" in captured.out
    assert "1 incompatibilities" in captured.err


def load_tool() -> Any:
    path = ROOT / "tools" / "freeze_wire_shape.py"
    spec = importlib.util.spec_from_file_location("freeze_wire_shape", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("freeze_wire_shape", module)
    spec.loader.exec_module(module)
    return module


def test_freeze_tool(tmp_path: Path, capsys: pytest.CaptureFixture[str], live: WireShape) -> None:
    tool = load_tool()
    target = tmp_path / f"{PROTOCOL_VERSION}.json"
    assert tool.main(["--output-dir", str(tmp_path)]) == 0
    assert target.read_text("utf-8") == dumps_wire_shape(live)
    assert tool.main(["--output-dir", str(tmp_path)]) == 0
    assert "up to date" in capsys.readouterr().out

    # A frozen snapshot is not overwritten without --force.
    older = copy.deepcopy(live)
    older["types"][TYPE]["fields"]["title"]["type"] = "integer"
    target.write_text(dumps_wire_shape(older), "utf-8")
    assert tool.main(["--output-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "1 incompatibilities" in err and f"{TYPE}.title" in err
    assert tool.main(["--output-dir", str(tmp_path), "--force"]) == 0
    assert target.read_text("utf-8") == dumps_wire_shape(live)
    capsys.readouterr()

    assert tool.main(["--stdout"]) == 0
    assert json.loads(capsys.readouterr().out) == live
    assert tool.main(["--check"]) == 0


def test_attrs_fields_match_the_description(live: WireShape) -> None:
    # Spot-check the describer against attrs itself on every action class.
    for cls in ACTION_CLASSES.values():
        if not isinstance(cls, type):
            continue
        described = live["types"][cls.__name__]["fields"]
        assert {f["attribute"] for f in described.values()} == {
            f.name.lstrip("_") for f in attrs.fields(cls)
        }
