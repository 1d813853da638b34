"""Issue 29, defects 1 and 2: an agent that will not stop, and error texts that cannot go.

``serve --agent tests.stubborn_agent:ATTR`` runs as a real process: a turn,
a ``create_session`` or a ``dispose_session`` hook that catches every
cancellation, or a turn blocked in a thread, no longer keeps it from
exiting on SIGTERM (within its close timeout, the time printed), and a
second SIGINT or SIGTERM ends it at once without losing what was
acknowledged.  A client's cancel of such a turn ends it, and what its task
does afterwards reaches no later turn.  A failed turn whose exception text
has a lone surrogate or is 20 MiB long ends with a repaired, cut
``chat/error``; ``Turn.stream``, ``tool``, ``title`` ... repair their texts.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from agenthost_protocol import types as t
from agenthost_protocol.agent import build_agent_server
from agenthost_protocol.agent.dispatch import ERROR_TEXT_LIMIT
from agenthost_protocol.agent.driver import UNSENDABLE_ERROR
from agenthost_protocol.agent.hosting import ServeOptions
from agenthost_protocol.aio import AsyncClient, ServerLimits, connected_client
from agenthost_protocol.aio.client import connect

from . import stubborn_agent
from ._aio_hosts import run
from ._aio_peer import TIMEOUT, serving

USER = t.MessageOrigin(kind=t.MessageKind.USER)
SESSION = "ahp-session:/s"
CHAT = "ahp-chat:/s"
CLOSE = 2.0
"""The close timeout the real processes are given (``--close-timeout``)."""
EXIT_BOUND = 10.0
"""How long a process may take to exit after the signal: the close timeout twice, plus
the rest of the shutdown, generously ("not forever"; the time is printed)."""


def clock() -> int:
    return 1_767_225_600_000


def turn_started(turn_id: str, text: str) -> t.ChatTurnStartedAction:
    return t.ChatTurnStartedAction(turn_id=turn_id, started_at="2026-01-01T00:00:00.000Z",
                                   message=t.Message(text=text, origin=USER))


def reply(turn: t.Turn | t.ActiveTurn) -> str:
    return "".join(part.content for part in turn.response_parts
                   if isinstance(part, t.MarkdownResponsePart))


async def until(client: AsyncClient, chat: str,
                predicate: Callable[[t.ChatState], bool]) -> t.ChatState:
    state = await client.wait_for_state(
        chat, lambda s: isinstance(s, t.ChatState) and predicate(s), timeout=TIMEOUT)
    assert isinstance(state, t.ChatState)
    return state


async def open_session(client: AsyncClient, *, ready: bool = True) -> None:
    await client.initialize()
    await client.create_session(SESSION)
    await client.subscribe(SESSION)
    if ready:
        await client.wait_for_state(SESSION, lambda s: isinstance(s, t.SessionState)
                                    and s.lifecycle == t.SessionLifecycle.READY,
                                    timeout=TIMEOUT)
        await client.subscribe(CHAT)


def working(state: t.ChatState) -> bool:
    return state.active_turn is not None and "working" in reply(state.active_turn)


def ended(count: int) -> Callable[[t.ChatState], bool]:
    return lambda state: state.active_turn is None and len(state.turns) == count


def last_error(state: t.ChatState) -> t.ErrorInfo | None:
    if state.active_turn is not None or not state.turns:
        return None
    return state.turns[-1].error


async def exits(proc: asyncio.subprocess.Process, sig: int, bound: float = EXIT_BOUND) -> tuple[
        int, float]:
    """Send ``sig``; the exit status and the seconds it took (``TimeoutError`` after ``bound``)."""
    began = time.monotonic()
    proc.send_signal(sig)
    status = await asyncio.wait_for(proc.wait(), bound)
    return status, time.monotonic() - began


async def logged(path: Path, text: str) -> None:
    """Wait (bounded) until the process's stderr has ``text``."""
    for _ in range(int(TIMEOUT / 0.05)):
        if text in path.read_text("utf-8", errors="replace"):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{text!r} not in {path.read_text('utf-8', errors='replace')}")


def serve_args(attr: str = "agent", *more: str) -> list[str]:
    return ["--no-store", "--log-level", "info", "--agent", f"tests.stubborn_agent:{attr}",
            "--close-timeout", str(CLOSE), *more]


# -- defect 1: shutdown over a real process ----------------------------------------------


@pytest.mark.parametrize("word", ["stubborn", "thread"])
def test_sigterm_stops_serve_whose_turn_will_not_stop(tmp_path: Path, word: str) -> None:
    """A turn that catches every cancellation (or sleeps in a thread) is logged, by
    session and turn, and abandoned; ``serve`` exits 0 within its close timeout."""
    err = tmp_path / "serve.err"

    async def main() -> None:
        async with serving(serve_args(), err) as (proc, url), \
                connect(url, reconnect=False) as client:
            await open_session(client)
            await client.dispatch(CHAT, turn_started("t1", word))
            await until(client, CHAT, working)
            status, took = await exits(proc, signal.SIGTERM)
        print(f"\n{word} turn: serve exited {took:.2f} s after SIGTERM "
              f"(close timeout {CLOSE} s)")
        assert status == 0, err.read_text()

    run(main(), timeout=60)
    log = err.read_text("utf-8")
    if word == "stubborn":
        assert (f"turn t1 of {CHAT} (session {SESSION}) did not end within {CLOSE:g} s"
                in log), log
    else:
        assert "1 thread(s) of the agent are still running: abandoned" in log, log
    assert "Traceback" not in log, log


@pytest.mark.parametrize("attr, described", [
    ("hanging_create", f"create_session of {SESSION}"),
    ("hanging_dispose", f"dispose_session of {SESSION}"),
])
def test_sigterm_stops_serve_whose_session_hooks_hang(tmp_path: Path, attr: str,
                                                      described: str) -> None:
    """``create_session`` and ``dispose_session`` hooks that never end are abandoned too."""
    err = tmp_path / "serve.err"

    async def main() -> None:
        async with serving(serve_args(attr), err) as (proc, url), \
                connect(url, reconnect=False) as client:
            await open_session(client, ready=attr != "hanging_create")
            if attr == "hanging_dispose":
                await client.dispose_session(SESSION)
                await logged(err, "disposed")
            else:
                await client.wait_for_state(
                    SESSION, lambda s: isinstance(s, t.SessionState)
                    and s.lifecycle == t.SessionLifecycle.CREATING, timeout=TIMEOUT)
            status, took = await exits(proc, signal.SIGTERM)
        print(f"\n{attr}: serve exited {took:.2f} s after SIGTERM (close timeout {CLOSE} s)")
        assert status == 0, err.read_text()

    run(main(), timeout=60)
    log = err.read_text("utf-8")
    assert f"the agent's {described} did not end within {CLOSE:g} s" in log, log


def test_sigterm_stops_serve_whose_resume_hangs(tmp_path: Path) -> None:
    """A stored session used again after a restart: its ``resume_session`` never ends
    (the turn that made the layer resume it waits for it); SIGTERM still ends ``serve``."""
    err = tmp_path / "serve.err"
    args = serve_args("hanging_resume")
    args[:1] = ["--store", str(tmp_path / "store.sqlite3")]

    async def main() -> None:
        async with serving(args, tmp_path / "first.err") as (proc, url), \
                connect(url, reconnect=False) as client:
            await open_session(client)
            status, _ = await exits(proc, signal.SIGTERM)
            assert status == 0
        async with serving(args, err) as (proc, url), \
                connect(url, reconnect=False) as client:
            await client.initialize()
            await client.subscribe(CHAT)
            await client.dispatch(CHAT, turn_started("t1", "hello"))
            await until(client, CHAT, lambda s: s.active_turn is not None)
            await asyncio.sleep(0.3)  # the resume runs, and hangs
            status, took = await exits(proc, signal.SIGTERM)
        print(f"\nhanging resume: serve exited {took:.2f} s after SIGTERM "
              f"(close timeout {CLOSE} s)")
        assert status == 0, err.read_text()

    run(main(), timeout=60)
    log = err.read_text("utf-8")
    assert (f"the agent's resume_session of {SESSION} did not end within {CLOSE:g} s"
            in log), log


@pytest.mark.parametrize("second", [signal.SIGTERM, signal.SIGINT])
def test_a_second_signal_exits_at_once_and_keeps_what_was_acknowledged(
        tmp_path: Path, second: signal.Signals) -> None:
    """With a long close timeout, the first SIGTERM waits for the stubborn turn; a second
    signal ends the process at once (status 128 + its number).  What a client was
    told before is in the store when ``serve`` starts again."""
    err = tmp_path / "serve.err"
    store = tmp_path / "store.sqlite3"
    args = ["--store", str(store), "--log-level", "info", "--agent",
            "tests.stubborn_agent:agent", "--close-timeout", "600"]

    async def main() -> None:
        async with serving(args, err) as (proc, url), \
                connect(url, reconnect=False) as client:
            await open_session(client)
            await client.dispatch(CHAT, turn_started("t1", "hello"))
            await client.wait_for_state(
                CHAT, lambda s: isinstance(s, t.ChatState) and len(s.turns) == 1,
                confirmed=True, timeout=TIMEOUT)
            await client.dispatch(CHAT, turn_started("t2", "stubborn"))
            await until(client, CHAT, working)
            proc.send_signal(signal.SIGTERM)
            await logged(err, "received SIGTERM")
            await asyncio.sleep(0.3)
            assert proc.returncode is None  # waiting for the stubborn turn
            status, took = await exits(proc, second, bound=5.0)
        print(f"\nsecond signal {second.name}: exited {took:.3f} s after it")
        assert status == 128 + second, err.read_text()
        assert "a second signal: exiting at once" in err.read_text("utf-8")
        # started again on the same store: the completed turn is there
        async with serving(args, tmp_path / "again.err") as (proc, url), \
                connect(url, reconnect=False) as client:
            await client.initialize()
            await client.subscribe(CHAT)
            state = client.state(CHAT)
            assert isinstance(state, t.ChatState)
            assert [turn.id for turn in state.turns][:1] == ["t1"]
            assert reply(state.turns[0]) == "echo: hello"
            # SIGTERM waits for the close timeout of nothing: no turn plays here
            status, _ = await exits(proc, signal.SIGTERM)
            assert status == 0

    run(main(), timeout=90)


# -- defect 1: a client's cancel of a turn that goes on -----------------------------------


def abandoning(body: Coroutine[Any, Any, None], timeout: float = 30.0) -> None:
    """Run ``body`` on a fresh loop, bounded, then leave what will not end: what
    ``asyncio.run`` does, but without waiting for ever for a task that catches its
    cancellation (the test's own end would hang, as ``serve``'s did)."""
    loop = asyncio.new_event_loop()
    try:
        task = loop.create_task(body)
        # not wait_for: it would wait for the cancelled body, which may never end
        loop.run_until_complete(asyncio.wait({task}, timeout=timeout))
        if not task.done():
            raise AssertionError(f"the test did not end within {timeout} s")
        task.result()
    finally:
        left = asyncio.all_tasks(loop)
        for task in left:
            task.cancel()
        if left:
            loop.run_until_complete(asyncio.wait(left, timeout=0.5))
        loop.close()


@asynccontextmanager
async def in_memory(close_timeout: float = 0.5,
                    limits: ServerLimits | None = None) -> AsyncIterator[AsyncClient]:
    server, service = build_agent_server(
        stubborn_agent.Stubborn(),
        ServeOptions(limits=limits or ServerLimits(), close_timeout=close_timeout), clock)
    await service.start()
    try:
        async with connected_client(server) as client:
            await open_session(client)
            yield client
    finally:
        await service.close()
        await server.close()


def test_a_cancelled_turn_that_goes_on_reaches_no_later_turn() -> None:
    """The client's cancel ends the turn on the wire at once; what the task does after it
    caught the cancellation (a stream, a title, its return) is dropped: the next turn
    of the chat, even one that took the same id, is left alone and plays normally."""

    async def main() -> None:
        async with in_memory() as client:
            await client.dispatch(CHAT, turn_started("t1", "late"))
            await until(client, CHAT, working)
            await client.dispatch(CHAT, t.ChatTurnCancelledAction(turn_id="t1", duration=0))
            state = await until(client, CHAT, lambda s: s.active_turn is None)
            assert state.turns[-1].state == t.TurnState.CANCELLED
            # a later turn with the same id, still playing when the old task goes on
            await client.dispatch(CHAT, turn_started("t1", "sulky"))
            await until(client, CHAT, working)
            await asyncio.sleep(stubborn_agent.LATE_DELAY + 0.5)
            state = await until(client, CHAT, lambda s: True)
            assert state.active_turn is not None and state.active_turn.id == "t1"
            assert reply(state.active_turn) == "working"
            session = client.state(SESSION)
            # titled by its first message, not by what the cancelled turn set later
            assert isinstance(session, t.SessionState) and session.title == "late"
            await client.dispatch(CHAT, t.ChatTurnCancelledAction(turn_id="t1", duration=0))
            await until(client, CHAT, lambda s: s.active_turn is None)
            # and the chat goes on as usual
            await client.dispatch(CHAT, turn_started("t2", "hello"))
            state = await until(client, CHAT, lambda s: s.active_turn is None
                                and s.turns[-1].id == "t2")
            assert state.turns[-1].state == t.TurnState.COMPLETE
            assert reply(state.turns[-1]) == "echo: hello"
            assert [turn.state for turn in state.turns] == [
                t.TurnState.CANCELLED, t.TurnState.CANCELLED, t.TurnState.COMPLETE]

    abandoning(main())


# -- defect 2: error texts ----------------------------------------------------------------


def test_unsendable_error_texts_end_the_turn_with_a_bounded_error(tmp_path: Path) -> None:
    """Over a real process: an exception text with a lone surrogate is repaired, one of
    20 MiB is cut to 4 KiB with a note, an error type of 20 MiB is cut; each turn
    ends with ``chat/error``, and the chat goes on."""
    err = tmp_path / "serve.err"

    async def main() -> None:
        async with serving(serve_args(), err) as (proc, url), \
                connect(url, reconnect=False) as client:
            await open_session(client)
            errors: list[t.ErrorInfo] = []
            for n, word in enumerate(["fail-surrogate", "fail-huge", "fail-type",
                                      "hello"], start=1):
                await client.dispatch(CHAT, turn_started(f"t{n}", word))
                state = await until(client, CHAT, ended(n))
                error = last_error(state)
                if word == "hello":
                    assert error is None and reply(state.turns[-1]) == "echo: hello"
                else:
                    assert error is not None, state.turns[-1]
                    assert len(error.message.encode()) <= ERROR_TEXT_LIMIT
                    errors.append(error)
            surrogate, huge, named = errors
            assert surrogate.message == "the model said \ufffd and stopped"
            assert surrogate.error_type == "RuntimeError"
            assert huge.message.startswith("xxxx")
            assert huge.message.endswith(
                f"[cut: the text was {stubborn_agent.HUGE:,} bytes]")
            assert named.message.endswith(
                f"[cut: the text was {stubborn_agent.HUGE:,} bytes]")
            assert named.error_type.startswith("T\ufffdT\ufffd")
            assert len(named.error_type) <= 200
            status, _ = await exits(proc, signal.SIGTERM)
            assert status == 0

    run(main(), timeout=120)
    log = err.read_text("utf-8", errors="replace")
    assert "could not end turn" not in log
    # two tracebacks of a 20 MiB text: each line of the log is cut, not 20 MiB long
    assert len(log) < 1024 * 1024
    assert "characters in all]" in log


def test_turn_methods_repair_lone_surrogates() -> None:
    """``Turn.stream``, ``reasoning``, ``title``, ``tool`` and a tool's ``complete`` and
    ``fail`` with lone surrogates: repaired (U+FFFD), and the turn completes."""

    async def main() -> None:
        async with in_memory() as client:
            await client.dispatch(CHAT, turn_started("t1", "surrogates"))
            state = await until(client, CHAT, lambda s: s.active_turn is None
                                and len(s.turns) == 1)
            turn = state.turns[0]
            assert turn.state == t.TurnState.COMPLETE, turn.error
            assert reply(turn) == "half an emoji: \ufffddone"
            calls = [part.tool_call for part in turn.response_parts
                     if isinstance(part, t.ToolCallResponsePart)]
            done, failed = calls
            assert isinstance(done, t.ToolCallCompletedState) and done.success
            assert isinstance(failed, t.ToolCallCompletedState) and not failed.success
            assert (done.tool_name, done.display_name) == ("tool\ufffd", "Tool \ufffd")
            assert done.intention == "to \ufffd" and done.tool_input == '{"path": "\ufffd"}'
            assert done.content == (t.ToolResultTextContent(text="out \ufffd"),)
            assert failed.error is not None and failed.error.message == "bad \ufffd"
            session = client.state(SESSION)
            assert isinstance(session, t.SessionState) and session.title == "title \ufffd"

    run(main(), timeout=60)


@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf"), 3601.0])
def test_the_close_timeout_is_checked(value: float, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="close_timeout"):
        ServeOptions(close_timeout=value)
    from agenthost_protocol.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--close-timeout", str(value), "--no-store"])
    assert exit_.value.code == 2
    assert "--close-timeout" in capsys.readouterr().err


def test_an_error_that_cannot_go_even_cut_ends_the_turn_with_a_fixed_text() -> None:
    """A host whose messages are smaller than the cut error text (3,000 bytes against
    4 KiB): the turn ends all the same, with the fixed text."""

    async def main() -> None:
        async with in_memory(limits=ServerLimits(max_message_size=3000)) as client:
            await client.dispatch(CHAT, turn_started("t1", "fail-huge"))
            state = await until(client, CHAT, ended(1))
            error = last_error(state)
            assert error is not None
            assert (error.error_type, error.message) == ("AgentError", UNSENDABLE_ERROR)
            await client.dispatch(CHAT, turn_started("t2", "hello"))
            state = await until(client, CHAT, ended(2))
            assert reply(state.turns[-1]) == "echo: hello"

    abandoning(main())
