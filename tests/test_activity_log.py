"""The activity log (``agenthost_protocol.aio.activity``) on a host core, and the redaction
of secrets (``agenthost_protocol.aio.redact``).

The host and the log run in process here (the lines, their bounds, hostile ids);
``tests/test_serve_logging.py`` reads them from real ``serve`` processes.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agenthost_protocol import types as t
from agenthost_protocol.aio import HostServer
from agenthost_protocol.aio.activity import ActivityLog, printable, shown
from agenthost_protocol.aio.memory import MemoryOpener, connected_client
from agenthost_protocol.aio.redact import RedactSecrets, redact_text, redact_url
from agenthost_protocol.host import Host

LOGGER = "agenthost_protocol.aio.activity"
SESSION = "ahp-session:/s1"
CHAT = "ahp-chat:/s1"
SECRET_TEXT = "zebra-quartz private words"
USER = t.MessageOrigin(kind=t.MessageKind.USER)


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make_host(*, max_turns: int = 4096) -> tuple[Host, ActivityLog, Clock]:
    host = Host(clock=lambda: 1_700_000_000_000)
    clock = Clock()
    activity = ActivityLog(host, max_turns=max_turns, clock=clock)
    host.observer = activity
    host.create_session(SESSION, provider="demo")
    host.ready_session(SESSION, default_chat=CHAT)
    return host, activity, clock


def started(turn_id: str = "t1") -> t.ChatTurnStartedAction:
    return t.ChatTurnStartedAction(turn_id=turn_id, started_at="2026-01-01T00:00:00.000Z",
                                   message=t.Message(text=SECRET_TEXT, origin=USER))


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


@pytest.fixture
def info(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.INFO, logger=LOGGER)
    yield caplog


def test_a_turn_with_a_tool_call_and_an_input_request(info: pytest.LogCaptureFixture) -> None:
    host, activity, clock = make_host()
    host.dispatch(CHAT, started())
    assert activity.tracked_turns == 1
    host.dispatch(CHAT, t.ChatToolCallStartAction(turn_id="t1", tool_call_id="c1",
                                                  tool_name="echo", display_name=SECRET_TEXT))
    host.dispatch(CHAT, t.ChatToolCallReadyAction(turn_id="t1", tool_call_id="c1",
                                                  invocation_message=SECRET_TEXT))
    host.dispatch(CHAT, t.ChatToolCallApprovedAction(
        turn_id="t1", tool_call_id="c1", confirmed=t.ToolCallConfirmationReason.USER_ACTION))
    host.dispatch(CHAT, t.ChatToolCallCompleteAction(
        turn_id="t1", tool_call_id="c1",
        result=t.ToolCallResult(success=False, past_tense_message=SECRET_TEXT)))
    host.dispatch(CHAT, t.ChatInputRequestedAction(request=t.ChatInputRequest(
        id="t1.ask1", message=SECRET_TEXT)))
    host.dispatch(CHAT, t.ChatInputCompletedAction(
        request_id="t1.ask1", response=t.ChatInputResponseKind.DECLINE))
    clock.now += 2.5
    host.dispatch(CHAT, t.ChatTurnCompleteAction(turn_id="t1", duration=99_000))
    host.dispose_session(SESSION)
    assert lines(info) == [
        f"session {SESSION}: created (provider demo)",
        f"session {SESSION}: turn t1 started",
        f"session {SESSION} turn t1: tool call c1 started (tool echo)",
        f"session {SESSION} turn t1: tool call c1 needs confirmation",
        f"session {SESSION} turn t1: tool call c1 approved (user-action), running",
        f"session {SESSION} turn t1: tool call c1 failed",
        f"session {SESSION} turn t1: input request t1.ask1 asked (0 questions)",
        f"session {SESSION} turn t1: input request t1.ask1 declined",
        # our own clock, not the agent's word
        f"session {SESSION}: turn t1 ended: completed after 2.50 s",
        f"session {SESSION}: disposed",
    ]
    assert activity.tracked_turns == 0


def test_cancelled_and_failed_turns_and_denied_calls(info: pytest.LogCaptureFixture) -> None:
    host, activity, clock = make_host()
    host.dispatch(CHAT, started("t1"))
    host.dispatch(CHAT, t.ChatToolCallStartAction(turn_id="t1", tool_call_id="c1",
                                                  tool_name="rm", display_name="rm"))
    host.dispatch(CHAT, t.ChatToolCallStartAction(turn_id="t1", tool_call_id="c2",
                                                  tool_name="ls", display_name="ls"))
    host.dispatch(CHAT, t.ChatToolCallDeniedAction(
        turn_id="t1", tool_call_id="c1", reason=t.ToolCallCancellationReason.DENIED))
    host.dispatch(CHAT, t.ChatInputRequestedAction(request=t.ChatInputRequest(
        id="t1.ask1", message=SECRET_TEXT)))
    clock.now += 1
    host.dispatch(CHAT, t.ChatTurnCancelledAction(turn_id="t1", duration=5))
    host.dispatch(CHAT, started("t2"))
    host.dispatch(CHAT, t.ChatErrorAction(turn_id="t2", duration=5, error=t.ErrorInfo(
        error_type="model:overloaded", message=SECRET_TEXT)))
    assert lines(info)[-8:] == [
        f"session {SESSION} turn t1: tool call c2 started (tool ls)",
        f"session {SESSION} turn t1: tool call c1 denied (denied)",
        f"session {SESSION} turn t1: input request t1.ask1 asked (0 questions)",
        f"session {SESSION} turn t1: tool call c2 cancelled (its turn ended)",
        f"session {SESSION} turn t1: input request t1.ask1 unanswered when its turn ended",
        f"session {SESSION}: turn t1 ended: cancelled after 1.00 s",
        f"session {SESSION}: turn t2 started",
        f"session {SESSION}: turn t2 ended: error (model:overloaded) after 0.00 s",
    ]
    assert not any(SECRET_TEXT in line for line in lines(info))
    assert activity.tracked_turns == 0


def test_debug_shows_every_action_type_and_channel_only(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    host, _, _ = make_host()
    host.dispatch(CHAT, started())
    host.dispatch(CHAT, t.ChatDeltaAction(turn_id="t1", part_id="p1", content=SECRET_TEXT))
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert f"session {SESSION}: action session/ready (serverSeq 3, by the host)" in debug
    assert f"session {SESSION}: action chat/delta (serverSeq 5, by the host)" in debug
    assert not any(SECRET_TEXT in line for line in lines(caplog))


def test_a_chat_of_its_own_is_named(info: pytest.LogCaptureFixture) -> None:
    host, _, _ = make_host()
    host.add_chat(SESSION, "ahp-chat:/side")
    host.dispatch("ahp-chat:/side", started())
    host.dispose_chat("ahp-chat:/side")
    assert lines(info)[-2:] == [
        f"session {SESSION} chat ahp-chat:/side: turn t1 started",
        f"session {SESSION} chat ahp-chat:/side: turn t1 ended: its chat was disposed after "
        "0.00 s",
    ]


def test_nothing_is_kept_or_formatted_above_info(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    host, activity, _ = make_host()
    host.dispatch(CHAT, started())
    assert activity.tracked_turns == 0 and not lines(caplog)


def test_the_turns_it_remembers_are_bounded(info: pytest.LogCaptureFixture) -> None:
    # a client that starts turns in ever more chats, never ending them
    host, activity, _ = make_host(max_turns=8)
    for n in range(50):
        chat = f"ahp-chat:/c{n}"
        host.add_chat(SESSION, chat)
        host.dispatch(chat, started())
        assert activity.tracked_turns <= 8
    # a forgotten turn's end still says something: the agent's duration
    host.dispatch("ahp-chat:/c0", t.ChatTurnCompleteAction(turn_id="t1", duration=1500))
    assert lines(info)[-1] == (f"session {SESSION} chat ahp-chat:/c0: turn t1 ended: "
                               "completed after 1.50 s")
    host.dispose_session(SESSION)
    assert activity.tracked_turns == 0


def test_a_chat_has_one_turn_remembered(info: pytest.LogCaptureFixture) -> None:
    host, activity, _ = make_host()
    for n in range(20):
        host.dispatch(CHAT, started(f"t{n}"))
        host.dispatch(CHAT, t.ChatTurnCancelledAction(turn_id=f"t{n}", duration=1))
    assert activity.tracked_turns == 0


@given(st.text(max_size=300))
def test_shown_and_printable_never_break_a_line(text: str) -> None:
    for out in (shown(text), printable(text)):
        assert out.isprintable()
    # cut first: a character escapes to at most 10 (\U0010ffff), plus quotes and "..."
    assert len(printable(text)) <= 10 * 200 + 3
    assert len(shown(text)) <= 10 * 80 + 5
    if text.isidentifier() and text.isascii() and len(text) <= 80:
        assert shown(text) == text


def test_hostile_ids_are_escaped(info: pytest.LogCaptureFixture) -> None:
    host, _, _ = make_host()
    host.dispatch(CHAT, started("t1\nINFO forged line\x1b[2J"))
    line = lines(info)[-1]
    assert "\n" not in line and "\x1b" not in line
    assert "\\n" in line


# -- redaction -----------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "redacted"), [
    ("ws://h/?tkn=abc", "ws://h/?tkn=REDACTED"),
    ("GET /?a=1&TKN=abc HTTP/1.1", "GET /?a=1&TKN=REDACTED HTTP/1.1"),
    ("GET /?token=abc&tkn=def HTTP/1.1", "GET /?token=REDACTED&tkn=REDACTED HTTP/1.1"),
    ("ws://h/?tkns=abc", "ws://h/?tkns=abc"),
])
def test_redact_url_knows_tkn(text: str, redacted: str) -> None:
    assert redact_url(text) == redacted


@pytest.mark.parametrize(("text", "redacted"), [
    ("< Authorization: Bearer abc.def", "< Authorization: Bearer REDACTED"),
    ("< authorization: abc", "< authorization: REDACTED"),
    ("{'Authorization': 'Bearer xyz'}", "{'Authorization': 'Bearer REDACTED'}"),
    ("[('Proxy-Authorization', 'Basic QWxh')]", "[('Proxy-Authorization', 'Basic REDACTED')]"),
    # prose naming the header holds no secret
    ("the token= of the URL, or Authorization: Bearer", "the token= of the URL, or "
                                                        "Authorization: Bearer"),
])
def test_redact_text_hides_authorization(text: str, redacted: str) -> None:
    assert redact_text(text) == redacted


def test_the_filter_covers_message_arguments_tracebacks_and_known_secrets() -> None:
    secret = "s3cr3t-value"
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(self.format(record))

    logger = logging.getLogger("agenthost_protocol.tests.redact")
    logger.propagate = False
    handler = Keep()
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.addFilter(RedactSecrets([secret]))
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        logger.info("< GET %s HTTP/1.1", f"/?token={secret}")
        logger.info("anywhere: %s", f"x{secret}y")
        logger.info("bad %d format", "not a number", secret)  # noqa: PLE1205 (on purpose)
        try:
            raise ValueError(f"refused ws://h/?tkn={secret}")
        except ValueError:
            logger.exception("failed")
        logger.info("stack", stack_info=True, extra={})
    finally:
        logger.removeHandler(handler)
    assert len(records) == 5
    assert not [line for line in records if secret in line], records
    assert "ValueError: refused ws://h/?tkn=REDACTED" in records[3]


# -- connections, through a HostServer -------------------------------------------------------


def test_a_server_logs_its_connections_and_reconnects(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="agenthost_protocol.aio")

    async def body() -> None:
        server = HostServer(Host(clock=lambda: 1_700_000_000_000))
        assert isinstance(server.host.observer, ActivityLog)
        opener = MemoryOpener(server)
        async with connected_client(server, opener=opener, reconnect=True,
                                    client_id="memory-client") as client:
            await client.initialize()
            opener.link.drop()
            for _ in range(200):  # bounded: the supervisor reconnects at once
                if len(opener.links) == 2 and client.is_open:
                    break
                await asyncio.sleep(0.02)
            await client.ping()
        await server.close()

    asyncio.run(asyncio.wait_for(body(), 30))
    server_lines = [r.getMessage() for r in caplog.records
                    if r.name == "agenthost_protocol.aio.server"]
    assert "connection #1: client memory-client initialized (protocol 0.7.0)" in server_lines
    assert [line for line in server_lines if line.startswith(
        "connection #2: client memory-client reconnected, ")], server_lines
    assert [line for line in server_lines if line.startswith(
        "connection #1 (client memory-client): closed (")], server_lines


def test_the_log_filter_cuts_a_huge_message_and_traceback() -> None:
    """An agent's exception text (or a peer's string) of megabytes makes one line of a
    bounded length: the message and the traceback are each cut with a note."""
    import logging

    from agenthost_protocol.aio.redact import MAX_LOG_TEXT, RedactSecrets

    huge = "x" * (4 * MAX_LOG_TEXT)
    try:
        raise RuntimeError(huge)
    except RuntimeError:
        record = logging.LogRecord("t", logging.ERROR, __file__, 1, "failed: %s", (huge,),
                                   sys.exc_info())
    assert RedactSecrets(["secret"]).filter(record)
    assert len(record.getMessage()) < MAX_LOG_TEXT + 100
    assert record.getMessage().endswith(f"[cut: {len('failed: ') + len(huge)} characters in all]")
    assert record.exc_text is not None and len(record.exc_text) < MAX_LOG_TEXT + 100
    assert "characters in all]" in record.exc_text
