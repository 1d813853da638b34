"""Serving an :class:`~agenthost_protocol.agent.Agent` in one call: :func:`run`.

``run(agent)`` is ``agenthost-protocol serve`` with ``agent`` as its agent:
the same access token, limits, signals and shutdown; ``serve --agent
module:attr`` does the same from the command line.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from .. import types as t
from .._version import __version__
from ..host import Authorize, Host, HostStore, OwnershipPolicy
from .base import Agent
from .driver import AgentDriver

if TYPE_CHECKING:
    from ..aio.files import Root
    from ..aio.server import HostServer
    from .hosting import ServeOptions

__all__ = ["AgentService", "build_agent_server", "load_agent", "run"]

log = logging.getLogger(__name__)


class AgentService:
    """An agent with its driver, as ``serve`` starts and stops it."""

    def __init__(self, agent: Agent, driver: AgentDriver) -> None:
        self.agent = agent
        self.driver = driver

    async def start(self) -> None:
        await self.agent.start()

    async def close(self) -> None:
        """The driver's close (turns and hooks, at most ``close_timeout`` seconds),
        then the agent's own ``close``, given as long again; one that has not
        returned by then is logged and abandoned (cancelled, not waited for)."""
        await self.driver.close()
        closing = asyncio.ensure_future(self.agent.close())
        done, _ = await asyncio.wait({closing}, timeout=self.driver.close_timeout)
        if not done:
            log.warning("the agent's close did not end within %g s: abandoned",
                        self.driver.close_timeout)
            closing.cancel()
            return
        closing.result()


def build_agent_server(
    agent: object, options: ServeOptions, clock: Callable[[], int],
    store: HostStore | None = None,
    *,
    authorize: Authorize | OwnershipPolicy | None = None,
) -> tuple[HostServer, AgentService]:
    """A :class:`~agenthost_protocol.aio.HostServer` whose host runs ``agent``.

    ``store`` keeps its sessions across restarts (a
    :class:`~agenthost_protocol.sqlite_store.SQLiteStore`); ``authorize``
    keeps users apart (``options.authorize`` when not given; ``docs/host.md``,
    "Users kept apart")."""
    from ..aio.server import HostServer  # noqa: PLC0415  (asyncio only when serving)

    if not isinstance(agent, Agent):
        raise ValueError(f"{agent!r} is not an agenthost_protocol.agent.Agent")
    host = Host(
        clock=clock,
        server_info=t.Implementation(name="agenthost-protocol", version=__version__),
        root=t.RootState(agents=(agent.info(),), active_sessions=0),
        replay_max_envelopes=options.replay_window,
        store=store,
        authorize=authorize if authorize is not None else options.authorize,
    )
    server = HostServer(host, limits=options.limits)
    driver = AgentDriver(agent, host, server.flush, close_timeout=options.close_timeout)
    server.handler = driver.handle
    return server, AgentService(agent, driver)


def load_agent(spec: str) -> Agent:
    """The agent named by ``module:attr`` (an :class:`Agent` instance, or a class
    made with no arguments); ``ValueError`` with what is wrong."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"{spec!r} is not module:attr")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"cannot import {module_name!r}: {e}") from e
    value: object = module
    for name in attr.split("."):
        if not hasattr(value, name):
            raise ValueError(f"{module_name!r} has no {attr!r}")
        value = getattr(value, name)
    if isinstance(value, type) and issubclass(value, Agent):
        value = value()
    if not isinstance(value, Agent):
        raise ValueError(f"{spec} is a {type(value).__name__}, not an Agent")
    return value


def run(
    agent: Agent,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    stdio: bool = False,
    token: str | None = None,
    no_token: bool = False,
    new_token: bool = False,
    store: str | None = None,
    no_store: bool = False,
    roots: Iterable[Root] | None = None,
) -> int:
    """Serve ``agent`` until SIGINT/SIGTERM (or, with ``stdio``, the end of stdin);
    prints ``serving ws://HOST:PORT/?token=...`` first.  The token is ``token``,
    else the one ``serve`` keeps in its settings file (made on the first run, so a
    restart prints the same URL; ``new_token`` replaces it).  Sessions are kept in
    the SQLite file ``store`` (default: ``PROVIDER.sqlite3`` in the user's data
    directory, the agent's provider naming it, as ``serve --agent module:attr``
    does) unless ``no_store``.  Clients read and watch the files under ``roots``
    (:class:`~agenthost_protocol.aio.files.Root`: a path, writable or not; default:
    the working directory, read-only; ``()``: none), as ``serve --root`` does
    (``docs/files.md``).  Returns the exit status."""
    from .hosting import ServeOptions  # noqa: PLC0415
    from .hosting import run as serve  # noqa: PLC0415

    return serve(ServeOptions(host=host, port=port, stdio=stdio, token=token, no_token=no_token,
                              new_token=new_token, store=store, no_store=no_store,
                              agent_object=agent,
                              roots=None if roots is None else tuple(roots)))
