"""Issue 29, defect 8: a chat of any content opens, for any conforming client.

The chats are made through the protocol, as a token holder and an agent
would make them: user messages of 3.5 MB and more sent by a client, a
session title of several MB, markdown parts of several MB streamed by the
agent.  They are opened over a real WebSocket on loopback by the library's
``AsyncClient`` and by a raw client (``websockets`` and JSON-RPC by hand, no
view asked for): the snapshot is the newest turns that fit one message,
older turns page with ``fetchTurns``, and what the client holds then is what
the host holds.  Nothing is refused.
"""

from __future__ import annotations

import asyncio
import json
import resource
from typing import Any

from agenthost_protocol import methods, wire
from agenthost_protocol import types as t
from agenthost_protocol.aio import ServerLimits
from agenthost_protocol.aio.client import (
    AsyncClient,
    ConnectionLost,
    ReconnectPolicy,
    Resumed,
    connect,
)
from agenthost_protocol.host import Host, RequestReceived
from agenthost_protocol.host.bounds import PART_CUT_NOTE

from ._aio_hosts import DemoHost, Opener, clock, demo_host, next_of, run

SESSION = "ahp-session:/big"
CHAT = "ahp-chat:/big"
MB = 1000 * 1000
USER = t.MessageOrigin(kind=t.MessageKind.USER)
STARTED = "2026-01-01T00:00:00.000Z"
LIMIT = 16 * 1024 * 1024


def keep_from_agent(_demo: DemoHost, _event: object) -> bool:
    return True  # the test is the agent: the demo agent hears nothing


def add_chat(host: Host) -> None:
    host.add_channel(SESSION, t.SessionState(
        provider="demo", title="", status=t.SessionStatus.IDLE,
        lifecycle=t.SessionLifecycle.READY, active_clients=(), chats=()))
    host.add_chat(SESSION, CHAT)


async def until(condition: Any, timeout: float = 30.0) -> None:
    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0.01)
    await asyncio.wait_for(poll(), timeout)


def text_of(n: int, size: int, fill: str) -> str:
    head = f"[{n}] "
    return head + fill * (size - len(head))


async def add_turn(host: Host, client: AsyncClient, n: int, *, message: int,
                   reply: int) -> None:
    """A turn: the client sends a ``message``-byte user message, the agent streams
    a ``reply``-byte markdown part in 512 KB deltas and ends the turn."""
    turn = f"t{n}"
    await client.dispatch(CHAT, t.ChatTurnStartedAction(
        turn_id=turn, started_at=STARTED, message=t.Message(text=text_of(n, message, "m"),
                                                            origin=USER)))

    def started() -> bool:
        state = host.state(CHAT)
        return isinstance(state, t.ChatState) and state.active_turn is not None and (
            state.active_turn.id == turn)
    await until(started)
    if reply:
        part = f"{turn}.md"
        host.dispatch(CHAT, t.ChatResponsePartAction(
            turn_id=turn, part=t.MarkdownResponsePart(id=part, content="")))
        body = text_of(n, reply, "r")
        for at in range(0, len(body), 512 * 1000):
            host.dispatch(CHAT, t.ChatDeltaAction(turn_id=turn, part_id=part,
                                                  content=body[at : at + 512 * 1000]))
    host.dispatch(CHAT, t.ChatTurnCompleteAction(turn_id=turn, duration=1))


def host_chat(host: Host) -> t.ChatState:
    state = host.state(CHAT)
    assert isinstance(state, t.ChatState)
    return state


async def open_with_async_client(demo: DemoHost) -> None:
    """``AsyncClient`` with its default view: subscribed, paged to the first turn,
    equal to the host's chat."""
    held_turns = len(host_chat(demo.host).turns)
    async with connect(demo.url, reconnect=False) as client:
        await client.initialize()
        snapshot = await client.subscribe(CHAT)
        assert snapshot is not None and isinstance(snapshot.state, t.ChatState)
        assert len(wire.dumps(snapshot)) < LIMIT
        assert 0 < len(snapshot.state.turns) < held_turns
        assert snapshot.state.turns_next_cursor is not None
        pages = 0
        while await client.fetch_older_turns(CHAT):
            pages += 1
            assert pages <= held_turns
        held = client.connection.confirmed(CHAT)
        assert isinstance(held, t.ChatState) and held.turns_next_cursor is None
        assert wire.dumps(held) == wire.dumps(host_chat(demo.host))
        session = await client.subscribe(SESSION)
        assert session is not None and wire.dumps(session.state) == wire.dumps(
            demo.host.state(SESSION))


async def open_with_raw_client(demo: DemoHost) -> list[int]:
    """A plain ``websockets`` connection, JSON-RPC by hand, no view: the sizes of
    the messages it got.  Its turns, once paged, are the host's."""
    from websockets.asyncio.client import connect as ws_connect

    sizes: list[int] = []
    async with ws_connect(demo.url, max_size=LIMIT, ping_interval=None) as ws:
        ids = iter(range(1, 10_000))

        async def call(method: str, params: dict[str, Any]) -> tuple[Any, list[Any]]:
            number = next(ids)
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": number, "method": method,
                                      "params": params}))
            notes: list[Any] = []
            while True:
                raw = await asyncio.wait_for(ws.recv(), 30)
                sizes.append(len(raw))
                message = json.loads(raw)
                if message.get("id") == number:
                    assert "error" not in message, message["error"]
                    return message["result"], notes
                notes.append(message)

        await call("initialize", {"protocolVersions": ["0.7.0"], "clientId": "raw"})
        result, _ = await call("subscribe", {"channel": CHAT})
        state = result["snapshot"]["state"]
        turns: list[Any] = state["turns"]
        cursor = state.get("turnsNextCursor")
        assert turns and cursor is not None
        while cursor is not None:
            _, notes = await call("fetchTurns", {"channel": CHAT, "cursor": cursor})
            (loaded,) = [n["params"]["action"] for n in notes if n.get("method") == "action"]
            assert loaded["type"] == "chat/turnsLoaded"
            turns = loaded["turns"] + turns
            cursor = loaded.get("turnsNextCursor")
        assert turns == json.loads(wire.dumps(host_chat(demo.host)))["turns"]
    return sizes


def test_a_21_mb_chat_of_user_messages_opens() -> None:
    """Six 3.5 MB user messages: refused to ``AsyncClient`` before (21 MB in one answer)."""
    async def body() -> None:
        async with demo_host(intercept=keep_from_agent) as demo:
            add_chat(demo.host)
            async with connect(demo.url, reconnect=False) as maker:
                await maker.initialize()
                await maker.subscribe(CHAT)
                for n in range(6):
                    await add_turn(demo.host, maker, n, message=3_500_000, reply=0)
            chat = host_chat(demo.host)
            assert len(chat.turns) == 6 and len(wire.dumps(chat)) > 21 * MB
            # 3.5 MB is under the field limit: every message is held whole
            assert all(len(turn.message.text) == 3_500_000 and not turn.message.attachments
                       for turn in chat.turns)
            await open_with_async_client(demo)
            sizes = await open_with_raw_client(demo)
            assert max(sizes) < LIMIT

    run(body(), 120)


def test_a_70_mb_chat_with_huge_fields_opens() -> None:
    """Long messages and replies, a message and a reply over the field limit and a
    5 MB title: 70 MB and more; every field over the limit is referenced or cut."""
    async def body() -> None:
        async with demo_host(intercept=keep_from_agent) as demo:
            host = demo.host
            add_chat(host)
            async with connect(demo.url, reconnect=False) as maker:
                await maker.initialize()
                await maker.subscribe(SESSION)
                await maker.subscribe(CHAT)
                for n in range(10):
                    await add_turn(host, maker, n, message=3_500_000, reply=3_000_000)
                # over the field limit (a quarter of 16 MiB): by reference, and cut
                await add_turn(host, maker, 10, message=9_000_000, reply=6_000_000)
                await maker.dispatch(SESSION, t.SessionTitleChangedAction(
                    title="T" * (5 * MB)))
                await until(lambda: isinstance(s := host.state(SESSION), t.SessionState)
                            and s.title.startswith("T"))
            await open_with_async_client(demo)
            sizes = await open_with_raw_client(demo)
            assert max(sizes) < LIMIT
            chat = host_chat(host)
            assert len(chat.turns) == 11
            assert sum(len(turn.message.text) for turn in chat.turns[:10]) + sum(
                len(p.content) for turn in chat.turns[:10] for p in turn.response_parts
                if isinstance(p, t.MarkdownResponsePart)) >= 65 * MB
            # the huge message: a preview that says so, the whole text by reference
            big = chat.turns[10].message
            assert len(big.text) < 20_000 and "the whole text is the attachment" in big.text
            (attachment,) = big.attachments or ()
            assert isinstance(attachment, t.MessageResourceAttachment)
            assert attachment.size_hint is not None and attachment.size_hint == 9 * MB
            # the huge reply: cut with the marker
            (part,) = chat.turns[10].response_parts
            assert isinstance(part, t.MarkdownResponsePart)
            assert part.content.endswith(PART_CUT_NOTE) and len(part.content) < 6 * MB
            # the title: cut with the marker
            session = host.state(SESSION)
            assert isinstance(session, t.SessionState)
            assert len(session.title) <= 16 * 1024 and "title cut" in session.title
            async with connect(demo.url, reconnect=False) as reader:
                await reader.initialize()
                read = await reader.request(methods.RESOURCE_READ,
                                            t.ResourceReadParams(uri=attachment.uri))
                assert isinstance(read, t.ResourceReadResult)
                assert read.data.startswith(text_of(10, 1000, "m"))
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
            print(f"\npeak RSS of the test process (host, maker, readers): {rss} MiB")

    run(body(), 300)


def test_a_reconnect_whose_replay_would_not_fit_gets_a_trimmed_snapshot() -> None:
    """Under an 8 MiB limit, five 2 MB messages sent while a client is away make a
    10 MB replay: before, the host closed the connection at every reconnect."""
    async def body() -> None:
        limits = ServerLimits(max_message_size=8 * 1024 * 1024)
        async with demo_host(intercept=keep_from_agent, limits=limits) as demo:
            add_chat(demo.host)
            opener = Opener(demo.url)
            policy = ReconnectPolicy(initial_delay=0.01, max_delay=0.05)
            async with AsyncClient(opener, reconnect=policy, clock=clock) as alice, \
                    connect(demo.url, reconnect=False) as maker:
                await alice.initialize()
                await alice.subscribe(CHAT)
                await maker.initialize()
                await maker.subscribe(CHAT)
                events = alice.events()
                opener.gate.clear()  # alice stays away ...
                opener.current.abort()
                await next_of(events, ConnectionLost)
                for n in range(5):  # ... while 10 MB of messages are sent
                    await add_turn(demo.host, maker, n, message=2_000_000, reply=0)
                assert all(not turn.message.attachments for turn in host_chat(demo.host).turns)
                opener.gate.set()
                resumed = await next_of(events, Resumed, timeout=30)
                assert resumed.outcome.kind is t.ReconnectResultType.SNAPSHOT
                state = alice.state(CHAT)
                assert isinstance(state, t.ChatState) and 0 < len(state.turns) < 5
                while await alice.fetch_older_turns(CHAT):
                    pass
                held = alice.connection.confirmed(CHAT)
                assert wire.dumps(held) == wire.dumps(host_chat(demo.host))
                assert alice.is_open

    run(body(), 120)


def test_a_page_of_older_turns_too_big_for_one_message_goes_in_several() -> None:
    """The embedder answers ``fetchTurns`` with 21 MB of older turns (its own
    storage): before, ``chat/turnsLoaded`` was refused as over the limit."""
    older = tuple(
        t.Turn(id=f"old{n}", message=t.Message(text=text_of(n, 3_500_000, "o"), origin=USER),
               response_parts=(), state=t.TurnState.COMPLETE)
        for n in range(6)
    )

    def embedder(demo: DemoHost, event: object) -> bool:
        if isinstance(event, RequestReceived) and event.method == "fetchTurns":
            demo.host.fetch_turns(event, older)
        return True

    async def body() -> None:
        async with demo_host(intercept=embedder) as demo:
            host = demo.host
            add_chat(host)
            host.dispatch(CHAT, t.ChatTurnsLoadedAction(turns=(), turns_next_cursor="older"))
            host.dispatch(CHAT, t.ChatTurnStartedAction(
                turn_id="new", started_at=STARTED, message=t.Message(text="hi", origin=USER)))
            host.dispatch(CHAT, t.ChatTurnCompleteAction(turn_id="new", duration=1))
            async with connect(demo.url, reconnect=False) as client:
                await client.initialize()
                snapshot = await client.subscribe(CHAT)
                assert snapshot is not None and isinstance(snapshot.state, t.ChatState)
                assert snapshot.state.turns_next_cursor == "older"
                assert await client.fetch_older_turns(CHAT)
                assert not await client.fetch_older_turns(CHAT)
                held = client.connection.confirmed(CHAT)
                assert isinstance(held, t.ChatState)
                assert [turn.id for turn in held.turns] == [*(f"old{n}" for n in range(6)),
                                                            "new"]
                assert wire.dumps(held) == wire.dumps(host_chat(host))

    run(body(), 120)
