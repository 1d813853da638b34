"""The demo agent: a deterministic AHP agent that needs no model.

:class:`DemoAgent` is an :class:`~agenthost_protocol.agent.Agent` like any
other: the agent layer (:class:`~agenthost_protocol.agent.AgentDriver`) does
the protocol (sessions, chats, listings, summaries, queued messages,
cancellation, confirmations) and :meth:`DemoAgent.turn` plays its script,
pausing ``step_delay`` seconds before each step.  ``agenthost-protocol
serve`` serves it by default (``--step-delay``).

The script of a turn whose user message is ``TEXT`` (``docs/serve.md`` has
the details): a sentence of reasoning about the message, then ``You said:``,
``TEXT`` as a block quote and an announcement of the tool call, each streamed
in pieces; an ``echo`` tool call that needs a client's confirmation;
approved, it completes with ``TEXT`` and a closing part says so; denied, a
closing part says it did not run.  The texts, the pieces and the session's
title are the pure functions below.
"""

from __future__ import annotations

import asyncio
import re
from typing import Final

from .. import types as t
from .base import Agent
from .turn import Turn

__all__ = [
    "APPROVED_TEXT",
    "DEMO_MODEL",
    "DEMO_PROVIDER",
    "DENIED_TEXT",
    "DemoAgent",
    "demo_agent_info",
    "demo_root_state",
]

DEMO_PROVIDER: Final = "demo"
"""The provider id of the demo agent in the root state."""

DEMO_MODEL: Final = t.SessionModelInfo(id="demo-echo", provider=DEMO_PROVIDER, name="Demo echo")
"""The one model the demo agent lists."""

TOOL_NAME: Final = "echo"
INTENTION: Final = "Echo your message back"
WORDS_PER_PIECE: Final = 4
MAX_PIECES: Final = 16
TITLE_LENGTH: Final = 60

APPROVED_TEXT: Final = f"The `{TOOL_NAME}` tool returned your message. Done."
DENIED_TEXT: Final = f"You denied the `{TOOL_NAME}` tool call, so it did not run. Done."


def demo_agent_info() -> t.AgentInfo:
    """The demo agent as the root state lists it (multi-chat, fork and side chats)."""
    return t.AgentInfo(
        provider=DEMO_PROVIDER,
        display_name="Demo agent",
        description="A deterministic agent that echoes your message and runs one tool "
        "call that needs your confirmation.",
        models=(DEMO_MODEL,),
        capabilities=t.AgentCapabilities(
            multiple_chats=t.MultipleChatsCapability(fork=True, side_chat=True)
        ),
    )


def demo_root_state() -> t.RootState:
    """The root state of a host that runs only the demo agent."""
    return t.RootState(agents=(demo_agent_info(),), active_sessions=0)


# -- the script's pure pieces ---------------------------------------------------------


def _pieces(text: str) -> list[str]:
    """``text`` cut after whitespace into at most ``MAX_PIECES`` pieces of whole words."""
    words = [w for w in re.split(r"(?<=\s)(?=\S)", text) if w]
    size = max(WORDS_PER_PIECE, -(-len(words) // MAX_PIECES))
    return ["".join(words[i : i + size]) for i in range(0, len(words), size)]


def _quote(text: str) -> str:
    if not text.strip():
        return "> (an empty message)"
    return "\n".join("> " + line if line else ">" for line in text.splitlines())


def _title(text: str) -> str:
    line = next((s.strip() for s in text.splitlines() if s.strip()), "")
    if not line:
        return "Demo chat"
    return line if len(line) <= TITLE_LENGTH else line[: TITLE_LENGTH - 1].rstrip() + "…"


def _reasoning(text: str) -> str:
    return (
        f"The user wrote {len(text)} characters. I will repeat them, then ask before "
        f"running the {TOOL_NAME} tool on them."
    )


def _reply(text: str) -> str:
    return (
        f"You said:\n\n{_quote(text)}\n\nNow I will run the `{TOOL_NAME}` tool on your "
        "message. It needs your confirmation."
    )


# -- the agent --------------------------------------------------------------------------


class DemoAgent(Agent):
    """The demo agent; serve it with :func:`~agenthost_protocol.agent.build_agent_server`
    (or :func:`~agenthost_protocol.agent.run`).

    ``step_delay`` (seconds, 0 allowed) is the pause before each step of a
    turn.  ``host`` is accepted and ignored, for the former ``DemoAgent(host)``
    (the agent layer drives the host).
    """

    provider = DEMO_PROVIDER
    display_name = "Demo agent"
    models = (DEMO_MODEL.id,)

    def __init__(self, *, step_delay: float = 0.05) -> None:
        if step_delay < 0:
            raise ValueError("step_delay must not be negative")
        self.step_delay = step_delay

    def info(self) -> t.AgentInfo:
        return demo_agent_info()

    def title_for(self, message: t.Message) -> str:
        return _title(message.text)

    async def pause(self) -> None:
        """The pause before each step: ``step_delay`` seconds (a test may override
        it to play the steps one at a time)."""
        await asyncio.sleep(self.step_delay)

    async def turn(self, turn: Turn) -> None:
        text = turn.text
        for piece in _pieces(_reasoning(text)):
            await self.pause()
            await turn.reasoning(piece)
        for piece in _pieces(_reply(text)):
            await self.pause()
            await turn.stream(piece)
        await self.pause()
        call = await turn.tool(
            TOOL_NAME, {"text": text}, call_id=f"{turn.id}.{TOOL_NAME}", display_name="Echo",
            message=INTENTION, intention=INTENTION, confirm=True,
            confirmation_title=f"Run the {TOOL_NAME} tool?",
        )
        if call.approved and call.running:  # not if a client completed the call itself
            await self.pause()
            await call.complete(text, past_tense="Echoed your message")
        await self.pause()
        await turn.stream(APPROVED_TEXT if call.approved else DENIED_TEXT)
        await self.pause()
