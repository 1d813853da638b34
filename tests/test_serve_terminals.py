"""``serve``'s terminals end to end: a serve subprocess on stdio, a real pty, its shutdown."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import pytest

from agenthost_protocol import types as t
from agenthost_protocol.client import RequestFailed, ResponseReceived

from ._aio_peer import ROOT, spawn, stdio_peer, stop
from ._terminals import alive

pytestmark = pytest.mark.skipif(os.name != "posix", reason="terminals need a POSIX pty")

URI = "ahp-terminal:/t"


def run(coro: object) -> None:
    asyncio.run(asyncio.wait_for(coro, 60))  # type: ignore[arg-type]


def _text(state: t.SnapshotState) -> str:
    assert isinstance(state, t.TerminalState)
    return "".join(p.value if isinstance(p, t.TerminalUnclassifiedPart) else
                   p.output if isinstance(p, t.TerminalCommandPart) else ""
                   for p in state.content)


def test_serve_runs_terminals_and_leaves_no_process_at_shutdown(tmp_path: Path) -> None:
    async def main() -> None:
        async with spawn(["--stdio", "--shell", "/bin/sh"],
                         tmp_path / "serve.err", stdin=asyncio.subprocess.PIPE) as proc:
            peer = stdio_peer(proc, "stdio-client")
            await peer.initialize([ROOT])
            answer = await peer.request("createTerminal", t.CreateTerminalParams(
                channel=URI, claim=t.TerminalClientClaim(client_id="stdio-client")))
            assert isinstance(answer, ResponseReceived), answer
            await peer.subscribe(URI)
            await peer.dispatch(URI, t.TerminalInputAction(
                data="sleep 300 & echo SHELL=$$ JOB=$!\n"))
            state = await peer.until_state(URI, lambda s: re.search(r"JOB=\d+\r", _text(s))
                                           is not None)
            pids = [int(n) for n in re.findall(r"(?:SHELL|JOB)=(\d+)", _text(state))]
            assert len(pids) == 2 and all(alive(pid) for pid in pids)
            assert await stop(proc) == 0
            assert [pid for pid in pids if alive(pid)] == []
        assert "Traceback" not in (tmp_path / "serve.err").read_text()

    run(main())


def test_serve_no_terminals_refuses_them(tmp_path: Path) -> None:
    async def main() -> None:
        async with spawn(["--stdio", "--no-store", "--no-terminals"],
                         tmp_path / "serve.err", stdin=asyncio.subprocess.PIPE) as proc:
            peer = stdio_peer(proc, "stdio-client")
            await peer.initialize([ROOT])
            answer = await peer.request("createTerminal", t.CreateTerminalParams(
                channel=URI, claim=t.TerminalClientClaim(client_id="stdio-client")))
            assert isinstance(answer, RequestFailed) and answer.error is not None
            assert answer.error.code == -32601
            assert await stop(proc) == 0

    run(main())
