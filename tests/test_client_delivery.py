"""Issue 21: the library's client asks for a chat's deltas to be coalesced by default."""

from __future__ import annotations

import asyncio

import pytest

from agenthost_protocol import types as t
from agenthost_protocol.aio import HostServer, connected_client
from agenthost_protocol.aio.client import DEFAULT_CHAT_DELIVERY_MS
from agenthost_protocol.host import Host

CHAT = "ahp-chat:/s/c"
ISO = "2026-01-01T00:00:00.000Z"


def chat_host() -> Host:
    host = Host(clock=lambda: 1_767_225_600_000, root=t.RootState(agents=()))
    host.add_channel(CHAT, t.ChatState(resource=CHAT, title="c", status=t.SessionStatus.IDLE,
                                       modified_at=ISO, turns=()))
    host.dispatch(CHAT, t.ChatTurnStartedAction(
        turn_id="t1", started_at=ISO,
        message=t.Message(text="hi", origin=t.MessageOrigin(kind=t.MessageKind.USER))))
    host.dispatch(CHAT, t.ChatResponsePartAction(
        turn_id="t1", part=t.MarkdownResponsePart(id="md", content="")))
    return host


@pytest.mark.parametrize("window", [DEFAULT_CHAT_DELIVERY_MS, None])
def test_a_chat_is_subscribed_with_a_delivery_window_unless_told_not_to(
    window: int | None,
) -> None:
    async def main() -> None:
        host = chat_host()
        server = HostServer(host)
        options = {} if window else {"chat_delivery_ms": None}
        async with connected_client(server, **options) as client:  # type: ignore[arg-type]
            await client.initialize()
            await client.subscribe(CHAT)
            words = [f"w{n} " for n in range(20)]
            for word in words:
                host.dispatch(CHAT, t.ChatDeltaAction(turn_id="t1", part_id="md",
                                                      content=word))
            # held for the window (the host's clock stands still: the server's timer)
            assert (host.next_delivery() is not None) is bool(window)
            server.flush()

            def done(state: t.SnapshotState) -> bool:
                assert isinstance(state, t.ChatState) and state.active_turn is not None
                part = state.active_turn.response_parts[0]
                assert isinstance(part, t.MarkdownResponsePart)
                return part.content == "".join(words)

            await asyncio.wait_for(client.wait_for_state(CHAT, done), 5)
            assert host.next_delivery() is None

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_negative_window_is_refused() -> None:
    async def main() -> None:
        with pytest.raises(ValueError, match="chat_delivery_ms"):
            async with connected_client(HostServer(chat_host()), chat_delivery_ms=-1):
                pass

    asyncio.run(main())
