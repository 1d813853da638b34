"""An ASGI application served in-process by uvicorn or hypercorn, for the ASGI tests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Literal

import hypercorn.asyncio
import hypercorn.config
import uvicorn

from ._aio_hosts import TIMEOUT

Kind = Literal["uvicorn", "uvicorn-wsproto", "hypercorn"]
"""An ASGI server (``uvicorn-wsproto``: uvicorn with its wsproto WebSocket implementation)."""


@contextlib.asynccontextmanager
async def run_server(kind: Kind, app: object, port: int, *,
                     lifespan: Literal["on", "off"] = "on") -> AsyncIterator[None]:
    """``app`` served by ``kind`` on loopback ``port`` until the block ends (then
    stopped and awaited, each within ``TIMEOUT``)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TIMEOUT
    if kind != "hypercorn":
        config = uvicorn.Config(
            app, host="127.0.0.1", port=port, lifespan=lifespan,  # type: ignore[arg-type]
            log_level="warning", ws_ping_interval=None,
            ws="wsproto" if kind == "uvicorn-wsproto" else "auto")
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve())
        while not server.started:
            assert not task.done() and loop.time() < deadline, "uvicorn did not start"
            await asyncio.sleep(0.01)
        try:
            yield
        finally:
            server.should_exit = True
            await asyncio.wait_for(task, TIMEOUT)
        return
    config_h = hypercorn.config.Config()
    config_h.bind = [f"127.0.0.1:{port}"]
    config_h.loglevel = "WARNING"
    config_h.graceful_timeout = 1.0
    config_h.accesslog = None
    stop = asyncio.Event()
    task = asyncio.create_task(hypercorn.asyncio.serve(
        app, config_h, shutdown_trigger=stop.wait))  # type: ignore[arg-type]
    while True:  # listening once a connection is taken
        assert not task.done() and loop.time() < deadline, "hypercorn did not start"
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.02)
            continue
        writer.close()
        break
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, TIMEOUT)
