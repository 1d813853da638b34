"""Agents that misbehave at the end, for ``serve --agent tests.stubborn_agent:ATTR``
(``tests/test_agent_shutdown.py``).

``agent``: what a turn does is chosen by its message's first word:

* ``stubborn``: streams ``working``, then sleeps for ever and catches every
  exception (``except BaseException``, in a retry loop): its task never ends,
  not even when Python finalises it (real processes only);
* ``sulky``: the same, catching ``asyncio.CancelledError`` only (as an SDK
  that shields its calls would): fit to run inside the test process;
* ``late``: streams ``working``, catches the cancellation, then after
  :data:`LATE_DELAY` seconds streams ``late``, sets the title :data:`LATE_TITLE` and
  returns, as if it finished its work: none of it may reach the chat;
* ``fail-surrogate``: raises an exception whose text has a lone surrogate;
* ``fail-huge``: raises one whose text is 20 MiB;
* ``fail-type``: raises an ``AgentError`` whose ``error_type`` is 20 MiB;
* ``surrogates``: streams, reasons, titles and runs a tool with lone
  surrogates everywhere, then returns;
* ``thread``: sleeps in a thread of the default executor (``asyncio.to_thread``);
* anything else: streams ``echo: TEXT`` and returns.

``hanging_create``: its ``create_session`` never returns and catches every
cancellation.  ``hanging_dispose``: its ``dispose_session`` does the same, and
``hanging_resume`` its ``resume_session`` (a session kept in the store from an
earlier run, used again).
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from agenthost_protocol import types as t
from agenthost_protocol.agent import Agent, AgentError, NewSession, Turn

LATE_DELAY = 0.5
LATE_TITLE = "set by a turn that was cancelled"
HUGE = 20 * 1024 * 1024


async def _forever() -> None:
    """Sleeps for ever; nothing ends it."""
    while True:
        with contextlib.suppress(BaseException):  # the point of this agent
            await asyncio.sleep(3600)


async def _sulk() -> None:
    """Sleeps for ever; no cancellation ends it."""
    while True:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(3600)


class Stubborn(Agent):
    provider = "stubborn"
    display_name = "Stubborn"
    description = "Catches its cancellations."

    async def turn(self, turn: Turn) -> None:
        word = turn.text.split(maxsplit=1)[0] if turn.text.strip() else ""
        if word == "stubborn":
            await turn.stream("working")
            await _forever()
        elif word == "sulky":
            await turn.stream("working")
            await _sulk()
        elif word == "late":
            await turn.stream("working")
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(3600)
            await asyncio.sleep(LATE_DELAY)
            await turn.stream("late")
            await turn.title(LATE_TITLE)
        elif word == "fail-surrogate":
            raise RuntimeError("the model said \ud83d and stopped")
        elif word == "fail-huge":
            raise RuntimeError("x" * HUGE)
        elif word == "fail-type":
            raise AgentError("y" * HUGE, error_type="T\udc00" * HUGE)
        elif word == "surrogates":
            await turn.reasoning("thinking \ud83d")
            await turn.stream("half an emoji: \ud83d")
            await turn.title("title \udc00")
            call = await turn.tool("tool\ud83d", {"path": "\ud83d"}, display_name="Tool \ud83d",
                                   intention="to \udc00")
            await call.complete("out \ud83d")
            failed = await turn.tool("other")
            await failed.fail("bad \ud83d")
            await turn.stream("done")
        elif word == "thread":
            await turn.stream("working")
            await asyncio.to_thread(time.sleep, 3600)
        else:
            await turn.stream(f"echo: {turn.text}")


class HangingCreate(Stubborn):
    provider = "hanging-create"

    async def create_session(self, session: NewSession) -> t.SessionConfigState | None:
        await _forever()
        return None


class HangingDispose(Stubborn):
    provider = "hanging-dispose"

    async def dispose_session(self, session: str) -> None:
        await _forever()


class HangingResume(Stubborn):
    provider = "hanging-resume"

    async def resume_session(self, session: str, state: t.SessionState) -> str | None:
        await _forever()
        return None


agent = Stubborn()
hanging_create = HangingCreate()
hanging_dispose = HangingDispose()
hanging_resume = HangingResume()
