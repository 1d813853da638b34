"""The class an agent subclasses: :class:`Agent`.

Write what the agent does in :meth:`Agent.turn`; the layer
(:class:`~agenthost_protocol.agent.driver.AgentDriver`) does the protocol:
sessions, chats, listings, summaries, turn lifecycles, confirmations,
cancellation, errors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from .. import types as t

if TYPE_CHECKING:
    from .turn import Turn

__all__ = ["Agent"]


class Agent:
    """An agent: subclass it and write :meth:`turn`.

    Class attributes describe it in the root state: ``provider`` (its id,
    which ``createSession`` names), ``display_name``, ``description`` and
    ``models`` (the ids a message may pick).  Override the ``session_*`` and
    ``start``/``close`` hooks when the agent keeps state of its own,
    :meth:`info` to describe it otherwise, and :meth:`title_for` to title
    its sessions otherwise.
    """

    provider: ClassVar[str] = "agent"
    display_name: ClassVar[str | None] = None
    description: ClassVar[str] = ""
    models: ClassVar[tuple[str, ...]] = ()

    async def turn(self, turn: Turn) -> None:
        """Play one turn: stream the reply, run tools, ask.  Returning ends the turn
        (``chat/turnComplete``); raising fails it (``chat/error`` with the
        exception's text); a client's cancel raises ``asyncio.CancelledError``
        in it."""
        raise NotImplementedError(f"{type(self).__name__} must define turn()")

    async def start(self) -> None:
        """Called once before anything is served (start a process, load a model ...)."""

    async def close(self) -> None:
        """Called once at the end, after every turn was cancelled."""

    def session_created(self, session: str) -> None:
        """A session was created (and is ready, with its default chat)."""

    def session_disposed(self, session: str) -> None:
        """A session was disposed (its turns were cancelled)."""

    def title_for(self, message: t.Message) -> str:
        """The title a session without one gets when a turn starts, from the turn's
        message ("": it stays untitled).  By default the text on one line, at
        most 80 characters."""
        line = " ".join(message.text.split())
        return line if len(line) <= 80 else line[:79] + "…"

    def info(self) -> t.AgentInfo:
        """This agent as the root state lists it."""
        cls = type(self)
        return t.AgentInfo(
            provider=cls.provider,
            display_name=cls.display_name or cls.provider,
            description=cls.description,
            models=tuple(t.SessionModelInfo(id=model, provider=cls.provider, name=model)
                         for model in cls.models),
            # the layer forks and opens side chats for every agent (their turns are
            # the agent's like any other)
            capabilities=t.AgentCapabilities(
                multiple_chats=t.MultipleChatsCapability(fork=True, side_chat=True)),
        )
