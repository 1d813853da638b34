"""A FastAPI application that hosts an agent for several users, each with their own login,
none of whom sees the others' sessions.

The demo agent, its sessions kept in a SQLite file, mounted at ``/ahp/`` with
``asgi_app``; ``authenticate`` turns a bearer token into the user it belongs to,
and the ready-made ``OwnershipPolicy`` keeps each user's sessions their own
(``ops`` is an admin and sees them all).  Run it::

    uvicorn examples.fastapi_host:create_app --factory --port 8000   # repository root
    agenthost-protocol chat 'ws://127.0.0.1:8000/ahp/?token=ann-secret' hello --yes
    agenthost-protocol sessions 'ws://127.0.0.1:8000/ahp/?token=ben-secret'    # none of ann's

(``chat`` and ``sessions`` send a URL's ``token=`` as ``Authorization: Bearer``,
so it never reaches uvicorn's access log.)  The users and their tokens come
from ``FASTAPI_HOST_USERS`` (``name:token,name:token``; the ones above when it
is not set: change them), the store's file from ``FASTAPI_HOST_STORE``
(``fastapi_host.sqlite3`` in the current directory when it is not set).

    .venv/bin/python -m examples.fastapi_host

checks itself instead: uvicorn on a free loopback port, ``agenthost-protocol
chat`` as two users, each user's ``agenthost-protocol sessions --json`` listing
their own session only (and the admin's both), ``agenthost-protocol check-host``
against it as one of the users; uvicorn is stopped whatever happens.  See docs/embedding.md,
"Users kept apart".
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

from fastapi import FastAPI

from agenthost_protocol.agent import build_agent_server
from agenthost_protocol.agent.demo import DemoAgent
from agenthost_protocol.agent.hosting import ServeOptions
from agenthost_protocol.asgi import asgi_app
from agenthost_protocol.host import OwnershipPolicy
from agenthost_protocol.sqlite_store import SQLiteStore

ADMIN = "ops"
DEFAULT_USERS = "ann:ann-secret,ben:ben-secret,ops:ops-secret"


def users() -> dict[str, str]:
    """Token -> user name, from ``FASTAPI_HOST_USERS`` (``name:token,...``)."""
    spec = os.environ.get("FASTAPI_HOST_USERS", DEFAULT_USERS)
    table = {}
    for entry in spec.split(","):
        name, _, token = entry.strip().partition(":")
        if name and token:
            table[token] = name
    return table


def bearer(scope: Mapping[str, object]) -> str | None:
    """The ``Authorization: Bearer`` token of an ASGI scope's handshake."""
    headers = scope.get("headers")
    for name, value in headers if isinstance(headers, list) else ():
        if name == b"authorization" and value[:7].lower() == b"bearer ":
            return bytes(value[7:]).decode("latin-1").strip()
    return None


def create_app() -> FastAPI:
    """The application: the host at ``/ahp/``, a page at ``/`` that says where it is."""
    tokens = users()
    store = SQLiteStore(os.environ.get("FASTAPI_HOST_STORE", "fastapi_host.sqlite3"))
    server, service = build_agent_server(
        DemoAgent(step_delay=0.01), ServeOptions(), lambda: time.time_ns() // 1_000_000,
        store=store,
        authorize=OwnershipPolicy(is_admin=lambda user: user == ADMIN),
    )

    def authenticate(scope: Mapping[str, object]) -> str | None:
        # your own login goes here: a cookie, a session middleware's user, a JWT ...
        token = bearer(scope)
        if token is None:
            return None
        # compared in constant time, whichever user's it is
        found = [name for known, name in tokens.items()
                 if secrets.compare_digest(known.encode(), token.encode())]
        return found[0] if found else None

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # FastAPI does not pass lifespan events to a mounted application: the host
        # is started and closed here
        await service.start()
        try:
            yield
        finally:
            await service.close()
            await server.close()
            store.close()

    app = FastAPI(lifespan=lifespan)
    app.mount("/ahp", asgi_app(server, authenticate=authenticate))

    @app.get("/")
    def index() -> dict[str, str]:
        return {"ahp": "/ahp/", "how": "agenthost-protocol chat 'ws://HOST/ahp/?token=...'"}

    return app


# -- the self-check: python -m examples.fastapi_host ------------------------------------------

WAIT = 20.0  # seconds for any one command: a stuck example fails instead of hanging CI


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _cli() -> list[str]:
    script = Path(sys.executable).with_name("agenthost-protocol")
    found = str(script) if script.exists() else shutil.which("agenthost-protocol")
    if found is None:
        raise SystemExit("agenthost-protocol is not installed (pip install -e '.[dev,ws]')")
    return [found]


def _run(args: list[str], env: Mapping[str, str], timeout: float = WAIT) -> str:
    done = subprocess.run([*_cli(), *args], env=dict(env), capture_output=True, text=True,
                          timeout=timeout, check=False)
    if done.returncode != 0:
        raise SystemExit(f"agenthost-protocol {args[0]} exited {done.returncode}:\n"
                         f"{done.stdout}{done.stderr}")
    return done.stdout


def _wait_listening(port: int, uvicorn: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if uvicorn.poll() is not None:
            raise SystemExit(f"uvicorn exited {uvicorn.returncode}:\n{log.read_text()}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.1)
    raise SystemExit(f"uvicorn did not listen on {port} within {WAIT} s:\n{log.read_text()}")


def _listed(url: str, env: Mapping[str, str]) -> list[str]:
    out = _run(["sessions", "list", "--json", "--no-turns", url], env)
    return sorted(json.loads(line)["session"] for line in out.splitlines() if line.strip())


def _stop_on_sigterm(signum: int, frame: object) -> None:
    # CI's `timeout` sends SIGTERM: unwind, so that uvicorn is stopped on the way out
    raise SystemExit(f"stopped by signal {signum}")


def self_check() -> None:
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    tokens = {name: secrets.token_urlsafe(16) for name in ("ann", "ben", ADMIN)}
    with tempfile.TemporaryDirectory(prefix="fastapi-host-") as tmp:
        port = _free_port()
        env = {**os.environ,
               "FASTAPI_HOST_USERS": ",".join(f"{n}:{tok}" for n, tok in tokens.items()),
               "FASTAPI_HOST_STORE": str(Path(tmp) / "sessions.sqlite3"),
               "XDG_CONFIG_HOME": tmp, "XDG_DATA_HOME": tmp}
        env.pop("AHP_TOKEN", None)
        log = Path(tmp) / "uvicorn.log"
        with log.open("wb") as out:
            uvicorn = subprocess.Popen(
                [sys.executable, "-m", "uvicorn", "examples.fastapi_host:create_app",
                 "--factory", "--host", "127.0.0.1", "--port", str(port)],
                env=env, stdout=out, stderr=subprocess.STDOUT,
                cwd=Path(__file__).resolve().parent.parent)
        try:
            _wait_listening(port, uvicorn, log)

            def url(name: str) -> str:
                return f"ws://127.0.0.1:{port}/ahp/?token={tokens[name]}"

            for name in ("ann", "ben"):
                reply = _run(["chat", url(name), f"hello from {name}", "--yes"], env)
                print(f"{name} chatted: {reply.strip()[:60]!r}")
            ann, ben = _listed(url("ann"), env), _listed(url("ben"), env)
            both = _listed(url(ADMIN), env)
            print(f"ann sees {ann}, ben sees {ben}, {ADMIN} sees {both}")
            if len(ann) != 1 or len(ben) != 1 or set(ann) & set(ben):
                raise SystemExit("each user should see their own session, and only it")
            if both != sorted(ann + ben):
                raise SystemExit(f"the admin should see both sessions, not {both}")
            checked = _run(["check-host", url("ann"), "--examples", "5", "--steps", "15",
                            "--shrink-time", "5"], env, timeout=45)
            print(checked.strip().splitlines()[-1])
        finally:
            uvicorn.terminate()
            try:
                uvicorn.wait(10)
            except subprocess.TimeoutExpired:
                uvicorn.kill()
                uvicorn.wait(5)
    print("fastapi_host: two users kept apart")


if __name__ == "__main__":
    self_check()
