"""Every type of the spec's schemas exists in the model, with the spec's name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs

from agenthost_protocol import types as t
from agenthost_protocol.wire import wire_name

SCHEMAS = Path(__file__).parent / "data" / "ahp-spec" / "schema"

# Spec names deliberately without a Python counterpart.
NOT_MODELLED = {
    # Non-exported TypeScript base interfaces: their fields are declared on
    # every variant (variants are siblings, not subclasses).
    "CustomizationBase": "base of the customization variants",
    "ContainerCustomizationBase": "base of PluginCustomization / DirectoryCustomization",
    "ChildCustomizationBase": "base of the agent/skill/prompt/rule/hook customizations",
    "ToolCallBase": "base of the seven tool-call states",
    "ToolCallParameterFields": "base of the tool-call states that carry parameters",
    "ToolCallPostConfirmationFields": "base of the tool-call states after confirmation",
    "SessionInputRequestBase": "base of the four session input-request kinds",
    "ToolCallRiskAssessmentBase": "base of the two risk-assessment states",
    "ChatInputQuestionBase": "base of the question kinds",
    "MessageAttachmentBase": "base of the attachment kinds",
    "ToolCallActionBase": "base of the chat/toolCall* actions",
    "BaseParams": "the `channel` every params type carries",
    # A type-level map in TypeScript; the data types it maps to are modelled.
    "AhpErrorDetailsMap": "code -> error-data type map (AuthRequired/PermissionDenied/"
    "UnsupportedProtocolVersion ErrorData are modelled)",
}


def _schema_defs() -> dict[str, dict[str, Any]]:
    defs: dict[str, dict[str, Any]] = {}
    for file in sorted(SCHEMAS.glob("*.schema.json")):
        for name, schema in json.loads(file.read_text())["$defs"].items():
            defs.setdefault(name, schema)
    return defs


def test_every_schema_type_is_modelled() -> None:
    defs = _schema_defs()
    assert len(defs) == 357  # inventory §5.1: the union of the five files' $defs
    missing = sorted(n for n in defs if n not in NOT_MODELLED and not hasattr(t, n))
    assert missing == []
    assert set(NOT_MODELLED) <= set(defs)


def test_struct_fields_match_the_schema() -> None:
    """Each struct's wire keys are the schema's property names, none missing or extra."""
    for name, schema in _schema_defs().items():
        cls = getattr(t, name, None)
        if cls is None or not attrs.has(cls) or "properties" not in schema:
            continue
        wire_keys = {wire_name(a) for a in attrs.fields(cls)}
        props = set(schema["properties"])
        assert wire_keys == props, name


def test_all_is_complete_and_importable() -> None:
    for name in t.__all__:
        assert getattr(t, name) is not None
    classes = [getattr(t, n) for n in t.__all__ if attrs.has(getattr(t, n))]
    assert len(classes) >= 280
    for cls in classes:
        assert cls.__module__.startswith("agenthost_protocol.types"), cls
        # Frozen, keyword-only, slotted.
        assert attrs.fields(cls) is not None
        assert "__slots__" in vars(cls), cls
