"""``agenthost-protocol chat``: one turn end to end, with real loopback sockets and processes.

Most tests run :func:`run_chat` on one event loop with the demo host
in-process; two run the command in a subprocess (against ``serve`` in
another, and over ``--stdio``).  Every wait is bounded and every process
reaped.
"""

from __future__ import annotations

import asyncio
import io
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("websockets")

from agenthost_protocol import types as t
from agenthost_protocol.agent.demo import APPROVED_TEXT, DENIED_TEXT
from agenthost_protocol.cli.chat import (
    EXIT_CONNECT,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    EXIT_VERSION,
    run_chat,
)
from agenthost_protocol.host import ClientActionApplied
from agenthost_protocol.host import Event as HostEvent

from ._aio_hosts import TIMEOUT, DemoHost, demo_host, free_port, run, silent_host
from ._aio_peer import child_env, serving

MESSAGE = "Please echo this line"


class Terminal:
    """The user at the terminal: answers the prompts from a script."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        if not self.answers:
            raise EOFError
        return self.answers.pop(0)


async def chat(target: str, *, yes: bool = False, terminal: Terminal | None = None,
               timeout: float = TIMEOUT, stdio: bool = False) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = await run_chat(target, MESSAGE, yes=yes, out=out, err=err,
                            input_fn=terminal if terminal is not None else Terminal(),
                            timeout=timeout, stdio=stdio)
    return status, out.getvalue(), err.getvalue()


def test_chat_with_yes_prints_the_streamed_reply_and_exits_0() -> None:
    async def body() -> None:
        async with demo_host(step_delay=0.001) as demo:
            terminal = Terminal()
            status, out, err = await chat(demo.url, yes=True, terminal=terminal)
            assert status == EXIT_OK, err
            assert out == (
                f"You said:\n\n> {MESSAGE}\n\nNow I will run the `echo` tool on your message. "
                f"It needs your confirmation.\n\n{APPROVED_TEXT}\n"
            )
            assert terminal.prompts == []
            assert "thinking: The user wrote" in err
            assert "[tool Echo] Run the echo tool?" in err and "approved (--yes)" in err
            assert "[tool Echo: done: Echoed your message]" in err
            # the host's state: one session, its chat's turn complete
            (session,) = [c for c in demo.host.channels if c.startswith("ahp-session:/")]
            state = demo.host.state(session)
            assert isinstance(state, t.SessionState) and state.default_chat is not None
            chat_state = demo.host.state(state.default_chat)
            assert isinstance(chat_state, t.ChatState)
            assert chat_state.turns[0].state == t.TurnState.COMPLETE
            assert chat_state.turns[0].message.text == MESSAGE

    run(body())


def test_chat_asks_and_a_denial_still_ends_the_turn_with_0() -> None:
    async def body() -> None:
        async with demo_host() as demo:
            terminal = Terminal("maybe", "n")
            status, out, err = await chat(demo.url, terminal=terminal)
            assert status == EXIT_OK, err
            assert out.endswith(f"\n\n{DENIED_TEXT}\n")
            assert APPROVED_TEXT not in out
            assert terminal.prompts == ["Allow? [y/N] ", "Allow? [y/N] "]
            assert "please answer y or n" in err
            assert "[tool Echo: cancelled (denied)]" in err

            # the end of the input denies too
            status, out, err = await chat(demo.url, terminal=Terminal())
            assert status == EXIT_OK and out.endswith(f"{DENIED_TEXT}\n")
            assert "no answer (end of input): denied" in err

            terminal = Terminal("y")
            status, out, _ = await chat(demo.url, terminal=terminal)
            assert status == EXIT_OK and out.endswith(f"{APPROVED_TEXT}\n")

    run(body())


def test_chat_exits_non_zero_with_a_clear_message() -> None:
    async def body() -> None:
        port = free_port()
        status, out, err = await chat(f"ws://127.0.0.1:{port}")
        assert status == EXIT_CONNECT and out == ""
        assert err.startswith(f"agenthost-protocol chat: cannot connect to ws://127.0.0.1:{port}")

        async with demo_host(supported_versions=["0.1.0"]) as demo:
            status, _, err = await chat(demo.url)
            assert status == EXIT_VERSION
            assert "protocol version mismatch: the host speaks 0.1.0" in err

        async with silent_host() as url:
            status, _, err = await chat(url, timeout=0.3)
            assert status == EXIT_TIMEOUT
            assert "initialize: no answer from the host within 0.3 s" in err

        status, _, err = await chat("localhost:8765")
        assert status == EXIT_USAGE and "is not a ws:// or wss:// URL" in err
        status, _, err = await chat("", stdio=True)
        assert status == EXIT_USAGE and "--stdio needs a command" in err
        status, _, err = await chat("/nonexistent/host --stdio", stdio=True)
        assert status == EXIT_CONNECT and "cannot connect to /nonexistent/host" in err

    run(body())


def test_a_turn_that_fails_or_a_silent_agent_exits_non_zero() -> None:
    def fail_turns(demo: DemoHost, event: HostEvent) -> bool:
        if isinstance(event, ClientActionApplied) and isinstance(
            event.envelope.action, t.ChatTurnStartedAction
        ):
            demo.host.dispatch(event.envelope.channel, t.ChatErrorAction(
                turn_id=event.envelope.action.turn_id, duration=5,
                error=t.ErrorInfo(error_type="overloaded", message="the model is busy"),
            ))
            return True
        return False

    def ignore_turns(demo: DemoHost, event: HostEvent) -> bool:
        return isinstance(event, ClientActionApplied) and isinstance(
            event.envelope.action, t.ChatTurnStartedAction)

    async def body() -> None:
        async with demo_host(intercept=fail_turns) as demo:
            status, _, err = await chat(demo.url)
            assert status == EXIT_FAILED
            assert "the turn failed: the model is busy (overloaded)" in err
        async with demo_host(intercept=ignore_turns) as demo:
            status, _, err = await chat(demo.url, timeout=0.3)
            assert status == EXIT_TIMEOUT
            # it says what it waited for, and leaves no turn active on the host
            assert err.endswith("[the turn was cancelled]\nagenthost-protocol chat: timed out "
                                "after 0.3 s waiting for the agent to reply\n"), err
            (chat_uri,) = [c for c in demo.host.channels if c.startswith("ahp-chat:")]
            state = demo.host.state(chat_uri)
            assert isinstance(state, t.ChatState) and state.active_turn is None
            assert state.turns[-1].state == t.TurnState.CANCELLED

    run(body())


def test_an_interrupted_chat_cancels_its_turn() -> None:
    def chats(demo: DemoHost) -> list[t.ChatState]:
        states = [demo.host.state(c) for c in demo.host.channels if c.startswith("ahp-chat:")]
        return [s for s in states if isinstance(s, t.ChatState)]

    async def until(predicate: Callable[[], bool]) -> None:
        while not predicate():
            await asyncio.sleep(0.01)

    async def body() -> None:
        async with demo_host(step_delay=0.05) as demo:
            running = asyncio.ensure_future(chat(demo.url, yes=True))
            await asyncio.wait_for(until(lambda: any(
                c.active_turn is not None for c in chats(demo))), TIMEOUT)
            running.cancel()  # what Ctrl-C does to asyncio.run's task
            with pytest.raises(asyncio.CancelledError):
                await running
            await asyncio.wait_for(until(lambda: any(
                c.turns and c.turns[-1].state == t.TurnState.CANCELLED for c in chats(demo))),
                TIMEOUT)

    run(body())


# -- as a command, in subprocesses ---------------------------------------------------------


def chat_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "agenthost_protocol.cli", "chat", *args]


def test_the_chat_command_against_a_serve_process(tmp_path: Path) -> None:
    async def body() -> None:
        async with serving(["--step-delay", "0"], tmp_path / "serve.log") as (_, url):
            proc = await asyncio.create_subprocess_exec(
                *chat_command(url, MESSAGE, "--yes", "--no-reasoning"),
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                stdin=asyncio.subprocess.DEVNULL, env=child_env(),
            )
            try:
                out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
            assert proc.returncode == EXIT_OK, err
            assert out.decode().endswith(f"{APPROVED_TEXT}\n")
            assert b"thinking:" not in err

    run(body())


def test_the_chat_command_over_stdio_denied_on_its_terminal() -> None:
    serve = shlex.join(
        [sys.executable, "-m", "agenthost_protocol.cli", "serve", "--stdio", "--step-delay", "0",
         "--log-level", "warning"])
    result = subprocess.run(
        chat_command("--stdio", serve, MESSAGE, "--timeout", str(TIMEOUT)),
        input=b"n\n", capture_output=True, env=child_env(), timeout=2 * TIMEOUT, check=False,
    )
    assert result.returncode == EXIT_OK, result.stderr
    assert result.stdout.decode().endswith(f"{DENIED_TEXT}\n")
    assert b"Allow? [y/N] " in result.stderr


def test_the_cli_offers_the_chat_command(capsys: pytest.CaptureFixture[str]) -> None:
    from agenthost_protocol import cli

    with pytest.raises(SystemExit) as done:
        cli.main(["chat", "--help"])
    if done.value.code != 0:
        pytest.skip("agenthost_protocol/cli/__init__.py does not wire the chat command (yet)")
    usage = capsys.readouterr().out
    for option in ("URL", "MESSAGE", "--yes", "--stdio", "--timeout", "--provider",
                   "--no-reasoning", "--log-level", "--session", "--continue", "AHP_TOKEN",
                   "130 interrupted", "/decline"):
        assert option in usage
