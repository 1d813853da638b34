"""The frozen wire shapes, the bidirectional compatibility check of the living
model and the version-difference report (`compat`, `tools/freeze_wire_shape.py`).

Everything here runs on a clone without the spec data, except the one test
that regenerates every shape from ``../shared/ahp-spec`` (skipped without it).
"""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, cast

import attrs
import pytest
from attrs import frozen

from agenthost_protocol import cli, compat
from agenthost_protocol.compat import (
    EXCLUDED_TYPES,
    FORMAT,
    MODEL_WIDENINGS,
    ChangeKind,
    Incompatibility,
    IncompatibilityKind,
    SchemaError,
    WireShape,
    as_modelled,
    check_wire_compatibility,
    compare_wire_shapes,
    derive_wire_shape,
    describe_wire_shape,
    dumps_wire_shape,
    frozen_versions,
    load_wire_shape,
    older_supported_versions,
    render_markdown_report,
    render_report,
    wire_differences,
)
from agenthost_protocol.semver import InvalidVersion
from agenthost_protocol.types import ActionType, common
from agenthost_protocol.versions import PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS

ROOT = Path(__file__).resolve().parent.parent
SHAPES = ROOT / "agenthost_protocol" / "_wire_shapes"
SPEC = ROOT.parent / "shared" / "ahp-spec"
BUNDLED_SPEC = ROOT / "tests" / "data" / "ahp-spec"
TYPE = "SessionTitleChangedAction"


def load_tool() -> ModuleType:
    path = ROOT / "tools" / "freeze_wire_shape.py"
    spec = importlib.util.spec_from_file_location("freeze_wire_shape", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("freeze_wire_shape", module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tool() -> ModuleType:
    return load_tool()


@pytest.fixture(scope="module")
def live() -> WireShape:
    return describe_wire_shape()


@pytest.fixture(scope="module")
def reference() -> WireShape:
    """The frozen shape of ``PROTOCOL_VERSION``, from the upstream schemas."""
    return load_wire_shape(PROTOCOL_VERSION)


@pytest.fixture(scope="module")
def expected(reference: WireShape) -> WireShape:
    """The reference shape as the living model is expected to describe it."""
    return as_modelled(reference)


def namespace() -> dict[str, object]:
    import agenthost_protocol.types as types_package

    return {name: getattr(types_package, name) for name in types_package.__all__}


def problems_text(problems: list[Incompatibility]) -> str:
    return "\n".join(map(str, problems))


def kinds(problems: list[Incompatibility]) -> list[tuple[str, str | None, IncompatibilityKind]]:
    return [(p.type_name, p.field, p.kind) for p in problems]


def loose(shape: WireShape) -> dict[str, Any]:
    """``shape["types"]``, for reading kind-specific keys without narrowing."""
    return cast(dict[str, Any], shape["types"])


def mutate(shape: WireShape, change: Callable[[dict[str, Any]], None]) -> WireShape:
    changed = copy.deepcopy(shape)
    change(loose(changed))
    return changed


# -- the bundled shapes -----------------------------------------------------------------


def test_every_supported_version_and_nothing_else_is_frozen() -> None:
    assert SUPPORTED_PROTOCOL_VERSIONS[0] == PROTOCOL_VERSION
    assert set(frozen_versions()) == set(SUPPORTED_PROTOCOL_VERSIONS)
    assert older_supported_versions() == SUPPORTED_PROTOCOL_VERSIONS[1:]


@pytest.mark.parametrize("version", SUPPORTED_PROTOCOL_VERSIONS)
def test_shapes_are_canonical_with_provenance(version: str) -> None:
    shape = load_wire_shape(version)
    assert shape["format"] == FORMAT
    assert shape["protocolVersion"] == version
    text = (SHAPES / f"{version}.json").read_text("utf-8")
    assert dumps_wire_shape(shape) == text
    source = shape["source"]
    assert source["repository"] == "microsoft/agent-host-protocol"
    assert source["licence"] == "MIT"
    assert re.fullmatch(r"[0-9a-f]{40}", source["commit"])
    assert source["commit"] in (SHAPES / "PROVENANCE.md").read_text("utf-8")
    assert "MIT License" in (SHAPES / "LICENSE").read_text("utf-8")
    assert all(name == name.strip() and name for name in shape["types"])


@pytest.mark.skipif(
    not SPEC.is_dir(), reason=f"the AHP spec data is not beside the repository ({SPEC})"
)
def test_shapes_regenerate_identically_from_the_upstream_schemas(tool: ModuleType) -> None:
    for version in SUPPORTED_PROTOCOL_VERSIONS:
        regenerated = dumps_wire_shape(tool.derive(SPEC, version))
        assert regenerated == (SHAPES / f"{version}.json").read_text("utf-8"), version


@pytest.mark.skipif(not BUNDLED_SPEC.is_dir(), reason="no bundled copy of the 0.7.0 schemas")
def test_the_current_shape_regenerates_from_the_bundled_schemas(tool: ModuleType) -> None:
    regenerated = dumps_wire_shape(tool.derive(BUNDLED_SPEC, PROTOCOL_VERSION))
    assert regenerated == (SHAPES / f"{PROTOCOL_VERSION}.json").read_text("utf-8")


def test_load_wire_shape_rejects_bad_names() -> None:
    with pytest.raises(InvalidVersion):
        load_wire_shape("../pyproject")
    with pytest.raises(InvalidVersion):
        load_wire_shape("0.5")
    with pytest.raises(FileNotFoundError):
        load_wire_shape("0.0.1")


def test_the_current_shape_in_the_notation(reference: WireShape) -> None:
    types = loose(reference)
    assert types["SessionStatus"] == {"kind": "bitset", "values": [1, 2, 8, 24, 32, 64]}
    assert types["ActionOrigin"]["kind"] == "struct"
    assert types["ActionOrigin"]["fields"]["clientSeq"] == {"required": True, "type": "number"}
    assert types["ActionEnvelope"]["fields"]["origin"] == {
        "required": False,
        "type": "ActionOrigin",
    }
    state_action = types["StateAction"]
    assert state_action["kind"] == "union" and state_action["tag"] == "type"
    assert "ChatToolCallConfirmedAction" in state_action["members"]
    assert len(state_action["members"]) == 85
    assert types["ChatToolCallConfirmedAction"] == {
        "kind": "union",
        "tag": "approved",
        "members": ["ChatToolCallApprovedAction", "ChatToolCallDeniedAction"],
    }
    assert types["ChatOrigin"] == {
        "kind": "union",
        "tag": "kind",
        "members": [f"ChatOrigin[kind={k}]" for k in ("fork", "sideChat", "tool", "user")],
    }
    assert types["StringOrMarkdown"]["members"] == ["StringOrMarkdown[0]", "string"]
    assert types["FileEdit.before"] == {
        "kind": "struct",
        "fields": {
            "content": {"required": True, "type": "ContentRef"},
            "uri": {"required": True, "type": "string"},
        },
    }
    assert types["JsonPrimitive"]["members"] == ["boolean", "null", "number", "string"]
    assert "URI" not in types  # a primitive alias is written as its primitive
    assert reference["normalisations"] == [
        "closed enum of a bitset read as a bitset: SessionStatus",
        'dangling oneOf branch {"$ref": "#/$defs/"} dropped: StateAction',
        "empty schema {} read as the literal TypeScript declares:"
        " ChatToolCallApprovedAction.approved, ChatToolCallDeniedAction.approved",
    ]


# -- reading JSON Schemas -----------------------------------------------------------------


def write_schemas(folder: Path, defs: dict[str, Any]) -> Path:
    """``defs`` as the five schema files (all in ``state``)."""
    folder.mkdir(parents=True, exist_ok=True)
    for stem in compat.SCHEMA_FILES:
        body = {"$defs": defs if stem == "state" else {}}
        (folder / f"{stem}.schema.json").write_text(json.dumps(body), "utf-8")
    return folder


def obj(props: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(required)}


def test_schema_reader_notation_and_names(tmp_path: Path) -> None:
    defs = {
        "URI": {"type": "string", "description": "a URI"},
        "Kind": {"type": "string", "enum": ["b", "a"]},
        "Thing": obj(
            {
                "uri": {"$ref": "#/$defs/URI"},
                "count": {"type": "integer"},
                "ratio": {"type": "number"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "meta": {"type": "object", "additionalProperties": {}},
                "doc": {"type": "object"},
                "side": {"type": "string", "enum": ["before", "after"]},
                "kind": {"$ref": "#/$defs/Kind"},
                "inner": obj({"x": {"type": "boolean"}}, ("x",)),
                "list": {"type": "array", "items": obj({"y": {"type": "string"}})},
                "anything": {"description": "no type"},
            },
            ("uri", "kind"),
        ),
        "Origin": {
            "oneOf": [
                obj({"kind": {"const": "user"}}, ("kind",)),
                obj({"kind": {"const": "fork"}, "chat": {"type": "string"}}, ("kind", "chat")),
            ]
        },
        "Text": {"oneOf": [{"type": "string"}, obj({"markdown": {"type": "string"}})]},
    }
    shape = derive_wire_shape(write_schemas(tmp_path, defs), "1.2.3")
    assert shape["protocolVersion"] == "1.2.3" and shape["normalisations"] == []
    types = shape["types"]
    assert sorted(types) == [
        "Kind", "Origin", "Origin[kind=fork]", "Origin[kind=user]", "Text", "Text[0]",
        "Thing", "Thing.inner", "Thing.list[]",
    ]  # fmt: skip
    fields = cast(dict[str, Any], types["Thing"])["fields"]
    assert {k: v["type"] for k, v in fields.items()} == {
        "anything": "any",
        "count": "number",
        "doc": "map<any>",
        "inner": "Thing.inner",
        "kind": "Kind",
        "list": "array<Thing.list[]>",
        "meta": "map<any>",
        "ratio": "number",
        "side": '"after" | "before"',
        "tags": "array<string>",
        "uri": "string",
    }
    assert [k for k, v in fields.items() if v["required"]] == ["kind", "uri"]
    assert types["Kind"] == {"kind": "enum", "values": ["a", "b"]}
    assert types["Origin"] == {
        "kind": "union",
        "tag": "kind",
        "members": ["Origin[kind=fork]", "Origin[kind=user]"],
    }
    assert types["Text"] == {"kind": "union", "tag": None, "members": ["Text[0]", "string"]}


def test_schema_reader_normalises_the_known_defects(tmp_path: Path) -> None:
    approved = obj(
        {"type": {"const": "chat/toolCallConfirmed"}, "approved": {"description": "lost"}},
        ("type", "approved"),
    )
    defs = {
        "SessionStatus": {"type": "number", "enum": [1, 2, 8]},
        "ChatToolCallApprovedAction": approved,
        "ChatToolCallDeniedAction": approved,
        "Confirmed": {
            "oneOf": [
                {"$ref": "#/$defs/"},
                {"$ref": "#/$defs/ChatToolCallApprovedAction"},
                {"$ref": "#/$defs/ChatToolCallDeniedAction"},
            ]
        },
        "Primitive": {"oneOf": [{}, {"type": "string"}, {}]},
    }
    shape = derive_wire_shape(write_schemas(tmp_path, defs), "0.1.0")
    types = shape["types"]
    assert types["SessionStatus"]["kind"] == "bitset"
    assert cast(dict[str, Any], types["ChatToolCallDeniedAction"])["fields"]["approved"] == {
        "required": True,
        "type": "false",
    }
    assert types["Confirmed"] == {
        "kind": "union",
        "tag": "approved",
        "members": ["ChatToolCallApprovedAction", "ChatToolCallDeniedAction"],
    }
    assert types["Primitive"] == {"kind": "union", "tag": None, "members": ["null", "string"]}
    assert len(shape["normalisations"]) == 5


def test_schema_reader_borrows_from_a_donor(tmp_path: Path) -> None:
    old = {
        "Action": obj(
            {"type": {"$ref": "#/$defs/ActionType.ChatDelta"}, "mode": {"$ref": "#/$defs/Mode"}},
            ("type",),
        ),
        "Uses": obj({"at": {"$ref": "#/$defs/URI"}}),
    }
    donor = {
        "URI": {"type": "string"},
        "Mode": {"type": "string", "enum": ["read-only", "full"]},
        "Action": obj({"type": {"const": "chat/delta"}}, ("type",)),
    }
    old_dir = write_schemas(tmp_path / "old", old)
    donor_dir = write_schemas(tmp_path / "donor", donor)
    with pytest.raises(SchemaError, match="dangling"):
        derive_wire_shape(old_dir, "0.5.1")
    shape = derive_wire_shape(old_dir, "0.5.1", donor_dir=donor_dir, donor_version="0.5.2")
    assert cast(dict[str, Any], shape["types"]["Action"])["fields"] == {
        "mode": {"required": False, "type": "Mode"},
        "type": {"required": True, "type": '"chat/delta"'},
    }
    assert shape["types"]["Mode"] == {"kind": "enum", "values": ["full", "read-only"]}
    assert shape["normalisations"] == [
        "defined only in 0.5.2's schemas, borrowed from them: Mode, URI",
        "references to enum members resolved by name against 0.5.2's literals: ActionType",
    ]
    # Ambiguity is an error, never a guess.
    donor["Other"] = obj({"kind": {"const": "chatDelta"}})
    write_schemas(donor_dir, donor)
    with pytest.raises(SchemaError, match="ambiguous"):
        derive_wire_shape(old_dir, "0.5.1", donor_dir=donor_dir, donor_version="0.5.2")


def test_schema_reader_refuses_what_it_cannot_read(tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match="cannot read"):
        derive_wire_shape(write_schemas(tmp_path / "a", {"X": obj({"y": {"allOf": []}})}), "0.1.0")
    with pytest.raises(SchemaError, match="unsupported \\$ref"):
        derive_wire_shape(
            write_schemas(tmp_path / "b", {"X": obj({"y": {"$ref": "other.json#/Y"}})}), "0.1.0"
        )


# -- the model describer ----------------------------------------------------------------


def test_describe_is_deterministic_and_json(live: WireShape) -> None:
    assert describe_wire_shape() == live
    assert json.loads(dumps_wire_shape(live)) == live
    assert live["protocolVersion"] == PROTOCOL_VERSION


def test_model_classes_the_schema_leaves_anonymous_are_named_by_place(live: WireShape) -> None:
    types = live["types"]
    for anonymous in (
        "FileEdit.before",  # FileEditSide
        "FileEdit.diff",  # FileEditDiff
        "ChatOrigin[kind=user]",  # UserChatOrigin
        "SessionChatUpdatedAction.changes",  # PartialChatSummary
        "ResourceWatchChangedAction.changes",  # ResourceChangeList
        "ResourceWatchState.includes",  # PathPatternList
        "ChatToolCallReadyAction.edits",  # FileEditList
        "StringOrMarkdown[0]",  # MarkdownString
    ):
        assert types[anonymous]["kind"] == "struct", anonymous
    for model_name in ("FileEditSide", "UserChatOrigin", "PartialChatSummary", "FileEditList"):
        assert model_name not in types
    assert not {n for n in types if n.startswith("Unknown")}
    assert "JsonRpcRequest" not in types and "JsonRpcId" not in types


def test_model_describer_conventions(live: WireShape) -> None:
    types = live["types"]
    fields = cast(dict[str, Any], types["ActionEnvelope"])["fields"]
    assert fields["serverSeq"] == {"required": True, "type": "number"}  # int
    assert fields["origin"] == {"required": False, "type": "ActionOrigin"}  # None default
    assert types["SessionStatus"] == {"kind": "bitset", "values": [1, 2, 8, 24, 32, 64]}
    # ``ToolCallConfirmationReason | str`` is an open enum, not a wider type.
    running = cast(dict[str, Any], types["ToolCallRunningState"])["fields"]
    assert running["confirmed"]["type"] == "ToolCallConfirmationReason"
    # typing flattened ChatToolCallConfirmedAction into StateAction; it is put back.
    assert "ChatToolCallConfirmedAction" in cast(dict[str, Any], types["StateAction"])["members"]
    # The schema names no ActionType (a discriminator-only enum): the model's
    # enum is not described, its values appear where they are used.
    assert "ActionType" not in types
    title = cast(dict[str, Any], types[TYPE])["fields"]["type"]
    assert title == {"required": True, "type": json.dumps(ActionType.SESSION_TITLE_CHANGED.value)}


def test_describer_refuses_what_it_cannot_describe() -> None:
    @frozen
    class Odd:
        values: set[int]

    with pytest.raises(TypeError, match="cannot describe"):
        describe_wire_shape({"Odd": Odd}, named={"Odd"})

    @frozen
    class Dangling:
        value: NoSuchType  # type: ignore[name-defined]  # noqa: F821

    with pytest.raises(TypeError, match="unresolved"):
        describe_wire_shape({"Dangling": Dangling}, named={"Dangling"})


# -- the living model against the frozen shape of PROTOCOL_VERSION ---------------------------


def test_living_model_is_compatible_with_the_frozen_shape() -> None:
    problems = check_wire_compatibility()
    assert problems == [], problems_text(problems)


def test_living_model_against_the_frozen_shape_in_both_directions(
    live: WireShape, expected: WireShape
) -> None:
    assert compare_wire_shapes(expected, live) == []
    # The reverse direction flags what the model has and the schema lacks:
    # only the Conflict code, missing from the 0.7.0 schema (a known defect).
    reverse = compare_wire_shapes(live, expected)
    assert [str(p) for p in reverse] == [
        f"[{PROTOCOL_VERSION}] AhpErrorCode: enum value -32011 removed"
    ], problems_text(reverse)


def test_every_schema_type_is_described_or_excluded_for_a_reason(
    live: WireShape, reference: WireShape
) -> None:
    missing = {n for n in reference["types"] if n not in live["types"]}
    assert missing == {n for n in reference["types"] if compat._is_excluded(n)}
    assert set(EXCLUDED_TYPES) <= set(reference["types"])  # no stale entries
    assert all(reason for reason in EXCLUDED_TYPES.values())
    for (owner, wire), (schema_type, _model_type, reason) in MODEL_WIDENINGS.items():
        used = [
            n
            for n, t in loose(reference).items()
            if t["kind"] == "struct"
            and owner in ("*", n)
            and t["fields"].get(wire, {}).get("type") == schema_type
        ]
        assert used and reason, (owner, wire)


# -- the four cases, on a mutated copy of the living model ----------------------------
#
# Each test redefines one model class (the way an edit to the generated model
# would), describes the modified namespace and checks it against the frozen
# shape of PROTOCOL_VERSION (derived from the upstream schemas).


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


def check_with(make: Callable[[], type], expected: WireShape) -> list[Incompatibility]:
    ns = namespace()
    ns[TYPE] = make()
    return compare_wire_shapes(expected, describe_wire_shape(ns))


def test_removing_a_field_fails(expected: WireShape) -> None:
    problems = check_with(title_action_without_title, expected)
    assert kinds(problems) == [(TYPE, "title", IncompatibilityKind.FIELD_REMOVED)]
    assert f"{TYPE}.title: field removed" in str(problems[0])
    assert problems[0].snapshot == PROTOCOL_VERSION


def test_changing_a_field_type_fails(expected: WireShape) -> None:
    problems = check_with(title_action_with_int_title, expected)
    assert kinds(problems) == [(TYPE, "title", IncompatibilityKind.FIELD_TYPE_CHANGED)]
    assert f"{TYPE}.title: field type changed from string to number" in str(problems[0])


def test_adding_a_required_field_fails(expected: WireShape) -> None:
    problems = check_with(title_action_with_required_subtitle, expected)
    assert kinds(problems) == [(TYPE, "subTitle", IncompatibilityKind.REQUIRED_FIELD_ADDED)]
    assert f"{TYPE}.subTitle: required field added" in str(problems[0])


def test_adding_an_optional_field_passes(expected: WireShape) -> None:
    assert check_with(title_action_with_optional_subtitle, expected) == []


def test_a_nested_type_change_is_caught(expected: WireShape) -> None:
    @frozen(kw_only=True)
    class ActionOrigin:
        client_id: str
        client_seq: str

    ns = namespace()
    ns["ActionOrigin"] = ActionOrigin
    problems = compare_wire_shapes(expected, describe_wire_shape(ns))
    assert [str(p) for p in problems] == [
        f"[{PROTOCOL_VERSION}] ActionOrigin.clientSeq: field type changed from number to string"
    ]


def test_an_anonymous_object_change_is_caught(
    expected: WireShape, monkeypatch: pytest.MonkeyPatch
) -> None:
    @frozen(kw_only=True)
    class FileEditSide:
        uri: str

    # FileEdit's annotations are resolved in its own module.
    monkeypatch.setattr(common, "FileEditSide", FileEditSide)
    problems = compare_wire_shapes(expected, describe_wire_shape(namespace()))
    removed = {(p.type_name, p.field) for p in problems}
    assert ("FileEdit.before", "content") in removed
    assert all(p.kind is IncompatibilityKind.FIELD_REMOVED for p in problems)


# -- every rule, on mutated copies of the description --------------------------------


def test_the_four_cases_on_the_description(live: WireShape) -> None:
    def remove(t: dict[str, Any]) -> None:
        del t[TYPE]["fields"]["title"]

    def retype(t: dict[str, Any]) -> None:
        t[TYPE]["fields"]["title"]["type"] = "number"

    def add_required(t: dict[str, Any]) -> None:
        t[TYPE]["fields"]["x"] = {"required": True, "type": "string"}

    def add_optional(t: dict[str, Any]) -> None:
        t[TYPE]["fields"]["x"] = {"required": False, "type": "string"}

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
        t["ChatOrigin"]["members"].remove("ChatOrigin[kind=fork]")

    def add(t: dict[str, Any]) -> None:
        t["ChatOrigin"]["members"].append("ChatOrigin[kind=agent]")
        t["ChatOrigin[kind=agent]"] = {"kind": "struct", "fields": {}}

    def retag(t: dict[str, Any]) -> None:
        t["ChatOrigin"]["tag"] = "type"

    assert kinds(compare_wire_shapes(live, mutate(live, remove))) == [
        ("ChatOrigin", None, IncompatibilityKind.UNION_MEMBER_REMOVED)
    ]
    assert compare_wire_shapes(live, mutate(live, add)) == []
    assert kinds(compare_wire_shapes(live, mutate(live, retag))) == [
        ("ChatOrigin", None, IncompatibilityKind.UNION_TAG_CHANGED)
    ]


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


def test_check_wire_compatibility_reports_against_the_frozen_shape(live: WireShape) -> None:
    def remove(t: dict[str, Any]) -> None:
        del t[TYPE]["fields"]["title"]

    problems = check_wire_compatibility(mutate(live, remove))
    assert kinds(problems) == [(TYPE, "title", IncompatibilityKind.FIELD_REMOVED)]


def test_a_widening_is_accepted_only_as_listed(live: WireShape) -> None:
    def narrow(t: dict[str, Any]) -> None:  # the model follows the schema after all
        t["Icon"]["fields"]["theme"]["type"] = '"dark" | "light"'

    def other(t: dict[str, Any]) -> None:
        t["Icon"]["fields"]["theme"]["type"] = "number"

    assert kinds(check_wire_compatibility(mutate(live, narrow))) == [
        ("Icon", "theme", IncompatibilityKind.FIELD_TYPE_CHANGED)
    ]
    assert kinds(check_wire_compatibility(mutate(live, other))) == [
        ("Icon", "theme", IncompatibilityKind.FIELD_TYPE_CHANGED)
    ]


# -- the differences between supported versions --------------------------------------


def differences(version: str) -> dict[tuple[str, str | None, ChangeKind], tuple[str, str]]:
    found = wire_differences(load_wire_shape(version), load_wire_shape(PROTOCOL_VERSION))
    return {(d.type_name, d.field, d.kind): (d.old, d.new) for d in found}


def test_what_a_0_6_0_peer_sends() -> None:
    found = differences("0.6.0")
    for owner in ("SessionState", "SessionSummary", "ChatState", "ChatSummary"):
        assert found[owner, "workingDirectory", ChangeKind.FIELD_REMOVED] == (
            "optional string",
            "",
        )
        assert (owner, "workingDirectories", ChangeKind.FIELD_ADDED) in found
    assert ("ChatForkSource", None, ChangeKind.TYPE_REMOVED) in found
    assert found["CreateChatParams", "source", ChangeKind.FIELD_RETYPED] == (
        "ChatForkSource",
        "ChatSource",
    )
    assert ("ForkChatSource", None, ChangeKind.TYPE_ADDED) in found  # it has a ``kind``
    assert found["ChatOrigin", None, ChangeKind.MEMBERS_ADDED] == ("", "ChatOrigin[kind=sideChat]")
    assert found["MessageAttachment", None, ChangeKind.MEMBERS_ADDED] == (
        "",
        "MessageChatAttachment",
    )
    for wire in ("isPty", "result"):
        assert ("ToolResultTerminalContent", wire, ChangeKind.FIELD_ADDED) in found
    assert found["ToolResultContent", None, ChangeKind.MEMBERS_REMOVED] == (
        "ToolResultTerminalCompleteContent",
        "",
    )
    assert ("SessionWorkingDirectorySetAction", None, ChangeKind.TYPE_ADDED) in found


def test_what_a_0_5_x_peer_sends() -> None:
    for version in ("0.5.2", "0.5.1"):
        found = differences(version)
        assert found["ChatTurnStartedAction", "startedAt", ChangeKind.FIELD_ADDED] == (
            "",
            "required string",
        )
        for action in ("ChatTurnCompleteAction", "ChatTurnCancelledAction", "ChatErrorAction"):
            assert found[action, "duration", ChangeKind.FIELD_ADDED] == ("", "required number")
        assert ("ChatState", "inputRequests", ChangeKind.FIELD_REMOVED) in found
        assert ("ChatSummary", "workingDirectory", ChangeKind.FIELD_REMOVED) in found
        assert ("CreateSessionParams", "workingDirectory", ChangeKind.FIELD_REMOVED) in found
        assert ("ChatForkSource", None, ChangeKind.TYPE_REMOVED) in found
    only_0_5_2 = differences("0.5.2")
    assert ("ChangesetFilesReviewedChangedAction", None, ChangeKind.TYPE_REMOVED) in only_0_5_2
    assert ("ChangesetFilesReviewedChangedAction", None, ChangeKind.TYPE_REMOVED) not in (
        differences("0.5.1")
    )


def test_lossy_schemas_are_aligned_and_marked() -> None:
    found = wire_differences(load_wire_shape("0.6.0"), load_wire_shape(PROTOCOL_VERSION))
    origin = [d for d in found if d.type_name.startswith("ChatOrigin")]
    assert [str(d) for d in origin] == [
        "ChatOrigin: members added: ChatOrigin[kind=sideChat]",
        "ChatOrigin: discriminator changed: none -> kind (schema detail)",
        'ChatOrigin[kind=fork].kind: field retyped: string -> "fork" (schema detail)',
        "ChatOrigin[kind=sideChat]: type added: struct, 4 fields",
        'ChatOrigin[kind=tool].kind: field retyped: string -> "tool" (schema detail)',
        'ChatOrigin[kind=user].kind: field retyped: string -> "user" (schema detail)',
    ]
    assert not [d for d in differences("0.6.0") if d[0] == "ChatOrigin[0]"]


def test_wire_differences_name_every_kind_of_change(live: WireShape) -> None:
    def change(t: dict[str, Any]) -> None:
        t["Added"] = {"kind": "struct", "fields": {}}
        del t["TextRange"]
        t["AuthRequiredReason"]["values"] = ["expired", "revoked"]
        t["ChatOrigin"]["members"] = ["ChatOrigin[kind=user]", "ChatOrigin[kind=agent]"]
        t["ChatOrigin"]["tag"] = "type"
        t["TextPosition"] = {"kind": "enum", "values": ["a"]}
        fields = t[TYPE]["fields"]
        fields["title"]["type"] = "number"
        fields["title"]["required"] = False
        fields["type"]["required"] = False
        t["ActionEnvelope"]["fields"]["origin"]["required"] = True
        fields["new"] = {"required": True, "type": "string"}
        del t["ActionOrigin"]["fields"]["clientSeq"]

    new = mutate(live, change)
    found = {(d.type_name, d.field, d.kind) for d in wire_differences(live, new)}
    assert found == {
        ("Added", None, ChangeKind.TYPE_ADDED),
        ("TextRange", None, ChangeKind.TYPE_REMOVED),
        ("AuthRequiredReason", None, ChangeKind.VALUES_ADDED),
        ("AuthRequiredReason", None, ChangeKind.VALUES_REMOVED),
        ("ChatOrigin", None, ChangeKind.MEMBERS_ADDED),
        ("ChatOrigin", None, ChangeKind.MEMBERS_REMOVED),
        ("ChatOrigin", None, ChangeKind.TAG_CHANGED),
        ("TextPosition", None, ChangeKind.KIND_CHANGED),
        (TYPE, "title", ChangeKind.FIELD_RETYPED),
        (TYPE, "title", ChangeKind.FIELD_NOW_OPTIONAL),
        (TYPE, "type", ChangeKind.FIELD_NOW_OPTIONAL),
        ("ActionEnvelope", "origin", ChangeKind.FIELD_NOW_REQUIRED),
        (TYPE, "new", ChangeKind.FIELD_ADDED),
        ("ActionOrigin", "clientSeq", ChangeKind.FIELD_REMOVED),
    }
    assert wire_differences(live, live) == []


def test_reports_cover_every_older_supported_version() -> None:
    text = render_report()
    markdown = render_markdown_report()
    for version in older_supported_versions():
        assert re.search(
            rf"^{re.escape(version)} -> {PROTOCOL_VERSION}: \d+ types differ", text, re.M
        )
        assert f"#### {version} → {PROTOCOL_VERSION}" in markdown
        assert f"| type | field | change | {version} | {PROTOCOL_VERSION} |" in markdown
    assert "  ChatState.workingDirectory: field removed: optional string\n" in text
    assert "| `ChatState` | `workingDirectory` | field removed | `optional string` |  |" in markdown
    assert "\\|" in markdown  # alternatives are escaped inside table cells
    assert render_report(["0.0.1"]) == f"0.0.1 -> {PROTOCOL_VERSION}: no frozen shape for 0.0.1\n"


# -- the command line, the tool and the docs --------------------------------------------


def test_compat_main(capsys: pytest.CaptureFixture[str]) -> None:
    assert compat.main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        f"wire shape of {PROTOCOL_VERSION} is compatible with: {PROTOCOL_VERSION}"
    )
    assert out.endswith(render_report())
    assert cli.main(["compat"]) == 0
    assert capsys.readouterr().out == out


def test_compat_main_fails_only_when_the_model_breaks_the_frozen_shape(
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
    assert "0.6.0 -> " in captured.out  # the report still follows


def test_tool_help_runs_without_the_spec() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "freeze_wire_shape.py"), "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0 and "SPEC_DIR" in proc.stdout


@pytest.mark.skipif(not BUNDLED_SPEC.is_dir(), reason="no bundled copy of the 0.7.0 schemas")
def test_freeze_tool(
    tool: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str], reference: WireShape
) -> None:
    args = [str(BUNDLED_SPEC), "--version", PROTOCOL_VERSION, "--output-dir", str(tmp_path)]
    target = tmp_path / f"{PROTOCOL_VERSION}.json"
    assert tool.main([*args, "--check"]) == 1  # missing
    assert tool.main(args) == 0
    assert target.read_text("utf-8") == dumps_wire_shape(reference)
    assert tool.main(args) == 0
    assert "up to date" in capsys.readouterr().out

    # A differing shape is not overwritten without --force.
    older = copy.deepcopy(reference)
    cast(dict[str, Any], older["types"][TYPE])["fields"]["title"]["type"] = "number"
    target.write_text(dumps_wire_shape(older), "utf-8")
    assert tool.main(args) == 1
    assert tool.main([*args, "--check"]) == 1
    err = capsys.readouterr().err
    assert "differs" in err and f"{TYPE}.title" in err
    assert tool.main([*args, "--force"]) == 0
    assert target.read_text("utf-8") == dumps_wire_shape(reference)

    (tmp_path / "0.5.0.json").write_text("{}", "utf-8")
    assert tool.main(args) == 1
    assert "0.5.0.json is not a supported version" in capsys.readouterr().err

    assert tool.main([str(BUNDLED_SPEC), "--version", PROTOCOL_VERSION, "--stdout"]) == 0
    assert json.loads(capsys.readouterr().out) == reference
    assert tool.main([str(BUNDLED_SPEC / "schema")]) == 2  # a schema folder needs --version
    assert tool.main([str(BUNDLED_SPEC), "--version", "0.6.0"]) == 2  # not in there
    assert "no schemas for 0.6.0" in capsys.readouterr().err


def test_docs_tables_are_generated_from_the_committed_shapes(tool: ModuleType) -> None:
    doc = (ROOT / "docs" / "versioning.md").read_text("utf-8")
    assert tool.splice_doc(doc) == doc, "run: python tools/freeze_wire_shape.py --doc"
    assert render_markdown_report() in doc
    for name in EXCLUDED_TYPES:
        assert f"| `{name}` |" in doc


def test_doc_tool(tool: ModuleType, tmp_path: Path) -> None:
    doc = tmp_path / "versioning.md"
    blocks = "".join(f"{tool._begin(b)}\nstale\n{tool._end(b)}\n" for b in tool.BLOCKS)
    doc.write_text(f"# Versioning\n\n{blocks}", "utf-8")
    assert tool.main(["--doc", "--check", "--doc-file", str(doc)]) == 1
    assert tool.main(["--doc", "--doc-file", str(doc)]) == 0
    assert "stale" not in doc.read_text("utf-8")
    assert tool.main(["--doc", "--check", "--doc-file", str(doc)]) == 0
    doc.write_text("# no blocks\n", "utf-8")
    assert tool.main(["--doc", "--doc-file", str(doc)]) == 2


def test_attrs_fields_match_the_description(live: WireShape) -> None:
    # Spot-check the describer against attrs itself on every named struct.
    ns = namespace()
    for name, desc in live["types"].items():
        cls = ns.get(name)
        if desc["kind"] != "struct" or not (isinstance(cls, type) and attrs.has(cls)):
            continue
        assert len(desc["fields"]) == len(attrs.fields(cls)), name
