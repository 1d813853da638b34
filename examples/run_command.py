"""An agent that runs your message as a shell command in a terminal every client can watch.

    agenthost-protocol serve --agent examples.run_command:agent   # from the repository root
    agenthost-protocol chat 'ws://127.0.0.1:8765/?token=...' "ls -la"

Each message is run with ``turn.run``: a "Run command" tool call appears in
the chat, referencing the host terminal the command runs in (a client opens
it to watch the output live); the reply gives the exit code and the end of
the output.  Cancelling the turn interrupts the command (Ctrl-C, then kill).
It runs whatever you write, as you, in the directory ``serve`` was started
in: serve it to yourself only (the access token is what keeps others out).

    .venv/bin/python -m examples.run_command

runs a self-check instead: the agent on a host in this process (with its
terminals), a client that sends one command and checks the reply and the
terminal the tool call names.
"""

from __future__ import annotations

import asyncio
import tempfile
import time

from agenthost_protocol import types as t
from agenthost_protocol.agent import Agent, Turn


class RunCommand(Agent):
    provider = "run-command"
    display_name = "Run command"
    description = "Runs each message as a shell command in a terminal you can watch."

    async def turn(self, turn: Turn) -> None:
        command = turn.text.strip()
        if not command:
            await turn.stream("Write a shell command, and I run it.")
            return
        result = await turn.run(command, timeout=600)
        tail = result.output[-2000:]
        how = "timed out" if result.timed_out else f"exited with {result.exit_code}"
        await turn.stream(f"`{command}` {how}.\n\n```\n{tail}\n```\n")


agent = RunCommand()


# -- the self-check: python -m examples.run_command ------------------------------------

WAIT = 10.0  # seconds for any one step: a stuck example fails instead of hanging CI


async def self_check() -> tuple[str, str]:
    """Run one command through the agent in-process; the reply and the terminal's output."""
    from agenthost_protocol.agent import build_agent_server  # noqa: PLC0415
    from agenthost_protocol.agent.hosting import ServeOptions  # noqa: PLC0415
    from agenthost_protocol.aio import connected_client  # noqa: PLC0415
    from agenthost_protocol.aio.terminals import TerminalOptions, TerminalService  # noqa: PLC0415

    server, service = build_agent_server(agent, ServeOptions(), lambda: time.time_ns() // 10**6)
    with tempfile.TemporaryDirectory() as root:
        # what serve does: terminals confined to the served directories, for Turn.run too
        terminals = TerminalService(server, roots=[root],
                                    options=TerminalOptions(shell=("/bin/sh",)))
        server.add_service(terminals)
        service.driver.terminals = terminals
        await service.start()
        try:
            async with connected_client(server) as client:
                await client.initialize(["ahp-root://"])
                session = await client.create_session(provider="run-command")
                snapshot = await client.subscribe(session)
                assert snapshot is not None and isinstance(snapshot.state, t.SessionState)
                chat = snapshot.state.default_chat
                assert chat is not None
                await client.subscribe(chat)
                await client.dispatch(chat, t.ChatTurnStartedAction(
                    turn_id="t1", started_at="2026-01-01T00:00:00.000Z", message=t.Message(
                        text="echo hello from a terminal; exit 3",
                        origin=t.MessageOrigin(kind=t.MessageKind.USER))))
                state = await client.wait_for_state(
                    chat, lambda s: isinstance(s, t.ChatState) and bool(s.turns),
                    timeout=WAIT)
                assert isinstance(state, t.ChatState)
                turn = state.turns[0]
                assert turn.state == t.TurnState.COMPLETE, turn
                reply = "".join(p.content for p in turn.response_parts
                                if isinstance(p, t.MarkdownResponsePart))
                (call,) = [p.tool_call for p in turn.response_parts
                           if isinstance(p, t.ToolCallResponsePart)]
                assert isinstance(call, t.ToolCallCompletedState)
                (content,) = call.content or ()
                assert isinstance(content, t.ToolResultTerminalContent)
                await client.subscribe(content.resource)
                terminal = client.state(content.resource)
                assert isinstance(terminal, t.TerminalState) and terminal.exit_code == 3
                output = "".join(p.output if isinstance(p, t.TerminalCommandPart)
                                 else p.value if isinstance(p, t.TerminalUnclassifiedPart)
                                 else "" for p in terminal.content)
                return reply, output
        finally:
            await service.close()
            await server.close()


if __name__ == "__main__":
    reply, output = asyncio.run(asyncio.wait_for(self_check(), 3 * WAIT))
    print(reply)
    if "exited with 3" not in reply or "hello from a terminal" not in reply:
        raise SystemExit(f"the run_command agent replied {reply!r}")
    if "hello from a terminal" not in output:
        raise SystemExit(f"the terminal showed {output!r}")
