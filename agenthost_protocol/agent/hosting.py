"""``agenthost-protocol serve``: a real AHP host with an agent, on WebSocket or stdio.

The agent is the built-in demo (the default), or a real agent process on
stdio behind a bridge: an ACP agent (:mod:`..agent.acp_runner`, one
process for every session) or a pi / xcsh agent in RPC mode
(:mod:`..agent.pi_runner`, one process per session), or an
:class:`~agenthost_protocol.agent.Agent` of the agent layer (the demo is
one).  Each is driven by a :class:`ServedAgent` (an
:class:`~agenthost_protocol.agent.AgentService` or a runner) that the one
serving path starts, if it can be started, before anything is served, and
closes at the end.

:func:`serve_host` runs until it is told to stop (SIGINT, SIGTERM, or the
``stop`` event) or, with ``stdio``, until the one connection ends; then the
agent is stopped (its processes too) and every connection is closed
cleanly.  :func:`run` is the command's body.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Final, NoReturn, Protocol, runtime_checkable

from attrs import field, frozen

from .. import types as t
from .._version import __version__
from ..aio.access import AccessPolicy, is_loopback, url_with_token
from ..aio.redact import RedactSecrets
from ..aio.server import HostServer, ServerLimits
from ..host import Authorize, Host, HostStore, OwnershipPolicy, StoreError
from .demo import DEMO_PROVIDER, DemoAgent
from .run import AgentService, build_agent_server
from .settings import SettingsError, replace_token, saved_token
from .settings import settings_path as default_settings_path

if TYPE_CHECKING:
    from ..aio.capture import CaptureDir
    from ..aio.files import Root, Roots
    from .acp_runner import AcpAgentRunner

__all__ = [
    "AgentKind",
    "AgentStartError",
    "ServeOptions",
    "ServedAgent",
    "StartableAgent",
    "add_file_services",
    "build_demo_server",
    "build_server",
    "file_roots",
    "program_name",
    "run",
    "serve_demo",
    "serve_host",
]

log = logging.getLogger(__name__)

SERVER_NAME = "agenthost-protocol"
DEFAULT_MAX_STORE_BYTES: Final = 1024**3
"""``serve``'s store budget unless told otherwise: 1 GiB (``sqlite_store.DEFAULT_MAX_BYTES``,
not imported here: ``--no-store`` never loads SQLite)."""


class AgentKind(str, enum.Enum):
    """Which agent ``serve`` exposes (``--agent``)."""

    DEMO = "demo"
    """The built-in deterministic demo agent (no process)."""
    ACP = "acp"
    """An Agent Client Protocol agent: ``COMMAND ARGS`` spawned once, every session in it."""
    PI = "pi"
    """A pi agent in RPC mode: ``COMMAND ARGS`` spawned once per session."""
    XCSH = "xcsh"
    """The same with the xcsh dialect (``ready`` frame, host tools)."""


def _strings(value: Iterable[str]) -> tuple[str, ...]:
    """``tuple``, as a converter: attrs reads a converter's signature, and a builtin's is
    parsed from text (``tokenize`` compiling its expressions first, milliseconds at start)."""
    return tuple(value)


def _roots(value: Iterable[Root] | None) -> tuple[Root, ...] | None:
    return None if value is None else tuple(value)


@frozen(kw_only=True)
class ServeOptions:
    """What ``agenthost-protocol serve`` was asked for."""

    host: str = "127.0.0.1"
    port: int = 8765
    stdio: bool = False
    step_delay: float = 0.05
    """Seconds between two steps of a demo turn (the demo agent only)."""
    replay_window: int = 10_000
    """Envelopes kept for ``reconnect`` replays (older gaps get snapshots)."""
    ping_interval: float | None = 20.0
    """WebSocket ping frames (``None``: off); AHP's own keepalive is the client's ``ping``."""
    limits: ServerLimits = field(factory=ServerLimits)
    agent: AgentKind = field(default=AgentKind.DEMO, converter=AgentKind)
    agent_object: object = field(default=None, hash=False, repr=False)
    """An :class:`~agenthost_protocol.agent.Agent` to serve instead of ``agent``
    (``serve --agent module:attr``)."""
    agent_command: tuple[str, ...] = field(default=(), converter=_strings)
    """``COMMAND ARGS...`` of the agent process: none for the demo, required otherwise."""
    agent_env: Mapping[str, str] | None = field(default=None, hash=False)
    """The agent processes' environment (``None``: ours, whole)."""
    token: str | None = field(default=None, repr=False)
    """The WebSocket access token (``None``: the one saved in the settings file,
    :mod:`.settings`, made and saved on the first run; none with ``no_token``)."""
    no_token: bool = False
    """Serve WebSocket without a token: only on a loopback address."""
    new_token: bool = False
    """Replace the saved token with a new random one (``serve --new-token``): every
    URL given out before stops working."""
    settings: str | None = None
    """The settings file the token is kept in (``None``: the default,
    :func:`~.settings.settings_path`, in the user's config directory).  Not read in
    stdio mode, which needs no token."""
    allowed_origins: tuple[str, ...] = field(default=(), converter=_strings)
    """Browser ``Origin`` values allowed to connect (none by default)."""
    allowed_hosts: tuple[str, ...] = field(default=(), converter=_strings)
    """``Host`` names accepted beyond ``localhost`` and literal IP addresses."""
    certfile: str | None = None
    """A PEM certificate (chain): serve ``wss://``.  ``keyfile`` is its key
    (``None``: in ``certfile``)."""
    keyfile: str | None = None
    store: str | None = None
    """The SQLite file sessions are kept in across restarts (``None``: the default,
    :meth:`store_name` in the user's data directory)."""
    no_store: bool = False
    """Keep everything in memory only: a restart forgets every session."""
    max_store_bytes: int = DEFAULT_MAX_STORE_BYTES
    """The store's budget (``serve --max-store-bytes``): past it, changes are refused
    (``SQLiteStore.max_bytes``, ``docs/serve.md``, Persistence); disposing of sessions
    frees space."""
    capture: str | None = None
    """A directory that receives every connection's traffic, one transcript file per
    connection (:mod:`.capture`; ``None``: nothing is captured)."""
    close_timeout: float = 3.0
    """Seconds the agent layer waits, when ``serve`` stops, for the turns it cancelled,
    the sessions being set up and the ``dispose_session`` hooks (then as long
    for the agent's ``close``); what has not ended by then is logged and
    abandoned, and the process exits all the same (``driver.CLOSE_TIMEOUT``)."""
    roots: tuple[Root, ...] | None = field(default=None, converter=_roots)
    """The directories whose files clients may read, list and watch, and change where
    ``writable`` (``serve --root DIR[:rw]``, ``docs/files.md``); ``None``: the working
    directory, read-only; ``()``: no files at all."""
    capture_max_bytes: int = 64 * 1024 * 1024
    """The most bytes one connection's capture file grows to (``capture.DEFAULT_MAX_BYTES``;
    not imported here: ``serve`` without ``--capture`` never loads the capture)."""
    no_terminals: bool = False
    """Serve no terminals (``serve --no-terminals``): ``createTerminal`` is refused as
    unsupported and ``Turn.run`` fails."""
    shell: tuple[str, ...] = field(default=(), converter=_strings)
    """The command a terminal runs (``serve --shell``; ``()``: the user's shell)."""
    authorize: Authorize | OwnershipPolicy | None = field(default=None, hash=False,
                                                          repr=False)
    """Users kept apart: the host's ``authorize`` policy (``None``: none, every
    connection may do everything; ``docs/host.md``, "Users kept apart")."""

    def store_path(self) -> str | None:
        """The store file ``serve`` uses, or ``None`` with ``no_store``: ``store``, else
        :meth:`store_name` in the user's data directory."""
        if self.no_store:
            return None
        if self.store is not None:
            return self.store
        from ..sqlite_store import default_store_path  # noqa: PLC0415

        return str(default_store_path(self.store_name()))

    def store_name(self) -> str:
        """The default store's file name, chosen by the agent served, so that different
        agents served at once each have their own (``docs/serve.md``, Persistence):
        ``<provider>.sqlite3`` for an agent of the agent layer (``demo.sqlite3``), and
        ``acp-<program>.sqlite3``, ``pi-<program>.sqlite3`` or ``xcsh-<program>.sqlite3``
        for an agent process, ``<program>`` being the name of the program its command
        runs (the arguments do not count: a changed flag keeps its sessions)."""
        if self.agent_object is not None:
            return _file_name(_provider_of(self.agent_object))
        if self.agent is AgentKind.DEMO or not self.agent_command:
            return _file_name(DEMO_PROVIDER)
        return _file_name(f"{self.agent.value}-{program_name(self.agent_command)}")

    def legacy_store_notice(self) -> str | None:
        """One line for a user upgrading: the default store of earlier versions
        (``host.sqlite3``, one for every agent) exists and this agent's does not yet."""
        if self.no_store or self.store is not None:
            return None
        from ..sqlite_store import default_store_path  # noqa: PLC0415

        legacy, path = default_store_path(), default_store_path(self.store_name())
        if path == legacy or not legacy.exists() or path.exists():
            return None
        return (f"the sessions of earlier versions are in {legacy}, not in this agent's "
                f"store {path}: serve with --store {legacy} to keep using them")

    def open_store(self) -> HostStore | None:
        """The store ``serve`` keeps its sessions in; ``StoreError`` (one line) when the
        file cannot be used (corrupt, another program's, newer, locked, unwritable)."""
        path = self.store_path()
        if path is None:
            return None
        from ..sqlite_store import SQLiteStore, StoreInUse  # noqa: PLC0415

        try:
            return SQLiteStore(path, max_bytes=self.max_store_bytes)
        except StoreInUse as e:
            # the usual cause: this agent is served already; say how to serve it again
            raise StoreInUse(f"{e}; to serve this agent once more, give it another file "
                             "(--store PATH) or none (--no-store: memory only)") from e

    def __attrs_post_init__(self) -> None:
        if self.no_token and self.token is not None:
            raise ValueError("a token and no_token together")
        if self.new_token and (self.token is not None or self.no_token):
            raise ValueError("new_token replaces the saved token: not with a token given "
                             "or no_token")
        if self.new_token and self.stdio:
            raise ValueError("new_token with stdio: a stdio host uses no token")
        if self.no_token and not self.stdio and not is_loopback(self.host):
            raise ValueError(f"--no-token serves {self.host} without a token: anyone who "
                             "can reach it could run code here; only a loopback address "
                             "may be served without one")
        if self.keyfile is not None and self.certfile is None:
            raise ValueError("a keyfile without a certfile")
        if self.no_store and self.store is not None:
            raise ValueError("a store and no_store together")
        if self.capture_max_bytes < 1:
            raise ValueError("capture_max_bytes must be positive")
        if self.max_store_bytes < 1:
            raise ValueError("max_store_bytes must be positive")
        if not 0 <= self.close_timeout <= 3600:  # NaN too
            raise ValueError("close_timeout must be a number of seconds from 0 to 3600")

    def settings_path(self) -> Path:
        """The settings file that keeps the access token."""
        return Path(self.settings) if self.settings is not None else default_settings_path()

    def access_token(self) -> str | None:
        """The WebSocket access token: ``token``; none with ``no_token``; else the
        saved one (made and saved on the first run, replaced with ``new_token``).

        Raises :class:`~.settings.SettingsError` (one line, naming the file)
        when the settings file cannot be used.
        """
        if self.no_token:
            return None
        if self.token is not None:
            return self.token
        path = self.settings_path()
        if self.new_token:
            kept = replace_token(path)
            log.info("a new access token replaced the saved one in %s: URLs given out "
                     "before are refused from now on", kept.path)
        else:
            kept = saved_token(path)
            if kept.created:
                log.info("a new access token was saved in %s: a restart keeps it (serve "
                         "--new-token replaces it)", kept.path)
            else:
                log.info("access token: the one saved in %s", kept.path)
        return kept.token

    def access_policy(self, token: str | None) -> AccessPolicy:
        """The handshake checks for ``token`` and these options."""
        return AccessPolicy(token=token, allowed_origins=self.allowed_origins,
                            allowed_hosts=self.allowed_hosts)


class AgentStartError(Exception):
    """The agent cannot be started: ``serve`` exits 1 with this message, serving nothing."""


class ServedAgent(Protocol):
    """What plays the host's agent: an agent layer's service, or a runner of agent processes.

    It is the server's event handler (it installs itself).  ``close`` stops
    it, its tasks and its processes, bounded in time; it is called once, at
    the end, whatever happened before.
    """

    async def close(self) -> None: ...


@runtime_checkable
class StartableAgent(Protocol):
    """A :class:`ServedAgent` that must start before anything is served."""

    async def start(self) -> None:
        """Raises :class:`AgentStartError` when the agent cannot start."""
        ...

    async def close(self) -> None: ...


_LAUNCHERS = frozenset({
    "npx", "pnpx", "bunx", "uvx", "pipx", "npm", "pnpm", "yarn", "uv", "node", "nodejs",
    "bun", "deno", "python", "python3", "pypy3", "ruby", "env", "sh", "bash", "exec",
})
"""Programs that run another one named later in the command (``npx some-agent``): the
store is named after that one."""
_LAUNCHER_VERBS = frozenset({"run", "exec", "x", "dlx", "tool", "--"})
_SCRIPT_SUFFIXES = (".js", ".mjs", ".cjs", ".ts", ".py", ".rb", ".exe", ".cmd", ".bat")
_NAME_MAX = 64
"""The longest store name (without ``.sqlite3``)."""


def program_name(command: Iterable[str]) -> str:
    """The name of the program ``command`` runs, for naming its store: the base name of
    its first word, or, when that is a launcher (``npx``, ``node``, ``python``,
    ``uvx`` ...), of the first later word that is not an option, a variable assignment
    or a verb such as ``run``; without a script suffix (``.js``, ``.py``) or an npm
    version (``@latest``).  Not sanitised (:func:`_file_name` does that)."""
    words = tuple(command)
    if not words:
        return ""
    first = _base_name(words[0])
    launcher = first.lower().removesuffix(".exe")
    if launcher in _LAUNCHERS or launcher.startswith("python3."):
        for word in words[1:]:
            if word.startswith("-") or "=" in word or word in _LAUNCHER_VERBS:
                continue
            return _base_name(word) or first
    return first


def _base_name(word: str) -> str:
    name = word.replace("\\", "/").rstrip("/").rpartition("/")[2]
    name = name.partition("@")[0] if not name.startswith("@") else name
    for suffix in _SCRIPT_SUFFIXES:
        if name.lower().endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def _file_name(stem: str) -> str:
    """``stem`` made a safe file name: only letters, digits, ``.``, ``_`` and ``-``
    (others become ``_``), no leading dot or dash, at most 64 characters, then
    ``.sqlite3``."""
    import re  # noqa: PLC0415  # only when a default store is named

    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", stem).lstrip("._-")[:_NAME_MAX].rstrip(".")
    return f"{safe or 'agent'}.sqlite3"


def _provider_of(agent: object) -> str:
    from .base import Agent  # noqa: PLC0415

    if isinstance(agent, Agent):
        try:
            return agent.info().provider
        except Exception:  # the agent's own code: it fails later, where it says why
            return type(agent).provider
    return type(agent).__name__


def _wall_clock() -> int:
    return time.time_ns() // 1_000_000


def build_demo_server(
    options: ServeOptions, clock: Callable[[], int] = _wall_clock,
    store: HostStore | None = None,
) -> tuple[HostServer, AgentService]:
    """A :class:`HostServer` whose host runs the demo agent (``options.step_delay``
    apart), and the agent's service."""
    return build_agent_server(DemoAgent(step_delay=options.step_delay), options, clock,
                              store=store)


def build_server(
    options: ServeOptions, clock: Callable[[], int] = _wall_clock,
    store: HostStore | None = None,
) -> tuple[HostServer, ServedAgent]:
    """A :class:`HostServer` whose host runs ``options.agent``, and what drives that agent,
    with the host's files under ``options.roots`` served beside it (:func:`add_file_services`).

    Nothing is spawned yet: a :class:`StartableAgent` is started by
    :func:`serve_host`.  Raises ``ValueError`` for a command given to the
    demo or missing for another agent, or a root that is not a directory,
    :class:`AgentStartError` when the command cannot be found or run, and
    ``ImportError`` when the ACP agent's extra (``agent-client-protocol``) is missing.
    """
    roots = file_roots(options)
    server, agent = _build_server(options, clock, store)
    add_file_services(server, roots)
    return server, agent


def file_roots(options: ServeOptions) -> Roots:
    """``options.roots`` resolved (the working directory, read-only, by default)."""
    from ..aio.files import Root, Roots  # noqa: PLC0415

    roots = options.roots if options.roots is not None else (Root(path=os.getcwd()),)
    return Roots(roots)


def add_file_services(server: HostServer, roots: Roots) -> None:
    """Serve files under ``roots`` on ``server``: reads, lists, writes in writable roots
    (:class:`~agenthost_protocol.aio.files.FileService`) and watches
    (:class:`~agenthost_protocol.aio.watches.WatchService`, within
    ``server.limits.max_watches``).  Nothing without roots."""
    if not roots:
        return
    from ..aio.files import FileService  # noqa: PLC0415
    from ..aio.watches import WatchService  # noqa: PLC0415

    server.add_service(FileService(server, roots))
    server.add_service(WatchService(server, roots))
    for root in roots.roots:
        log.info("files: %s (%s)", root.path, "writable" if root.writable else "read-only")


def _build_server(
    options: ServeOptions, clock: Callable[[], int],
    store: HostStore | None = None,
) -> tuple[HostServer, ServedAgent]:
    if options.agent_object is not None:
        return build_agent_server(options.agent_object, options, clock, store=store)
    kind = options.agent
    if kind is AgentKind.DEMO:
        if options.agent_command:
            raise ValueError("the demo agent takes no command")
        return build_demo_server(options, clock, store)
    if not options.agent_command:
        raise ValueError(f"the {kind.value} agent needs a command")
    command, *args = options.agent_command
    command = _resolve(command)
    env = dict(options.agent_env) if options.agent_env is not None else dict(os.environ)
    if kind is AgentKind.ACP:
        try:
            from .acp_runner import (  # noqa: PLC0415
                AcpAgentCommand,
                build_acp_server,
            )
        except ImportError as e:
            raise ImportError(
                f"the ACP agent needs the acp extra: pip install 'agenthost-protocol[acp]' ({e})"
            ) from e
        server, runner = build_acp_server(
            AcpAgentCommand(command=command, args=tuple(args), env=env), clock=clock,
            replay_window=options.replay_window, limits=options.limits, store=store,
            close_timeout=options.close_timeout, authorize=options.authorize,
        )
        return server, _AcpAgent(runner, options.agent_command)
    # the pi runner has no optional dependency, but only serve --agent pi needs it
    from ..bridges.pi import PiDialect  # noqa: PLC0415
    from .pi_runner import PiAgentCommand, PiAgentRunner, pi_root_state  # noqa: PLC0415

    dialect = PiDialect.XCSH if kind is AgentKind.XCSH else PiDialect.PI
    host = Host(
        clock=clock,
        server_info=t.Implementation(name=SERVER_NAME, version=__version__),
        root=pi_root_state(provider=kind.value, dialect=dialect),
        replay_max_envelopes=options.replay_window,
        store=store,
        authorize=options.authorize,
    )
    server = HostServer(host, limits=options.limits)
    pi = PiAgentRunner(server, PiAgentCommand(command=command, args=tuple(args), env=env),
                       dialect=dialect, provider=kind.value,
                       close_timeout=options.close_timeout)
    return server, pi


def _resolve(command: str) -> str:
    """``command`` checked: found on ``PATH`` and executable; a relative path made absolute.

    Absolute, because a pi session's process runs in the session's working
    directory, where a relative path would name another file.
    """
    if not command:
        raise AgentStartError("the agent command is empty")
    import shutil  # noqa: PLC0415  # agent processes only (it loads bz2, lzma ...)

    where = "" if os.sep in command or (os.altsep and os.altsep in command) else " on PATH"
    if shutil.which(command) is None:
        raise AgentStartError(
            f"cannot start the agent: {command!r} is not an executable file{where}")
    return os.path.abspath(command) if where == "" else command


class _AcpAgent:
    """The ACP runner; a failed start raises :class:`AgentStartError`."""

    def __init__(self, runner: AcpAgentRunner, command: tuple[str, ...]) -> None:
        self.runner = runner
        self._command = command

    async def start(self) -> None:
        import shlex  # noqa: PLC0415  # agent processes only

        name = shlex.join(self._command)
        try:
            await self.runner.start()
        except OSError as e:
            raise AgentStartError(f"cannot start the ACP agent {name}: {e}") from e
        except RuntimeError as e:
            cause = e.__cause__ if e.__cause__ is not None else e
            if isinstance(cause, asyncio.TimeoutError):
                reason = "no answer to initialize in time"
            else:
                reason = str(cause) or type(cause).__name__
            process = self.runner.process
            if (isinstance(cause, ConnectionError) and process is not None
                    and process.returncode is not None):
                reason += f" (it exited with status {process.returncode})"
            raise AgentStartError(
                f"the ACP agent {name} did not initialize: {reason}") from e
        root = self.runner.host.state("ahp-root://")
        names = [a.display_name for a in root.agents] if isinstance(root, t.RootState) else []
        log.info("the ACP agent is up: %s (pid %s)", ", ".join(names),
                 self.runner.process.pid if self.runner.process else "?")

    async def close(self) -> None:
        await self.runner.close()


class _Closer:
    """Closes the agent once: where the serving path says, or at the very end."""

    def __init__(self, agent: ServedAgent) -> None:
        self._agent = agent
        self._closed = False

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._agent.close()


_SECOND_SIGNAL: Final = b"agenthost-protocol serve: a second signal: exiting at once\n"


def _exit_at_once(signum: int) -> NoReturn:
    """The second SIGINT or SIGTERM: end the process now, whatever still runs.

    Nothing acknowledged is lost: the host writes every change to its store
    before it sends anything about it (``Host.commit`` runs first in every
    flush), and SQLite rolls back at the next open a transaction this exit
    cut short.  So the store is not touched here: a signal handler runs
    between two bytecodes of the main thread, maybe inside a commit.
    """
    with contextlib.suppress(OSError):
        os.write(2, _SECOND_SIGNAL)
    os._exit(128 + signum)


@contextlib.contextmanager
def _stop_on_signals(stop: asyncio.Event) -> Iterator[None]:
    """SIGINT and SIGTERM set ``stop``; once one came, the next exits the process at once.

    Python-level handlers (not the loop's): they run in the main thread even
    while the loop is blocked (an agent that calls ``time.sleep`` in a turn),
    and the first one wakes the loop itself.  Once a signal came the handlers
    stay, since the process is on its way out; otherwise the previous ones
    are put back.
    """
    loop = asyncio.get_running_loop()
    previous: dict[signal.Signals, object] = {}
    received = 0

    def on_signal(signum: signal.Signals) -> None:
        log.info("received %s: shutting down (a second SIGINT or SIGTERM exits at once)",
                 signum.name)
        stop.set()

    def handler(signum: int, _frame: object) -> None:
        nonlocal received
        received += 1
        if received > 1:
            _exit_at_once(signum)
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(on_signal, signal.Signals(signum))

    for signum in (signal.SIGINT, signal.SIGTERM):
        # not the main thread (ValueError): no signals here, as before
        with contextlib.suppress(ValueError, OSError):
            previous[signum] = signal.signal(signum, handler)
    try:
        yield
    finally:
        if not received:
            for signum, old in previous.items():
                with contextlib.suppress(ValueError, OSError, TypeError):
                    signal.signal(signum, old)  # type: ignore[arg-type]


async def serve_host(
    options: ServeOptions,
    *,
    ready: Callable[[str], None] | None = None,
    stop: asyncio.Event | None = None,
    stdin: IO[bytes] | None = None,
    stdout: IO[bytes] | None = None,
    handle_signals: bool = True,
    clock: Callable[[], int] = _wall_clock,
) -> None:
    """Serve ``options.agent`` until SIGINT/SIGTERM or ``stop`` (with ``stdio``: or the end).

    The agent is started first (a runner spawns its process); ``ready`` is
    called with the URL to give clients (``ws://HOST:PORT/?token=...``) once
    the WebSocket server listens.  At
    the end the agent is closed (its processes stopped), then every
    connection.  Raises :class:`AgentStartError` when the agent cannot
    start (nothing was served), :class:`~.settings.SettingsError` when the
    settings file that keeps the token cannot be used (checked before the
    agent starts),
    ``ValueError`` for a command the agent kind
    does not take, ``ImportError`` when websockets (WebSocket mode) or the
    ACP extra is missing, ``OSError`` when the address cannot be bound, and
    :class:`~agenthost_protocol.aio.capture.CaptureError` when ``options.capture``
    cannot hold captures (checked first).  A stop while the agent starts
    cancels the start and returns.
    """
    stop = stop if stop is not None else asyncio.Event()
    capture = _open_capture(options)
    notice = options.legacy_store_notice()
    store = options.open_store()
    log.info("store: %s", options.store_path() or "none (memory only)")
    if notice is not None:
        log.warning("%s", notice)
    try:
        # before the agent starts: a settings file that cannot be used stops nothing
        # half-way
        token = None if options.stdio else options.access_token()
        _hide_in_logs(token)
        server, agent = build_server(options, clock, store)
    except BaseException:
        if store is not None:
            store.close()
        raise
    if capture is not None:
        server.stream_wrapper = capture
    _add_terminals(server, agent, options)
    closer = _Closer(agent)
    with _stop_on_signals(stop) if handle_signals else contextlib.nullcontext():
        try:
            if not await _start(agent, stop):
                log.info("stopped before the agent started")
                return
            if options.agent_command:
                import shlex  # noqa: PLC0415  # agent processes only

                log.info("agent: %s, %s", options.agent.value, shlex.join(options.agent_command))
            if options.stdio:
                await _serve_stdio(server, closer, stop, stdin, stdout)
            else:
                await _serve_websocket(server, closer, options, stop, ready, token=token)
        finally:
            try:
                await closer.close()
            finally:
                if store is not None:
                    # what the agent's end dispatched is written before the file closes
                    server.host.commit(retry=True)
                    store.close()


serve_demo = serve_host
"""The former name of :func:`serve_host` (the demo is ``ServeOptions``' default agent)."""


def _add_terminals(server: HostServer, agent: ServedAgent, options: ServeOptions) -> None:
    """Terminals for every agent kind, unless ``no_terminals``; an agent of the agent
    layer gets them for ``Turn.run`` too."""
    if options.no_terminals:
        return
    from ..aio.terminals import TerminalOptions, TerminalService  # noqa: PLC0415

    # a terminal starts in a directory the files are served from (the working
    # directory when no root is served)
    roots = [root.path for root in file_roots(options).roots] or None
    service = TerminalService(server, options=TerminalOptions(shell=options.shell), roots=roots)
    server.add_service(service)
    if isinstance(agent, AgentService):
        agent.driver.terminals = service


def _open_capture(options: ServeOptions) -> CaptureDir | None:
    """``options.capture``, ready to receive files; raises ``CaptureError`` at start when
    it cannot, rather than leaving every connection uncaptured without a word."""
    if options.capture is None:
        return None
    from ..aio.capture import CaptureDir  # noqa: PLC0415  # --capture only

    capture = CaptureDir(options.capture, max_bytes=options.capture_max_bytes)
    log.info("capturing every connection's traffic to %s", capture.path)
    return capture


async def _start(agent: ServedAgent, stop: asyncio.Event) -> bool:
    """Start ``agent`` if it starts; ``False`` if ``stop`` came first (the start is cancelled)."""
    if not isinstance(agent, StartableAgent):
        return True
    starting = asyncio.ensure_future(agent.start())
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        if not starting.done():
            starting.cancel()
        await asyncio.gather(starting, stopping, return_exceptions=True)
    if starting.cancelled():
        return False
    starting.result()  # raises AgentStartError
    return True


_LOG_SECRETS: Final = RedactSecrets()


def _hide_in_logs(secret: str | None) -> None:
    """What the root logger's handlers (``serve``'s stderr) write shows ``secret`` as
    ``REDACTED``, whichever logger the line comes from, whatever level; and no line
    is longer than :data:`~agenthost_protocol.aio.redact.MAX_LOG_TEXT` (an agent's
    exception text can be megabytes), with a token or without."""
    if secret is not None:
        _LOG_SECRETS.add(secret)
    for handler in logging.getLogger().handlers:
        if _LOG_SECRETS not in handler.filters:
            handler.addFilter(_LOG_SECRETS)


async def _serve_websocket(
    server: HostServer,
    agent: _Closer,
    options: ServeOptions,
    stop: asyncio.Event,
    ready: Callable[[str], None] | None,
    *,
    token: str | None,
) -> None:
    # websockets is optional: stdio mode must work without it
    from ..aio.web import WebFiles  # noqa: PLC0415
    from ..aio.websocket import serve_websocket  # noqa: PLC0415

    context = None
    if options.certfile is not None:
        import ssl  # noqa: PLC0415

        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(options.certfile, options.keyfile)
    if token is None:
        log.warning("serving without an access token (--no-token): any program on this "
                    "machine can drive the agent")
    if not is_loopback(options.host) and context is None:
        log.warning("serving %s without TLS: the token and everything else cross the "
                    "network in clear text (see --certfile)", options.host)
    endpoint = await serve_websocket(
        server, options.host, options.port, ping_interval=options.ping_interval,
        ping_timeout=options.ping_interval, access=options.access_policy(token),
        ssl=context, web=WebFiles(),
    )
    try:
        if ready is not None:
            ready(url_with_token(endpoint.url, token))
        await stop.wait()
    finally:
        try:
            # the agent first: what its end dispatches still reaches the clients
            await agent.close()
        finally:
            await endpoint.close()
    log.info("stopped")


async def _serve_stdio(
    server: HostServer,
    agent: _Closer,
    stop: asyncio.Event,
    stdin: IO[bytes] | None,
    stdout: IO[bytes] | None,
) -> None:
    from ..aio.stdio import serve_stdio  # noqa: PLC0415  # stdio mode only

    connection = asyncio.create_task(serve_stdio(server, stdin, stdout))
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({connection, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        try:
            await agent.close()
        finally:
            await server.close()
            await asyncio.gather(connection, stopping, return_exceptions=True)
    log.info("stopped")


def _return_large_blocks_to_the_system() -> None:
    """Pin glibc's mmap threshold at 1 MiB (where it can be set).

    glibc raises the threshold to the size of any large block freed, so after
    a few multi-megabyte messages later ones come from the heap, whose freed
    space is seldom handed back: measured with 100 stalled subscribers and
    four 15 MB actions, the peak RSS was 805 MB with the dynamic threshold
    and 339 MB pinned, for the same 288 MB of live Python memory.
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes  # noqa: PLC0415

    try:
        # the symbols the process is linked with: glibc's mallopt, where glibc
        # allocates (``ctypes.util.find_library`` would run ldconfig to name it)
        libc = ctypes.CDLL(None)
        m_mmap_threshold = -3
        libc.mallopt(m_mmap_threshold, 1024 * 1024)
    except (OSError, AttributeError):
        pass  # not glibc: nothing to pin


def run(options: ServeOptions, out: IO[str] | None = None, err: IO[str] | None = None) -> int:
    """The body of ``agenthost-protocol serve``: the exit status.

    Prints ``serving ws://HOST:PORT/?token=...`` (the URL to give clients) as
    the first line on ``out``, ``web http://HOST:PORT/#token=...`` (the web
    client's address) as the second, ``store PATH`` as the third (none of them
    in stdio mode, where stdout is the protocol's).  0 after a clean shutdown,
    1 when the agent cannot start, the settings file cannot be used,
    websockets (or the ACP extra) is missing,
    the address cannot be bound, or the capture directory cannot be written.
    """
    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr

    def ready(url: str) -> None:
        from ..aio.web import page_url  # noqa: PLC0415

        print(f"serving {url}", file=out, flush=True)
        print(f"web {page_url(url)}", file=out, flush=True)
        path = options.store_path()
        print(f"store {path}" if path is not None else "store none (--no-store: memory only)",
              file=out, flush=True)
        # after the URL (ctypes is slow to load), before any message is read
        _return_large_blocks_to_the_system()

    if options.stdio:
        _return_large_blocks_to_the_system()
    # none without --capture, which never loads the capture module
    capture_errors: tuple[type[Exception], ...] = ()
    if options.capture is not None:
        from ..aio.capture import CaptureError  # noqa: PLC0415

        capture_errors = (CaptureError,)
    try:
        stuck = _run_bounded(serve_host(options, ready=ready))
    except KeyboardInterrupt:
        # SIGINT before the handlers were installed: nothing was served yet
        return 0
    except (AgentStartError, ImportError, ValueError, StoreError, SettingsError) as e:
        print(f"agenthost-protocol serve: {e}", file=err)
        return 1
    except capture_errors as e:
        print(f"agenthost-protocol serve: {e}", file=err)
        return 1
    except OSError as e:
        print(f"agenthost-protocol serve: cannot listen on {options.host}:{options.port}: {e}",
              file=err)
        return 1
    if stuck:
        # the interpreter would wait for such threads at its exit, maybe for ever, and
        # finalising a coroutine that catches everything can hang it as well: the
        # store is closed, the logs and outputs are flushed, nothing else is owed
        logging.shutdown()
        for stream in (out, err, sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(0)
    return 0


_LEFTOVER_GRACE: Final = 0.5
"""Seconds the tasks still pending after :func:`serve_host` returned (the agent
layer abandoned them: they catch cancellation) get once more, and as long for the
default executor's threads, before ``serve`` goes on without them."""


_EXECUTOR_THREADS: Final = "agenthost-executor"


def _run_bounded(main: Coroutine[object, object, None]) -> bool:
    """``asyncio.run(main)``, but the end is bounded: ``asyncio.run`` cancels what is
    left and waits for it without a deadline (a task that catches the cancellation
    would keep the process for ever), then for every executor thread.  Here what
    is left gets :data:`_LEFTOVER_GRACE` seconds, and the threads as long.

    ``True`` when a task or an executor thread was abandoned: the caller exits
    without waiting for them (``os._exit``)."""
    import threading  # noqa: PLC0415
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415  # asyncio loads it

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    # ours, so that its threads can be told apart (asyncio's own shutdown of the default
    # executor joins them on the loop's thread, without a deadline)
    executor = ThreadPoolExecutor(thread_name_prefix=_EXECUTOR_THREADS)
    loop.set_default_executor(executor)
    stuck = False
    try:
        loop.run_until_complete(main)
    finally:
        try:
            left = [task for task in asyncio.all_tasks(loop) if not task.done()]
            for task in left:
                task.cancel()
            if left:
                _, pending = loop.run_until_complete(
                    asyncio.wait(left, timeout=_LEFTOVER_GRACE))
                if pending:
                    log.warning("%d task(s) ignored their cancellation: abandoned",
                                len(pending))
                    stuck = True
            with contextlib.suppress(asyncio.TimeoutError):
                loop.run_until_complete(
                    asyncio.wait_for(loop.shutdown_asyncgens(), _LEFTOVER_GRACE))
            executor.shutdown(wait=False, cancel_futures=True)  # idle threads end now
            deadline = time.monotonic() + _LEFTOVER_GRACE
            running = 0
            for thread in threading.enumerate():
                if thread.name.startswith(_EXECUTOR_THREADS):
                    thread.join(max(0.0, deadline - time.monotonic()))
                    running += thread.is_alive()
            if running:
                log.warning("%d thread(s) of the agent are still running: abandoned", running)
                stuck = True
        finally:
            asyncio.set_event_loop(None)
            loop.close()
    return stuck
