"""Users kept apart over real loopback WebSockets: the demo agent served by
``build_agent_server(store=SQLiteStore(...), authorize=OwnershipPolicy(...))``,
each connection's principal the user its bearer token names
(``serve_websocket(authenticate=...)``), the
main refusals seen by the library's own client, and ownership kept across a
restart of the host on the same store file.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import attrs
import pytest

from agenthost_protocol import methods
from agenthost_protocol import types as t
from agenthost_protocol.agent import Agent, Turn, build_agent_server
from agenthost_protocol.agent.demo import DemoAgent
from agenthost_protocol.agent.hosting import ServeOptions
from agenthost_protocol.aio import HostServer
from agenthost_protocol.aio.client import RequestError, connect
from agenthost_protocol.aio.websocket import serve_websocket
from agenthost_protocol.host import OwnershipPolicy
from agenthost_protocol.sqlite_store import SQLiteStore
from agenthost_protocol.types.error_codes import AhpErrorCode

from ._aio_hosts import TIMEOUT, clock, run

TOKENS = {"alice-token": "alice", "bob-token": "bob", "root-token": "root"}
POLICY = OwnershipPolicy(is_admin=lambda principal: principal == "root")


@contextlib.asynccontextmanager
async def users_host(store_path: Path | None,
                     agent: Agent | None = None) -> AsyncIterator[tuple[str, HostServer]]:
    """The demo agent (or ``agent``) on a loopback port; ``Authorization: Bearer <token>``
    names the user (``authenticate``), and an unknown token is refused before the
    upgrade."""
    store = None if store_path is None else SQLiteStore(store_path)
    server, service = build_agent_server(agent or DemoAgent(step_delay=0.0), ServeOptions(),
                                         clock, store=store, authorize=POLICY)
    await service.start()

    def authenticate(scope: Mapping[str, object]) -> str | None:
        headers = scope["headers"]
        assert isinstance(headers, list)
        for name, value in headers:
            if name == b"authorization":
                return TOKENS.get(bytes(value).decode().removeprefix("Bearer "))
        return None

    endpoint = await serve_websocket(server, "127.0.0.1", 0, ping_interval=None,
                                     authenticate=authenticate)
    try:
        yield endpoint.url, server
    finally:
        await endpoint.close()
        await service.close()
        if store is not None:
            store.close()


async def refused(call: object) -> int:
    assert asyncio.iscoroutine(call)
    with pytest.raises(RequestError) as error:
        await asyncio.wait_for(call, TIMEOUT)
    return int(error.value.code)


def test_two_users_over_loopback_and_after_a_restart(tmp_path: Path) -> None:
    store = tmp_path / "users.sqlite3"

    async def body() -> None:
        async with users_host(store) as (url, server), \
            connect(url, token="alice-token", reconnect=False) as alice, \
            connect(url, token="bob-token", reconnect=False) as bob:
            await alice.initialize(["ahp-root://"])
            await bob.initialize(["ahp-root://"])
            mine = await alice.create_session("ahp-session:/alice-1", provider="demo")
            theirs = await bob.create_session("ahp-session:/bob-1", provider="demo")
            await alice.subscribe(mine)
            await alice.wait_for_state(mine, lambda s: isinstance(s, t.SessionState)
                                       and s.lifecycle == t.SessionLifecycle.READY,
                                       timeout=TIMEOUT)
            chat = server.host.state(mine).default_chat  # type: ignore[union-attr]
            assert chat is not None
            ref = server.host.content.put(b"alice's output", "text/plain", owner=chat)
            server.flush()
            assert [s.resource for s in (await alice.list_sessions()).items] == [mine]
            assert [s.resource for s in (await bob.list_sessions()).items] == [theirs]
            not_found = int(AhpErrorCode.NOT_FOUND)
            assert await refused(bob.subscribe(mine)) == not_found
            assert await refused(bob.subscribe(chat)) == not_found
            assert await refused(bob.dispose_session(mine)) == int(
                AhpErrorCode.SESSION_NOT_FOUND)
            assert await refused(bob.create_chat(mine, source=t.ForkChatSource(
                chat=chat, turn_id="none"))) == int(AhpErrorCode.SESSION_NOT_FOUND)
            assert await refused(bob.dispose_chat(chat)) == not_found
            assert await refused(bob.dispose_chat("ahp-chat:/nobody")) == not_found
            assert await refused(bob.request(methods.FETCH_TURNS, t.FetchTurnsParams(
                channel=chat))) == not_found
            assert await refused(bob.request(methods.RESOURCE_READ, t.ResourceReadParams(
                uri=ref.uri))) == int(AhpErrorCode.CONTENT_NOT_FOUND)
            read = await alice.request(methods.RESOURCE_READ,
                                       t.ResourceReadParams(uri=ref.uri))
            assert read.data == "alice's output"
            assert server.host.has_channel(mine)
        # the same store, a new host: who owns what is still known
        async with users_host(store) as (url, server), \
            connect(url, token="alice-token", reconnect=False) as alice, \
            connect(url, token="bob-token", reconnect=False) as bob, \
            connect(url, token="root-token", reconnect=False) as admin:
            for client in (alice, bob, admin):
                await client.initialize()
            assert [s.resource for s in (await alice.list_sessions()).items] == [
                "ahp-session:/alice-1"]
            assert [s.resource for s in (await bob.list_sessions()).items] == [
                "ahp-session:/bob-1"]
            assert [s.resource for s in (await admin.list_sessions()).items] == [
                "ahp-session:/alice-1", "ahp-session:/bob-1"]
            assert await refused(bob.subscribe("ahp-session:/alice-1")) == int(
                AhpErrorCode.NOT_FOUND)
            await asyncio.wait_for(admin.subscribe("ahp-session:/alice-1"), TIMEOUT)
            root = await asyncio.wait_for(bob.subscribe("ahp-root://"), TIMEOUT)
            assert root is not None and isinstance(root.state, t.RootState)
            assert root.state.active_sessions == 1

    run(body(), timeout=60)


class Solo(Agent):
    """An agent with one chat a session: it refuses every createChat and disposeChat."""

    provider = "solo"

    def info(self) -> t.AgentInfo:
        return attrs.evolve(super().info(), capabilities=None)

    async def turn(self, turn: Turn) -> None:
        await turn.stream("ok")


def test_a_one_chat_agent_answers_a_foreign_chat_as_a_missing_one() -> None:
    async def body() -> None:
        async with users_host(None, Solo()) as (url, server), \
                connect(url, token="alice-token", reconnect=False) as alice, \
                connect(url, token="bob-token", reconnect=False) as bob:
            await alice.initialize()
            await bob.initialize()
            mine = await alice.create_session("ahp-session:/alice-solo", provider="solo")
            await alice.subscribe(mine)
            state = await alice.wait_for_state(mine, lambda s: isinstance(s, t.SessionState)
                                               and s.default_chat is not None,
                                               timeout=TIMEOUT)
            assert isinstance(state, t.SessionState) and state.default_chat is not None
            chat = state.default_chat
            # the agent's own refusal (one chat a session) comes after the existence check
            assert await refused(alice.dispose_chat(chat)) == -32602
            foreign = await refused(bob.dispose_chat(chat))
            missing = await refused(bob.dispose_chat("ahp-chat:/nobody"))
            assert foreign == missing == int(AhpErrorCode.NOT_FOUND)
            assert await refused(bob.create_chat(mine)) == await refused(
                bob.create_chat("ahp-session:/nobody")) == int(AhpErrorCode.SESSION_NOT_FOUND)
            assert server.host.has_channel(chat)

    run(body(), timeout=60)
