"""Test helpers for terminals: a host with a :class:`TerminalService` on a loopback port,
and what the tests ask of a terminal's state."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from agenthost_protocol import methods
from agenthost_protocol import types as t
from agenthost_protocol.agent import AgentDriver
from agenthost_protocol.agent.demo import DemoAgent, demo_root_state
from agenthost_protocol.aio import HostServer, ServerLimits
from agenthost_protocol.aio.client import AsyncClient
from agenthost_protocol.aio.terminals import TerminalOptions, TerminalService, file_uri
from agenthost_protocol.aio.websocket import WebSocketServer, serve_websocket
from agenthost_protocol.host import Host

from ._aio_hosts import clock

ROOT = "ahp-root://"


class TerminalHost:
    def __init__(self, server: HostServer, endpoint: WebSocketServer, service: TerminalService,
                 driver: AgentDriver) -> None:
        self.server = server
        self.endpoint = endpoint
        self.service = service
        self.driver = driver

    @property
    def url(self) -> str:
        return self.endpoint.url


@contextlib.asynccontextmanager
async def terminal_host(root: Path, *, options: TerminalOptions | None = None,
                        max_terminals: int = 8, agent: object = None,
                        limits: dict[str, float] | None = None
                        ) -> AsyncIterator[TerminalHost]:
    """The demo agent (or ``agent``) with terminals confined to ``root``, over WebSocket."""
    host = Host(clock=clock, root=demo_root_state(), server_info=t.Implementation(name="t"))
    server = HostServer(host, limits=ServerLimits(max_terminals=max_terminals,
                                                  **(limits or {})))  # type: ignore[arg-type]
    the_agent = agent if agent is not None else DemoAgent(step_delay=0.0)
    assert isinstance(the_agent, DemoAgent) or hasattr(the_agent, "turn")
    driver = AgentDriver(the_agent, host, server.flush)  # type: ignore[arg-type]
    server.handler = driver.handle
    service = TerminalService(server, options=options, roots=[root])
    server.add_service(service)
    driver.terminals = service
    endpoint = await serve_websocket(server, "127.0.0.1", 0, ping_interval=None)
    try:
        yield TerminalHost(server, endpoint, service, driver)
    finally:
        await driver.close()
        await endpoint.close()


def shell_options(shell: str, home: Path, **kwargs: object) -> TerminalOptions:
    """Options running ``shell`` (found on PATH) with ``home`` as its home (the real
    one's startup files are not the test's), a quiet prompt."""
    path = shutil.which(shell)
    assert path is not None
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
           "PS1": "$ ", "LANG": "C.UTF-8"}
    return TerminalOptions(shell=(path,), env=env, **kwargs)  # type: ignore[arg-type]


async def create(client: AsyncClient, uri: str, cwd: Path | None = None, *,
                 cols: int | None = None, rows: int | None = None) -> t.TerminalState:
    await client.request(methods.CREATE_TERMINAL, t.CreateTerminalParams(
        channel=uri, claim=t.TerminalClientClaim(client_id=client.client_id),
        cwd=None if cwd is None else file_uri(cwd), cols=cols, rows=rows))
    await client.subscribe(uri)
    state = client.state(uri)
    assert isinstance(state, t.TerminalState)
    return state


def text_of(state: object) -> str:
    """The terminal's whole output, as the spec's naive consumer reads it."""
    assert isinstance(state, t.TerminalState)
    return "".join(p.output if isinstance(p, t.TerminalCommandPart)
                   else p.value if isinstance(p, t.TerminalUnclassifiedPart) else ""
                   for p in state.content)


async def until(client: AsyncClient, uri: str, check: Callable[[t.TerminalState], bool],
                timeout: float = 10.0) -> t.TerminalState:
    state = await client.wait_for_state(
        uri, lambda s: isinstance(s, t.TerminalState) and check(s), confirmed=True,
        timeout=timeout)
    assert isinstance(state, t.TerminalState)
    return state


async def type_in(client: AsyncClient, uri: str, text: str) -> None:
    await client.dispatch(uri, t.TerminalInputAction(data=text))


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:][:1] != b"Z"


def require_shell(name: str) -> str:
    """``name``'s path; skipped where it is missing, unless AHP_REQUIRE_ZSH asks for zsh."""
    path = shutil.which(name)
    if path is None:
        if name == "zsh" and os.environ.get("AHP_REQUIRE_ZSH"):
            pytest.fail("zsh is required (AHP_REQUIRE_ZSH is set) but not installed")
        pytest.skip(f"{name} is not installed")
    return path
