"""Host files as AHP resources, confined to roots (``serve --root DIR[:rw]``).

:class:`FileService` answers the ``resource*`` requests on ``file:`` URIs
(``docs/files.md``): ``resourceRead``, ``resourceList``, ``resourceResolve``
and ``resourceRequest`` everywhere in the roots; ``resourceWrite``,
``resourceMkdir``, ``resourceDelete``, ``resourceMove`` and ``resourceCopy``
in writable roots.  The host core keeps answering ``resourceRead`` of its
own ``agenthost-content:`` references; every other scheme is refused.

Confinement.  A ``file:`` URI is parsed by pure functions
(:func:`parse_file_uri`): a host part other than ``localhost``, a query or a
fragment, a ``..`` segment (written or percent-encoded), an encoded ``/``
or NUL are refused before anything is touched.  The path must then lie in a
root, compared component by component with the root's real path (so a
case variant of a root on a case-insensitive file system is outside).  The
file itself is reached by walking from the root's directory descriptor one
component at a time (``openat`` with ``O_NOFOLLOW``): a symbolic link met
on the way is read and followed by the walker itself, which refuses any
that leads out of its root, and a link swapped in after a check makes the
next ``O_NOFOLLOW`` open fail instead of being followed.  A regular file
with more than one hard link is neither read nor written (its other names
may be anywhere on the file system); listing, resolving, moving or
deleting it touches only its name here.

Every file operation runs in a worker thread, a few at a time, with the
sizes bounded (reads by the message limit, copies by ``max_copy_bytes``):
a big file never blocks the event loop.

:class:`Roots` is the public check other services use (a terminal's
working directory): :meth:`Roots.resolve_directory`, :meth:`Roots.contains`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import logging
import mimetypes
import os
import stat
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Final
from urllib.parse import quote

from attrs import frozen

from .. import types as t
from .. import wire
from ..errors import LocalProtocolError
from ..host import ClientRequestResult, Event, RequestReceived, Responder
from ..types.error_codes import AhpErrorCode, JsonRpcErrorCode, PermissionDeniedErrorData

if TYPE_CHECKING:
    from .server import HostServer

__all__ = [
    "FILE_METHODS",
    "FileAccessError",
    "FileService",
    "Root",
    "Roots",
    "error_text",
    "file_uri",
    "locate",
    "parse_file_uri",
    "parse_root",
]

log = logging.getLogger(__name__)

FILE_METHODS: Final = frozenset({
    "resourceRead", "resourceList", "resourceResolve", "resourceRequest", "resourceWrite",
    "resourceMkdir", "resourceDelete", "resourceMove", "resourceCopy",
})
"""The requests :class:`FileService` answers (``resourceRead`` of ``agenthost-content:``
stays the host core's)."""

MAX_PATH_BYTES: Final = 4096
"""The longest path accepted (Linux's ``PATH_MAX``)."""
MAX_SYMLINKS: Final = 40
"""Symbolic links followed in one walk (Linux's limit too): more is a loop."""
_CHUNK: Final = 1024 * 1024
_ENVELOPE: Final = 4096
"""Bytes of a message that are not the payload (the JSON-RPC wrapping, the fields)."""


class FileAccessError(Exception):
    """A file request refused: ``code`` is the AHP or JSON-RPC error answered.

    ``write``: a write refused on a read-only root (its ``PermissionDenied``
    says which access would be needed).
    """

    def __init__(self, code: int, message: str, *, uri: str | None = None,
                 write: bool = False) -> None:
        super().__init__(message)
        self.code = int(code)
        self.message = message
        self.uri = uri
        self.write = write


def _denied(message: str) -> FileAccessError:
    return FileAccessError(AhpErrorCode.PERMISSION_DENIED, message)


def _invalid(message: str) -> FileAccessError:
    return FileAccessError(JsonRpcErrorCode.INVALID_PARAMS, message)


def _not_found(message: str) -> FileAccessError:
    return FileAccessError(AhpErrorCode.NOT_FOUND, message)


# -- roots -------------------------------------------------------------------------


@frozen(kw_only=True)
class Root:
    """A directory whose files clients may read (and, ``writable``, change)."""

    path: str
    writable: bool = False


def parse_root(spec: str) -> Root:
    """``DIR``, ``DIR:ro`` or ``DIR:rw`` (``serve --root``) as a :class:`Root`."""
    head, sep, tail = spec.rpartition(":")
    if sep and tail in ("rw", "ro") and head:
        return Root(path=head, writable=tail == "rw")
    if not spec:
        raise ValueError("an empty root")
    return Root(path=spec)


def _components(path: str) -> tuple[str, ...]:
    return tuple(part for part in path.split("/") if part not in ("", "."))


def parse_file_uri(uri: str) -> tuple[str, ...]:
    """The absolute path a ``file:`` URI names, as its components (pure).

    Raises :class:`FileAccessError`: ``-32009`` for a host part other than
    empty or ``localhost`` (another machine's file) and for a ``..``
    segment, written or percent-encoded (an escape, whatever follows);
    ``-32602`` for anything that is not a plain local ``file:`` URI: a
    query or fragment, a relative path, a percent-encoded ``/`` or NUL, a
    bad escape, a path over :data:`MAX_PATH_BYTES`.
    """
    if not uri[:5].lower() == "file:":
        raise _invalid(f"not a file: URI: {uri[:100]!r}")
    rest = uri[5:]
    if "?" in rest or "#" in rest:
        raise _invalid("a file: URI with a query or a fragment")
    if rest.startswith("//"):
        authority, slash, rest = rest[2:].partition("/")
        if authority.lower() not in ("", "localhost"):
            raise _denied(f"{authority[:100]!r} is another host: only this machine's "
                          "files are served")
        rest = slash + rest
    if not rest.startswith("/"):
        raise _invalid("a file: URI must name an absolute path")
    raw = rest.encode("utf-8", "surrogatepass")
    if len(raw) > 3 * MAX_PATH_BYTES:
        raise _invalid("the path is too long")
    parts: list[str] = []
    total = 0
    for segment in rest.split("/"):
        name = _unquote(segment)
        total += len(name) + 1
        if total > MAX_PATH_BYTES:
            raise _invalid("the path is too long")
        if name in (b"", b"."):
            continue
        if name == b"..":
            raise _denied("'..' is not allowed in a path")
        parts.append(os.fsdecode(name))
    return tuple(parts)


def _unquote(segment: str) -> bytes:
    """One path segment, percent-decoded strictly, as bytes."""
    if "\x00" in segment:
        raise _invalid("NUL in a path")
    try:
        data = segment.encode("utf-8")
    except UnicodeEncodeError:
        raise _invalid("a lone surrogate in a path") from None
    if b"%" not in data:
        return data
    out = bytearray()
    i = 0
    while i < len(data):
        byte = data[i]
        if byte == 0x25:  # %
            hexa = data[i + 1 : i + 3]
            if len(hexa) != 2 or not all(c in b"0123456789abcdefABCDEF" for c in hexa):
                raise _invalid("a bad percent escape in a path")
            out.append(int(hexa, 16))
            i += 3
        else:
            out.append(byte)
            i += 1
    if b"/" in out:
        raise _invalid("an encoded '/' in a path segment")
    if b"\x00" in out:
        raise _invalid("an encoded NUL in a path")
    return bytes(out)


def file_uri(path: str) -> str:
    """The ``file:`` URI of absolute ``path`` (each byte outside the unreserved set
    percent-encoded, as VS Code writes them)."""
    return "file://" + quote(os.fsencode(path), safe="/-._~!$&'()*+,;=:@")


def locate(roots: Sequence[tuple[str, ...]], parts: tuple[str, ...]) -> int | None:
    """The index of the root (given as path components) that holds ``parts``: the
    longest that is a prefix of it, so a nested root's own rights win; ``None``
    when none does (pure)."""
    best: int | None = None
    for index, root in enumerate(roots):
        if parts[: len(root)] == root and (best is None or len(root) > len(roots[best])):
            best = index
    return best


class _Place:
    """Where a walk ended: an open directory and the name of the last component in it."""

    __slots__ = ("dirfd", "name", "rel", "root")

    def __init__(self, root: _Resolved, dirfd: int, name: str | None,
                 rel: tuple[str, ...]) -> None:
        self.root = root
        self.dirfd = dirfd
        self.name = name
        """``None``: the place is the directory ``dirfd`` itself (the root)."""
        self.rel = rel
        """The real path of the directory, relative to the root."""

    @property
    def path(self) -> str:
        parts = (*self.rel, self.name) if self.name is not None else self.rel
        return os.path.join(self.root.real, *parts)

    @property
    def rel_path(self) -> tuple[str, ...]:
        return (*self.rel, self.name) if self.name is not None else self.rel

    def close(self) -> None:
        os.close(self.dirfd)

    def __enter__(self) -> _Place:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def lstat(self) -> os.stat_result | None:
        try:
            if self.name is None:
                return os.fstat(self.dirfd)
            return os.stat(self.name, dir_fd=self.dirfd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def open(self, flags: int, mode: int = 0o666) -> int:
        """``openat`` of the place, never following a link; the root itself is
        reopened through ``.``."""
        name = self.name if self.name is not None else "."
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=self.dirfd)


@frozen(kw_only=True)
class _Resolved:
    real: str
    parts: tuple[str, ...]
    writable: bool


class Roots:
    """The roots files are served from, resolved once (their real paths).

    A root that does not exist or is not a directory raises ``ValueError``.
    """

    def __init__(self, roots: Iterable[Root]) -> None:
        resolved: list[_Resolved] = []
        for root in roots:
            real = os.path.realpath(os.path.abspath(os.path.expanduser(root.path)))
            if not os.path.isdir(real):
                raise ValueError(f"the root {root.path} is not a directory")
            resolved.append(_Resolved(real=real, parts=_components(real),
                                      writable=root.writable))
        self._roots = tuple(resolved)

    @property
    def roots(self) -> tuple[Root, ...]:
        """The roots, by their real paths."""
        return tuple(Root(path=r.real, writable=r.writable) for r in self._roots)

    def __bool__(self) -> bool:
        return bool(self._roots)

    # -- the public check --

    def contains(self, uri_or_path: str) -> bool:
        """Whether ``uri_or_path`` (a ``file:`` URI or an absolute path) names something
        that exists inside the roots, symbolic links followed within them."""
        try:
            with self.walk(self._parts(uri_or_path), follow_last=True) as place:
                return place.lstat() is not None
        except (FileAccessError, OSError):
            return False

    def resolve_directory(self, uri_or_path: str) -> str:
        """The real path of the directory ``uri_or_path`` (a ``file:`` URI or an absolute
        path) names, if it is one inside the roots (links followed within them);
        raises :class:`FileAccessError` (``-32009`` outside the roots, ``-32008``
        missing, ``-32602`` not a directory or malformed).  Blocking: a few
        system calls per path component."""
        with self.walk(self._parts(uri_or_path), follow_last=True) as place:
            try:
                st = place.lstat()
            except OSError as e:
                raise _os_error(e, place.path) from None
            if st is None:
                raise _not_found(f"no directory {place.path}")
            if not stat.S_ISDIR(st.st_mode):
                raise _invalid(f"{place.path} is not a directory")
            return place.path

    def writable(self, uri_or_path: str) -> bool:
        """Whether ``uri_or_path`` lies in a writable root (lexically: nothing is opened)."""
        try:
            parts = self._parts(uri_or_path)
        except FileAccessError:
            return False
        index = locate([r.parts for r in self._roots], parts)
        return index is not None and self._roots[index].writable

    @staticmethod
    def _parts(uri_or_path: str) -> tuple[str, ...]:
        if uri_or_path.startswith("/"):
            if "\x00" in uri_or_path:
                raise _invalid("NUL in a path")
            parts = _components(uri_or_path)
            if ".." in parts:
                raise _denied("'..' is not allowed in a path")
            return parts
        return parse_file_uri(uri_or_path)

    # -- walking --

    def root_of(self, parts: tuple[str, ...]) -> tuple[_Resolved, tuple[str, ...]]:
        index = locate([r.parts for r in self._roots], parts)
        if index is None:
            raise _denied("outside the roots this host serves")
        root = self._roots[index]
        return root, parts[len(root.parts):]

    @contextlib.contextmanager
    def walk(self, parts: tuple[str, ...], *, follow_last: bool,
             make_dirs: bool = False) -> Iterator[_Place]:
        """The place ``parts`` names, reached from its root one component at a time.

        Links are followed by the walker (``follow_last``: the last one too),
        never by the kernel, and refused when they lead out of the root.
        ``make_dirs``: missing directories are created on the way (the last
        component too).
        """
        root, rel = self.root_of(parts)
        try:
            place = _walk(root, rel, follow_last=follow_last, make_dirs=make_dirs)
        except OSError as e:  # a directory we may not enter ...: said as an AHP error
            raise _os_error(e, os.path.join(root.real, *rel)) from None
        try:
            yield place
        finally:
            place.close()


def _walk(root: _Resolved, rel: tuple[str, ...], *, follow_last: bool,
          make_dirs: bool) -> _Place:
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fds = [os.open(root.real, flags)]
    names: list[str] = []
    pending = deque(rel)
    links = 0
    try:
        while pending:
            name = pending.popleft()
            if name in ("", "."):
                continue
            if name == "..":
                if not names:
                    raise _denied("a symbolic link leads out of the root")
                os.close(fds.pop())
                names.pop()
                continue
            last = not pending
            if last and not follow_last and not make_dirs:
                return _Place(root, fds.pop(), name, tuple(names))
            try:
                st = os.stat(name, dir_fd=fds[-1], follow_symlinks=False)
            except FileNotFoundError:
                if make_dirs:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, 0o777, dir_fd=fds[-1])
                    pending.appendleft(name)
                    continue
                if last:
                    return _Place(root, fds.pop(), name, tuple(names))
                raise _not_found(f"no directory {os.path.join(root.real, *names, name)}"
                                 ) from None
            if stat.S_ISLNK(st.st_mode) and (follow_last or not last):
                links += 1
                if links > MAX_SYMLINKS:
                    raise _denied("too many levels of symbolic links")
                target = os.readlink(name, dir_fd=fds[-1])
                if "\x00" in target:
                    raise _denied("a bad symbolic link")
                if target.startswith("/"):
                    target_parts = _link_parts(target)
                    if target_parts[: len(root.parts)] != root.parts:
                        raise _denied("a symbolic link leads out of the root")
                    while len(fds) > 1:
                        os.close(fds.pop())
                    names.clear()
                    pending.extendleft(reversed(target_parts[len(root.parts):]))
                else:
                    pending.extendleft(reversed(_link_parts(target)))
                continue
            if last and not make_dirs:
                return _Place(root, fds.pop(), name, tuple(names))
            if last and make_dirs and not stat.S_ISDIR(st.st_mode):
                return _Place(root, fds.pop(), name, tuple(names))
            try:
                fd = os.open(name, flags, dir_fd=fds[-1])
            except OSError as e:
                if e.errno in (errno.ENOTDIR, errno.ENOENT):
                    if make_dirs:
                        raise FileAccessError(
                            AhpErrorCode.ALREADY_EXISTS,
                            f"{os.path.join(root.real, *names, name)} is not a directory"
                        ) from None
                    raise _not_found(
                        f"no directory {os.path.join(root.real, *names, name)}") from None
                if e.errno == errno.ELOOP:  # a link swapped in since the stat
                    raise _denied("a symbolic link appeared on the way") from None
                raise
            fds.append(fd)
            names.append(name)
        # the root itself, or a directory that ``make_dirs`` reached
        return _Place(root, fds.pop(), None, tuple(names))
    finally:
        for fd in fds:
            os.close(fd)


def _link_parts(target: str) -> tuple[str, ...]:
    # ``..`` is kept: the walker pops what it walked, never past the root
    return tuple(part for part in target.split("/") if part not in ("", "."))


# -- the operations (blocking; run in a worker thread) ------------------------------


def error_text(message: str) -> str:
    """``message`` as JSON can carry it: a path in it that is not UTF-8 (its bytes kept
    as surrogates) is escaped."""
    return message.encode("utf-8", "backslashreplace").decode("utf-8")


def _is_text(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def _etag(st: os.stat_result) -> str:
    return f"{st.st_ino:x}-{st.st_size:x}-{st.st_mtime_ns:x}"


def _content_type(name: str) -> str | None:
    guessed, _ = mimetypes.guess_type(name, strict=False)
    return guessed


def _one_link(st: os.stat_result, what: str) -> None:
    if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
        raise _denied(f"{what} has {st.st_nlink} hard links: its other names may be "
                      "outside the roots, so it is neither read nor written")


def _open_regular(place: _Place, flags: int) -> tuple[int, os.stat_result]:
    before = place.lstat()
    if before is not None and not stat.S_ISREG(before.st_mode):
        # refused before the open: opening a device may already do something
        if stat.S_ISDIR(before.st_mode):
            raise _invalid(f"{place.path} is a directory")
        if stat.S_ISLNK(before.st_mode):
            raise _denied("a symbolic link appeared on the way")
        raise _invalid(f"{place.path} is not a regular file")
    try:
        fd = place.open(flags | os.O_NONBLOCK)
    except FileNotFoundError:
        raise _not_found(f"no file {place.path}") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise _denied("a symbolic link appeared on the way") from None
        if e.errno == errno.EISDIR:
            raise _invalid(f"{place.path} is a directory") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        if stat.S_ISDIR(st.st_mode):
            raise _invalid(f"{place.path} is a directory")
        raise _invalid(f"{place.path} is not a regular file")
    try:
        _one_link(st, place.path)
    except FileAccessError:
        os.close(fd)
        raise
    return fd, st


def _read_all(fd: int, limit: int) -> bytes:
    """At most ``limit + 1`` bytes: one more than allowed says the file grew past it."""
    chunks = []
    got = 0
    while True:
        chunk = os.read(fd, min(_CHUNK, limit + 1 - got))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
        if got > limit:
            break
    return b"".join(chunks)


class _Files:
    """The blocking operations, each confined by :class:`Roots`' walk."""

    def __init__(self, roots: Roots, *, max_message_size: int, max_copy_bytes: int) -> None:
        self.roots = roots
        self.max_message_size = max_message_size
        self.max_copy_bytes = max_copy_bytes

    @property
    def read_limit(self) -> int:
        """The most bytes one ``resourceRead`` answers (base64 inside one message)."""
        return max(1, (self.max_message_size - _ENVELOPE) * 3 // 4)

    def _writable(self, uri: str) -> tuple[str, ...]:
        parts = parse_file_uri(uri)
        root, _ = self.roots.root_of(parts)
        if not root.writable:
            raise FileAccessError(AhpErrorCode.PERMISSION_DENIED,
                                  f"{root.real} is served read-only", uri=uri, write=True)
        return parts

    def read(self, params: t.ResourceReadParams) -> t.ResourceReadResult:
        with self.roots.walk(parse_file_uri(params.uri), follow_last=True) as place:
            fd, st = _open_regular(place, os.O_RDONLY)
            try:
                limit = self.read_limit
                if st.st_size > limit:
                    raise self._too_big(st.st_size)
                data = _read_all(fd, limit)
            finally:
                os.close(fd)
            if len(data) > limit:
                raise self._too_big(len(data))
            name = place.name or ""
        kind = _content_type(name)
        if params.encoding != t.ContentEncoding.BASE64:
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                pass
            else:
                result = t.ResourceReadResult(
                    data=text, encoding=t.ContentEncoding.UTF_8,
                    content_type=kind or "text/plain")
                # escapes can make the JSON of a text longer than its bytes
                if len(wire.dumps(result).encode("utf-8")) + _ENVELOPE <= self.max_message_size:
                    return result
        return t.ResourceReadResult(data=base64.b64encode(data).decode("ascii"),
                                    encoding=t.ContentEncoding.BASE64,
                                    content_type=kind or "application/octet-stream")

    def _too_big(self, size: int) -> FileAccessError:
        return FileAccessError(
            JsonRpcErrorCode.INVALID_REQUEST,
            f"the file is {size} bytes, more than one resourceRead answer carries "
            f"({self.read_limit} bytes within the {self.max_message_size}-byte message limit)")

    def list(self, params: t.ResourceListParams) -> t.ResourceListResult:
        budget = self.max_message_size - _ENVELOPE
        with self.roots.walk(parse_file_uri(params.uri), follow_last=True) as place:
            try:
                fd = place.open(os.O_RDONLY | os.O_DIRECTORY)
            except FileNotFoundError:
                raise _not_found(f"no directory {place.path}") from None
            except OSError as e:
                if e.errno == errno.ENOTDIR:
                    raise _invalid(f"{place.path} is not a directory") from None
                if e.errno == errno.ELOOP:
                    raise _denied("a symbolic link appeared on the way") from None
                raise
            entries: list[t.DirectoryEntry] = []
            try:
                with os.scandir(fd) as found:
                    for entry in found:
                        if not _is_text(entry.name):
                            continue  # a name JSON cannot carry (not UTF-8)
                        kind = self._entry_type(place, entry)
                        if kind is None:
                            continue
                        budget -= len(entry.name.encode("utf-8", "surrogateescape")) * 2 + 40
                        if budget < 0:
                            raise FileAccessError(
                                JsonRpcErrorCode.INVALID_REQUEST,
                                f"{place.path} has more entries than one message carries "
                                f"({self.max_message_size} bytes)")
                        entries.append(t.DirectoryEntry(name=entry.name, type=kind))
            finally:
                os.close(fd)
        entries.sort(key=lambda e: e.name)
        return t.ResourceListResult(entries=tuple(entries))

    def _entry_type(self, place: _Place, entry: os.DirEntry[str]) -> str | None:
        """``file`` or ``directory``; a link as what it leads to within the root,
        left out when it leads elsewhere (or nowhere)."""
        try:
            if entry.is_dir(follow_symlinks=False):
                return "directory"
            if not entry.is_symlink():
                return "file"
        except OSError:
            return None
        parts = (*place.root.parts, *place.rel_path, entry.name)
        try:
            with self.roots.walk(parts, follow_last=True) as target:
                st = target.lstat()
        except (FileAccessError, OSError):
            return None
        if st is None:
            return None
        return "directory" if stat.S_ISDIR(st.st_mode) else "file"

    def resolve(self, params: t.ResourceResolveParams) -> t.ResourceResolveResult:
        follow = params.follow_symlinks is not False
        with self.roots.walk(parse_file_uri(params.uri), follow_last=follow) as place:
            st = place.lstat()
            if st is None:
                raise _not_found(f"no file or directory {place.path}")
            path = place.path
            name = place.name or ""
        if stat.S_ISLNK(st.st_mode):
            kind = t.ResourceType.SYMLINK
        elif stat.S_ISDIR(st.st_mode):
            kind = t.ResourceType.DIRECTORY
        else:
            kind = t.ResourceType.FILE
        birth = getattr(st, "st_birthtime", None)
        return t.ResourceResolveResult(
            uri=file_uri(path) if follow else params.uri,
            type=kind,
            size=None if kind is t.ResourceType.DIRECTORY else st.st_size,
            mtime=_iso(st.st_mtime),
            ctime=_iso(birth) if isinstance(birth, float | int) else None,
            content_type=_content_type(name) if kind is t.ResourceType.FILE else None,
            etag=_etag(st) if kind is t.ResourceType.FILE else None,
        )

    def request(self, params: t.ResourceRequestParams) -> t.ResourceRequestResult:
        """Granted when the access asked for is what the roots already allow."""
        parts = parse_file_uri(params.uri)
        if params.write:
            self._writable(params.uri)
        root, rel = self.roots.root_of(parts)
        _walk(root, rel, follow_last=True, make_dirs=False).close()
        return t.ResourceRequestResult()

    def write(self, params: t.ResourceWriteParams) -> t.ResourceWriteResult:
        parts = self._writable(params.uri)
        if params.encoding == t.ContentEncoding.BASE64:
            try:
                data = base64.b64decode(params.data, validate=True)
            except ValueError:
                raise _invalid("data is not valid base64") from None
        else:
            data = params.data.encode("utf-8", "surrogatepass")
        mode = t.ResourceWriteMode(params.mode) if params.mode is not None else (
            t.ResourceWriteMode.TRUNCATE)
        position = params.position or 0
        if position < 0:
            raise _invalid("position must not be negative")
        with self.roots.walk(parts, follow_last=True) as place:
            if place.name is None:
                raise _invalid(f"{place.path} is a directory")
            st = place.lstat()
            if st is None:
                if params.if_match is not None:
                    raise FileAccessError(AhpErrorCode.CONFLICT,
                                          f"{place.path} does not exist (ifMatch)")
                if position:
                    raise _invalid("position past the end of a new file")
                try:
                    fd = place.open(os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
                except FileExistsError:
                    raise FileAccessError(AhpErrorCode.CONFLICT,
                                          f"{place.path} appeared meanwhile") from None
                try:
                    _write_all(fd, data, 0)
                finally:
                    os.close(fd)
                return t.ResourceWriteResult()
            if params.create_only:
                raise FileAccessError(AhpErrorCode.ALREADY_EXISTS, f"{place.path} exists")
            fd, st = _open_regular(place, os.O_RDWR)
            try:
                import fcntl  # noqa: PLC0415  # POSIX only, like the rest

                fcntl.flock(fd, fcntl.LOCK_EX)
                st = os.fstat(fd)
                if params.if_match is not None and params.if_match != _etag(st):
                    raise FileAccessError(AhpErrorCode.CONFLICT,
                                          f"{place.path} changed since its etag was read")
                size = st.st_size
                if position > size:
                    raise _invalid(f"position {position} is past the end ({size} bytes)")
                if mode is t.ResourceWriteMode.TRUNCATE:
                    os.ftruncate(fd, position)
                    _write_all(fd, data, position)
                else:
                    at = size - position if mode is t.ResourceWriteMode.APPEND else position
                    _insert(fd, data, at, size)
            finally:
                os.close(fd)
        return t.ResourceWriteResult()

    def mkdir(self, params: t.ResourceMkdirParams) -> t.ResourceMkdirResult:
        parts = self._writable(params.uri)
        with self.roots.walk(parts, follow_last=True, make_dirs=True) as place:
            if place.name is not None:
                raise FileAccessError(AhpErrorCode.ALREADY_EXISTS,
                                      f"{place.path} exists and is not a directory")
        return t.ResourceMkdirResult()

    def delete(self, params: t.ResourceDeleteParams) -> t.ResourceDeleteResult:
        parts = self._writable(params.uri)
        with self.roots.walk(parts, follow_last=False) as place:
            if place.name is None:
                raise _denied("a root cannot be deleted")
            st = place.lstat()
            if st is None:
                raise _not_found(f"no file or directory {place.path}")
            if stat.S_ISDIR(st.st_mode):
                if params.recursive:
                    import shutil  # noqa: PLC0415

                    # fd-based: links inside are removed, never followed
                    shutil.rmtree(place.name, dir_fd=place.dirfd)  # type: ignore[call-arg]
                else:
                    try:
                        os.rmdir(place.name, dir_fd=place.dirfd)
                    except OSError as e:
                        if e.errno == errno.ENOTEMPTY:
                            raise _invalid(f"{place.path} is not empty (recursive: true "
                                           "deletes it with its contents)") from None
                        raise
            else:
                os.unlink(place.name, dir_fd=place.dirfd)
        return t.ResourceDeleteResult()

    def move(self, params: t.ResourceMoveParams) -> t.ResourceMoveResult:
        source = self._writable(params.source)
        destination = self._writable(params.destination)
        with self.roots.walk(source, follow_last=False) as src, \
                self.roots.walk(destination, follow_last=False) as dst:
            if src.name is None or dst.name is None:
                raise _denied("a root cannot be moved or replaced")
            if src.lstat() is None:
                raise _not_found(f"no file or directory {src.path}")
            if dst.lstat() is not None and params.fail_if_exists:
                raise FileAccessError(AhpErrorCode.ALREADY_EXISTS, f"{dst.path} exists")
            _inside(src, dst)
            try:
                os.rename(src.name, dst.name, src_dir_fd=src.dirfd, dst_dir_fd=dst.dirfd)
            except OSError as e:
                raise _os_error(e, dst.path) from None
        return t.ResourceMoveResult()

    def copy(self, params: t.ResourceCopyParams) -> t.ResourceCopyResult:
        source = parse_file_uri(params.source)
        destination = self._writable(params.destination)
        with self.roots.walk(source, follow_last=True) as src, \
                self.roots.walk(destination, follow_last=True) as dst:
            st = src.lstat()
            if st is None:
                raise _not_found(f"no file or directory {src.path}")
            if dst.name is None:
                raise _denied("a root cannot be replaced")
            exists = dst.lstat() is not None
            if exists and params.fail_if_exists:
                raise FileAccessError(AhpErrorCode.ALREADY_EXISTS, f"{dst.path} exists")
            budget = [self.max_copy_bytes, 100_000]
            if stat.S_ISDIR(st.st_mode):
                _inside(src, dst)
                if exists:
                    raise FileAccessError(AhpErrorCode.ALREADY_EXISTS,
                                          f"{dst.path} exists: a directory is copied to a "
                                          "new name")
                fd = src.open(os.O_RDONLY | os.O_DIRECTORY)
                try:
                    _copy_tree(fd, dst.dirfd, dst.name, budget)
                finally:
                    os.close(fd)
            else:
                _copy_file(src, dst.dirfd, dst.name, budget)
        return t.ResourceCopyResult()


def _inside(src: _Place, dst: _Place) -> None:
    """Refuse to put a directory inside itself."""
    if src.root.real == dst.root.real and dst.rel_path[: len(src.rel_path)] == src.rel_path:
        raise _invalid(f"{dst.path} is inside {src.path}")


def _os_error(e: OSError, path: str) -> FileAccessError:
    if e.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR, errno.ENOTDIR):
        return FileAccessError(AhpErrorCode.ALREADY_EXISTS,
                               f"{path}: {os.strerror(e.errno)}")
    if e.errno == errno.EXDEV:
        return FileAccessError(JsonRpcErrorCode.INVALID_REQUEST,
                               f"{path} is on another file system: copy, then delete")
    if e.errno in (errno.ENOENT, errno.ENOTDIR):
        return _not_found(f"{path}: {os.strerror(e.errno)}")
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ELOOP):
        return _denied(f"{path}: {os.strerror(e.errno)}")
    return _invalid(f"{path}: {os.strerror(e.errno or 0)}")


def _write_all(fd: int, data: bytes, at: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view[:_CHUNK], at)
        view = view[written:]
        at += written


def _insert(fd: int, data: bytes, at: int, size: int) -> None:
    """Splice ``data`` in at ``at``: the bytes after it move right, a chunk at a time
    from the end (memory bounded whatever the file's size)."""
    n = len(data)
    end = size
    while end > at:
        start = max(at, end - _CHUNK)
        chunk = os.pread(fd, end - start, start)
        _write_all(fd, chunk, start + n)
        end = start
    _write_all(fd, data, at)


def _copy_file(src: _Place, dirfd: int, name: str, budget: list[int]) -> None:
    fd, st = _open_regular(src, os.O_RDONLY)
    try:
        _copy_fd(fd, st, dirfd, name, budget)
    finally:
        os.close(fd)


def _copy_fd(fd: int, st: os.stat_result, dirfd: int, name: str, budget: list[int]) -> None:
    budget[0] -= st.st_size
    if budget[0] < 0:
        raise FileAccessError(JsonRpcErrorCode.INVALID_REQUEST,
                              "the copy is larger than this host copies at once")
    try:
        existing = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except FileNotFoundError:
        existing = None
    if existing is not None:
        if not stat.S_ISREG(existing.st_mode):
            raise FileAccessError(AhpErrorCode.ALREADY_EXISTS,
                                  f"{name} exists and is not a regular file")
        _one_link(existing, name)
    out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
                  | os.O_NONBLOCK, 0o666, dir_fd=dirfd)
    try:
        if not stat.S_ISREG(os.fstat(out).st_mode):
            raise FileAccessError(AhpErrorCode.ALREADY_EXISTS, f"{name} is not a regular file")
        at = 0
        while True:
            chunk = os.read(fd, _CHUNK)
            if not chunk:
                break
            _write_all(out, chunk, at)
            at += len(chunk)
            if at > st.st_size:  # it grows as we copy: what was budgeted is copied
                break
    finally:
        os.close(out)


def _copy_tree(src_fd: int, dirfd: int, name: str, budget: list[int]) -> None:
    os.mkdir(name, 0o777, dir_fd=dirfd)
    out = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                  dir_fd=dirfd)
    try:
        with os.scandir(src_fd) as entries:
            for entry in entries:
                budget[1] -= 1
                if budget[1] < 0:
                    raise FileAccessError(JsonRpcErrorCode.INVALID_REQUEST,
                                          "the copy has more entries than this host copies "
                                          "at once")
                st = os.stat(entry.name, dir_fd=src_fd, follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    # a link is copied as a link: every read through it is checked anew
                    os.symlink(os.readlink(entry.name, dir_fd=src_fd), entry.name, dir_fd=out)
                elif stat.S_ISDIR(st.st_mode):
                    child = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
                                    | os.O_CLOEXEC, dir_fd=src_fd)
                    try:
                        _copy_tree(child, out, entry.name, budget)
                    finally:
                        os.close(child)
                elif stat.S_ISREG(st.st_mode):
                    _one_link(st, entry.name)
                    fd = os.open(entry.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
                                 | os.O_NONBLOCK, dir_fd=src_fd)
                    try:
                        st = os.fstat(fd)
                        if not stat.S_ISREG(st.st_mode):
                            continue
                        _one_link(st, entry.name)
                        _copy_fd(fd, st, out, entry.name, budget)
                    finally:
                        os.close(fd)
                # sockets, FIFOs and devices are not copied
    finally:
        os.close(out)


# -- the service ---------------------------------------------------------------------


class FileService:
    """A :class:`~agenthost_protocol.aio.HostService` answering the ``resource*``
    requests on ``file:`` URIs within ``roots`` (``docs/files.md``).

    ``max_concurrent`` operations run at once in worker threads, and at most
    ``max_pending`` requests wait (more are refused ``-32600``): a client that
    floods requests costs a bounded queue.
    """

    def __init__(self, server: HostServer, roots: Roots, *, max_concurrent: int = 4,
                 max_pending: int = 256, max_copy_bytes: int = 1024**3) -> None:
        self._server = server
        self.roots = roots
        self._files = _Files(roots, max_message_size=server.limits.max_message_size,
                             max_copy_bytes=max_copy_bytes)
        self._slots = asyncio.Semaphore(max_concurrent)
        self._max_pending = max_pending
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    def handle(self, event: Event) -> bool:
        if not isinstance(event, RequestReceived) or event.method not in FILE_METHODS:
            return False
        if os.name != "posix":
            # the confinement walks with openat and O_NOFOLLOW, which only POSIX has
            event.responder.error(JsonRpcErrorCode.METHOD_NOT_FOUND,
                                  "file resources are served on POSIX systems only")
            return True
        params = event.params
        uris = [getattr(params, name, "") for name in ("uri", "source", "destination")]
        if not any(isinstance(uri, str) and uri[:5].lower() == "file:" for uri in uris):
            # another scheme (the core answers its agenthost-content: reads itself)
            event.responder.error(AhpErrorCode.NOT_FOUND if event.method == "resourceResolve"
                                  else JsonRpcErrorCode.INVALID_PARAMS,
                                  f"{event.method}: only file: URIs are served here")
            return True
        if self._closed:
            event.responder.error(JsonRpcErrorCode.INVALID_REQUEST, "the host is shutting down")
            return True
        if len(self._tasks) >= self._max_pending:
            event.responder.error(JsonRpcErrorCode.INVALID_REQUEST,
                                  "too many file requests at once: try again")
            return True
        task = asyncio.get_running_loop().create_task(self._answer(event))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    def _operation(self, event: RequestReceived) -> Callable[[], object]:
        files = self._files
        params = event.params
        match params:
            case t.ResourceReadParams():
                return lambda: files.read(params)
            case t.ResourceListParams():
                return lambda: files.list(params)
            case t.ResourceResolveParams():
                return lambda: files.resolve(params)
            case t.ResourceRequestParams():
                return lambda: files.request(params)
            case t.ResourceWriteParams():
                return lambda: files.write(params)
            case t.ResourceMkdirParams():
                return lambda: files.mkdir(params)
            case t.ResourceDeleteParams():
                return lambda: files.delete(params)
            case t.ResourceMoveParams():
                return lambda: files.move(params)
            case t.ResourceCopyParams():
                return lambda: files.copy(params)
        raise _invalid(f"{event.method} with unexpected params")

    async def _answer(self, event: RequestReceived) -> None:
        responder = event.responder
        try:
            operation = self._operation(event)
            async with self._slots:
                result = await asyncio.to_thread(operation)
        except FileAccessError as e:
            data = None
            if e.write and e.uri is not None:
                data = PermissionDeniedErrorData(
                    request=t.ResourceRequestParams(uri=e.uri, write=True))
            self._error(responder, e.code, e.message, data)
        except OSError as e:
            self._error(responder, _os_error(e, "").code,
                        f"{event.method}: {os.strerror(e.errno or 0)}")
        except asyncio.CancelledError:
            self._error(responder, JsonRpcErrorCode.INVALID_REQUEST,
                        "the host is shutting down")
            self._server.flush()
            raise
        except Exception:
            log.exception("%s failed", event.method)
            self._error(responder, JsonRpcErrorCode.INTERNAL_ERROR, f"{event.method} failed")
        else:
            try:
                responder.respond(result)  # type: ignore[arg-type]
            except LocalProtocolError:
                # what the file system holds may not be JSON (a name that is not UTF-8)
                log.exception("%s: the answer cannot be sent", event.method)
                self._error(responder, JsonRpcErrorCode.INTERNAL_ERROR,
                            f"{event.method}: the answer cannot be encoded")
        self._server.flush()

    @staticmethod
    def _error(responder: Responder[ClientRequestResult | None], code: int, message: str,
               data: PermissionDeniedErrorData | None = None) -> None:
        """Answer an error, once; a path in ``message`` that is not UTF-8 is escaped."""
        if not responder.answered:
            responder.error(code, error_text(message), data=data)

    async def close(self) -> None:
        self._closed = True
        tasks = tuple(self._tasks)
        for task in tasks:
            task.cancel()
        # a thread in a system call is not interruptible: it ends on its own, bounded
        if tasks:
            await asyncio.wait(tasks, timeout=5)
