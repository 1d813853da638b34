"""Write an agent; the library does the protocol.

::

    from agenthost_protocol.agent import Agent, Turn, run

    class Reverse(Agent):
        provider = "reverse"

        async def turn(self, turn: Turn) -> None:
            for word in reversed(turn.text.split()):
                await turn.stream(word + " ")

    run(Reverse())          # or: agenthost-protocol serve --agent mymodule:Reverse

See ``docs/agents.md``.  Needs asyncio (and the ``ws`` extra to serve on
WebSocket); ``import agenthost_protocol`` does not import it.
"""

from __future__ import annotations

from .base import Agent, AgentError, NewSession
from .driver import AgentDriver
from .run import AgentService, build_agent_server, load_agent, run
from .turn import RunResult, ToolCall, Turn

__all__ = [
    "Agent",
    "AgentDriver",
    "AgentError",
    "AgentService",
    "NewSession",
    "RunResult",
    "ToolCall",
    "Turn",
    "build_agent_server",
    "load_agent",
    "run",
]
