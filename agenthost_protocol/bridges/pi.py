"""pi / xcsh RPC mode behind an AHP host: a pure, sans-I/O event mapper.

One :class:`PiBridge` per agent process (one pi session, one AHP chat).  It
takes what the agent writes (:meth:`PiBridge.receive_frame`, or raw bytes
through :meth:`PiBridge.receive_data`) and the client actions the host
applied (:meth:`PiBridge.receive_client_action`, from ``ClientActionApplied``), and
returns a :class:`PiOutput`: the AHP actions to ``Host.dispatch`` (each with
its channel) and the frames to write to the agent's stdin.  It reads no
clock and makes no id of its own that a client could see: the caller injects
``clock`` (epoch ms) and ``new_id`` (turn and input-request ids).

Every action it returns is one the reducers apply: the bridge keeps a mirror
of what it needs of the chat (the active turn, each tool call's status, the
open input requests, pending messages) and never emits an action that would
be a no-op, such as a delta for a part that does not exist, a completion of
a tool call that already ended, or a usage equal to the last.  It is total:
a frame it does not understand, or one with fields of the wrong type, is
logged and skipped; nothing the agent writes raises.

The mapping (``docs/bridges.md`` has the tables):

* One AHP turn is one pi *agent run* (``agent_start`` ... ``agent_end``);
  pi's own ``turn_*`` (one LLM call and its tools) maps to nothing.
* A client's ``chat/turnStarted`` sends ``prompt``.  Its ``response`` comes at
  once and only says the prompt was accepted: the turn ends at
  ``agent_end``, by the last assistant ``stopReason`` (``stop``/``toolUse``
  complete, ``length`` complete with ``_meta``, ``aborted`` cancelled).  An
  ``error`` is held until the next event, because pi announces an
  auto-retry or an overflow compaction *after* ``agent_end`` and then runs
  again in the same turn.  A prompt that starts no run at all (an extension
  command) is found by :meth:`PiBridge.tick`: once the agent is quiet, a
  ``get_state`` probe that reports it idle completes the turn.
* A new turn while the agent still runs the previous one sends ``abort`` and
  holds the new ``prompt`` until the abort's ``response``: pi answers an
  abort once it is idle, so that response separates the old run's events
  (dropped) from the new run's.
* Text and thinking deltas become markdown and reasoning parts (created, then
  appended to); tool calls go through the AHP tool-call state machine
  (``toolcall_start`` → ``chat/toolCallStart``, ``tool_execution_start`` →
  ready and running, ``tool_execution_update`` → content, ``_end`` →
  complete).
* Extension dialogs (``select``/``confirm``/``input``/``editor``) become input
  requests; with ``confirm_tools`` a confirm/select dialog raised while
  exactly one tool runs re-confirms that tool instead.
* xcsh host tools are AHP client tools: the client that published the tool
  runs it, and its content and completion go back as ``host_tool_update`` /
  ``host_tool_result``.
"""

from __future__ import annotations

import json
import logging
import re
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from enum import Enum
from typing import Final, Literal, TypeAlias

from attrs import frozen

from .. import types as t
from ..reducers._clock import iso_timestamp
from .acp import AhpDispatch
from .pi_frames import (
    AbortCommand,
    AbortRetryCommand,
    ExtensionUiResponse,
    GetAvailableModelsCommand,
    GetStateCommand,
    HostToolDefinition,
    HostToolResultCommand,
    HostToolResultPayload,
    HostToolUpdateCommand,
    JsonLinesDecoder,
    JsonObject,
    JsonValue,
    MalformedLine,
    NewSessionCommand,
    PiCommand,
    PiContentBlock,
    PiImage,
    PromptCommand,
    SetHostToolsCommand,
    SetModelCommand,
    SetSessionNameCommand,
    SetThinkingLevelCommand,
    SteerCommand,
    SwitchSessionCommand,
)

__all__ = [
    "PiBridge",
    "PiDialect",
    "PiOutput",
    "default_invocation_message",
]

log = logging.getLogger(__name__)

Clock: TypeAlias = Callable[[], int]
"""Epoch milliseconds."""

IdFactory: TypeAlias = Callable[[], str]
"""A new unique id at each call (AHP turn ids and input-request ids)."""

InvocationFormatter: TypeAlias = Callable[[str, JsonValue], str]
"""``(toolName, args) -> invocationMessage``."""


class PiDialect(str, Enum):
    """Which fork of pi is on the other end: the frame sets differ."""

    PI = "pi"
    """``badlogic/pi-mono``: ``fork``/``get_fork_messages``, no host tools."""
    XCSH = "xcsh"
    """xcsh (an oh-my-pi fork): a ``ready`` frame, host tools, ``branch``, a ``cancel`` dialog."""


@frozen(kw_only=True)
class PiOutput:
    """What one input to the bridge produced, in order."""

    actions: tuple[AhpDispatch, ...] = ()
    """AHP actions for ``Host.dispatch``, in the order they must be applied."""
    commands: tuple[PiCommand, ...] = ()
    """Frames for the agent's stdin (encode with :func:`.pi_frames.encode_frame`)."""
    malformed: tuple[MalformedLine, ...] = ()
    """Lines of agent output that were not JSON objects (already logged)."""

    def __bool__(self) -> bool:
        return bool(self.actions or self.commands or self.malformed)


_ToolStatus: TypeAlias = Literal["streaming", "pending", "running", "done"]

CONFIRM_QUESTION: Final = "answer"
"""The id of the one question of an input request made from a pi dialog."""

_DENY_WORDS: Final = re.compile(r"\b(no|deny|denied|reject|block|cancel|abort|never|skip)\b", re.I)

_DIALOGS: Final = frozenset({"select", "confirm", "input", "editor"})
MAX_OPEN_DIALOGS: Final = 64
"""Dialogs that may wait for a client at once; the agent's next one is cancelled at once
(each is a question in the chat: a flood would bury it)."""
MAX_STATUSES: Final = 32
"""``setStatus`` keys kept (they make the session's activity line); more are ignored."""
MAX_STATUS_CHARS: Final = 1024


# -- reading untrusted JSON ------------------------------------------------------------


def _str(value: JsonValue) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: JsonValue) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return int(value)
    except (OverflowError, ValueError):
        return None


def _obj(value: JsonValue) -> JsonObject | None:
    return value if isinstance(value, Mapping) else None


def _arr(value: JsonValue) -> Sequence[JsonValue]:
    return value if isinstance(value, list) else ()


def _text_of(content: JsonValue) -> str:
    """The text of a pi message ``content``: a string or a list of content blocks."""
    if isinstance(content, str):
        return content
    texts = []
    for block in _arr(content):
        item = _obj(block)
        if item is not None and item.get("type") == "text":
            text = _str(item.get("text"))
            if text:
                texts.append(text)
    return "\n".join(texts)


def _canonical(value: JsonValue) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def default_invocation_message(tool_name: str, args: JsonValue) -> str:
    """A short description of a tool call for the UI (``Run `ls```, ``read src/x.py``)."""
    fields = _obj(args) or {}
    command = _str(fields.get("command"))
    if command:
        line = command.strip().splitlines()[0] if command.strip() else command
        return f"Run `{line}`"
    for key in ("path", "file_path", "filePath", "pattern", "query", "url"):
        value = _str(fields.get(key))
        if value:
            return f"{tool_name} {value}"
    return tool_name


def _tool_content(content: JsonValue) -> tuple[t.ToolResultContent, ...]:
    """pi tool-result blocks as AHP tool content: text, and images as embedded resources."""
    out: list[t.ToolResultContent] = []
    for block in _arr(content):
        item = _obj(block)
        if item is None:
            continue
        kind = item.get("type")
        if kind == "text":
            text = _str(item.get("text"))
            if text is not None:
                out.append(t.ToolResultTextContent(text=text))
        elif kind == "image":
            data, mime = _str(item.get("data")), _str(item.get("mimeType"))
            if data is not None and mime is not None:
                out.append(t.ToolResultEmbeddedResourceContent(data=data, content_type=mime))
    return tuple(out)


def _pi_content(content: Iterable[t.ToolResultContent]) -> list[PiContentBlock]:
    """AHP tool content as pi blocks (pi takes only text and images back)."""
    out: list[PiContentBlock] = []
    for item in content:
        if isinstance(item, t.ToolResultTextContent):
            out.append({"type": "text", "text": item.text})
        elif isinstance(item, t.ToolResultEmbeddedResourceContent) and (
            item.content_type.startswith("image/")
        ):
            out.append({"type": "image", "data": item.data, "mimeType": item.content_type})
        elif isinstance(item, t.ToolResultResourceContent):
            out.append({"type": "text", "text": item.uri})
        elif isinstance(item, (t.ToolResultTerminalContent, t.ToolResultSubagentContent)):
            out.append({"type": "text", "text": f"{item.title}: {item.resource}"})
    return out


def _render_message(message: t.Message) -> tuple[str, list[PiImage]]:
    """A user message as pi prompt text and images.

    Attachments pi cannot take as images are rendered into the text: a simple
    attachment by its model representation, a resource by its URI.
    """
    text = message.text
    images: list[PiImage] = []
    extra: list[str] = []
    for attachment in message.attachments or ():
        if isinstance(attachment, t.MessageEmbeddedResourceAttachment):
            if attachment.content_type.startswith("image/"):
                images.append({"type": "image", "data": attachment.data,
                               "mimeType": attachment.content_type})
            else:
                extra.append(f"[{attachment.label}]")
        elif isinstance(attachment, t.SimpleMessageAttachment):
            extra.append(attachment.model_representation or attachment.label)
        elif isinstance(attachment, t.MessageResourceAttachment):
            extra.append(f"{attachment.label}: {attachment.uri}")
        elif isinstance(attachment, (t.MessageAnnotationsAttachment, t.MessageChatAttachment)):
            extra.append(f"{attachment.label}: {attachment.resource}")
    if extra:
        text = "\n\n".join([text, *extra]) if text else "\n\n".join(extra)
    return text, images


# -- the mirror --------------------------------------------------------------------------


class _Tool:
    __slots__ = ("client", "content", "dialog", "frame", "invocation", "name", "status")

    def __init__(self, name: str, client: str | None) -> None:
        self.name = name
        self.client = client
        """The client id of a host tool's contributor (it executes the call)."""
        self.status: _ToolStatus = "streaming"
        self.content: tuple[t.ToolResultContent, ...] | None = None
        self.invocation = name
        self.frame: str | None = None
        """xcsh ``host_tool_call`` id, once it came."""
        self.dialog: str | None = None
        """The pi dialog re-confirming this call (``confirm_tools``)."""


class _Dialog:
    __slots__ = ("deadline", "method", "options", "request", "tool", "turn")

    def __init__(self, method: str, turn: str, options: tuple[str, ...]) -> None:
        self.method = method
        self.turn = turn
        self.options = options
        self.request: str | None = None
        """The AHP input-request id (plain dialogs)."""
        self.tool: str | None = None
        """The tool call id (a dialog mapped to re-confirmation)."""
        self.deadline: int | None = None


class _Turn:
    __slots__ = ("answers", "id", "model", "parts", "requests", "started_ms", "texts", "tools",
                 "usage", "usage_sent")

    def __init__(self, turn_id: str, started_ms: int) -> None:
        self.id = turn_id
        self.started_ms = started_ms
        self.parts: dict[str, str] = {}
        """Response part id -> kind (markdown/reasoning/other)."""
        self.texts: dict[str, str] = {}
        """Markdown/reasoning part id -> text so far (to complete a text from ``text_end``)."""
        self.tools: dict[str, _Tool] = {}
        self.requests: dict[str, str] = {}
        """Open input request id -> pi dialog id."""
        self.answers: dict[str, dict[str, t.ChatInputAnswer]] = {}
        """Draft answers per open request (``chat/inputAnswerChanged``)."""
        self.usage: dict[str, int | float] = {}
        self.usage_sent: t.UsageInfo | None = None
        self.model: str | None = None


@frozen
class _Pending:
    id: str
    text: str


# -- the bridge ------------------------------------------------------------------------


class PiBridge:
    """Maps one pi / xcsh RPC-mode agent onto one AHP chat (and its session).

    ``session`` and ``chat`` are the channel URIs the actions go to.
    ``clock`` gives epoch ms (``startedAt``, ``duration``, dialog time-outs);
    ``new_id`` the ids of turns the agent starts itself and of input
    requests.  ``confirm_tools`` maps a confirm/select dialog raised while
    one tool runs to a re-confirmation of that tool (a heuristic: pi has no
    permission protocol).  ``display_names`` gives tools a display name
    (default: the tool name); ``invocation_message`` formats a call for the
    UI.
    """

    def __init__(
        self,
        *,
        session: str,
        chat: str,
        clock: Clock,
        new_id: IdFactory,
        dialect: PiDialect = PiDialect.PI,
        provider: str = "pi",
        confirm_tools: bool = False,
        display_names: Mapping[str, str] | None = None,
        invocation_message: InvocationFormatter = default_invocation_message,
        max_line_bytes: int | None = None,
    ) -> None:
        self.session = session
        self.chat = chat
        self.dialect = dialect
        self.provider = provider
        """The agent's provider id in the root state (the models' ``provider``)."""
        self._clock = clock
        self._new_id = new_id
        self._confirm_tools = confirm_tools
        self._display_names = dict(display_names or {})
        self._format = invocation_message
        self._decoder = (JsonLinesDecoder() if max_line_bytes is None
                         else JsonLinesDecoder(max_line_bytes=max_line_bytes))
        self._actions: list[AhpDispatch] = []
        self._commands: list[PiCommand] = []
        self._seq = 0
        # the AHP side
        self._turn: _Turn | None = None
        self._queued: list[tuple[str, t.Message]] = []
        self._steering_current: str | None = None
        self._steering_message: t.Message | None = None
        """The current steering message while it has not been sent to the agent."""
        self._steering_sent: deque[_Pending] = deque()
        self._title: str | None = None
        self._statuses: dict[str, str] = {}
        self._session_activity: str | None = None
        self._chat_activity: str | None = None
        self._host_tools: dict[str, str] = {}
        """Host tool name -> client id (xcsh)."""
        self._tool_defs: dict[str, t.ToolDefinition] = {}
        self._clients: dict[str, tuple[t.ToolDefinition, ...]] = {}
        self._sent_host_tools: tuple[str, ...] | None = None
        self._model: str | None = None
        self._models: tuple[t.SessionModelInfo, ...] = ()
        self._models_id: str | None = None
        # the agent side
        self._session_file: str | None = None
        self._switch_id: str | None = None
        self._switch_path: str | None = None
        self._switched: tuple[bool, str] | None = None
        self._ready = False
        self._version: str | None = None
        self._exited: str | None = None
        self._run_active = False
        self._run_no = 0
        self._ordinal = 0
        self._run_turn: str | None = None
        """The AHP turn the current run feeds (``None``: the run's events are dropped)."""
        self._server_turn_pending = False
        """A run nobody prompted: its first message starts a server turn."""
        self._echo_pending = False
        self._prompted: str | None = None
        """The turn whose ``prompt`` was sent and whose run has not started yet."""
        self._acked: set[str] = set()
        self._prompt_ids: dict[str, str] = {}
        self._aborts: set[str] = set()
        self._skipped = 0
        self._skipped_kind = ""
        self._held: tuple[str, PromptCommand] | None = None
        self._continuing: str | None = None
        """A turn kept open across ``agent_end`` (retry or overflow compaction)."""
        self._overflow = False
        self._retrying = False
        self._deferred: tuple[str, str] | None = None
        self._stop: str | None = None
        self._error: str | None = None
        self._probe: str | None = None
        self._dialogs: dict[str, _Dialog] = {}
        self._content_tools: dict[tuple[int, int], str] = {}
        self._early_results: dict[str, HostToolResultCommand] = {}
        self._frames: dict[str, str] = {}
        """xcsh host-tool frame id -> tool call id."""

    # -- properties ----------------------------------------------------------------------

    @property
    def turn_id(self) -> str | None:
        """The chat's active turn as the bridge sees it."""
        return None if self._turn is None else self._turn.id

    @property
    def ready(self) -> bool:
        """Whether xcsh sent ``ready`` (pi sends none: check the first ``get_state``)."""
        return self._ready

    @property
    def agent_version(self) -> str | None:
        """The version in xcsh's ``ready`` frame."""
        return self._version

    @property
    def skipped_frames(self) -> tuple[int, str]:
        """How many frames were skipped or refused (no type, a type pi does not have, a
        dialog nobody can answer) and what the last was (the runner logs them, throttled:
        an agent may write millions)."""
        return self._skipped, self._skipped_kind

    @property
    def aborting(self) -> bool:
        """Whether an ``abort`` was sent and not answered yet."""
        return bool(self._aborts)

    @property
    def busy(self) -> bool:
        """Whether the agent is running, about to run, aborting, or retrying."""
        return bool(self._run_active or self._prompted or self._aborts or self._continuing
                    or self._deferred or self._retrying)

    @property
    def session_file(self) -> str | None:
        """The file pi keeps the session in, as its last ``get_state`` said (``None``:
        none, e.g. ``--no-session``); ``switch_session`` continues it in a new process."""
        return self._session_file

    @property
    def switched(self) -> tuple[bool, str] | None:
        """The answer to :meth:`switch_session`: ``(True, "")``, or ``(False, why)``;
        ``None`` while none came."""
        return self._switched

    def tool_status(self, tool_call_id: str) -> str | None:
        """The status of a tool call of the active turn as the bridge sees it (tests, logs)."""
        turn = self._turn
        tool = None if turn is None else turn.tools.get(tool_call_id)
        return None if tool is None else tool.status

    # -- inputs --------------------------------------------------------------------------

    def start(self) -> PiOutput:
        """The frames to send once the process is up.

        ``get_state`` (its answer makes :attr:`ready` true and names the
        session), ``get_available_models`` (:attr:`models`), and xcsh's host
        tools when clients already published some.
        """
        self._commands.append(GetStateCommand(type="get_state", id=self._next_id()))
        self._models_id = self._next_id()
        self._commands.append(GetAvailableModelsCommand(type="get_available_models",
                                                        id=self._models_id))
        self._sync_host_tools()
        return self._drain()

    @property
    def models(self) -> tuple[t.SessionModelInfo, ...]:
        """The agent's models (from ``get_available_models``), for the root state.

        Ids are ``provider/modelId``, the form a client's ``Message.model``
        selection takes back (``set_model``).
        """
        return self._models

    def receive_data(self, data: bytes) -> PiOutput:
        """Bytes read from the agent's stdout: every complete line, in order."""
        return self._frames_in(self._decoder.feed(data))

    def end_of_output(self, reason: str = "the agent process exited") -> PiOutput:
        """The agent's stdout ended: the last line, then the active turn fails with ``reason``."""
        out = self._frames_in(self._decoder.close())
        self._guard(self._exit, reason)
        return self._merge(out, self._drain())

    def receive_frame(self, frame: JsonObject) -> PiOutput:
        """One frame the agent wrote (a parsed JSON object)."""
        self._guard(self._frame, frame)
        return self._drain()

    def receive_client_action(self, channel: str, action: t.StateAction) -> PiOutput:
        """A client's action the host applied on ``channel`` (``ClientActionApplied``)."""
        self._guard(self._client, channel, action)
        return self._drain()

    def tick(self) -> PiOutput:
        """Call when the agent has been quiet for a while (the runner: ~0.5 s without output).

        Ends a turn whose error was held for a retry that did not come, fails
        dialogs whose time-out passed (pi answers them itself, silently) and
        probes with ``get_state`` for a prompt that started no run.
        """
        self._guard(self._tick)
        return self._drain()

    def abort(self) -> PiOutput:
        """Before the process is stopped: ``abort`` what the agent runs (nothing when idle).

        pi stops a running tool's command on ``abort``; a signal instead would
        leave that command running, orphaned.  The turn ends as the agent's
        events say (``aborted``: ``chat/turnCancelled``), or with the end of
        its output.
        """
        self._guard(self._abort_run)
        return self._drain()

    def switch_session(self, path: str) -> PiOutput:
        """``switch_session`` to the session kept in ``path`` (a session of an earlier
        process); :attr:`switched` tells how it went, then ``get_state`` follows."""
        self._switch_id = self._next_id()
        self._switch_path = path
        self._switched = None
        self._commands.append(SwitchSessionCommand(type="switch_session", id=self._switch_id,
                                                   sessionPath=path))
        return self._drain()

    def _abort_run(self) -> None:
        if self.busy and self._exited is None:
            self._abort()

    # -- plumbing ------------------------------------------------------------------------

    def _frames_in(self, frames: list[JsonObject | MalformedLine]) -> PiOutput:
        bad: list[MalformedLine] = []
        for frame in frames:
            if isinstance(frame, MalformedLine):
                # the runner logs them, throttled: an agent may write millions
                log.debug("pi: line %d is malformed (%s): %r", frame.line, frame.reason,
                          frame.excerpt)
                bad.append(frame)
            else:
                self._guard(self._frame, frame)
        out = self._drain()
        return PiOutput(actions=out.actions, commands=out.commands, malformed=tuple(bad))

    @staticmethod
    def _merge(first: PiOutput, second: PiOutput) -> PiOutput:
        return PiOutput(actions=first.actions + second.actions,
                        commands=first.commands + second.commands,
                        malformed=first.malformed + second.malformed)

    def _guard(self, handler: Callable[..., None], *args: object) -> None:
        # totality: a bug on strange input is logged, never raised into the host; what
        # was emitted before it is still returned, so the mirror and the host agree
        try:
            handler(*args)
        except Exception:
            log.exception("pi bridge: failed handling %r", args[:1])

    def _drain(self) -> PiOutput:
        out = PiOutput(actions=tuple(self._actions), commands=tuple(self._commands))
        self._actions.clear()
        self._commands.clear()
        return out

    def _next_id(self) -> str:
        # correlation ids on the agent wire only; no client ever sees them
        self._seq += 1
        return f"ahp-{self._seq}"

    def _chat_action(self, action: t.StateAction) -> None:
        self._actions.append(AhpDispatch(self.chat, action))

    def _session_action(self, action: t.StateAction) -> None:
        self._actions.append(AhpDispatch(self.session, action))

    def _now(self) -> int:
        return self._clock()

    # -- frames from the agent -------------------------------------------------------------

    def _frame(self, frame: JsonObject) -> None:
        kind = frame.get("type")
        if not isinstance(kind, str):
            log.debug("pi: a frame without a type: %.200r", frame)
            self._skip("(no type)")
            return
        if self._deferred is not None and kind not in (
            "auto_retry_start", "auto_retry_end", "auto_compaction_start", "response",
        ):
            self._resolve_deferred()
        handler = _FRAME_HANDLERS.get(kind)
        if handler is None:
            log.debug("pi: unknown frame %r skipped", kind)
            self._skip(kind[:100])
            return
        handler(self, frame)

    def _skip(self, what: str) -> None:
        self._skipped += 1
        self._skipped_kind = what

    def _on_ready(self, frame: JsonObject) -> None:
        self._ready = True
        self._version = _str(frame.get("version"))

    def _on_response(self, frame: JsonObject) -> None:
        frame_id = _str(frame.get("id"))
        success = frame.get("success") is True
        error = _str(frame.get("error")) or "the agent refused the command"
        command = _str(frame.get("command")) or "?"
        if frame_id is None:
            if not success:
                log.warning("pi: %s failed: %s", command, error)
            return
        if frame_id in self._aborts:
            # pi answers an abort once idle: whatever retry was waiting is over too
            self._aborts.discard(frame_id)
            self._retrying = False
            self._after_idle()
            return
        if frame_id == self._probe:
            self._probe = None
            self._on_probe(_obj(frame.get("data")) if success else None)
            return
        if frame_id == self._models_id:
            self._models_id = None
            self._on_models(_obj(frame.get("data")) if success else None)
            return
        if frame_id == self._switch_id:
            self._switch_id = None
            cancelled = (_obj(frame.get("data")) or {}).get("cancelled") is True
            self._switched = (
                (False, error) if not success
                else (False, "the agent cancelled the switch") if cancelled else (True, ""))
            if success and not cancelled:  # its name and file are the loaded session's
                self._session_file = self._switch_path
                self._commands.append(GetStateCommand(type="get_state", id=self._next_id()))
            return
        turn_id = self._prompt_ids.get(frame_id)
        if turn_id is not None:
            if success:
                self._acked.add(turn_id)
                return
            self._prompt_ids.pop(frame_id, None)
            if self._prompted == turn_id:
                self._prompted = None
            turn = self._turn
            if turn is not None and turn.id == turn_id:
                self._end(turn, "error", error=t.ErrorInfo(error_type="rpc", message=error))
            self._after_idle()
            return
        if not success:
            log.warning("pi: %s (%s) failed: %s", command, frame_id, error)
        elif command == "get_state":
            self._on_state(_obj(frame.get("data")) or {})
        elif command in ("new_session", "fork", "branch"):
            # pi goes on in a new session file: get_state names it
            self._commands.append(GetStateCommand(type="get_state", id=self._next_id()))

    def _on_state(self, data: JsonObject) -> None:
        self._ready = True
        self._note_file(data)
        name = _str(data.get("sessionName"))
        if name and name != self._title:
            self._title = name
            self._session_action(t.SessionTitleChangedAction(title=name))

    def _on_models(self, data: JsonObject | None) -> None:
        models = []
        for item in _arr((data or {}).get("models")):
            model = _obj(item)
            if model is None:
                continue
            model_id, provider = _str(model.get("id")), _str(model.get("provider"))
            if not model_id or not provider:
                continue
            window, most = _int(model.get("contextWindow")), _int(model.get("maxTokens"))
            models.append(t.SessionModelInfo(
                id=f"{provider}/{model_id}", provider=self.provider,
                name=_str(model.get("name")) or model_id,
                max_context_window=window if window and window > 0 else None,
                max_output_tokens=most if most and most > 0 else None,
                supports_vision="image" in _arr(model.get("input")) or None,
            ))
        self._models = tuple(models)

    def _note_file(self, data: JsonObject) -> None:
        if "sessionFile" in data:
            self._session_file = _str(data.get("sessionFile")) or None

    def _on_probe(self, data: JsonObject | None) -> None:
        if data is not None:
            self._note_file(data)
        turn = self._turn
        if (data is None or self._prompted is None or turn is None or turn.id != self._prompted
                or self._run_active):
            return
        if data.get("isStreaming") is False and data.get("isCompacting") is not True:
            # the prompt ran without an agent run (an extension command): the turn is over
            self._prompted = None
            self._end(turn, "complete")
            self._after_idle()

    def _on_agent_start(self, frame: JsonObject) -> None:
        self._run_active = True
        self._run_no += 1
        self._ordinal = 0
        self._content_tools.clear()
        self._stop = self._error = None
        self._echo_pending = self._server_turn_pending = False
        turn = self._turn
        if self._prompted is not None and turn is not None and turn.id == self._prompted:
            self._run_turn = turn.id
            self._echo_pending = True
        elif self._continuing is not None and turn is not None and turn.id == self._continuing:
            self._run_turn = turn.id
        elif turn is None and not self._aborts and self._held is None:
            self._run_turn = None
            self._server_turn_pending = True
        else:
            # the run of a turn that was replaced or cancelled: dropped
            self._run_turn = None
        self._prompted = None
        self._continuing = None
        self._overflow = False
        if (self._run_turn is not None and self._steering_current is not None
                and self._steering_message is not None):
            self._steer(self._steering_current, self._steering_message)
            self._steering_message = None

    def _on_agent_end(self, frame: JsonObject) -> None:
        self._run_active = False
        self._server_turn_pending = False
        # pi delivers steering within the run; what was not echoed by now never will be
        self._steering_sent.clear()
        if self._stop is None:
            # no message_end seen: the run's last assistant message says how it ended
            for message in reversed(_arr(frame.get("messages"))):
                item = _obj(message)
                if item is not None and item.get("role") == "assistant":
                    self._stop = _str(item.get("stopReason"))
                    self._error = _str(item.get("errorMessage"))
                    break
        turn = self._live()
        self._run_turn = None
        if turn is not None:
            if self._stop == "error":
                self._deferred = (turn.id, self._error or "the model request failed")
            elif self._stop == "aborted":
                self._end(turn, "cancelled")
            else:
                meta = {"stopReason": self._stop} if self._stop == "length" else None
                self._end(turn, "complete", meta=meta)
        self._after_idle()

    def _on_message_start(self, frame: JsonObject) -> None:
        message = _obj(frame.get("message"))
        if message is None:
            return
        role = message.get("role")
        if role == "assistant":
            self._ordinal += 1
            return
        if role == "user":
            self._user_message(_text_of(message.get("content")))
        elif role == "custom":
            if message.get("display") is False:
                return
            text = _text_of(message.get("content"))
            if self._server_turn_pending:
                self._start_server_turn(text, t.MessageKind.SYSTEM_NOTIFICATION)
            elif text:
                self._notify(text)
        elif role in ("compactionSummary", "branchSummary"):
            summary = _str(message.get("summary"))
            if summary:
                label = "Context compacted" if role == "compactionSummary" else "Branch summary"
                self._notify(f"{label}: {summary}")

    def _user_message(self, text: str) -> None:
        if self._server_turn_pending:
            self._start_server_turn(text, t.MessageKind.USER)
            return
        if self._echo_pending:
            self._echo_pending = False  # pi echoes the prompt as the run's first message
            return
        turn = self._live()
        if turn is None:
            return
        for i, pending in enumerate(self._steering_sent):
            if pending.text == text:
                for _ in range(i + 1):
                    self._steering_sent.popleft()
                if self._steering_current == pending.id:
                    self._steering_current = None
                    self._chat_action(t.ChatPendingMessageRemovedAction(
                        kind=t.PendingMessageKind.STEERING, id=pending.id))
                return
        # a follow-up (or a message an extension sent): pi goes on in the same run, but it
        # answers a new message, so it is a new AHP turn
        self._end(turn, "complete")
        self._start_server_turn(text, t.MessageKind.USER)

    def _start_server_turn(self, text: str, kind: t.MessageKind,
                           queued_id: str | None = None) -> _Turn:
        self._server_turn_pending = False
        now = self._now()
        turn = _Turn(self._new_id(), now)
        self._turn = turn
        self._run_turn = turn.id if self._run_active else self._run_turn
        self._chat_action(t.ChatTurnStartedAction(
            turn_id=turn.id, started_at=iso_timestamp(now),
            message=t.Message(text=text, origin=t.MessageOrigin(kind=kind)),
            queued_message_id=queued_id,
        ))
        return turn

    def _on_message_update(self, frame: JsonObject) -> None:
        event = _obj(frame.get("assistantMessageEvent"))
        if event is None:
            return
        kind = _str(event.get("type")) or ""
        if kind == "error":
            failed = _obj(event.get("error")) or {}
            self._stop = _str(event.get("reason")) or _str(failed.get("stopReason")) or "error"
            self._error = _str(failed.get("errorMessage")) or self._error
            return
        turn = self._live()
        if turn is None:
            return
        index = _int(event.get("contentIndex"))
        if index is None:
            return
        if kind in ("text_start", "text_delta", "text_end"):
            self._text(turn, index, "markdown", event, kind.removeprefix("text_"))
        elif kind in ("thinking_start", "thinking_delta", "thinking_end"):
            self._text(turn, index, "reasoning", event, kind.removeprefix("thinking_"))
        elif kind in ("toolcall_start", "toolcall_delta", "toolcall_end"):
            self._toolcall(turn, index, frame, event, kind)

    def _text(self, turn: _Turn, index: int, part_kind: str, event: JsonObject,
              step: str) -> None:
        part_id = f"{turn.id}.r{self._run_no}.m{self._ordinal}.c{index}.{part_kind}"
        if part_id not in turn.parts:
            if step == "end" and not _str(event.get("content")):
                return
            if part_id in turn.tools:
                return  # an id a tool call already has: a delta could reach the wrong part
            part: t.ResponsePart = (t.MarkdownResponsePart(id=part_id, content="")
                                    if part_kind == "markdown"
                                    else t.ReasoningResponsePart(id=part_id, content=""))
            turn.parts[part_id] = part_kind
            turn.texts[part_id] = ""
            self._chat_action(t.ChatResponsePartAction(turn_id=turn.id, part=part))
        if step == "delta":
            delta = _str(event.get("delta")) or ""
        elif step == "end":
            # pi sends the whole block at its end: append what the deltas missed, if the
            # deltas were a prefix of it (AHP has no action that replaces a part's text)
            whole = _str(event.get("content")) or ""
            have = turn.texts.get(part_id, "")
            delta = whole[len(have):] if whole.startswith(have) else ""
        else:
            delta = ""
        if not delta:
            return
        turn.texts[part_id] = turn.texts.get(part_id, "") + delta
        if part_kind == "markdown":
            self._chat_action(t.ChatDeltaAction(turn_id=turn.id, part_id=part_id, content=delta))
        else:
            self._chat_action(t.ChatReasoningAction(turn_id=turn.id, part_id=part_id,
                                                    content=delta))

    def _toolcall(self, turn: _Turn, index: int, frame: JsonObject, event: JsonObject,
                  kind: str) -> None:
        key = (self._ordinal, index)
        call_id = self._content_tools.get(key)
        if call_id is None:
            block: JsonObject | None
            if kind == "toolcall_end":
                block = _obj(event.get("toolCall"))
            else:
                partial = _obj(event.get("partial")) or _obj(frame.get("message")) or {}
                content = _arr(partial.get("content"))
                block = _obj(content[index]) if 0 <= index < len(content) else None
            if block is None:
                return
            new_id, name = _str(block.get("id")), _str(block.get("name"))
            if not new_id or not name:
                return  # some providers fill the id in later: wait for it
            call_id = new_id
            self._content_tools[key] = call_id
            self._start_tool(turn, call_id, name)
        tool = turn.tools.get(call_id)
        if kind == "toolcall_delta" and tool is not None and tool.status == "streaming":
            delta = _str(event.get("delta"))
            if delta:
                self._chat_action(t.ChatToolCallDeltaAction(turn_id=turn.id, tool_call_id=call_id,
                                                            content=delta))

    def _start_tool(self, turn: _Turn, call_id: str, name: str) -> _Tool | None:
        if call_id in turn.tools or call_id in turn.parts:
            return turn.tools.get(call_id)
        client = self._host_tools.get(name) if self.dialect is PiDialect.XCSH else None
        tool = _Tool(name, client)
        turn.tools[call_id] = tool
        definition = self._tool_defs.get(name) if client is not None else None
        display = self._display_names.get(name) or (
            definition.title if definition is not None and definition.title else name)
        self._chat_action(t.ChatToolCallStartAction(
            turn_id=turn.id, tool_call_id=call_id, tool_name=name, display_name=display,
            contributor=None if client is None else t.ToolCallClientContributor(client_id=client),
        ))
        return tool

    def _on_tool_start(self, frame: JsonObject) -> None:
        turn = self._live()
        call_id, name = _str(frame.get("toolCallId")), _str(frame.get("toolName"))
        if turn is None or not call_id or not name:
            return
        tool = self._start_tool(turn, call_id, name)
        if tool is None or tool.status != "streaming":
            return
        args = frame.get("args")
        tool.invocation = self._format(name, args) or name
        tool.status = "running"
        self._chat_action(t.ChatToolCallReadyAction(
            turn_id=turn.id, tool_call_id=call_id, invocation_message=tool.invocation,
            tool_input=_canonical(args), intention=_str(frame.get("intent")),
            confirmed=t.ToolCallConfirmationReason.NOT_NEEDED,
        ))

    def _on_tool_update(self, frame: JsonObject) -> None:
        turn = self._live()
        call_id = _str(frame.get("toolCallId"))
        tool = None if turn is None or call_id is None else turn.tools.get(call_id)
        if turn is None or call_id is None or tool is None:
            return
        if tool.status != "running" or tool.client is not None:
            return  # a host tool's content is its client's to set
        partial = _obj(frame.get("partialResult")) or {}
        content = _tool_content(partial.get("content"))
        if content == tool.content or (not content and tool.content is None):
            return
        tool.content = content
        self._chat_action(t.ChatToolCallContentChangedAction(
            turn_id=turn.id, tool_call_id=call_id, content=content))

    def _on_tool_end(self, frame: JsonObject) -> None:
        turn = self._live()
        call_id, name = _str(frame.get("toolCallId")), _str(frame.get("toolName"))
        if turn is None or not call_id:
            return
        tool = turn.tools.get(call_id) or (self._start_tool(turn, call_id, name) if name else None)
        if tool is None or tool.status == "done":
            return  # a denied call, or a host tool its client already completed
        if tool.status == "streaming":
            tool.status = "running"
            self._chat_action(t.ChatToolCallReadyAction(
                turn_id=turn.id, tool_call_id=call_id, invocation_message=tool.invocation,
                confirmed=t.ToolCallConfirmationReason.NOT_NEEDED,
            ))
        result = _obj(frame.get("result")) or {}
        content = _tool_content(result.get("content"))
        failed = frame.get("isError") is True
        details = _obj(result.get("details"))
        text = _text_of(result.get("content"))
        self._complete_tool(turn, call_id, t.ToolCallResult(
            success=not failed,
            past_tense_message=tool.invocation if not failed else f"{tool.invocation} (failed)",
            content=content or None,
            structured_content=dict(details) if details else None,
            error=t.ToolCallError(message=text or "the tool failed") if failed else None,
        ))

    def _complete_tool(self, turn: _Turn, call_id: str, result: t.ToolCallResult) -> None:
        tool = turn.tools[call_id]
        tool.status = "done"
        self._forget_tool_dialog(tool)
        self._chat_action(t.ChatToolCallCompleteAction(turn_id=turn.id, tool_call_id=call_id,
                                                       result=result))

    def _on_message_end(self, frame: JsonObject) -> None:
        message = _obj(frame.get("message"))
        if message is None or message.get("role") != "assistant":
            return
        self._stop = _str(message.get("stopReason"))
        self._error = _str(message.get("errorMessage"))
        turn = self._live()
        usage = _obj(message.get("usage"))
        if turn is None or usage is None:
            return
        sums = turn.usage
        for key in ("input", "output", "cacheRead", "cacheWrite"):
            value = _int(usage.get(key))
            if value is not None and value >= 0:
                sums[key] = sums.get(key, 0) + value
        cost = _obj(usage.get("cost")) or {}
        total = cost.get("total")
        if isinstance(total, (int, float)) and not isinstance(total, bool):
            sums["cost"] = sums.get("cost", 0) + total
        turn.model = _str(message.get("model")) or turn.model
        meta: dict[str, object] = {}
        if "cacheWrite" in sums:
            meta["cacheWriteTokens"] = sums["cacheWrite"]
        if "cost" in sums:
            meta["cost"] = sums["cost"]
        provider = _str(message.get("provider"))
        if provider:
            meta["provider"] = provider
        info = t.UsageInfo(
            input_tokens=int(sums["input"]) if "input" in sums else None,
            output_tokens=int(sums["output"]) if "output" in sums else None,
            cache_read_tokens=int(sums["cacheRead"]) if "cacheRead" in sums else None,
            model=turn.model, meta=meta or None,
        )
        if info == turn.usage_sent:
            return
        turn.usage_sent = info
        self._chat_action(t.ChatUsageAction(turn_id=turn.id, usage=info))

    # -- retry, compaction ---------------------------------------------------------------

    def _resolve_deferred(self) -> None:
        deferred, self._deferred = self._deferred, None
        if deferred is None:
            return
        turn = self._turn
        if turn is not None and turn.id == deferred[0]:
            self._end(turn, "error", error=t.ErrorInfo(error_type="provider",
                                                       message=deferred[1]))
        self._after_idle()

    def _on_retry_start(self, frame: JsonObject) -> None:
        if self._deferred is not None:
            self._continuing = self._deferred[0]
            self._deferred = None
        self._retrying = True
        attempt, most = _int(frame.get("attempt")), _int(frame.get("maxAttempts"))
        delay = _int(frame.get("delayMs"))
        text = "Retrying"
        if attempt is not None and most is not None:
            text += f" {attempt}/{most}"
        if delay is not None:
            text += f" in {delay} ms"
        self._chat_activity_set(text)

    def _on_retry_end(self, frame: JsonObject) -> None:
        self._retrying = False
        self._chat_activity_set(None)
        held = self._continuing or (self._deferred[0] if self._deferred else None)
        self._deferred = None
        if frame.get("success") is True:
            if held is not None and not self._run_active:
                self._continuing = held  # the successful attempt's run is yet to come
            return
        self._continuing = None
        turn = self._turn
        if held is not None and turn is not None and turn.id == held:
            final = _str(frame.get("finalError")) or "the model request kept failing"
            if final == "Retry cancelled":
                self._end(turn, "cancelled")
            else:
                self._end(turn, "error", error=t.ErrorInfo(error_type="retry-exhausted",
                                                           message=final))
        self._after_idle()

    def _on_compaction_start(self, frame: JsonObject) -> None:
        if frame.get("reason") == "overflow" and self._deferred is not None:
            # the context overflowed: pi compacts, then runs the prompt again
            self._continuing = self._deferred[0]
            self._error = self._deferred[1]
            self._deferred = None
            self._overflow = True
        self._chat_activity_set("Compacting context")

    def _on_compaction_end(self, frame: JsonObject) -> None:
        self._chat_activity_set(None)
        message = _str(frame.get("errorMessage"))
        if self._overflow and self._continuing is not None:
            if frame.get("willRetry") is True:
                return
            held, self._continuing, self._overflow = self._continuing, None, False
            turn = self._turn
            if turn is not None and turn.id == held:
                self._end(turn, "error", error=t.ErrorInfo(
                    error_type="context-overflow",
                    message=message or self._error or "the context is too long"))
            self._after_idle()
            return
        if message:
            self._notify(f"Compaction failed: {message}")

    # -- notices, titles -------------------------------------------------------------------

    def _notify(self, text: str) -> None:
        turn = self._live()
        if turn is None:
            log.info("pi: no turn for the notice %r", text[:200])
            return
        self._chat_action(t.ChatResponsePartAction(
            turn_id=turn.id, part=t.SystemNotificationResponsePart(content=text)))

    def _on_extension_error(self, frame: JsonObject) -> None:
        error = _str(frame.get("error")) or "unknown error"
        where = _str(frame.get("extensionPath")) or _str(frame.get("path")) or "an extension"
        self._notify(f"Extension error in {where}: {error}")

    def _on_fallback(self, frame: JsonObject) -> None:
        source, target = _str(frame.get("from")), _str(frame.get("to"))
        if target:
            self._notify(f"Switched model from {source or '?'} to {target}")

    def _on_ttsr(self, frame: JsonObject) -> None:
        rules = [r for r in (_str(x) or _str((_obj(x) or {}).get("name"))
                             for x in _arr(frame.get("rules"))) if r]
        self._notify("Rules triggered: " + (", ".join(rules) if rules else "(unnamed)"))

    def _on_ignored(self, frame: JsonObject) -> None:
        log.debug("pi: %s has no AHP equivalent", frame.get("type"))

    def _chat_activity_set(self, text: str | None) -> None:
        if text == self._chat_activity:
            return
        self._chat_activity = text
        self._chat_action(t.ChatActivityChangedAction(activity=text))

    # -- extension UI ------------------------------------------------------------------------

    def _on_ui_request(self, frame: JsonObject) -> None:
        dialog_id, method = _str(frame.get("id")), _str(frame.get("method"))
        if not method:
            return
        if method in _DIALOGS:
            if dialog_id:
                self._dialog(dialog_id, method, frame)
        elif method == "notify":
            text = _str(frame.get("message"))
            if text:
                level = _str(frame.get("notifyType"))
                self._notify(f"{level.capitalize()}: {text}"
                             if level in ("warning", "error") else text)
        elif method == "setStatus":
            key = (_str(frame.get("statusKey")) or "")[:MAX_STATUS_CHARS]
            value = (_str(frame.get("statusText")) or "")[:MAX_STATUS_CHARS]
            if value and key not in self._statuses and len(self._statuses) >= MAX_STATUSES:
                self._skip("extension_ui_request setStatus (too many keys)")
            elif value:
                self._statuses[key] = value
            else:
                self._statuses.pop(key, None)
            activity = " · ".join(self._statuses.values()) or None
            if activity != self._session_activity:
                self._session_activity = activity
                self._session_action(t.SessionActivityChangedAction(activity=activity))
        elif method == "setTitle":
            title = _str(frame.get("title"))
            if title and title != self._title:
                self._title = title
                self._session_action(t.SessionTitleChangedAction(title=title))
        elif method == "cancel":
            target = _str(frame.get("targetId"))
            if target:
                self._dialog_gone(target)
        else:
            log.debug("pi: extension UI %r has no AHP equivalent", method)

    def _dialog(self, dialog_id: str, method: str, frame: JsonObject) -> None:
        turn = self._live()
        if turn is None or dialog_id in self._dialogs or len(self._dialogs) >= MAX_OPEN_DIALOGS:
            # nobody could answer it in AHP: tell the extension at once rather than let it wait
            log.debug("pi: %s dialog %r outside a turn or past %d open: cancelled", method,
                      dialog_id, MAX_OPEN_DIALOGS)
            self._skip(f"extension_ui_request {method} (cancelled: outside a turn, or too "
                       f"many open)")
            self._commands.append(ExtensionUiResponse(type="extension_ui_response", id=dialog_id,
                                                      cancelled=True))
            return
        title = _str(frame.get("title")) or ""
        options = tuple(o for o in (_str(x) for x in _arr(frame.get("options"))) if o is not None)
        dialog = _Dialog(method, turn.id, options)
        timeout = _int(frame.get("timeout"))
        if timeout is not None and timeout > 0:
            dialog.deadline = self._now() + timeout
        self._dialogs[dialog_id] = dialog
        if self._confirm_tools and method in ("confirm", "select") and self._reconfirm(
            turn, dialog_id, dialog, title, _str(frame.get("message"))
        ):
            return
        request_id = self._new_id()
        dialog.request = request_id
        turn.requests[request_id] = dialog_id
        question: t.ChatInputQuestion
        if method == "select":
            question = t.ChatInputSingleSelectQuestion(
                id=CONFIRM_QUESTION, message=title or "Choose one", required=True,
                options=tuple(t.ChatInputOption(id=f"o{i}", label=label)
                              for i, label in enumerate(options)),
            )
        elif method == "confirm":
            question = t.ChatInputBooleanQuestion(
                id=CONFIRM_QUESTION, title=title or None,
                message=_str(frame.get("message")) or title or "Confirm?", required=True,
            )
        else:
            question = t.ChatInputTextQuestion(
                id=CONFIRM_QUESTION, message=title or "Enter a value",
                default_value=_str(frame.get("prefill")) if method == "editor" else None,
                format="multiline" if method == "editor" else None,
            )
        self._chat_action(t.ChatInputRequestedAction(request=t.ChatInputRequest(
            id=request_id, message=title or None, questions=(question,),
        )))

    def _reconfirm(self, turn: _Turn, dialog_id: str, dialog: _Dialog, title: str,
                   message: str | None) -> bool:
        """A confirm/select dialog raised while exactly one agent tool runs: re-confirm it."""
        running = [(cid, tool) for cid, tool in turn.tools.items()
                   if tool.status == "running" and tool.client is None and tool.dialog is None]
        if len(running) != 1:
            return False
        call_id, tool = running[0]
        options: tuple[t.ConfirmationOption, ...]
        if dialog.method == "confirm":
            options = (t.ConfirmationOption(id="yes", label="Allow",
                                            kind=t.ConfirmationOptionKind.APPROVE),
                       t.ConfirmationOption(id="no", label="Deny",
                                            kind=t.ConfirmationOptionKind.DENY))
        else:
            options = tuple(
                t.ConfirmationOption(id=f"o{i}", label=label,
                                     kind=t.ConfirmationOptionKind.DENY if _DENY_WORDS.search(label)
                                     else t.ConfirmationOptionKind.APPROVE)
                for i, label in enumerate(dialog.options))
            if not options:
                return False
        dialog.tool = call_id
        tool.dialog = dialog_id
        tool.status = "pending"
        self._chat_action(t.ChatToolCallReadyAction(
            turn_id=turn.id, tool_call_id=call_id,
            invocation_message=message or title or tool.invocation,
            confirmation_title=title or None, options=options,
        ))
        return True

    def _dialog_gone(self, dialog_id: str) -> None:
        """xcsh cancelled a dialog, or its time-out passed (pi answered it itself)."""
        dialog = self._dialogs.pop(dialog_id, None)
        if dialog is None:
            return
        turn = self._turn
        if turn is None or turn.id != dialog.turn:
            return
        if dialog.request is not None and turn.requests.pop(dialog.request, None) is not None:
            turn.answers.pop(dialog.request, None)
            self._chat_action(t.ChatInputCompletedAction(
                request_id=dialog.request, response=t.ChatInputResponseKind.CANCEL))
        elif dialog.tool is not None:
            tool = turn.tools.get(dialog.tool)
            if tool is not None and tool.dialog == dialog_id:
                # the call stays pending: its tool_execution_end completes it from there
                tool.dialog = None

    def _forget_tool_dialog(self, tool: _Tool) -> None:
        if tool.dialog is not None:
            self._dialogs.pop(tool.dialog, None)
            tool.dialog = None

    def _reply_dialog(self, dialog_id: str, *, value: str | None = None,
                      confirmed: bool | None = None) -> None:
        self._dialogs.pop(dialog_id, None)
        if value is not None:
            self._commands.append(ExtensionUiResponse(type="extension_ui_response", id=dialog_id,
                                                      value=value))
        elif confirmed is not None:
            self._commands.append(ExtensionUiResponse(type="extension_ui_response", id=dialog_id,
                                                      confirmed=confirmed))
        else:
            self._commands.append(ExtensionUiResponse(type="extension_ui_response", id=dialog_id,
                                                      cancelled=True))

    # -- xcsh host tools -------------------------------------------------------------------

    def _on_host_tool_call(self, frame: JsonObject) -> None:
        frame_id, call_id = _str(frame.get("id")), _str(frame.get("toolCallId"))
        if not frame_id:
            return
        early = None if call_id is None else self._early_results.pop(call_id, None)
        if early is not None:
            early["id"] = frame_id  # the client answered before this frame came
            self._commands.append(early)
            return
        turn = self._live()
        tool = None if turn is None or call_id is None else turn.tools.get(call_id)
        if call_id is None or tool is None or tool.client is None or tool.status == "done":
            # no AHP client will run it (no turn, or not a published host tool): fail it now
            self._commands.append(HostToolResultCommand(
                type="host_tool_result", id=frame_id, isError=True,
                result={"content": [{"type": "text",
                                     "text": "no AHP client can run this tool now"}]},
            ))
            return
        tool.frame = frame_id
        self._frames[frame_id] = call_id

    def _on_host_tool_cancel(self, frame: JsonObject) -> None:
        target = _str(frame.get("targetId"))
        call_id = None if target is None else self._frames.pop(target, None)
        turn = self._turn
        tool = None if turn is None or call_id is None else turn.tools.get(call_id)
        if turn is None or call_id is None or tool is None:
            return
        if tool.status in ("running", "pending"):
            # the server may complete a client's call when it gives up on it
            self._complete_tool(turn, call_id, t.ToolCallResult(
                success=False, past_tense_message="Cancelled",
                error=t.ToolCallError(message="cancelled by the agent"),
            ))

    def _sync_host_tools(self) -> None:
        if self.dialect is not PiDialect.XCSH:
            return
        tools: dict[str, tuple[str, t.ToolDefinition]] = {}
        for client_id, definitions in self._clients.items():
            for definition in definitions:
                tools.setdefault(definition.name, (client_id, definition))
        self._host_tools = {name: client for name, (client, _d) in tools.items()}
        self._tool_defs = {name: definition for name, (_c, definition) in tools.items()}
        names = tuple(sorted(tools))
        if names == self._sent_host_tools or (self._sent_host_tools is None and not names):
            return
        self._sent_host_tools = names
        payload: list[HostToolDefinition] = []
        for name in names:
            definition = tools[name][1]
            payload.append({
                "name": name, "label": definition.title or name,
                "description": definition.description or "",
                "parameters": dict(definition.input_schema or {"type": "object"}),
            })
        self._commands.append(SetHostToolsCommand(type="set_host_tools", id=self._next_id(),
                                                  tools=payload))

    def set_active_clients(self, clients: Iterable[t.SessionActiveClient]) -> PiOutput:
        """The session's active clients (their tools become xcsh host tools)."""
        self._clients = {c.client_id: c.tools for c in clients}
        self._guard(self._sync_host_tools)
        return self._drain()

    # -- the end of the agent ------------------------------------------------------------

    def _exit(self, reason: str) -> None:
        self._exited = reason
        self._deferred = None
        turn = self._turn
        if turn is not None:
            self._end(turn, "error", error=t.ErrorInfo(error_type="agent-exited",
                                                       message=reason))
        self._run_active = False
        self._prompted = self._continuing = self._held = None
        self._aborts.clear()

    def _tick(self) -> None:
        if self._deferred is not None:
            self._resolve_deferred()
        now = self._now()
        for dialog_id, dialog in list(self._dialogs.items()):
            if dialog.deadline is not None and dialog.deadline <= now:
                self._dialog_gone(dialog_id)
        if (self._prompted is not None and self._prompted in self._acked
                and self._probe is None and not self._run_active):
            self._probe = self._next_id()
            self._commands.append(GetStateCommand(type="get_state", id=self._probe))

    # -- turns -------------------------------------------------------------------------------

    def _live(self) -> _Turn | None:
        """The active turn, if the agent's current activity feeds it."""
        turn = self._turn
        if turn is None:
            return None
        # the prompted turn counts before its run starts: an extension command shows its
        # notices then, and may never start a run at all
        if turn.id in (self._run_turn, self._continuing, self._prompted):
            return turn
        return None

    def _end(self, turn: _Turn, how: Literal["complete", "cancelled", "error"], *,
             meta: Mapping[str, str] | None = None, error: t.ErrorInfo | None = None) -> None:
        duration = max(0, self._now() - turn.started_ms)
        if how == "complete":
            self._chat_action(t.ChatTurnCompleteAction(turn_id=turn.id, duration=duration,
                                                       meta=dict(meta) if meta else None))
        elif how == "cancelled":
            self._chat_action(t.ChatTurnCancelledAction(turn_id=turn.id, duration=duration))
        else:
            self._chat_action(t.ChatErrorAction(
                turn_id=turn.id, duration=duration,
                error=error or t.ErrorInfo(error_type="agent", message="failed")))
        self._turn_gone(turn)

    def _turn_gone(self, turn: _Turn) -> None:
        """Forget a turn that ended or was replaced; its open dialogs are cancelled in pi."""
        if self._turn is turn:
            self._turn = None
        for dialog_id in [d for d, dialog in self._dialogs.items() if dialog.turn == turn.id]:
            # harmless if pi already resolved it; without it an extension could wait forever
            self._reply_dialog(dialog_id)
        for call_id in turn.tools:
            self._early_results.pop(call_id, None)
        for frame_id in [f for f, c in self._frames.items() if c in turn.tools]:
            del self._frames[frame_id]
        self._acked.discard(turn.id)
        for command_id in [c for c, turn_id in self._prompt_ids.items() if turn_id == turn.id]:
            del self._prompt_ids[command_id]

    def _after_idle(self) -> None:
        """Send a held prompt, or start the next queued message, once the agent is idle."""
        if self.busy or self._exited is not None:
            return
        if self._held is not None:
            turn_id, prompt = self._held
            self._held = None
            if self._turn is not None and self._turn.id == turn_id:
                self._send_prompt(turn_id, prompt)
            return
        if self._turn is not None:
            return
        if self._steering_current is not None and self._steering_message is not None:
            # steering nobody could deliver: AHP keeps it until consumed, so it starts a turn
            queued_id, message = self._steering_current, self._steering_message
            self._steering_current = self._steering_message = None
        elif self._queued:
            queued_id, message = self._queued.pop(0)
        else:
            return
        turn = self._start_server_turn(message.text, t.MessageKind.USER, queued_id=queued_id)
        self._prompt(turn, message)

    def _send_prompt(self, turn_id: str, prompt: PromptCommand) -> None:
        self._prompt_ids[prompt["id"]] = turn_id
        self._prompted = turn_id
        self._commands.append(prompt)

    def _prompt(self, turn: _Turn, message: t.Message) -> None:
        if self._exited is not None:
            self._end(turn, "error", error=t.ErrorInfo(error_type="agent-exited",
                                                       message=self._exited))
            return
        self._select_model(message.model)
        text, images = _render_message(message)
        prompt = PromptCommand(type="prompt", id=self._next_id(), message=text)
        if images:
            prompt["images"] = images
        if self.busy:
            # the agent still runs an older turn: abort it and prompt once it is idle (the
            # abort's response comes after its agent_end, so no event of it reaches this turn)
            self._abort()
            self._deferred = self._continuing = None
            self._held = (turn.id, prompt)
        else:
            self._send_prompt(turn.id, prompt)

    def _abort(self) -> None:
        if self._retrying or self._continuing is not None:
            self._commands.append(AbortRetryCommand(type="abort_retry", id=self._next_id()))
        if not self._aborts:
            abort = AbortCommand(type="abort", id=self._next_id())
            self._aborts.add(abort["id"])
            self._commands.append(abort)

    def _select_model(self, model: t.ModelSelection | None) -> None:
        if model is None or model.id == self._model:
            return
        provider, _sep, model_id = model.id.partition("/")
        if not model_id:
            log.info("pi: model %r is not provider/model: not selected", model.id)
            return
        self._model = model.id
        self._commands.append(SetModelCommand(type="set_model", id=self._next_id(),
                                              provider=provider, modelId=model_id))

    # -- client actions ----------------------------------------------------------------------

    def _client(self, channel: str, action: t.StateAction) -> None:
        if channel == self.session:
            self._session_client(action)
            return
        if channel != self.chat:
            return
        match action:
            case t.ChatTurnStartedAction():
                self._client_turn(action)
            case t.ChatTurnCancelledAction(turn_id=turn_id):
                turn = self._turn
                if turn is not None and turn.id == turn_id:
                    self._cancel(turn)
            case t.ChatTruncatedAction(turn_id=turn_id):
                self._truncated(turn_id)
            case t.ChatToolCallApprovedAction() | t.ChatToolCallDeniedAction():
                self._confirmed(action)
            case t.ChatToolCallCompleteAction() | t.ChatToolCallContentChangedAction():
                self._client_tool(action)
            case t.ChatInputAnswerChangedAction(request_id=rid, question_id=qid, answer=answer):
                turn = self._turn
                if turn is not None and rid in turn.requests:
                    drafts = turn.answers.setdefault(rid, {})
                    if answer is None:
                        drafts.pop(qid, None)
                    else:
                        drafts[qid] = answer
            case t.ChatInputCompletedAction():
                self._input_completed(action)
            case t.ChatPendingMessageSetAction():
                self._pending_set(action)
            case t.ChatPendingMessageRemovedAction(kind=kind, id=message_id):
                if kind == t.PendingMessageKind.STEERING:
                    if self._steering_current == message_id:
                        self._steering_current = self._steering_message = None
                else:
                    self._queued = [q for q in self._queued if q[0] != message_id]
            case t.ChatQueuedMessagesReorderedAction(order=order):
                known = dict(self._queued)
                first = [(i, known.pop(i)) for i in dict.fromkeys(order) if i in known]
                self._queued = first + [q for q in self._queued if q[0] in known]
            case _:
                pass

    def _session_client(self, action: t.StateAction) -> None:
        match action:
            case t.SessionActiveClientSetAction(active_client=client):
                self._clients[client.client_id] = client.tools
                self._sync_host_tools()
            case t.SessionActiveClientRemovedAction(client_id=client_id):
                if self._clients.pop(client_id, None) is not None:
                    self._sync_host_tools()
            case t.SessionTitleChangedAction(title=title):
                if title != self._title:
                    self._title = title
                    self._commands.append(SetSessionNameCommand(
                        type="set_session_name", id=self._next_id(), name=title))
            case t.SessionConfigChangedAction(config=config):
                level = config.get("thinkingLevel")
                if isinstance(level, str):
                    self._commands.append(SetThinkingLevelCommand(
                        type="set_thinking_level", id=self._next_id(), level=level))
            case _:
                pass

    def _client_turn(self, action: t.ChatTurnStartedAction) -> None:
        old = self._turn
        if old is not None:
            self._turn_gone(old)  # replaced: AHP dropped it silently
        if self._held is not None:
            self._held = None
        if action.queued_message_id is not None:
            self._queued = [q for q in self._queued if q[0] != action.queued_message_id]
            if self._steering_current == action.queued_message_id:
                self._steering_current = self._steering_message = None
        turn = _Turn(action.turn_id, self._now())
        self._turn = turn
        self._prompt(turn, action.message)

    def _cancel(self, turn: _Turn) -> None:
        self._turn_gone(turn)
        if self._held is not None and self._held[0] == turn.id:
            self._held = None
        if self.busy:
            self._abort()
        # what the agent still sends before the abort's response belongs to no turn
        self._deferred = self._continuing = self._prompted = None
        self._after_idle()

    def _truncated(self, turn_id: str | None) -> None:
        turn = self._turn
        if turn is not None:
            self._turn_gone(turn)
            self._held = None
            if self.busy:
                self._abort()
            self._deferred = self._continuing = self._prompted = None
        if turn_id is None:
            self._commands.append(NewSessionCommand(type="new_session", id=self._next_id()))
        else:
            # cutting pi's context after a given turn needs a fork at the right user
            # message; the bridge does not map AHP turns to pi session entries
            log.warning("pi: chat/truncated after %r: the agent keeps its full context", turn_id)
        self._after_idle()

    def _confirmed(self, action: t.ChatToolCallApprovedAction | t.ChatToolCallDeniedAction
                   ) -> None:
        turn = self._turn
        tool = None if turn is None or turn.id != action.turn_id else turn.tools.get(
            action.tool_call_id)
        if tool is None or tool.status != "pending":
            return
        tool.status = "running" if action.approved else "done"
        dialog_id = tool.dialog
        tool.dialog = None
        dialog = None if dialog_id is None else self._dialogs.get(dialog_id)
        if dialog_id is None or dialog is None:
            return
        if dialog.method == "confirm":
            self._reply_dialog(dialog_id, confirmed=action.approved)
            return
        labels = {f"o{i}": label for i, label in enumerate(dialog.options)}
        chosen = labels.get(action.selected_option_id or "")
        if chosen is None:
            wanted = "approve" if action.approved else "deny"
            chosen = next((label for label in dialog.options
                           if ("deny" if _DENY_WORDS.search(label) else "approve") == wanted),
                          None)
        self._reply_dialog(dialog_id, value=chosen)

    def _client_tool(self, action: t.ChatToolCallCompleteAction
                     | t.ChatToolCallContentChangedAction) -> None:
        turn = self._turn
        tool = None if turn is None or turn.id != action.turn_id else turn.tools.get(
            action.tool_call_id)
        if tool is None:
            return
        if isinstance(action, t.ChatToolCallContentChangedAction):
            if tool.status != "running":
                return
            tool.content = action.content
            if tool.frame is not None:
                self._commands.append(HostToolUpdateCommand(
                    type="host_tool_update", id=tool.frame,
                    partialResult={"content": _pi_content(action.content)}))
            return
        if tool.status not in ("running", "pending"):
            return
        tool.status = "done"
        self._forget_tool_dialog(tool)
        if tool.client is None:
            return
        result = action.result
        payload: HostToolResultPayload = {"content": _pi_content(result.content or ())}
        if result.structured_content:
            payload["details"] = dict(result.structured_content)
        if not payload["content"]:
            text = result.error.message if result.error is not None else str(
                result.past_tense_message if isinstance(result.past_tense_message, str)
                else result.past_tense_message.markdown)
            payload["content"] = [{"type": "text", "text": text}]
        command = HostToolResultCommand(type="host_tool_result", id=tool.frame or "",
                                        result=payload, isError=not result.success)
        if tool.frame is None:
            # the client was faster than xcsh's host_tool_call frame: send it when that comes
            self._early_results[action.tool_call_id] = command
        else:
            self._frames.pop(tool.frame, None)
            self._commands.append(command)

    def _input_completed(self, action: t.ChatInputCompletedAction) -> None:
        turn = self._turn
        dialog_id = None if turn is None else turn.requests.pop(action.request_id, None)
        if turn is None or dialog_id is None:
            return
        answers = {**turn.answers.pop(action.request_id, {}), **(action.answers or {})}
        dialog = self._dialogs.get(dialog_id)
        if dialog is None:
            return
        response = action.response
        if response == t.ChatInputResponseKind.ACCEPT:
            answer = answers.get(CONFIRM_QUESTION)
            value = answer.value if isinstance(answer, t.ChatInputAnswered) else None
            if dialog.method == "confirm":
                yes = value.value if isinstance(value, t.ChatInputBooleanAnswerValue) else True
                self._reply_dialog(dialog_id, confirmed=yes)
            elif dialog.method == "select":
                labels = {f"o{i}": label for i, label in enumerate(dialog.options)}
                chosen = None
                if isinstance(value, t.ChatInputSelectedAnswerValue):
                    chosen = labels.get(value.value) or (
                        value.freeform_values[0] if value.freeform_values else None)
                elif isinstance(value, t.ChatInputTextAnswerValue):
                    chosen = value.value
                self._reply_dialog(dialog_id, value=chosen)
            else:
                text = value.value if isinstance(value, t.ChatInputTextAnswerValue) else None
                self._reply_dialog(dialog_id, value=text)
        elif response == t.ChatInputResponseKind.DECLINE and dialog.method == "confirm":
            self._reply_dialog(dialog_id, confirmed=False)
        else:
            self._reply_dialog(dialog_id)

    def _steer(self, message_id: str, message: t.Message) -> None:
        text, images = _render_message(message)
        steer = SteerCommand(type="steer", id=self._next_id(), message=text)
        if images:
            steer["images"] = images
        # pi echoes a delivered steering message as a user message_start: matched by text
        self._steering_sent.append(_Pending(message_id, text))
        self._commands.append(steer)

    def _pending_set(self, action: t.ChatPendingMessageSetAction) -> None:
        if action.kind == t.PendingMessageKind.STEERING:
            self._steering_current = action.id
            self._steering_message = None
            turn = self._turn
            if turn is not None and self._run_active and self._run_turn == turn.id:
                self._steer(action.id, action.message)
                return
            # no run to steer yet (the prompt has not started, a retry waits): sent when the
            # turn's next run starts; with no turn at all it starts a turn of its own
            self._steering_message = action.message
            self._after_idle()
            return
        for i, (queued_id, _m) in enumerate(self._queued):
            if queued_id == action.id:
                self._queued[i] = (action.id, action.message)
                break
        else:
            self._queued.append((action.id, action.message))
        self._after_idle()


_FrameHandler: TypeAlias = Callable[[PiBridge, JsonObject], None]

_FRAME_HANDLERS: Final[Mapping[str, _FrameHandler]] = {
    "ready": PiBridge._on_ready,
    "response": PiBridge._on_response,
    "agent_start": PiBridge._on_agent_start,
    "agent_end": PiBridge._on_agent_end,
    "turn_start": PiBridge._on_ignored,
    "turn_end": PiBridge._on_ignored,
    "message_start": PiBridge._on_message_start,
    "message_update": PiBridge._on_message_update,
    "message_end": PiBridge._on_message_end,
    "tool_execution_start": PiBridge._on_tool_start,
    "tool_execution_update": PiBridge._on_tool_update,
    "tool_execution_end": PiBridge._on_tool_end,
    "auto_retry_start": PiBridge._on_retry_start,
    "auto_retry_end": PiBridge._on_retry_end,
    "auto_compaction_start": PiBridge._on_compaction_start,
    "auto_compaction_end": PiBridge._on_compaction_end,
    "extension_ui_request": PiBridge._on_ui_request,
    "extension_error": PiBridge._on_extension_error,
    "hook_error": PiBridge._on_extension_error,
    "host_tool_call": PiBridge._on_host_tool_call,
    "host_tool_cancel": PiBridge._on_host_tool_cancel,
    "retry_fallback_applied": PiBridge._on_fallback,
    "retry_fallback_succeeded": PiBridge._on_ignored,
    "ttsr_triggered": PiBridge._on_ttsr,
    "todo_reminder": PiBridge._on_ignored,
    "todo_auto_clear": PiBridge._on_ignored,
}
