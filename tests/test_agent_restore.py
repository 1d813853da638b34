"""Issue 20: the agent layer over a restored store: sessions counted, resumed on use, not on
disposal, and each resumed at most once."""

from __future__ import annotations

from collections.abc import Callable

from agenthost_protocol import types as t
from agenthost_protocol.agent import Agent, Turn
from agenthost_protocol.agent.driver import AgentDriver
from agenthost_protocol.aio.server import HostServer
from agenthost_protocol.client import ResponseReceived
from agenthost_protocol.host import Host, MemoryStore

from ._aio_hosts import run
from ._aio_peer import ROOT, ws_peer

USER = t.MessageOrigin(kind=t.MessageKind.USER)


class Counting(Agent):
    provider = "counting"

    def __init__(self) -> None:
        self.resumed: list[str] = []

    async def resume_session(self, session: str, state: t.SessionState) -> str | None:
        self.resumed.append(session)
        return None

    async def turn(self, turn: Turn) -> None:
        await turn.stream(f"heard {turn.text}")


def done(turn_id: str) -> Callable[[t.SnapshotState], bool]:
    def check(state: t.SnapshotState) -> bool:
        return (isinstance(state, t.ChatState) and state.active_turn is None
                and bool(state.turns) and state.turns[-1].id == turn_id
                and state.turns[-1].state == t.TurnState.COMPLETE)
    return check


def clock() -> int:
    return 1_767_225_600_000


async def _host(store: MemoryStore, agent: Counting) -> tuple[HostServer, AgentDriver, object]:
    from agenthost_protocol.aio.websocket import serve_websocket

    host = Host(clock=clock, store=store, root=t.RootState(agents=(agent.info(),),
                                                           active_sessions=0))
    server = HostServer(host)
    driver = AgentDriver(agent, host, server.flush)
    server.handler = driver.handle
    endpoint = await serve_websocket(server, "127.0.0.1", 0, ping_interval=None)
    return server, driver, endpoint


def test_stored_sessions_are_counted_resumed_once_on_use_and_not_for_disposal() -> None:
    async def main() -> None:
        store = MemoryStore()
        first = Counting()
        server, driver, endpoint = await _host(store, first)
        peer, _ = await ws_peer(endpoint.url, "a")  # type: ignore[attr-defined]
        await peer.initialize([ROOT])
        for n in range(3):
            answer = await peer.request("createSession", t.CreateSessionParams(
                channel=f"ahp-session:/s{n}"))
            assert isinstance(answer, ResponseReceived)
        await driver.close()
        await server.close()
        await endpoint.close()  # type: ignore[attr-defined]

        again = Counting()
        server, driver, endpoint = await _host(store, again)
        root = server.host.state(ROOT)
        assert isinstance(root, t.RootState) and root.active_sessions == 3
        peer, _ = await ws_peer(endpoint.url, "b")  # type: ignore[attr-defined]
        await peer.initialize([ROOT])
        await peer.subscribe("ahp-session:/s0")
        await peer.subscribe("ahp-chat:/s0")
        for turn_id in ("t1", "t2"):
            await peer.dispatch("ahp-chat:/s0", t.ChatTurnStartedAction(
                turn_id=turn_id, started_at="2026-01-01T00:00:00.000Z",
                message=t.Message(text=turn_id, origin=USER)))
            await peer.until_state("ahp-chat:/s0", done(turn_id))
        answer = await peer.request("disposeSession", t.DisposeSessionParams(
            channel="ahp-session:/s1"))
        assert isinstance(answer, ResponseReceived)
        await peer.request("ping", t.PingParams())
        assert again.resumed == ["ahp-session:/s0"]
        root = server.host.state(ROOT)
        assert isinstance(root, t.RootState) and root.active_sessions == 2
        await driver.close()
        await server.close()
        await endpoint.close()  # type: ignore[attr-defined]

    run(main())
