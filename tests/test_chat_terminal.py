"""A safe terminal: ``agenthost-protocol chat`` never writes a control character a host sent.

Unit and property tests of :func:`~agenthost_protocol.cli.terminal.safe_text`,
then a hostile host (the demo host, its turns played by a script full of
escape sequences) against :func:`run_chat` in-process and against the
command in a subprocess, whose stdout and stderr bytes are checked.  Every
wait is bounded and the subprocess is killed and reaped whatever happens.
"""

from __future__ import annotations

import asyncio
import io
import logging
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("websockets")

from agenthost_protocol import types as t
from agenthost_protocol.cli.chat import EXIT_FAILED, _SafeFormatter, run_chat
from agenthost_protocol.cli.terminal import safe_text
from agenthost_protocol.host import ClientActionApplied
from agenthost_protocol.host import Event as HostEvent

from ._aio_hosts import TIMEOUT, DemoHost, demo_host, run
from ._aio_peer import child_env

# Spelled out here rather than taken from the module, so that the tests hold it to the issue.
C0 = frozenset(range(0x20)) - {0x09, 0x0A}
C1 = frozenset(range(0x80, 0xA0))
BIDI = frozenset([0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)])
FORBIDDEN = C0 | {0x7F} | C1 | BIDI


def escaped(code: int) -> str:
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def controls_in(text: str) -> list[str]:
    return [c for c in text if ord(c) in FORBIDDEN]


# -- the function ---------------------------------------------------------------------------


@pytest.mark.parametrize("code", sorted(C0), ids=hex)
def test_c0_controls_are_escaped(code: int) -> None:
    assert safe_text(f"a{chr(code)}b") == f"a\\x{code:02x}b"


def test_escape_sequences_lose_their_esc() -> None:
    assert safe_text("\x1b]52;c;ZXZpbA==\x07") == "\\x1b]52;c;ZXZpbA==\\x07"
    assert safe_text("\x1b[2J\x1b[H") == "\\x1b[2J\\x1b[H"
    assert safe_text("\x1b]0;pwned\x1b\\") == "\\x1b]0;pwned\\x1b\\"
    assert safe_text("Allow? [y/N] \ry") == "Allow? [y/N] \\x0dy"


def test_del_and_c1_controls_are_escaped() -> None:
    assert safe_text("\x7f") == "\\x7f"
    # 0x9B is a one-character CSI on terminals that read C1 controls
    assert safe_text("\x9b2J\x9d0;t\x9c") == "\\x9b2J\\x9d0;t\\x9c"
    for code in C1:
        assert safe_text(chr(code)) == f"\\x{code:02x}"


@pytest.mark.parametrize("code", sorted(BIDI), ids=hex)
def test_bidi_controls_are_escaped(code: int) -> None:
    assert safe_text(f"rm -rf {chr(code)}gpj.txt") == f"rm -rf \\u{code:04x}gpj.txt"


def test_plain_text_is_returned_as_is() -> None:
    for text in ("", "hello", "line 1\nline 2\n\tindented", "back\\slash \\x1b stays",
                 "emoji 🎉 👨‍👩‍👧 (ZWJ kept)", "日本語のテキスト", "한국어", "עברית ومرحبا",
                 "\xa0non-breaking\u2028separator", "~ \x20 \u00ff \u2070 \ufeff"):
        assert safe_text(text) is text


def test_only_the_controls_change_in_mixed_text() -> None:
    assert safe_text("日本\x1b[31m🎉\u202eok\n\t") == "日本\\x1b[31m🎉\\u202eok\n\t"


characters = st.one_of(st.characters(), st.sampled_from(sorted(chr(c) for c in FORBIDDEN)))


@given(st.text(characters))
def test_the_output_never_holds_a_control(text: str) -> None:
    result = safe_text(text)
    assert controls_in(result) == []
    assert result == "".join(escaped(ord(c)) if ord(c) in FORBIDDEN else c for c in text)


@given(st.text(st.characters().filter(lambda c: ord(c) not in FORBIDDEN)))
def test_text_without_controls_is_unchanged(text: str) -> None:
    assert safe_text(text) is text


@given(st.text(characters), st.text(characters))
def test_pieces_made_safe_one_by_one_are_the_whole_made_safe(a: str, b: str) -> None:
    # what makes streamed deltas safe: an escape sequence cut in two is escaped all the same
    assert safe_text(a) + safe_text(b) == safe_text(a + b)


def test_the_commands_log_lines_are_made_safe() -> None:
    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "%s: closed (%s)",
                               ("ws://h", "bye\x1b]0;pwned\x07"), None)
    line = _SafeFormatter("%(levelname)s %(message)s").format(record)
    assert line == "WARNING ws://h: closed (bye\\x1b]0;pwned\\x07)"


# -- a hostile host ---------------------------------------------------------------------------

OSC52 = "\x1b]52;c;ZXZpbA==\x07"  # writes "evil" to the clipboard
CLEAR = "\x1b[2J"
RETITLE = "\x1b]0;pwned\x07"
RLO = "\u202e"
UP = "\x1b[1A\r"  # back over the previous line
NAME = f"Evil{RETITLE}"
ESCAPED = ("\\x1b]52;c;ZXZpbA==\\x07", "\\x1b[2J", "\\x1b]0;pwned\\x07", "\\u202e", "\\x0d")


def hostile(demo: DemoHost, event: HostEvent) -> bool:
    """Plays every turn with escape sequences in every string the chat shows; the reply's
    ``ESC [2J`` is cut between two deltas, one before the prompt and one after it."""
    if not isinstance(event, ClientActionApplied):
        return False
    chat, action = event.envelope.channel, event.envelope.action
    call_id = "evil.call"
    if isinstance(action, t.ChatTurnStartedAction):
        turn = action.turn_id
        (session,) = [c for c in demo.host.channels if c.startswith("ahp-session:/")]
        demo.host.dispatch(session, t.SessionTitleChangedAction(title=f"{RETITLE}title"))
        for step in (
            t.ChatResponsePartAction(turn_id=turn, part=t.ReasoningResponsePart(
                id="evil.reasoning", content=f"thinking {OSC52} hard{RLO}")),
            t.ChatResponsePartAction(turn_id=turn, part=t.MarkdownResponsePart(
                id="evil.reply", content="")),
            t.ChatDeltaAction(turn_id=turn, part_id="evil.reply",
                              content=f"Hello {OSC52}\r\x1b"),
            t.ChatToolCallStartAction(turn_id=turn, tool_call_id=call_id, tool_name="evil",
                                      display_name=NAME),
            t.ChatToolCallReadyAction(
                turn_id=turn, tool_call_id=call_id,
                invocation_message=f"Reads a file{UP}[tool Echo] Run the echo tool?",
                tool_input=f"rm -rf ~ {RLO}txt.eman\x9b2J",
                confirmation_title=f"Run it?{CLEAR}",
            ),
        ):
            demo.host.dispatch(chat, step)
        return True
    if isinstance(action, (t.ChatToolCallApprovedAction, t.ChatToolCallDeniedAction)):
        turn = action.turn_id
        if isinstance(action, t.ChatToolCallApprovedAction):
            demo.host.dispatch(chat, t.ChatToolCallCompleteAction(
                turn_id=turn, tool_call_id=call_id,
                result=t.ToolCallResult(success=True, past_tense_message=f"Did it{CLEAR}"),
            ))
        demo.host.dispatch(chat, t.ChatDeltaAction(turn_id=turn, part_id="evil.reply",
                                                   content=f"[2J world{RLO}\x7f\n"))
        demo.host.dispatch(chat, t.ChatErrorAction(turn_id=turn, duration=5, error=t.ErrorInfo(
            error_type=f"bad{RLO}", message=f"it broke{RETITLE}{UP}")))
        return True
    return False


def test_run_chat_shows_a_hostile_hosts_text_escaped() -> None:
    prompts: list[str] = []

    def terminal(prompt: str) -> str:
        prompts.append(prompt)
        return "y"

    async def body() -> None:
        async with demo_host(intercept=hostile) as demo:
            out, err = io.StringIO(), io.StringIO()
            status = await run_chat(demo.url, "hi", out=out, err=err, input_fn=terminal,
                                    timeout=TIMEOUT)
        assert status == EXIT_FAILED, err.getvalue()
        assert controls_in(out.getvalue()) == []
        assert controls_in(err.getvalue()) == []
        # the reply resumes after the tool call's lines as a new paragraph
        assert out.getvalue() == ("Hello \\x1b]52;c;ZXZpbA==\\x07\\x0d\\x1b\n\n[2J world"
                                  "\\u202e\\x7f\n")
        lines = err.getvalue().splitlines()
        assert lines[0] == "thinking: thinking \\x1b]52;c;ZXZpbA==\\x07 hard\\u202e"
        assert lines[1:5] == [
            "[tool Evil\\x1b]0;pwned\\x07] Run it?\\x1b[2J",
            "  Reads a file\\x1b[1A\\x0d[tool Echo] Run the echo tool?",
            "  input: rm -rf ~ \\u202etxt.eman\\x9b2J",
            "[tool Evil\\x1b]0;pwned\\x07: running]",
        ]
        assert lines[-1] == ("agenthost-protocol chat: the turn failed: "
                             "it broke\\x1b]0;pwned\\x07\\x1b[1A\\x0d (bad\\u202e)")
        assert prompts == ["Allow? [y/N] "]  # the prompt chat writes itself, as it was

    run(body())


def test_the_chat_command_writes_no_control_a_hostile_host_sent() -> None:
    async def body() -> None:
        async with demo_host(intercept=hostile) as demo:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "agenthost_protocol.cli", "chat", demo.url, "hi",
                "--timeout", str(TIMEOUT), "--log-level", "info",
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=child_env(),
            )
            try:
                out, err = await asyncio.wait_for(proc.communicate(b"n\n"), TIMEOUT)
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await asyncio.wait_for(proc.wait(), TIMEOUT)
        assert proc.returncode == EXIT_FAILED, err
        for raw in (b"\x1b", b"\x07", b"\r", b"\x7f", "\x9b".encode(), RLO.encode()):
            assert raw not in out and raw not in err, raw
        text = out.decode() + err.decode()
        assert controls_in(text) == []
        for form in ESCAPED:
            assert form in text, form
        assert out.endswith(b"\\x1b\n\n[2J world\\u202e\\x7f\n")  # ESC cut from its "[2J"
        assert b"Allow? [y/N] " in err
        assert b"[tool Evil\\x1b]0;pwned\\x07: cancelled (denied)]" in err
        assert b"the turn failed: it broke\\x1b]0;pwned\\x07" in err
        assert b"INFO agenthost_protocol.cli.chat: connected to ws://" in err

    run(body())
