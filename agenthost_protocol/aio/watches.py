"""File watches as AHP resource-watch channels (``createResourceWatch``).

:class:`WatchService` answers ``createResourceWatch`` on a ``file:`` URI
inside the roots (:class:`~agenthost_protocol.aio.files.Roots`) with a new
``ahp-resource-watch:/<id>`` channel, whose ``resourceWatch/changed``
actions report the files added, updated and deleted under it
(``docs/files.md``, Watches).  The watching itself is the ``watchfiles``
package's (inotify, FSEvents ... through Rust's ``notify``), imported only
when the first watch starts: without it installed, ``createResourceWatch``
is refused ``-32601`` saying so.

* ``recursive`` false reports the URI itself and, for a directory, its
  direct children only; ``includes`` and ``excludes`` are globs (or plain
  paths) relative to the URI: :func:`glob_matches`, a pure matcher without
  backtracking.
* A watch ends when its last subscriber leaves: it unsubscribes, or its
  connection closes, or reconnects without it (the core's
  :class:`~agenthost_protocol.host.Unsubscribed` and
  :class:`~agenthost_protocol.host.ConnectionClosed`).  A watch nobody
  subscribes to ends when the connection that made it closes, or after
  ``unclaimed_timeout`` seconds (and every watch is checked that often).
* Bounded: at most ``max_watches`` at once (``ServerLimits.max_watches``);
  changes are gathered for ``debounce_ms`` and at most ``max_pending``
  distinct paths wait for delivery: past that the waiting ones are dropped
  and the watched URI itself is reported ``updated`` (rescan it).
* Confined: an event whose directory is reached through a symbolic link (the
  watcher follows them) is reported by its real path when that is inside the
  watch, and not at all when it is not (the link leads out).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import uuid
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Final
from urllib.parse import quote

from .. import types as t
from ..host import ConnectionClosed, Event, HostConnection, RequestReceived, Unsubscribed
from ..types.error_codes import AhpErrorCode, JsonRpcErrorCode
from .files import FileAccessError, Roots, error_text, parse_file_uri

if TYPE_CHECKING:
    from .server import HostServer

__all__ = [
    "MAX_PATTERNS",
    "WATCH_SCHEME",
    "WatchService",
    "compile_globs",
    "glob_matches",
]

log = logging.getLogger(__name__)

WATCH_SCHEME: Final = "ahp-resource-watch:/"
MAX_PATTERNS: Final = 64
"""Globs one watch may give (includes and excludes each)."""
MAX_PATTERN_LENGTH: Final = 1024
MAX_BRACE_EXPANSIONS: Final = 64
"""Patterns one glob's ``{a,b}`` alternatives may expand to."""

# -- globs (pure) -------------------------------------------------------------------------


def _expand_braces(pattern: str, limit: int = MAX_BRACE_EXPANSIONS) -> list[str]:
    """``a{b,c}d`` as ``abd``, ``acd`` (nested too), at most ``limit`` of them."""
    depth = 0
    start = -1
    for i, char in enumerate(pattern):
        if char == "{":
            if depth == 0:
                start = i
            depth += 1
        elif char == "}" and depth:
            depth -= 1
            if depth == 0:
                inner = pattern[start + 1 : i]
                options: list[str] = []
                level = 0
                piece = ""
                for c in inner:
                    if c == "," and level == 0:
                        options.append(piece)
                        piece = ""
                        continue
                    level += (c == "{") - (c == "}")
                    piece += c
                options.append(piece)
                out: list[str] = []
                for option in options:
                    for rest in _expand_braces(option + pattern[i + 1 :], limit):
                        out.append(pattern[:start] + rest)
                        if len(out) > limit:
                            raise ValueError("a glob with too many {...} alternatives")
                return out
    return [pattern]


def _tokens(segment: str) -> list[str | frozenset[str] | tuple[bool, str]]:
    """A segment's tokens: a literal character, ``*``, ``?``, or a class
    ``(negated, members)`` (ranges expanded lazily by :func:`_class_has`)."""
    out: list[str | frozenset[str] | tuple[bool, str]] = []
    i = 0
    while i < len(segment):
        char = segment[i]
        if char == "[":
            end = segment.find("]", i + 2)
            if end != -1:
                body = segment[i + 1 : end]
                negated = body[:1] in ("!", "^")
                out.append((negated, body[1:] if negated else body))
                i = end + 1
                continue
        if char in "*?":
            if char == "*" and out and out[-1] == "*":
                i += 1
                continue
            out.append(char)
        else:
            out.append(frozenset(char))
        i += 1
    return out


def _class_has(body: str, char: str) -> bool:
    i = 0
    while i < len(body):
        if i + 2 < len(body) and body[i + 1] == "-":
            if body[i] <= char <= body[i + 2]:
                return True
            i += 3
        else:
            if body[i] == char:
                return True
            i += 1
    return False


def _one(token: str | frozenset[str] | tuple[bool, str], char: str) -> bool:
    if token == "?":
        return True
    if isinstance(token, frozenset):
        return char in token
    if isinstance(token, tuple):
        negated, body = token
        return _class_has(body, char) != negated
    return False


def _segment_matches(tokens: Sequence[str | frozenset[str] | tuple[bool, str]],
                     name: str) -> bool:
    """Wildcard match of one path segment, greedy with one backtrack point per ``*``:
    linear in practice, O(len(tokens) * len(name)) at worst."""
    t_i = n_i = 0
    star = -1
    mark = 0
    while n_i < len(name):
        if t_i < len(tokens) and tokens[t_i] != "*" and _one(tokens[t_i], name[n_i]):
            t_i += 1
            n_i += 1
        elif t_i < len(tokens) and tokens[t_i] == "*":
            star = t_i
            mark = n_i
            t_i += 1
        elif star != -1:
            t_i = star + 1
            mark += 1
            n_i = mark
        else:
            return False
    while t_i < len(tokens) and tokens[t_i] == "*":
        t_i += 1
    return t_i == len(tokens)


_Compiled = tuple[tuple[str | list[str | frozenset[str] | tuple[bool, str]], ...], ...]


def compile_globs(patterns: Iterable[str]) -> _Compiled:
    """Globs made ready for :func:`glob_matches` (pure): ``**`` any number of
    segments, ``*`` and ``?`` within one, ``[...]`` a class, ``{a,b}``
    alternatives; a leading ``./`` or ``/`` is dropped.  ``ValueError`` for too
    many or too long ones."""
    compiled: list[tuple[str | list[str | frozenset[str] | tuple[bool, str]], ...]] = []
    patterns = list(patterns)
    if len(patterns) > MAX_PATTERNS:
        raise ValueError(f"more than {MAX_PATTERNS} globs")
    for pattern in patterns:
        if len(pattern) > MAX_PATTERN_LENGTH:
            raise ValueError(f"a glob longer than {MAX_PATTERN_LENGTH} characters")
        for expanded in _expand_braces(pattern):
            segments = [s for s in expanded.removeprefix("./").split("/") if s not in ("", ".")]
            out: list[str | list[str | frozenset[str] | tuple[bool, str]]] = []
            for segment in segments:
                if segment == "**":
                    if out and out[-1] == "**":
                        continue
                    out.append("**")
                else:
                    out.append(_tokens(segment))
            compiled.append(tuple(out))
    return tuple(compiled)


def _path_matches(pattern: Sequence[str | list[str | frozenset[str] | tuple[bool, str]]],
                  parts: Sequence[str]) -> bool:
    """Whether ``pattern`` matches ``parts`` or one of its ancestors (a plain path
    names a subtree); dynamic programming over segments, no backtracking."""
    # reach[j]: the pattern's first i segments can match parts[:j]
    reach = [True] + [False] * len(parts)
    for segment in pattern:
        if segment == "**":
            seen = False
            for j in range(len(reach)):
                seen = seen or reach[j]
                reach[j] = seen
            continue
        assert not isinstance(segment, str)
        reach = [False] + [reach[j] and _segment_matches(segment, parts[j])
                           for j in range(len(parts))]
        if not any(reach):
            return False
    return any(reach[1:]) or (not parts and reach[0])


def glob_matches(compiled: _Compiled, rel: str) -> bool:
    """Whether the relative path ``rel`` (``/``-separated), or a directory above it,
    matches one of the compiled globs (pure)."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    return any(_path_matches(pattern, parts) for pattern in compiled)


# -- the watches ------------------------------------------------------------------------


class _Watch:
    """One watcher thread and the changes it gathered for the event loop."""

    def __init__(self, service: WatchService, channel: str, uri: str, path: str, *,
                 recursive: bool, includes: _Compiled | None, excludes: _Compiled,
                 creator: HostConnection) -> None:
        self.service = service
        self.channel = channel
        self.uri = uri
        self.path = path
        self.recursive = recursive
        self.includes = includes
        self.excludes = excludes
        self.creator = creator
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._pending: dict[str, t.ResourceChangeType] = {}
        self._overflow = False
        self._scheduled = False
        self.thread: threading.Thread | None = None
        self.unclaimed: asyncio.TimerHandle | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.thread = threading.Thread(target=self._run, args=(loop,), daemon=True,
                                       name=f"agenthost-watch {self.channel}")
        self.thread.start()

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            import watchfiles  # noqa: PLC0415

            for changes in watchfiles.watch(
                self.path, watch_filter=None, debounce=self.service.debounce_ms,
                step=self.service.step_ms, stop_event=self.stop, rust_timeout=0,
                raise_interrupt=False, recursive=self.recursive,
                ignore_permission_denied=True,
            ):
                self._take(changes, loop)
        except Exception:
            if not self.stop.is_set():
                log.exception("the watch %s failed", self.channel)

    def _take(self, changes: Iterable[tuple[int, str]], loop: asyncio.AbstractEventLoop) -> None:
        kinds = {1: t.ResourceChangeType.ADDED, 2: t.ResourceChangeType.UPDATED,
                 3: t.ResourceChangeType.DELETED}
        found: list[tuple[str, t.ResourceChangeType]] = []
        for change, path in changes:
            kind = kinds.get(int(change))
            uri = self._reported(path) if kind is not None else None
            if uri is not None and kind is not None:
                found.append((uri, kind))
        if not found:
            return
        with self._lock:
            for uri, kind in found:
                before = self._pending.get(uri)
                if before is t.ResourceChangeType.ADDED and kind is t.ResourceChangeType.UPDATED:
                    continue
                self._pending[uri] = kind
            if len(self._pending) > self.service.max_pending:
                self._pending.clear()
                self._overflow = True
            if self._scheduled:
                return
            self._scheduled = True
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody listens
            loop.call_soon_threadsafe(self.service._deliver, self)

    def _reported(self, path: str) -> str | None:
        """The URI ``path`` is reported as, or ``None`` when it is not reported."""
        if path == self.path:
            rel = ""
        else:
            parent = os.path.dirname(path)
            real = os.path.realpath(parent)
            if real != parent:
                # reached through a link (the watcher follows them, and names a
                # directory seen twice by its last name): reported by its real
                # path when that is inside the watch, never when it leads out
                if real != self.path and not real.startswith(self.path.rstrip("/") + "/"):
                    return None
                path = os.path.join(real, os.path.basename(path))
            rel = os.path.relpath(path, self.path)
            if rel == ".." or rel.startswith("../") or os.path.isabs(rel):
                return None
            if not self.recursive and "/" in rel:
                return None
        if rel and self.excludes and glob_matches(self.excludes, rel):
            return None
        if rel and self.includes is not None and not glob_matches(self.includes, rel):
            return None
        if not rel:
            return self.uri
        return (self.uri.rstrip("/") + "/"
                + quote(os.fsencode(rel), safe="/-._~!$&'()*+,;=:@"))

    def take_pending(self) -> tuple[list[t.ResourceChange], bool]:
        with self._lock:
            pending, overflow = self._pending, self._overflow
            self._pending = {}
            self._overflow = False
            self._scheduled = False
        return [t.ResourceChange(uri=uri, type=kind) for uri, kind in pending.items()], overflow


class WatchService:
    """A :class:`~agenthost_protocol.aio.HostService` answering ``createResourceWatch``
    on ``file:`` URIs within ``roots`` (see the module's documentation)."""

    def __init__(self, server: HostServer, roots: Roots, *, max_watches: int | None = None,
                 debounce_ms: int = 200, step_ms: int = 50, max_pending: int = 4096,
                 unclaimed_timeout: float = 30.0) -> None:
        self._server = server
        self.roots = roots
        self.max_watches = (max_watches if max_watches is not None
                            else server.limits.max_watches)
        self.debounce_ms = debounce_ms
        self.step_ms = step_ms
        self.max_pending = max_pending
        self.unclaimed_timeout = unclaimed_timeout
        self._watches: dict[str, _Watch] = {}
        self._starting = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def watches(self) -> tuple[str, ...]:
        """The channels of the watches running now."""
        return tuple(self._watches)

    def handle(self, event: Event) -> bool:
        if isinstance(event, RequestReceived):
            if event.method != "createResourceWatch":
                return False
            self._create(event)
            return True
        if isinstance(event, Unsubscribed):
            if event.channel in self._watches:
                self._check(event.channel)
        elif isinstance(event, ConnectionClosed):
            for channel in event.subscriptions:
                if channel in self._watches:
                    self._check(channel)
            for channel, watch in tuple(self._watches.items()):
                if watch.creator is event.connection:
                    self._check(channel)
        return False

    def _check(self, channel: str) -> None:
        """Release the watch if nobody listens to it any more."""
        if channel in self._watches and not self._server.host.subscribers(channel):
            self._release(channel)

    def _sweep(self, channel: str) -> None:
        """Every ``unclaimed_timeout`` seconds: a watch nobody listens to ends (one never
        subscribed to, or one whose leaving subscriber no event told of)."""
        watch = self._watches.get(channel)
        if watch is None:
            return
        if not self._server.host.subscribers(channel):
            self._release(channel)
            return
        watch.unclaimed = asyncio.get_running_loop().call_later(
            self.unclaimed_timeout, self._sweep, channel)

    def _create(self, event: RequestReceived) -> None:
        params = event.params
        responder = event.responder
        if not isinstance(params, t.CreateResourceWatchParams):
            responder.error(JsonRpcErrorCode.INVALID_PARAMS, "createResourceWatch params")
            return
        if self._closed:
            responder.error(JsonRpcErrorCode.INVALID_REQUEST, "the host is shutting down")
            return
        try:
            import watchfiles  # noqa: F401, PLC0415
        except ImportError:
            responder.error(JsonRpcErrorCode.METHOD_NOT_FOUND,
                            "file watches need the watchfiles package on the host: pip "
                            "install 'agenthost-protocol[files]'")
            return
        if len(self._watches) + self._starting >= self.max_watches:
            responder.error(JsonRpcErrorCode.INVALID_REQUEST,
                            f"too many watches: at most {self.max_watches} on this host")
            return
        try:
            includes = (compile_globs(params.includes.items) if params.includes is not None
                        else None)
            excludes = compile_globs(params.excludes.items) if params.excludes else ()
        except ValueError as e:
            responder.error(JsonRpcErrorCode.INVALID_PARAMS, str(e))
            return
        self._starting += 1
        task = asyncio.get_running_loop().create_task(
            self._start(event, params, includes, excludes))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _start(self, event: RequestReceived, params: t.CreateResourceWatchParams,
                     includes: _Compiled | None, excludes: _Compiled) -> None:
        responder = event.responder
        try:
            try:
                path = await asyncio.to_thread(self._resolve, params.uri)
            except FileAccessError as e:
                responder.error(e.code, error_text(e.message))
                return
            except OSError as e:
                responder.error(AhpErrorCode.PERMISSION_DENIED,
                                f"cannot watch it: {os.strerror(e.errno or 0)}")
                return
            if self._closed or event.connection.closed:
                responder.error(JsonRpcErrorCode.INVALID_REQUEST, "gone meanwhile")
                return
            channel = f"{WATCH_SCHEME}{uuid.uuid4().hex}"
            watch = _Watch(self, channel, params.uri, path,
                           recursive=bool(params.recursive), includes=includes,
                           excludes=excludes, creator=event.connection)
            state = t.ResourceWatchState(root=params.uri, recursive=bool(params.recursive),
                                         excludes=params.excludes, includes=params.includes)
            self._server.host.add_channel(channel, state)
            self._watches[channel] = watch
            loop = asyncio.get_running_loop()
            watch.start(loop)
            watch.unclaimed = loop.call_later(self.unclaimed_timeout, self._sweep, channel)
            responder.respond(t.CreateResourceWatchResult(channel=channel))
            log.info("watch %s: %s%s", channel, path, " (recursive)" if watch.recursive else "")
        finally:
            self._starting -= 1
            self._server.flush()

    def _resolve(self, uri: str) -> str:
        parts = parse_file_uri(uri)
        with self.roots.walk(parts, follow_last=True) as place:
            if place.lstat() is None:
                raise FileAccessError(AhpErrorCode.NOT_FOUND, f"no file or directory {uri}")
            return place.path

    def _deliver(self, watch: _Watch) -> None:
        if self._watches.get(watch.channel) is not watch:
            return
        changes, overflow = watch.take_pending()
        if overflow:
            changes.append(t.ResourceChange(uri=watch.uri, type=t.ResourceChangeType.UPDATED))
        host = self._server.host
        budget = max(1024, host.limits.max_message_size // 4)
        batch: list[t.ResourceChange] = []
        size = 0
        for change in changes:
            cost = len(change.uri) * 3 + 48
            if batch and size + cost > budget:
                host.dispatch(watch.channel, t.ResourceWatchChangedAction(
                    changes=t.ResourceChangeList(items=tuple(batch))))
                batch, size = [], 0
            batch.append(change)
            size += cost
        if batch:
            host.dispatch(watch.channel, t.ResourceWatchChangedAction(
                changes=t.ResourceChangeList(items=tuple(batch))))
        self._server.flush()

    def _release(self, channel: str) -> None:
        watch = self._watches.pop(channel, None)
        if watch is None:
            return
        watch.stop.set()
        if watch.unclaimed is not None:
            watch.unclaimed.cancel()
        host = self._server.host
        if host.has_channel(channel):
            host.remove_channel(channel)
        log.info("watch %s released", channel)
        with contextlib.suppress(RuntimeError):
            asyncio.get_running_loop().call_soon(self._server.flush)

    async def close(self) -> None:
        self._closed = True
        for task in tuple(self._tasks):
            task.cancel()
        threads = [w.thread for w in self._watches.values() if w.thread is not None]
        for channel in tuple(self._watches):
            self._release(channel)
        if threads:
            # each thread sees its stop event within one step of the watcher
            def join() -> None:
                for thread in threads:
                    thread.join(5)

            await asyncio.to_thread(join)
