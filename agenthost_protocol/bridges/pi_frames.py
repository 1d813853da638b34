"""pi / xcsh RPC mode on the wire: JSON values, the frames the bridge sends, JSON Lines framing.

pi (``badlogic/pi-mono``) and xcsh (an oh-my-pi fork) run headless with
``--mode rpc``: commands go to the agent's stdin and responses, events and UI
requests come back on its stdout, one JSON object per line.  This module is
the wire layer of :mod:`agenthost_protocol.bridges.pi`, with no I/O:

* :data:`JsonValue` / :data:`JsonObject`: what a decoded frame is made of.
  Frames *from* the agent stay plain JSON objects: the agent is another
  process, so the mapper checks every field it reads rather than trusting a
  declared shape.
* TypedDicts for every frame the bridge *sends* (:data:`PiCommand`), so what
  leaves the host is checked statically.
* :class:`JsonLinesDecoder`: bytes in, parsed frames out; a malformed line
  is reported as a :class:`MalformedLine` value and never raised, so one bad
  line from the agent cannot stop the host.
* :func:`encode_frame`: one frame to one line of bytes.

The framing is strict JSON Lines: LF is the only record separator (a CR
before it is JSON whitespace and harmless), lines are UTF-8, and a line is
one JSON object.  Node's ``readline`` also splits on a lone CR; JSON strings
can never hold a raw CR or LF, so that difference never matters for frames
that are valid JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Final, Literal, TypeAlias

from attrs import frozen
from typing_extensions import NotRequired, TypedDict

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "AbortCommand",
    "AbortRetryCommand",
    "BranchCommand",
    "ExtensionUiResponse",
    "ForkCommand",
    "GetBranchMessagesCommand",
    "GetAvailableModelsCommand",
    "GetForkMessagesCommand",
    "GetStateCommand",
    "HostToolDefinition",
    "HostToolResultCommand",
    "HostToolResultPayload",
    "HostToolUpdateCommand",
    "JsonLinesDecoder",
    "JsonObject",
    "JsonValue",
    "MalformedLine",
    "NewSessionCommand",
    "PiCommand",
    "PiContentBlock",
    "PiImage",
    "PromptCommand",
    "SetHostToolsCommand",
    "SetModelCommand",
    "SetSessionNameCommand",
    "SetThinkingLevelCommand",
    "SteerCommand",
    "SwitchSessionCommand",
    "encode_frame",
]

JsonValue: TypeAlias = (
    "bool | int | float | str | Sequence[JsonValue] | Mapping[str, JsonValue] | None"
)
"""Any JSON value, as :func:`json.loads` returns it (read-only views)."""

JsonObject: TypeAlias = Mapping[str, JsonValue]
"""A JSON object: every frame is one."""

DEFAULT_MAX_LINE_BYTES: Final = 64 * 1024 * 1024
"""64 MiB: a longer line is reported malformed and skipped (a tool result may be large)."""


# -- frames the bridge sends (agent stdin) -------------------------------------------


class PiImage(TypedDict):
    """pi-ai ``ImageContent``: base64 ``data`` and its MIME type."""

    type: Literal["image"]
    data: str
    mimeType: str


class PiTextBlock(TypedDict):
    """pi-ai ``TextContent``."""

    type: Literal["text"]
    text: str


PiContentBlock: TypeAlias = PiTextBlock | PiImage
"""A block of a tool result's ``content`` (text or image), as pi takes it back."""


class PromptCommand(TypedDict):
    """``prompt``: answered at once by a ``response``; the run's events follow."""

    type: Literal["prompt"]
    id: str
    message: str
    images: NotRequired[list[PiImage]]


class SteerCommand(TypedDict):
    """``steer``: delivered after the running tool, the remaining tools are skipped."""

    type: Literal["steer"]
    id: str
    message: str
    images: NotRequired[list[PiImage]]


class AbortCommand(TypedDict):
    """``abort``: its ``response`` comes once the agent is idle (after ``agent_end``)."""

    type: Literal["abort"]
    id: str


class AbortRetryCommand(TypedDict):
    """``abort_retry``: stop an auto-retry waiting out its back-off."""

    type: Literal["abort_retry"]
    id: str


class GetStateCommand(TypedDict):
    """``get_state``: session name, model, ``isStreaming`` ..."""

    type: Literal["get_state"]
    id: str


class GetAvailableModelsCommand(TypedDict):
    """``get_available_models``: every configured model."""

    type: Literal["get_available_models"]
    id: str


class NewSessionCommand(TypedDict):
    """``new_session``: an empty context (``chat/truncated`` without a turn)."""

    type: Literal["new_session"]
    id: str


class SwitchSessionCommand(TypedDict):
    """``switch_session``: continue the session kept in file ``sessionPath`` (answered
    ``{cancelled}``)."""

    type: Literal["switch_session"]
    id: str
    sessionPath: str


class ForkCommand(TypedDict):
    """pi ``fork``: a new session holding the history before user message ``entryId``."""

    type: Literal["fork"]
    id: str
    entryId: str


class BranchCommand(TypedDict):
    """xcsh ``branch``: the same as pi's ``fork``."""

    type: Literal["branch"]
    id: str
    entryId: str


class GetForkMessagesCommand(TypedDict):
    """pi ``get_fork_messages``: the user messages a fork can start from."""

    type: Literal["get_fork_messages"]
    id: str


class GetBranchMessagesCommand(TypedDict):
    """xcsh ``get_branch_messages``: the same as pi's ``get_fork_messages``."""

    type: Literal["get_branch_messages"]
    id: str


class SetSessionNameCommand(TypedDict):
    """``set_session_name``."""

    type: Literal["set_session_name"]
    id: str
    name: str


class SetThinkingLevelCommand(TypedDict):
    """``set_thinking_level`` (off, minimal, low, medium, high, xhigh)."""

    type: Literal["set_thinking_level"]
    id: str
    level: str


class SetModelCommand(TypedDict):
    """``set_model``."""

    type: Literal["set_model"]
    id: str
    provider: str
    modelId: str


class HostToolDefinition(TypedDict):
    """One tool of xcsh's ``set_host_tools``."""

    name: str
    label: str
    description: str
    parameters: JsonObject


class SetHostToolsCommand(TypedDict):
    """xcsh ``set_host_tools``: the tools AHP clients execute (the whole set each time)."""

    type: Literal["set_host_tools"]
    id: str
    tools: list[HostToolDefinition]


class HostToolResultPayload(TypedDict):
    """The ``result`` / ``partialResult`` of a host tool: content blocks and details."""

    content: list[PiContentBlock]
    details: NotRequired[JsonObject]


class HostToolUpdateCommand(TypedDict):
    """xcsh ``host_tool_update``: the accumulated partial result of host tool call ``id``."""

    type: Literal["host_tool_update"]
    id: str
    partialResult: HostToolResultPayload


class HostToolResultCommand(TypedDict):
    """xcsh ``host_tool_result``: the final result of host tool call ``id``."""

    type: Literal["host_tool_result"]
    id: str
    result: HostToolResultPayload
    isError: bool


class ExtensionUiResponse(TypedDict):
    """``extension_ui_response``: exactly one of ``value``, ``confirmed``, ``cancelled``."""

    type: Literal["extension_ui_response"]
    id: str
    value: NotRequired[str]
    confirmed: NotRequired[bool]
    cancelled: NotRequired[Literal[True]]


PiCommand: TypeAlias = (
    PromptCommand
    | SteerCommand
    | AbortCommand
    | AbortRetryCommand
    | GetStateCommand
    | GetAvailableModelsCommand
    | NewSessionCommand
    | SwitchSessionCommand
    | ForkCommand
    | BranchCommand
    | GetForkMessagesCommand
    | GetBranchMessagesCommand
    | SetSessionNameCommand
    | SetThinkingLevelCommand
    | SetModelCommand
    | SetHostToolsCommand
    | HostToolUpdateCommand
    | HostToolResultCommand
    | ExtensionUiResponse
)
"""Every frame the bridge writes to the agent's stdin."""


def encode_frame(frame: Mapping[str, object]) -> bytes:
    """``frame`` as one JSON Lines record: compact JSON, then LF.

    ASCII-only output (``\\u`` escapes): a string the host got from a client
    may hold a lone surrogate, which has no UTF-8 form, and U+2028/U+2029
    stay escaped for readers that treat them as line breaks.  Raises
    ``ValueError`` for NaN or infinities (not JSON) and ``TypeError`` for a
    value that is not JSON: a frame the host built wrongly.
    """
    return json.dumps(frame, ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode(
        "ascii"
    ) + b"\n"


# -- frames the bridge reads (agent stdout) ------------------------------------------


@frozen(kw_only=True)
class MalformedLine:
    """A line of the agent's output that is not a JSON object; reported, never raised."""

    line: int
    """The 1-based number of the line in the stream."""
    reason: str
    """Why it was refused (invalid UTF-8, invalid JSON, not an object, too long)."""
    excerpt: str
    """The start of the line (at most 200 characters), for the log."""
    too_long: bool = False
    """The line passed ``max_line_bytes``: the rest of it up to its LF is dropped unread
    (a runner may take it as the agent's fault and stop the agent)."""


_EXCERPT: Final = 200


def _reject_constant(name: str) -> JsonValue:
    # JSON.stringify never writes NaN or Infinity; Python's json would accept them
    raise ValueError(f"{name} is not JSON")


class JsonLinesDecoder:
    """Splits a byte stream into JSON Lines frames, sans-I/O.

    :meth:`feed` takes whatever the transport read (any split, even inside a
    UTF-8 sequence) and returns the complete lines parsed so far, in order:
    each is a :data:`JsonObject` or a :class:`MalformedLine`.  Blank lines are
    skipped.  :meth:`close` parses a last line that had no LF.  A line longer
    than ``max_line_bytes`` is reported once and discarded up to its LF,
    without keeping it in memory.
    """

    def __init__(self, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        if max_line_bytes < 1:
            raise ValueError("max_line_bytes must be positive")
        self._max = max_line_bytes
        self._buffer = bytearray()
        self._line = 0
        self._skipping = False
        """Inside a line already reported too long: drop bytes up to its LF."""

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete line held back."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[JsonObject | MalformedLine]:
        """The frames completed by ``data``."""
        out: list[JsonObject | MalformedLine] = []
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                self._hold(data[start:], out)
                return out
            if self._skipping:
                self._skipping = False
                self._buffer.clear()
            elif len(self._buffer) + (end - start) > self._max:
                self._line += 1
                out.append(self._too_long(bytes(self._buffer[:_EXCERPT]) or data[start:end]))
                self._buffer.clear()
            else:
                self._buffer += data[start:end]
                self._parse(bytes(self._buffer), out)
                self._buffer.clear()
            start = end + 1

    def close(self) -> list[JsonObject | MalformedLine]:
        """The end of the stream: parse a last line that had no LF."""
        out: list[JsonObject | MalformedLine] = []
        if self._buffer and not self._skipping:
            self._parse(bytes(self._buffer), out)
        self._buffer.clear()
        self._skipping = False
        return out

    def _hold(self, rest: bytes, out: list[JsonObject | MalformedLine]) -> None:
        if self._skipping:
            return
        if len(self._buffer) + len(rest) > self._max:
            self._line += 1
            out.append(self._too_long(bytes(self._buffer[:_EXCERPT]) or rest[:_EXCERPT]))
            self._buffer.clear()
            self._skipping = True
            return
        self._buffer += rest

    def _too_long(self, head: bytes) -> MalformedLine:
        return MalformedLine(
            line=self._line,
            reason=f"line longer than {self._max} bytes",
            excerpt=head[:_EXCERPT].decode("utf-8", "replace"),
            too_long=True,
        )

    def _parse(self, raw: bytes, out: list[JsonObject | MalformedLine]) -> None:
        self._line += 1
        if not raw.strip():
            return
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            out.append(MalformedLine(line=self._line, reason=f"invalid UTF-8: {e.reason}",
                                     excerpt=raw[:_EXCERPT].decode("utf-8", "replace")))
            return
        try:
            value = json.loads(text, parse_constant=_reject_constant)
        except (ValueError, RecursionError) as e:
            out.append(MalformedLine(line=self._line, reason=f"invalid JSON: {e}",
                                     excerpt=text[:_EXCERPT]))
            return
        if not isinstance(value, dict):
            out.append(MalformedLine(line=self._line,
                                     reason=f"a {type(value).__name__}, not an object",
                                     excerpt=text[:_EXCERPT]))
            return
        out.append(value)
