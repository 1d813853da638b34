"""The ACP runner across a host restart: ``session/load`` when the agent can, a reason when not.

Run 1 creates a session on a host with a :class:`MemoryStore` and plays a
turn with ``tests/acp_agents/scripted_agent.py``; the runner and the server
close (the agent process reaped).  Run 2 is a new host on the same store
(``build_acp_server(..., store=store)``) with a new agent process: a client
subscribes to the restored chat and starts a turn.  An agent that advertises
``loadSession`` gets ``session/load`` with the recorded ``sessionId`` and
``cwd``; what it replays while loading reaches no client (the chat's turns
are the stored ones plus the new one), and the new turn plays.  Without the
capability, or when the load fails, the turn ends with ``chat/error``
``NotResumable`` and the stored turns are untouched.  A raw JSON-RPC client
on the host's own connection drives each run; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("acp")

from agenthost_protocol import types as t
from agenthost_protocol import wire
from agenthost_protocol.agent.acp_runner import AcpAgentCommand, build_acp_server
from agenthost_protocol.host.store import MemoryStore

from ._json_client import JsonClient
from .acp_agents.scripted_agent import LOAD_ERROR, REPLAYED_TITLE, SESSION_PREFIX

AGENT = str(Path(__file__).parent / "acp_agents" / "scripted_agent.py")
SESSION = "ahp-session:/r1"
CHAT = "ahp-chat:/r1"
USER = t.MessageOrigin(kind=t.MessageKind.USER)
NOW = 1_767_225_600_000


def run(coro: Coroutine[Any, Any, None], timeout: float = 60.0) -> None:
    asyncio.run(asyncio.wait_for(coro, timeout))


class Run(JsonClient):
    """One run of the host on ``store``, the scripted agent started with ``args``."""

    def __init__(self, store: MemoryStore, *args: str, cwd: Path) -> None:
        self.now = itertools.count(NOW, 1000)
        server, self.runner = build_acp_server(
            AcpAgentCommand(command=sys.executable, args=(AGENT, *args), inherit_stderr=False),
            clock=lambda: next(self.now), store=store, session_cwd=str(cwd))
        super().__init__(server)

    def chat(self, uri: str = CHAT) -> t.ChatState:
        return super().chat(uri)

    def has_turns(self, count: int) -> Callable[[], bool]:
        return lambda: len(self.chat().turns) == count

    def session(self, uri: str = SESSION) -> t.SessionState:
        return super().session(uri)

    async def open(self, *, create: bool) -> None:
        await self.runner.start()
        await self.request("initialize", {"protocolVersions": ["0.7.0"], "clientId": "ide"})
        if create:
            assert await self.request("createSession", {"channel": SESSION}) is None
        await self.request("subscribe", {"channel": SESSION})
        await self.request("subscribe", {"channel": CHAT})

    def start_turn(self, turn_id: str, text: str) -> None:
        self.dispatch(CHAT, t.ChatTurnStartedAction(
            turn_id=turn_id, started_at="2026-01-01T00:00:00.000Z",
            message=t.Message(text=text, origin=USER)))

    async def play(self, turn_id: str, text: str) -> t.Turn:
        """A whole turn of the script: the tool call approved, the form answered."""
        count = len(self.chat().turns)
        self.start_turn(turn_id, text)
        await self.until(lambda: pending_call(self.chat()) is not None)
        call = pending_call(self.chat())
        assert call is not None
        self.dispatch(CHAT, t.ChatToolCallApprovedAction(
            turn_id=turn_id, tool_call_id=call, selected_option_id="allow",
            confirmed=t.ToolCallConfirmationReason.USER_ACTION))
        await self.until(lambda: open_input(self.chat()) is not None)
        request = open_input(self.chat())
        assert request is not None
        self.dispatch(CHAT, t.ChatInputCompletedAction(
            request_id=request, response=t.ChatInputResponseKind.ACCEPT, answers={
                "name": t.ChatInputAnswered(state=t.ChatInputAnswerState.SUBMITTED,
                                            value=t.ChatInputTextAnswerValue(value="Ada"))}))
        await self.until(lambda: len(self.chat().turns) == count + 1)
        return self.chat().turns[-1]

    async def close(self) -> None:
        """The runner (turns, agent process), then the server (the last commit)."""
        await asyncio.wait_for(self.runner.close(), 15)
        await asyncio.wait_for(self.server.close(), 15)
        process = self.runner.process
        assert process is not None and process.returncode is not None, "the agent outlived it"
        assert not self.host.uncommitted


def pending_call(chat: t.ChatState) -> str | None:
    turn = chat.active_turn
    for part in turn.response_parts if turn is not None else ():
        if (isinstance(part, t.ToolCallResponsePart)
                and isinstance(part.tool_call, t.ToolCallPendingConfirmationState)):
            return part.tool_call.tool_call_id
    return None


def open_input(chat: t.ChatState) -> str | None:
    turn = chat.active_turn
    for part in turn.response_parts if turn is not None else ():
        if isinstance(part, t.InputRequestResponsePart) and part.response is None:
            return part.request.id
    return None


def text_of(turn: t.Turn) -> str:
    return "".join(p.content for p in turn.response_parts if isinstance(p, t.MarkdownResponsePart))


def logged(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def first_run(store: MemoryStore, tmp_path: Path) -> tuple[str, list[str]]:
    """A session and one turn; the session's ACP id and its chat's turns (as JSON)."""
    one = Run(store, cwd=tmp_path)
    try:
        await one.open(create=True)
        turn = await one.play("turn-1", "hello")
        assert turn.state == t.TurnState.COMPLETE
        assert text_of(turn) == "You said: hello. Nice to meet you, Ada!"
        meta = one.session().meta
        assert meta is not None
        record = meta["acp"]
        assert record["cwd"] == str(tmp_path)
        assert record["sessionId"].startswith(SESSION_PREFIX)
        turns = [wire.dumps(turn) for turn in one.chat().turns]
    finally:
        await one.close()
    return record["sessionId"], turns


def test_an_agent_with_load_session_continues_a_stored_session(tmp_path: Path) -> None:
    store = MemoryStore()
    log = tmp_path / "agent.log"

    async def scenario() -> None:
        session_id, stored = await first_run(store, tmp_path)
        before = None
        two = Run(store, "--load", "--log", str(log), cwd=tmp_path)
        try:
            await two.open(create=False)
            before = two.session()
            assert [wire.dumps(turn) for turn in two.chat().turns] == stored
            turn = await two.play("turn-2", "again")
            assert turn.state == t.TurnState.COMPLETE, turn.error
            assert text_of(turn) == "You said: again. Nice to meet you, Ada!"
            # the agent loaded the recorded session, then played the prompt in it
            assert [(e["method"], e["sessionId"]) for e in logged(log)] == [
                ("session/load", session_id), ("session/prompt", session_id)]
            assert logged(log)[0]["cwd"] == str(tmp_path)
            # the replay reached no client: the turns, title, config and _meta are as stored
            chat = two.chat()
            assert [wire.dumps(turn) for turn in chat.turns[:-1]] == stored
            assert len(chat.turns) == 2 and chat.active_turn is None
            after = two.session()
            assert after.title == before.title != REPLAYED_TITLE
            assert after.config == before.config
            assert after.meta is not None and set(after.meta) == {"acp"}
            assert not any("Replaying" in str(m) for m in two.inbox)
            # a session created after the restart is a new ACP session beside it
            assert await two.request("createSession", {"channel": "ahp-session:/r2"}) is None
            bridge = two.runner.bridge("ahp-session:/r2")
            assert bridge is not None and bridge.acp_session_id != session_id
        finally:
            await two.close()

    run(scenario())


@pytest.mark.parametrize(("args", "reason"), [
    ((), "no loadSession capability"),
    (("--load-fails",), LOAD_ERROR),
])
def test_a_session_the_agent_cannot_load_keeps_its_history_and_refuses_turns(
    tmp_path: Path, args: tuple[str, ...], reason: str,
) -> None:
    store = MemoryStore()
    log = tmp_path / "agent.log"

    async def scenario() -> None:
        session_id, stored = await first_run(store, tmp_path)
        two = Run(store, *args, "--log", str(log), cwd=tmp_path)
        try:
            await two.open(create=False)
            for n in (2, 3):  # every turn in it ends at once, the same way
                two.start_turn(f"turn-{n}", "again")
                await two.until(two.has_turns(n))
                turn = two.chat().turns[-1]
                assert turn.state == t.TurnState.ERROR and turn.error is not None
                assert turn.error.error_type == "NotResumable"
                assert reason in turn.error.message
                assert "history is kept" in turn.error.message
            assert [wire.dumps(turn) for turn in two.chat().turns[:1]] == stored
            # one load at most, and no prompt reached the agent
            assert [e["method"] for e in logged(log)] == (
                ["session/load"] if args else [])
            if args:
                assert logged(log)[0]["sessionId"] == session_id
            assert two.runner.running
        finally:
            await two.close()

    run(scenario())
