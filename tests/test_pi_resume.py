"""The pi runner across a host restart: ``switch_session`` to the file pi kept, or a reason.

Run 1 creates a session on a host with a :class:`MemoryStore` and plays a
turn with the pi stand-in (``test_bridge_pi_standin.py``), which names a
session file in ``get_state`` (``--session-dir``) and writes it on a prompt;
the runner closes (its process reaped).  Run 2 is a new host on the same
store with a new runner: a client subscribes to the restored chat and starts
a turn.  The runner spawns the session's process again and sends
``switch_session`` with the recorded file; the new turn plays.  Without a
file (``--no-session``), with the file gone, or when the switch fails, the
turn ends with ``chat/error`` ``NotResumable``, the stored turns untouched
and no process left.  A chat that has no turn yet needs no file: a new pi
session serves it.  A raw JSON-RPC client on the host's own connection drives
each run; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from agenthost_protocol import types as t
from agenthost_protocol import wire
from agenthost_protocol.agent.pi_runner import PiAgentCommand, PiAgentRunner, pi_root_state
from agenthost_protocol.aio.server import HostServer
from agenthost_protocol.bridges.pi import PiDialect
from agenthost_protocol.host import Host
from agenthost_protocol.host.store import MemoryStore

from ._json_client import JsonClient

STANDIN = str(Path(__file__).with_name("test_bridge_pi_standin.py"))
SESSION = "ahp-session:/p1"
CHAT = "ahp-chat:/p1"
EMPTY = "ahp-session:/p2"
EMPTY_CHAT = "ahp-chat:/p2"
USER = t.MessageOrigin(kind=t.MessageKind.USER)
NOW = 1_767_225_600_000


def run(coro: Coroutine[Any, Any, None], timeout: float = 60.0) -> None:
    asyncio.run(asyncio.wait_for(coro, timeout))


class Run(JsonClient):
    """One run of the host on ``store``: the stand-in started with ``args``, logging to ``log``."""

    def __init__(self, store: MemoryStore, log: Path, *args: str,
                 dialect: PiDialect = PiDialect.PI) -> None:
        self.now = itertools.count(NOW, 1000)
        self.log = log
        host = Host(clock=lambda: next(self.now),
                    server_info=t.Implementation(name="pi-test", version="1"),
                    root=pi_root_state(dialect=dialect), store=store)
        super().__init__(HostServer(host))
        xcsh = ("--xcsh",) if dialect is PiDialect.XCSH else ()
        self.runner = PiAgentRunner(
            self.server, PiAgentCommand(command=sys.executable,
                                        args=(STANDIN, *xcsh, "--log", str(log), *args),
                                        inherit_stderr=False),
            dialect=dialect, idle_tick=0.05, start_timeout=10.0, close_timeout=2.0,
            resume_timeout=10.0)
        self.opened = itertools.chain((True,), itertools.repeat(False))

    def chat(self, uri: str = CHAT) -> t.ChatState:
        return super().chat(uri)

    def session(self, uri: str = SESSION) -> t.SessionState:
        return super().session(uri)

    def is_ready(self, uri: str) -> Callable[[], bool]:
        return lambda: self.session(uri).lifecycle == "ready"

    async def open(self, *sessions: str, create: bool) -> None:
        if next(self.opened):
            await self.request("initialize", {"protocolVersions": ["0.7.0"], "clientId": "ide"})
        for uri in sessions:
            if create:
                assert await self.request("createSession", {"channel": uri}) is None
                await self.until(self.is_ready(uri))
            await self.request("subscribe", {"channel": uri})
            await self.request("subscribe", {"channel": uri.replace("session", "chat")})

    async def play(self, turn_id: str, text: str, chat: str = CHAT) -> t.Turn:
        count = len(self.chat(chat).turns)
        self.dispatch(chat, t.ChatTurnStartedAction(
            turn_id=turn_id, started_at="2026-01-01T00:00:00.000Z",
            message=t.Message(text=text, origin=USER)))
        await self.until(lambda: len(self.chat(chat).turns) == count + 1)
        return self.chat(chat).turns[-1]

    def actions(self, channel: str, kind: str) -> list[dict[str, Any]]:
        """The actions of type ``kind`` the client was sent on ``channel``."""
        return [m["params"]["action"] for m in self.inbox if m.get("method") == "action"
                and m["params"]["channel"] == channel and m["params"]["action"]["type"] == kind]

    def pids(self) -> list[int]:
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return [int(line.split()[1]) for line in lines if line.startswith("pid ")]

    def commands(self) -> list[dict[str, Any]]:
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return [json.loads(line) for line in lines if line.startswith("{")]

    async def close(self) -> None:
        """The runner (turns, processes), then the server (the last commit)."""
        await asyncio.wait_for(self.runner.close(), 15)
        await asyncio.wait_for(self.server.close(), 15)
        assert self.runner.processes == ()
        assert not self.host.uncommitted
        for pid in self.pids():
            assert reaped(pid), f"the stand-in {pid} outlived the runner"


def reaped(pid: int) -> bool:
    """Gone and waited for (a zombie would still take signal 0)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def text_of(turn: t.Turn) -> str:
    return "".join(p.content for p in turn.response_parts if isinstance(p, t.MarkdownResponsePart))


async def first_run(store: MemoryStore, log: Path, *args: str,
                    dialect: PiDialect = PiDialect.PI) -> tuple[Path | None, list[str]]:
    """Two sessions, a turn in the first; its session file and its chat's turns (as JSON)."""
    one = Run(store, log, *args, dialect=dialect)
    try:
        await one.open(SESSION, EMPTY, create=True)
        turn = await one.play("t1", "hello")
        assert turn.state == t.TurnState.COMPLETE and text_of(turn) == "You said: hello"
        meta = one.session().meta
        file = None if meta is None else Path(meta["pi"]["sessionFile"])
        assert file is None or file.is_file()
        return file, [wire.dumps(turn) for turn in one.chat().turns]
    finally:
        await one.close()


@pytest.mark.parametrize("dialect", [PiDialect.PI, PiDialect.XCSH])
def test_a_session_pi_kept_in_a_file_continues_after_a_restart(
    tmp_path: Path, dialect: PiDialect,
) -> None:
    store = MemoryStore()

    async def scenario() -> None:
        file, stored = await first_run(store, tmp_path / "one.log", "--session-dir",
                                       str(tmp_path), dialect=dialect)
        assert file is not None
        fresh = tmp_path / "two"
        fresh.mkdir()
        # each new process names a new file (in fresh/) until it switches
        two = Run(store, tmp_path / "two.log", "--session-dir", str(fresh), dialect=dialect)
        try:
            await two.open(SESSION, create=False)
            assert two.session().meta == {"pi": {"sessionFile": str(file)}}
            assert [wire.dumps(turn) for turn in two.chat().turns] == stored
            turn = await two.play("t2", "again")
            assert turn.state == t.TurnState.COMPLETE, turn.error
            assert text_of(turn) == "You said: again"
            kinds = [c["type"] for c in two.commands()]
            switch = [c for c in two.commands() if c["type"] == "switch_session"]
            assert [c["sessionPath"] for c in switch] == [str(file)]
            assert kinds.index("switch_session") < kinds.index("prompt")
            assert [wire.dumps(turn) for turn in two.chat().turns[:-1]] == stored
            # the stand-in wrote the new prompt into the file it switched to
            assert [json.loads(line)["content"] for line in file.read_text().splitlines()] == [
                "hello", "again"]
            assert two.session().meta == {"pi": {"sessionFile": str(file)}}
            assert two.actions(SESSION, "session/metaChanged") == []  # not even for a while
            [process] = two.runner.processes
            # a session without turns has nothing to lose: a new pi session serves it
            await two.open(EMPTY, create=False)
            turn = await two.play("t1", "fresh", EMPTY_CHAT)
            assert turn.state == t.TurnState.COMPLETE and text_of(turn) == "You said: fresh"
            assert len(two.runner.processes) == 2
            # its new file is recorded; the switched session keeps its own
            [new_file] = fresh.iterdir()
            assert two.session(EMPTY).meta == {"pi": {"sessionFile": str(new_file)}}
            assert two.session().meta == {"pi": {"sessionFile": str(file)}}
            assert len([c for c in two.commands() if c["type"] == "switch_session"]) == 1
        finally:
            await two.close()
        assert process.returncode is not None

    run(scenario())


@pytest.mark.parametrize(("case", "reason"), [
    ("no-session", "runs with --no-session: there is no session file"),
    ("file-gone", "is gone"),
    ("switch-fails", "could not switch to the session file"),
])
def test_a_session_pi_cannot_continue_keeps_its_history_and_refuses_turns(
    tmp_path: Path, case: str, reason: str,
) -> None:
    store = MemoryStore()
    first = ("--no-session",) if case == "no-session" else ("--session-dir", str(tmp_path))
    again = {"no-session": ("--no-session",), "file-gone": (),
             "switch-fails": ("--switch-fails",)}[case]

    async def scenario() -> None:
        file, stored = await first_run(store, tmp_path / "one.log", *first)
        assert (file is None) == (case == "no-session")
        if file is not None and case == "file-gone":
            file.unlink()
        two = Run(store, tmp_path / "two.log", *again)
        try:
            await two.open(SESSION, create=False)
            meta = two.session().meta
            assert (meta is None) == (case == "no-session")
            for n in (2, 3):  # every turn in it ends at once, the same way
                turn = await two.play(f"t{n}", "again")
                assert turn.state == t.TurnState.ERROR and turn.error is not None
                assert turn.error.error_type == "NotResumable"
                assert reason in turn.error.message
                assert "history is kept" in turn.error.message
            assert [wire.dumps(turn) for turn in two.chat().turns[:1]] == stored
            assert two.runner.processes == ()
            # a process was tried only when there was a file to switch to, and is gone
            assert len(two.pids()) == (1 if case == "switch-fails" else 0)
            assert all(reaped(pid) for pid in two.pids())
            assert not any(c["type"] == "prompt" for c in two.commands())
        finally:
            await two.close()

    run(scenario())
