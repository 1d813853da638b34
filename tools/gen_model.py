"""Generate ``agenthost_protocol/types/*.py`` from the AHP JSON Schemas.

Usage::

    python tools/gen_model.py [SPEC_DIR] [--out DIR] [--check]

SPEC_DIR is a spec folder (``schema/*.schema.json`` and ``registry.json``);
it defaults to the bundled copy of the released schemas, ``tests/data/ahp-spec``,
so the tool works on a fresh clone.  The generated modules are committed, and
``tests/test_generator.py`` checks that they are byte for byte what this tool
writes from the bundled schemas.  The schemas do not carry everything (enums
used only as discriminators, names for inline objects, unions the TypeScript
declares but the schemas do not, JSON Schema documents that must stay open
objects), so the tables below carry the missing facts, taken from the spec's
TypeScript sources as summarised in ``shared/notes/spec-inventory.md``.  Each
table fails loudly when a new schema no longer matches it.

Each class is written as its ``@frozen(kw_only=True)`` declaration, which type
checkers read, followed by an ``if not TYPE_CHECKING:`` block holding what
attrs would build for it at run time (``__slots__``, ``__init__``,
``__repr__``, ``__eq__``, ``__hash__``, the ``attrs.fields`` of
``__attrs_attrs__``...; see :func:`runtime_lines`), with the shared pieces in
the hand-written ``types/_model.py``: importing the model then costs the class
bodies, not attrs writing and compiling four methods a class.
``tests/test_first_use_model.py`` holds every class to the one attrs builds
from the declaration.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import tempfile
import textwrap
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "agenthost_protocol" / "types"
PACKAGE = "agenthost_protocol.types"
BUNDLED_SPEC = ROOT / "tests" / "data" / "ahp-spec"
SCHEMA_FILES = ("state", "actions", "commands", "notifications", "errors")

# ---------------------------------------------------------------------------
# Facts the schemas lack
# ---------------------------------------------------------------------------

# The 0.7.0 schemas emit most enums as ``$defs`` (read from there).  The
# enums used only as union discriminators are not emitted: their values appear
# inline as ``const``.  Their values, from the TypeScript sources (inventory
# §5.4), are here; ``ChangesetOperationTargetSide`` is this library's name for
# an inline ``"before" | "after"``.
DISCRIMINATOR_ENUMS: dict[str, list[str]] = {
    "ReconnectResultType": ["replay", "snapshot"],
    "ChatSourceKind": ["fork", "sideChat"],
    "SessionInputRequestKind": [
        "chatInput", "toolConfirmation", "toolClientExecution", "toolAuthentication",
    ],
    "CustomizationType": [
        "plugin", "directory", "agent", "skill", "prompt", "rule", "hook", "mcpServer",
    ],
    "CustomizationLoadStatus": ["loading", "loaded", "degraded", "error"],
    "McpServerStatus": ["starting", "ready", "authRequired", "error", "stopped"],
    "ChatOriginKind": ["user", "fork", "sideChat", "tool"],
    "ChatInputQuestionKind": [
        "text", "number", "integer", "boolean", "single-select", "multi-select",
    ],
    "ChatInputAnswerValueKind": ["text", "number", "boolean", "selected", "selected-many"],
    "ChatInputAnswerState": ["draft", "submitted", "skipped"],
    "MessageAttachmentKind": ["simple", "embeddedResource", "resource", "annotations", "chat"],
    "ResponsePartKind": [
        "markdown", "contentRef", "toolCall", "reasoning", "systemNotification", "inputRequest",
    ],
    "ToolCallStatus": [
        "streaming", "pending-confirmation", "running", "auth-required",
        "pending-result-confirmation", "completed", "cancelled",
    ],
    "ToolCallRiskAssessmentStatus": ["loading", "complete"],
    "ToolCallContributorKind": ["client", "mcp"],
    "ToolResultContentType": [
        "text", "embeddedResource", "resource", "fileEdit", "terminal", "subagent",
    ],
    "TerminalClaimKind": ["client", "session"],
    "ChangesetOperationTargetKind": ["resource", "range"],
    "ChangesetOperationTargetSide": ["before", "after"],
}
# Every string enum, in the order ``types.enums`` lists them (inventory §5.4).
# An enum the schemas define that is missing here stops the generator: a new
# release's new enum must be placed deliberately.
ENUM_ORDER = [
    "ActionType", "ReconnectResultType", "ContentEncoding", "ResourceWriteMode",
    "ResourceType", "AuthRequiredReason", "CompletionItemKind", "ChatSourceKind",
    "PolicyState", "SessionLifecycle", "SessionInputRequestKind", "CustomizationType",
    "CustomizationLoadStatus", "McpServerStatus", "McpAuthRequiredReason", "ChatOriginKind",
    "ChatInteractivity", "PendingMessageKind", "ChatInputResponseKind",
    "ChatInputQuestionKind", "ChatInputAnswerValueKind", "ChatInputAnswerState", "TurnState",
    "MessageAttachmentKind", "MessageKind", "ResponsePartKind", "ToolCallStatus",
    "ToolCallConfirmationReason", "ToolCallRiskAssessmentKind", "ToolCallRiskAssessmentStatus",
    "ToolCallCancellationReason", "ConfirmationOptionKind", "ToolCallContributorKind",
    "ToolResultContentType", "TerminalClaimKind", "ChangesetStatus",
    "ChangesetOperationStatus", "ChangesetOperationScope", "ChangesetOperationTargetKind",
    "ChangesetOperationTargetSide", "ResourceChangeType",
]
# Numeric enums written by hand below (``SessionStatus`` is a bitset the schema
# gets wrong, the error-code tables lack -32011).
NUMERIC_ENUMS = {"SessionStatus", "JsonRpcErrorCode", "AhpErrorCode"}
STRING_ENUMS: dict[str, list[str]] = {}
"""Filled by :class:`Gen` from the schemas and ``DISCRIMINATOR_ENUMS``."""

# The enum a union's discriminator takes its ``const`` values from.
UNION_TAG_ENUMS = {
    "StateAction": "ActionType", "ReconnectResult": "ReconnectResultType",
    "ChangesetOperationTarget": "ChangesetOperationTargetKind", "ChatSource": "ChatSourceKind",
    "ChatOrigin": "ChatOriginKind", "SessionInputRequest": "SessionInputRequestKind",
    "ChatInputQuestion": "ChatInputQuestionKind", "ChatInputAnswerValue": "ChatInputAnswerValueKind",
    "ChatInputAnswer": "ChatInputAnswerState", "MessageAttachment": "MessageAttachmentKind",
    "ResponsePart": "ResponsePartKind", "ToolCallContributor": "ToolCallContributorKind",
    "ToolCallState": "ToolCallStatus", "ToolCallConfirmationState": "ToolCallStatus",
    "ToolCallRiskAssessment": "ToolCallRiskAssessmentStatus",
    "ToolResultContent": "ToolResultContentType", "Customization": "CustomizationType",
    "ChildCustomization": "CustomizationType", "CustomizationLoadState": "CustomizationLoadStatus",
    "McpServerState": "McpServerStatus", "TerminalClaim": "TerminalClaimKind",
}
# Non-discriminator fields whose inline ``const`` alternatives are an enum's values.
FIELD_ENUMS = {
    ("ChatToolCallDeniedAction", "reason"): "ToolCallCancellationReason",
    ("ChangesetOperationResourceTarget", "side"): "ChangesetOperationTargetSide",
    ("ChangesetOperationRangeTarget", "side"): "ChangesetOperationTargetSide",
}
# Discriminators that are not the first of ``type``/``kind``/``status``/``state``
# on their variants (risk assessments carry a constant ``kind: "judge"`` too).
UNION_TAGS = {"ToolCallRiskAssessment": "status"}

# Unions whose variants the schemas write inline, without a name: the names
# (and docstrings) of the variant classes, in ``oneOf`` order.
INLINE_VARIANTS: dict[str, list[tuple[str, str]]] = {
    "ChangesetOperationTarget": [
        ("ChangesetOperationResourceTarget", "Targets one resource of the changeset."),
        ("ChangesetOperationRangeTarget", "Targets a range inside one resource of the changeset."),
    ],
    "ChatOrigin": [
        ("UserChatOrigin", "The chat was started by a user."),
        ("ForkChatOrigin", "The chat was forked from a turn of another chat."),
        ("SideChatOrigin", "The chat is a side chat about a turn of another chat."),
        ("ToolChatOrigin", "The chat was started by a tool call (e.g. a subagent)."),
    ],
}

# Names for inline object types (the spec gives them none), and the docstrings
# of those that are not described well by the field that holds them.
INLINE_NAMES = {
    ("FileEdit", "before"): "FileEditSide",
    ("FileEdit", "after"): "FileEditSide",
    ("FileEdit", "diff"): "FileEditDiff",
    ("ToolResultFileEditContent", "before"): "FileEditSide",
    ("ToolResultFileEditContent", "after"): "FileEditSide",
    ("ToolResultFileEditContent", "diff"): "FileEditDiff",
    ("AhpMcpUiHostCapabilities", "serverTools"): "McpUiListChangedCapability",
    ("AhpMcpUiHostCapabilities", "serverResources"): "McpUiListChangedCapability",
    ("AhpMcpUiHostCapabilities", "sampling"): "McpUiSamplingCapability",
    ("ToolCallResult", "error"): "ToolCallError",
    ("ToolCallPendingResultConfirmationState", "error"): "ToolCallError",
    ("ToolCallCompletedState", "error"): "ToolCallError",
    ("SessionChatUpdatedAction", "changes"): "PartialChatSummary",
    ("SessionSummaryChangedParams", "changes"): "PartialSessionSummary",
    ("ToolCallPendingConfirmationState", "edits"): "FileEditList",
    ("ChatToolCallReadyAction", "edits"): "FileEditList",
    ("ResourceWatchState", "excludes"): "PathPatternList",
    ("ResourceWatchState", "includes"): "PathPatternList",
    ("CreateResourceWatchParams", "excludes"): "PathPatternList",
    ("CreateResourceWatchParams", "includes"): "PathPatternList",
    ("ResourceWatchChangedAction", "changes"): "ResourceChangeList",
}
INLINE_DOCS = {
    "FileEditSide": "One side (before or after) of a file edit: where, and its content.",
    "FileEditList": "File edits, wrapped in ``{items}`` on the wire for forward compatibility.",
    "PathPatternList": "Glob patterns or relative paths, wrapped in ``{items}`` on the wire.",
    "ResourceChangeList": "A batch of resource changes, wrapped in ``{items}`` on the wire.",
}

# Field types the schemas cannot express: JSON Schema documents are open
# objects (kept whole, not as the schema's partial struct), ``Snapshot.state``
# is chosen by channel, ``FileEdit`` content is always a ``ContentRef``, and
# booleans discriminate the two ``chat/toolCallConfirmed`` shapes.
FIELD_TYPE_OVERRIDES = {
    ("ToolDefinition", "inputSchema"): "Mapping[str, Any]",
    ("ToolDefinition", "outputSchema"): "Mapping[str, Any]",
    ("Snapshot", "state"): "SnapshotState",
    ("FileEditSide", "content"): "ContentRef",
    ("ChatToolCallApprovedAction", "approved"): "Literal[True]",
    ("ChatToolCallDeniedAction", "approved"): "Literal[False]",
}
LITERAL_DEFAULTS = {
    ("ChatToolCallApprovedAction", "approved"): "True",
    ("ChatToolCallDeniedAction", "approved"): "False",
}
EXTRA_STRUCTS: dict[str, dict[str, Any]] = {
    "MarkdownString": {
        "type": "object",
        "description": "The Markdown form of :data:`StringOrMarkdown`.",
        "properties": {"markdown": {"type": "string", "description": "Markdown source."}},
        "required": ["markdown"],
    },
}

# Tagged unions: name -> (discriminator wire key, variant classes, open?).
# Every open union gets an ``Unknown<Name>`` variant keeping the raw payload.
# The variants are read from the schemas' ``oneOf`` (named by
# ``INLINE_VARIANTS`` where inline); ``StateAction`` and the ``approved``
# split of ``chat/toolCallConfirmed`` are built from the actions.
OPEN_STATE_UNIONS = [
    "ChatOrigin", "SessionInputRequest", "ChatInputQuestion", "ChatInputAnswerValue",
    "ChatInputAnswer", "MessageAttachment", "ResponsePart", "ToolCallRiskAssessment",
    "ToolCallContributor", "ToolCallState", "ToolCallConfirmationState", "ToolResultContent",
    "Customization", "ChildCustomization", "CustomizationLoadState", "McpServerState",
    "TerminalClaim", "TerminalContentPart",
]
# Closed: an unknown discriminator is an error (``ChatSource``: the spec says
# a missing or unknown kind MUST be rejected).
CLOSED_UNIONS = ["ChangesetOperationTarget", "ReconnectResult", "ChatSource"]
UNKNOWN_NAMES = {"StateAction": "UnknownAction"}
# Unions the TypeScript sources declare but the schemas do not define.
SCHEMALESS_UNIONS = {"ReconnectResult": ["ReconnectReplayResult", "ReconnectSnapshotResult"]}
# Untagged unions, emitted as aliases (told apart by JSON type).
UNTAGGED_ALIASES = {
    "ToolInput": ("Union[str, ContentRef]",
                  "Tool input, inline (a string) or by reference (a ``ContentRef``)."),
}

# Base interfaces that are not wire types of their own: their fields are
# copied onto every variant.  ``AhpErrorDetailsMap`` is a type-level map,
# ``BaseParams`` the common shape of params.  Listed in the coverage test.
SKIPPED_DEFS = {
    "CustomizationBase", "ContainerCustomizationBase", "ChildCustomizationBase", "ToolCallBase",
    "ToolCallParameterFields", "ToolCallPostConfirmationFields", "ChatInputQuestionBase",
    "MessageAttachmentBase", "SessionInputRequestBase", "ToolCallRiskAssessmentBase",
    "ToolCallActionBase", "BaseParams", "AhpErrorDetailsMap",
}

# Module layout, mirroring the spec's channels.
MODULE_OF_STATE = {
    "common": """Icon ProtectedResourceMetadata ConfigPropertySchema ConfigSchema TextPosition
        TextRange TextSelection ContentRef FileEdit FileEditSide FileEditDiff FileEditList
        UsageInfo ErrorInfo StringOrMarkdown MarkdownString JsonPrimitive ToolInput""",
    "root": """RootState AgentInfo AgentCapabilities MultipleChatsCapability
        MultipleWorkingDirectoriesCapability SessionModelInfo ModelSelection AgentSelection
        RootConfigState""",
    "session": """SessionMetadata SessionState SessionActiveClient SessionChatInputRequest
        SessionToolConfirmationRequest SessionToolClientExecutionRequest
        SessionToolAuthenticationRequest SessionInputRequest ProjectInfo SessionSummary
        PartialSessionSummary ChangesSummary SessionConfigPropertySchema SessionConfigSchema
        SessionConfigState ToolDefinition ToolAnnotations""",
    "customizations": """CustomizationLoadingState CustomizationLoadedState
        CustomizationDegradedState CustomizationErrorState PluginCustomization
        ClientPluginCustomization DirectoryCustomization AgentCustomization SkillCustomization
        PromptCustomization RuleCustomization HookCustomization McpServerCustomization
        McpServerCustomizationApps AhpMcpUiHostCapabilities McpUiListChangedCapability
        McpUiSamplingCapability McpServerStartingState McpServerReadyState McpOAuthClient
        McpAuthRequirement McpServerAuthRequiredState McpServerErrorState McpServerStoppedState
        ChildCustomizationType CustomizationLoadState ChildCustomization Customization
        McpServerState""",
    "chat": """ChatState ChatSummary PartialChatSummary SideChatSelection PendingMessage
        UserChatOrigin ForkChatOrigin SideChatOrigin ToolChatOrigin ChatOrigin Turn ActiveTurn
        MessageOrigin Message SimpleMessageAttachment MessageEmbeddedResourceAttachment
        MessageResourceAttachment MessageAnnotationsAttachment MessageChatAttachment
        MessageAttachment MarkdownResponsePart ResourceReponsePart ToolCallResponsePart
        ReasoningResponsePart SystemNotificationResponsePart InputRequestResponsePart
        ResponsePart""",
    "input_requests": """ChatInputOption ChatInputTextQuestion ChatInputNumberQuestion
        ChatInputBooleanQuestion ChatInputSingleSelectQuestion ChatInputMultiSelectQuestion
        ChatInputRequest ChatInputTextAnswerValue ChatInputNumberAnswerValue
        ChatInputBooleanAnswerValue ChatInputSelectedAnswerValue
        ChatInputSelectedManyAnswerValue ChatInputAnswered ChatInputSkipped ChatInputQuestion
        ChatInputAnswerValue ChatInputAnswer""",
    "tool_calls": """ToolCallRiskAssessmentLoadingState ToolCallRiskAssessmentCompleteState
        ConfirmationOption ToolCallClientContributor ToolCallMcpContributor ToolCallResult
        ToolCallError ToolCallStreamingState ToolCallPendingConfirmationState
        ToolCallRunningState ToolCallAuthRequiredState ToolCallPendingResultConfirmationState
        ToolCallCompletedState ToolCallCancelledState ToolResultTextContent
        ToolResultEmbeddedResourceContent ToolResultResourceContent ToolResultFileEditContent
        TerminalCommandResult ToolResultTerminalContent ToolResultSubagentContent
        ToolCallRiskAssessment ToolCallContributor ToolCallState ToolCallConfirmationState
        ToolResultContent""",
    "terminal": """TerminalInfo TerminalClientClaim TerminalSessionClaim TerminalState
        TerminalUnclassifiedPart TerminalCommandPart TerminalClaim TerminalContentPart""",
    "changeset": """Changeset ChangesetCapabilities ChangesetState ChangesetFile
        ChangesetOperation""",
    "annotations": """AnnotationsSummary AnnotationsState Annotation AnnotationEntry""",
    "otlp": """TelemetryCapabilities""",
    "resource_watch": """ResourceWatchState ResourceChange ResourceChangeList
        PathPatternList""",
    "snapshot": """Snapshot""",
}
MODULE_DOCS = {
    "enums": "The spec's string enums and the ``SessionStatus`` bitset.",
    "common": "Structs shared by every channel: text ranges, content references, file edits, errors.",
    "root": "State of the root channel ``ahp-root://``: agents, models, terminals, host config.",
    "session": "State of a session channel ``ahp-session:/<id>``: metadata, chats catalogue, clients, input needed, config.",
    "customizations": "Session customizations: plugins, directories, agents, skills, MCP servers.",
    "chat": "State of a chat channel ``ahp-chat:/<id>``: turns, messages, response parts.",
    "input_requests": "Input requests (elicitation) raised in a chat, their questions and answers.",
    "tool_calls": "Tool calls in a chat: the seven-state lifecycle, contributors, risk assessments and results.",
    "terminal": "State of a terminal channel: content parts, claims.",
    "changeset": "State of a changeset channel: files, operations and status.",
    "annotations": "State of an annotations channel ``ahp-session:/<id>/annotations``.",
    "otlp": "Telemetry (OTLP) channel capabilities.",
    "resource_watch": "State of a resource-watch channel ``ahp-resource-watch:/<id>`` and its change events.",
    "snapshot": "``Snapshot``: a channel's state at a given ``serverSeq``.",
    "actions": "Every state action (the ``StateAction`` union), ``ActionOrigin`` and ``ActionEnvelope``.",
    "commands": "Params and results of every JSON-RPC request, in both directions.",
    "notifications": "Params of the protocol notifications.",
    "error_codes": "JSON-RPC and AHP error codes and the typed ``data`` of AHP errors.",
}
MODULE_ORDER = [
    "enums", "common", "root", "customizations", "tool_calls", "input_requests", "chat",
    "session", "terminal", "changeset", "annotations", "otlp", "resource_watch", "snapshot",
    "actions", "commands", "notifications", "error_codes",
]
SCHEMA_MODULE = {"actions": "actions", "commands": "commands",
                 "notifications": "notifications", "errors": "error_codes"}

# Streamed text: appended to by deltas, so stored in a ``TextBuffer`` (amortised
# O(len(delta)) appends, older states untouched) and read as a plain ``str``.
TEXT_BUFFER_FIELDS = {
    ("MarkdownResponsePart", "content"), ("ReasoningResponsePart", "content"),
    ("ToolCallStreamingState", "partialInput"), ("TerminalUnclassifiedPart", "value"),
    ("TerminalCommandPart", "output"),
}

FLOAT_FIELDS = {
    ("ChatInputNumberQuestion", "min"), ("ChatInputNumberQuestion", "max"),
    ("ChatInputNumberQuestion", "defaultValue"), ("ChatInputNumberAnswerValue", "value"),
    ("ToolCallRiskAssessmentCompleteState", "safety"),
}
PY_KEYWORDS = {"from", "import", "class", "def", "global", "is", "in", "not", "and", "or",
               "lambda", "with", "as", "pass", "yield", "return", "async", "await"}

ACTION_CHANNEL_PREFIX = {
    "root": "Root", "session": "Session", "chat": "Chat", "terminal": "Terminal",
    "changeset": "Changeset", "annotations": "Annotations", "resourceWatch": "ResourceWatch",
}


def snake(name: str) -> str:
    if name == "_meta":
        return "meta"
    s = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name)
    s = re.sub(r"(?<=[A-Z])([A-Z][a-z])", r"_\1", s).lower()
    if s in PY_KEYWORDS:
        s += "_"
    return s


def camel(py: str) -> str:
    head, *rest = py.rstrip("_").split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def member_name(value: str) -> str:
    s = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", value)
    return re.sub(r"[^A-Za-z0-9]+", "_", s).upper().strip("_")


def doc(text: str | None, indent: str) -> list[str]:
    if not text:
        return []
    text = re.sub(r"\{@link ([^}|]+?)\s*\|\s*([^}]+)\}", r"\2", text)
    text = re.sub(r"\{@link ([^}]+)\}", r"``\1``", text)
    text = text.replace("\\", "\\\\").replace('"""', "'''").strip()
    paras = list(text.split("\n\n"))
    lines: list[str] = []
    for i, p in enumerate(paras):
        if i:
            lines.append("")
        p_lines = p.splitlines()
        if any(line.startswith(("-", " ", "|", "`")) for line in p_lines[1:]):
            lines.extend(line.rstrip() for line in p_lines)
        else:
            lines.extend(textwrap.wrap(" ".join(line.strip() for line in p_lines),
                                       width=88 - len(indent)) or [""])
    out = [f'{indent}"""{lines[0]}'] + [f"{indent}{ln}" if ln else "" for ln in lines[1:]]
    if len(lines) == 1:
        out[0] += '"""'
    else:
        out.append(f'{indent}"""')
    return out


class Field(NamedTuple):
    """One field of a generated class, as ``@frozen(kw_only=True)`` sees it."""

    attr: str
    """The attribute (and slot) name: ``_content`` for a streamed text."""
    ann: str
    """Its annotation."""
    default: str | None = None
    """The default's expression; ``None``: required."""
    alias: str | None = None
    """The ``__init__`` parameter when it is not ``attr`` without its leading ``_``."""
    converter: str | None = None
    """The converter's name (streamed text)."""
    hashed: bool = True
    """``False``: left out of ``__hash__`` (``field(hash=False)``)."""
    eq_key: str | None = None
    """Compared (and hashed) through this key: ``JsonEq`` for open JSON values."""
    wire: str | None = None
    """The wire name kept in the metadata, when ``camel(attr)`` is not it."""
    rhs: bool = False
    """The declaration assigns a class attribute (a default or ``field(...)``)."""


# The first parameter type of each converter: what attrs annotates ``__init__`` with.
CONVERTER_PARAMETER = {"as_text": "str | TextBuffer", "optional_text": "str | TextBuffer | None"}


def type_hash(qualified: str) -> int:
    """The constant that sets a class's hashes apart from another's with equal fields.

    attrs hashes a name that differs per process; a digest of the class's
    qualified name keeps the generated source the same from run to run.
    """
    return int.from_bytes(hashlib.sha256(qualified.encode()).digest()[:8], "big", signed=True)


def runtime_lines(qualified: str, fields: list[Field]) -> list[str]:
    """The end of a class body: what ``@frozen(kw_only=True)`` would build, as source.

    attrs writes these methods when the class is created and ``compile``s
    them (about half a millisecond a class); written here, they cost only
    their bytecode.  Type checkers skip the block and see the attrs
    declaration above it; ``types/_model.py`` holds the shared pieces.
    """
    i2, i3, i4 = " " * 8, " " * 12, " " * 16
    out = ["", "    if not TYPE_CHECKING:  # what @frozen(kw_only=True) builds (see types/_model.py)"]
    dropped = [f.attr for f in fields if f.rhs]
    if dropped:
        out.append(f"{i2}del {', '.join(dropped)}")
    slots = [f'"{f.attr}"' for f in fields] + ['"__weakref__"']
    out.append(f"{i2}__slots__ = ({', '.join(slots)}{',' if len(slots) == 1 else ''})")
    specs = []
    for f in fields:
        args = [f'"{f.attr}"', f.ann]
        if f.default is not None:
            args.append(f.default)
        if f.alias is not None:
            args.append(f'alias="{f.alias}"')
        if f.converter is not None:
            args.append(f"converter={f.converter}")
        if not f.hashed:
            args.append("hash=False")
        if f.eq_key is not None:
            args.append(f"eq_key={f.eq_key}")
        if f.wire is not None:
            args.append(f'metadata={{"wire": "{f.wire}"}}')
        specs.append(f"{i3}_field({', '.join(args)}),")
    if specs:
        out += [f"{i2}__attrs_attrs__ = _fields(lambda: (", *specs, f"{i2}))"]
    else:
        out.append(f"{i2}__attrs_attrs__ = _fields(lambda: ())")
    out += [
        f"{i2}__attrs_props__ = _PROPS",
        f"{i2}__match_args__ = ()",
        f"{i2}__setattr__ = _frozen_setattrs",
        f"{i2}__delattr__ = _frozen_delattrs",
        f"{i2}__ne__ = _ne",
        f"{i2}__getstate__ = _getstate",
        f"{i2}__setstate__ = _setstate",
        f"{i2}if _REPLACE:",
        f"{i3}__replace__ = _evolve",
    ]
    # __init__: keyword-only, each value stored through object.__setattr__
    params = []
    for f in fields:
        param = f.alias or f.attr.lstrip("_")
        ann = CONVERTER_PARAMETER[f.converter] if f.converter is not None else f.ann
        params.append(f"{param}: {ann}" + (f" = {f.default}" if f.default is not None else ""))
    out += ["", f"{i2}def __init__(self{', *, ' if params else ''}{', '.join(params)}) -> None:"]
    if fields:
        out.append(f"{i3}_setattr = _setattr_of(self)")
        for f in fields:
            param = f.alias or f.attr.lstrip("_")
            value = f"{f.converter}({param})" if f.converter is not None else param
            out.append(f'{i3}_setattr("{f.attr}", {value})')
    else:
        out.append(f"{i3}pass")
    # __repr__: attrs's, with its guard against an object that contains itself
    shown = ", ".join(f"{f.attr}={{self.{f.attr}!r}}" for f in fields)
    out += [
        "", f"{i2}def __repr__(self):",
        f"{i3}seen = _repr_enter(self)",
        f"{i3}if seen is None:",
        f'{i4}return "..."',
        f"{i3}try:",
        f"""{i4}return f'{{self.__class__.__qualname__.rsplit(">.", 1)[-1]}}({shown})'""",
        f"{i3}finally:",
        f"{i4}seen.remove(id(self))",
    ]
    # __eq__ and __hash__: every field, through its key
    def key(f: Field, obj: str) -> str:
        return f"{f.eq_key}({obj}.{f.attr})" if f.eq_key is not None else f"{obj}.{f.attr}"

    out += ["", f"{i2}def __eq__(self, other):",
            f"{i3}if other.__class__ is not self.__class__:",
            f"{i4}return NotImplemented"]
    if fields:
        out.append(f"{i3}return (")
        for n, f in enumerate(fields):
            out.append(f"{i4}{'and ' if n else ''}{key(f, 'self')} == {key(f, 'other')}")
        out.append(f"{i3})")
    else:
        out.append(f"{i3}return True")
    hashed = [str(type_hash(qualified)), *(key(f, "self") for f in fields if f.hashed)]
    out += ["", f"{i2}def __hash__(self):",
            f"{i3}return hash(({', '.join(hashed)}{',' if len(hashed) == 1 else ''}))"]
    return out


class Gen:
    def __init__(self, spec: Path) -> None:
        self.defs: dict[str, dict[str, Any]] = {}
        for f in SCHEMA_FILES:
            data = json.loads((spec / "schema" / f"{f}.schema.json").read_text(encoding="utf-8"))
            for k, v in data["$defs"].items():
                if k not in self.defs:
                    self.defs[k] = v
                    self.defs[k]["_file"] = f
        for k, v in EXTRA_STRUCTS.items():
            self.defs[k] = {**v, "_file": "state"}
        for union, named in INLINE_VARIANTS.items():
            branches = self.defs[union]["oneOf"]
            if len(branches) != len(named) or any("$ref" in b for b in branches):
                raise SystemExit(f"INLINE_VARIANTS[{union!r}] no longer matches the schema")
            for branch, (name, description) in zip(branches, named, strict=True):
                self.defs[name] = {**branch, "description": description,
                                   "_file": self.defs[union]["_file"]}
        # String enums: the schema's, then the discriminator-only ones.
        STRING_ENUMS.clear()
        schema_enums = {k: v["enum"] for k, v in self.defs.items()
                        if "enum" in v and k not in NUMERIC_ENUMS}
        for name in schema_enums:
            if name in DISCRIMINATOR_ENUMS:
                raise SystemExit(f"{name} is in the schema now: drop it from DISCRIMINATOR_ENUMS")
            if name not in ENUM_ORDER:
                raise SystemExit(f"new enum {name}: add it to ENUM_ORDER")
        self.module: dict[str, str] = {}
        for mod, names in MODULE_OF_STATE.items():
            for n in names.split():
                self.module[n] = mod
        for k, v in self.defs.items():
            if k not in self.module and k not in SKIPPED_DEFS:
                self.module[k] = SCHEMA_MODULE.get(v["_file"], "common")
        self.module["URI"] = "common"
        # ActionType from the StateAction union (the first branch in
        # actions.schema.json is a dangling ``$ref``: skipped).
        self.action_types: dict[str, str] = {}
        for ref in self.defs["StateAction"]["oneOf"]:
            cls = ref.get("$ref", "").rsplit("/", 1)[-1]
            if not cls:
                continue
            if cls == "ChatToolCallConfirmedAction":
                self.action_types["chat/toolCallConfirmed"] = cls
                continue
            self.action_types[self.defs[cls]["properties"]["type"]["const"]] = cls
        for name in ENUM_ORDER:
            if name == "ActionType":
                STRING_ENUMS[name] = list(self.action_types)
            elif name in schema_enums:
                STRING_ENUMS[name] = list(schema_enums[name])
            elif name in DISCRIMINATOR_ENUMS:
                STRING_ENUMS[name] = list(DISCRIMINATOR_ENUMS[name])
            else:
                raise SystemExit(f"enum {name} has no values (neither schema nor table)")
        for e in STRING_ENUMS:
            self.module[e] = "enums"
        self.module["SessionStatus"] = "enums"
        self.module["JsonRpcErrorCode"] = "error_codes"
        self.module["AhpErrorCode"] = "error_codes"
        self.inline_defs: dict[str, dict[str, Any]] = {}
        self.text_methods: dict[str, list[tuple[str, bool, str | None]]] = {}
        self.unions: dict[str, tuple[str, list[str], bool]] = {}
        for u in [*CLOSED_UNIONS, *OPEN_STATE_UNIONS]:
            if u in INLINE_VARIANTS:
                variants = [name for name, _ in INLINE_VARIANTS[u]]
            elif u in SCHEMALESS_UNIONS:
                if u in self.defs:
                    raise SystemExit(f"{u} is in the schema now: drop it from SCHEMALESS_UNIONS")
                variants = SCHEMALESS_UNIONS[u]
            else:
                branches = self.defs[u]["oneOf"]
                if not all(b.get("$ref") for b in branches):
                    raise SystemExit(f"union {u} has inline variants: name them in INLINE_VARIANTS")
                variants = [b["$ref"].rsplit("/", 1)[-1] for b in branches]
            tag = UNION_TAGS.get(u) or self.tag_key(variants[0])
            self.unions[u] = (tag, variants, u not in CLOSED_UNIONS)
        sa_all = []
        for c in self.action_types.values():
            if c == "ChatToolCallConfirmedAction":
                sa_all += ["ChatToolCallApprovedAction", "ChatToolCallDeniedAction"]
            else:
                sa_all.append(c)
        self.unions["StateAction"] = ("type", sa_all, True)
        self.unions["ChatToolCallConfirmedAction"] = (
            "approved", ["ChatToolCallApprovedAction", "ChatToolCallDeniedAction"], False,
        )
        # The unions each variant belongs to, to find the enum of a ``const`` tag.
        self.variant_unions: dict[str, list[str]] = {}
        for u, (_, variants, _) in self.unions.items():
            for v in variants:
                self.variant_unions.setdefault(v, []).append(u)
        for u, (_, variants, _) in self.unions.items():
            # A union the layout does not place lives with its first variant.
            self.module.setdefault(u, self.module[variants[0]])
        for u, (_, _, is_open) in self.unions.items():
            if is_open:
                self.module[self.unknown_name(u)] = self.module[u]

    def unknown_name(self, union: str) -> str:
        return UNKNOWN_NAMES.get(union, f"Unknown{union}")

    def tag_key(self, cls: str) -> str:
        props = self.defs[cls]["properties"]
        for key in ("type", "kind", "status", "state"):
            if key in props:
                return key
        raise ValueError(cls)

    # -- types -------------------------------------------------------------
    def field_enum(self, owner: str, wire: str) -> str | None:
        """The enum whose values a ``const`` (or inline ``enum``) field takes, if any."""
        if (owner, wire) in FIELD_ENUMS:
            return FIELD_ENUMS[(owner, wire)]
        for u in self.variant_unions.get(owner, []):
            if self.unions[u][0] == wire and u in UNION_TAG_ENUMS:
                return UNION_TAG_ENUMS[u]
        return None

    def member(self, enum: str, value: str, where: tuple[str, str]) -> str:
        if value not in STRING_ENUMS[enum]:
            raise SystemExit(f"{where}: {value!r} is not a value of {enum}; update its table")
        return f"{enum}.{member_name(value)}"

    def py_type(self, owner: str, wire: str, schema: dict[str, Any]) -> tuple[str, str | None]:
        """Return (annotation, literal default) for a property schema."""
        key = (owner, wire)
        if key in FIELD_TYPE_OVERRIDES:
            return FIELD_TYPE_OVERRIDES[key], LITERAL_DEFAULTS.get(key)
        if key in INLINE_NAMES:
            name = INLINE_NAMES[key]
            self.inline_defs.setdefault(name, schema)
            return name, None
        consts = ([schema["const"]] if "const" in schema else
                  [b["const"] for b in schema["oneOf"]]
                  if "oneOf" in schema and all("const" in b for b in schema["oneOf"]) else
                  schema["enum"] if schema.get("type") == "string" and "enum" in schema else None)
        if consts is not None:
            enum = self.field_enum(owner, wire)
            tag = wire in ("type", "kind", "status", "state")
            if enum is None:
                if tag and len(consts) == 1:
                    return f'Literal["{consts[0]}"]', f'"{consts[0]}"'
                if len(consts) == 1:
                    return "str", f'"{consts[0]}"'
                return "str", None  # an inline literal union (``Icon.theme``): kept open
            members = [self.member(enum, c, key) for c in consts]
            if tag and key not in FIELD_ENUMS:
                return f"Literal[{', '.join(members)}]", members[0] if len(members) == 1 else None
            return f"{enum} | str", None
        if "$ref" in schema:
            ref = schema["$ref"].rsplit("/", 1)[-1]
            if ref in STRING_ENUMS:
                values = STRING_ENUMS[ref]
                # A one-value enum (``ToolCallRiskAssessmentKind``) defaults to it.
                return f"{ref} | str", (self.member(ref, values[0], key) if len(values) == 1 else None)
            return ref, None
        if "oneOf" in schema:
            raise ValueError(key)
        t = schema.get("type")
        if t == "string":
            return "str", None
        if t == "number":
            return ("float" if key in FLOAT_FIELDS else "int"), None
        if t == "boolean":
            return "bool", None
        if t == "array":
            inner, _ = self.py_type(owner, wire, schema["items"]) if schema["items"] else ("Any", None)
            return f"tuple[{inner}, ...]", None
        if t == "object":
            ap = schema.get("additionalProperties")
            if ap:
                inner, _ = self.py_type(owner, wire, ap)
                return f"Mapping[str, {inner}]", None
            if "properties" in schema:
                raise ValueError(f"unnamed inline object {key}")
            return "Mapping[str, Any]", None
        if schema == {} or set(schema) <= {"description"}:
            return "Any", None
        raise ValueError(f"{key}: {schema}")

    # -- emit ----------------------------------------------------------------
    def struct_lines(self, name: str, schema: dict[str, Any]) -> tuple[list[str], set[str]]:
        props = schema.get("properties", {})
        required = set(schema.get("required", []))
        lines = ["", "", "@frozen(kw_only=True)", f"class {name}:"]
        lines += doc(schema.get("description") or f"The ``{name}`` structure.", "    ")
        refs: set[str] = set()
        fields: list[Field] = []
        ordered = sorted(props.items(), key=lambda kv: (kv[0] not in ("type", "kind", "status", "state") or "Literal" not in self.py_type(name, kv[0], kv[1])[0]))
        for wire, ps in ordered:
            ann, default = self.py_type(name, wire, ps)
            refs |= set(re.findall(r"[A-Z][A-Za-z0-9]+", ann))
            py = snake(wire)
            meta = "" if camel(py) == wire else f'metadata={{"wire": "{wire}"}}'
            is_req = wire in required
            unhashable = ann.startswith("Mapping") or ann == "Any" or "Mapping[" in ann
            args = []
            if default is not None:
                args.append(f"default={default}")
            elif not is_req:
                ann = f"{ann} | None"
                args.append("default=None")
            if unhashable:
                args.append("hash=False")
            if "Any" in ann or "JsonPrimitive" in ann:
                # JSON equality (``true`` is not ``1``) for open JSON values.
                args.append("eq=JsonEq")
            if meta:
                args.append(meta)
            if (name, wire) in TEXT_BUFFER_FIELDS:
                lines += self.text_buffer_field(name, wire, py, is_req, ps)
                fields.append(Field(
                    attr=f"_{py}", ann="TextBuffer" if is_req else "TextBuffer | None",
                    default=None if is_req else "None", alias=py, wire=wire, rhs=True,
                    converter="as_text" if is_req else "optional_text",
                ))
                continue
            rhs = f" = field({', '.join(args)})" if args else ""
            if args == ["default=None"]:
                rhs = " = None"
            elif default is not None and args == [f"default={default}"]:
                rhs = f" = {default}"
            lines.append(f"    {py}: {ann}{rhs}")
            lines += doc(ps.get("description"), "    ")
            fields.append(Field(
                attr=py, ann=ann, default=default if default is not None else (
                    None if is_req else "None"),
                hashed=not unhashable, eq_key="JsonEq" if "eq=JsonEq" in args else None,
                wire=wire if meta else None, rhs=bool(rhs),
            ))
        if not props:
            lines.append("")
        lines += self.text_method_lines(name)
        lines += runtime_lines(f"{PACKAGE}.{self.module[name]}.{name}", fields)
        return lines, refs

    def text_buffer_field(self, name: str, wire: str, py: str, is_req: bool,
                          ps: dict[str, Any]) -> list[str]:
        self.text_methods.setdefault(name, []).append((py, is_req, ps.get("description")))
        if is_req:
            return [f'    _{py}: TextBuffer = field(alias="{py}", converter=as_text, '
                    f'metadata={{"wire": "{wire}"}})']
        return [f'    _{py}: TextBuffer | None = field(alias="{py}", default=None, '
                f'converter=optional_text, metadata={{"wire": "{wire}"}})']

    def text_method_lines(self, name: str) -> list[str]:
        out: list[str] = []
        for py, is_req, desc in self.text_methods.get(name, []):
            ret = "str" if is_req else "str | None"
            out += ["", "    @property", f"    def {py}(self) -> {ret}:"]
            out += doc(desc, "        ")
            if is_req:
                out.append(f"        return self._{py}.value")
            else:
                out += [f"        buf = self._{py}", "        return None if buf is None else buf.value"]
            out += ["", f"    def with_{py}_appended(self, text: str) -> {name}:",
                    f'        """A copy with ``text`` appended to ``{py}``, in time proportional to ``text``."""']
            if is_req:
                out.append(f"        return evolve(self, {py}=self._{py}.appended(text))")
            else:
                out += [f"        buf = self._{py}",
                        f"        return evolve(self, {py}=TextBuffer.of(text) if buf is None else buf.appended(text))"]
        return out

    def union_lines(self, name: str) -> tuple[list[str], set[str]]:
        tag, variants, is_open = self.unions[name]
        out: list[str] = []
        refs = set(variants)
        members = list(variants)
        if is_open:
            unk = self.unknown_name(name)
            members.append(unk)
            out += ["", "", "@frozen(kw_only=True)", f"class {unk}:",
                    f'    """A ``{name}`` whose ``{tag}`` this library does not know.',
                    "",
                    "    Decoding keeps the whole wire object in ``raw``; encoding writes it back",
                    '    verbatim, so values from newer peers survive a round trip."""',
                    f"    {snake(tag)}: str",
                    f'    """The unrecognised ``{tag}`` value."""',
                    "    raw: Mapping[str, Any] = field(hash=False, eq=JsonEq)",
                    '    """The whole wire object, as received."""']
            out += runtime_lines(f"{PACKAGE}.{self.module[unk]}.{unk}", [
                Field(attr=snake(tag), ann="str"),
                Field(attr="raw", ann="Mapping[str, Any]", hashed=False, eq_key="JsonEq",
                      rhs=True),
            ])
        desc = self.defs.get(name, {}).get("description")
        out += ["", "", f"{name}: TypeAlias = Union[", *[f"    {m}," for m in members], "]"]
        out += doc(desc or f"One of the ``{name}`` variants, chosen by ``{tag}``.", "")
        return out, refs

    def enum_lines(self, name: str) -> list[str]:
        vals = STRING_ENUMS[name]
        desc = self.defs.get(name, {}).get("description") or f"The ``{name}`` values."
        lines = ["", "", f"class {name}(str, Enum):"]
        lines += doc(desc, "    ")
        for v in vals:
            lines.append(f'    {member_name(v)} = "{v}"')
        return lines

    def build(self) -> dict[str, Any]:
        bodies: dict[str, list[str]] = {m: [] for m in MODULE_ORDER}
        refs: dict[str, set[str]] = {m: set() for m in MODULE_ORDER}
        names: dict[str, list[str]] = {m: [] for m in MODULE_ORDER}
        # enums
        for e in STRING_ENUMS:
            bodies["enums"] += self.enum_lines(e)
            names["enums"].append(e)
        bodies["enums"] += [
            "", "", "class SessionStatus(IntFlag):",
            '    """Status bitset of sessions and chats.',
            "",
            "    Bits 0-4 hold one activity value (``IDLE``, ``ERROR``, ``IN_PROGRESS``,",
            "    ``INPUT_NEEDED``); bits 5 and up are independent flags (``IS_READ``,",
            "    ``IS_ARCHIVED``).  Unknown bits from newer peers are kept.",
            '    """',
            "", "    IDLE = 1", "    ERROR = 2", "    IN_PROGRESS = 8", "    INPUT_NEEDED = 24",
            "    IS_READ = 32", "    IS_ARCHIVED = 64",
            "", "", "ACTIVITY_MASK: Final = 31",
            '"""The bits of ``SessionStatus`` that hold the activity value."""',
        ]
        names["enums"] += ["SessionStatus", "ACTIVITY_MASK"]
        special = {"StringOrMarkdown", "JsonPrimitive", "ChildCustomizationType", "URI",
                   "JsonRpcErrorCode", "AhpErrorCode", "ProtocolNotification", "ChatAction",
                   "SessionStatus", *UNTAGGED_ALIASES}
        emitted: set[str] = set()
        pending = [k for k in self.defs if k not in SKIPPED_DEFS and k not in special
                   and k not in STRING_ENUMS and not k.startswith("ActionType")]
        # Keep union aliases after their variants: emit structs first, unions at module end.
        union_names = list(self.unions)
        i = 0
        while i < len(pending) or self.inline_defs.keys() - emitted:
            if i < len(pending):
                name = pending[i]
                i += 1
            else:
                name = sorted(self.inline_defs.keys() - emitted)[0]
            if name in emitted or name in self.unions:
                continue
            schema = self.defs.get(name) or self.inline_defs[name]
            if name in INLINE_DOCS:  # the field's description would say what holds it
                schema = {**schema, "description": INLINE_DOCS[name]}
            if "oneOf" in schema:
                raise ValueError(f"untreated union {name}")
            mod = self.module[name]
            lines, r = self.struct_lines(name, schema)
            bodies[mod] += lines
            refs[mod] |= r
            names[mod].append(name)
            emitted.add(name)
        bodies["common"] += ["", "", "URI: TypeAlias = str", '"""A URI string."""',
                             "", "", "StringOrMarkdown: TypeAlias = Union[str, MarkdownString]",
                             '"""Plain text, or ``MarkdownString`` to be rendered as Markdown."""',
                             "", "", "JsonPrimitive: TypeAlias = Union[str, int, float, bool, None]",
                             '"""A primitive JSON value."""']
        names["common"] += ["URI", "StringOrMarkdown", "JsonPrimitive"]
        for alias, (value, description) in UNTAGGED_ALIASES.items():
            mod = self.module[alias]
            bodies[mod] += ["", "", f"{alias}: TypeAlias = {value}", f'"""{description}"""']
            refs[mod] |= set(re.findall(r"[A-Z][A-Za-z0-9]+", value)) - {"Union"}
            names[mod].append(alias)
        for u in union_names:
            mod = self.module[u]
            lines, r = self.union_lines(u)
            bodies[mod] += lines
            refs[mod] |= r
            names[mod].append(u)
            if self.unions[u][2]:
                names[mod].append(self.unknown_name(u))
        bodies["customizations"] += [
            "", "", "ChildCustomizationType: TypeAlias = Literal[",
            "    CustomizationType.AGENT, CustomizationType.SKILL, CustomizationType.PROMPT,",
            "    CustomizationType.RULE, CustomizationType.HOOK, CustomizationType.MCP_SERVER,",
            "]", '"""The ``CustomizationType`` values a child customization may have."""']
        names["customizations"].append("ChildCustomizationType")
        # per-channel action aliases
        for chan, prefix in ACTION_CHANNEL_PREFIX.items():
            members = [c for c in self.unions["StateAction"][1] if c.startswith(prefix)
                       and not (False)]
            if prefix == "Chat":
                members = [c for c in members if c.startswith("Chat")]
            alias = f"{prefix}Action"
            bodies["actions"] += ["", "", f"{alias}: TypeAlias = Union[",
                                  *[f"    {m}," for m in members], "    UnknownAction,", "]",
                                  f'"""Every ``{chan}/*`` action, plus ``UnknownAction``."""']
            names["actions"].append(alias)
        bodies["notifications"] += [
            "", "", "ProtocolNotification: TypeAlias = Union[",
            *[f"    {r['$ref'].rsplit('/', 1)[-1]}," for r in self.defs["ProtocolNotification"]["oneOf"]],
            "]", '"""The params of any of the seven protocol notifications."""']
        names["notifications"].append("ProtocolNotification")
        bodies["snapshot"] += [
            "", "", "SnapshotState: TypeAlias = Union[",
            "    RootState, SessionState, ChatState, TerminalState, ChangesetState,",
            "    ResourceWatchState, AnnotationsState,", "]",
            '"""The state of any stateful channel (decoded by channel URI, else by shape)."""']
        names["snapshot"].append("SnapshotState")
        refs["snapshot"] |= {"RootState", "SessionState", "ChatState", "TerminalState",
                             "ChangesetState", "ResourceWatchState", "AnnotationsState"}
        bodies["error_codes"] = self.error_code_lines() + bodies["error_codes"]
        names["error_codes"] = ["JsonRpcErrorCode", "AhpErrorCode"] + names["error_codes"]
        # registry of wire tags for the converter
        reg = ["", "", "# Tagged unions: alias -> (wire tag key, {tag value: variant}, unknown variant).",
               "TAGGED_UNIONS: Final[dict[Any, tuple[str, dict[Any, type], type | None]]] = {"]
        for u, (tag, variants, is_open) in self.unions.items():
            if u == "StateAction":
                continue
            entries = []
            for v in variants:
                for t in self.tags_of(v, tag):
                    entries.append(f"{t}: {v}")
            unk = self.unknown_name(u) if is_open else "None"
            reg.append(f'    {u}: ("{tag}", {{{", ".join(entries)}}}, {unk}),')
        reg.append("}")
        action_entries = []
        for v in self.unions["StateAction"][1]:
            if v in ("ChatToolCallApprovedAction", "ChatToolCallDeniedAction"):
                continue
            (t,) = self.tags_of(v, "type")
            action_entries.append(f"    {t}: {v},")
        action_entries.append("    ActionType.CHAT_TOOL_CALL_CONFIRMED: ChatToolCallConfirmedAction,")
        reg += ["", "", "ACTION_CLASSES: Final[dict[str, Any]] = {", *action_entries, "}",
                '"""Action ``type`` -> class (or, for ``chat/toolCallConfirmed``, the union)."""']
        return {"bodies": bodies, "refs": refs, "names": names, "registry": reg}

    def tags_of(self, cls: str, tag: str) -> list[str]:
        if tag == "approved":
            return ["True"] if "Approved" in cls else ["False"]
        schema = self.defs.get(cls) or self.inline_defs[cls]
        ann, _ = self.py_type(cls, tag, schema["properties"][tag])
        inner = ann[len("Literal["):-1]
        return [x.strip() for x in inner.split(",")]

    def error_code_lines(self) -> list[str]:
        return [
            "", "", "class JsonRpcErrorCode(IntEnum):",
            '    """Standard JSON-RPC 2.0 error codes."""', "",
            "    PARSE_ERROR = -32700", "    INVALID_REQUEST = -32600",
            "    METHOD_NOT_FOUND = -32601", "    INVALID_PARAMS = -32602",
            "    INTERNAL_ERROR = -32603",
            "", "", "class AhpErrorCode(IntEnum):",
            '    """AHP application error codes."""', "",
            "    SESSION_NOT_FOUND = -32001", "    PROVIDER_NOT_FOUND = -32002",
            "    SESSION_ALREADY_EXISTS = -32003", "    TURN_IN_PROGRESS = -32004",
            "    UNSUPPORTED_PROTOCOL_VERSION = -32005", "    CONTENT_NOT_FOUND = -32006",
            "    AUTH_REQUIRED = -32007", "    NOT_FOUND = -32008", "    PERMISSION_DENIED = -32009",
            "    ALREADY_EXISTS = -32010", "    CONFLICT = -32011",
        ]


# what the generated class bodies take from ``types/_model.py`` (hand-written: the
# run-time side of the classes' ``@frozen(kw_only=True)``)
MODEL_NAMES = [
    "_PROPS", "_REPLACE", "_evolve", "_field", "_fields", "_frozen_delattrs", "_frozen_setattrs",
    "_getstate", "_ne", "_repr_enter", "_setattr_of", "_setstate",
]



SLOTS_ORDER = "\n# ruff: noqa: RUF023 - each __slots__ lists the fields in their order, as attrs does\n"
HEADER = '''"""{doc}

Generated by ``tools/gen_model.py`` from the AHP {version} JSON Schemas; do not edit.
"""

from __future__ import annotations
'''


def write(spec: Path, out: Path = OUT, *, quiet: bool = False) -> None:
    g = Gen(spec)
    res = g.build()
    bodies, refs, names = res["bodies"], res["refs"], res["names"]
    version = json.loads((spec / "registry.json").read_text())["protocolVersion"]
    owner = {n: m for m, ns in names.items() for n in ns}
    out.mkdir(parents=True, exist_ok=True)
    for mod in MODULE_ORDER:
        body = "\n".join(bodies[mod])
        used = {r for r in refs[mod] if r in owner and owner[r] != mod}
        # Enums give class-level defaults and union aliases are evaluated at
        # import time: those imports are real.  Everything else is only an
        # annotation, imported for type checkers and bound late by
        # ``types/__init__`` (the channel modules refer to each other).
        runtime = {r for r in used if owner[r] == "enums" or mod == "snapshot"}
        typing_names = [n for n in ("Any", "Final", "Literal", "Mapping", "TypeAlias", "Union")
                        if re.search(rf"\b{n}\b", body)]
        imports = []
        if "Mapping" in typing_names:
            imports.append("from collections.abc import Mapping")
        if mod == "enums":
            imports.append("from enum import Enum, IntFlag")
        if mod == "error_codes":
            imports.append("from enum import IntEnum")
        tn = [n for n in typing_names if n != "Mapping"]
        model = "@frozen" in body
        if used - runtime or model:
            tn.append("TYPE_CHECKING")
        if tn:
            imports.append(f"from typing import {', '.join(sorted(tn))}")
        # The attrs declarations are for type checkers; at run time each class
        # body carries what attrs would build (``runtime_lines``), with the
        # shared pieces from ``_model``.
        attrs_names = ["frozen"] + (["field"] if re.search(r"(?<![\w.])field\(", body) else [])
        if "evolve(" in body:
            imports += ["", "from attrs import evolve"]
        if "JsonEq" in body:
            imports.append("")
            imports.append("from .._json import JsonEq")
        if "TextBuffer" in body:
            imports.append("")
            imports.append("from ._text import TextBuffer, as_text" + (
                ", optional_text" if "optional_text" in body else ""))

        def import_lines(names_: set[str], indent: str) -> list[str]:
            by_mod: dict[str, list[str]] = {}
            for r in sorted(names_):
                by_mod.setdefault(owner[r], []).append(r)
            out = []
            for m in sorted(by_mod, key=MODULE_ORDER.index):
                joined = ", ".join(by_mod[m])
                line = f"{indent}from .{m} import {joined}"
                if len(line) > 99:
                    inner = "".join(f"{indent}    {n},\n" for n in by_mod[m])
                    line = f"{indent}from .{m} import (\n{inner}{indent})"
                out.append(line)
            return out

        if runtime:
            imports.append("")
            imports += import_lines(runtime, "")
        checking = import_lines(used - runtime, "    ")
        if model:
            checking = [f"    from attrs import {', '.join(sorted(attrs_names))}",
                        *([""] if checking else []), *checking]
        if checking:
            imports += ["", "if TYPE_CHECKING:", *checking]
        if model:
            imports += ["else:", "    from ._model import (",
                        *(f"        {n}," for n in sorted([*MODEL_NAMES, *attrs_names])), "    )"]
        all_names = names[mod]
        text = HEADER.format(doc=MODULE_DOCS[mod], version=version)
        if model:
            text += SLOTS_ORDER
        text += "\n" + "\n".join(imports) + "\n"
        text += "\n__all__ = [\n" + "".join(f'    "{n}",\n' for n in all_names) + "]\n"
        text += body + "\n"
        (out / f"{mod}.py").write_text(text)
    tag_refs = set(re.findall(r"\b[A-Z][A-Za-z0-9]+\b", "\n".join(res["registry"]))) & owner.keys()
    by_mod: dict[str, list[str]] = {}
    for r in sorted(tag_refs):
        by_mod.setdefault(owner[r], []).append(r)
    tag_text = HEADER.format(doc="Wire tags of the tagged unions, for the converter.", version=version)
    tag_text += "\nfrom typing import Any, Final\n\n"
    for m in sorted(by_mod, key=MODULE_ORDER.index):
        tag_text += f"from .{m} import (\n" + "".join(f"    {n},\n" for n in by_mod[m]) + ")\n"
    tag_text += "\n".join(res["registry"]) + "\n"
    (out / "_tags.py").write_text(tag_text)
    init = ['"""Every AHP type, importable from one place.', "",
            "The model is split by channel (``types.chat``, ``types.session``, ...); this",
            "module re-exports all of it.  Generated by ``tools/gen_model.py``; do not edit.",
            '"""', ""]
    every: list[str] = []
    hand_written = {"messages": ["AhpErrorResponse", "JsonRpcError", "JsonRpcErrorResponse",
                                 "JsonRpcId", "JsonRpcMessage", "JsonRpcNotification",
                                 "JsonRpcRequest", "JsonRpcSuccessResponse"]}
    for mod, mod_names in hand_written.items():
        init.append(f"from .{mod} import (\n" + "".join(f"    {n},\n" for n in mod_names) + ")")
        every += mod_names
    for mod in MODULE_ORDER:
        init.append(f"from . import {mod}")
        init.append(f"from .{mod} import (\n" + "".join(f"    {n},\n" for n in names[mod]) + ")")
        every += names[mod]
    init += [
        "",
        "from . import _tags",
        "",
        "# Bind the names each channel module imports only for type checkers, so that",
        "# annotations resolve at run time (cattrs, typing.get_type_hints): every name",
        "# a module does not define or import itself.",
        "_every = {_name: globals()[_name] for _name in __all__}",
        "for _mod in (" + ", ".join(MODULE_ORDER) + "):",
        "    _ns = vars(_mod)",
        "    _ns.update({_name: _value for _name, _value in _every.items() if _name not in _ns})",
        "del _every, _mod, _ns",
    ]
    init[6:6] = ["__all__ = ["] + [f'    "{n}",' for n in sorted(every)] + ["]", ""]
    init += [""]
    (out / "__init__.py").write_text("\n".join(init))
    if not quiet:
        print(f"wrote {len(MODULE_ORDER)} modules, {len(every)} names to {out}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="gen_model.py",
        description="Generate agenthost_protocol/types/ from the AHP JSON Schemas.",
    )
    parser.add_argument(
        "spec", type=Path, nargs="?", default=BUNDLED_SPEC,
        help="a spec folder holding schema/*.schema.json and registry.json "
             "(default: the bundled tests/data/ahp-spec)",
    )
    parser.add_argument("--out", type=Path, default=OUT,
                        help="where to write the modules (default: agenthost_protocol/types)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if --out differs from what would be written")
    args = parser.parse_args(argv)
    for needed in [*(f"schema/{f}.schema.json" for f in SCHEMA_FILES), "registry.json"]:
        if not (args.spec / needed).is_file():
            parser.error(f"{args.spec / needed} does not exist: SPEC must be a spec folder")
    if not args.check:
        write(args.spec, args.out)
        return 0
    with tempfile.TemporaryDirectory() as scratch:
        write(args.spec, Path(scratch), quiet=True)
        stale = sorted(
            p.name for p in Path(scratch).iterdir()
            if not (args.out / p.name).is_file()
            or (args.out / p.name).read_bytes() != p.read_bytes()
        )
    for name in stale:
        print(f"{args.out / name} differs from the generator's output")
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
