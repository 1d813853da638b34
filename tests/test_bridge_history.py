"""The stateless chat API bridge (the Symposium history actor): its sequence diagrams as tests.

The diagrams of Symposium's ``lm-provider.md`` and ``lm-tool-bridging.md``
(commit flow, cancellation by history mismatch, permission approved and
rejected, the peek/consume rule, the caller's own tools), then the edge
cases of ``bridges.md`` §4.4.  The AHP chat is reduced with the library's
reducers: every action the bridge emits must apply, and its echo is fed
back to it as a client would receive it.  The "agent" is the test
dispatching server actions.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from agenthost_protocol import types as t
from agenthost_protocol.bridges.acp import AhpDispatch
from agenthost_protocol.bridges.history import (
    CONFIRMATION_TOOL,
    INPUT_TOOL,
    HistoryActor,
    HistoryConversation,
    HistoryMessage,
    HistoryOutput,
    RequestId,
    ResponseCancelled,
    ResponseComplete,
    ResponseError,
    ResponseEvent,
    ResponsePart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
    match_history,
    normalize,
)
from agenthost_protocol.host import Host
from agenthost_protocol.reducers import reduce

SESSION = "ahp-session:/lm"
CHAT = "ahp-chat:/lm"
CLIENT = "vscode-lm"


def user(text: str) -> HistoryMessage:
    return HistoryMessage("user", (TextPart(text),))


def assistant(*parts: TextPart | ToolCallPart | ThinkingPart) -> HistoryMessage:
    return HistoryMessage("assistant", tuple(parts))


def result(call_id: str, text: str = "ok", *, error: bool = False) -> HistoryMessage:
    return HistoryMessage("user", (ToolResultPart(call_id, text, error),))


def _counter(prefix: str) -> Callable[[], str]:
    numbers = itertools.count(1)
    return lambda: f"{prefix}{next(numbers)}"


class Harness:
    """An AHP chat reduced by the library, a bridge, and the agent played by the test."""

    def __init__(self, *, truncate: bool = True, include_thinking: bool = True) -> None:
        self.now = 1_767_225_600_000
        self.host = Host(clock=self.clock, server_info=t.Implementation(name="lm", version="1"))
        self.host.create_session(SESSION, provider="agent")
        self.host.ready_session(SESSION, default_chat=CHAT)
        self.states: dict[str, t.SnapshotState] = {uri: self._state(uri) for uri in (SESSION, CHAT)}
        self.events: list[ResponseEvent] = []
        self.sent: list[AhpDispatch] = []
        self.bridge = HistoryConversation(session=SESSION, chat=CHAT, client_id=CLIENT,
                                          clock=self.clock, new_id=_counter("turn"),
                                          truncate=truncate, include_thinking=include_thinking)

    def _state(self, uri: str) -> t.SnapshotState:
        state = self.host.state(uri)
        assert state is not None
        return state

    def clock(self) -> int:
        self.now += 10
        return self.now

    @property
    def chat(self) -> t.ChatState:
        state = self.states[CHAT]
        assert isinstance(state, t.ChatState)
        return state

    def apply(self, channel: str, action: t.StateAction) -> None:
        old = self.states[channel]
        new = reduce(channel, old, action, now=self.clock)
        assert new is not old, f"a no-op: {action!r}"
        self.states[channel] = new

    def take(self, out: HistoryOutput) -> None:
        self.events.extend(out.events)
        for d in out.actions:
            self.apply(d.channel, d.action)
            self.sent.append(d)
        for d in out.actions:  # the host echoes the client's actions back to it
            if d.channel == CHAT:
                self.take(self.bridge.observe(d.action))

    def request(self, request_id: RequestId, *messages: HistoryMessage,
                tools: tuple[t.ToolDefinition, ...] | None = None) -> None:
        self.take(self.bridge.request(request_id, messages, tools))

    def cancel(self, request_id: RequestId) -> None:
        self.take(self.bridge.cancel(request_id))

    def agent(self, *actions: t.StateAction) -> None:
        for action in actions:
            self.apply(CHAT, action)
            self.take(self.bridge.observe(action))

    # -- the agent's usual moves -------------------------------------------------------------

    @property
    def turn(self) -> str:
        active = self.chat.active_turn
        assert active is not None
        return active.id

    def say(self, *pieces: str, part: str = "p1") -> None:
        turn = self.turn
        self.agent(t.ChatResponsePartAction(turn_id=turn, part=t.MarkdownResponsePart(
            id=f"{turn}.{part}", content="")))
        for piece in pieces:
            self.agent(t.ChatDeltaAction(turn_id=turn, part_id=f"{turn}.{part}", content=piece))

    def done(self) -> None:
        self.agent(t.ChatTurnCompleteAction(turn_id=self.turn, duration=5))

    def ask_permission(self, call_id: str, tool: str = "bash") -> None:
        turn = self.turn
        self.agent(
            t.ChatToolCallStartAction(turn_id=turn, tool_call_id=call_id, tool_name=tool,
                                      display_name=tool),
            t.ChatToolCallReadyAction(turn_id=turn, tool_call_id=call_id,
                                      invocation_message="Run `make`",
                                      tool_input='{"command":"make"}',
                                      confirmation_title="Run make?",
                                      options=(t.ConfirmationOption(id="allow", label="Allow",
                                                                    kind="approve"),
                                               t.ConfirmationOption(id="deny", label="Deny",
                                                                    kind="deny"))),
        )

    def call_client_tool(self, call_id: str, tool: str, arguments: str) -> None:
        turn = self.turn
        self.agent(
            t.ChatToolCallStartAction(
                turn_id=turn, tool_call_id=call_id, tool_name=tool, display_name=tool,
                contributor=t.ToolCallClientContributor(client_id=CLIENT)),
            t.ChatToolCallReadyAction(turn_id=turn, tool_call_id=call_id,
                                      invocation_message=f"{tool}", tool_input=arguments,
                                      confirmed="not-needed"),
        )

    # -- what the caller received ------------------------------------------------------------

    def stream(self, request_id: RequestId) -> list[object]:
        """The parts and the end of one request's stream, text chunks merged."""
        out: list[object] = []
        for event in self.events:
            if event.request_id != request_id:
                continue
            if isinstance(event, ResponsePart):
                if isinstance(event.part, TextPart) and out and isinstance(out[-1], TextPart):
                    out[-1] = TextPart(out[-1].text + event.part.text)
                else:
                    out.append(event.part)
            else:
                out.append(event)
        return out

    def actions(self) -> list[t.StateAction]:
        return [d.action for d in self.sent]


# -- the sequence diagrams ---------------------------------------------------------------


def test_commit_flow() -> None:
    """lm-provider.md, "Commit Flow": the next user message commits the exchange."""
    h = Harness()
    h.request(1, user("U1"))
    assert not h.bridge.committed and list(h.bridge.provisional) == [user("U1")]
    h.say("P1", "P2", "P3")
    assert list(h.bridge.provisional) == [user("U1"), assistant(TextPart("P1P2P3"))]
    h.done()
    assert h.stream(1) == [TextPart("P1P2P3"), ResponseComplete(1)]
    a1 = assistant(TextPart("P1"), TextPart("P2P3"))  # echoed in other chunks: still equal
    h.request(2, user("U1"), a1, user("U2"))
    assert list(h.bridge.committed) == [user("U1"), normalize(a1)]
    assert list(h.bridge.provisional) == [user("U2")]
    started = [a for a in h.actions() if isinstance(a, t.ChatTurnStartedAction)]
    assert [s.message.text for s in started] == ["U1", "U2"]
    assert not any(isinstance(a, t.ChatTurnCancelledAction) for a in h.actions())
    assert h.bridge.streaming == 2 and h.bridge.turn_id == "turn2"


def test_cancellation_via_history_mismatch() -> None:
    """lm-provider.md, "Cancellation via History Mismatch": the provisional work is rejected."""
    h = Harness()
    h.request(1, user("U1"))
    h.say("A1")
    h.done()
    h.request(2, user("U1"), assistant(TextPart("A1")), user("U2"))
    h.say("P1", "P2")
    h.request(3, user("U1"), assistant(TextPart("A1")), user("U3"))
    assert h.stream(2) == [TextPart("P1P2"), ResponseCancelled(2, "superseded by a new request")]
    assert h.bridge.committed == (user("U1"), assistant(TextPart("A1")))
    assert h.bridge.provisional == (user("U3"),)
    first, second = h.chat.turns
    assert (first.id, first.state) == ("turn1", "complete")
    assert (second.id, second.state) == ("turn2", "cancelled")  # cancelled downstream
    third = h.chat.active_turn
    assert third is not None and third.id == "turn3" and third.message.text == "U3"


def test_permission_approved() -> None:
    """lm-tool-bridging.md, "Permission Approved Flow": the tool result is the approval."""
    h = Harness()
    h.request(1, user("U1"))
    h.say("Let me build.")
    h.ask_permission("call-1")
    tool_call = ToolCallPart("call-1", CONFIRMATION_TOOL, {
        "tool": "bash", "title": "Run make?", "input": '{"command":"make"}',
        "options": [{"id": "allow", "label": "Allow", "kind": "approve"},
                    {"id": "deny", "label": "Deny", "kind": "deny"}]})
    assert h.stream(1) == [TextPart("Let me build."), tool_call, ResponseComplete(1)]
    a1 = assistant(TextPart("Let me build."), tool_call)
    h.request(2, user("U1"), a1, result("call-1", "Allow"))
    assert h.bridge.committed == (user("U1"), a1)
    [approved] = [a for a in h.actions() if isinstance(a, t.ChatToolCallApprovedAction)]
    assert approved.selected_option_id == "allow" and approved.confirmed == "user-action"
    # the agent runs the tool internally and goes on streaming, to the second request
    h.agent(t.ChatToolCallCompleteAction(
        turn_id=h.turn, tool_call_id="call-1",
        result=t.ToolCallResult(success=True, past_tense_message="Ran make")))
    h.say("Built.", part="p2")
    h.done()
    assert h.stream(2) == [TextPart("Built."), ResponseComplete(2)]
    [turn] = h.chat.turns
    assert turn.state == "complete" and len(h.chat.turns) == 1  # one AHP turn throughout


def test_permission_rejected() -> None:
    """lm-tool-bridging.md, "Permission Rejected Flow": a history without our tool call."""
    h = Harness()
    h.request(1, user("U1"))
    h.ask_permission("call-1")
    h.request(2, user("U2"))
    denied = [a for a in h.actions() if isinstance(a, t.ChatToolCallDeniedAction)]
    assert [(d.tool_call_id, d.reason) for d in denied] == [("call-1", "denied")]
    first, = h.chat.turns
    assert first.state == "cancelled"
    call = first.response_parts[0]
    assert isinstance(call, t.ToolCallResponsePart)
    assert isinstance(call.tool_call, t.ToolCallCancelledState)
    assert call.tool_call.reason == "denied"  # not "skipped": the user refused it
    active = h.chat.active_turn
    assert active is not None and active.message.text == "U2"
    assert h.bridge.committed == () and h.bridge.provisional == (user("U2"),)


def test_tool_result_with_more_messages_is_a_soft_cancel() -> None:
    """lm-tool-bridging.md, the peek/consume rule: a tool result plus a new message."""
    h = Harness()
    h.request(1, user("U1"))
    h.ask_permission("call-1")
    [call] = [p for p in h.stream(1) if isinstance(p, ToolCallPart)]
    h.request(2, user("U1"), assistant(call), result("call-1"), user("Actually, stop"))
    assert not any(isinstance(a, t.ChatToolCallApprovedAction) for a in h.actions())
    assert [a.reason for a in h.actions() if isinstance(a, t.ChatToolCallDeniedAction)] == [
        "denied"]
    assert h.chat.turns[0].state == "cancelled"
    active = h.chat.active_turn
    assert active is not None and active.message.text == "Actually, stop"


def test_the_callers_own_tools() -> None:
    """lm-tool-bridging.md, "VS Code Tool Flow": the caller's tools are the client's tools."""
    h = Harness()
    search = t.ToolDefinition(name="search_workspace", title="Search",
                              input_schema={"type": "object"})
    h.request(1, user("Where is main?"), tools=(search,))
    [published] = [d.action for d in h.sent if d.channel == SESSION]
    assert published == t.SessionActiveClientSetAction(
        active_client=t.SessionActiveClient(client_id=CLIENT, tools=(search,)))
    h.call_client_tool("call-7", "search_workspace", '{"query":"def main"}')
    call = ToolCallPart("call-7", "search_workspace", {"query": "def main"})
    assert h.stream(1) == [call, ResponseComplete(1)]
    h.request(2, user("Where is main?"), assistant(call), result("call-7", "src/app.py:3"),
              tools=(search,))
    assert [d.channel for d in h.sent].count(SESSION) == 1  # the same tools: not sent again
    [complete] = [a for a in h.actions() if isinstance(a, t.ChatToolCallCompleteAction)]
    assert complete.result.success
    assert complete.result.content == (t.ToolResultTextContent(text="src/app.py:3"),)
    h.say("In src/app.py.")
    h.done()
    assert h.stream(2) == [TextPart("In src/app.py."), ResponseComplete(2)]


# -- bridges.md §4.4 and the rest -----------------------------------------------------------


def test_a_confirmed_client_tool_is_announced_twice() -> None:
    h = Harness()
    h.request(1, user("Open it"))
    turn = h.turn
    h.agent(t.ChatToolCallStartAction(turn_id=turn, tool_call_id="c", tool_name="open",
                                      display_name="Open",
                                      contributor=t.ToolCallClientContributor(client_id=CLIENT)),
            t.ChatToolCallReadyAction(turn_id=turn, tool_call_id="c", invocation_message="Open",
                                      tool_input='{"path":"a"}'))
    [confirm] = [p for p in h.stream(1) if isinstance(p, ToolCallPart)]
    assert confirm.tool_name == CONFIRMATION_TOOL
    h.request(2, user("Open it"), assistant(confirm), result("c", "yes"))
    # approved: now running, and the caller runs it
    assert h.stream(2) == [ToolCallPart("c", "open", {"path": "a"}), ResponseComplete(2)]


def test_input_requests_are_a_pseudo_tool() -> None:
    h = Harness()
    h.request(1, user("Deploy"))
    h.agent(t.ChatInputRequestedAction(request=t.ChatInputRequest(
        id="r1", message="Where to?", questions=(
            t.ChatInputSingleSelectQuestion(id="region", message="Region", required=True,
                                            options=(t.ChatInputOption(id="eu", label="EU"),
                                                     t.ChatInputOption(id="us", label="US"))),
            t.ChatInputBooleanQuestion(id="now", message="Now?"),
        ))))
    [call] = [p for p in h.stream(1) if isinstance(p, ToolCallPart)]
    assert call == ToolCallPart("r1", INPUT_TOOL, {"message": "Where to?", "questions": [
        {"id": "region", "kind": "single-select", "message": "Region", "required": True,
         "options": [{"id": "eu", "label": "EU"}, {"id": "us", "label": "US"}]},
        {"id": "now", "kind": "boolean", "message": "Now?", "required": False}]})
    h.request(2, user("Deploy"), assistant(call),
              result("r1", json.dumps({"region": "US", "now": "yes"})))
    [completed] = [a for a in h.actions() if isinstance(a, t.ChatInputCompletedAction)]
    assert completed.response == "accept"
    assert completed.answers == {
        "region": t.ChatInputAnswered(state=t.ChatInputAnswerState.SUBMITTED,
                                      value=t.ChatInputSelectedAnswerValue(value="us")),
        "now": t.ChatInputAnswered(state=t.ChatInputAnswerState.SUBMITTED,
                                   value=t.ChatInputBooleanAnswerValue(value=True)),
    }
    assert h.bridge.streaming == 2


def test_an_unanswered_pause_is_resolved_so_the_agent_goes_on() -> None:
    h = Harness()
    h.request(1, user("Two things"))
    h.ask_permission("a")
    [first] = [p for p in h.stream(1) if isinstance(p, ToolCallPart)]
    h.ask_permission("b")  # no stream now: announced with the next request
    h.request(2, user("Two things"), assistant(first), result("a", "Allow"))
    [second] = [p for p in h.stream(2) if isinstance(p, ToolCallPart)]
    assert second.tool_call_id == "b" and h.stream(2)[-1] == ResponseComplete(2)
    # the caller answers nothing for "b" but goes on with an empty result list: denied
    h.request(3, user("Two things"), assistant(first), result("a", "Allow"), assistant(second),
              HistoryMessage("user", ()))
    assert [(a.tool_call_id, a.approved) for a in h.actions()
            if isinstance(a, (t.ChatToolCallApprovedAction, t.ChatToolCallDeniedAction))] == [
        ("a", True), ("b", False)]


def test_retrying_the_same_history_regenerates() -> None:
    h = Harness()
    h.request(1, user("U1"))
    h.say("first answer")
    h.done()
    h.request(2, user("U1"))  # "regenerate": the caller dropped our reply
    # the finished reply is cut from the agent too, then the message is asked again
    truncations = [a for a in h.actions() if isinstance(a, t.ChatTruncatedAction)]
    assert truncations == [t.ChatTruncatedAction(turn_id=None)]
    active = h.chat.active_turn
    assert h.chat.turns == () and active is not None and active.message.text == "U1"


def test_an_identical_history_with_the_reply_completes_at_once() -> None:
    h = Harness()
    h.request(1, user("U1"))
    h.say("A1")
    h.done()
    before = len(h.sent)
    h.request(2, user("U1"), assistant(TextPart("A1")))
    assert h.stream(2) == [ResponseComplete(2)] and len(h.sent) == before


def test_editing_an_older_message_truncates_after_the_last_matching_turn() -> None:
    h = Harness()
    history: list[HistoryMessage] = []
    for n in (1, 2, 3):
        history.append(user(f"U{n}"))
        h.request(n, *history)
        h.say(f"A{n}")
        h.done()
        history.append(assistant(TextPart(f"A{n}")))
    h.request(4, user("U1"), assistant(TextPart("A1")), user("U2 edited"))
    assert [a for a in h.actions() if isinstance(a, t.ChatTruncatedAction)] == [
        t.ChatTruncatedAction(turn_id="turn1")]
    assert [turn.id for turn in h.chat.turns] == ["turn1"]
    active = h.chat.active_turn
    assert active is not None and active.message.text == "U2 edited"
    assert h.bridge.committed == (user("U1"), assistant(TextPart("A1")))


def test_without_truncation_an_edit_leaves_the_agents_history() -> None:
    h = Harness(truncate=False)
    h.request(1, user("U1"))
    h.say("A1")
    h.done()
    h.request(2, user("U1"), assistant(TextPart("A1")), user("U2"))
    h.say("A2")
    h.done()
    h.request(3, user("U1 edited"))
    assert not any(isinstance(a, t.ChatTruncatedAction) for a in h.actions())
    assert [turn.id for turn in h.chat.turns] == ["turn1", "turn2"]


def test_cancel_and_errors_end_the_stream() -> None:
    h = Harness()
    h.request(1, user("U1"))
    h.say("par")
    h.cancel(1)
    assert h.chat.turns[0].state == "cancelled" and h.bridge.streaming is None
    assert h.stream(1) == [TextPart("par")]  # the caller cancelled: no end event
    h.request(2, user("U1"), user("U2"))
    h.agent(t.ChatErrorAction(turn_id=h.turn, duration=1,
                              error=t.ErrorInfo(error_type="provider", message="overloaded")))
    assert h.stream(2) == [ResponseError(2, "overloaded")]


def test_reasoning_is_streamed_as_thinking_and_never_compared() -> None:
    h = Harness()
    h.request(1, user("U1"))
    turn = h.turn
    h.agent(t.ChatResponsePartAction(turn_id=turn, part=t.ReasoningResponsePart(
        id="r", content="hmm")), t.ChatReasoningAction(turn_id=turn, part_id="r", content="..."))
    h.say("A1")
    h.done()
    assert h.stream(1) == [ThinkingPart("hmm"), ThinkingPart("..."), TextPart("A1"),
                           ResponseComplete(1)]
    # the caller echoes the reply without its reasoning: still an extension
    h.request(2, user("U1"), assistant(TextPart("A1")), user("U2"))
    assert not any(isinstance(a, t.ChatTurnCancelledAction) for a in h.actions())
    silent = Harness(include_thinking=False)
    silent.request(1, user("U1"))
    silent.agent(t.ChatResponsePartAction(turn_id=silent.turn, part=t.ReasoningResponsePart(
        id="r", content="hmm")))
    assert silent.stream(1) == []


def test_a_turn_replaced_by_another_client_stops_the_stream() -> None:
    h = Harness()
    h.request(1, user("U1"))
    h.agent(t.ChatTurnStartedAction(turn_id="other", started_at="2026-01-01T00:00:00.000Z",
                                    message=t.Message(text="x", origin=t.MessageOrigin(
                                        kind="user"))))
    assert h.stream(1) == [ResponseCancelled(1, "the turn was replaced")]
    assert h.bridge.turn_id is None


def test_an_imported_history_is_rendered_into_the_first_prompt() -> None:
    h = Harness()
    h.request(1, HistoryMessage("system", (TextPart("Be brief"),)), user("Hi"),
              assistant(TextPart("Hello")), user("Bye"))
    active = h.chat.active_turn
    assert active is not None
    assert active.message.text == "User: Hi\n\nAssistant: Hello\n\nUser: Bye"


def test_match_history() -> None:
    u1, a1, u2 = user("U1"), assistant(TextPart("A1")), user("U2")
    assert match_history([u1, a1], [u2], [u1, a1, u2, user("U3")]).kind == "extend"
    found = match_history([u1, a1], [u2], [u1, a1, user("U3")])
    assert (found.kind, found.prefix, found.new) == ("diverged-provisional", 2, (user("U3"),))
    found = match_history([u1, a1], [u2], [user("U0")])
    assert (found.kind, found.prefix) == ("diverged-committed", 0)
    assert normalize(assistant(TextPart("a"), TextPart(""), ThinkingPart("t"), TextPart("b"))) == (
        assistant(TextPart("ab")))
    assert ToolCallPart("c", "n", {"a": 1, "b": [True]}) == ToolCallPart("c", "n",
                                                                        {"b": [True], "a": 1})
    assert ToolCallPart("c", "n", {"a": 1}) != ToolCallPart("c", "n", {"a": True})


# -- the router ------------------------------------------------------------------------------


class Routed:
    def __init__(self) -> None:
        self.now = 1_767_225_600_000
        chats = (f"ahp-chat:/c{n}" for n in range(1, 100))
        turns = (f"t{n}" for n in range(1, 1000))
        self.actor = HistoryActor(session=SESSION, client_id=CLIENT, clock=self.clock,
                                  new_id=turns.__next__, new_chat=chats.__next__,
                                  max_conversations=2)

    def clock(self) -> int:
        self.now += 1
        return self.now


def test_the_actor_routes_by_history_and_never_hijacks_an_unrelated_one() -> None:
    r = Routed()

    def started(out: HistoryOutput) -> t.ChatTurnStartedAction:
        [action] = [d.action for d in out.actions if isinstance(d.action, t.ChatTurnStartedAction)]
        return action

    out = r.actor.request(1, [user("Hi")])
    assert out.created_chat == "ahp-chat:/c1" and started(out).turn_id == "t1"
    r.actor.observe("ahp-chat:/c1", t.ChatTurnCompleteAction(turn_id="t1", duration=1))
    # an unrelated conversation: a new chat, the first one untouched (§4.4: empty prefix)
    out = r.actor.request(2, [user("Something else")])
    assert out.created_chat == "ahp-chat:/c2"
    assert not any(isinstance(d.action, t.ChatTurnCancelledAction) for d in out.actions)
    r.actor.observe("ahp-chat:/c2", t.ChatTurnCompleteAction(turn_id="t2", duration=1))
    # the first conversation's next message goes back to it
    out = r.actor.request(3, [user("Hi"), user("More")])
    assert out.created_chat is None and {d.channel for d in out.actions} == {"ahp-chat:/c1"}
    # leaving its provisional exchange: still that conversation, whose turn is cancelled
    out = r.actor.request(4, [user("Hi"), user("Other")])
    assert out.created_chat is None
    assert [type(d.action).__name__ for d in out.actions] == [
        "ChatTurnCancelledAction", "ChatTurnStartedAction"]
    # editing its committed history: a new conversation (c2, idle, is forgotten for room)
    out = r.actor.request(5, [user("Hello"), user("Other")])
    assert out.created_chat == "ahp-chat:/c3" and out.forgotten == ("ahp-chat:/c2",)
    assert [c.chat for c in r.actor.conversations] == ["ahp-chat:/c1", "ahp-chat:/c3"]
    [cancelled] = [d.action for d in r.actor.cancel(5).actions]
    assert isinstance(cancelled, t.ChatTurnCancelledAction) and cancelled.turn_id == "t5"
    assert r.actor.cancel(99) == HistoryOutput()


def test_the_actor_publishes_the_callers_tools_once() -> None:
    r = Routed()
    tools = (t.ToolDefinition(name="search"),)
    out = r.actor.request(1, [user("Hi")], tools)
    assert out.actions[0] == AhpDispatch(SESSION, t.SessionActiveClientSetAction(
        active_client=t.SessionActiveClient(client_id=CLIENT, tools=tools)))
    out = r.actor.request(2, [user("Other")], tools)
    assert all(d.channel != SESSION for d in out.actions)


@pytest.mark.parametrize("bad", [
    t.ChatDeltaAction(turn_id="nope", part_id="x", content="y"),
    t.ChatToolCallReadyAction(turn_id="turn1", tool_call_id="unknown", invocation_message="m"),
    t.ChatInputCompletedAction(request_id="r", response="accept"),
    t.UnknownAction(type="chat/fromTheFuture", raw={}),
])
def test_observe_is_total(bad: t.StateAction) -> None:
    h = Harness()
    h.request(1, user("U1"))
    h.take(h.bridge.observe(bad))
    assert h.bridge.streaming == 1


def test_a_retry_of_a_paused_reply_answers_nothing() -> None:
    h = Harness()
    h.request(1, user("U1"))
    h.ask_permission("call-1")
    [call] = [p for p in h.stream(1) if isinstance(p, ToolCallPart)]
    h.request(2, user("U1"), assistant(call))  # the same history: no result, no new question
    assert h.stream(2) == [ResponseComplete(2)]
    assert not any(isinstance(a, (t.ChatToolCallApprovedAction, t.ChatToolCallDeniedAction))
                   for a in h.actions())
    # a retry while the reply streams takes the stream over
    h2 = Harness()
    h2.request(1, user("U1"))
    h2.say("par")
    h2.request(2, user("U1"), assistant(TextPart("par")))
    h2.say("t", part="p2")
    h2.done()
    assert h2.stream(1) == [TextPart("par"), ResponseCancelled(1, "superseded by a new request")]
    assert h2.stream(2) == [TextPart("t"), ResponseComplete(2)]


def test_the_docs_example_runs() -> None:
    page = Path(__file__).parent.parent / "docs" / "bridges.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text("utf-8"), re.S)
    example = next((b for b in blocks if "HistoryConversation(" in b), None)
    assert example is not None, "docs/bridges.md lost its HistoryConversation example"
    exec(compile(example, "docs/bridges.md", "exec"), {})
