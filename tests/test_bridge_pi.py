"""The pi / xcsh bridge: recorded JSON Lines transcripts replayed through the mapper.

Each transcript under ``tests/data/pi/`` is what a pi or xcsh process writes
on stdout in RPC mode (built from the documented frames, malformed lines and
unknown events included), with ``#`` lines driving the replay: client
actions the host applied, idle ticks, clock steps.  Every action the bridge
emits is applied with the library's reducers and must change the state it
is applied to (never a no-op because of a wrong state).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from agenthost_protocol import types as t
from agenthost_protocol import wire
from agenthost_protocol.bridges.acp import AhpDispatch
from agenthost_protocol.bridges.pi import PiBridge, PiDialect, default_invocation_message
from agenthost_protocol.bridges.pi_frames import (
    JsonLinesDecoder,
    MalformedLine,
    PiCommand,
    encode_frame,
)
from agenthost_protocol.host import Host
from agenthost_protocol.reducers import reduce

DATA = Path(__file__).parent / "data" / "pi"
SESSION = "ahp-session:/pi"
CHAT = "ahp-chat:/pi"
T0 = 1_767_225_600_000


class Clock:
    """A test clock: each read advances 5 ms; ``step`` jumps."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        self.now += 5
        return self.now

    def step(self, ms: int) -> None:
        self.now += ms


class Sim:
    """The session and chat states, changed only by reducers; every action must apply."""

    def __init__(self) -> None:
        self.clock = Clock()
        host = Host(clock=self.clock, server_info=t.Implementation(name="test", version="1"))
        host.create_session(SESSION, provider="pi")
        host.ready_session(SESSION, default_chat=CHAT)
        session, chat = host.state(SESSION), host.state(CHAT)
        assert isinstance(session, t.SessionState) and isinstance(chat, t.ChatState)
        self.session: t.SessionState = session
        self.chat: t.ChatState = chat
        self.actions: list[AhpDispatch] = []

    def apply(self, dispatches: tuple[AhpDispatch, ...], *, client: bool = False) -> None:
        for d in dispatches:
            if d.channel == CHAT:
                old_chat = self.chat
                self.chat = reduce(CHAT, old_chat, d.action, now=self.clock)
                assert self.chat is not old_chat, f"a no-op: {d.action!r}"
            else:
                assert d.channel == SESSION, d
                old_session = self.session
                self.session = reduce(SESSION, old_session, d.action, now=self.clock)
                assert self.session is not old_session, f"a no-op: {d.action!r}"
            if not client:
                self.actions.append(d)

    def types(self) -> list[str]:
        return [str(d.action.type.value) if hasattr(d.action.type, "value") else d.action.type
                for d in self.actions]


def _ids() -> Iterator[str]:
    n = 0
    while True:
        n += 1
        yield f"id{n}"


def make(dialect: PiDialect = PiDialect.PI, *, confirm_tools: bool = False
         ) -> tuple[Sim, PiBridge]:
    sim = Sim()
    ids = _ids()
    bridge = PiBridge(session=SESSION, chat=CHAT, clock=sim.clock, new_id=lambda: next(ids),
                      dialect=dialect, confirm_tools=confirm_tools)
    return sim, bridge


class Replay:
    """The result of a transcript: the commands sent to the agent, the malformed lines."""

    def __init__(self) -> None:
        self.commands: list[PiCommand] = []
        self.malformed: list[MalformedLine] = []

    def of_type(self, kind: str) -> list[PiCommand]:
        return [c for c in self.commands if c["type"] == kind]


def replay(name: str, sim: Sim, bridge: PiBridge) -> Replay:
    out = Replay()
    for raw in (DATA / name).read_bytes().split(b"\n"):
        if raw.startswith(b"##") or not raw:
            continue
        if raw.startswith(b"# "):
            verb, _, arg = raw[2:].decode().partition(" ")
            if verb in ("client", "client@session"):
                action = wire.parse_action(json.loads(arg))
                channel = SESSION if verb == "client@session" else CHAT
                sim.apply((AhpDispatch(channel, action),), client=True)
                result = bridge.receive_client_action(channel, action)
            elif verb == "tick":
                result = bridge.tick()
            elif verb == "clock":
                sim.clock.step(int(arg))
                continue
            elif verb == "start":
                result = bridge.start()
            elif verb == "eof":
                result = bridge.end_of_output(arg or "the agent exited")
            else:
                raise AssertionError(f"unknown directive {verb!r}")
        else:
            result = bridge.receive_data(raw + b"\n")
        sim.apply(result.actions)
        out.commands.extend(result.commands)
        out.malformed.extend(result.malformed)
    return out


def parts(turn: t.Turn | t.ActiveTurn) -> list[str]:
    return [type(p).__name__.removesuffix("ResponsePart") for p in turn.response_parts]


def tool_calls(turn: t.Turn) -> list[t.ToolCallCompletedState | t.ToolCallCancelledState]:
    """The tool calls of an ended turn (all finished, by the reducer's rule)."""
    out: list[t.ToolCallCompletedState | t.ToolCallCancelledState] = []
    for part in turn.response_parts:
        if isinstance(part, t.ToolCallResponsePart):
            assert isinstance(part.tool_call, (t.ToolCallCompletedState, t.ToolCallCancelledState))
            out.append(part.tool_call)
    return out


def texts(turn: t.Turn | t.ActiveTurn) -> list[str]:
    return [p.content for p in turn.response_parts
            if isinstance(p, (t.MarkdownResponsePart, t.ReasoningResponsePart))]


# -- transcripts -------------------------------------------------------------------------


def test_pi_basic_turn_with_thinking_text_and_a_tool_call() -> None:
    sim, bridge = make()
    result = replay("pi_basic.jsonl", sim, bridge)
    assert [c["type"] for c in result.commands] == ["prompt"]
    assert result.commands[0] == {"type": "prompt", "id": "ahp-1", "message": "List the files"}
    # numbered in the agent's output (the replay's "#" lines are not in it)
    assert [m.line for m in result.malformed] == [31, 32]  # not JSON; not an object
    chat = sim.chat
    assert chat.active_turn is None and len(chat.turns) == 1
    turn = chat.turns[0]
    assert turn.state == t.TurnState.COMPLETE and turn.id == "t1"
    assert parts(turn) == ["Reasoning", "Markdown", "ToolCall", "Markdown"]
    assert texts(turn) == ["The user wants a listing.", "I will run `ls`.",
                           "Two entries: `README.md` and `src`."]
    [call] = tool_calls(turn)
    assert isinstance(call, t.ToolCallCompletedState) and call.success
    assert call.invocation_message == "Run `ls`" and call.tool_input == '{"command":"ls"}'
    assert call.content == (t.ToolResultTextContent(text="README.md\nsrc\n"),)
    assert call.structured_content == {"exitCode": 0}
    assert turn.usage == t.UsageInfo(
        input_tokens=2500, output_tokens=52, cache_read_tokens=1700, model="claude-sonnet-4",
        meta={"cacheWriteTokens": 100, "cost": pytest.approx(0.008915), "provider": "anthropic"},
    )
    # the repeated partial result changed nothing, so it was not sent
    assert sim.types().count("chat/toolCallContentChanged") == 2


def test_pi_auto_retry_keeps_the_turn_open_and_errors_end_it() -> None:
    sim, bridge = make()
    result = replay("pi_retry.jsonl", sim, bridge)
    assert [c["type"] for c in result.commands] == [
        "prompt", "prompt", "prompt", "prompt", "abort_retry", "abort"]
    t1, t2, t3, t4 = sim.chat.turns
    assert t1.state == t.TurnState.COMPLETE
    # both runs fed the turn: the failed attempt's text, then the retry's
    assert texts(t1) == ["The READ", "The README explains the build."]
    assert t1.usage is not None and (t1.usage.input_tokens, t1.usage.output_tokens) == (220, 11)
    assert t2.state == t.TurnState.ERROR and t2.error == t.ErrorInfo(
        error_type="provider", message="401 invalid x-api-key")
    assert t3.state == t.TurnState.ERROR and t3.error is not None
    assert t3.error.error_type == "retry-exhausted"
    assert t4.state == t.TurnState.CANCELLED
    assert sim.chat.active_turn is None and sim.chat.activity is None
    assert "Retrying 1/3 in 2000 ms" in [
        d.action.activity for d in sim.actions if isinstance(d.action, t.ChatActivityChangedAction)]
    assert not bridge.busy


def test_pi_overflow_compaction_reruns_the_prompt_in_the_same_turn() -> None:
    sim, bridge = make()
    replay("pi_compaction.jsonl", sim, bridge)
    t1, t2 = sim.chat.turns
    assert t1.state == t.TurnState.COMPLETE and texts(t1) == ["Done: the parser is split in two."]
    turn_ends = [d.action for d in sim.actions if isinstance(d.action, t.ChatTurnCompleteAction)]
    assert turn_ends[0].meta == {"stopReason": "length"}
    assert t2.state == t.TurnState.ERROR and t2.error == t.ErrorInfo(
        error_type="context-overflow", message="compaction failed: quota exceeded")
    activities = [d.action.activity for d in sim.actions
                  if isinstance(d.action, t.ChatActivityChangedAction)]
    assert activities == ["Compacting context", None] * 3


def test_pi_extension_dialogs_become_input_requests() -> None:
    sim, bridge = make()
    result = replay("pi_dialogs.jsonl", sim, bridge)
    replies = result.of_type("extension_ui_response")
    assert replies == [
        {"type": "extension_ui_response", "id": "d1", "confirmed": True},
        {"type": "extension_ui_response", "id": "d2", "value": "us-east"},
        {"type": "extension_ui_response", "id": "d3", "cancelled": True},
        {"type": "extension_ui_response", "id": "d5", "value": "alice"},
        # outside a turn nobody could answer: cancelled at once
        {"type": "extension_ui_response", "id": "d6", "cancelled": True},
    ]
    [turn] = sim.chat.turns
    assert turn.state == t.TurnState.COMPLETE
    requests = [p for p in turn.response_parts if isinstance(p, t.InputRequestResponsePart)]
    assert [(p.request.id, p.response) for p in requests] == [
        ("id1", "accept"), ("id2", "accept"), ("id3", "decline"), ("id4", "cancel"),
        ("id5", "accept")]
    confirm, select, text, editor, _ = (p.request for p in requests)
    assert confirm.message == "Deploy to production?"
    assert isinstance(confirm.questions, tuple)
    assert isinstance(confirm.questions[0], t.ChatInputBooleanQuestion)
    assert confirm.questions[0].message == "This pushes tag v1.2."
    assert isinstance(select.questions, tuple)
    assert isinstance(select.questions[0], t.ChatInputSingleSelectQuestion)
    assert [o.label for o in select.questions[0].options] == ["eu-west", "us-east"]
    assert isinstance(text.questions, tuple)
    assert isinstance(text.questions[0], t.ChatInputTextQuestion)
    assert isinstance(editor.questions, tuple)
    assert isinstance(editor.questions[0], t.ChatInputTextQuestion)
    assert editor.questions[0].default_value == "- fix the parser"
    notices = [p.content for p in turn.response_parts
               if isinstance(p, t.SystemNotificationResponsePart)]
    assert notices == [
        "Deploying v1.2", "Warning: Slow network",
        "Extension error in /home/u/.pi/extensions/deploy.ts: TypeError: x is undefined"]
    assert sim.session.title == "Deploy v1.2"
    activities = [d.action.activity for d in sim.actions
                  if isinstance(d.action, t.SessionActivityChangedAction)]
    assert activities == ["deploying", None]


def test_pi_confirm_tools_reconfirms_the_one_running_tool() -> None:
    sim, bridge = make(confirm_tools=True)
    result = replay("pi_confirm_tools.jsonl", sim, bridge)
    assert result.of_type("extension_ui_response") == [
        {"type": "extension_ui_response", "id": "d1", "confirmed": False},
        {"type": "extension_ui_response", "id": "d2", "value": "Always allow"},
        {"type": "extension_ui_response", "id": "d3", "confirmed": False},
    ]
    [turn] = sim.chat.turns
    c1, c2, c3, c4 = tool_calls(turn)
    assert isinstance(c1, t.ToolCallCancelledState) and c1.reason == "denied"
    assert c1.selected_option is not None and c1.selected_option.label == "Deny"
    assert isinstance(c2, t.ToolCallCompletedState) and c2.success
    assert c2.confirmed == "user-action"
    assert c2.selected_option is not None and c2.selected_option.label == "Always allow"
    assert isinstance(c3, t.ToolCallCompletedState) and not c3.success
    assert isinstance(c4, t.ToolCallCompletedState) and not c4.success
    readies = [d.action for d in sim.actions if isinstance(d.action, t.ChatToolCallReadyAction)
               and d.action.confirmed is None]
    assert [(r.tool_call_id, [(o.label, o.kind) for o in r.options or ()]) for r in readies] == [
        ("c1", [("Allow", "approve"), ("Deny", "deny")]),
        ("c2", [("Allow once", "approve"), ("Always allow", "approve"), ("Deny", "deny")]),
    ]


def test_xcsh_host_tools_are_run_by_the_client_that_published_them() -> None:
    sim, bridge = make(PiDialect.XCSH)
    result = replay("xcsh_host_tools.jsonl", sim, bridge)
    assert bridge.ready and bridge.agent_version == "19.54.0"
    assert sim.session.title == "Ops chat"
    kinds = [c["type"] for c in result.commands]
    assert kinds == ["get_state", "get_available_models", "set_host_tools", "prompt",
                     "host_tool_update", "host_tool_result", "host_tool_result",
                     "host_tool_result", "set_host_tools"]
    assert bridge.models == (
        t.SessionModelInfo(id="anthropic/claude-sonnet-4", provider="pi", name="Claude Sonnet 4",
                           max_context_window=200_000, max_output_tokens=16384,
                           supports_vision=True),
        t.SessionModelInfo(id="openai/gpt-5", provider="pi", name="GPT-5",
                           max_context_window=400_000, max_output_tokens=128_000))
    del result.commands[1]
    assert result.commands[1] == {
        "type": "set_host_tools", "id": "ahp-3",
        "tools": [{"name": "open_file", "label": "Open file",
                   "description": "Open a file in the editor",
                   "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                                  "required": ["path"]}}]}
    assert result.commands[3] == {"type": "host_tool_update", "id": "h1", "partialResult": {
        "content": [{"type": "text", "text": "opening config.toml"}]}}
    assert result.commands[4] == {"type": "host_tool_result", "id": "h1", "isError": False,
                                  "result": {"content": [{"type": "text", "text": "opened"}],
                                             "details": {"line": 1}}}
    # the early result waited for its frame id
    assert result.commands[5] == {"type": "host_tool_result", "id": "h4", "isError": True,
                                  "result": {"content": [{"type": "text",
                                                          "text": "no such file"}]}}
    assert result.commands[6] == {
        "type": "host_tool_result", "id": "h9", "isError": True,
        "result": {"content": [{"type": "text", "text": "no AHP client can run this tool now"}]}}
    assert result.commands[7] == {"type": "set_host_tools", "id": "ahp-5", "tools": []}
    [turn] = sim.chat.turns
    assert turn.state == t.TurnState.COMPLETE
    c1, c2, c3, c4 = tool_calls(turn)
    assert c1.contributor == t.ToolCallClientContributor(client_id="ide-1")
    assert c1.display_name == "Open file" and c1.intention == "Show the config to the user"
    assert isinstance(c1, t.ToolCallCompletedState)
    assert c1.past_tense_message == "Opened config.toml"
    assert isinstance(c2, t.ToolCallCompletedState) and not c2.success
    assert c2.past_tense_message == "Cancelled"
    assert isinstance(c3, t.ToolCallCompletedState) and not c3.success
    assert c4.contributor is None
    assert isinstance(c4, t.ToolCallCompletedState) and c4.success  # isError left out: success
    [request] = [p for p in turn.response_parts if isinstance(p, t.InputRequestResponsePart)]
    assert request.response == "cancel"
    notices = [p.content for p in turn.response_parts
               if isinstance(p, t.SystemNotificationResponsePart)]
    assert notices == ["Switched model from anthropic/claude-opus-4 to anthropic/claude-sonnet-4",
                       "Rules triggered: no-secrets"]


def test_pi_cancel_steer_queue_follow_up_and_replacing_a_running_turn() -> None:
    sim, bridge = make()
    result = replay("pi_turns.jsonl", sim, bridge)
    assert [(c["type"], c["id"]) for c in result.commands] == [
        ("prompt", "ahp-1"), ("steer", "ahp-2"), ("abort", "ahp-3"), ("prompt", "ahp-4"),
        ("prompt", "ahp-5"), ("set_model", "ahp-6"), ("abort", "ahp-8"), ("prompt", "ahp-7"),
        ("prompt", "ahp-9"), ("set_session_name", "ahp-10")]
    assert result.commands[5] == {"type": "set_model", "id": "ahp-6", "provider": "openai",
                                  "modelId": "gpt-5"}
    chat = sim.chat
    assert [(turn.id, turn.state) for turn in chat.turns] == [
        ("t1", "cancelled"), ("id1", "complete"), ("id2", "complete"), ("t3", "complete"),
        ("id3", "complete")]
    t1, queued, follow_up, t3, steered = chat.turns
    assert texts(t1) == ["Working", "OK, pytest."]
    assert queued.message.text == "Then run them" and texts(queued) == ["Running."]
    assert follow_up.message.text == "Also lint" and texts(follow_up) == ["Linted."]
    assert texts(t3) == ["Second answer."]  # nothing of the replaced run's
    assert steered.message.text == "Stop now"
    assert chat.queued_messages is None and chat.steering_message is None
    removed = [d.action for d in sim.actions
               if isinstance(d.action, t.ChatPendingMessageRemovedAction)]
    assert removed == [t.ChatPendingMessageRemovedAction(kind="steering", id="s1")]


def test_pi_refused_prompt_idle_probe_and_agent_exit() -> None:
    sim, bridge = make()
    result = replay("pi_failures.jsonl", sim, bridge)
    assert [(c["type"], c["id"]) for c in result.commands] == [
        ("prompt", "ahp-1"), ("prompt", "ahp-2"), ("get_state", "ahp-3"), ("prompt", "ahp-4")]
    t1, t2, t3, t4 = sim.chat.turns
    assert t1.state == "error" and t1.error == t.ErrorInfo(error_type="rpc",
                                                           message="No model selected")
    assert t2.state == "complete"  # the extension command ran without an agent run
    assert [p.content for p in t2.response_parts
            if isinstance(p, t.SystemNotificationResponsePart)] == ["12 sessions, 3400 tokens"]
    assert t3.state == "error" and t3.error == t.ErrorInfo(error_type="agent-exited",
                                                           message="Segmentation fault")
    assert texts(t3) == ["It is a parser"]
    assert t4.state == "error" and t4.error is not None
    assert t4.error.error_type == "agent-exited"


# -- the wire ------------------------------------------------------------------------------


def test_json_lines_framing_splits_anywhere_and_reports_bad_lines() -> None:
    decoder = JsonLinesDecoder(max_line_bytes=64)
    data = ('{"type":"a","text":"é✓"}\r\n\n{"type":"b"}\nnot json\n[1]\n{"v":NaN}\n'
            ).encode() + b'\xff\n{"type":"c"}'
    frames: list[object] = []
    for i in range(len(data)):  # one byte at a time: UTF-8 sequences split too
        frames += decoder.feed(data[i:i + 1])
    assert decoder.buffered == len(b'{"type":"c"}')
    frames += decoder.close()
    assert frames[:2] == [{"type": "a", "text": "é✓"}, {"type": "b"}]
    bad = [f for f in frames if isinstance(f, MalformedLine)]
    assert [(m.line, m.reason.split(":")[0]) for m in bad] == [
        (4, "invalid JSON"), (5, "a list, not an object"), (6, "invalid JSON"),
        (7, "invalid UTF-8")]
    assert frames[-1] == {"type": "c"}


def test_json_lines_framing_skips_a_line_too_long_without_keeping_it() -> None:
    decoder = JsonLinesDecoder(max_line_bytes=16)
    out = decoder.feed(b'{"type":"' + b"x" * 40)
    assert [type(f).__name__ for f in out] == ["MalformedLine"] and decoder.buffered == 0
    assert decoder.feed(b"x" * 1000) == [] and decoder.buffered == 0
    assert decoder.feed(b'"}\n{"type":"ok"}\n') == [{"type": "ok"}]
    [long_line] = decoder.feed(b'{"type":"' + b"y" * 20 + b'"}\n')
    assert isinstance(long_line, MalformedLine) and long_line.line == 3
    with pytest.raises(ValueError):
        JsonLinesDecoder(max_line_bytes=0)


def test_encode_frame_is_one_ascii_line() -> None:
    frame = encode_frame({"type": "prompt", "id": "1", "message": "a\u2028b\nc \ud800 é"})
    assert frame.endswith(b"\n") and frame.count(b"\n") == 1 and frame.isascii()
    assert json.loads(frame) == {"type": "prompt", "id": "1", "message": "a\u2028b\nc \ud800 é"}
    with pytest.raises(ValueError):
        encode_frame({"n": float("nan")})


def test_default_invocation_message() -> None:
    assert default_invocation_message("bash", {"command": "ls -la\nrm x"}) == "Run `ls -la`"
    assert default_invocation_message("read", {"path": "src/a.py"}) == "read src/a.py"
    assert default_invocation_message("think", "not an object") == "think"


def test_replies_to_the_bridge_outside_its_chat_are_ignored() -> None:
    _sim, bridge = make()
    out = bridge.receive_client_action("ahp-chat:/another", t.ChatTurnStartedAction(
        turn_id="x", started_at="2026-01-01T00:00:00.000Z",
        message=t.Message(text="hi", origin=t.MessageOrigin(kind=t.MessageKind.USER))))
    assert not out and bridge.turn_id is None
    # the thinking level goes to the agent when the session's config carries it
    out = bridge.receive_client_action(SESSION, t.SessionConfigChangedAction(
        config={"thinkingLevel": "high"}))
    assert out.commands == ({"type": "set_thinking_level", "id": "ahp-1", "level": "high"},)
    # a truncation of the whole chat starts a new pi session
    out = bridge.receive_client_action(CHAT, t.ChatTruncatedAction())
    assert out.commands == ({"type": "new_session", "id": "ahp-2"},)


def _doc_block(marker: str) -> str:
    """The docs' Python example holding ``marker`` (docs/bridges.md)."""
    docs = Path(__file__).parent.parent / "docs"
    for page in ("bridges.md",):
        path = docs / page
        if path.is_file():
            blocks: list[str] = re.findall(r"```python\n(.*?)```", path.read_text("utf-8"), re.S)
            for block in blocks:
                if marker in block:
                    return block
    raise AssertionError(f"no docs example with {marker!r}")


def test_the_docs_example_runs() -> None:
    exec(compile(_doc_block("PiBridge("), "docs/bridges.md", "exec"), {})
