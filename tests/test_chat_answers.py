"""``agenthost-protocol chat`` as a person uses it: real ``serve`` and ``chat`` processes.

The agent's questions (``examples/ask.py``: one of each kind) answered on a
pseudo-terminal and through piped input, declined and cancelled; Ctrl-C, a
timeout and the end of input each leave no active turn on the host (a second
client looks); ``--session`` and ``--continue`` add turns to one session; a
conversation (no MESSAGE); one blank line between the parts of a reply.
Every wait is bounded; every process is killed if need be and reaped.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pty
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("websockets")

from agenthost_protocol import types as t
from agenthost_protocol.agent.demo import APPROVED_TEXT
from agenthost_protocol.aio.client import connect
from agenthost_protocol.cli.chat import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TIMEOUT,
)

from ._aio_peer import child_env, serve_command

TIMEOUT = 20.0
ASK = "examples.ask:agent"

# what examples/ask.py reports for the answers of PIPED
PIPED = b"Ada\n4\n0.5\nn\n3\n1,3\n"
REPORT = ("Before I make the tea, a few questions.\n\nYou answered:\n\n"
          "- What should I call you? 'Ada'\n- How many cups of tea today? 4\n"
          "- Spoons of sugar per cup? 0.5\n- Milk? no\n- Which tea? Mint\n"
          "- Anything with it? Biscuits, Scones\n")


def chat_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "agenthost_protocol.cli", "chat", *args]


def _read_line(fd: int, timeout: float) -> bytes:
    deadline = time.monotonic() + timeout
    data = b""
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        ready, _, _ = select.select([fd], [], [], max(0.0, left))
        if not ready:
            raise AssertionError(f"no line within {timeout} s (got {data!r})")
        chunk = os.read(fd, 1)
        if not chunk:
            break
        data += chunk
    return data


def _reap(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(TIMEOUT)


@contextlib.contextmanager
def serving(tmp_path: Path, *args: str) -> Iterator[str]:
    """``serve --port 0 --no-store ARGS`` in a subprocess; its URL.  Stopped and reaped on
    the way out."""
    with open(tmp_path / "serve.log", "wb") as log:
        proc = subprocess.Popen(serve_command("--port", "0", "--no-store", *args),
                                stdout=subprocess.PIPE, stderr=log, env=child_env())
        try:
            assert proc.stdout is not None
            line = _read_line(proc.stdout.fileno(), TIMEOUT)
            assert line.startswith(b"serving ws://"), (line, (tmp_path / "serve.log").read_text())
            yield line.split()[1].decode()
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(TIMEOUT)
                except subprocess.TimeoutExpired:
                    proc.kill()
            _reap(proc)
            if proc.stdout is not None:
                proc.stdout.close()


def piped(url: str, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    """``chat URL ARGS`` with ``stdin`` piped in."""
    return subprocess.run(chat_command(url, *args), input=stdin, capture_output=True,
                          env=child_env(), timeout=2 * TIMEOUT, check=False)


class Terminal:
    """``chat`` on a pseudo-terminal: stdin, stdout and stderr, as in a terminal window."""

    def __init__(self, *args: str) -> None:
        master, slave = pty.openpty()
        self.master = master
        self.output = b""
        self._seen = 0
        try:
            self.proc = subprocess.Popen(chat_command(*args), stdin=slave, stdout=slave,
                                         stderr=slave, env=child_env(), close_fds=True)
        finally:
            os.close(slave)

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return True
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # EIO: every holder of the other end closed it
            return False
        if not chunk:
            return False
        self.output += chunk
        return True

    @property
    def text(self) -> str:
        """What the terminal shows (its line ends as written)."""
        return self.output.decode("utf-8", "replace").replace("\r\n", "\n")

    def expect(self, text: str, timeout: float = TIMEOUT) -> None:
        """Wait until ``text`` shows after what the last ``expect`` matched."""
        deadline = time.monotonic() + timeout
        want = text.encode()
        while True:
            shown = self.output.replace(b"\r\n", b"\n")
            at = shown.find(want, self._seen)
            if at >= 0:
                self._seen = at + len(want)
                return
            left = deadline - time.monotonic()
            if left <= 0 or not self._read(min(left, 0.2)):
                raise AssertionError(f"{text!r} not shown within {timeout} s:\n{self.text}")

    def type(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\n")

    def wait(self, timeout: float = TIMEOUT) -> int:
        """The exit status (the output read to the end)."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            self._read(0.1)
        while self._read(0.05) and self.proc.poll() is None:
            pass
        with contextlib.suppress(OSError):
            while self._read(0.05):
                if not select.select([self.master], [], [], 0)[0]:
                    break
        status = self.proc.wait(max(0.1, deadline - time.monotonic()))
        return status

    def close(self) -> None:
        _reap(self.proc)
        os.close(self.master)


@contextlib.contextmanager
def terminal(*args: str) -> Iterator[Terminal]:
    term = Terminal(*args)
    try:
        yield term
    finally:
        term.close()


def host_chats(url: str) -> list[t.ChatState]:
    """Every session's default chat, as a second client sees it."""
    async def body() -> list[t.ChatState]:
        async with connect(url, reconnect=False, request_timeout=TIMEOUT,
                           chat_view_turns=None) as client:
            await client.initialize(["ahp-root://"])
            states: list[t.ChatState] = []
            for summary in (await client.list_sessions()).items:
                snapshot = await client.subscribe(summary.resource)
                assert snapshot is not None and isinstance(snapshot.state, t.SessionState)
                assert snapshot.state.default_chat is not None
                chat = await client.subscribe(snapshot.state.default_chat)
                assert chat is not None and isinstance(chat.state, t.ChatState)
                states.append(chat.state)
            return states

    return asyncio.run(asyncio.wait_for(body(), TIMEOUT))


def assert_no_active_turn(url: str, outcome: t.TurnState = t.TurnState.CANCELLED) -> None:
    (chat,) = host_chats(url)
    assert chat.active_turn is None
    assert chat.turns and chat.turns[-1].state == outcome


# -- the agent's questions ------------------------------------------------------------------


def test_every_kind_of_question_answered_on_a_terminal(tmp_path: Path) -> None:
    with serving(tmp_path, "--agent", ASK) as url, terminal(url, "ask me") as term:
        term.expect("[the agent asks] Tea time\n  (1/6) Name: What should I call you?\n"
                    "  answer [at most 80 characters; default: friend]: ")
        term.type("")  # the default
        term.expect("(2/6) How many cups of tea today?\n  whole number [0-20; default: 2]: ")
        term.type("two and a half")  # refused, asked again
        term.expect("  a whole number, please (or /decline, /cancel)\n"
                    "  whole number [0-20; default: 2]: ")
        term.type("21")
        term.expect("  at most 20, please")
        term.type("4")
        term.expect("(3/6) Spoons of sugar per cup? (required)\n  number [0-5]: ")
        term.type("")
        term.expect("  an answer is required")
        term.type("1.5")
        term.expect("(4/6) Milk?\n  Y/n: ")
        term.type("no")
        term.expect("(5/6) Which tea?\n    1) Green\n    2) Black (recommended) - strong\n"
                    "    3) Mint\n  choose 1-3 [or type your own; default: 2]: ")
        term.type("Earl Grey")  # free-form
        term.expect("(6/6) Anything with it?\n    1) Biscuits\n    2) Cake\n    3) Scones\n"
                    "  choose, comma-separated [how many: at least 1]: ")
        term.type("cake, 3")
        assert term.wait() == EXIT_OK, term.text
        assert ("You answered:\n\n- What should I call you? 'friend'\n"
                "- How many cups of tea today? 4\n- Spoons of sugar per cup? 1.5\n- Milk? no\n"
                "- Which tea? 'Earl Grey'\n- Anything with it? Cake, Scones\n") in term.text
        assert "\x1b" not in term.text
        assert_no_active_turn(url, t.TurnState.COMPLETE)


def test_every_kind_of_question_answered_by_piped_lines(tmp_path: Path) -> None:
    with serving(tmp_path, "--agent", ASK) as url:
        result = piped(url, "ask me", stdin=PIPED)
        assert result.returncode == EXIT_OK, result.stderr
        assert result.stdout.decode() == REPORT  # one blank line between the parts
        err = result.stderr.decode()
        # each answer is written after its prompt: stderr reads as the dialogue
        assert "  answer [at most 80 characters; default: friend]: Ada\n" in err
        assert "  choose, comma-separated [how many: at least 1]: 1,3\n" in err


def test_a_question_declined_or_cancelled(tmp_path: Path) -> None:
    with serving(tmp_path, "--agent", ASK) as url:
        result = piped(url, "ask me", stdin=b"Ada\n/decline\n")
        assert result.returncode == EXIT_OK, result.stderr
        assert result.stdout.decode().endswith("No tea, then (you chose to decline).\n")
        assert b"  declined\n" in result.stderr
        with terminal(url, "ask me") as term:
            term.expect("default: friend]: ")
            term.type("/cancel")
            term.expect("  cancelled")
            assert term.wait() == EXIT_OK, term.text
            assert "No tea, then (you chose to cancel)." in term.text
        for chat in host_chats(url):
            assert chat.active_turn is None
            assert [turn.state for turn in chat.turns] == [t.TurnState.COMPLETE]


def test_a_bad_piped_answer_declines_and_exits_1(tmp_path: Path) -> None:
    with serving(tmp_path, "--agent", ASK) as url:
        result = piped(url, "ask me", stdin=b"Ada\nmany\n4\n")
        assert result.returncode == EXIT_FAILED, result.stderr
        assert result.stderr.decode().endswith(
            "agenthost-protocol chat: no answer to the question 'cups': a whole number, "
            "please; the request was declined\n")
        # the agent got the decline, and the turn ended (it answered the decline)
        (chat,) = host_chats(url)
        assert chat.active_turn is None


def test_yes_answers_no_question(tmp_path: Path) -> None:
    with serving(tmp_path, "--agent", ASK) as url:
        result = piped(url, "ask me", "--yes")  # nothing on stdin
        assert result.returncode == EXIT_FAILED, result.stderr
        assert result.stderr.decode().endswith(
            "agenthost-protocol chat: end of input: the agent's question was not answered\n")
        assert_no_active_turn(url)


# -- stopping early leaves no turn active -----------------------------------------------------


def test_ctrl_c_at_a_question_cancels_the_turn_and_exits_130(tmp_path: Path) -> None:
    with serving(tmp_path, "--agent", ASK) as url, terminal(url, "ask me") as term:
        term.expect("default: friend]: ")
        term.proc.send_signal(signal.SIGINT)
        assert term.wait() == EXIT_INTERRUPTED, term.text
        assert "[the turn was cancelled]\n\nagenthost-protocol chat: interrupted" in term.text
        assert_no_active_turn(url)


def test_ctrl_c_while_the_agent_works_cancels_the_turn(tmp_path: Path) -> None:
    with serving(tmp_path, "--step-delay", "0.5") as url, terminal(url, "hello", "--yes") as term:
        term.expect("You said:")
        term.proc.send_signal(signal.SIGINT)
        assert term.wait() == EXIT_INTERRUPTED, term.text
        assert_no_active_turn(url)


def test_a_timeout_cancels_the_turn_and_says_what_it_waited_for(tmp_path: Path) -> None:
    with serving(tmp_path, "--step-delay", "5") as url:
        result = piped(url, "hello", "--yes", "--timeout", "0.5")
        assert result.returncode == EXIT_TIMEOUT, result.stderr
        assert result.stderr.decode().endswith(
            "[the turn was cancelled]\nagenthost-protocol chat: timed out after 0.5 s waiting "
            "for the agent to reply\n")
        assert_no_active_turn(url)


def test_the_time_spent_answering_does_not_count_against_the_timeout(tmp_path: Path) -> None:
    with serving(tmp_path, "--agent", ASK) as url, terminal(url, "ask me", "--timeout",
                                                            "0.5") as term:
        term.expect("default: friend]: ")
        time.sleep(1.5)  # thinking, three times --timeout
        for answer in ("Ada", "4", "0.5", "n", "3"):
            term.type(answer)
            term.expect(": ")
        time.sleep(1.0)
        term.type("1,3")
        assert term.wait() == EXIT_OK, term.text
        assert "- Anything with it? Biscuits, Scones" in term.text


# -- sessions and conversations ---------------------------------------------------------------


def test_session_and_continue_add_turns_to_the_same_session(tmp_path: Path) -> None:
    with serving(tmp_path, "--step-delay", "0") as url:
        first = piped(url, "one", "--yes", "--no-reasoning")
        assert first.returncode == EXIT_OK, first.stderr
        assert first.stdout.decode().endswith(f"{APPROVED_TEXT}\n")
        again = subprocess.run(chat_command(url, "--continue", "two", "--yes"),
                               capture_output=True, env=child_env(), timeout=2 * TIMEOUT,
                               check=False)  # the options before MESSAGE, as usual
        assert again.returncode == EXIT_OK, again.stderr
        (chat,) = host_chats(url)
        assert [turn.message.text for turn in chat.turns] == ["one", "two"]
        # the session it continued is named on stderr: by that URI, and by a prefix of its id
        session = again.stderr.decode().split("[session ", 1)[1].split()[0].rstrip("]")
        assert session.startswith("ahp-session:/")
        by_uri = subprocess.run(chat_command(url, "--session", session, "three", "--yes"),
                                capture_output=True, env=child_env(), timeout=2 * TIMEOUT,
                                check=False)
        assert by_uri.returncode == EXIT_OK, by_uri.stderr
        prefix = session.rsplit("/", 1)[1][:8]
        by_prefix = piped(url, "four", "--yes", "--session", prefix)
        assert by_prefix.returncode == EXIT_OK, by_prefix.stderr
        (chat,) = host_chats(url)
        assert [turn.message.text for turn in chat.turns] == ["one", "two", "three", "four"]
        assert all(turn.state == t.TurnState.COMPLETE for turn in chat.turns)
        # a session the host does not have: a clear refusal
        missing = piped(url, "five", "--session", "zzz-no-such")
        assert missing.returncode == EXIT_FAILED
        assert b"no session's URI ends in a segment starting with 'zzz-no-such'" in missing.stderr
        unknown = piped(url, "five", "--session", "ahp-session:/no-such")
        assert unknown.returncode == EXIT_FAILED
        assert b"cannot open the session ahp-session:/no-such" in unknown.stderr
        assert len(host_chats(url)) == 1


def test_continue_takes_the_session_changed_last(tmp_path: Path) -> None:
    with serving(tmp_path, "--step-delay", "0") as url:
        for text in ("first session", "second session"):
            assert piped(url, text, "--yes").returncode == EXIT_OK
        assert piped(url, "more", "--yes", "--continue").returncode == EXIT_OK
        texts = sorted([turn.message.text for turn in chat.turns] for chat in host_chats(url))
        assert texts == [["first session"], ["second session", "more"]]
        empty_host = tmp_path / "empty"
        empty_host.mkdir()
    with serving(empty_host) as url:
        result = piped(url, "hi", "--continue")
        assert result.returncode == EXIT_FAILED
        assert b"--continue: the host has no session to continue" in result.stderr


def test_a_conversation_from_piped_lines(tmp_path: Path) -> None:
    with serving(tmp_path, "--step-delay", "0") as url:
        # a line over 64 KiB is refused, not sent, and the next line is read as usual
        stdin = b"hello\n\n" + b"x" * (65 * 1024) + b"\nworld\n"
        result = piped(url, "--yes", "--no-reasoning", stdin=stdin)
        assert result.returncode == EXIT_OK, result.stderr
        assert b"[a line longer than 65536 bytes: not sent]" in result.stderr
        assert result.stdout.decode().count(APPROVED_TEXT) == 2
        (chat,) = host_chats(url)
        assert [turn.message.text for turn in chat.turns] == ["hello", "world"]


def test_a_conversation_on_a_terminal(tmp_path: Path) -> None:
    with serving(tmp_path, "--step-delay", "0") as url, terminal(url) as term:
        term.expect("[session ahp-session:/")
        term.expect("> ")
        term.type("hello")
        term.expect("Allow? [y/N] ")
        term.type("y")
        term.expect(APPROVED_TEXT)
        term.expect("> ")
        term.type("again")
        term.expect("Allow? [y/N] ")
        term.type("n")
        term.expect("> ")
        os.write(term.master, b"\x04")  # Ctrl-D: the end of input
        assert term.wait() == EXIT_OK, term.text
        (chat,) = host_chats(url)
        assert [turn.message.text for turn in chat.turns] == ["hello", "again"]
        assert chat.active_turn is None


def test_reply_parts_are_one_blank_line_apart(tmp_path: Path) -> None:
    # reverse.py streams its words, runs a tool, then streams "\n\nEchoed."
    with serving(tmp_path, "--agent", "examples.reverse:agent") as url:
        result = piped(url, "one two three", "--yes")
        assert result.returncode == EXIT_OK, result.stderr
        assert result.stdout.decode() == "three two one \n\nEchoed.\n"
