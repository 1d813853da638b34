"""Property tests of the pi / xcsh bridge: whatever the agent writes, the host stays sound.

Hypothesis plays random interleavings of agent frames (well-formed ones from
small id pools so that they collide, out-of-order ones, wrong field types,
unknown events) and client actions the host would accept.  Every action the
bridge emits is applied with the library's reducers and must change the
state (never a no-op because of a wrong state); the bridge never raises; its
view of the active turn and of each tool call matches the reduced state; and
no turn ends with a tool call still unfinished.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from agenthost_protocol import types as t
from agenthost_protocol.bridges.acp import AhpDispatch
from agenthost_protocol.bridges.pi import PiBridge, PiDialect
from agenthost_protocol.host import Host
from agenthost_protocol.reducers import reduce

SESSION = "ahp-session:/p"
CHAT = "ahp-chat:/p"
CLIENT = "ide-1"

CALLS = st.sampled_from(["c1", "c2", "c3", ""])
NAMES = st.sampled_from(["bash", "read", "open_file"])
INDEX = st.integers(0, 2)
DIALOGS = st.sampled_from(["d1", "d2", "d3"])
TEXTS = st.sampled_from(["hello", "Use pytest", "q", ""])
STOPS = st.sampled_from(["stop", "length", "toolUse", "error", "aborted", None])
COMMAND_IDS = st.sampled_from([f"ahp-{n}" for n in range(1, 13)] + ["x"])


def _event(kind: str, index: int, delta: str, call: str, name: str) -> dict[str, Any]:
    event: dict[str, Any] = {"type": kind, "contentIndex": index}
    if kind.endswith("_delta"):
        event["delta"] = delta
    if kind in ("text_end", "thinking_end"):
        event["content"] = delta
    if kind == "toolcall_start":
        content: list[dict[str, str]] = [{}] * index + [
            {"type": "toolCall", "id": call, "name": name}]
        event["partial"] = {"role": "assistant", "content": content}
    if kind == "toolcall_end":
        event["toolCall"] = {"type": "toolCall", "id": call, "name": name, "arguments": {}}
    return {"type": "message_update", "assistantMessageEvent": event}


updates = st.builds(
    _event,
    st.sampled_from(["text_start", "text_delta", "text_end", "thinking_start", "thinking_delta",
                     "thinking_end", "toolcall_start", "toolcall_delta", "toolcall_end"]),
    INDEX, st.sampled_from(["", "a", "bc"]), CALLS, NAMES,
)

frames = st.one_of(
    st.just({"type": "agent_start"}),
    st.builds(lambda stop: {"type": "agent_end", "messages": [
        {"role": "assistant", "stopReason": stop}]}, STOPS),
    st.sampled_from([{"type": "turn_start"}, {"type": "turn_end"}, {"type": "ready"}]),
    st.builds(lambda role, text: {"type": "message_start",
                                  "message": {"role": role, "content": text}},
              st.sampled_from(["user", "assistant", "custom", "toolResult"]), TEXTS),
    updates,
    st.builds(lambda stop, n: {"type": "message_update", "assistantMessageEvent": {
        "type": "error", "reason": stop, "error": {"stopReason": stop, "errorMessage": "x"}}},
        st.sampled_from(["error", "aborted"]), INDEX),
    st.builds(lambda stop, n: {"type": "message_end", "message": {
        "role": "assistant", "stopReason": stop, "model": "m",
        "usage": {"input": n, "output": n, "cacheRead": 0, "cacheWrite": n,
                  "cost": {"total": 0.5 * n}}}}, STOPS, st.integers(0, 3)),
    st.builds(lambda call, name, intent: {"type": "tool_execution_start", "toolCallId": call,
                                          "toolName": name, "args": {"command": "ls"},
                                          **({"intent": "why"} if intent else {})},
              CALLS, NAMES, st.booleans()),
    st.builds(lambda call, text: {"type": "tool_execution_update", "toolCallId": call,
                                  "partialResult": {"content": [{"type": "text", "text": text}]}},
              CALLS, TEXTS),
    st.builds(lambda call, name, error: {"type": "tool_execution_end", "toolCallId": call,
                                         "toolName": name, "isError": error,
                                         "result": {"content": [{"type": "text", "text": "r"}],
                                                    "details": {"k": 1}}},
              CALLS, NAMES, st.booleans()),
    st.builds(lambda: {"type": "auto_retry_start", "attempt": 1, "maxAttempts": 2,
                       "delayMs": 10}),
    st.builds(lambda ok, final: {"type": "auto_retry_end", "success": ok, "finalError": final},
              st.booleans(), st.sampled_from(["boom", "Retry cancelled"])),
    st.builds(lambda reason: {"type": "auto_compaction_start", "reason": reason},
              st.sampled_from(["overflow", "threshold"])),
    st.builds(lambda retry, err: {"type": "auto_compaction_end", "willRetry": retry,
                                  "errorMessage": err},
              st.booleans(), st.sampled_from([None, "failed"])),
    st.builds(lambda d, method, timeout: {"type": "extension_ui_request", "id": d,
                                          "method": method, "title": "T", "message": "M",
                                          "options": ["Allow", "Deny"], "timeout": timeout},
              DIALOGS, st.sampled_from(["confirm", "select", "input", "editor"]),
              st.sampled_from([None, 1, 100_000])),
    st.builds(lambda method, text: {"type": "extension_ui_request", "id": "n", "method": method,
                                    "message": text, "statusKey": "k", "statusText": text,
                                    "title": text},
              st.sampled_from(["notify", "setStatus", "setTitle", "setWidget"]), TEXTS),
    st.builds(lambda d: {"type": "extension_ui_request", "id": "x", "method": "cancel",
                         "targetId": d}, DIALOGS),
    st.builds(lambda frame, call: {"type": "host_tool_call", "id": frame, "toolCallId": call,
                                   "toolName": "open_file", "arguments": {}},
              st.sampled_from(["h1", "h2"]), CALLS),
    st.builds(lambda frame: {"type": "host_tool_cancel", "id": "hx", "targetId": frame},
              st.sampled_from(["h1", "h2"])),
    st.builds(lambda cid, ok, command, streaming: {
        "type": "response", "id": cid, "success": ok, "command": command, "error": "no",
        "data": {"isStreaming": streaming, "sessionName": "S"}},
        COMMAND_IDS, st.booleans(), st.sampled_from(["prompt", "abort", "get_state"]),
        st.booleans()),
    st.sampled_from([
        {"type": "extension_error", "error": "e"}, {"type": "retry_fallback_applied", "to": "m"},
        {"type": "ttsr_triggered", "rules": ["r"]}, {"type": "brand_new_event"}, {"no": "type"},
        {"type": 7}, {"type": "message_update", "assistantMessageEvent": {
            "type": "text_delta", "contentIndex": "zero", "delta": 5}},
        {"type": "tool_execution_start", "toolCallId": 5, "toolName": None},
        {"type": "message_start", "message": []}, {"type": "agent_end", "messages": "x"},
        {"type": "extension_ui_request", "id": None, "method": "confirm"},
        {"type": "message_update", "assistantMessageEvent": {
            "type": "toolcall_start", "contentIndex": 9, "partial": {"content": "x"}}},
    ]),
)

clients = st.tuples(
    st.sampled_from(["start", "cancel", "confirm", "input", "steer", "queue", "unqueue",
                     "client_tool", "truncate", "active_client", "title", "tick", "clock"]),
    st.integers(0, 10), st.booleans(),
)

noise = st.lists(st.one_of(frames.map(lambda f: ("frame", f)),
                           clients.map(lambda c: ("client", c))), max_size=70)


@st.composite
def runs(draw: st.DrawFn) -> list[tuple[str, Any]]:
    """Plausible agent runs (blocks streamed in order, tools executed after their message),
    with client actions and random frames woven in at random places."""
    script: list[tuple[str, Any]] = []

    def frame(f: dict[str, Any]) -> None:
        script.append(("frame", f))

    for _run in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            script.append(("client", ("start", 0, False)))
        frame({"type": "agent_start"})
        if draw(st.booleans()):
            frame({"type": "message_start", "message": {"role": "user", "content": "hello"}})
        stop = None
        for _message in range(draw(st.integers(1, 3))):
            frame({"type": "message_start", "message": {"role": "assistant", "content": []}})
            calls = []
            for index in range(draw(st.integers(0, 3))):
                kind = draw(st.sampled_from(["text", "thinking", "toolcall"]))
                call, name = draw(CALLS), draw(NAMES)
                for step in ("start", "delta", "delta", "end"):
                    frame(_event(f"{kind}_{step}", index, draw(st.sampled_from(["a", "bc"])),
                                 call, name))
                if kind == "toolcall":
                    calls.append((call, name))
            stop = draw(STOPS) if not calls else "toolUse"
            frame({"type": "message_end", "message": {
                "role": "assistant", "stopReason": stop, "usage": {"input": 1, "output": 1}}})
            for call, name in calls:
                frame({"type": "tool_execution_start", "toolCallId": call, "toolName": name,
                       "args": {"path": "x"}})
                if draw(st.booleans()):
                    dialog = draw(DIALOGS)
                    frame({"type": "extension_ui_request", "id": dialog,
                           "method": draw(st.sampled_from(["confirm", "select", "input"])),
                           "title": "T", "options": ["Allow", "Deny"]})
                    script.append(("client", (draw(st.sampled_from(["confirm", "input"])),
                                              draw(st.integers(0, 5)), draw(st.booleans()))))
                if name == "open_file" and draw(st.booleans()):
                    frame({"type": "host_tool_call", "id": "h1", "toolCallId": call,
                           "toolName": name, "arguments": {}})
                    script.append(("client", ("client_tool", draw(st.integers(0, 5)),
                                              draw(st.booleans()))))
                frame({"type": "tool_execution_end", "toolCallId": call, "toolName": name,
                       "isError": draw(st.booleans()), "result": {"content": []}})
        frame({"type": "agent_end", "messages": [{"role": "assistant", "stopReason": stop}]})
        if stop == "error" and draw(st.booleans()):
            frame(draw(st.sampled_from([
                {"type": "auto_retry_start", "attempt": 1, "maxAttempts": 2, "delayMs": 1},
                {"type": "auto_compaction_start", "reason": "overflow"}])))
    for position, item in draw(st.lists(st.tuples(st.integers(0, len(script)), st.one_of(
            frames.map(lambda f: ("frame", f)), clients.map(lambda c: ("client", c)))),
            max_size=12)):
        script.insert(position, item)
    return script


steps = st.one_of(noise, runs())


class _Errors(logging.Handler):
    """Records what the bridge logs at ERROR: its guard caught a bug (a test failure here)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


ERRORS = _Errors()
logging.getLogger("agenthost_protocol.bridges.pi").addHandler(ERRORS)


class World:
    def __init__(self, dialect: PiDialect, confirm_tools: bool) -> None:
        ERRORS.records.clear()
        self.now = 1_767_225_600_000
        host = Host(clock=self.clock, server_info=t.Implementation(name="p", version="1"))
        host.create_session(SESSION, provider="pi")
        host.ready_session(SESSION, default_chat=CHAT)
        session, chat = host.state(SESSION), host.state(CHAT)
        assert isinstance(session, t.SessionState) and isinstance(chat, t.ChatState)
        self.session, self.chat = session, chat
        self.turns = 0
        ids = self._ids()
        self.bridge = PiBridge(session=SESSION, chat=CHAT, clock=self.clock,
                               new_id=lambda: next(ids), dialect=dialect,
                               confirm_tools=confirm_tools)

    @staticmethod
    def _ids() -> Iterator[str]:
        n = 0
        while True:
            n += 1
            yield f"srv{n}"

    def clock(self) -> int:
        self.now += 3
        return self.now

    def apply(self, dispatches: tuple[AhpDispatch, ...]) -> None:
        for d in dispatches:
            if d.channel == CHAT:
                old_chat = self.chat
                self.chat = reduce(CHAT, old_chat, d.action, now=self.clock)
                assert self.chat is not old_chat, f"a no-op: {d.action!r}"
            else:
                assert d.channel == SESSION
                old_session = self.session
                self.session = reduce(SESSION, old_session, d.action, now=self.clock)
                assert self.session is not old_session, f"a no-op: {d.action!r}"

    def client(self, channel: str, action: t.StateAction) -> None:
        # a client action may change nothing (the same steering message twice): the host
        # still applies and sequences it, so the bridge sees it all the same
        if channel == CHAT:
            self.chat = reduce(CHAT, self.chat, action, now=self.clock)
        else:
            self.session = reduce(SESSION, self.session, action, now=self.clock)
        self.apply(self.bridge.receive_client_action(channel, action).actions)

    # -- the client side: only actions the host would accept ---------------------------

    def act(self, verb: str, n: int, flag: bool) -> None:
        chat, turn = self.chat, self.chat.active_turn
        message = t.Message(text=f"m{n}", origin=t.MessageOrigin(kind=t.MessageKind.USER))
        if verb == "start":
            self.turns += 1
            self.client(CHAT, t.ChatTurnStartedAction(
                turn_id=f"cli{self.turns}", started_at="2026-01-01T00:00:00.000Z",
                message=message))
        elif verb == "cancel" and turn is not None:
            self.client(CHAT, t.ChatTurnCancelledAction(turn_id=turn.id, duration=1))
        elif verb == "confirm" and turn is not None:
            pending = [p.tool_call for p in turn.response_parts
                       if isinstance(p, t.ToolCallResponsePart)
                       and isinstance(p.tool_call, t.ToolCallPendingConfirmationState)]
            if pending:
                call = pending[n % len(pending)]
                options = [o.id for o in call.options or ()]
                choice = options[n % len(options)] if options and n % 3 else None
                action: t.StateAction = (
                    t.ChatToolCallApprovedAction(turn_id=turn.id, tool_call_id=call.tool_call_id,
                                                 confirmed="user-action",
                                                 selected_option_id=choice)
                    if flag else
                    t.ChatToolCallDeniedAction(turn_id=turn.id, tool_call_id=call.tool_call_id,
                                               reason="denied", selected_option_id=choice))
                self.client(CHAT, action)
        elif verb == "input" and turn is not None:
            open_parts = [p for p in turn.response_parts
                          if isinstance(p, t.InputRequestResponsePart) and p.response is None]
            if open_parts:
                request = open_parts[n % len(open_parts)].request
                value: t.ChatInputAnswerValue = (
                    t.ChatInputBooleanAnswerValue(value=flag) if n % 3 == 0 else
                    t.ChatInputSelectedAnswerValue(value=f"o{n % 3}") if n % 3 == 1 else
                    t.ChatInputTextAnswerValue(value="v"))
                answers = {"answer": t.ChatInputAnswered(state=t.ChatInputAnswerState.SUBMITTED,
                                                     value=value)}
                self.client(CHAT, t.ChatInputCompletedAction(
                    request_id=request.id, response=["accept", "decline", "cancel"][n % 3],
                    answers=answers if n % 2 else None))
        elif verb == "steer":
            self.client(CHAT, t.ChatPendingMessageSetAction(kind="steering", id=f"s{n}",
                                                            message=message))
        elif verb == "queue":
            self.client(CHAT, t.ChatPendingMessageSetAction(kind="queued", id=f"q{n}",
                                                            message=message))
        elif verb == "unqueue":
            ids = [m.id for m in chat.queued_messages or ()]
            if chat.steering_message is not None and flag:
                self.client(CHAT, t.ChatPendingMessageRemovedAction(
                    kind="steering", id=chat.steering_message.id))
            elif ids:
                self.client(CHAT, t.ChatPendingMessageRemovedAction(kind="queued",
                                                                    id=ids[n % len(ids)]))
        elif verb == "client_tool" and turn is not None:
            mine = [p.tool_call for p in turn.response_parts
                    if isinstance(p, t.ToolCallResponsePart)
                    and isinstance(p.tool_call, t.ToolCallRunningState)
                    and p.tool_call.contributor == t.ToolCallClientContributor(client_id=CLIENT)]
            if mine:
                run = mine[n % len(mine)]
                assert isinstance(run, t.ToolCallRunningState)
                if flag:
                    self.client(CHAT, t.ChatToolCallCompleteAction(
                        turn_id=turn.id, tool_call_id=run.tool_call_id,
                        result=t.ToolCallResult(success=n % 2 == 0, past_tense_message="ran")))
                elif run.content != (t.ToolResultTextContent(text=f"p{n}"),):
                    self.client(CHAT, t.ChatToolCallContentChangedAction(
                        turn_id=turn.id, tool_call_id=run.tool_call_id,
                        content=(t.ToolResultTextContent(text=f"p{n}"),)))
        elif verb == "truncate" and (chat.turns or turn is not None):
            keep = chat.turns[n % len(chat.turns)].id if chat.turns and flag else None
            if keep is None or keep != chat.turns[-1].id or turn is not None:
                self.client(CHAT, t.ChatTruncatedAction(turn_id=keep))
        elif verb == "active_client":
            tools = (t.ToolDefinition(name="open_file", title="Open"),) if flag else ()
            current = next((c for c in self.session.active_clients if c.client_id == CLIENT),
                           None)
            new = t.SessionActiveClient(client_id=CLIENT, tools=tools)
            if current != new:
                self.client(SESSION, t.SessionActiveClientSetAction(active_client=new))
        elif verb == "title" and self.session.title != f"title{n}":
            self.client(SESSION, t.SessionTitleChangedAction(title=f"title{n}"))
        elif verb == "tick":
            self.apply(self.bridge.tick().actions)
        elif verb == "clock":
            self.now += 50_000

    # -- what must always hold -----------------------------------------------------------

    def check(self) -> None:
        chat, bridge = self.chat, self.bridge
        active = chat.active_turn
        assert bridge.turn_id == (None if active is None else active.id)
        if active is not None:
            for part in active.response_parts:
                if not isinstance(part, t.ToolCallResponsePart):
                    continue
                call = part.tool_call
                assert not isinstance(call, t.UnknownToolCallState)
                seen = bridge.tool_status(call.tool_call_id)
                expected = {
                    t.ToolCallStreamingState: "streaming",
                    t.ToolCallPendingConfirmationState: "pending",
                    t.ToolCallRunningState: "running",
                    t.ToolCallCompletedState: "done",
                    t.ToolCallCancelledState: "done",
                }[type(call)]
                assert seen == expected, (call.tool_call_id, seen, call)
        for turn in chat.turns:
            for part in turn.response_parts:
                if isinstance(part, t.ToolCallResponsePart):
                    assert isinstance(part.tool_call,
                                      (t.ToolCallCompletedState, t.ToolCallCancelledState))
        assert not ERRORS.records, [r.getMessage() for r in ERRORS.records]


def run(world: World, script: list[tuple[str, Any]]) -> None:
    for kind, item in script:
        if kind == "frame":
            out = world.bridge.receive_frame(item)
            world.apply(out.actions)
        else:
            world.act(*item)
        world.check()
    # the agent goes quiet: whatever was held is settled
    world.apply(world.bridge.receive_frame({"type": "agent_end", "messages": []}).actions)
    world.apply(world.bridge.tick().actions)
    world.check()


@given(steps, st.booleans())
def test_pi_any_frames_yield_only_actions_the_reducers_apply(
    script: list[tuple[str, Any]], confirm_tools: bool
) -> None:
    run(World(PiDialect.PI, confirm_tools), script)


@given(steps, st.booleans(), st.booleans())
def test_xcsh_any_frames_yield_only_actions_the_reducers_apply(
    script: list[tuple[str, Any]], confirm_tools: bool, host_tools: bool
) -> None:
    world = World(PiDialect.XCSH, confirm_tools)
    if host_tools:
        world.act("active_client", 0, True)  # the client publishes open_file as a host tool
    run(world, script)


@given(st.lists(st.binary(max_size=40) | st.sampled_from(
    [b"\n", b"{\"type\":\"agent_start\"}\n", b"\xff\xfe\n", b"[]\n", b"{\"type\":"]), max_size=30))
def test_pi_any_bytes_never_raise(chunks: list[bytes]) -> None:
    world = World(PiDialect.PI, False)
    for chunk in chunks:
        world.apply(world.bridge.receive_data(chunk).actions)
    world.apply(world.bridge.end_of_output().actions)
    world.check()
