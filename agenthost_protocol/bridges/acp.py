"""The ACP bridge: one ACP agent session as one AHP chat, a pure sans-I/O mapper.

:class:`AcpBridge` sits between an agent speaking the Agent Client Protocol
(ACP, JSON-RPC over stdio) and a :class:`~agenthost_protocol.host.Host`.  It
owns no process, socket, task, clock or id generator: every input is a call
and every output is a returned list of :data:`BridgeOutput` values, in the
order they must be carried out:

* agent → AHP: ``session/update`` and ``elicitation/complete`` notifications
  (:meth:`AcpBridge.receive_notification`), the agent's requests
  ``session/request_permission`` and ``elicitation/create``
  (:meth:`AcpBridge.receive_request`), and the answers to the requests the
  bridge asked the embedder to send (:meth:`AcpBridge.receive_response`,
  :meth:`AcpBridge.receive_error`) become :class:`AhpDispatch` outputs (for
  ``Host.dispatch``) and, for the agent's requests, an :class:`AcpReply`
  once a client decided;
* AHP → agent: the client actions the host applied (``ClientActionApplied``,
  :meth:`AcpBridge.receive_client_action`) become :class:`AcpRequest`
  (``session/prompt``, ``session/set_mode``, ``session/set_config_option``),
  :class:`AcpNotification` (``session/cancel``) and :class:`AcpReply`
  (permission outcomes, elicitation answers).

Why raw JSON: the bridge reads the agent's messages as decoded JSON
(``json.loads`` values), not as the ACP SDK's pydantic models.  The core
package must not import the SDK (an optional extra), an agent built against
another schema version sends fields or variants a pinned SDK rejects or
drops, and a mapper that is total over *any* JSON value can be tested (and
property-tested) without the SDK.  The SDK is used only by the runner
(:mod:`agenthost_protocol.agent.acp_runner`) for its stdio connection.

Why its own state: the bridge keeps a small mirror of what the AHP chat looks
like (the active turn, its open text part, each tool call's AHP status,
pending permission and elicitation requests, usage, activity, config values)
so it never emits an action the reducers would drop: no ``chat/delta``
without its part, no ``chat/toolCallComplete`` from ``streaming``, no second
``chat/toolCallReady`` over a confirmation a client has not answered yet, no
action that sets a value to what it already is.  The mirror stays true only
if *every* action the host applies to the chat and session goes through the
bridge: the server actions it emits, and the client actions the embedder
feeds back with :meth:`AcpBridge.receive_client_action`.

Totality: an agent message the bridge does not understand (an unknown
method or ``sessionUpdate``, a malformed payload, an event for a turn that
is over) is logged with :mod:`logging` and skipped; no input raises.  A
request it cannot map is still answered (``cancelled``, ``cancel`` or a
JSON-RPC error), so the agent never waits forever.

``docs/bridges.md`` has the mapping tables and what the bridge leaves out.
"""

from __future__ import annotations

import base64
import binascii
import difflib
import json
import logging
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from pathlib import PurePosixPath, PureWindowsPath
from typing import Final, Protocol, TypeAlias
from urllib.parse import quote

from attrs import field, frozen

from .. import types as t
from .._json import json_equal
from ..reducers._clock import iso_timestamp

__all__ = [
    "ERROR_TEXT_LIMIT",
    "MODEL_KEY",
    "MODE_KEY",
    "AcpBridge",
    "AcpConfigOption",
    "AcpErrorReply",
    "AcpNotification",
    "AcpReply",
    "AcpRequest",
    "AcpSessionSetup",
    "AhpDispatch",
    "BridgeOutput",
    "ContentStore",
    "IdFactory",
    "JsonObject",
    "PromptCapabilities",
    "RequestId",
    "acp_error_message",
    "data_uri_store",
]

log = logging.getLogger(__name__)

JsonObject: TypeAlias = Mapping[str, object]
"""A decoded JSON object (what ``json.loads`` gives for ``{...}``)."""

RequestId: TypeAlias = int | str
"""A JSON-RPC request id, as the agent sent it."""

IdFactory: TypeAlias = Callable[[str], str]
"""Makes a fresh id, unique within the chat, for a ``kind``: ``"part"``
(markdown and reasoning parts), ``"input"`` (input requests) or ``"turn"``
(turns the bridge starts for queued messages)."""


class ContentStore(Protocol):
    """Where the bridge puts bytes it cannot carry inline: returns a URI for them.

    Called for images, audio and embedded resources of agent messages
    (``contentRef`` parts) and for both sides of a diff (``FileEdit``
    ``ContentRef``\\ s).  A host serves the URIs through ``resourceRead``.
    """

    def __call__(self, data: bytes, content_type: str | None) -> str: ...


def data_uri_store(data: bytes, content_type: str | None) -> str:
    """The default :class:`ContentStore`: an RFC 2397 ``data:`` URI holding the bytes.

    Needs no storage, at the price of carrying the bytes in the state; hosts
    that keep long transcripts should pass a real store.
    """
    mime = content_type or "application/octet-stream"
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


# ─── Outputs ───────────────────────────────────────────────────────────────────


@frozen
class AhpDispatch:
    """Dispatch ``action`` on ``channel`` (``Host.dispatch``)."""

    channel: str
    action: t.StateAction


@frozen
class AcpRequest:
    """Send a request to the agent; feed its answer back with ``token``.

    ``token`` is opaque and unique per bridge: pass it to
    :meth:`AcpBridge.receive_response` (the ``result``) or
    :meth:`AcpBridge.receive_error`.
    """

    token: str
    method: str
    params: JsonObject = field(hash=False)


@frozen
class AcpNotification:
    """Send a notification to the agent."""

    method: str
    params: JsonObject = field(hash=False)


@frozen
class AcpReply:
    """Answer the agent's request ``request_id`` with ``result``."""

    request_id: RequestId
    result: JsonObject = field(hash=False)


@frozen
class AcpErrorReply:
    """Answer the agent's request ``request_id`` with a JSON-RPC error."""

    request_id: RequestId
    code: int
    message: str


BridgeOutput: TypeAlias = AhpDispatch | AcpRequest | AcpNotification | AcpReply | AcpErrorReply
"""What a bridge call returns, in order."""


# ─── Setup: what the agent said at initialize and session/new ───────────────


@frozen
class PromptCapabilities:
    """What the agent accepts in ``session/prompt`` besides text and resource links."""

    image: bool = False
    audio: bool = False
    embedded_context: bool = False

    @classmethod
    def from_initialize(cls, result: object) -> PromptCapabilities:
        """Read ``agentCapabilities.promptCapabilities`` of an ``initialize`` result."""
        caps = _obj(_get(_obj(result), "agentCapabilities"))
        prompt = _obj(_get(caps, "promptCapabilities"))
        return cls(
            image=_get(prompt, "image") is True,
            audio=_get(prompt, "audio") is True,
            embedded_context=_get(prompt, "embeddedContext") is True,
        )


MODE_KEY: Final = "mode"
"""The session config key of the agent's legacy session modes (``session/set_mode``)."""

MODEL_KEY: Final = "model"
"""The session config key of the agent's legacy model list (``session/new``'s
``models``, switched by ``session/set_model``), when no config option is the model."""

ERROR_TEXT_LIMIT: Final = 4096
"""The most UTF-8 bytes of an agent's error text that reach an ``ErrorInfo``: an
agent may put a whole HTTP body (or anything) in its error's ``data``."""


def acp_error_message(
    code: int, message: str, data: object = None, *, limit: int = ERROR_TEXT_LIMIT
) -> str:
    """A JSON-RPC error of the agent as text for a person: ``MESSAGE (acp:CODE): DETAIL``.

    Agents built on the ACP SDKs answer nearly every failure with the generic
    ``-32603 Internal error`` and put the real cause in ``data``: ``details``
    (the TypeScript SDK; Qwen Code), ``message`` (Codex) or a plain string.
    Without it the user reads "Internal error" and nothing else.  The detail
    is left out when it only repeats the message; the whole text is cut to
    ``limit`` UTF-8 bytes.
    """
    obj = _obj(data)
    detail = (_nonblank(_get(obj, "details")) or _nonblank(_get(obj, "message"))
              or _nonblank(data))
    text = f"{message.strip() or 'Error'} (acp:{code})"
    if detail is not None and detail != message.strip():
        text += f": {detail}"
    return _cut(text, limit)


def _nonblank(value: object) -> str | None:
    return value.strip() or None if isinstance(value, str) else None


def _cut(text: str, limit: int) -> str:
    encoded = text.encode("utf-8", "surrogatepass")
    if len(encoded) <= limit:
        return text
    # on a character boundary, with room for the ellipsis
    return encoded[: max(0, limit - 3)].decode("utf-8", "ignore") + "\u2026"


def _bounded_json(value: object, limit: int = ERROR_TEXT_LIMIT) -> object:
    """``value`` if its JSON is at most ``limit`` bytes, else ``None``: an agent's
    error ``data`` is kept in ``_meta`` for tools, but not at any size."""
    if value is None:
        return None
    try:
        size = len(json.dumps(value, ensure_ascii=False, default=str).encode("utf-8",
                                                                           "surrogatepass"))
    except (TypeError, ValueError, RecursionError):
        return None
    return value if size <= limit else None


@frozen
class AcpConfigOption:
    """One ACP session config option (an entry of ``configOptions``)."""

    id: str
    name: str
    kind: str
    """``select`` or ``boolean``."""
    category: str | None
    """``mode``, ``model``, ``model_config``, ``thought_level`` ... (a UX hint)."""
    value: str | bool
    choices: tuple[tuple[str, str, str | None], ...]
    """The (value, name, description) of each choice of a select."""


@frozen
class AcpSessionSetup:
    """What ``session/new`` told about the session: its config and its models.

    Build it with :meth:`from_new_session`, create the AHP session with
    :attr:`config`, list :meth:`models` in the root state, and give it to
    the :class:`AcpBridge`.
    """

    options: tuple[AcpConfigOption, ...] = ()
    modes: tuple[tuple[str, str, str | None], ...] = ()
    """The legacy session modes (id, name, description); empty when the agent has none
    or a config option already uses the key ``mode``."""
    current_mode: str | None = None
    legacy_models: tuple[tuple[str, str, str | None], ...] = ()
    """The models of ``session/new``'s unstable ``models`` field (modelId, name,
    description), which Gemini CLI sends instead of a model config option; empty when
    a config option is the model picker or uses the key ``model``."""
    current_model: str | None = None

    @classmethod
    def from_new_session(cls, result: object) -> AcpSessionSetup:
        """Read ``configOptions`` and ``modes`` of a ``session/new`` (or load) result."""
        res = _obj(result)
        options = _parse_options(_get(res, "configOptions"))
        modes: tuple[tuple[str, str, str | None], ...] = ()
        current: str | None = None
        state = _obj(_get(res, "modes"))
        if state is not None and all(o.id != MODE_KEY for o in options):
            current = _str(state, "currentModeId")
            found = []
            for raw in _list(state, "availableModes"):
                mode = _obj(raw)
                mode_id = _str(mode, "id")
                if mode_id:
                    name = _str(mode, "name") or mode_id
                    found.append((mode_id, name, _str(mode, "description")))
            modes = tuple(found)
            if current is None and modes:
                current = modes[0][0]
        models: tuple[tuple[str, str, str | None], ...] = ()
        current_model: str | None = None
        listed = _obj(_get(res, "models"))
        if listed is not None and all(o.id != MODEL_KEY and o.category != "model"
                                      for o in options):
            found_models = []
            for raw in _list(listed, "availableModels"):
                model = _obj(raw)
                model_id = _str(model, "modelId")
                if model_id:
                    found_models.append((model_id, _str(model, "name") or model_id,
                                         _str(model, "description")))
            models = tuple(found_models)
            current_model = _str(listed, "currentModelId")
            if models and current_model not in {m[0] for m in models}:
                current_model = models[0][0]
        return cls(options=options, modes=modes, current_mode=current,
                   legacy_models=models, current_model=current_model if models else None)

    @property
    def model_option(self) -> AcpConfigOption | None:
        """The config option of category ``model`` (the agent's model picker), if any."""
        return next((o for o in self.options if o.category == "model"), None)

    @property
    def model_key(self) -> str | None:
        """The config key that holds the agent's model: the model option's id, else
        :data:`MODEL_KEY` for a legacy model list, else ``None``."""
        option = self.model_option
        if option is not None:
            return option.id
        return MODEL_KEY if self.legacy_models else None

    def values(self) -> dict[str, object]:
        """The current value of every config key."""
        values: dict[str, object] = {o.id: o.value for o in self.options}
        if self.modes and self.current_mode is not None:
            values[MODE_KEY] = self.current_mode
        if self.legacy_models and self.current_model is not None:
            values[MODEL_KEY] = self.current_model
        return values

    @property
    def config(self) -> t.SessionConfigState | None:
        """The AHP session config: one ``sessionMutable`` property per option (and modes)."""
        properties: dict[str, t.SessionConfigPropertySchema] = {}
        if self.modes:
            properties[MODE_KEY] = _select_schema("Mode", None, self.modes)
        if self.legacy_models:
            properties[MODEL_KEY] = _select_schema("Model", None, self.legacy_models)
        for option in self.options:
            if option.kind == "boolean":
                properties[option.id] = t.SessionConfigPropertySchema(
                    type="boolean", title=option.name, session_mutable=True
                )
            else:
                properties[option.id] = _select_schema(option.name, None, option.choices)
        if not properties:
            return None
        return t.SessionConfigState(
            schema=t.SessionConfigSchema(properties=properties), values=self.values()
        )

    def models(self, provider: str) -> tuple[t.SessionModelInfo, ...]:
        """The agent's models as the root state lists them: the model option's choices,
        else the legacy model list."""
        option = self.model_option
        choices = option.choices if option is not None else self.legacy_models
        return tuple(
            t.SessionModelInfo(id=value, provider=provider, name=name)
            for value, name, _ in choices
        )


def _select_schema(
    title: str, description: str | None, choices: Sequence[tuple[str, str, str | None]]
) -> t.SessionConfigPropertySchema:
    descriptions = tuple(d or "" for _, _, d in choices)
    return t.SessionConfigPropertySchema(
        type="string",
        title=title,
        description=description,
        enum=tuple(value for value, _, _ in choices),
        enum_labels=tuple(name for _, name, _ in choices),
        enum_descriptions=descriptions if any(descriptions) else None,
        session_mutable=True,
    )


def _parse_options(raw: object) -> tuple[AcpConfigOption, ...]:
    options: list[AcpConfigOption] = []
    for item in _as_list(raw):
        option = _obj(item)
        option_id = _str(option, "id")
        kind = _str(option, "type")
        value = _get(option, "currentValue")
        if not option_id or kind not in ("select", "boolean"):
            continue
        category = _get(option, "category")
        name = _str(option, "name") or option_id
        if kind == "boolean":
            if isinstance(value, bool):
                options.append(AcpConfigOption(option_id, name, kind, _cat(category), value, ()))
            continue
        if not isinstance(value, str):
            continue
        choices: list[tuple[str, str, str | None]] = []
        for entry in _list(option, "options"):
            choice = _obj(entry)
            if choice is not None and "group" in choice:  # a group of choices: flatten it
                for inner in _list(choice, "options"):
                    _add_choice(choices, _obj(inner))
            else:
                _add_choice(choices, choice)
        options.append(
            AcpConfigOption(option_id, name, kind, _cat(category), value, tuple(choices))
        )
    return tuple(options)


def _cat(category: object) -> str | None:
    return category if isinstance(category, str) else None


def _add_choice(choices: list[tuple[str, str, str | None]], choice: JsonObject | None) -> None:
    value = _str(choice, "value")
    if value is not None:
        choices.append((value, _str(choice, "name") or value, _str(choice, "description")))


# ─── Tolerant JSON readers ───────────────────────────────────────────────────


def _obj(value: object) -> JsonObject | None:
    return value if isinstance(value, Mapping) else None


def _get(obj: JsonObject | None, key: str) -> object:
    return None if obj is None else obj.get(key)


def _str(obj: JsonObject | None, key: str) -> str | None:
    value = _get(obj, key)
    return value if isinstance(value, str) else None


def _int(obj: JsonObject | None, key: str) -> int | None:
    value = _get(obj, key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _num(obj: JsonObject | None, key: str) -> float | None:
    value = _get(obj, key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _as_list(value: object) -> Sequence[object]:
    return value if isinstance(value, (list, tuple)) else ()


def _list(obj: JsonObject | None, key: str) -> Sequence[object]:
    return _as_list(_get(obj, key))


def _b64(data: str) -> bytes | None:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None


def _json_text(value: object) -> str:
    """A tool input as AHP carries it: a string, the JSON of anything else."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def _file_uri(path: str) -> str:
    """The ``file:`` URI of an ACP path (absolute by the spec; tolerated otherwise)."""
    if path.startswith("/"):
        return PurePosixPath(path).as_uri()
    if len(path) > 2 and path[1] == ":" and path[2] in "\\/":
        return PureWindowsPath(path).as_uri()
    return "file:" + quote(path)


# ─── The mirror of the AHP chat ──────────────────────────────────────────────


class _Status(Enum):
    """A tool call's AHP status, as far as the bridge needs it."""

    STREAMING = "streaming"
    PENDING = "pending-confirmation"
    RUNNING = "running"
    DONE = "done"
    """``completed`` or ``cancelled``: every later tool-call action would be dropped."""


_KIND_LABELS: Final = {
    "read": "Read",
    "edit": "Edit",
    "delete": "Delete",
    "move": "Move",
    "search": "Search",
    "execute": "Execute",
    "think": "Think",
    "fetch": "Fetch",
    "switch_mode": "Switch mode",
}
_CONFIRMATION_TITLES: Final = {
    "read": "Read file",
    "edit": "Edit file",
    "delete": "Delete file",
    "move": "Move file",
    "search": "Search",
    "execute": "Run command",
    "think": "Think",
    "fetch": "Fetch",
    "switch_mode": "Switch mode",
}


@frozen
class _PermissionOption:
    option_id: str
    name: str
    kind: str  # allow_once, allow_always, reject_once, reject_always (or unknown)


@frozen
class _Permission:
    """A ``session/request_permission`` waiting for a client's ``chat/toolCallConfirmed``."""

    request_id: RequestId
    options: tuple[_PermissionOption, ...]


class _Tool:
    """One ACP tool call of the active turn: what the agent said, and what AHP shows."""

    __slots__ = (
        "content",
        "content_raw",
        "edits",
        "id",
        "kind",
        "locations",
        "name",
        "permissions",
        "raw_input",
        "raw_output",
        "sent_content",
        "sent_message",
        "status",
        "title",
    )

    def __init__(self, tool_id: str) -> None:
        self.id = tool_id
        self.status = _Status.STREAMING
        self.title = ""
        self.kind: str | None = None
        self.name: str | None = None
        self.raw_input: object = None
        self.raw_output: object = None
        self.content_raw: object = None
        self.edits: tuple[t.FileEdit, ...] = ()
        """The diffs of ``content``, for a confirmation's preview (stored once)."""
        self.content: tuple[t.ToolResultContent, ...] | None = None
        self.locations: object = None
        self.sent_message: str | None = None
        """The invocation message a ``chat/toolCallDelta`` last set (while streaming)."""
        self.sent_content: tuple[t.ToolResultContent, ...] | None = None
        """The content a ``chat/toolCallContentChanged`` last set (while running)."""
        self.permissions: deque[_Permission] = deque()
        """The agent's permission requests for this call; the first is the one shown."""

    @property
    def label(self) -> str:
        return _KIND_LABELS.get(self.kind or "", "Tool")

    @property
    def message(self) -> str:
        return self.title or self.label

    def meta(self) -> dict[str, object] | None:
        acp: dict[str, object] = {}
        if self.kind is not None:
            acp["kind"] = self.kind
        if self.locations is not None:
            acp["locations"] = self.locations
        return {"acp": acp} if acp else None


class _Input:
    """An ``elicitation/create`` shown as an ``inputRequest`` part."""

    __slots__ = ("elicitation_id", "request_id", "types", "url")

    def __init__(
        self,
        request_id: RequestId,
        types: dict[str, str],
        url: str | None = None,
        elicitation_id: str | None = None,
    ) -> None:
        self.request_id = request_id
        self.types = types
        """question id -> the JSON Schema type its answer must have."""
        self.url = url
        self.elicitation_id = elicitation_id


class _Turn:
    """The AHP active turn, and the ACP prompt that answers it."""

    __slots__ = ("id", "inputs", "prompt", "started_ms", "text", "tools", "usage")

    def __init__(self, turn_id: str, started_ms: int) -> None:
        self.id = turn_id
        self.started_ms = started_ms
        self.prompt: str | None = None
        """The token of this turn's ``session/prompt`` once sent (``None``: held back)."""
        self.text: tuple[str, str, str | None] | None = None
        """The open text part (kind ``markdown``/``reasoning``, part id, ACP messageId):
        the last part of the turn, so a chunk can be appended to it."""
        self.tools: dict[str, _Tool] = {}
        self.inputs: dict[str, _Input] = {}
        """AHP input request id -> the elicitation it shows (unresolved ones only)."""
        self.usage: t.UsageInfo | None = None


class _HeldPrompt:
    """A prompt waiting for the agent to finish the previous one (or a model switch)."""

    __slots__ = ("blocks", "turn_id")

    def __init__(self, turn_id: str, blocks: list[dict[str, object]]) -> None:
        self.turn_id = turn_id
        self.blocks = blocks


# ─── The bridge ──────────────────────────────────────────────────────────────

_CANCELLED_PERMISSION: Final = {"outcome": {"outcome": "cancelled"}}
_CANCELLED_ELICITATION: Final = {"action": "cancel"}
_METHOD_NOT_FOUND: Final = -32601
_USAGE_EXTRAS: Final = ("totalTokens", "thoughtTokens", "cachedWriteTokens")
"""Prompt usage fields UsageInfo has no slot for: kept in its ``_meta``."""
_STOP_REASONS_COMPLETE: Final = frozenset({"end_turn", "max_tokens", "max_turn_requests"})


class AcpBridge:
    """One ACP agent session mapped onto one AHP session and its chat.

    ``acp_session_id`` is the agent's ``sessionId``; ``session`` and
    ``chat`` are the AHP channel URIs (the chat should be the session's
    default chat, new and idle).  ``new_id`` makes part, input-request and
    turn ids; ``now`` is the host's clock (epoch ms, for turn durations and
    ``startedAt``); ``setup`` is what ``session/new`` said
    (:class:`AcpSessionSetup`), ``prompt_capabilities`` what ``initialize``
    said.  ``content_store`` turns bytes into URIs (default:
    :func:`data_uri_store`); ``terminal_uri`` maps an ACP ``terminalId`` to
    the AHP terminal channel the host created for it (none by default: a
    terminal is then shown as text).  ``title`` and ``meta`` are the session's
    title and ``_meta`` as the host holds them (a session loaded again after a
    restart): ``session/metaChanged`` replaces the whole ``_meta``, so the
    bridge keeps the keys it did not set.

    Every method returns the outputs to carry out, in order, and never
    raises for what the agent or a client sent.
    """

    def __init__(
        self,
        *,
        acp_session_id: str,
        session: str,
        chat: str,
        new_id: IdFactory,
        now: Callable[[], int],
        setup: AcpSessionSetup | None = None,
        prompt_capabilities: PromptCapabilities | None = None,
        content_store: ContentStore = data_uri_store,
        terminal_uri: Callable[[str], str | None] | None = None,
        title: str = "",
        meta: Mapping[str, object] | None = None,
    ) -> None:
        self.acp_session_id = acp_session_id
        self.session = session
        self.chat = chat
        self._new_id = new_id
        self._now = now
        self._setup = setup if setup is not None else AcpSessionSetup()
        self._caps = prompt_capabilities or PromptCapabilities()
        self._store = content_store
        self._terminal_uri = terminal_uri
        self._out: list[BridgeOutput] = []
        self._tokens = 0
        # the AHP side, as the host holds it
        self._turn: _Turn | None = None
        self._finished_turns: set[str] = set()
        self._queued: list[tuple[str, t.Message]] = []
        self._steering: tuple[str, t.Message] | None = None
        self._activity: str | None = None
        self._title = title
        self._meta: dict[str, object] = dict(meta or {})
        self._config_keys = frozenset(self._setup.values())
        self._config: dict[str, object] = self._setup.values()
        # the ACP side
        self._agent_config: dict[str, object] = self._setup.values()
        self._prompts: dict[str, str] = {}
        """token -> turn id of every ``session/prompt`` not answered yet."""
        self._switches: dict[str, tuple[str, object]] = {}
        """token -> (config key, value asked for) of every ``set_mode`` /
        ``set_config_option`` / ``set_model`` in flight."""
        self._held: _HeldPrompt | None = None
        self._plan_activity: str | None = None
        self._compacting = False
        self._commands: tuple[JsonObject, ...] = ()
        self._closed = False
        self._gone = t.ErrorInfo(error_type="acp:disconnected", message="the agent exited")

    # -- what the bridge knows ------------------------------------------------------

    @property
    def active_turn(self) -> str | None:
        """The id of the AHP turn the bridge is playing, if any."""
        return self._turn.id if self._turn is not None else None

    @property
    def busy(self) -> bool:
        """Whether a ``session/prompt`` is in flight or held back."""
        return bool(self._prompts) or self._held is not None

    @property
    def available_commands(self) -> tuple[JsonObject, ...]:
        """The agent's last ``available_commands_update`` (for ``completions``)."""
        return self._commands

    @property
    def config_values(self) -> Mapping[str, object]:
        """The config values as the AHP session holds them."""
        return dict(self._config)

    # -- agent → AHP ----------------------------------------------------------------

    def receive_notification(self, method: str, params: object) -> list[BridgeOutput]:
        """A notification from the agent (``session/update``, ``elicitation/complete``)."""
        with self._collect() as out:
            p = _obj(params)
            if method == "session/update":
                self._session_update(p)
            elif method == "elicitation/complete":
                self._elicitation_complete(p)
            else:
                log.info("ACP bridge: notification %r is not mapped; skipped", method)
        return out

    def receive_request(
        self, request_id: RequestId, method: str, params: object
    ) -> list[BridgeOutput]:
        """A request from the agent: permission and elicitation wait for a client.

        Every request is answered exactly once (:class:`AcpReply` or
        :class:`AcpErrorReply`): now when it cannot be shown, else when a
        client answers it or the turn ends.
        """
        with self._collect() as out:
            p = _obj(params)
            if method == "session/request_permission":
                self._request_permission(request_id, p)
            elif method == "elicitation/create":
                self._elicitation(request_id, p)
            else:
                log.info("ACP bridge: request %r is not supported; answered -32601", method)
                self._out.append(AcpErrorReply(request_id, _METHOD_NOT_FOUND,
                                               f"the AHP bridge does not support {method}"))
        return out

    def receive_response(self, token: str, result: object) -> list[BridgeOutput]:
        """The agent answered the :class:`AcpRequest` ``token`` with ``result``."""
        with self._collect() as out:
            if token in self._prompts:
                self._prompt_answered(token, _obj(result), None)
            elif token in self._switches:
                key, value = self._switches.pop(token)
                res = _obj(result)
                if res is not None and "configOptions" in res:
                    self._config_options(_parse_options(res.get("configOptions")), agent=True)
                else:  # accepted, and the agent did not say otherwise
                    self._agent_config[key] = value
                    if key in self._config_keys and all(
                        k != key for k, _ in self._switches.values()
                    ):
                        # a switch for a message's model changed the session's model too
                        self._set_config({key: value})
                self._release_held()
            else:
                log.debug("ACP bridge: response for unknown token %r skipped", token)
        return out

    def receive_error(
        self, token: str, code: int, message: str, data: object = None
    ) -> list[BridgeOutput]:
        """The agent answered the :class:`AcpRequest` ``token`` with an error."""
        with self._collect() as out:
            if token in self._prompts:
                self._prompt_answered(token, None, (code, message, data))
            elif token in self._switches:
                key, _ = self._switches.pop(token)
                log.warning("ACP bridge: the agent refused to change %r: %s", key, message)
                # the session shows what the client asked for: put back what the agent has
                if key in self._agent_config and not json_equal(
                    self._agent_config[key], self._config.get(key)
                ):
                    self._set_config({key: self._agent_config[key]})
                self._release_held()
            else:
                log.debug("ACP bridge: error for unknown token %r skipped", token)
        return out

    def forget_cancelled_prompts(self) -> list[BridgeOutput]:
        """The agent did not answer the prompts of turns that are over (cancelled,
        replaced) in time: stop waiting for them, and send the prompt held behind them.

        A later answer to one of them is skipped.  The runner calls this some
        seconds after ``session/cancel``: an agent that ignores the cancel does
        not hold the session's next turn forever.
        """
        with self._collect() as out:
            current = self._turn.prompt if self._turn is not None else None
            stale = [token for token in self._prompts if token != current]
            for token in stale:
                del self._prompts[token]
            if stale:
                log.warning("ACP bridge: the agent did not answer %d cancelled prompt(s) of "
                            "session %s; no longer waiting", len(stale), self.acp_session_id)
                self._release_held()
                self._consume_queued()
        return out

    def agent_closed(self, reason: str = "the agent exited") -> list[BridgeOutput]:
        """The agent is gone: end the active turn with ``chat/error``, forget what is pending.

        Nothing is sent to the agent any more and its later input is skipped;
        a turn a client starts from now on ends at once with the same error.
        """
        with self._collect() as out:
            turn = self._turn
            self._prompts.clear()
            self._switches.clear()
            self._held = None
            self._gone = t.ErrorInfo(error_type="acp:disconnected", message=reason)
            if turn is not None:
                self._end_turn(turn, "error", error=self._gone, reply=False)
            self._queued.clear()
            self._steering = None
            self._closed = True
        return out

    def dispose(self, *, close: bool = False) -> list[BridgeOutput]:
        """The AHP session is going away: stop the agent's work for it.

        Answers what the agent waits for (``cancelled``/``cancel``) and sends
        ``session/cancel`` if a prompt is in flight; no AHP action (the
        channels are going).  ``close``: the agent advertised
        ``sessionCapabilities.close``, so ``session/close`` follows; an agent
        may hold a whole process per session (Claude Code's does) until then.
        Later input is skipped.
        """
        with self._collect() as out:
            turn = self._turn
            if turn is not None and not self._closed:
                self._abandon(turn)
            elif self._prompts and not self._closed:
                self._out.append(AcpNotification("session/cancel",
                                                 {"sessionId": self.acp_session_id}))
            if close and not self._closed:
                self._out.append(AcpRequest(self._token("close"), "session/close",
                                            {"sessionId": self.acp_session_id}))
            self._held = None
            self._queued.clear()
            self._steering = None
            self._closed = True
        return out

    # -- AHP → agent ----------------------------------------------------------------

    def receive_client_action(self, channel: str, action: t.StateAction) -> list[BridgeOutput]:
        """A client action the host applied to this bridge's chat or session.

        Feed every one (``ClientActionApplied.envelope``): besides those that
        reach the agent, the others keep the bridge's mirror of the chat true.
        Actions of other channels are skipped.
        """
        with self._collect() as out:
            if self._closed:
                if channel == self.chat and isinstance(action, t.ChatTurnStartedAction):
                    # nobody will answer it: end it rather than leave it spinning
                    self._chat_out(t.ChatErrorAction(turn_id=action.turn_id, duration=0,
                                                     error=self._gone))
                return out
            if channel == self.chat:
                self._chat_action(action)
            elif channel == self.session:
                self._session_action(action)
        return out

    def set_meta(self, key: str, value: object, *,
                 base: Mapping[str, object] | None = None) -> list[BridgeOutput]:
        """The session's ``_meta`` with ``key`` set (``None``: removed), as the
        ``session/metaChanged`` to dispatch (none if nothing changed).

        ``base``: the ``_meta`` the host holds now; its keys the bridge does not
        know are kept.  The runner records the agent's ``sessionId`` this way.
        """
        with self._collect() as out:
            for known, old in (base or {}).items():
                self._meta.setdefault(known, old)
            self._set_meta(key, value)
        return out

    def start_turn(self, turn_id: str, message: t.Message) -> list[BridgeOutput]:
        """Start a turn the embedder decided on (e.g. ``createChat.initialMessage``).

        Emits ``chat/turnStarted`` and sends the prompt.
        """
        with self._collect() as out:
            if not self._closed:
                self._server_turn(turn_id, message, None)
        return out

    # -- plumbing ---------------------------------------------------------------------

    def _collect(self) -> _Collector:
        return _Collector(self)

    def _token(self, kind: str) -> str:
        self._tokens += 1
        return f"{kind}:{self._tokens}"

    def _chat_out(self, action: t.StateAction) -> None:
        self._out.append(AhpDispatch(self.chat, action))

    def _session_out(self, action: t.StateAction) -> None:
        self._out.append(AhpDispatch(self.session, action))

    def _live_turn(self) -> _Turn | None:
        """The turn the agent's updates belong to: active, with its prompt in flight.

        A turn whose prompt is held back has not reached the agent, so what
        arrives meanwhile belongs to an earlier, abandoned prompt.
        """
        turn = self._turn
        if turn is None or turn.prompt is None or turn.prompt not in self._prompts:
            return None
        return turn

    # -- session/update ---------------------------------------------------------------

    def _session_update(self, p: JsonObject | None) -> None:
        if self._closed:
            return
        if p is None:
            log.warning("ACP bridge: session/update without params; skipped")
            return
        session_id = _str(p, "sessionId")
        if session_id is not None and session_id != self.acp_session_id:
            log.warning("ACP bridge: session/update for session %r, not %r; skipped",
                        session_id, self.acp_session_id)
            return
        u = _obj(p.get("update"))
        kind = _str(u, "sessionUpdate")
        if u is None or kind is None:
            log.warning("ACP bridge: session/update without an update; skipped")
            return
        handler = _UPDATES.get(kind)
        if handler is None:
            log.info("ACP bridge: sessionUpdate %r is not mapped; skipped", kind)
            return
        handler(self, u)

    def _message_chunk(self, u: JsonObject) -> None:
        self._chunk(u, "markdown")

    def _thought_chunk(self, u: JsonObject) -> None:
        self._chunk(u, "reasoning")

    def _user_chunk(self, u: JsonObject) -> None:
        # the echo of the prompt (or the replay of a loaded session): the
        # turn's message already holds it, and AHP cannot import history
        log.debug("ACP bridge: user_message_chunk skipped")

    def _chunk(self, u: JsonObject, kind: str) -> None:
        turn = self._live_turn()
        if turn is None:
            log.debug("ACP bridge: %s chunk outside a turn; skipped", kind)
            return
        content = _obj(u.get("content"))
        block = _str(content, "type")
        message_id = _str(u, "messageId")
        if block == "text":
            text = _str(content, "text")
            if not text:  # the reducer appends nothing for an empty delta
                return
            open_part = turn.text
            if open_part is None or open_part[0] != kind or open_part[2] != message_id:
                part_id = self._new_id("part")
                part: t.ResponsePart = (
                    t.MarkdownResponsePart(id=part_id, content="")
                    if kind == "markdown"
                    else t.ReasoningResponsePart(id=part_id, content="")
                )
                self._chat_out(t.ChatResponsePartAction(turn_id=turn.id, part=part))
                turn.text = open_part = (kind, part_id, message_id)
            if kind == "markdown":
                self._chat_out(t.ChatDeltaAction(turn_id=turn.id, part_id=open_part[1],
                                                 content=text))
            else:
                self._chat_out(t.ChatReasoningAction(turn_id=turn.id, part_id=open_part[1],
                                                     content=text))
            return
        if kind == "reasoning":
            log.info("ACP bridge: a %r thought chunk has no AHP form; skipped", block)
            return
        ref = self._content_ref(content)
        if ref is None:
            log.info("ACP bridge: message chunk of type %r skipped", block)
            return
        self._append_part(turn, ref)

    def _append_part(self, turn: _Turn, part: t.ResponsePart) -> None:
        self._chat_out(t.ChatResponsePartAction(turn_id=turn.id, part=part))
        turn.text = None  # the next chunk opens a new text part after this one

    def _content_ref(self, block: JsonObject | None) -> t.ResourceReponsePart | None:
        """An image, audio, resource link or embedded resource as a ``contentRef`` part."""
        kind = _str(block, "type")
        if kind in ("image", "audio"):
            data = _str(block, "data")
            raw = _b64(data) if data is not None else None
            if raw is None:
                return None
            mime = _str(block, "mimeType")
            return t.ResourceReponsePart(uri=self._store(raw, mime), size_hint=len(raw),
                                         content_type=mime)
        if kind == "resource_link":
            uri = _str(block, "uri")
            if not uri:
                return None
            return t.ResourceReponsePart(uri=uri, content_type=_str(block, "mimeType"),
                                         size_hint=_int(block, "size"))
        if kind == "resource":
            resource = _obj(_get(block, "resource"))
            mime = _str(resource, "mimeType")
            text = _str(resource, "text")
            if text is not None:
                raw = text.encode()
                mime = mime or "text/plain"
            else:
                blob = _str(resource, "blob")
                decoded = _b64(blob) if blob is not None else None
                if decoded is None:
                    return None
                raw = decoded
            return t.ResourceReponsePart(uri=self._store(raw, mime), size_hint=len(raw),
                                         content_type=mime)
        return None

    # -- tool calls -------------------------------------------------------------------

    def _tool_call(self, u: JsonObject) -> None:
        turn = self._live_turn()
        tool_id = _str(u, "toolCallId")
        if turn is None or not tool_id:
            log.debug("ACP bridge: tool call %r outside a turn or without id; skipped", tool_id)
            return
        tool = turn.tools.get(tool_id)
        if tool is None:
            tool = self._start_tool(turn, tool_id, u)
        else:
            self._merge(tool, u)
        self._advance(turn, tool, _str(u, "status"))

    def _merge(self, tool: _Tool, u: JsonObject) -> None:
        """Take the fields an update carries (``null`` and absent keep the old value)."""
        title = _str(u, "title")
        if title is not None:
            tool.title = title
        kind = _str(u, "kind")
        if kind is not None:
            tool.kind = kind
        name = _str(u, "name")  # unstable (schema 1.20+): the tool's own name
        if name is not None:
            tool.name = name
        if u.get("rawInput") is not None:
            tool.raw_input = u.get("rawInput")
        if u.get("rawOutput") is not None:
            tool.raw_output = u.get("rawOutput")
        if u.get("locations") is not None:
            tool.locations = u.get("locations")
        content = u.get("content")
        if isinstance(content, (list, tuple)) and not json_equal(content, tool.content_raw):
            tool.content_raw = content
            tool.content, tool.edits = self._tool_content(content)

    def _start_tool(self, turn: _Turn, tool_id: str, u: JsonObject) -> _Tool:
        tool = _Tool(tool_id)
        self._merge(tool, u)
        turn.tools[tool_id] = tool
        self._chat_out(t.ChatToolCallStartAction(
            turn_id=turn.id, tool_call_id=tool_id, tool_name=tool.name or tool.kind or "other",
            display_name=tool.label, meta=tool.meta(),
        ))
        turn.text = None
        return tool

    def _advance(self, turn: _Turn, tool: _Tool, status: str | None) -> None:
        """Follow an ACP status with the AHP transitions the reducer accepts."""
        if tool.status is _Status.DONE:
            # finished, or denied by a client: what the agent says now has no AHP slot
            log.debug("ACP bridge: update of finished tool call %r skipped", tool.id)
            return
        if status in ("completed", "failed"):
            if tool.status is _Status.STREAMING:
                self._ready(turn, tool)
            self._complete(turn, tool, success=status == "completed")
            return
        if tool.status is _Status.STREAMING:
            if status == "in_progress":
                self._ready(turn, tool)
            elif tool.title and tool.title != tool.sent_message:
                # the only thing a streaming call can show of an ACP update
                self._chat_out(t.ChatToolCallDeltaAction(
                    turn_id=turn.id, tool_call_id=tool.id, invocation_message=tool.title
                ))
                tool.sent_message = tool.title
        self._sync_content(turn, tool)

    def _ready(self, turn: _Turn, tool: _Tool) -> None:
        """``chat/toolCallReady`` (not-needed): streaming → running."""
        self._chat_out(t.ChatToolCallReadyAction(
            turn_id=turn.id, tool_call_id=tool.id, invocation_message=tool.message,
            tool_input=_json_text(tool.raw_input) if tool.raw_input is not None else None,
            confirmed=t.ToolCallConfirmationReason.NOT_NEEDED, meta=tool.meta(),
        ))
        tool.status = _Status.RUNNING
        tool.sent_content = None  # a running call starts without content

    def _sync_content(self, turn: _Turn, tool: _Tool) -> None:
        """``chat/toolCallContentChanged`` when a running call's content changed."""
        if tool.status is not _Status.RUNNING or tool.content is None:
            return
        if tool.content == tool.sent_content:
            return
        self._chat_out(t.ChatToolCallContentChangedAction(
            turn_id=turn.id, tool_call_id=tool.id, content=tool.content
        ))
        tool.sent_content = tool.content

    def _complete(self, turn: _Turn, tool: _Tool, *, success: bool) -> None:
        """``chat/toolCallComplete`` from running or pending-confirmation."""
        error = None
        if not success:
            texts = [c.text for c in tool.content or () if isinstance(c, t.ToolResultTextContent)]
            error = t.ToolCallError(message="\n".join(texts) or "failed")
        output = tool.raw_output
        result = t.ToolCallResult(
            success=success,
            past_tense_message=tool.message,
            content=tool.content or None,
            structured_content=output if isinstance(output, Mapping) else None,
            error=error,
        )
        self._chat_out(t.ChatToolCallCompleteAction(
            turn_id=turn.id, tool_call_id=tool.id, result=result, meta=tool.meta()
        ))
        tool.status = _Status.DONE
        # a finished call needs no permission any more
        while tool.permissions:
            self._out.append(AcpReply(tool.permissions.popleft().request_id,
                                      _CANCELLED_PERMISSION))

    def _tool_content(
        self, raw: Sequence[object]
    ) -> tuple[tuple[t.ToolResultContent, ...], tuple[t.FileEdit, ...]]:
        """ACP ``ToolCallContent`` as AHP tool content, and its diffs as file edits."""
        content: list[t.ToolResultContent] = []
        edits: list[t.FileEdit] = []
        for item in raw:
            entry = _obj(item)
            kind = _str(entry, "type")
            mapped: t.ToolResultContent | None
            if kind == "content":
                mapped = self._block_content(_obj(_get(entry, "content")))
            elif kind == "diff":
                edit = self._file_edit(entry)
                mapped = None if edit is None else t.ToolResultFileEditContent(
                    before=edit.before, after=edit.after, diff=edit.diff)
                if edit is not None:
                    edits.append(edit)
            elif kind == "terminal":
                mapped = self._terminal_content(entry)
            else:
                mapped = None
            if mapped is None:
                log.info("ACP bridge: tool call content %r skipped", kind)
            else:
                content.append(mapped)
        return tuple(content), tuple(edits)

    def _block_content(self, block: JsonObject | None) -> t.ToolResultContent | None:
        kind = _str(block, "type")
        if kind == "text":
            text = _str(block, "text")
            return None if text is None else t.ToolResultTextContent(text=text)
        if kind in ("image", "audio"):
            data = _str(block, "data")
            if data is None:
                return None
            return t.ToolResultEmbeddedResourceContent(
                data=data, content_type=_str(block, "mimeType") or "application/octet-stream"
            )
        if kind == "resource_link":
            uri = _str(block, "uri")
            if not uri:
                return None
            return t.ToolResultResourceContent(uri=uri, content_type=_str(block, "mimeType"),
                                               size_hint=_int(block, "size"))
        if kind == "resource":
            resource = _obj(_get(block, "resource"))
            text = _str(resource, "text")
            if text is not None:
                return t.ToolResultTextContent(text=text)
            blob = _str(resource, "blob")
            if blob is None:
                return None
            return t.ToolResultEmbeddedResourceContent(
                data=blob,
                content_type=_str(resource, "mimeType") or "application/octet-stream",
            )
        return None

    def _file_edit(self, entry: JsonObject | None) -> t.FileEdit | None:
        path = _str(entry, "path")
        new_text = _str(entry, "newText")
        if not path or new_text is None:
            return None
        old_text = _str(entry, "oldText")
        uri = _file_uri(path)
        after = t.FileEditSide(uri=uri, content=self._ref(new_text))
        before = None if old_text is None else t.FileEditSide(uri=uri, content=self._ref(old_text))
        added, removed = _line_counts(old_text or "", new_text)
        return t.FileEdit(before=before, after=after,
                          diff=t.FileEditDiff(added=added, removed=removed))

    def _ref(self, text: str) -> t.ContentRef:
        data = text.encode()
        return t.ContentRef(uri=self._store(data, "text/plain"), size_hint=len(data),
                            content_type="text/plain")

    def _terminal_content(self, entry: JsonObject | None) -> t.ToolResultContent | None:
        terminal_id = _str(entry, "terminalId")
        if not terminal_id:
            return None
        uri = self._terminal_uri(terminal_id) if self._terminal_uri is not None else None
        if uri is None:
            return t.ToolResultTextContent(text=f"(terminal {terminal_id})")
        return t.ToolResultTerminalContent(resource=uri, title=f"Terminal {terminal_id}")

    # -- permissions ------------------------------------------------------------------

    def _request_permission(self, request_id: RequestId, p: JsonObject | None) -> None:
        turn = self._live_turn() if not self._closed else None
        call = _obj(_get(p, "toolCall"))
        tool_id = _str(call, "toolCallId")
        if turn is None or call is None or not tool_id:
            log.info("ACP bridge: permission request outside a turn or without a tool call; "
                     "answered cancelled")
            self._out.append(AcpReply(request_id, _CANCELLED_PERMISSION))
            return
        tool = turn.tools.get(tool_id)
        if tool is None:
            tool = self._start_tool(turn, tool_id, call)
        else:
            self._merge(tool, call)
        if tool.status is _Status.DONE:
            self._out.append(AcpReply(request_id, _CANCELLED_PERMISSION))
            return
        options = []
        for raw in _list(p, "options"):
            option = _obj(raw)
            option_id = _str(option, "optionId")
            if option_id:
                options.append(_PermissionOption(option_id, _str(option, "name") or option_id,
                                                 _str(option, "kind") or ""))
        tool.permissions.append(_Permission(request_id, tuple(options)))
        if len(tool.permissions) == 1:
            self._show_permission(turn, tool)
        # else: queued behind the one the clients see; a second chat/toolCallReady
        # would overwrite its options before anyone answered it

    def _show_permission(self, turn: _Turn, tool: _Tool) -> None:
        """``chat/toolCallReady`` without ``confirmed``: → pending-confirmation."""
        permission = tool.permissions[0]
        options = tuple(
            t.ConfirmationOption(
                id=option.option_id,
                label=option.name,
                kind=(t.ConfirmationOptionKind.DENY if option.kind.startswith("reject")
                      else t.ConfirmationOptionKind.APPROVE),
                group=2 if option.kind.endswith("_always") else 1,
            )
            for option in permission.options
        )
        self._chat_out(t.ChatToolCallReadyAction(
            turn_id=turn.id, tool_call_id=tool.id, invocation_message=tool.message,
            tool_input=_json_text(tool.raw_input) if tool.raw_input is not None else None,
            confirmation_title=_CONFIRMATION_TITLES.get(tool.kind or "", "Allow the tool call?"),
            edits=t.FileEditList(items=tool.edits) if tool.edits else None,
            editable=False, options=options or None, meta=tool.meta(),
        ))
        tool.status = _Status.PENDING

    def _confirmed(
        self, action: t.ChatToolCallApprovedAction | t.ChatToolCallDeniedAction
    ) -> None:
        turn = self._turn
        if turn is None or turn.id != action.turn_id:
            return
        tool = turn.tools.get(action.tool_call_id)
        if tool is None or tool.status is not _Status.PENDING:
            return
        permission = tool.permissions.popleft() if tool.permissions else None
        if isinstance(action, t.ChatToolCallApprovedAction):
            tool.status = _Status.RUNNING
            tool.sent_content = None
            approved = True
        else:
            tool.status = _Status.DONE
            approved = False
        if permission is not None:
            self._out.append(AcpReply(permission.request_id, _permission_outcome(
                permission, approved, action.selected_option_id
            )))
        if tool.status is _Status.DONE:
            # a denied call is cancelled: what the agent asks for it now cannot be shown
            while tool.permissions:
                self._out.append(AcpReply(tool.permissions.popleft().request_id,
                                          _CANCELLED_PERMISSION))
        elif tool.permissions:
            self._show_permission(turn, tool)  # running → pending-confirmation again
        else:
            self._sync_content(turn, tool)

    # -- elicitation ------------------------------------------------------------------

    def _elicitation(self, request_id: RequestId, p: JsonObject | None) -> None:
        turn = self._live_turn() if not self._closed else None
        mode = _str(p, "mode")
        session_id = _str(p, "sessionId")
        if turn is None or (session_id is not None and session_id != self.acp_session_id):
            log.info("ACP bridge: elicitation outside a turn of this session; answered cancel")
            self._out.append(AcpReply(request_id, _CANCELLED_ELICITATION))
            return
        message = _str(p, "message") or ""
        input_id = self._new_id("input")
        if mode == "url":
            url = _str(p, "url")
            if not url:
                self._out.append(AcpReply(request_id, {"action": "decline"}))
                return
            request = t.ChatInputRequest(id=input_id, message=message, url=url)
            pending = _Input(request_id, {}, url=url, elicitation_id=_str(p, "elicitationId"))
        elif mode == "form":
            questions, types = _questions(_obj(_get(p, "requestedSchema")))
            request = t.ChatInputRequest(id=input_id, message=message, questions=questions)
            pending = _Input(request_id, types)
        else:
            log.info("ACP bridge: elicitation mode %r is not supported; declined", mode)
            self._out.append(AcpReply(request_id, {"action": "decline"}))
            return
        self._chat_out(t.ChatInputRequestedAction(request=request))
        turn.inputs[input_id] = pending
        turn.text = None

    def _input_completed(self, action: t.ChatInputCompletedAction) -> None:
        turn = self._turn
        if turn is None:
            return
        pending = turn.inputs.pop(action.request_id, None)
        if pending is None:
            return
        response = str(getattr(action.response, "value", action.response))
        if response == "accept":
            result: dict[str, object] = {"action": "accept"}
            if pending.url is None:
                result["content"] = _answers(action.answers or {}, pending.types)
        elif response == "decline":
            result = {"action": "decline"}
        else:
            result = {"action": "cancel"}
        self._out.append(AcpReply(pending.request_id, result))

    def _elicitation_complete(self, p: JsonObject | None) -> None:
        elicitation_id = _str(p, "elicitationId")
        turn = self._turn
        found = [
            (input_id, pending) for input_id, pending in (turn.inputs.items() if turn else ())
            if elicitation_id and pending.elicitation_id == elicitation_id
        ]
        if turn is None or not found:
            log.debug("ACP bridge: elicitation/complete for %r: nothing open", elicitation_id)
            return
        for input_id, pending in found:
            # the agent saw the URL flow through: resolve the part and the request
            del turn.inputs[input_id]
            self._chat_out(t.ChatInputCompletedAction(
                request_id=input_id, response=t.ChatInputResponseKind.ACCEPT
            ))
            self._out.append(AcpReply(pending.request_id, {"action": "accept"}))

    # -- plan, modes, config, usage, session info ------------------------------------

    def _plan(self, u: JsonObject) -> None:
        entries = [e for e in (_obj(raw) for raw in _list(u, "entries")) if e is not None]
        self._set_meta("acp.plan", [dict(e) for e in entries] or None)
        doing = next((_str(e, "content") for e in entries if _str(e, "status") == "in_progress"),
                     None)
        self._plan_activity = doing or None
        self._sync_activity()

    def _plan_update(self, u: JsonObject) -> None:
        plan = _obj(u.get("plan"))
        plan_id = _str(plan, "planId")
        if plan is None or not plan_id:
            log.warning("ACP bridge: plan_update without a plan id; skipped")
            return
        plans = dict(_obj(self._meta.get("acp.plans")) or {})
        plans[plan_id] = dict(plan)
        self._set_meta("acp.plans", plans)

    def _plan_removed(self, u: JsonObject) -> None:
        plan_id = _str(u, "planId")
        plans = dict(_obj(self._meta.get("acp.plans")) or {})
        if plan_id is None or plans.pop(plan_id, None) is None:
            return
        self._set_meta("acp.plans", plans or None)

    def _commands_update(self, u: JsonObject) -> None:
        commands = tuple(c for c in (_obj(raw) for raw in _list(u, "availableCommands"))
                         if c is not None and _str(c, "name"))
        self._commands = commands
        self._set_meta("acp.commands", [dict(c) for c in commands] or None)

    def _mode_update(self, u: JsonObject) -> None:
        mode = _str(u, "currentModeId")
        if mode is None or MODE_KEY not in self._config_keys:
            log.debug("ACP bridge: current_mode_update %r without a mode config; skipped", mode)
            return
        self._agent_config[MODE_KEY] = mode
        self._set_config({MODE_KEY: mode})

    def _config_update(self, u: JsonObject) -> None:
        self._config_options(_parse_options(u.get("configOptions")), agent=True)

    def _config_options(self, options: Sequence[AcpConfigOption], *, agent: bool) -> None:
        changes: dict[str, object] = {}
        for option in options:
            if option.id not in self._config_keys:
                # AHP cannot add a property to a session's config schema after creation
                log.info("ACP bridge: config option %r is new; not shown", option.id)
                continue
            if agent:
                self._agent_config[option.id] = option.value
            changes[option.id] = option.value
        self._set_config(changes)

    def _set_config(self, values: Mapping[str, object]) -> None:
        changed = {k: v for k, v in values.items() if not json_equal(self._config.get(k), v)}
        if not changed:
            return
        self._config.update(changed)
        self._session_out(t.SessionConfigChangedAction(config=changed))

    def _session_info(self, u: JsonObject) -> None:
        title = _str(u, "title")
        if title and title != self._title:  # null clears: AHP titles cannot be cleared
            self._title = title
            self._session_out(t.SessionTitleChangedAction(title=title))

    def _usage_update(self, u: JsonObject) -> None:
        context: dict[str, object] = {}
        used, size = _int(u, "used"), _int(u, "size")
        if used is not None:
            context["contextUsed"] = used
        if size is not None:
            context["contextSize"] = size
        cost = _obj(u.get("cost"))
        if cost is not None:
            context["cost"] = dict(cost)
        if not context:
            return
        turn = self._live_turn()
        if turn is None:
            self._set_meta("acp.context", context)
            return
        old = turn.usage or t.UsageInfo()
        self._set_usage(turn, t.UsageInfo(
            input_tokens=old.input_tokens, output_tokens=old.output_tokens, model=old.model,
            cache_read_tokens=old.cache_read_tokens, meta={**(old.meta or {}), **context},
        ))

    def _set_usage(self, turn: _Turn, usage: t.UsageInfo) -> None:
        if usage == turn.usage:
            return
        turn.usage = usage  # chat/usage replaces the whole value: it is accumulated here
        self._chat_out(t.ChatUsageAction(turn_id=turn.id, usage=usage))

    def _notice(self, u: JsonObject) -> None:
        turn = self._live_turn()
        title = _str(u, "title") or ""
        description = _str(u, "description")
        text = f"{title}: {description}" if title and description else title or description
        if turn is None or not text:
            log.info("ACP bridge: notice %r outside a turn; skipped", text)
            return
        severity = _str(u, "severity")
        self._append_part(turn, t.SystemNotificationResponsePart(
            content=text, meta={"acp": {"severity": severity}} if severity else None
        ))

    def _compaction(self, u: JsonObject) -> None:
        status = _str(u, "status")
        self._compacting = status == "in_progress"
        self._sync_activity()
        turn = self._live_turn()
        if status == "failed" and turn is not None:
            error = _str(u, "error") or "compaction failed"
            self._append_part(turn, t.SystemNotificationResponsePart(content=error))

    def _sync_activity(self) -> None:
        activity = "Compacting the context" if self._compacting else self._plan_activity
        if activity != self._activity:
            self._activity = activity
            self._chat_out(t.ChatActivityChangedAction(activity=activity))

    def _set_meta(self, key: str, value: object) -> None:
        """``session/metaChanged`` (which replaces all of ``_meta``) with one key changed."""
        if value is None:
            if key not in self._meta:
                return
            del self._meta[key]
        else:
            if json_equal(self._meta.get(key), value):
                return
            self._meta[key] = value
        self._session_out(t.SessionMetaChangedAction(meta=dict(self._meta) or None))

    def _ignore(self, u: JsonObject) -> None:
        log.debug("ACP bridge: %s has no AHP equivalent; skipped", _str(u, "sessionUpdate"))

    # -- turns ------------------------------------------------------------------------

    def _prompt_answered(
        self,
        token: str,
        result: JsonObject | None,
        error: tuple[int, str, object] | None,
    ) -> None:
        turn_id = self._prompts.pop(token)
        turn = self._turn
        if turn is None or turn.id != turn_id or turn.prompt != token:
            # the turn was cancelled or replaced: its stop reason is old news
            log.debug("ACP bridge: answer to abandoned prompt %r swallowed", token)
        elif error is not None:
            code, message, data = error
            kept = _bounded_json(data)
            self._end_turn(turn, "error", error=t.ErrorInfo(
                error_type=f"acp:{code}", message=acp_error_message(code, message, data),
                meta={"data": kept} if kept is not None else None,
            ))
        else:
            self._stop(turn, result)
        self._release_held()
        self._consume_queued()

    def _stop(self, turn: _Turn, result: JsonObject | None) -> None:
        usage = _obj(_get(result, "usage"))
        if usage is not None:
            old = turn.usage or t.UsageInfo()
            extra = {key: usage[key] for key in _USAGE_EXTRAS if _int(usage, key) is not None}
            self._set_usage(turn, t.UsageInfo(
                input_tokens=_int(usage, "inputTokens"),
                output_tokens=_int(usage, "outputTokens"),
                cache_read_tokens=_int(usage, "cachedReadTokens"),
                model=_model_name(self._agent_config, self._setup.model_key) or old.model,
                meta={**(old.meta or {}), **extra} or None,
            ))
        reason = _str(result, "stopReason")
        if reason == "refusal":
            self._end_turn(turn, "error", error=t.ErrorInfo(
                error_type="refusal", message="The agent refused to go on with this prompt."
            ))
        elif reason == "cancelled":
            self._end_turn(turn, "cancelled")
        elif reason == "end_turn":
            self._end_turn(turn, "complete")
        else:
            if reason not in _STOP_REASONS_COMPLETE:
                log.warning("ACP bridge: stop reason %r unknown; the turn completes", reason)
            self._end_turn(turn, "complete", meta={"stopReason": reason})

    def _end_turn(
        self,
        turn: _Turn,
        end: str,
        *,
        error: t.ErrorInfo | None = None,
        meta: Mapping[str, object] | None = None,
        reply: bool = True,
    ) -> None:
        """Answer what waits on the turn, then end it (the reducer cancels open tool calls)."""
        if reply:
            self._close_requests(turn)
        duration = max(0, self._now() - turn.started_ms)
        if end == "complete":
            self._chat_out(t.ChatTurnCompleteAction(turn_id=turn.id, duration=duration,
                                                    meta=meta))
        elif end == "cancelled":
            self._chat_out(t.ChatTurnCancelledAction(turn_id=turn.id, duration=duration))
        else:
            assert error is not None
            self._chat_out(t.ChatErrorAction(turn_id=turn.id, duration=duration, error=error))
        self._forget(turn)

    def _forget(self, turn: _Turn) -> None:
        self._turn = None
        self._finished_turns.add(turn.id)

    def _close_requests(self, turn: _Turn) -> None:
        """Answer every permission and elicitation of ``turn``: cancelled (ACP MUST on cancel)."""
        for tool in turn.tools.values():
            while tool.permissions:
                self._out.append(AcpReply(tool.permissions.popleft().request_id,
                                          _CANCELLED_PERMISSION))
        for pending in turn.inputs.values():
            self._out.append(AcpReply(pending.request_id, _CANCELLED_ELICITATION))
        turn.inputs.clear()

    def _abandon(self, turn: _Turn) -> None:
        """The turn is gone from the chat (cancelled, replaced, truncated): stop the agent."""
        self._close_requests(turn)
        if turn.prompt is not None and turn.prompt in self._prompts:
            self._out.append(AcpNotification("session/cancel",
                                             {"sessionId": self.acp_session_id}))
        if self._held is not None and self._held.turn_id == turn.id:
            self._held = None
        self._forget(turn)

    def _begin(self, turn_id: str, message: t.Message) -> None:
        """The chat has a new active turn: send (or hold) its prompt."""
        if self._turn is not None:
            self._abandon(self._turn)  # chat/turnStarted replaces an active turn silently
        turn = _Turn(turn_id, self._now())
        self._turn = turn
        blocks = self._prompt_blocks(message)
        key = self._setup.model_key
        wanted = message.model.id if message.model is not None else None
        if (
            key is not None
            and wanted is not None
            and not json_equal(self._agent_config.get(key), wanted)
        ):
            # the model rides on the message in AHP, on the session in ACP
            self._switch(key, wanted)
        self._held = _HeldPrompt(turn_id, blocks)
        self._release_held()

    def _release_held(self) -> None:
        """Send the held prompt once no other prompt or switch is in flight."""
        held = self._held
        if held is None or self._prompts or self._switches or self._closed:
            return
        self._held = None
        turn = self._turn
        if turn is None or turn.id != held.turn_id:
            return
        token = self._token("prompt")
        self._prompts[token] = turn.id
        turn.prompt = token
        self._out.append(AcpRequest(token, "session/prompt", {
            "sessionId": self.acp_session_id, "prompt": held.blocks,
        }))

    def _switch(self, key: str, value: object) -> None:
        """``session/set_mode``, ``session/set_model`` or ``session/set_config_option``."""
        if key == MODE_KEY and self._setup.modes:
            token = self._token("mode")
            self._out.append(AcpRequest(token, "session/set_mode", {
                "sessionId": self.acp_session_id, "modeId": value,
            }))
        elif key == MODEL_KEY and self._setup.legacy_models:
            token = self._token("model")
            self._out.append(AcpRequest(token, "session/set_model", {
                "sessionId": self.acp_session_id, "modelId": value,
            }))
        else:
            token = self._token("config")
            params: dict[str, object] = {
                "sessionId": self.acp_session_id, "configId": key, "value": value,
            }
            if isinstance(value, bool):
                params["type"] = "boolean"
            self._out.append(AcpRequest(token, "session/set_config_option", params))
        self._switches[token] = (key, value)

    def _server_turn(self, turn_id: str, message: t.Message, queued_id: str | None) -> None:
        self._chat_out(t.ChatTurnStartedAction(
            turn_id=turn_id, started_at=iso_timestamp(self._now()), message=message,
            queued_message_id=queued_id,
        ))
        self._begin(turn_id, message)

    def _consume_queued(self) -> None:
        """An idle chat starts its next pending message (steering first: ACP cannot steer)."""
        if self._turn is not None or self._closed:
            return
        if self._steering is not None:
            message_id, message = self._steering
            self._steering = None
            kind = t.PendingMessageKind.STEERING
        elif self._queued:
            message_id, message = self._queued.pop(0)
            kind = t.PendingMessageKind.QUEUED
        else:
            return
        self._chat_out(t.ChatPendingMessageRemovedAction(kind=kind, id=message_id))
        self._server_turn(self._new_id("turn"), message, message_id)

    def _prompt_blocks(self, message: t.Message) -> list[dict[str, object]]:
        """An AHP message as ACP content blocks (text and resource links always work)."""
        blocks: list[dict[str, object]] = []
        if message.text or not message.attachments:
            blocks.append({"type": "text", "text": message.text})
        for attachment in message.attachments or ():
            if isinstance(attachment, t.SimpleMessageAttachment):
                blocks.append({"type": "text",
                               "text": attachment.model_representation or attachment.label})
            elif isinstance(attachment, t.MessageEmbeddedResourceAttachment):
                blocks.append(self._embedded_block(attachment))
            elif isinstance(attachment, t.MessageResourceAttachment):
                link: dict[str, object] = {"type": "resource_link", "uri": attachment.uri,
                                           "name": attachment.label}
                if attachment.content_type is not None:
                    link["mimeType"] = attachment.content_type
                if attachment.size_hint is not None:
                    link["size"] = attachment.size_hint
                blocks.append(link)
            else:
                label = getattr(attachment, "label", None) or "attachment"
                blocks.append({"type": "text", "text": f"[{label}]"})
        return blocks

    def _embedded_block(self, a: t.MessageEmbeddedResourceAttachment) -> dict[str, object]:
        mime = a.content_type
        if mime.startswith("image/") and self._caps.image:
            return {"type": "image", "data": a.data, "mimeType": mime}
        if mime.startswith("audio/") and self._caps.audio:
            return {"type": "audio", "data": a.data, "mimeType": mime}
        if self._caps.embedded_context:
            return {"type": "resource", "resource": {
                "uri": "attachment:" + quote(a.label), "blob": a.data, "mimeType": mime,
            }}
        return {"type": "text", "text": f"[{a.label} ({mime}) was attached; this agent cannot "
                                        "receive it]"}

    # -- client actions ---------------------------------------------------------------

    def _chat_action(self, action: t.StateAction) -> None:
        if isinstance(action, t.ChatTurnStartedAction):
            self._take_pending(action.queued_message_id)
            self._begin(action.turn_id, action.message)
        elif isinstance(action, t.ChatTurnCancelledAction):
            turn = self._turn
            if turn is not None and turn.id == action.turn_id:
                self._abandon(turn)
                self._consume_queued()
        elif isinstance(action, (t.ChatToolCallApprovedAction, t.ChatToolCallDeniedAction)):
            self._confirmed(action)
        elif isinstance(action, t.ChatInputCompletedAction):
            self._input_completed(action)
        elif isinstance(action, t.ChatPendingMessageSetAction):
            entry = (action.id, action.message)
            if action.kind == t.PendingMessageKind.STEERING:
                self._steering = entry
            else:
                index = next((i for i, (qid, _) in enumerate(self._queued) if qid == action.id),
                             None)
                if index is None:
                    self._queued.append(entry)
                else:
                    self._queued[index] = entry
            self._consume_queued()  # a message queued on an idle chat starts at once
        elif isinstance(action, t.ChatPendingMessageRemovedAction):
            if action.kind == t.PendingMessageKind.STEERING:
                if self._steering is not None and self._steering[0] == action.id:
                    self._steering = None
            else:
                self._queued = [q for q in self._queued if q[0] != action.id]
        elif isinstance(action, t.ChatQueuedMessagesReorderedAction):
            by_id = dict(self._queued)
            order = [i for i in dict.fromkeys(action.order) if i in by_id]
            rest = [q for q in self._queued if q[0] not in set(order)]
            self._queued = [(i, by_id[i]) for i in order] + rest
        elif isinstance(action, t.ChatTruncatedAction):
            turn = self._turn
            if turn is not None and (action.turn_id is None
                                     or action.turn_id in self._finished_turns):
                # no ACP equivalent for cutting history; the active turn is gone, though
                log.info("ACP bridge: chat/truncated cannot reach the agent's history")
                self._abandon(turn)
        else:
            log.debug("ACP bridge: client action %s needs nothing from the agent",
                      getattr(action, "type", action))

    def _take_pending(self, message_id: str | None) -> None:
        if not message_id:
            return
        if self._steering is not None and self._steering[0] == message_id:
            self._steering = None
        self._queued = [q for q in self._queued if q[0] != message_id]

    def _session_action(self, action: t.StateAction) -> None:
        if isinstance(action, t.SessionTitleChangedAction):
            self._title = action.title  # ACP has no way to rename a session
        elif isinstance(action, t.SessionConfigChangedAction):
            values = dict(action.config)
            old = self._config
            self._config = values if action.replace else {**old, **values}
            for key, value in values.items():  # in the client's order: the requests go out in it
                if key in self._config_keys and not json_equal(value, old.get(key)):
                    self._switch(key, value)


class _Collector:
    """``with bridge._collect() as out``: the outputs of one call, and the safety net.

    The mappers are written to be total; should one still raise, the error is
    logged (not raised into the host) and what was produced before it is kept.
    """

    def __init__(self, bridge: AcpBridge) -> None:
        self._bridge = bridge
        self._out: list[BridgeOutput] = []

    def __enter__(self) -> list[BridgeOutput]:
        self._bridge._out = self._out
        return self._out

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 _tb: object) -> bool:
        self._bridge._out = []
        if isinstance(error, Exception):
            log.error("ACP bridge: internal error (input skipped)", exc_info=error)
            return True
        return False


def _permission_outcome(
    permission: _Permission, approved: bool, selected: str | None
) -> JsonObject:
    """The ``session/request_permission`` result for a client's decision (bridges.md §2.4)."""
    ids = {option.option_id for option in permission.options}
    if selected is not None and selected in ids:
        choice: str | None = selected
    else:
        # no (known) option picked: the narrowest of the right kind, once before always
        prefix = "allow" if approved else "reject"
        choice = next((o.option_id for o in permission.options if o.kind == f"{prefix}_once"),
                      None) or next((o.option_id for o in permission.options
                                     if o.kind == f"{prefix}_always"), None)
    if choice is None:
        return _CANCELLED_PERMISSION
    return {"outcome": {"outcome": "selected", "optionId": choice}}


def _model_name(values: Mapping[str, object], key: str | None) -> str | None:
    value = values.get(key) if key is not None else None
    return value if isinstance(value, str) else None


def _line_counts(old: str, new: str) -> tuple[int, int]:
    """Lines added and removed between two texts."""
    added = removed = 0
    matcher = difflib.SequenceMatcher(None, old.splitlines(), new.splitlines())
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "delete"):
            removed += i2 - i1
        if tag in ("replace", "insert"):
            added += j2 - j1
    return added, removed


# ─── Elicitation schemas ↔ AHP questions ─────────────────────────────────────


def _questions(
    schema: JsonObject | None,
) -> tuple[tuple[t.ChatInputQuestion, ...], dict[str, str]]:
    """The questions of an elicitation's ``requestedSchema``, and each answer's JSON type."""
    properties = _obj(_get(schema, "properties")) or {}
    required = {r for r in _list(schema, "required") if isinstance(r, str)}
    questions: list[t.ChatInputQuestion] = []
    types: dict[str, str] = {}
    for qid, raw in properties.items():
        prop = _obj(raw)
        if prop is None:
            continue
        question, json_type = _question(qid, prop, qid in required)
        questions.append(question)
        types[qid] = json_type
    return tuple(questions), types


def _question(qid: str, prop: JsonObject, required: bool) -> tuple[t.ChatInputQuestion, str]:
    kind = _str(prop, "type")
    title = _str(prop, "title")
    message = _str(prop, "description") or title or qid
    req = required or None
    if kind == "string":
        options = _enum_options(_get(prop, "enum"), _get(prop, "oneOf"),
                                [_get(prop, "default")])
        if options:
            return t.ChatInputSingleSelectQuestion(
                id=qid, title=title, message=message, required=req, options=options
            ), "string"
        return t.ChatInputTextQuestion(
            id=qid, title=title, message=message, required=req, format=_str(prop, "format"),
            min=_int(prop, "minLength"), max=_int(prop, "maxLength"),
            default_value=_str(prop, "default"),
        ), "string"
    if kind in ("number", "integer"):
        return t.ChatInputNumberQuestion(
            kind=(t.ChatInputQuestionKind.INTEGER if kind == "integer"
                  else t.ChatInputQuestionKind.NUMBER),
            id=qid, title=title, message=message, required=req,
            min=_num(prop, "minimum"), max=_num(prop, "maximum"),
            default_value=_num(prop, "default"),
        ), kind
    if kind == "boolean":
        default = _get(prop, "default")
        return t.ChatInputBooleanQuestion(
            id=qid, title=title, message=message, required=req,
            default_value=default if isinstance(default, bool) else None,
        ), "boolean"
    if kind == "array":
        items = _obj(_get(prop, "items"))
        options = _enum_options(_get(items, "enum"), _get(items, "anyOf"),
                                list(_list(prop, "default")))
        if options:
            return t.ChatInputMultiSelectQuestion(
                id=qid, title=title, message=message, required=req, options=options,
                min=_int(prop, "minItems"), max=_int(prop, "maxItems"),
            ), "array"
    # a type AHP has no question for: asked as text, answered as the typed string
    return t.ChatInputTextQuestion(id=qid, title=title, message=message, required=req), "string"


def _enum_options(
    enum: object, titled: object, defaults: Sequence[object]
) -> tuple[t.ChatInputOption, ...]:
    options: list[t.ChatInputOption] = []
    for value in _as_list(enum):
        if isinstance(value, str):
            options.append(t.ChatInputOption(id=value, label=value,
                                             recommended=True if value in defaults else None))
    for raw in _as_list(titled):
        entry = _obj(raw)
        const = _str(entry, "const")
        if const is not None:
            options.append(t.ChatInputOption(
                id=const, label=_str(entry, "title") or const,
                description=_str(entry, "description"),
                recommended=True if const in defaults else None,
            ))
    return tuple(options)


def _answers(
    answers: Mapping[str, t.ChatInputAnswer], types: Mapping[str, str]
) -> dict[str, object]:
    """Submitted answers as the JSON object the requested schema describes."""
    content: dict[str, object] = {}
    for qid, answer in answers.items():
        if not isinstance(answer, t.ChatInputAnswered):
            continue  # skipped (or unknown): the property stays absent
        value = _answer_value(answer.value, types.get(qid, "string"))
        if value is not None:
            content[qid] = value
    return content


def _answer_value(value: t.ChatInputAnswerValue, json_type: str) -> object:
    if isinstance(value, (t.ChatInputTextAnswerValue, t.ChatInputSelectedAnswerValue)):
        text = value.value
        if json_type == "array":
            return [text]
        return text
    if isinstance(value, t.ChatInputSelectedManyAnswerValue):
        return list(value.value)
    if isinstance(value, t.ChatInputBooleanAnswerValue):
        return value.value
    if isinstance(value, t.ChatInputNumberAnswerValue):
        number = value.value
        if json_type == "integer" and float(number).is_integer():
            return int(number)
        return number
    return None


_Handler: TypeAlias = Callable[[AcpBridge, JsonObject], None]

_UPDATES: Final[Mapping[str, _Handler]] = {
    "agent_message_chunk": AcpBridge._message_chunk,
    "agent_thought_chunk": AcpBridge._thought_chunk,
    "user_message_chunk": AcpBridge._user_chunk,
    "tool_call": AcpBridge._tool_call,
    "tool_call_update": AcpBridge._tool_call,
    "plan": AcpBridge._plan,
    "plan_update": AcpBridge._plan_update,
    "plan_removed": AcpBridge._plan_removed,
    "available_commands_update": AcpBridge._commands_update,
    "current_mode_update": AcpBridge._mode_update,
    "config_option_update": AcpBridge._config_update,
    "session_info_update": AcpBridge._session_info,
    "usage_update": AcpBridge._usage_update,
    "notice": AcpBridge._notice,
    "compaction_update": AcpBridge._compaction,
    "compaction_summary_chunk": AcpBridge._ignore,
}
"""The ``sessionUpdate`` variants the bridge maps (bridges.md §2.1), by discriminator."""

