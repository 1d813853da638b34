"""What an agent's turn coroutine is given: :class:`Turn`, and :class:`ToolCall` handles.

Everything here dispatches through the host, keeps the session's summary in
step and flushes the server, so that every subscriber sees each step as it
happens.  The coroutine is cancelled (``asyncio.CancelledError``) when a
client cancels the turn, a newer turn replaces it, or its chat goes away.

Texts are repaired as every agent dispatch is (a lone surrogate becomes
U+FFFD): a model's output cut inside an emoji does not fail the turn.  A
coroutine that catches the cancellation and goes on plays no more: the turn
ended on the wire at once, and what it does since is dropped (its
:meth:`Turn.tool` calls are not approved, its :meth:`Turn.ask` waits until
the task ends), so it never writes into a later turn of the chat.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from attrs import frozen

from .. import types as t
from ..host.sessions import iso
from .base import AgentError
from .dispatch import bounded_text

if TYPE_CHECKING:
    from .driver import AgentDriver

__all__ = ["RUN_OUTPUT_CHARS", "RunResult", "ToolCall", "Turn"]

RUN_OUTPUT_CHARS: Final = 64 * 1024
"""The most characters of a command's output :meth:`Turn.run` returns (its newest)."""
_PREVIEW_CHARS: Final = 4096
"""The most characters of output the tool call's result keeps as its preview."""


@frozen(kw_only=True)
class RunResult:
    """What :meth:`Turn.run` gives back."""

    exit_code: int | None
    """The command's exit code (``128 + N``: killed by signal ``N``, as shells say;
    ``None``: unknown, its terminal was disposed first)."""
    output: str
    """Its newest output (the terminal's, VT sequences included), at most ``max_output``
    characters."""
    truncated: bool
    """Whether older output was cut from :attr:`output`."""
    timed_out: bool = False
    """Whether ``timeout`` ran out (the command was interrupted, then killed)."""
    terminal: str = ""
    """The URI of the terminal it ran in (listed until disposed)."""

JsonValue = object


class Turn:
    """One turn of one chat, as the agent's ``turn`` coroutine sees it."""

    def __init__(self, driver: AgentDriver, *, session: str, chat: str, turn_id: str,
                 message: t.Message, started_ms: int, principal: object = None) -> None:
        self._driver = driver
        self.session = session
        """The session's URI."""
        self.chat = chat
        """The chat's URI."""
        self.id = turn_id
        """The turn's id."""
        self.message = message
        """The user's message: ``text``, ``attachments``, ``model``, ``agent`` ..."""
        self.started_ms = started_ms
        self.principal = principal
        """Who sent the message: the principal the embedder's ``authenticate`` gave the
        connection that started the turn (queued the message, or created the chat
        with it); ``None`` without ``authenticate``, or for a turn the host began
        on its own.  A connection closed since still gives the principal it had."""
        self._parts = 0
        self._markdown: str | None = None
        self._reasoning: str | None = None
        self._calls = 0
        self._asks = 0
        self._playing = True
        """False once the layer let go of this turn (it ended, or was cancelled or
        replaced): what it dispatches from then on is dropped."""

    @property
    def text(self) -> str:
        """The message's text."""
        return self.message.text

    @property
    def active(self) -> bool:
        """Whether this turn is still its chat's active turn (an agent that ends its
        turns itself, ``manages_chats``, waits for this to become false)."""
        return self._driver._live(self)

    @property
    def attachments(self) -> tuple[t.MessageAttachment, ...]:
        return self.message.attachments or ()

    @property
    def model(self) -> str | None:
        """The model the user picked for this message (its id), if any."""
        selection = self.message.model
        return None if selection is None else selection.id

    def _dispatch(self, action: t.StateAction) -> None:
        if self._playing:
            self._driver.dispatch_chat(self.chat, action)

    async def _never(self) -> None:
        """What a wait for a client (a confirmation, an answer) becomes in a turn no
        longer played: nothing will come, and a loop around it must not spin."""
        await asyncio.get_running_loop().create_future()

    def _part_id(self, kind: str) -> str:
        self._parts += 1
        return f"{self.id}.{kind}{self._parts}"

    async def stream(self, text: str) -> None:
        """Append ``text`` to the reply (a markdown part, started on the first call
        and after anything else was added)."""
        if not text:
            return
        if self._markdown is None:
            self._markdown = self._part_id("md")
            self._reasoning = None
            self._dispatch(t.ChatResponsePartAction(
                turn_id=self.id, part=t.MarkdownResponsePart(id=self._markdown, content="")))
        self._dispatch(t.ChatDeltaAction(turn_id=self.id, part_id=self._markdown, content=text))
        await asyncio.sleep(0)  # let the writers send it: a loop of streams still streams

    async def reasoning(self, text: str) -> None:
        """Append ``text`` to the agent's visible reasoning (a reasoning part)."""
        if not text:
            return
        if self._reasoning is None:
            self._reasoning = self._part_id("reasoning")
            self._markdown = None
            self._dispatch(t.ChatResponsePartAction(
                turn_id=self.id, part=t.ReasoningResponsePart(id=self._reasoning, content="")))
        self._dispatch(t.ChatReasoningAction(turn_id=self.id, part_id=self._reasoning,
                                             content=text))
        await asyncio.sleep(0)

    async def tool(
        self,
        name: str,
        input: Mapping[str, JsonValue] | str | None = None,
        *,
        display_name: str | None = None,
        message: str | None = None,
        intention: str | None = None,
        confirm: bool = False,
        confirmation_title: str | None = None,
        call_id: str | None = None,
    ) -> ToolCall:
        """Start a tool call and return its handle once it may run.

        ``message`` is the invocation message (default "Running NAME"),
        ``intention`` what the call is for, ``call_id`` its id (default
        ``TURN.toolN``; a model's own id, say).  With ``confirm``, the call
        waits for a client's approval (the session shows ``InputNeeded``
        meanwhile); ``call.approved`` says the decision (a denied call is
        cancelled already; a client that completed the call itself approved
        it, and ``call.running`` is false).  Without it the call runs at
        once.  Finish it with :meth:`ToolCall.complete` or
        :meth:`ToolCall.fail`; one left open is cancelled when the turn ends.
        """
        self._calls += 1
        self._markdown = self._reasoning = None
        if call_id is None:
            call_id = f"{self.id}.tool{self._calls}"
        label = display_name if display_name is not None else name
        invocation = message if message is not None else f"Running {label}"
        tool_input = input if isinstance(input, str) or input is None else json.dumps(
            dict(input), ensure_ascii=False)
        self._dispatch(t.ChatToolCallStartAction(turn_id=self.id, tool_call_id=call_id,
                                                 tool_name=name, display_name=label,
                                                 intention=intention))
        call = ToolCall(self, call_id)
        if not self._playing:
            return call  # not approved: the turn is over
        if not confirm:
            self._dispatch(t.ChatToolCallReadyAction(
                turn_id=self.id, tool_call_id=call_id, invocation_message=invocation,
                tool_input=tool_input, confirmed=t.ToolCallConfirmationReason.NOT_NEEDED))
            call.approved = True
            return call
        decision = self._driver.expect_confirmation(self.chat, self.id, call_id)
        self._dispatch(t.ChatToolCallReadyAction(
            turn_id=self.id, tool_call_id=call_id, invocation_message=invocation,
            tool_input=tool_input,
            confirmation_title=confirmation_title if confirmation_title is not None
            else f"Run {label}?"))
        call.approved = await decision
        return call

    async def ask(
        self,
        message: str,
        questions: tuple[t.ChatInputQuestion, ...] | None = None,
    ) -> t.ChatInputCompletedAction:
        """Ask the user (an input request; ``InputNeeded`` meanwhile) and return how a
        client completed it: its ``response`` (accept, decline, cancel) and ``answers``."""
        self._asks += 1
        self._markdown = self._reasoning = None
        request_id = f"{self.id}.ask{self._asks}"
        if not self._playing:
            await self._never()
        answer = self._driver.expect_input(self.chat, request_id)
        self._dispatch(t.ChatInputRequestedAction(request=t.ChatInputRequest(
            id=request_id, message=message, questions=questions)))
        return await answer

    async def usage(self, *, input_tokens: int | None = None,
                    output_tokens: int | None = None, model: str | None = None) -> None:
        """Report the turn's token usage so far (it replaces what was reported)."""
        self._dispatch(t.ChatUsageAction(turn_id=self.id, usage=t.UsageInfo(
            input_tokens=input_tokens, output_tokens=output_tokens, model=model)))
        await asyncio.sleep(0)

    async def title(self, title: str) -> None:
        """Set the session's title."""
        if self._playing:
            self._driver.dispatch_session(self.session,
                                          t.SessionTitleChangedAction(title=title))
        await asyncio.sleep(0)

    def now_iso(self) -> str:
        return iso(self._driver.host.now())

    async def run(self, command: str, *, cwd: str | None = None, timeout: float | None = None,
                  title: str | None = None, max_output: int = RUN_OUTPUT_CHARS,
                  interrupt_grace: float = 2.0) -> RunResult:
        """Run ``command`` (a shell command line) in a host terminal every client can watch.

        The command gets a terminal of its own, claimed by this session, turn
        and tool call, which a ``run`` tool call of the chat references (a
        ``terminal`` content block): a client subscribes to it to see the
        output live.  ``cwd`` is a ``file:`` URI inside the host's roots
        (default: the first root).  Returns once the command ended, with its
        exit code and its newest ``max_output`` characters of output; the tool
        call completes with the exit code and a preview (a non-zero exit code
        fails it).  When ``timeout`` seconds pass first, the command is
        interrupted (``SIGINT``), then killed after ``interrupt_grace``
        seconds.  A client's cancel of the turn does the same (and the
        cancellation goes on).  Afterwards the terminal's claim narrows to
        the session; it is disposed with the session.  Raises
        :class:`~.base.AgentError` when the host runs no terminals or the
        command cannot get one (``cwd`` outside the roots, too many).
        """
        service = self._driver.terminals
        if service is None:
            raise AgentError("this host runs no terminals (serve --no-terminals)",
                             error_type="NoTerminals")
        shown = title if title is not None else command
        call = await self.tool(
            "run", {"command": command} if cwd is None else {"command": command, "cwd": cwd},
            display_name="Run command", message=f"Running `{bounded_text(shown)}`")
        if not call.approved:
            raise asyncio.CancelledError
        claim = t.TerminalSessionClaim(session=self.session, turn_id=self.id,
                                       tool_call_id=call.id)
        try:
            job = service.run_command(command, claim=claim, cwd=cwd, title=shown,
                                      max_output=max_output)
        except (ValueError, RuntimeError) as e:
            await call.fail(str(e))
            raise AgentError(f"cannot run {command!r}: {e}", error_type="RunFailed") from e
        reference = t.ToolResultTerminalContent(resource=job.uri, title=shown, is_pty=True)
        self._dispatch(t.ChatToolCallContentChangedAction(
            turn_id=self.id, tool_call_id=call.id, content=(reference,)))
        timed_out = False
        try:
            if timeout is None:
                code = await job.wait()
            else:
                try:
                    code = await asyncio.wait_for(job.wait(), timeout)
                except asyncio.TimeoutError:
                    timed_out = True
                    job.interrupt(interrupt_grace)
                    code = await job.wait()
        except asyncio.CancelledError:
            job.interrupt(interrupt_grace)
            service.release(job.uri, self.session)
            raise
        service.release(job.uri, self.session)
        output, truncated = job.output()
        preview = output[-_PREVIEW_CHARS:]
        result = t.TerminalCommandResult(exit_code=code, preview=preview,
                                         truncated=truncated or len(preview) < len(output))
        content = (t.ToolResultTerminalContent(resource=job.uri, title=shown, is_pty=True,
                                               result=result),)
        ok = code == 0 and not timed_out
        why = ("timed out" if timed_out else "ended, its terminal disposed" if code is None
               else f"exited with status {code}")
        await call._finish(ok, content, "Ran command" if ok else f"Command {why}",
                           None if ok else t.ToolCallError(message=f"the command {why}"))
        return RunResult(exit_code=code, output=output, truncated=truncated,
                         timed_out=timed_out, terminal=job.uri)


class ToolCall:
    """A tool call of a :class:`Turn`, once it may run (or was denied)."""

    def __init__(self, turn: Turn, call_id: str) -> None:
        self._turn = turn
        self.id = call_id
        self.approved = False
        """Whether it may run: approved by a client, or needing no approval."""

    @property
    def state(self) -> t.ToolCallState | None:
        """The call's state in the chat (``None`` once its turn is no longer active)."""
        host, chat = self._turn._driver.host, self._turn.chat
        state = host.state(chat) if host.has_channel(chat) else None
        if not isinstance(state, t.ChatState) or state.active_turn is None or (
                state.active_turn.id != self._turn.id):
            return None
        for part in state.active_turn.response_parts:
            if isinstance(part, t.ToolCallResponsePart) and getattr(
                    part.tool_call, "tool_call_id", None) == self.id:
                return part.tool_call
        return None

    @property
    def running(self) -> bool:
        """Whether the call runs and waits for its result (false once finished: by
        :meth:`complete` or :meth:`fail`, or by a client that completed it itself)."""
        return isinstance(self.state, t.ToolCallRunningState)

    async def complete(self, output: str | tuple[t.ToolResultContent, ...] = "", *,
                       past_tense: str = "Done") -> None:
        """The tool succeeded with ``output`` (text, or content blocks; a large output
        is stored by the host and sent by reference).  A call that is not
        :attr:`running` (denied, or completed by a client) is left as it is."""
        await self._finish(True, output, past_tense, None)

    async def fail(self, error: str, *, past_tense: str = "Failed") -> None:
        """The tool failed with ``error`` (a call not :attr:`running` is left as it is)."""
        await self._finish(False, "", past_tense, t.ToolCallError(message=bounded_text(error)))

    async def _finish(self, success: bool, output: str | tuple[t.ToolResultContent, ...],
                      past_tense: str, error: t.ToolCallError | None) -> None:
        if not self.running:
            return  # the reducer would drop the result: nothing to send
        content: tuple[t.ToolResultContent, ...] | None
        if isinstance(output, str):
            content = (t.ToolResultTextContent(text=output),) if output else None
        else:
            content = output or None
        self._turn._dispatch(t.ChatToolCallCompleteAction(
            turn_id=self._turn.id, tool_call_id=self.id, result=t.ToolCallResult(
                success=success, past_tense_message=past_tense, content=content, error=error)))
        await asyncio.sleep(0)
