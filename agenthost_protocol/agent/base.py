"""The class an agent subclasses: :class:`Agent`.

Write what the agent does in :meth:`Agent.turn`; the layer
(:class:`~agenthost_protocol.agent.driver.AgentDriver`) does the protocol:
sessions, chats, listings, summaries, turn lifecycles, confirmations,
cancellation, errors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from attrs import frozen

from .. import types as t

if TYPE_CHECKING:
    from .driver import AgentDriver
    from .turn import Turn

__all__ = ["Agent", "AgentError", "NewSession"]


class AgentError(Exception):
    """An error whose ``error_type`` the layer reports (``session/creationFailed``,
    ``chat/error``); other exceptions report their class name."""

    def __init__(self, message: str, *, error_type: str = "agent") -> None:
        super().__init__(message)
        self.error_type = error_type


@frozen(kw_only=True)
class NewSession:
    """A session being created, as :meth:`Agent.create_session` sees it."""

    uri: str
    chat: str
    """The URI its default chat will have."""
    working_directories: tuple[str, ...] | None = None
    active_client: t.SessionActiveClient | None = None
    principal: object = None
    """Who asked for it: the principal the embedder's ``authenticate`` gave the
    connection that sent ``createSession`` (``None``: no ``authenticate``)."""


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
    manages_chats: ClassVar[bool] = False
    """True: the agent keeps its chats' tool-call confirmations, input requests
    and queued messages itself, from :meth:`client_action` (a bridge to an
    agent with its own state machine).  The layer still plays a ``turn`` task
    per client-started turn and cancels it, but resolves no confirmation or
    input of its own (``Turn.tool(confirm=True)`` and ``Turn.ask`` would
    wait forever) and starts no turn for a queued message."""
    answers_when_ready: ClassVar[bool] = False
    """True: ``createSession`` is answered once :meth:`create_session` is done
    (the session does not exist meanwhile, its URI is taken): it is then
    created ready, with the config :meth:`create_session` returned, so a client
    finds its chat at once; or created failed, if it raised.  False: answered
    first, the session ``creating`` while the agent sets it up."""

    _driver: AgentDriver | None = None

    @property
    def driver(self) -> AgentDriver:
        """The driver serving this agent (to dispatch what it computed itself)."""
        if self._driver is None:
            raise RuntimeError(f"{type(self).__name__} is not driven by an AgentDriver yet")
        return self._driver

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

    async def create_session(self, session: NewSession) -> t.SessionConfigState | None:
        """Set up a new session before it is ready (start its process ...).

        ``createSession`` is answered first (after it, with
        :attr:`answers_when_ready`); returning makes the session ready (its
        default chat is ``session.chat``), raising fails it
        (``session/creationFailed`` with the exception's text; its
        ``error_type`` for an :class:`AgentError`).  It is cancelled when the
        session is disposed or the host closes meanwhile.  What it returns is
        the session's config, with :attr:`answers_when_ready` (otherwise the
        session exists already: ignored).  Not overridden, the session is
        ready at once."""
        return None

    async def resume_session(self, session: str, state: t.SessionState) -> str | None:
        """A session the host's store kept from an earlier run is used again (a turn
        starts in it, a chat is added ...): make it usable again.

        Called once per session and run, before the session's first turn
        plays; :meth:`client_action` may be called for the session before
        it returns (the action that made the layer resume it, say): an agent
        that needs what this sets up holds those until then.

        ``None``: it goes on (the demo needs nothing but the chat's history,
        which the turn has).  A text: it cannot, and why; every turn
        started in it then ends at once with that error, while its history
        stays readable.  Raising says the same with the exception's text.
        The default: ``None``, unless the agent overrides
        :meth:`create_session` (it keeps state of its own, which a new
        process does not have), then a text saying so."""
        if type(self).create_session is not Agent.create_session:
            return (f"{self.info().display_name} keeps sessions of its own and cannot "
                    "continue one from before the host restarted")
        return None

    def refuse_session(self, session: NewSession) -> str | None:
        """Why ``createSession`` is refused now (answered -32603 with it: the agent
        cannot take sessions any more, say), or ``None`` to go on."""
        return None

    async def dispose_session(self, session: str) -> None:
        """A ready session was disposed (after :meth:`session_disposed`): release what
        it held.  ``close`` waits for it."""

    def client_action(self, channel: str, action: t.StateAction) -> None:
        """A client's action the host applied on a session or chat channel, before the
        layer acts on it (starts or cancels a turn ...)."""

    def client_action_by(self, channel: str, action: t.StateAction, principal: object) -> None:
        """:meth:`client_action` with who sent it: the principal of the connection
        (``None`` without ``authenticate``).  What the layer calls; the default
        calls :meth:`client_action`, so override one of the two."""
        self.client_action(channel, action)

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
