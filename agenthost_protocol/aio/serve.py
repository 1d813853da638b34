"""``agenthost-protocol serve``: a real AHP host with the demo agent, on WebSocket or stdio.

:func:`serve_demo` runs until it is told to stop (SIGINT, SIGTERM, or the
``stop`` event) or, with ``stdio``, until the one connection ends; then every
connection is closed cleanly.  :func:`run` is the command's body.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
import time
from collections.abc import Callable, Iterator
from typing import IO

from attrs import field, frozen

from .. import types as t
from .._version import __version__
from ..agents.demo import DemoAgent, demo_root_state
from ..host import Host
from .demo import DemoPacer
from .server import HostServer, ServerLimits
from .stdio import serve_stdio

__all__ = ["ServeOptions", "build_demo_server", "run", "serve_demo"]

log = logging.getLogger(__name__)

SERVER_NAME = "agenthost-protocol"


@frozen(kw_only=True)
class ServeOptions:
    """What ``agenthost-protocol serve`` was asked for."""

    host: str = "127.0.0.1"
    port: int = 8765
    stdio: bool = False
    step_delay: float = 0.05
    """Seconds between two steps of a demo turn."""
    replay_window: int = 10_000
    """Envelopes kept for ``reconnect`` replays (older gaps get snapshots)."""
    ping_interval: float | None = 20.0
    """WebSocket ping frames (``None``: off); AHP's own keepalive is the client's ``ping``."""
    limits: ServerLimits = field(factory=ServerLimits)


def _wall_clock() -> int:
    return time.time_ns() // 1_000_000


def build_demo_server(
    options: ServeOptions, clock: Callable[[], int] = _wall_clock
) -> tuple[HostServer, DemoPacer]:
    """A :class:`HostServer` whose host runs the demo agent, and the agent's pacer."""
    host = Host(
        clock=clock,
        server_info=t.Implementation(name=SERVER_NAME, version=__version__),
        root=demo_root_state(),
        replay_max_envelopes=options.replay_window,
    )
    server = HostServer(host, limits=options.limits)
    pacer = DemoPacer(DemoAgent(host), server, step_delay=options.step_delay)
    return server, pacer


@contextlib.contextmanager
def _stop_on_signals(stop: asyncio.Event) -> Iterator[None]:
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    previous: dict[signal.Signals, object] = {}

    def on_signal(signum: signal.Signals) -> None:
        log.info("received %s: shutting down", signum.name)
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(signum, on_signal, signum)
            installed.append(signum)
        except (NotImplementedError, RuntimeError, ValueError):
            # no add_signal_handler (Windows) or not the main thread: plain handlers
            with contextlib.suppress(ValueError, OSError):
                previous[signum] = signal.signal(
                    signum, lambda n, _f: loop.call_soon_threadsafe(on_signal, signal.Signals(n))
                )
    try:
        yield
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)
        for signum, handler in previous.items():
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(signum, handler)  # type: ignore[arg-type]


async def serve_demo(
    options: ServeOptions,
    *,
    ready: Callable[[str], None] | None = None,
    stop: asyncio.Event | None = None,
    stdin: IO[bytes] | None = None,
    stdout: IO[bytes] | None = None,
    handle_signals: bool = True,
) -> None:
    """Serve the demo host until SIGINT/SIGTERM or ``stop`` (with ``stdio``: or the end).

    ``ready`` is called with ``ws://HOST:PORT`` once the WebSocket server
    listens.  Raises ``ImportError`` when websockets is missing (WebSocket
    mode) and ``OSError`` when the address cannot be bound.
    """
    stop = stop if stop is not None else asyncio.Event()
    server, pacer = build_demo_server(options)
    with _stop_on_signals(stop) if handle_signals else contextlib.nullcontext():
        if options.stdio:
            await _serve_stdio(server, pacer, stop, stdin, stdout)
        else:
            await _serve_websocket(server, pacer, options, stop, ready)


async def _serve_websocket(
    server: HostServer,
    pacer: DemoPacer,
    options: ServeOptions,
    stop: asyncio.Event,
    ready: Callable[[str], None] | None,
) -> None:
    # websockets is optional: stdio mode must work without it
    from .websocket import serve_websocket  # noqa: PLC0415

    endpoint = await serve_websocket(
        server, options.host, options.port, ping_interval=options.ping_interval,
        ping_timeout=options.ping_interval,
    )
    try:
        if ready is not None:
            ready(endpoint.url)
        await stop.wait()
    finally:
        await pacer.close()
        await endpoint.close()
    log.info("stopped")


async def _serve_stdio(
    server: HostServer,
    pacer: DemoPacer,
    stop: asyncio.Event,
    stdin: IO[bytes] | None,
    stdout: IO[bytes] | None,
) -> None:
    connection = asyncio.create_task(serve_stdio(server, stdin, stdout))
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({connection, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        await pacer.close()
        await server.close()
        await asyncio.gather(connection, stopping, return_exceptions=True)
    log.info("stopped")


def run(options: ServeOptions, out: IO[str] | None = None, err: IO[str] | None = None) -> int:
    """The body of ``agenthost-protocol serve``: the exit status.

    Prints ``serving ws://HOST:PORT`` as the first line on ``out`` (not in
    stdio mode, where stdout is the protocol's).  0 after a clean shutdown,
    1 when websockets is missing or the address cannot be bound.
    """
    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr

    def ready(url: str) -> None:
        print(f"serving {url}", file=out, flush=True)

    try:
        asyncio.run(serve_demo(options, ready=ready))
    except KeyboardInterrupt:
        # SIGINT before the handlers were installed: nothing was served yet
        return 0
    except ImportError as e:
        print(f"agenthost-protocol serve: {e}", file=err)
        return 1
    except OSError as e:
        print(f"agenthost-protocol serve: cannot listen on {options.host}:{options.port}: {e}",
              file=err)
        return 1
    return 0
