"""End to end: a real ACP agent process (the SDK's agent side) behind a host, driven by a client.

``tests/acp_agents/scripted_agent.py`` runs as a subprocess, spawned by
:class:`~agenthost_protocol.agent.acp_runner.AcpAgentRunner` over stdio;
this library's sans-I/O client talks to the host's ``HostServer`` over an
in-memory transport.  The client streams text and a thought, confirms a
tool call, answers an elicitation, cancels a turn, and ends with the same
chat state as the host.  Every wait is bounded; the agent process is gone
when a test ends, whatever happened.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

pytest.importorskip("acp")

from agenthost_protocol import types as t
from agenthost_protocol.agent.acp_runner import (
    ACP_PROVIDER,
    AcpAgentCommand,
    AcpAgentRunner,
    acp_root_state,
    build_acp_server,
)
from agenthost_protocol.aio import CloseReason, EndOfStream, HostServer
from agenthost_protocol.client import ClientConnection, ResponseReceived
from agenthost_protocol.host import Host
from agenthost_protocol.host.sessions import iso
from tests._aio_peer import Peer, without_clock

AGENT = Path(__file__).parent / "acp_agents" / "scripted_agent.py"
ROOT = "ahp-root://"
SESSION = "ahp-session:/e2e"
CHAT = "ahp-chat:/e2e"
USER = t.MessageOrigin(kind=t.MessageKind.USER)
TEST_TIMEOUT = 30.0

def wall_clock() -> int:
    return time.time_ns() // 1_000_000


class MemoryStream:
    """One end of an in-memory transport (a ``MessageStream`` for the server)."""

    def __init__(self) -> None:
        self.to_host: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.to_client: asyncio.Queue[bytes] = asyncio.Queue()

    async def receive(self) -> bytes:
        data = await self.to_host.get()
        if data is None:
            raise EndOfStream("the client left")
        return data

    async def send(self, data: bytes) -> None:
        await self.to_client.put(data)

    async def close(self, reason: CloseReason, message: str) -> None:
        pass

    def abort(self) -> None:
        pass


@asynccontextmanager
async def acp_host() -> AsyncIterator[tuple[Host, AcpAgentRunner, Peer]]:
    server, runner = build_acp_server(
        AcpAgentCommand(command=sys.executable, args=(str(AGENT),)), clock=wall_clock)
    host = server.host
    await runner.start()
    stream = MemoryStream()
    served = asyncio.get_running_loop().create_task(server.serve_connection(stream))
    peer = Peer(ClientConnection("ide", clock=wall_clock), stream.to_host.put,
                stream.to_client.get)
    try:
        yield host, runner, peer
    finally:
        await stream.to_host.put(None)
        await asyncio.wait_for(server.close(), 10)
        await asyncio.wait_for(asyncio.gather(served, return_exceptions=True), 10)
        await asyncio.wait_for(runner.close(), 10)
        process = runner.process
        assert process is not None and process.returncode is not None, "the agent outlived it"


def bounded(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), TEST_TIMEOUT))


def chat_of(state: t.SnapshotState) -> t.ChatState:
    assert isinstance(state, t.ChatState)
    return state


def tool_call(state: t.SnapshotState) -> t.ToolCallState | None:
    turn = chat_of(state).active_turn
    for part in turn.response_parts if turn is not None else ():
        if isinstance(part, t.ToolCallResponsePart):
            return part.tool_call
    return None


def open_input(state: t.SnapshotState) -> t.InputRequestResponsePart | None:
    turn = chat_of(state).active_turn
    for part in turn.response_parts if turn is not None else ():
        if isinstance(part, t.InputRequestResponsePart) and part.response is None:
            return part
    return None


def text_of_active(state: t.SnapshotState) -> str:
    turn = chat_of(state).active_turn
    return "" if turn is None else "".join(
        p.content for p in turn.response_parts if isinstance(p, t.MarkdownResponsePart))


def text_of(turn: t.Turn) -> str:
    return "".join(p.content for p in turn.response_parts if isinstance(p, t.MarkdownResponsePart))


async def converged(peer: Peer, host: Host) -> None:
    """Pump until the client's state of every channel is the host's (``modifiedAt`` aside)."""
    for channel in (ROOT, SESSION, CHAT):
        wanted = host.state(channel)
        assert wanted is not None
        expected = without_clock(wanted)

        def same(state: t.SnapshotState, expected: object = expected) -> bool:
            return without_clock(state) == expected

        await peer.until_state(channel, same)


async def open_session(peer: Peer) -> None:
    await peer.initialize([ROOT])
    event = await peer.request("createSession", t.CreateSessionParams(channel=SESSION))
    assert isinstance(event, ResponseReceived), event
    await peer.subscribe(SESSION)
    await peer.subscribe(CHAT)


async def start_turn(peer: Peer, turn_id: str, text: str) -> None:
    await peer.dispatch(CHAT, t.ChatTurnStartedAction(
        turn_id=turn_id, started_at=iso(wall_clock()), message=t.Message(text=text, origin=USER),
    ))


async def answer_input(peer: Peer, response: t.ChatInputResponseKind, name: str = "") -> None:
    state = await peer.until_state(CHAT, lambda s: open_input(s) is not None)
    part = open_input(state)
    assert part is not None and part.request.message == "What is your name?"
    answers: dict[str, t.ChatInputAnswer] | None = None
    if response == t.ChatInputResponseKind.ACCEPT:
        answers = {"name": t.ChatInputAnswered(state=t.ChatInputAnswerState.SUBMITTED,
                                               value=t.ChatInputTextAnswerValue(value=name))}
    await peer.dispatch(CHAT, t.ChatInputCompletedAction(
        request_id=part.request.id, response=response, answers=answers))


async def approve_and_answer(host: Host, peer: Peer) -> None:
    """A thought, streamed text, a confirmed tool call, an answered elicitation."""
    root = peer.client.confirmed(ROOT)
    assert isinstance(root, t.RootState)
    [agent] = root.agents
    assert agent.provider == ACP_PROVIDER and agent.display_name == "Scripted agent"
    assert [m.id for m in agent.models] == ["small", "large"]
    session = peer.client.confirmed(SESSION)
    assert isinstance(session, t.SessionState) and session.config is not None
    assert session.config.values == {"model": "small", "mode": "ask"}

    await start_turn(peer, "turn-1", "hello")
    state = await peer.until_state(CHAT, lambda s: isinstance(
        tool_call(s), t.ToolCallPendingConfirmationState))
    call = tool_call(state)
    assert isinstance(call, t.ToolCallPendingConfirmationState)
    assert call.confirmation_title == "Run command"
    assert [o.id for o in call.options or ()] == ["allow", "reject"]
    await peer.dispatch(CHAT, t.ChatToolCallApprovedAction(
        turn_id="turn-1", tool_call_id=call.tool_call_id,
        confirmed=t.ToolCallConfirmationReason.USER_ACTION, selected_option_id="allow"))
    await answer_input(peer, t.ChatInputResponseKind.ACCEPT, "Ada")
    state = await peer.until_state(CHAT, lambda s: len(chat_of(s).turns) == 1)

    [turn] = chat_of(state).turns
    assert turn.state == t.TurnState.COMPLETE and turn.duration is not None
    kinds = [type(p).__name__ for p in turn.response_parts]
    assert kinds == ["ReasoningResponsePart", "MarkdownResponsePart", "ToolCallResponsePart",
                     "InputRequestResponsePart", "MarkdownResponsePart"]
    assert text_of(turn) == "You said: hello. Nice to meet you, Ada!"
    done = turn.response_parts[2]
    assert isinstance(done, t.ToolCallResponsePart)
    assert isinstance(done.tool_call, t.ToolCallCompletedState)
    assert done.tool_call.success
    assert done.tool_call.content == (t.ToolResultTextContent(text="hello"),)
    assert done.tool_call.structured_content == {"echoed": "hello"}
    assert turn.usage is not None and turn.usage.input_tokens == 5
    await converged(peer, host)


async def deny_and_decline(host: Host, peer: Peer) -> None:
    """A denied tool call (the agent's failure report is swallowed) and a declined form."""
    await start_turn(peer, "turn-2", "rm -rf")
    state = await peer.until_state(CHAT, lambda s: isinstance(
        tool_call(s), t.ToolCallPendingConfirmationState))
    call = tool_call(state)
    assert isinstance(call, t.ToolCallPendingConfirmationState)
    await peer.dispatch(CHAT, t.ChatToolCallDeniedAction(
        turn_id="turn-2", tool_call_id=call.tool_call_id,
        reason=t.ToolCallCancellationReason.DENIED))
    await answer_input(peer, t.ChatInputResponseKind.DECLINE)
    state = await peer.until_state(CHAT, lambda s: len(chat_of(s).turns) == 2)
    turn = chat_of(state).turns[-1]
    assert text_of(turn) == "You said: rm -rf. No name (decline)."
    denied = turn.response_parts[2]
    assert isinstance(denied, t.ToolCallResponsePart)
    assert isinstance(denied.tool_call, t.ToolCallCancelledState)
    assert denied.tool_call.reason == t.ToolCallCancellationReason.DENIED
    await converged(peer, host)


async def cancel_turns(host: Host, peer: Peer) -> None:
    """The agent honours cancellation; its ``cancelled`` answer is swallowed."""
    await start_turn(peer, "turn-3", "wait")
    await peer.until_state(CHAT, lambda s: "Waiting..." in text_of_active(s))
    await peer.dispatch(CHAT, t.ChatTurnCancelledAction(turn_id="turn-3", duration=5))
    # a permission request pending at cancel time is answered cancelled too
    await start_turn(peer, "turn-4", "again")
    await peer.until_state(CHAT, lambda s: isinstance(
        tool_call(s), t.ToolCallPendingConfirmationState))
    await peer.dispatch(CHAT, t.ChatTurnCancelledAction(turn_id="turn-4", duration=5))
    state = await peer.until_state(CHAT, lambda s: len(chat_of(s).turns) == 4)
    assert [turn.state for turn in chat_of(state).turns] == [
        t.TurnState.COMPLETE, t.TurnState.COMPLETE, t.TurnState.CANCELLED,
        t.TurnState.CANCELLED]
    await asyncio.sleep(0.2)  # late updates of the cancelled turns must change nothing
    assert len(chat_of(host.state(CHAT)).turns) == 4  # type: ignore[arg-type]
    await converged(peer, host)


async def refusals(peer: Peer) -> None:
    """What one ACP session per AHP session cannot do is refused, not hung."""
    for method, params in [
        ("createChat", t.CreateChatParams(channel=SESSION, chat="ahp-chat:/two")),
        ("createSession", t.CreateSessionParams(channel=SESSION)),
        ("createSession", t.CreateSessionParams(channel="ahp-session:/x", provider="nope")),
    ]:
        event = await peer.request(method, params)
        assert not isinstance(event, ResponseReceived), (method, event)


async def second_session(host: Host, peer: Peer) -> None:
    """A second AHP session is a second ACP session; disposing it leaves the first alone."""
    other = "ahp-session:/two"
    event = await peer.request("createSession", t.CreateSessionParams(channel=other))
    assert isinstance(event, ResponseReceived)
    assert host.has_channel("ahp-chat:/two")
    event = await peer.request("disposeSession", t.DisposeSessionParams(channel=other))
    assert isinstance(event, ResponseReceived)
    assert not host.has_channel(other) and not host.has_channel("ahp-chat:/two")
    assert host.has_channel(SESSION)


async def agent_dies(runner: AcpAgentRunner, peer: Peer) -> None:
    """The agent process dies mid-turn: the turn ends with ``chat/error``."""
    await start_turn(peer, "turn-5", "wait")
    await peer.until_state(CHAT, lambda s: "Waiting..." in text_of_active(s))
    process = runner.process
    assert process is not None
    process.kill()
    state = await peer.until_state(CHAT, lambda s: len(chat_of(s).turns) == 5)
    turn = chat_of(state).turns[-1]
    assert turn.state == t.TurnState.ERROR
    assert turn.error is not None and turn.error.error_type == "acp:disconnected"
    assert not runner.running
    event = await peer.request("createSession", t.CreateSessionParams(
        channel="ahp-session:/other"))
    assert not isinstance(event, ResponseReceived)


def test_a_real_acp_agent_behind_the_host() -> None:
    """One agent process for every scenario: spawning it is the expensive part."""
    async def scenario() -> None:
        async with acp_host() as (host, runner, peer):
            await open_session(peer)
            await approve_and_answer(host, peer)
            await deny_and_decline(host, peer)
            await cancel_turns(host, peer)
            await refusals(peer)
            await second_session(host, peer)
            await agent_dies(runner, peer)

    bounded(scenario)


def test_an_agent_that_does_not_start() -> None:
    async def scenario() -> None:
        host = Host(clock=wall_clock, root=acp_root_state())
        runner = AcpAgentRunner(HostServer(host), AcpAgentCommand(
            command=sys.executable, args=("-c", "import sys; sys.exit(3)")))
        with pytest.raises(RuntimeError, match="did not initialize"):
            await runner.start()
        assert not runner.running
        process = runner.process
        assert process is not None and process.returncode == 3

    bounded(scenario)

