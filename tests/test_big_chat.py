"""Issue 18, item 2: chats of any size open, and nothing is ever half-sent.

A chat of about 100 MB (long replies and big tool outputs) is built on a
real host through the same calls an agent makes; the library's client opens
it over a real WebSocket with its default view, pages every older turn and
reads a big tool output by reference.  Messages over the limit are refused
where they are made, and cost no other client its connection.
"""

from __future__ import annotations

import asyncio

from agenthost_protocol import methods, wire
from agenthost_protocol import types as t
from agenthost_protocol.aio.client import DEFAULT_CHAT_VIEW_TURNS, connect
from agenthost_protocol.host import Host, HostLimits
from agenthost_protocol.host.content import CONTENT_SCHEME

from ._aio_hosts import DemoHost, demo_host, run

SESSION = "ahp-session:/big"
CHAT = "ahp-chat:/big"
TURNS = 200
REPLY = 100 * 1024
TOOL_OUTPUT = 400 * 1024
USER = t.MessageOrigin(kind=t.MessageKind.USER)


def build_big_chat(host: Host, turns: int = TURNS) -> int:
    """``turns`` turns of a long reply and a big tool output each; the bytes of content."""
    host.add_channel(CHAT, t.ChatState(resource=CHAT, title="big", status=t.SessionStatus.IDLE,
                                       modified_at="2026-01-01T00:00:00.000Z", turns=()))
    content = 0
    for n in range(turns):
        turn = f"t{n}"
        host.dispatch(CHAT, t.ChatTurnStartedAction(
            turn_id=turn, started_at="2026-01-01T00:00:00.000Z",
            message=t.Message(text=f"message {n}", origin=USER)))
        host.dispatch(CHAT, t.ChatResponsePartAction(turn_id=turn, part=t.MarkdownResponsePart(
            id=f"{turn}.md", content="")))
        reply = f"{n} " + "r" * REPLY
        host.dispatch(CHAT, t.ChatDeltaAction(turn_id=turn, part_id=f"{turn}.md", content=reply))
        call = f"{turn}.tool"
        host.dispatch(CHAT, t.ChatToolCallStartAction(turn_id=turn, tool_call_id=call,
                                                      tool_name="cat", display_name="Cat"))
        host.dispatch(CHAT, t.ChatToolCallReadyAction(
            turn_id=turn, tool_call_id=call, invocation_message="cat a big file",
            confirmed=t.ToolCallConfirmationReason.NOT_NEEDED))
        output = f"{n} " + "o" * TOOL_OUTPUT
        complete = t.ChatToolCallCompleteAction(turn_id=turn, tool_call_id=call, result=(
            t.ToolCallResult(success=True, past_tense_message="read it",
                             content=(t.ToolResultTextContent(text=output),))))
        host.dispatch(CHAT, host.by_reference(complete, CHAT))
        host.dispatch(CHAT, t.ChatTurnCompleteAction(turn_id=turn, duration=1))
        content += len(reply) + len(output)
    return content


def test_a_100_mb_chat_opens_pages_and_reads_by_reference() -> None:
    async def body() -> None:
        async with demo_host() as demo:
            content = build_big_chat(demo.host)
            assert content > 100 * 1000 * 1000
            state = demo.host.state(CHAT)
            assert isinstance(state, t.ChatState) and len(state.turns) == TURNS
            async with connect(demo.url, reconnect=False) as client:
                await client.initialize()
                snapshot = await client.subscribe(CHAT)
                assert snapshot is not None and isinstance(snapshot.state, t.ChatState)
                first = len(wire.dumps(snapshot))
                assert first < 16 * 1024 * 1024
                assert len(snapshot.state.turns) == DEFAULT_CHAT_VIEW_TURNS
                # the big outputs went by reference, the replies inline
                last = snapshot.state.turns[-1]
                call = next(p.tool_call for p in last.response_parts
                            if isinstance(p, t.ToolCallResponsePart))
                assert isinstance(call, t.ToolCallCompletedState) and call.content
                (ref,) = call.content
                assert isinstance(ref, t.ToolResultResourceContent)
                assert ref.uri.startswith(CONTENT_SCHEME) and ref.size_hint == TOOL_OUTPUT + 4
                read = await client.request(methods.RESOURCE_READ,
                                            t.ResourceReadParams(uri=ref.uri))
                assert isinstance(read, t.ResourceReadResult)
                assert read.data == f"{TURNS - 1} " + "o" * TOOL_OUTPUT
                pages = 0
                while await client.fetch_older_turns(CHAT):
                    pages += 1
                    assert pages < TURNS
                held = client.connection.confirmed(CHAT)
                assert isinstance(held, t.ChatState)
                assert [turn.id for turn in held.turns] == [f"t{n}" for n in range(TURNS)]
                assert wire.dumps(held) == wire.dumps(demo.host.state(CHAT))

    run(body(), 120)


def test_what_no_client_could_take_is_trimmed_or_referenced_never_refused() -> None:
    """Issue 29, defect 8: under a 2 MiB limit a 4 MB chat opens on the turns that
    fit, and a message bigger than the limit goes by reference at dispatch."""
    async def body() -> None:
        async with demo_host() as demo:
            demo.host.limits = HostLimits(max_message_size=2 * 1024 * 1024)
            build_big_chat(demo.host, turns=40)  # 4 MB of replies: over the limit whole
            async with connect(demo.url, reconnect=False) as bystander, \
                    connect(demo.url, reconnect=False) as client:
                await bystander.initialize()
                await bystander.subscribe(CHAT, view=t.SubscribeView(turns=1))
                await client.initialize()
                snapshot = await client.subscribe(CHAT, view=t.SubscribeView())
                assert snapshot is not None and isinstance(snapshot.state, t.ChatState)
                assert 0 < len(snapshot.state.turns) < 40
                assert snapshot.state.turns_next_cursor is not None
                while await client.fetch_older_turns(CHAT):
                    pass
                held = client.connection.confirmed(CHAT)
                assert isinstance(held, t.ChatState) and len(held.turns) == 40
                assert wire.dumps(held) == wire.dumps(demo.host.state(CHAT))
                # a message too large for any client goes by reference where it is made
                envelope = demo.host.dispatch(CHAT, t.ChatTurnStartedAction(
                    turn_id="huge", started_at="2026-01-01T00:00:00.000Z",
                    message=t.Message(text="x" * (3 * 1024 * 1024), origin=USER)))
                assert isinstance(envelope.action, t.ChatTurnStartedAction)
                (attachment,) = envelope.action.message.attachments or ()
                assert isinstance(attachment, t.MessageResourceAttachment)
                read = await client.request(methods.RESOURCE_READ,
                                            t.ResourceReadParams(uri=attachment.uri))
                assert isinstance(read, t.ResourceReadResult)
                assert read.data.startswith("x" * 1000) and "more bytes not kept" in read.data
                # and everybody is still connected and in step
                await bystander.ping()
                await client.ping()
                assert demo.server.connection_count == 2

    run(body(), 60)


def test_the_demo_agent_echoes_a_long_message_by_reference() -> None:
    async def body() -> None:
        async with demo_host() as demo, connect(demo.url, reconnect=False) as client:
            await client.initialize()
            session = await client.create_session(SESSION)
            del session
            chat = await wait_default_chat(demo)
            await client.subscribe(chat)
            text = "word " * 100_000  # 500 KB
            await client.dispatch(chat, t.ChatTurnStartedAction(
                turn_id="t1", started_at="2026-01-01T00:00:00.000Z",
                message=t.Message(text=text, origin=USER)))
            for _ in range(400):
                state = demo.host.state(chat)
                if isinstance(state, t.ChatState) and state.active_turn is not None and any(
                    isinstance(p, t.ToolCallResponsePart)
                    and isinstance(p.tool_call, t.ToolCallPendingConfirmationState)
                    for p in state.active_turn.response_parts
                ):
                    break
                await asyncio.sleep(0.01)
            await client.dispatch(chat, t.ChatToolCallApprovedAction(
                turn_id="t1", tool_call_id="t1.echo",
                confirmed=t.ToolCallConfirmationReason.USER_ACTION))
            for _ in range(400):
                state = demo.host.state(chat)
                if isinstance(state, t.ChatState) and state.turns:
                    break
                await asyncio.sleep(0.01)
            assert isinstance(state, t.ChatState) and state.turns
            call = next(p.tool_call for p in state.turns[0].response_parts
                        if isinstance(p, t.ToolCallResponsePart))
            assert isinstance(call, t.ToolCallCompletedState) and call.content
            assert isinstance(call.content[0], t.ToolResultResourceContent)
            assert isinstance(call.tool_input, t.ContentRef)

    run(body(), 60)


async def wait_default_chat(demo: DemoHost) -> str:
    for _ in range(200):
        state = demo.host.state(SESSION)
        if isinstance(state, t.SessionState) and state.default_chat is not None:
            return state.default_chat
        await asyncio.sleep(0.01)
    raise AssertionError("no default chat")


def test_stored_content_goes_with_the_last_chat_that_references_it() -> None:
    """A long-running host must not keep the tool outputs of chats long disposed;
    a fork copies its source's turns, so it keeps their content alive."""
    host = Host(clock=lambda: 1_767_225_600_000)
    host.add_channel(SESSION, t.SessionState(
        provider="p", title="", status=t.SessionStatus.IDLE,
        lifecycle=t.SessionLifecycle.READY, active_clients=(), chats=()))
    host.add_chat(SESSION, CHAT)
    turn = "t0"
    host.dispatch(CHAT, t.ChatTurnStartedAction(
        turn_id=turn, started_at="2026-01-01T00:00:00.000Z",
        message=t.Message(text="m", origin=USER)))
    host.dispatch(CHAT, t.ChatToolCallStartAction(turn_id=turn, tool_call_id="c",
                                                  tool_name="cat", display_name="Cat"))
    host.dispatch(CHAT, t.ChatToolCallReadyAction(
        turn_id=turn, tool_call_id="c", invocation_message="cat",
        confirmed=t.ToolCallConfirmationReason.NOT_NEEDED))
    complete = t.ChatToolCallCompleteAction(turn_id=turn, tool_call_id="c", result=(
        t.ToolCallResult(success=True, past_tense_message="read",
                         content=(t.ToolResultTextContent(text="o" * TOOL_OUTPUT),))))
    host.dispatch(CHAT, host.by_reference(complete, CHAT))
    host.dispatch(CHAT, t.ChatTurnCompleteAction(turn_id=turn, duration=1))
    assert len(host.content) == 1
    fork = "ahp-chat:/fork"
    host.content.share(CHAT, fork)
    host.add_chat(SESSION, fork)
    host.dispose_chat(CHAT)
    assert len(host.content) == 1  # the fork still references it
    host.dispose_chat(fork)
    assert len(host.content) == 0 and host.content.total_bytes == 0
