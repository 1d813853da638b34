"""The asyncio client over real loopback sockets (and a real host subprocess for stdio).

Each test runs its own event loop (``asyncio.run``) under a time bound, with
the demo host in-process on an ephemeral port of 127.0.0.1 (see
``_aio_hosts``); the subprocess tests kill and reap what they spawn.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import signal
import sys
from pathlib import Path

import pytest

pytest.importorskip("websockets")

from agenthost_protocol import methods, wire
from agenthost_protocol import types as t
from agenthost_protocol.agent.demo import APPROVED_TEXT
from agenthost_protocol.aio.client import (
    ActionDropped,
    ActionRejected,
    AsyncClient,
    ClientTimeout,
    Closed,
    ConnectError,
    ConnectionClosedError,
    ConnectionLost,
    EventsDropped,
    HostProtocolError,
    ProtocolViolation,
    Reconnecting,
    ReconnectPolicy,
    Reinitialized,
    RequestError,
    RequestTimeout,
    Resumed,
    SubprocessTransport,
    VersionMismatch,
    connect,
    connect_stdio,
)
from agenthost_protocol.client import ActionReceived, ServerRequestReceived
from agenthost_protocol.errors import LocalProtocolError
from agenthost_protocol.host import ErrorReceived
from agenthost_protocol.host import ResponseReceived as HostResponse
from agenthost_protocol.methods import ServerRequestResult
from agenthost_protocol.reconciler import ReceiveKind
from agenthost_protocol.types import ReconnectResultType
from agenthost_protocol.versions import SUPPORTED_PROTOCOL_VERSIONS

from ._aio_hosts import (
    ROOT,
    TIMEOUT,
    DemoHost,
    Opener,
    approve,
    awaiting_confirmation,
    clock,
    demo_host,
    free_port,
    next_of,
    run,
    scripted_host,
    serve_stdio_command,
    silent_host,
    streaming,
    turn_started,
    turns_done,
)
from ._aio_peer import child_env

FAST = ReconnectPolicy(initial_delay=0.01, max_delay=0.05, rng=random.Random(7),
                       connect_timeout=TIMEOUT, handshake_timeout=TIMEOUT)


async def open_chat(client: AsyncClient) -> tuple[str, str]:
    """Initialize, create a demo session, subscribe to it and its chat."""
    await client.initialize([ROOT])
    session = await client.create_session(provider="demo")
    snapshot = await client.subscribe(session)
    assert snapshot is not None and isinstance(snapshot.state, t.SessionState)
    chat = snapshot.state.default_chat
    assert chat is not None
    await client.subscribe(chat)
    return session, chat


def same_as_host(demo: DemoHost, client: AsyncClient, channel: str) -> bool:
    return wire.dumps(client.confirmed(channel)) == wire.dumps(demo.host.state(channel))


# -- requests ----------------------------------------------------------------------------


def test_typed_requests_results_and_host_errors() -> None:
    async def body() -> None:
        async with demo_host() as demo, connect(demo.url, clock=clock) as client:
            before = client.protocol_version
            await client.request(methods.PING, t.PingParams())  # allowed before initialize
            result = await client.initialize([ROOT])
            assert before is None
            assert isinstance(result, t.InitializeResult)
            assert result.protocol_version == client.protocol_version == "0.7.0"
            assert isinstance(client.state(ROOT), t.RootState)

            listing = await client.request(methods.LIST_SESSIONS, t.ListSessionsParams())
            assert isinstance(listing, t.ListSessionsResult) and listing.items == ()

            session = await client.create_session(provider="demo")
            assert session.startswith("ahp-session:/")
            snapshot = await client.subscribe(session)
            assert snapshot is not None and snapshot.resource == session
            assert isinstance(snapshot.state, t.SessionState)
            assert snapshot.state.lifecycle == t.SessionLifecycle.READY
            assert [s.resource for s in (await client.list_sessions()).items] == [session]
            chat = await client.create_chat(session)
            assert chat.startswith("ahp-chat:/") and chat in {
                c.resource for c in t_session(client.state(session)).chats}
            await client.ping()

            # the host's errors, with their AHP codes
            with pytest.raises(RequestError) as refused:
                await client.create_session(provider="nobody")
            assert refused.value.code == t.AhpErrorCode.PROVIDER_NOT_FOUND
            assert refused.value.method == "createSession"
            with pytest.raises(RequestError) as missing:
                await client.subscribe("ahp-session:/nowhere")
            assert missing.value.code == t.AhpErrorCode.NOT_FOUND
            with pytest.raises(RequestError) as exists:
                await client.create_session(session, provider="demo")
            assert exists.value.code == t.AhpErrorCode.SESSION_ALREADY_EXISTS

            # the caller's mistakes: the sans-I/O layer's error, nothing sent
            with pytest.raises(LocalProtocolError):
                await client.dispatch("ahp-session:/nowhere",
                                      t.SessionTitleChangedAction(title="x"))
            with pytest.raises(LocalProtocolError):
                await client.subscribe(session)  # twice

            # a dispatched action is optimistic at once, then echoed
            handle = await client.dispatch(session, t.SessionTitleChangedAction(title="Mine"))
            assert t_session(client.state(session)).title == "Mine"
            echo = await handle.wait(TIMEOUT)
            assert echo.kind is ReceiveKind.ECHO and handle.done
            assert same_as_host(demo, client, session)
            assert await client.subscribe(chat) is not None and client.is_tracked(chat)
            assert await client.unsubscribe(chat) == ()
            assert not client.is_tracked(chat)
        assert client.closed and client.close_error is None

    run(body())


def t_session(state: t.SnapshotState) -> t.SessionState:
    assert isinstance(state, t.SessionState)
    return state


def test_request_timeout_and_connect_errors() -> None:
    async def body() -> None:
        async with silent_host() as url, connect(url, request_timeout=0.2) as client:
            with pytest.raises(RequestTimeout) as slow:
                await client.initialize()
            assert slow.value.method == "initialize" and slow.value.timeout == 0.2
            assert isinstance(slow.value, TimeoutError)
            with pytest.raises(RequestTimeout):
                await client.ping(timeout=0.05)
        port = free_port()
        with pytest.raises(ConnectError) as refused:
            await connect(f"ws://127.0.0.1:{port}")
        assert f"127.0.0.1:{port}: connection refused" in str(refused.value)
        with pytest.raises(ConnectError, match="not a WebSocket URL"):
            async with connect("http://example.invalid/"):
                pass

    run(body())


def test_version_mismatch() -> None:
    async def body() -> None:
        async with demo_host(supported_versions=["0.1.0"]) as demo:
            client = await connect(demo.url, reconnect=False)
            try:
                with pytest.raises(VersionMismatch) as mismatch:
                    await client.initialize()
                assert mismatch.value.code == -32005
                assert mismatch.value.supported_versions == ("0.1.0",)
                assert mismatch.value.offered == SUPPORTED_PROTOCOL_VERSIONS
                assert "0.1.0" in str(mismatch.value)
                # the host closes the connection after -32005: so does the client
                await asyncio.wait_for(_until(lambda: client.closed), TIMEOUT)
                with pytest.raises(ConnectionClosedError):
                    await client.ping()
            finally:
                await client.close()

    run(body())


async def _until(predicate: object) -> None:
    assert callable(predicate)
    while not predicate():
        await asyncio.sleep(0.01)


def test_a_host_that_breaks_the_protocol_is_dropped() -> None:
    def answer(message: dict[str, object]) -> list[str]:
        if message.get("method") == "initialize":
            # a version the client never offered
            return [json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {
                "protocolVersion": "9.9.9", "serverSeq": 0, "snapshots": []}})]
        return ["this is not JSON"]

    async def body() -> None:
        async with scripted_host(answer) as url:
            async with connect(url, reconnect=False) as client:
                events = client.events()
                with pytest.raises(HostProtocolError, match=r"9\.9\.9"):
                    await client.initialize()
                violation = await next_of(events, ProtocolViolation)
                assert violation.fatal
                closed = await next_of(events, Closed)
                assert "broke the protocol" in closed.reason and client.closed
            # an answer that is not even JSON
            async with connect(url, reconnect=False) as client:
                with pytest.raises(HostProtocolError):
                    await client.ping()
                assert client.closed

    run(body())


def test_the_docs_example_runs_against_the_demo_host(capsys: pytest.CaptureFixture[str]) -> None:
    docs = Path(__file__).parent.parent / "docs" / "client.md"
    (block,) = re.findall(r"```py\n(.*?)```", docs.read_text(), re.S)
    namespace: dict[str, object] = {}
    exec(compile(block, "docs/client.md", "exec"), namespace)
    main = namespace["main"]
    assert callable(main)

    async def body() -> None:
        async with demo_host() as demo:
            await main(demo.url)
            (chat,) = [c for c in demo.host.channels if c.startswith("ahp-chat:")]
            state = demo.host.state(chat)
            assert isinstance(state, t.ChatState)
            assert state.turns[0].state == t.TurnState.COMPLETE

    run(body())
    assert capsys.readouterr().out == "[]\n"


# -- events -------------------------------------------------------------------------------


def test_events_stream_a_turn_and_a_slow_consumer_drops_the_oldest() -> None:
    async def body() -> None:
        async with demo_host() as demo, connect(demo.url, clock=clock) as client:
            _, chat = await open_chat(client)
            everything = client.events()
            tiny = client.events(buffer=3)
            await client.dispatch(chat, turn_started())
            await client.wait_for_state(chat, awaiting_confirmation, timeout=TIMEOUT)
            await client.dispatch(chat, approve())
            await client.wait_for_state(chat, turns_done(1), confirmed=True, timeout=TIMEOUT)
            assert same_as_host(demo, client, chat)

            seen: list[object] = []
            while everything._buffer:
                seen.append(await everything.next(0))
            received = [e for e in seen if isinstance(e, ActionReceived)]
            assert len(received) > 10
            kinds = [e.received.envelope.action.type for e in received if e.channel == chat]
            assert kinds[0] == t.ActionType.CHAT_TURN_STARTED
            assert t.ActionType.CHAT_DELTA in kinds and t.ActionType.CHAT_REASONING in kinds
            assert kinds[-1] == t.ActionType.CHAT_TURN_COMPLETE
            assert everything.dropped == 0

            first = await tiny.next(0)
            assert isinstance(first, EventsDropped) and first.count == tiny.dropped
            assert first.count == len(seen) - 3
            assert [await tiny.next(0) for _ in range(3)] == seen[-3:]
            with pytest.raises(ClientTimeout):
                await tiny.next(0.01)
            tiny.close()
            assert await tiny.next() is None
        # the client closed: every stream ends with Closed
        final = await everything.next(0)
        assert isinstance(final, Closed) and final.error is None
        assert await everything.next() is None
        assert [e async for e in client.events()] == [Closed(reason=client.close_reason)]

    run(body())


def test_two_clients_on_one_chat_converge() -> None:
    async def body() -> None:
        async with demo_host(step_delay=0.002) as demo, \
                connect(demo.url, clock=clock) as alice, connect(demo.url, clock=clock) as bob:
            session, chat = await open_chat(alice)
            await bob.initialize([ROOT, session, chat])
            bob_events = bob.events()
            await alice.dispatch(chat, turn_started("t1", "two of us"))
            # bob sees alice's turn and confirms the tool call
            await bob.wait_for_state(chat, awaiting_confirmation, timeout=TIMEOUT)
            handle = await bob.dispatch(chat, approve("t1"))
            assert (await handle.wait(TIMEOUT)).kind is ReceiveKind.ECHO
            for client in (alice, bob):
                await client.wait_for_state(chat, turns_done(1), confirmed=True,
                                            timeout=TIMEOUT)
            for channel in (session, chat, ROOT):
                assert same_as_host(demo, alice, channel) and same_as_host(demo, bob, channel)
            state = alice.state(chat)
            assert isinstance(state, t.ChatState) and state.turns[0].state == t.TurnState.COMPLETE
            parts = [p for p in state.turns[0].response_parts
                     if isinstance(p, t.MarkdownResponsePart)]
            assert parts[-1].content == APPROVED_TEXT
            # alice's actions reach bob as foreign ones
            event = await next_of(bob_events, ActionReceived)
            assert event.received.kind is ReceiveKind.FOREIGN

            # a rejected action raises from its handle, and the optimistic state reverts
            rejected = await bob.dispatch(chat, approve("t1"))  # that call is long done
            with pytest.raises(ActionRejected) as why:
                await rejected.wait(TIMEOUT)
            assert why.value.rejection.channel == chat
            assert same_as_host(demo, bob, chat)

    run(body())


def test_server_requests_are_answered_with_or_without_a_handler() -> None:
    async def answer(event: ServerRequestReceived) -> ServerRequestResult:
        request = event.narrow(methods.RESOURCE_READ)
        assert request is not None
        if request.params.uri == "file:///missing":
            raise RequestError(event.method, t.JsonRpcError(code=t.AhpErrorCode.NOT_FOUND,
                                                            message="no such file"))
        return t.ResourceReadResult(data="hello", encoding=t.ContentEncoding.UTF_8)

    async def body() -> None:
        async with demo_host() as demo, connect(demo.url) as plain, \
                connect(demo.url, on_server_request=answer) as served:
            if True:  # one level, as the other tests
                await plain.initialize()
                await served.initialize()
                first, second = demo.host.connections
                for conn, uri in ((first, "file:///x"), (second, "file:///x"),
                                  (second, "file:///missing")):
                    conn.send_request(methods.RESOURCE_READ, t.ResourceReadParams(uri=uri))
                demo.server.flush()
                await asyncio.wait_for(_until(lambda: len(answers(demo)) == 3), TIMEOUT)
                errors = {e.connection: e.error.code for e in answers(demo)
                          if isinstance(e, ErrorReceived)}
                results = [e for e in answers(demo) if isinstance(e, HostResponse)]
                assert errors == {first: t.JsonRpcErrorCode.METHOD_NOT_FOUND,
                                  second: t.AhpErrorCode.NOT_FOUND}
                assert [r.result_for(methods.RESOURCE_READ).data for r in results] == ["hello"]

    run(body())


def answers(demo: DemoHost) -> list[object]:
    return [e for e in demo.events if isinstance(e, (ErrorReceived, HostResponse))]


# -- the reconnect supervisor ----------------------------------------------------------------


def test_backoff_grows_exponentially_with_bounded_jitter() -> None:
    exact = ReconnectPolicy(initial_delay=0.5, max_delay=4.0, jitter=0.0)
    assert [exact.delay(n) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert exact.delay(10_000) == 4.0  # no overflow, however long it tries
    jittery = ReconnectPolicy(initial_delay=1.0, max_delay=8.0, jitter=0.5,
                              rng=random.Random(42))
    delays = [jittery.delay(n) for n in range(1, 6)]
    for n, delay in enumerate(delays, start=1):
        base = min(8.0, 2.0 ** (n - 1))
        assert base / 2 < delay <= base
    again = ReconnectPolicy(initial_delay=1.0, max_delay=8.0, jitter=0.5, rng=random.Random(42))
    assert [again.delay(n) for n in range(1, 6)] == delays  # the injected RNG decides
    for bad in ({"jitter": 2.0}, {"multiplier": 0.5}, {"max_attempts": 0},
                {"initial_delay": 5.0, "max_delay": 1.0}):
        with pytest.raises(ValueError):
            ReconnectPolicy(**bad)


def test_a_dropped_socket_mid_stream_is_resumed_by_replay() -> None:
    async def body() -> None:
        async with demo_host(step_delay=0.01) as demo:
            opener = Opener(demo.url)
            async with AsyncClient(opener, reconnect=FAST, clock=clock) as client:
                _, chat = await open_chat(client)
                events = client.events()
                await client.dispatch(chat, turn_started())
                await client.wait_for_state(chat, streaming, timeout=TIMEOUT)
                opener.current.abort()
                seen: list[object] = []
                resumed = await next_of(events, Resumed, seen=seen)  # type: ignore[arg-type]
                lost = [e for e in seen if isinstance(e, ConnectionLost)]
                assert len(lost) == 1 and lost[0].will_retry
                assert [e.attempt for e in seen if isinstance(e, Reconnecting)] == [1]
                assert resumed.outcome.kind is ReconnectResultType.REPLAY
                assert resumed.outcome.dropped == () and resumed.attempts == 1
                assert opener.attempts == 2 and client.is_open
                # the stream goes on where it was
                await client.wait_for_state(chat, awaiting_confirmation, timeout=TIMEOUT)
                await client.dispatch(chat, approve())
                await client.wait_for_state(chat, turns_done(1), confirmed=True,
                                            timeout=TIMEOUT)
                assert same_as_host(demo, client, chat)

    run(body())


def test_a_reconnect_after_the_replay_window_gets_snapshots() -> None:
    async def body() -> None:
        async with demo_host(replay_window=3) as demo, connect(demo.url, clock=clock) as bob:
            opener = Opener(demo.url)
            async with AsyncClient(opener, reconnect=FAST, clock=clock) as alice:
                session, _ = await open_chat(alice)
                await bob.initialize([session])
                events = alice.events()
                opener.gate.clear()  # alice stays away ...
                opener.current.abort()
                await next_of(events, ConnectionLost)
                for n in range(6):  # ... while more happens than the host replays
                    await bob.dispatch(session, t.SessionTitleChangedAction(title=f"T{n}"))
                await bob.wait_for_state(session, lambda s: t_session(s).title == "T5",
                                         confirmed=True, timeout=TIMEOUT)
                opener.gate.set()
                resumed = await next_of(events, Resumed)
                assert resumed.outcome.kind is ReconnectResultType.SNAPSHOT
                assert t_session(alice.state(session)).title == "T5"
                for channel in alice.connection.reconciler.channels:
                    assert same_as_host(demo, alice, channel)

    run(body())


def test_dropped_pending_actions_are_reported_and_resent_on_request() -> None:
    async def body() -> None:
        async with demo_host() as demo:
            opener = Opener(demo.url)
            async with AsyncClient(opener, reconnect=FAST, clock=clock) as client:
                session, _ = await open_chat(client)
                events = client.events()
                action = t.SessionTitleChangedAction(title="lost in transit")
                opener.current.holding = True  # the host will never see it
                handle = await client.dispatch(session, action)
                assert t_session(client.state(session)).title == "lost in transit"
                opener.current.abort()
                resumed = await next_of(events, Resumed)
                assert [p.action for p in resumed.outcome.dropped] == [action]
                assert client.dropped_actions == resumed.outcome.dropped
                with pytest.raises(ActionDropped):
                    await handle.wait(TIMEOUT)
                assert t_session(client.state(session)).title != "lost in transit"

                (again,) = await client.resend_dropped()
                assert again.client_seq > handle.client_seq
                assert (await again.wait(TIMEOUT)).kind is ReceiveKind.ECHO
                assert client.dropped_actions == ()
                host_state = demo.host.state(session)
                assert host_state is not None and t_session(host_state).title == "lost in transit"
                assert same_as_host(demo, client, session)

            # or at once, by policy
            auto = ReconnectPolicy(initial_delay=0.01, resend_dropped=True)
            opener = Opener(demo.url)
            async with AsyncClient(opener, reconnect=auto, clock=clock) as client:
                await client.initialize([session])
                opener.current.holding = True
                await client.dispatch(session, t.SessionTitleChangedAction(title="resent"))
                opener.current.abort()
                await client.wait_for_state(session, lambda s: t_session(s).title == "resent",
                                            confirmed=True, timeout=TIMEOUT)
                assert client.dropped_actions == ()

    run(body())


def test_a_host_that_forgot_the_client_gets_a_fresh_initialize() -> None:
    async def body() -> None:
        async with demo_host(remembered_clients=0) as demo:
            opener = Opener(demo.url)
            async with AsyncClient(opener, reconnect=FAST, clock=clock) as client:
                session, chat = await open_chat(client)
                events = client.events()
                opener.current.holding = True
                handle = await client.dispatch(session, t.SessionTitleChangedAction(title="x"))
                opener.current.abort()
                fresh = await next_of(events, Reinitialized)
                assert "reconnect refused" in fresh.reason and "-32602" in fresh.reason
                assert [p.client_seq for p in fresh.dropped] == [handle.client_seq]
                assert fresh.removed == () and fresh.attempts == 1
                assert client.dropped_actions == fresh.dropped
                with pytest.raises(ActionDropped):
                    await handle.wait(TIMEOUT)
                # every channel is tracked again, as the host has it
                assert set(client.connection.reconciler.channels) == {ROOT, session, chat}
                for channel in (ROOT, session, chat):
                    assert same_as_host(demo, client, channel)
                (again,) = await client.resend_dropped()
                await again.wait(TIMEOUT)

    run(body())


def test_the_supervisor_gives_up_after_max_attempts() -> None:
    async def body() -> None:
        policy = ReconnectPolicy(initial_delay=0.01, max_delay=0.02, max_attempts=2)
        async with demo_host() as demo:
            client = await connect(demo.url, reconnect=policy)
            await client.initialize([ROOT])
            events = client.events()
        try:  # the host is gone for good
            seen: list[object] = []
            closed = await next_of(events, Closed, seen=seen)  # type: ignore[arg-type]
            assert [type(e) for e in seen] == [ConnectionLost, Reconnecting, Reconnecting]
            attempts = [e for e in seen if isinstance(e, Reconnecting)]
            assert attempts[1].last_error is not None
            assert isinstance(closed.error, ConnectionClosedError)
            assert "gave up after 2 reconnect attempts" in closed.reason
            assert client.closed and client.close_error is closed.error
            with pytest.raises(ConnectionClosedError):
                await client.ping()
            with pytest.raises(ConnectionClosedError):
                await client.wait_for_state(ROOT, lambda s: True)
        finally:
            await client.close()

    run(body())


def test_requests_wait_for_the_reconnect_within_their_timeout() -> None:
    async def body() -> None:
        async with demo_host() as demo:
            opener = Opener(demo.url)
            async with AsyncClient(opener, reconnect=FAST) as client:
                await client.initialize([ROOT])
                opener.gate.clear()
                opener.current.abort()
                await asyncio.wait_for(_until(lambda: not client.is_open), TIMEOUT)
                with pytest.raises(RequestTimeout):
                    await client.list_sessions(timeout=0.05)
                waiting = asyncio.ensure_future(client.list_sessions(timeout=TIMEOUT))
                await asyncio.sleep(0.05)
                assert not waiting.done()
                opener.gate.set()
                assert (await waiting).items == ()

    run(body())


# -- stdio ----------------------------------------------------------------------------------

# A stand-in host for the process tests: answers initialize, then waits for its end.
FAKE_HOST = """
import json, sys, time
request = json.loads(sys.stdin.readline())
sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": {
    "protocolVersion": "0.7.0", "serverSeq": 0, "snapshots": []}}) + "\\n")
sys.stdout.flush()
time.sleep(60)
"""
STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"


def test_stdio_end_to_end(tmp_path: Path) -> None:
    async def body() -> None:
        with open(tmp_path / "host.log", "wb") as log:
            connecting = connect_stdio(serve_stdio_command("--step-delay", "0"), stderr=log,
                                       env=child_env(), request_timeout=TIMEOUT)
            async with connecting as client:
                transport = client.transport
                assert isinstance(transport, SubprocessTransport)
                process = transport.process
                result = await client.initialize([ROOT])
                assert result.server_info is not None
                assert result.server_info.name == "agenthost-protocol"
                session = await client.create_session()
                snapshot = await client.subscribe(session)
                assert snapshot is not None and isinstance(snapshot.state, t.SessionState)
                chat = snapshot.state.default_chat
                assert chat is not None
                await client.subscribe(chat)
                await client.dispatch(chat, turn_started("s1", "over a pipe"))
                await client.wait_for_state(chat, awaiting_confirmation, timeout=TIMEOUT)
                await client.dispatch(chat, approve("s1"))
                state = await client.wait_for_state(chat, turns_done(1), confirmed=True,
                                                    timeout=TIMEOUT)
                assert isinstance(state, t.ChatState)
                assert state.turns[0].state == t.TurnState.COMPLETE
        # closing the client ended the host process, which exited cleanly at end of input
        assert process.returncode == 0

    run(body(), timeout=40)


def test_a_stdio_process_never_outlives_its_client() -> None:
    async def body() -> None:
        # leaving the block by an exception: end of input, then SIGTERM ...
        with contextlib.suppress(RuntimeError):
            async with connect_stdio(["sleep", "60"], close_timeout=0.2) as client:
                transport = client.transport
                assert isinstance(transport, SubprocessTransport)
                raise RuntimeError("boom")
        assert isinstance(transport, SubprocessTransport)
        assert transport.process.returncode == -signal.SIGTERM
        # ... then SIGKILL for a process that ignores SIGTERM
        client = await connect_stdio([sys.executable, "-c", STUBBORN], close_timeout=0.2)
        transport = client.transport
        assert isinstance(transport, SubprocessTransport)
        await asyncio.sleep(0.2)  # let it install its handler
        await client.close()
        assert transport.process.returncode == -signal.SIGKILL

        with pytest.raises(ConnectError, match="cannot connect to"):
            await connect_stdio(["/nonexistent/agenthost-host"])

    run(body())


def test_a_host_process_that_dies_closes_the_client() -> None:
    async def body() -> None:
        async with connect_stdio([sys.executable, "-c", FAKE_HOST]) as client:
            await client.initialize()
            events = client.events()
            transport = client.transport
            assert isinstance(transport, SubprocessTransport)
            transport.abort()  # SIGKILL
            lost = await next_of(events, ConnectionLost)
            assert not lost.will_retry and "exit status -9" in lost.reason
            closed = await next_of(events, Closed)
            assert isinstance(closed.error, ConnectionClosedError)
            assert client.closed
        assert transport.process.returncode == -signal.SIGKILL

    run(body())
