"""``agenthost-protocol chat TARGET MESSAGE``: one turn with an AHP host, on a terminal.

Connects (WebSocket URL, or with ``--stdio`` a command to spawn), creates a
session, sends ``MESSAGE`` as a new turn of its default chat, prints the
reply as it streams, asks y/n for each tool call awaiting confirmation (or
approves them all with ``--yes``), and exits when the turn ends.

The reply (markdown) goes to stdout; reasoning, tool calls and notices go to
stderr, so ``chat ... > reply.md`` keeps the reply alone.  Every string the
host provides is written through :func:`~.terminal.safe_text`: its control
characters show escaped, never act on the terminal.  Exit statuses:

====  =============================================================
0     the turn completed (or was cancelled)
1     the turn ended in error, or the host refused something, or the
      connection was lost for good
2     usage error
3     cannot connect (refused, bad URL, command not found ...)
4     protocol version mismatch (``-32005``)
5     timeout: the host said nothing for ``--timeout`` seconds
130   interrupted (Ctrl-C; the turn is cancelled first, best effort)
====  =============================================================

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
from .terminal import safe_text

__all__ = [
    "EXIT_CONNECT",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_TIMEOUT",
    "EXIT_USAGE",
    "EXIT_VERSION",
    "InputFn",
    "run_chat",
    "run_from_args",
    "terminal_input",
]

log = logging.getLogger(__name__)

PROG: Final = "agenthost-protocol chat"

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_CONNECT: Final = 3
EXIT_VERSION: Final = 4
EXIT_TIMEOUT: Final = 5
EXIT_INTERRUPTED: Final = 130

InputFn = Callable[[str], str]
"""Asks the user: takes the prompt, returns the answer line; raises ``EOFError`` at the end."""

USER: Final = t.MessageOrigin(kind=t.MessageKind.USER)


def terminal_input(prompt: str) -> str:
    """The default :data:`InputFn`: the prompt on stderr (stdout holds the reply), then
    a line of stdin."""
    sys.stderr.write(prompt)
    sys.stderr.flush()
    line = sys.stdin.readline()
    if not line:
        raise EOFError
    return line.rstrip("\n")


class _Failed(Exception):
    """End the command with ``status`` after printing ``message``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


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
    beyond what was already printed.
    """

    def __init__(self, out: IO[str], err: IO[str], *, reasoning: bool) -> None:
        self._out = out
        self._err = err
        self._reasoning = reasoning
        self._printed: dict[str, int] = {}
        self._statuses: dict[str, str] = {}
        self._current: tuple[str, IO[str]] | None = None
        self._out_tail = ""  # the last two characters written to out
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
        if self._out_tail and not self._out_tail.endswith("\n"):
            self._write(self._out, "\n")
        self._write(self._err, safe_text(text) + "\n")

    def finish(self) -> None:
        """End the output: the last line of each stream is terminated."""
        self._end_part()
        if self._out_tail and not self._out_tail.endswith("\n"):
            self._write(self._out, "\n")

    def _stream(self, part_id: str, content: str, stream: IO[str]) -> None:
        new = content[self._printed.get(part_id, 0):]
        if not new:
            return
        if self._current != (part_id, stream):
            self._end_part()
            self._current = (part_id, stream)
            if stream is self._out:
                if self._out_tail:
                    # a new markdown part is a new paragraph
                    ends = len(self._out_tail) - len(self._out_tail.rstrip("\n"))
                    self._write(self._out, "\n" * max(0, 2 - ends))
            else:
                self._write(self._err, "\x1b[2m" if self._dim else "thinking: ")
        self._printed[part_id] = len(content)
        # escaped per character, so an escape sequence split across deltas is harmless too
        self._write(stream, safe_text(new))

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
            self._out_tail = (self._out_tail + text)[-2:]

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


def _awaiting_confirmation(parts: Sequence[t.ResponsePart]
                           ) -> t.ToolCallPendingConfirmationState | None:
    for part in parts:
        if isinstance(part, t.ToolCallResponsePart) and isinstance(
            part.tool_call, t.ToolCallPendingConfirmationState
        ):
            return part.tool_call
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
                 timeout: float | None, provider: str | None, reasoning: bool) -> None:
        self.yes = yes
        self.out = out
        self.err = err
        self.input_fn = input_fn
        self.timeout = timeout
        self.provider = provider
        self.transcript = _Transcript(out, err, reasoning=reasoning)

    async def run(self, client: AsyncClient, message: str) -> int:
        init = await client.initialize([ROOT_CHANNEL])
        log.info("connected to %s (protocol %s)", client.target, init.protocol_version)
        with contextlib.suppress(RequestError):
            # what the TypeScript client does after every connect; some hosts expect it
            await client.list_sessions()
        session = await client.create_session(provider=self.provider or self._first_provider(
            client))
        await client.subscribe(session)
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
        chat = state.default_chat or (state.chats[0].resource if state.chats else None)
        if chat is None:
            chat = await client.create_chat(session)
        await client.subscribe(chat)
        with client.events() as events:
            return await self._turn(client, chat, message, events)

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
                    call = _awaiting_confirmation(parts)
                    if call is not None:
                        await self._confirm(client, chat, turn_id, call)
                        continue
                await self._next_event(client, chat, events)
        except asyncio.CancelledError:
            # Ctrl-C: tell the host to stop, briefly, then go on being cancelled
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(client.dispatch(chat, t.ChatTurnCancelledAction(
                    turn_id=turn_id, duration=int((time.monotonic() - started) * 1000),
                )), 1.0)
            raise

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

    async def _next_event(self, client: AsyncClient, chat: str, events: EventStream) -> None:
        try:
            event = await events.next(self.timeout)
        except ClientTimeout:
            raise _Failed(EXIT_TIMEOUT, f"timed out: the host sent nothing for "
                          f"{self.timeout:g} s") from None
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
            answer = await _ask(self.input_fn, "Allow? [y/N] ")
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
            raise _Failed(EXIT_FAILED, f"the turn failed: {detail}")
        if state == t.TurnState.CANCELLED:
            self.transcript.note("[the turn was cancelled]")
        return EXIT_OK


async def run_chat(
    target: str,
    message: str,
    *,
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
    """The ``chat`` command: one turn with the host at ``target``; the exit status.

    ``target`` is a ``ws://`` / ``wss://`` URL, or with ``stdio`` a command
    line (split like a shell would) to spawn, speaking JSON Lines.
    ``input_fn`` asks y/n (default :func:`terminal_input`); ``yes`` approves
    every tool call without asking.  ``timeout`` is the longest silence of
    the host, in seconds (time spent answering a prompt does not count).
    ``provider`` defaults to the first agent of the host's root state.
    ``reconnect`` defaults to 5 quick attempts.
    """
    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr
    chat = _Chat(yes=yes, out=out, err=err,
                 input_fn=input_fn if input_fn is not None else terminal_input,
                 timeout=timeout, provider=provider, reasoning=reasoning)
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
            provider=args.provider, reasoning=not args.no_reasoning,
        ))
    except KeyboardInterrupt:
        print(f"\n{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
