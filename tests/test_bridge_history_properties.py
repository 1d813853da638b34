"""Property tests of the history bridge: any caller, any agent, the AHP chat stays sound.

Hypothesis plays a stateless caller (continuing, answering tool calls,
dropping the reply, editing older messages, repeating itself, cancelling)
against an agent that streams text and reasoning, calls its own tools and
the caller's, asks for confirmation and input, and ends turns (or has them
replaced and truncated by another client).  Every action the bridge emits
is applied with the reducers and must change the chat; its view of its turn
matches the reduced state; every request's stream ends at most once and
carries nothing after its end; the bridge never fails.
"""

from __future__ import annotations

import itertools
import json
import logging

from hypothesis import given
from hypothesis import strategies as st

from agenthost_protocol import types as t
from agenthost_protocol.bridges.history import (
    HistoryConversation,
    HistoryMessage,
    HistoryOutput,
    HistoryPart,
    ResponsePart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
)
from agenthost_protocol.host import Host
from agenthost_protocol.reducers import reduce

SESSION = "ahp-session:/h"
CHAT = "ahp-chat:/h"
CLIENT = "lm"


class _Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


ERRORS = _Errors()
logging.getLogger("agenthost_protocol.bridges.history").addHandler(ERRORS)


class World:
    def __init__(self, truncate: bool, thinking: bool) -> None:
        ERRORS.records.clear()
        self.now = 1_767_225_600_000
        host = Host(clock=self.clock, server_info=t.Implementation(name="h", version="1"))
        host.create_session(SESSION, provider="agent")
        host.ready_session(SESSION, default_chat=CHAT)
        chat, session = host.state(CHAT), host.state(SESSION)
        assert isinstance(chat, t.ChatState) and isinstance(session, t.SessionState)
        self.chat, self.session = chat, session
        numbers = itertools.count(1)
        self.bridge = HistoryConversation(session=SESSION, chat=CHAT, client_id=CLIENT,
                                          clock=self.clock, new_id=lambda: f"t{next(numbers)}",
                                          truncate=truncate, include_thinking=thinking)
        self.ids = itertools.count(1)
        self.request_id = 0
        self.sent: list[HistoryMessage] = []
        """The history of the last request."""
        self.replies: dict[int, list[HistoryPart]] = {}
        self.ended: set[object] = set()
        self.foreign = False

    def clock(self) -> int:
        self.now += 7
        return self.now

    def apply(self, channel: str, action: t.StateAction) -> None:
        if channel == CHAT:
            old_chat = self.chat
            self.chat = reduce(CHAT, old_chat, action, now=self.clock)
            assert self.chat is not old_chat, f"a no-op: {action!r}"
        else:
            old_session = self.session
            self.session = reduce(SESSION, old_session, action, now=self.clock)
            assert self.session is not old_session, f"a no-op: {action!r}"

    def take(self, out: HistoryOutput) -> None:
        for event in out.events:
            assert event.request_id not in self.ended, f"after its end: {event!r}"
            if isinstance(event, ResponsePart):
                assert isinstance(event.request_id, int)
                self.replies.setdefault(event.request_id, []).append(event.part)
            else:
                self.ended.add(event.request_id)
        for d in out.actions:
            self.apply(d.channel, d.action)
        for d in out.actions:
            if d.channel == CHAT:
                self.take(self.bridge.observe(d.action))

    def agent(self, action: t.StateAction) -> None:
        self.apply(CHAT, action)
        self.take(self.bridge.observe(action))

    # -- the caller ----------------------------------------------------------------------

    def reply(self, drop_thinking: bool, split: int) -> HistoryMessage | None:
        echoed: list[HistoryPart] = []
        for part in self.replies.get(self.request_id, []):
            if isinstance(part, ThinkingPart) and drop_thinking:
                continue
            if isinstance(part, TextPart):  # the caller echoes text in its own chunks
                echoed += [TextPart(part.text[:split]), TextPart(part.text[split:])]
            else:
                echoed.append(part)
        return HistoryMessage("assistant", tuple(echoed)) if echoed else None

    def ask(self, how: str, n: int, flag: bool) -> None:
        reply = self.reply(flag, n)
        history = list(self.sent)
        if how == "continue":
            history += [*([reply] if reply else []), HistoryMessage("user", (TextPart(f"u{n}"),))]
        elif how == "answer":
            calls = [p for p in (reply.content if reply else ()) if isinstance(p, ToolCallPart)]
            answers = ["Allow", "deny", json.dumps({"answer": "x"}), "ok", "no"]
            results: tuple[HistoryPart, ...] = tuple(
                ToolResultPart(c.tool_call_id, answers[(n + i) % len(answers)], (n + i) % 4 == 3)
                for i, c in enumerate(calls))
            history += [*([reply] if reply else []), HistoryMessage("user", results)]
            if flag and n % 3 == 0:
                history.append(HistoryMessage("user", (TextPart("and more"),)))
        elif how == "drop":
            history.append(HistoryMessage("user", (TextPart(f"again {n}"),)))
        elif how == "edit":
            history = [*history[: n % (len(history) + 1)],
                       HistoryMessage("user", (TextPart(f"edited {n}"),))]
        elif how == "empty":
            history = []
        self.request_id += 1
        self.sent = history
        self.take(self.bridge.request(self.request_id, history))

    # -- the agent -----------------------------------------------------------------------

    def move(self, how: str, n: int, flag: bool) -> None:
        turn = self.chat.active_turn
        if turn is None:
            return
        tid, k = turn.id, next(self.ids)
        calls = [p.tool_call for p in turn.response_parts if isinstance(p, t.ToolCallResponsePart)]
        if how == "text":
            part: t.ResponsePart = (t.MarkdownResponsePart(id=f"m{k}", content="")
                                    if flag else t.ReasoningResponsePart(id=f"m{k}", content=""))
            self.agent(t.ChatResponsePartAction(turn_id=tid, part=part))
            self.agent(t.ChatDeltaAction(turn_id=tid, part_id=f"m{k}", content=f"x{n}")
                       if flag else
                       t.ChatReasoningAction(turn_id=tid, part_id=f"m{k}", content=f"r{n}"))
        elif how == "tool":
            contributor = t.ToolCallClientContributor(client_id=CLIENT) if n % 2 else None
            self.agent(t.ChatToolCallStartAction(turn_id=tid, tool_call_id=f"c{k}",
                                                 tool_name="search", display_name="Search",
                                                 contributor=contributor))
            if n % 3:
                self.agent(t.ChatToolCallReadyAction(
                    turn_id=tid, tool_call_id=f"c{k}", invocation_message="Search",
                    tool_input=json.dumps({"q": n}),
                    confirmed="not-needed" if flag else None,
                    options=None if flag else (
                        t.ConfirmationOption(id="ok", label="Allow", kind="approve"),)))
        elif how == "finish_tool":
            running = [c for c in calls if isinstance(c, t.ToolCallRunningState)
                       and c.contributor is None]
            streaming = [c for c in calls if isinstance(c, t.ToolCallStreamingState)]
            if running:
                self.agent(t.ChatToolCallCompleteAction(
                    turn_id=tid, tool_call_id=running[n % len(running)].tool_call_id,
                    result=t.ToolCallResult(success=flag, past_tense_message="done")))
            elif streaming:
                self.agent(t.ChatToolCallReadyAction(
                    turn_id=tid, tool_call_id=streaming[0].tool_call_id,
                    invocation_message="go", confirmed="not-needed"))
        elif how == "input":
            self.agent(t.ChatInputRequestedAction(request=t.ChatInputRequest(
                id=f"i{k}", message="?",
                questions=(t.ChatInputTextQuestion(id="answer", message="Say", required=flag),))))
        elif how == "end":
            self.agent(t.ChatTurnCompleteAction(turn_id=tid, duration=1) if flag else
                       t.ChatErrorAction(turn_id=tid, duration=1,
                                         error=t.ErrorInfo(error_type="x", message="boom")))
        elif how == "foreign" and n % 4 == 0:  # another client replaces or truncates
            self.foreign = True
            self.agent(t.ChatTurnStartedAction(turn_id=f"other{k}",
                                               started_at="2026-01-01T00:00:00.000Z",
                                               message=t.Message(text="o", origin=t.MessageOrigin(
                                                   kind="user"))) if flag else
                       t.ChatTruncatedAction(turn_id=self.chat.turns[n % len(self.chat.turns)].id
                                             if self.chat.turns and n % 8 else None))

    def check(self) -> None:
        active = self.chat.active_turn
        if not self.foreign:
            assert self.bridge.turn_id == (None if active is None else active.id)
        elif self.bridge.turn_id is not None:
            assert active is not None and active.id == self.bridge.turn_id
        assert self.bridge.streaming is None or self.bridge.streaming not in self.ended
        assert not ERRORS.records, [r.getMessage() for r in ERRORS.records]


caller = st.tuples(st.just("caller"),
                   st.sampled_from(["continue", "answer", "answer", "answer", "answer", "drop",
                                    "edit", "empty", "cancel"]),
                   st.integers(0, 9), st.booleans())
agent = st.tuples(st.just("agent"),
                  st.sampled_from(["text", "text", "tool", "tool", "finish_tool", "input",
                                   "end", "foreign"]),
                  st.integers(0, 9), st.booleans())


@given(st.lists(st.one_of(caller, agent, agent), max_size=60), st.booleans(), st.booleans())
def test_history_any_caller_and_agent_keep_the_chat_sound(
    script: list[tuple[str, str, int, bool]], truncate: bool, thinking: bool
) -> None:
    world = World(truncate, thinking)
    world.ask("continue", 0, False)
    for who, how, n, flag in script:
        if who == "agent":
            world.move(how, n, flag)
        elif how == "cancel":
            world.take(world.bridge.cancel(world.request_id))
        else:
            world.ask(how, n, flag)
        world.check()
    # the agent finishes whatever is open: the stream, if any, ends
    active = world.chat.active_turn
    if active is not None:
        world.agent(t.ChatTurnCompleteAction(turn_id=active.id, duration=1))
    assert world.bridge.streaming is None
    world.check()
