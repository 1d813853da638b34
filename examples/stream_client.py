"""A client of the reverse agent: stream a turn, approve its tool call, survive a lost
connection, play a second turn.

    .venv/bin/python -m examples.stream_client

The host runs in this process on a loopback port (what ``agenthost-protocol
serve --agent examples.reverse:agent`` would run), so the example needs no
second terminal; the client is the same one that would talk to a remote host.
"""

from __future__ import annotations

import asyncio
import random
import time
from datetime import datetime, timezone

from agenthost_protocol import types as t
from agenthost_protocol.agent import build_agent_server
from agenthost_protocol.agent.hosting import ServeOptions
from agenthost_protocol.aio.access import AccessPolicy, new_token, url_with_token
from agenthost_protocol.aio.client import (
    ActionReceived,
    AsyncClient,
    ConnectionLost,
    Reconnecting,
    ReconnectPolicy,
    Reinitialized,
    Resumed,
    WebSocketTransport,
    connect,
)
from agenthost_protocol.aio.websocket import serve_websocket
from examples.reverse import Reverse

USER = t.MessageOrigin(kind=t.MessageKind.USER)
WAIT = 10.0  # seconds for any one event: a stuck example fails instead of hanging CI


def wall_clock() -> int:
    return time.time_ns() // 1_000_000


def now_iso() -> str:
    # the protocol's timestamps are JavaScript's toISOString(): milliseconds and a Z
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def reply_text(parts: tuple[t.ResponsePart, ...]) -> str:
    return "".join(p.content for p in parts if isinstance(p, t.MarkdownResponsePart))


async def play_turn(client: AsyncClient, chat: str, turn_id: str, text: str,
                    approve: bool) -> t.Turn:
    """Send ``text``, print the reply as it streams, answer the agent's confirmation."""
    print(f"you> {text}\nagent> ", end="", flush=True)
    # opened before the dispatch, so that no step of the turn can slip past it
    with client.events() as events:
        await client.dispatch(chat, t.ChatTurnStartedAction(
            turn_id=turn_id, started_at=now_iso(), message=t.Message(text=text, origin=USER)))
        shown, decided = 0, set[str]()
        while True:
            event = await events.next(WAIT)
            if event is None:
                raise RuntimeError(f"the client closed: {client.close_reason}")
            if not isinstance(event, ActionReceived) or event.channel != chat:
                continue
            state = client.state(chat)
            assert isinstance(state, t.ChatState)
            done = next((turn for turn in state.turns if turn.id == turn_id), None)
            parts = done.response_parts if done else (
                state.active_turn.response_parts if state.active_turn else ())
            # the state holds the whole reply so far: print only what is new
            reply = reply_text(parts)
            print(reply[shown:], end="", flush=True)
            shown = len(reply)
            if done is not None:
                print(f"\n[turn {turn_id}: {t.TurnState(done.state).value}]")
                return done
            for part in parts:
                call = part.tool_call if isinstance(part, t.ToolCallResponsePart) else None
                if (isinstance(call, t.ToolCallPendingConfirmationState)
                        and call.tool_call_id not in decided):
                    decided.add(call.tool_call_id)
                    print(f"\n[{call.display_name}: {'approved' if approve else 'denied'}]",
                          end="", flush=True)
                    action: t.StateAction = (
                        t.ChatToolCallApprovedAction(
                            turn_id=turn_id, tool_call_id=call.tool_call_id,
                            confirmed=t.ToolCallConfirmationReason.USER_ACTION)
                        if approve else t.ChatToolCallDeniedAction(
                            turn_id=turn_id, tool_call_id=call.tool_call_id,
                            reason=t.ToolCallCancellationReason.DENIED))
                    await client.dispatch(chat, action)


async def lose_the_connection(client: AsyncClient) -> None:
    """Drop the TCP connection under the client and wait for the supervisor to resume."""
    with client.events() as events:
        transport = client.transport
        assert isinstance(transport, WebSocketTransport)
        transport.abort()  # no closing handshake: what a network failure looks like
        while True:
            event = await events.next(WAIT)
            if isinstance(event, ConnectionLost):
                print(f"[connection lost: {event.reason}; retrying: {event.will_retry}]")
            elif isinstance(event, Reconnecting):
                print(f"[reconnect attempt {event.attempt} in {event.delay:.2f} s]")
            elif isinstance(event, Resumed):
                print(f"[resumed ({event.outcome.kind.value}) after {event.attempts} "
                      f"attempt(s); {len(event.outcome.dropped)} action(s) dropped]")
                return
            elif isinstance(event, Reinitialized) or event is None:
                raise RuntimeError(f"expected a resume, got {event!r}")


async def main() -> None:
    server, service = build_agent_server(Reverse(), ServeOptions(), wall_clock)
    await service.start()
    token = new_token()
    # port 0: any free port, so that the example never collides with a real serve
    endpoint = await serve_websocket(server, "127.0.0.1", 0, ping_interval=None,
                                     access=AccessPolicy(token=token))
    print(f"host: {endpoint.url} (the reverse agent; token required)")
    try:
        # the URL as serve prints it; the client sends its token as Authorization: Bearer
        policy = ReconnectPolicy(initial_delay=0.05, max_attempts=5, rng=random.Random(0))
        async with connect(url_with_token(endpoint.url, token), reconnect=policy) as client:
            await client.initialize(["ahp-root://"])
            session = await client.create_session(provider="reverse")
            snapshot = await client.subscribe(session)
            assert snapshot is not None and isinstance(snapshot.state, t.SessionState)
            chat = snapshot.state.default_chat
            assert chat is not None
            await client.subscribe(chat)
            await play_turn(client, chat, "t1", "one two three four", approve=True)
            await lose_the_connection(client)
            await play_turn(client, chat, "t2", "after the reconnect", approve=False)
            state = client.state(chat)
            assert isinstance(state, t.ChatState)
            print(f"[{len(state.turns)} turns in the chat]")
    finally:
        # the agent first, as serve does: what its end dispatches still reaches clients
        await service.close()
        await endpoint.close()


if __name__ == "__main__":
    asyncio.run(asyncio.wait_for(main(), 30))
