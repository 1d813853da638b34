"""``agenthost-protocol chat TARGET [MESSAGE]``: turns with an AHP host, on a terminal.

Connects (WebSocket URL, or with ``--stdio`` a command to spawn), creates a
session (or continues one: ``--session``, ``--continue``), sends ``MESSAGE``
as a new turn of its default chat, prints the reply as it streams, asks y/n
for each tool call awaiting confirmation (or approves them all with
``--yes``), puts the agent's questions (input requests) to the user, and
exits when the turn ends.  Without ``MESSAGE`` it is a conversation: each
line read is a turn of the same session, until the end of input.

The reply (markdown) goes to stdout; reasoning, tool calls, questions and
notices go to stderr, so ``chat ... > reply.md`` keeps the reply alone.
Every string the host provides is written through
:func:`~.terminal.safe_text`: its control characters show escaped, never
act on the terminal.  Exit statuses:

====  =============================================================
0     the turn completed (or was cancelled); a conversation: the end of
      input, no turn failed
1     a turn ended in error, the host refused something, the connection
      was lost for good, or a question went unanswered (end of input, or
      a bad answer on piped input)
2     usage error
3     cannot connect (refused, bad URL, command not found ...)
4     protocol version mismatch (``-32005``)
5     timeout: nothing came for ``--timeout`` seconds while waiting for
      the host or the agent (time spent at a prompt does not count)
130   interrupted (Ctrl-C)
====  =============================================================

Whenever ``chat`` stops before the turn it started has ended (Ctrl-C, a
timeout, the end of input at a question ...), it first cancels that turn on
the host (``chat/turnCancelled``, waiting at most :data:`STOP_TIMEOUT`
seconds for the host to take it), so that no turn is left active.

:func:`run_chat` is the command's body (every output and the terminal
injectable); :func:`run_from_args` runs it from the arguments that
``agenthost-protocol chat`` parsed (the parser lives in
:mod:`agenthost_protocol.cli`, which must not import asyncio to build it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import IO, Final

from .. import types as t
from ..aio.client import (
    ActionDropped,
    ActionRejected,
    AsyncClient,
    ClientError,
    ClientTimeout,
    ConnectError,
    Connecting,
    ConnectionClosedError,
    ConnectionLost,
    DispatchedAction,
    EventStream,
    HandshakeRefused,
    ReconnectPolicy,
    Reinitialized,
    RequestError,
    Resumed,
    VersionMismatch,
    connect,
    connect_stdio,
    redact_url,
)
from ..channels import ROOT_CHANNEL
from ..errors import ProtocolError
from ..reducers._clock import iso_timestamp
from ..versions import SUPPORTED_PROTOCOL_VERSIONS
from . import questions
from .common import (
    EXIT_CONNECT,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    EXIT_VERSION,
    list_all,
    resolve_session,
)
from .common import CommandFailed as _Failed
from .terminal import safe_text

__all__ = [
    "EXIT_CONNECT",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_TIMEOUT",
    "EXIT_USAGE",
    "EXIT_VERSION",
    "MAX_LINE",
    "STOP_TIMEOUT",
    "WAIT_NOTICE_AFTER",
    "InputFn",
    "LineTooLong",
    "run_chat",
    "run_from_args",
    "terminal_input",
]

log = logging.getLogger(__name__)

PROG: Final = "agenthost-protocol chat"

MAX_LINE: Final = 64 * 1024
"""The longest line read from the user, in bytes: a longer one is refused (and skipped)."""
STOP_TIMEOUT: Final = 2.0
"""How long stopping waits for the host to take the cancel of the turn, in seconds."""
WAIT_NOTICE_AFTER: Final = 5.0
"""After this many seconds with nothing new, a line on stderr says what is waited for."""

InputFn = Callable[[str], str]
"""Asks the user: takes the prompt, returns the answer line; raises ``EOFError`` at the end
(and :class:`LineTooLong` for a line over :data:`MAX_LINE` bytes, which is skipped)."""

USER: Final = t.MessageOrigin(kind=t.MessageKind.USER)


class LineTooLong(ValueError):
    """The user's line is longer than :data:`MAX_LINE` bytes (it was read and dropped)."""


class _Lines:
    """The lines of a file descriptor, each at most :data:`MAX_LINE` bytes.

    Read with ``os.read``, not ``sys.stdin``: the reading thread may be left
    blocked at exit (Ctrl-C at a prompt), and it must not hold the lock that
    the interpreter takes to close ``sys.stdin`` then.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = bytearray()
        self._eof = False
        self._lock = threading.Lock()

    def readline(self) -> str | None:
        """The next line without its end, ``None`` at the end of input."""
        with self._lock:
            too_long = False
            while True:
                end = self._buffer.find(b"\n")
                if end >= 0 or (self._eof and self._buffer):
                    end = end if end >= 0 else len(self._buffer)
                    raw = bytes(self._buffer[:end])
                    del self._buffer[:end + 1]
                    if too_long or len(raw) > MAX_LINE:
                        raise LineTooLong(f"a line longer than {MAX_LINE} bytes")
                    return raw.decode("utf-8", "replace").removesuffix("\r")
                if self._eof:
                    if too_long:
                        raise LineTooLong(f"a line longer than {MAX_LINE} bytes")
                    return None
                if len(self._buffer) > MAX_LINE:
                    self._buffer.clear()  # the rest of this line is dropped as it comes
                    too_long = True
                chunk = os.read(self._fd, 65536)
                if chunk:
                    self._buffer += chunk
                else:
                    self._eof = True


_STDIN: Final = _Lines(0)


def terminal_input(prompt: str) -> str:
    """The default :data:`InputFn`: the prompt on stderr (stdout holds the reply), then
    a line of stdin (at most :data:`MAX_LINE` bytes)."""
    sys.stderr.write(prompt)
    sys.stderr.flush()
    line = _STDIN.readline()
    if line is None:
        raise EOFError
    return line


def _stdin_is_a_terminal() -> bool:
    try:
        return os.isatty(0)
    except OSError:
        return False


class _TurnFailed(_Failed):
    """The turn ended in error (a conversation goes on after it)."""


def _complain(err: IO[str], message: str) -> None:
    """The command's last words on ``err``; ``message`` may quote the host, so it is made safe."""
    print(f"{PROG}: {safe_text(message)}", file=err)


def _text(value: t.StringOrMarkdown | None) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else value.markdown


class _Transcript:
    """Prints a turn's response parts as they grow: markdown to ``out``, the rest to ``err``.

    It works from the chat state, not the actions, so a reconnect (even a
    snapshot) neither repeats nor loses text: each part prints what it has
    beyond what was already printed.  Markdown parts are paragraphs: one
    blank line between two, whatever newlines the agent put at the end of
    one or the start of the next (those are held back until more text of
    the same part comes).
    """

    def __init__(self, out: IO[str], err: IO[str], *, reasoning: bool) -> None:
        self._out = out
        self._err = err
        self._reasoning = reasoning
        self._printed: dict[str, int] = {}
        self._statuses: dict[str, str] = {}
        self._current: tuple[str, IO[str]] | None = None
        self._out_started = False  # something was written to out
        self._out_newlines = 0  # how many newlines end what was written to out
        self._held = 0  # newlines of the current markdown part not written yet
        self._fresh = False  # the current markdown part wrote nothing yet
        isatty = getattr(err, "isatty", None)
        self._dim = bool(isatty()) if callable(isatty) else False

    def render(self, parts: Sequence[t.ResponsePart]) -> None:
        for part in parts:
            if isinstance(part, t.MarkdownResponsePart):
                self._stream(part.id, part.content, self._out)
            elif isinstance(part, t.ReasoningResponsePart):
                if self._reasoning:
                    self._stream(part.id, part.content, self._err)
            elif isinstance(part, t.ToolCallResponsePart):
                self._tool(part.tool_call)

    def note(self, text: str) -> None:
        """A line on stderr (a tool call, a reconnect ...), on a line of its own; ``text``
        may hold host-provided strings (it is made safe here)."""
        self._end_part()
        if self._out_started and self._out_newlines == 0:
            self._write(self._out, "\n")
        self._write(self._err, safe_text(text) + "\n")

    def finish(self) -> None:
        """End the output: the last line of each stream is terminated."""
        self._end_part()
        if self._out_started and self._out_newlines == 0:
            self._write(self._out, "\n")

    def _stream(self, part_id: str, content: str, stream: IO[str]) -> None:
        new = content[self._printed.get(part_id, 0):]
        if not new:
            return
        self._printed[part_id] = len(content)
        if self._current != (part_id, stream):
            self._end_part()
            self._current = (part_id, stream)
            if stream is self._out:
                self._fresh, self._held = True, 0
            else:
                self._write(self._err, "\x1b[2m" if self._dim else "thinking: ")
        if stream is self._out:
            self._markdown(new)
        else:
            # escaped per character, so an escape sequence split across deltas is harmless too
            self._write(stream, safe_text(new))

    def _markdown(self, text: str) -> None:
        if self._fresh:
            text = text.lstrip("\n")
            if not text:
                return
            self._fresh = False
            if self._out_started:
                # a new markdown part is a new paragraph: one blank line before it
                self._write(self._out, "\n" * max(0, 2 - self._out_newlines))
        body = text.rstrip("\n")
        if body:
            self._write(self._out, "\n" * self._held + safe_text(body))
            self._held = len(text) - len(body)
        else:
            self._held += len(text)

    def _end_part(self) -> None:
        if self._current is not None and self._current[1] is self._err:
            self._write(self._err, "\x1b[0m\n" if self._dim else "\n")
        self._current = None

    def _write(self, stream: IO[str], text: str) -> None:
        # raw: only for text made safe already, or the transcript's own escapes (dimming)
        if not text:
            return
        stream.write(text)
        stream.flush()
        if stream is self._out:
            self._out_started = True
            ends = len(text) - len(text.rstrip("\n"))
            self._out_newlines = self._out_newlines + ends if ends == len(text) else ends

    def _tool(self, call: t.ToolCallState) -> None:
        if isinstance(call, t.UnknownToolCallState):
            return  # a status of a newer protocol version: nothing to say about it
        status = str(getattr(call.status, "value", call.status))
        if self._statuses.get(call.tool_call_id) == status:
            return
        self._statuses[call.tool_call_id] = status
        if isinstance(call, t.ToolCallCompletedState):
            message = _text(call.past_tense_message) if call.success else ""
            outcome = "done" if call.success else "failed"
            self.note(f"[tool {call.display_name}: {outcome}{': ' + message if message else ''}]")
        elif isinstance(call, t.ToolCallCancelledState):
            reason = getattr(call.reason, "value", call.reason)
            self.note(f"[tool {call.display_name}: cancelled ({reason})]")
        elif isinstance(call, t.ToolCallRunningState):
            self.note(f"[tool {call.display_name}: running]")


def _find_turn(state: t.ChatState, turn_id: str
               ) -> tuple[Sequence[t.ResponsePart], t.Turn | None] | None:
    """The turn's parts and, once it ended, the ended turn; ``None`` if there is no such turn."""
    active = state.active_turn
    if active is not None and active.id == turn_id:
        return active.response_parts, None
    for turn in reversed(state.turns):
        if turn.id == turn_id:
            return turn.response_parts, turn
    return None


def _is_active(client: AsyncClient, chat: str, turn_id: str) -> bool:
    if not client.is_tracked(chat):
        return False
    state = client.state(chat)
    return isinstance(state, t.ChatState) and state.active_turn is not None and (
        state.active_turn.id == turn_id)


def _open_request(client: AsyncClient, chat: str, request_id: str) -> bool:
    """Whether the chat's active turn has the request ``request_id`` still unanswered."""
    if not client.is_tracked(chat):
        return False
    state = client.state(chat)
    if not isinstance(state, t.ChatState) or state.active_turn is None:
        return False
    return any(isinstance(p, t.InputRequestResponsePart) and p.response is None
               and p.request.id == request_id for p in state.active_turn.response_parts)


def _waiting_for(state: t.SnapshotState, turn_id: str) -> str:
    """What a turn that shows nothing new waits for, in words."""
    found = _find_turn(state, turn_id) if isinstance(state, t.ChatState) else None
    if found is None:
        return "the host to start the turn"
    parts, _ = found
    for part in reversed(parts):
        if isinstance(part, t.InputRequestResponsePart):
            if part.response is None:
                return "an answer to the agent's question"
            return "the agent to go on after the answer to its question"
        if isinstance(part, t.ToolCallResponsePart):
            call = part.tool_call
            name = getattr(call, "display_name", "?")
            if isinstance(call, t.ToolCallPendingConfirmationState):
                return f"a confirmation of the tool {name}"
            if isinstance(call, t.ToolCallRunningState):
                return f"the tool {name} to finish"
            return f"the agent to go on after the tool {name}"
        if isinstance(part, (t.MarkdownResponsePart, t.ReasoningResponsePart)):
            break
    return "the agent to go on" if parts else "the agent to reply"


def _pending(parts: Sequence[t.ResponsePart], answered: set[str]
             ) -> t.ToolCallPendingConfirmationState | t.InputRequestResponsePart | None:
    """The first thing of the turn that waits for the user: a tool call to confirm, or a
    question (an input request) not answered yet."""
    for part in parts:
        if isinstance(part, t.ToolCallResponsePart) and isinstance(
            part.tool_call, t.ToolCallPendingConfirmationState
        ):
            return part.tool_call
        if isinstance(part, t.InputRequestResponsePart) and part.response is None and (
                part.request.id not in answered):
            return part
    return None


async def _ask(input_fn: InputFn, prompt: str) -> str | None:
    """``input_fn(prompt)`` on a daemon thread (the loop keeps reading meanwhile; a
    pending read never holds the process at exit); ``None`` at the end of input."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[str | None] = loop.create_future()

    def settle(answer: str | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(answer)

    def run() -> None:
        answer: str | None = None
        error: BaseException | None = None
        try:
            answer = input_fn(prompt)
        except EOFError:
            answer = None
        except BaseException as e:
            error = e
        with contextlib.suppress(RuntimeError):  # the loop is gone
            loop.call_soon_threadsafe(settle, answer, error)

    threading.Thread(target=run, name="agenthost-chat-input", daemon=True).start()
    return await future


class _Chat:
    """One run of the command."""

    def __init__(self, *, yes: bool, out: IO[str], err: IO[str], input_fn: InputFn,
                 timeout: float | None, provider: str | None, reasoning: bool,
                 interactive: bool, session: str | None = None,
                 continue_last: bool = False) -> None:
        self.yes = yes
        self.out = out
        self.err = err
        self.input_fn = input_fn
        self.timeout = timeout
        self.provider = provider
        self.reasoning = reasoning
        self.interactive = interactive
        self.session = session
        self.continue_last = continue_last
        self.transcript = _Transcript(out, err, reasoning=reasoning)
        self._answered: set[str] = set()

    async def run(self, client: AsyncClient, message: str | None) -> int:
        init = await client.initialize([ROOT_CHANNEL])
        log.info("connected to %s (protocol %s)", client.target, init.protocol_version)
        with contextlib.suppress(RequestError):
            # what the TypeScript client does after every connect; some hosts expect it
            await client.list_sessions()
        if self.session is not None:
            session = await self._find_session(client, self.session)
        elif self.continue_last:
            session = await self._latest_session(client)
        else:
            session = await client.create_session(provider=self.provider or self._first_provider(
                client))
        try:
            await client.subscribe(session)
        except RequestError as e:
            raise _Failed(EXIT_FAILED, f"cannot open the session {session}: "
                          f"{e.error.message} ({e.code})") from None
        state = await client.wait_for_state(
            session, lambda s: isinstance(s, t.SessionState)
            and s.lifecycle != t.SessionLifecycle.CREATING,
            confirmed=True, timeout=self.timeout,
        )
        assert isinstance(state, t.SessionState)
        if state.lifecycle == t.SessionLifecycle.CREATION_FAILED:
            error = state.creation_error
            raise _Failed(EXIT_FAILED, "the host could not create the session"
                          + (f": {error.message}" if error is not None else ""))
        if message is None or self.session is not None or self.continue_last:
            title = f" ({state.title})" if state.title else ""
            self.transcript.note(f"[session {session}{title}]")
        chat = state.default_chat or (state.chats[0].resource if state.chats else None)
        if chat is None:
            chat = await client.create_chat(session)
        await client.subscribe(chat)
        with client.events() as events:
            if message is not None:
                return await self._turn(client, chat, message, events)
            return await self._conversation(client, chat, events)

    async def _conversation(self, client: AsyncClient, chat: str, events: EventStream) -> int:
        """Each line a turn, until the end of input; 1 if a turn failed."""
        status = EXIT_OK
        while True:
            try:
                line = await _ask(self.input_fn, "> " if self.interactive else "")
            except LineTooLong as e:
                self.transcript.note(f"[{e}: not sent]")
                continue
            if line is None:
                if self.interactive:
                    self.err.write("\n")
                return status
            if not line.strip():
                continue
            self.transcript = _Transcript(self.out, self.err, reasoning=self.reasoning)
            try:
                await self._turn(client, chat, line, events)
            except _TurnFailed as e:
                self.transcript.finish()
                _complain(self.err, e.message)
                status = EXIT_FAILED

    @staticmethod
    async def _find_session(client: AsyncClient, name: str) -> str:
        """The session ``name`` names: its URI, or a unique prefix of its URI's last segment."""
        name = name.strip()
        if not name:
            raise _Failed(EXIT_USAGE, "--session needs a session URI (or the start of its id)")
        if ":" in name:
            return name  # taken as it is, without listing
        sessions, _cut = await list_all(client)
        return resolve_session(name, sessions)

    @staticmethod
    async def _latest_session(client: AsyncClient) -> str:
        sessions, _cut = await list_all(client)
        if not sessions:
            raise _Failed(EXIT_FAILED, "--continue: the host has no session to continue")
        return sessions[0].resource

    @staticmethod
    def _first_provider(client: AsyncClient) -> str | None:
        if not client.is_tracked(ROOT_CHANNEL):
            return None
        root = client.state(ROOT_CHANNEL)
        if isinstance(root, t.RootState) and root.agents:
            return root.agents[0].provider
        return None

    async def _turn(self, client: AsyncClient, chat: str, text: str, events: EventStream) -> int:
        turn_id = f"turn-{uuid.uuid4()}"
        self._answered = set()  # request ids are the agent's: unique within a turn only
        started = time.monotonic()
        start = t.ChatTurnStartedAction(
            turn_id=turn_id, started_at=iso_timestamp(time.time() * 1000),
            message=t.Message(text=text, origin=USER),
        )
        handle = await client.dispatch(chat, start)
        try:
            while True:
                state = client.state(chat)
                assert isinstance(state, t.ChatState)
                found = _find_turn(state, turn_id)
                handle = await self._check_start(client, chat, start, handle, found)
                if found is not None:
                    parts, ended = found
                    self.transcript.render(parts)
                    if ended is not None:
                        return self._ended(ended)
                    waiting = _pending(parts, self._answered)
                    if isinstance(waiting, t.InputRequestResponsePart):
                        await self._answer(client, chat, waiting.request)
                        continue
                    if waiting is not None:
                        await self._confirm(client, chat, turn_id, waiting)
                        continue
                await self._next_event(client, chat, turn_id, events)
        except BaseException:
            # Ctrl-C, a timeout, an unanswered question ...: the turn must not stay active
            await self._stop(client, chat, turn_id, started)
            raise

    async def _stop(self, client: AsyncClient, chat: str, turn_id: str, started: float) -> None:
        """Cancel the turn if it is still active, waiting at most :data:`STOP_TIMEOUT` s
        for the host to take it; best effort (the connection may be gone)."""
        if client.closed or not _is_active(client, chat, turn_id):
            return
        cancel = t.ChatTurnCancelledAction(
            turn_id=turn_id, duration=int((time.monotonic() - started) * 1000))
        with contextlib.suppress(Exception, asyncio.CancelledError):
            handle = await asyncio.wait_for(client.dispatch(chat, cancel, timeout=STOP_TIMEOUT),
                                            STOP_TIMEOUT)
            await asyncio.wait_for(handle.wait(), STOP_TIMEOUT)
            self.transcript.note("[the turn was cancelled]")

    async def _check_start(self, client: AsyncClient, chat: str, start: t.ChatTurnStartedAction,
                           handle: DispatchedAction, found: object) -> DispatchedAction:
        if not handle.done:
            return handle
        try:
            await handle.wait()
        except ActionRejected as e:
            raise _Failed(EXIT_FAILED, f"the host refused the message: {e.rejection.reason}"
                          ) from None
        except ActionDropped:
            if found is None:
                # the connection dropped before the host saw it: send it again
                self.transcript.note("[the message was lost with the connection: sending it "
                                     "again]")
                return await client.dispatch(chat, start)
        return handle

    async def _next_event(self, client: AsyncClient, chat: str, turn_id: str,
                          events: EventStream) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        deadline = None if self.timeout is None else now + self.timeout
        notice: float | None = now + WAIT_NOTICE_AFTER
        while True:
            limits = [x for x in (deadline, notice) if x is not None]
            until = min(limits) if limits else None
            try:
                event = await events.next(None if until is None else max(0.0, until - loop.time()))
            except ClientTimeout:
                what = _waiting_for(client.state(chat), turn_id)
                if until == deadline:
                    raise _Failed(EXIT_TIMEOUT, f"timed out after {self.timeout:g} s waiting "
                                  f"for {what}") from None
                self.transcript.note(f"[waiting for {what}]")
                notice = None
                continue
            break
        if event is None:
            if isinstance(client.close_error, HandshakeRefused):
                raise client.close_error  # a reconnect refused: exits 3 with its message
            raise ConnectionClosedError(client.close_reason or "the connection closed")
        if isinstance(event, ConnectionLost):
            self.transcript.note(f"[connection lost: {event.reason}"
                                 + ("; reconnecting]" if event.will_retry else "]"))
        elif isinstance(event, Resumed):
            self.transcript.note("[reconnected]")
        elif isinstance(event, Reinitialized):
            self.transcript.note("[reconnected: the host had forgotten this client]")
            if not client.is_tracked(chat):
                raise _Failed(EXIT_FAILED, "the chat is gone (the host restarted?)")

    async def _line(self, prompt: str) -> str | None:
        """A line from the user for ``prompt`` (made safe: it may quote the host).  Piped
        input is not echoed: it is written after the prompt, so stderr reads as a dialogue."""
        line = await _ask(self.input_fn, safe_text(prompt))
        if not self.interactive:
            self.err.write(("(end of input)" if line is None else safe_text(line)) + "\n")
            self.err.flush()
        return line

    async def _answer(self, client: AsyncClient, chat: str, request: t.ChatInputRequest) -> None:
        """Put the agent's question to the user; send ``chat/inputCompleted``."""
        self._answered.add(request.id)
        self.transcript.note("\n".join(questions.request_lines(request)))
        problem = questions.answerable(request)
        if problem is not None:
            self.transcript.note(f"  not asked: {problem}; declined")
            await self._complete(client, chat, request.id, t.ChatInputResponseKind.DECLINE)
            return
        asked = request.questions or ()
        if not asked:
            # a message (and a URL to open) with nothing to fill in: go on, or not
            while True:
                try:
                    line = await self._line(f"  accept? [y/N; {questions.CANCEL}]: ")
                except LineTooLong:
                    line = "?"
                if line is None:
                    raise _Failed(EXIT_FAILED, "end of input: the agent's question was not "
                                  "answered")
                word = line.strip().lower()
                if word in ("y", "yes"):
                    response = t.ChatInputResponseKind.ACCEPT
                elif word in ("", "n", "no", questions.DECLINE):
                    response = t.ChatInputResponseKind.DECLINE
                elif word == questions.CANCEL:
                    response = t.ChatInputResponseKind.CANCEL
                else:
                    self.transcript.note("  please answer y or n")
                    continue
                await self._complete(client, chat, request.id, response)
                return
        answers: dict[str, t.ChatInputAnswer] = {}
        for number, question in enumerate(asked, 1):
            if not _open_request(client, chat, request.id):
                self.transcript.note("  [the question was settled elsewhere]")
                return
            self.transcript.note("\n".join(questions.question_lines(question, number,
                                                                    len(asked))))
            if isinstance(question, t.UnknownChatInputQuestion):
                unknown_id = question.raw.get("id")
                if isinstance(unknown_id, str):
                    answers[unknown_id] = t.ChatInputSkipped()
                continue
            while True:
                try:
                    line = await self._line(questions.prompt_for(question))
                except LineTooLong as e:
                    problem = str(e)
                else:
                    if line is None:
                        raise _Failed(EXIT_FAILED, "end of input: the agent's question was "
                                      "not answered")
                    word = line.strip().lower()
                    if word in (questions.DECLINE, questions.CANCEL):
                        response = (t.ChatInputResponseKind.DECLINE
                                    if word == questions.DECLINE
                                    else t.ChatInputResponseKind.CANCEL)
                        await self._complete(client, chat, request.id, response)
                        return
                    try:
                        answers[question.id] = questions.parse_answer(question, line)
                        break
                    except questions.BadAnswer as e:
                        problem = str(e)
                if self.interactive:
                    self.transcript.note(f"  {problem} (or {questions.DECLINE}, "
                                         f"{questions.CANCEL})")
                    continue
                await self._complete(client, chat, request.id, t.ChatInputResponseKind.DECLINE)
                raise _Failed(EXIT_FAILED, f"no answer to the question {question.id!r}: "
                              f"{problem}; the request was declined")
        await self._complete(client, chat, request.id, t.ChatInputResponseKind.ACCEPT, answers)

    async def _complete(self, client: AsyncClient, chat: str, request_id: str,
                        response: t.ChatInputResponseKind,
                        answers: dict[str, t.ChatInputAnswer] | None = None) -> None:
        """``chat/inputCompleted``, and wait (bounded) for the host to take it."""
        if response != t.ChatInputResponseKind.ACCEPT:
            self.transcript.note(f"  {response.value}d" if response.value == "decline"
                                 else f"  {response.value}led")
        if not _open_request(client, chat, request_id):
            return  # settled meanwhile (another client, the turn ended): nothing to send
        handle = await client.dispatch(chat, t.ChatInputCompletedAction(
            request_id=request_id, response=response, answers=answers or None))
        try:
            await asyncio.wait_for(handle.wait(), self.timeout)
        except ActionRejected as e:
            raise _Failed(EXIT_FAILED, f"the host refused the answer: {e.rejection.reason}"
                          ) from None
        except ActionDropped:
            self._answered.discard(request_id)  # lost with the connection: ask again if open
        except asyncio.TimeoutError:
            raise _Failed(EXIT_TIMEOUT, f"timed out after {self.timeout:g} s waiting for the "
                          "host to take the answer") from None

    async def _confirm(self, client: AsyncClient, chat: str, turn_id: str,
                       call: t.ToolCallPendingConfirmationState) -> None:
        title = _text(call.confirmation_title) or f"Run {call.display_name}?"
        lines = [f"[tool {call.display_name}] {title}"]
        description = _text(call.invocation_message)
        if description and description != title:
            lines.append(f"  {description}")
        if isinstance(call.tool_input, str) and call.tool_input:
            lines.append(f"  input: {call.tool_input}")
        self.transcript.note("\n".join(lines))
        if self.yes:
            approved = True
            self.transcript.note("  approved (--yes)")
        else:
            approved = await self._ask_user()
        action: t.StateAction
        if approved:
            action = t.ChatToolCallApprovedAction(
                turn_id=turn_id, tool_call_id=call.tool_call_id,
                confirmed=(t.ToolCallConfirmationReason.SETTING if self.yes
                           else t.ToolCallConfirmationReason.USER_ACTION),
            )
        else:
            action = t.ChatToolCallDeniedAction(
                turn_id=turn_id, tool_call_id=call.tool_call_id,
                reason=t.ToolCallCancellationReason.DENIED,
            )
        await client.dispatch(chat, action)

    async def _ask_user(self) -> bool:
        while True:
            try:
                answer = await _ask(self.input_fn, "Allow? [y/N] ")
            except LineTooLong:
                answer = "?"
            if answer is None:
                self.transcript.note("  no answer (end of input): denied")
                return False
            choice = answer.strip().lower()
            if choice in ("y", "yes"):
                return True
            if choice in ("", "n", "no"):
                return False
            self.transcript.note("  please answer y or n")

    def _ended(self, turn: t.Turn) -> int:
        self.transcript.finish()
        state = turn.state
        if state == t.TurnState.ERROR:
            error = turn.error
            detail = f"{error.message} ({error.error_type})" if error is not None else "no details"
            raise _TurnFailed(EXIT_FAILED, f"the turn failed: {detail}")
        if state == t.TurnState.CANCELLED:
            self.transcript.note("[the turn was cancelled]")
        return EXIT_OK


async def run_chat(
    target: str,
    message: str | None,
    *,
    session: str | None = None,
    continue_last: bool = False,
    interactive: bool | None = None,
    yes: bool = False,
    out: IO[str] | None = None,
    err: IO[str] | None = None,
    input_fn: InputFn | None = None,
    timeout: float | None = 30.0,
    stdio: bool = False,
    provider: str | None = None,
    reasoning: bool = True,
    protocol_versions: Sequence[str] = SUPPORTED_PROTOCOL_VERSIONS,
    reconnect: ReconnectPolicy | None = None,
) -> int:
    """The ``chat`` command: a turn with the host at ``target``; the exit status.

    ``target`` is a ``ws://`` / ``wss://`` URL, or with ``stdio`` a command
    line (split like a shell would) to spawn, speaking JSON Lines.
    ``message`` ``None`` is a conversation: each line ``input_fn`` gives is a
    turn, until the end of input.  The session is a new one (of
    ``provider``, default the first agent of the host's root state), or
    ``session`` (a URI, or a unique start of the last segment of one that
    ``listSessions`` gives), or with ``continue_last`` the session changed
    last.  ``input_fn`` asks y/n and the agent's questions (default
    :func:`terminal_input`); ``interactive`` says whether it is a person at
    a terminal, who is asked again after a bad answer (default: stdin is a
    terminal and ``input_fn`` is the default); otherwise a bad answer
    declines the request and ends the command.  ``yes`` approves every tool
    call without asking (it answers no question).  ``timeout`` is the
    longest wait for the host or the agent, in seconds (time spent
    answering a prompt does not count).  ``reconnect`` defaults to 5 quick
    attempts.
    """
    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr
    if interactive is None:
        interactive = input_fn is None and _stdin_is_a_terminal()
    chat = _Chat(yes=yes, out=out, err=err,
                 input_fn=input_fn if input_fn is not None else terminal_input,
                 timeout=timeout, provider=provider, reasoning=reasoning,
                 interactive=interactive, session=session, continue_last=continue_last)
    policy = reconnect if reconnect is not None else ReconnectPolicy(
        initial_delay=0.2, max_delay=2.0, max_attempts=5,
        connect_timeout=timeout or 10.0, handshake_timeout=timeout or 10.0,
    )
    connecting: Connecting
    if stdio:
        import shlex  # noqa: PLC0415  # --stdio only

        try:
            command = shlex.split(target)
        except ValueError as e:
            _complain(err, f"cannot parse the command {redact_url(target)!r}: {e}")
            return EXIT_USAGE
        if not command:
            _complain(err, "--stdio needs a command to run")
            return EXIT_USAGE
        connecting = connect_stdio(command, request_timeout=timeout,
                                   protocol_versions=protocol_versions, reconnect=False)
    else:
        if not target.startswith(("ws://", "wss://")):
            _complain(err, f"{redact_url(target)!r} is not a ws:// or wss:// URL (use --stdio "
                           "to run a host command)")
            return EXIT_USAGE
        try:
            connecting = connect(target, request_timeout=timeout,
                                 protocol_versions=protocol_versions, reconnect=policy,
                                 open_timeout=timeout)
        except ValueError as e:  # an AHP_TOKEN no header can carry
            _complain(err, str(e))
            return EXIT_USAGE
    try:
        async with connecting as client:
            return await chat.run(client, message)
    except _Failed as e:
        chat.transcript.finish()
        _complain(err, e.message)
        return e.status
    except ConnectError as e:
        _complain(err, str(e))
        return EXIT_CONNECT
    except VersionMismatch as e:
        _complain(err, str(e))
        return EXIT_VERSION
    except ClientTimeout as e:
        chat.transcript.finish()
        _complain(err, f"timed out: {e}")
        return EXIT_TIMEOUT
    except RequestError as e:
        chat.transcript.finish()
        _complain(err, f"the host refused {e.method}: {e.error.message} ({e.code})")
        return EXIT_FAILED
    except (ClientError, ProtocolError) as e:
        chat.transcript.finish()
        _complain(err, str(e))
        return EXIT_FAILED


# -- the command line ---------------------------------------------------------------------


class _SafeFormatter(logging.Formatter):
    """Log records quote the host (a close reason, a protocol violation ...) and go to the
    same terminal as the chat: made safe like the rest."""

    def format(self, record: logging.LogRecord) -> str:
        return safe_text(super().format(record))


def run_from_args(args: argparse.Namespace) -> int:
    """Run the command from the arguments ``agenthost-protocol chat`` parsed; the exit status."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_SafeFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=getattr(logging, str(args.log_level).upper()), handlers=[handler])
    try:
        return asyncio.run(run_chat(
            args.target, args.message, yes=args.yes, stdio=args.stdio, timeout=args.timeout,
            provider=args.provider, reasoning=not args.no_reasoning, session=args.session,
            continue_last=args.continue_last,
        ))
    except KeyboardInterrupt:
        print(f"\n{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
