"""The demo agent on an event loop: its turns played a step at a time, ``step_delay`` apart.

:class:`~agenthost_protocol.agents.demo.DemoAgent` is sans-I/O: it says which
turns have a step ready and plays one when told.  :class:`DemoPacer` is the
telling: one task per turn with steps ready, sleeping ``step_delay`` seconds
before each step, flushing the server after it so every subscriber sees it.
"""

from __future__ import annotations

import asyncio
import logging

from ..agents.demo import DemoAgent, TurnRun
from ..host import Event
from .server import HostServer

__all__ = ["DemoPacer"]

log = logging.getLogger(__name__)


class DemoPacer:
    """Connects a :class:`DemoAgent` to a :class:`HostServer` and paces its turns.

    Installs itself as the server's event handler.  ``step_delay`` (seconds,
    0 allowed) is the pause before each step of a turn.
    """

    def __init__(self, agent: DemoAgent, server: HostServer, *, step_delay: float = 0.05) -> None:
        if step_delay < 0:
            raise ValueError("step_delay must not be negative")
        self._agent = agent
        self._server = server
        self._delay = step_delay
        self._tasks: dict[TurnRun, asyncio.Task[None]] = {}
        server.handler = self.handle

    @property
    def agent(self) -> DemoAgent:
        return self._agent

    @property
    def playing(self) -> int:
        """How many turns have a task playing their steps."""
        return len(self._tasks)

    def handle(self, event: Event) -> None:
        """The server's event handler: the agent reacts, then turns with steps ready play."""
        self._agent.handle(event)
        self.schedule()

    def schedule(self) -> None:
        """Start a task for every turn with a step ready that has none."""
        for run in self._agent.runnable():
            if run not in self._tasks:
                self._tasks[run] = asyncio.get_running_loop().create_task(self._play(run))

    async def _play(self, run: TurnRun) -> None:
        try:
            while run.runnable:
                await asyncio.sleep(self._delay)
                self._agent.step(run)
                self._server.flush()
                # a finished turn may have started the chat's next queued message
                self.schedule()
        except Exception:
            log.exception("the demo agent failed playing %r", run)
        finally:
            if self._tasks.get(run) is asyncio.current_task():
                del self._tasks[run]

    async def close(self) -> None:
        """Stop playing (turns stay where they are in the host's state)."""
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
