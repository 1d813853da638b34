"""``serve``'s settings file: the access token it keeps across restarts.

A host that makes a new token at each start breaks every client (and every
saved URL) at each restart.  So the WebSocket access token is kept in a
small JSON file in the user's config directory, made on the first run, and
read again at each start: a restarted ``serve`` prints the same URL.

Where (:func:`settings_path`):

* Linux, the BSDs: ``$XDG_CONFIG_HOME/agenthost-protocol/settings.json``
  (an absolute ``XDG_CONFIG_HOME`` only; otherwise ``~/.config``);
* macOS: ``~/Library/Application Support/agenthost-protocol/settings.json``;
* Windows: ``%APPDATA%\\agenthost-protocol\\settings.json``.

Who may read it: the directory is made ``0700`` and the file ``0600``
(created with that mode, never widened later).  The file is written whole
or not at all (a temporary file of the same directory, then renamed over
it).  At each start, on POSIX systems:

* a directory of ours that others may enter is narrowed to ``0700``; one
  that belongs to another user is refused;
* a file that others may read (or write) is refused, not repaired: the
  token in it may be known to them already.  ``serve --new-token`` writes a
  new file (``0600``) with a new token, which is the way out;
* a file that cannot be read or parsed (not JSON, no valid token, larger
  than :data:`MAX_SETTINGS_BYTES`) is a :class:`SettingsError` naming the
  path and the way out (``--new-token`` rewrites it).

Windows has no such modes: there the file inherits the ACL of the user's
``%APPDATA%``, which others cannot read by default, and nothing is checked.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path
from typing import Final

from attrs import frozen

from .._user_dirs import user_dir
from ..aio.access import new_token

__all__ = [
    "MAX_SETTINGS_BYTES",
    "SettingsError",
    "TokenSettings",
    "config_dir",
    "load_token",
    "replace_token",
    "saved_token",
    "settings_path",
]

_FILE: Final = "settings.json"
MAX_SETTINGS_BYTES: Final = 64 * 1024
"""The largest settings file read: anything bigger is not one of ours."""
_MAX_TOKEN_CHARS: Final = 1024
_POSIX: Final = os.name == "posix"


class SettingsError(Exception):
    """The settings file cannot be used: one line that names the path and what to do."""


@frozen(kw_only=True)
class TokenSettings:
    """The token ``serve`` uses, and where it came from."""

    token: str
    path: Path
    """The settings file that holds it."""
    created: bool
    """Whether it was made now (first run, or ``--new-token``)."""


def config_dir() -> Path:
    """This user's config directory for the library (per platform convention)."""
    return user_dir("config")


def settings_path() -> Path:
    """The settings file ``serve`` keeps its access token in."""
    return config_dir() / _FILE


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _recovery(path: Path) -> str:
    return f"run serve --new-token to write a new one, or remove {path}"


def _elsewhere() -> str:
    return "give the token with --token-file or AHP_TOKEN instead, or set XDG_CONFIG_HOME"


def _valid_token(value: object) -> bool:
    # an HTTP header carries it (Authorization: Bearer): visible ASCII only
    return (isinstance(value, str) and 0 < len(value) <= _MAX_TOKEN_CHARS
            and all("!" <= char <= "~" for char in value))


def _private_dir(directory: Path) -> None:
    """Make ``directory`` (``0700``), or check an existing one: ours, and private."""
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as e:
        raise SettingsError(f"cannot make the settings directory {directory}: "
                            f"{_one_line(e.strerror or str(e))}; {_elsewhere()}") from None
    if not _POSIX:
        return
    try:
        info = os.stat(directory)
    except OSError as e:
        raise SettingsError(f"cannot use the settings directory {directory}: "
                            f"{_one_line(e.strerror or str(e))}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise SettingsError(f"the settings directory {directory} is not a directory")
    if info.st_uid != os.getuid():
        raise SettingsError(f"the settings directory {directory} belongs to another user "
                            f"(uid {info.st_uid}): remove it, or set XDG_CONFIG_HOME")
    if stat.S_IMODE(info.st_mode) & 0o077:
        # ours, but others may enter it (an umask, a copy): narrowed, which loses nothing
        try:
            os.chmod(directory, 0o700)
        except OSError as e:
            raise SettingsError(f"the settings directory {directory} is open to other users "
                                "and cannot be made private: "
                                f"{_one_line(e.strerror or str(e))}") from None


def _read(path: Path) -> dict[str, object] | None:
    """The settings in ``path`` (``None``: there is no file); checked."""
    # non-blocking: a FIFO put there must not hang the start (a regular file ignores it)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise SettingsError(f"cannot read the settings file {path}: "
                            f"{_one_line(e.strerror or str(e))}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SettingsError(f"the settings file {path} is not a regular file: remove it")
        if _POSIX and stat.S_IMODE(info.st_mode) & 0o077:
            mode = stat.S_IMODE(info.st_mode)
            raise SettingsError(
                f"the settings file {path} is open to other users (mode {mode:04o}): the "
                "access token in it may be known to them; run serve --new-token to replace "
                f"it with a new one (in a file only you can read), or chmod 600 {path}")
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_SETTINGS_BYTES:
            chunk = os.read(fd, MAX_SETTINGS_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        data = b"".join(chunks)
    except OSError as e:
        raise SettingsError(f"cannot read the settings file {path}: "
                            f"{_one_line(e.strerror or str(e))}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_SETTINGS_BYTES:
        raise SettingsError(f"the settings file {path} is larger than "
                            f"{MAX_SETTINGS_BYTES // 1024} KiB: not a settings file; "
                            f"{_recovery(path)}")
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        reason = "not UTF-8" if isinstance(e, UnicodeDecodeError) else "not JSON"
        raise SettingsError(f"the settings file {path} is corrupt ({reason}); "
                            f"{_recovery(path)}") from None
    if not isinstance(value, dict):
        raise SettingsError(f"the settings file {path} is corrupt (not a JSON object); "
                            f"{_recovery(path)}")
    return value


def _write_new(path: Path, settings: dict[str, object], *, replace: bool) -> bool:
    """Write ``settings`` to ``path`` whole, mode ``0600``.

    With ``replace``, over whatever is there; without, only if there is no file
    yet (``False``: another process made one first, which then stands).
    """
    data = (json.dumps(settings, indent=2, sort_keys=True) + "\n").encode("utf-8")
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{new_token()[:8]}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(temporary, flags, 0o600)
    except OSError as e:
        raise SettingsError(f"cannot write the settings file {path}: "
                            f"{_one_line(e.strerror or str(e))}; {_elsewhere()}") from None
    try:
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            if _POSIX:
                os.chmod(temporary, 0o600)  # whatever the umask made of it
            if replace:
                os.replace(temporary, path)
            else:
                try:
                    # fails if the file exists: two first runs at once keep one token
                    os.link(temporary, path)
                except FileExistsError:
                    return False
                except OSError:
                    # a file system without hard links: the last writer wins
                    os.replace(temporary, path)
        except OSError as e:
            raise SettingsError(f"cannot write the settings file {path}: "
                                f"{_one_line(e.strerror or str(e))}; {_elsewhere()}") from None
        _sync_dir(path.parent)
        return True
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary)


def _sync_dir(directory: Path) -> None:
    """Make the rename durable (POSIX; elsewhere the rename is enough)."""
    if not _POSIX:
        return
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def load_token(path: Path | None = None) -> str | None:
    """The token saved in the settings file (``None``: no file, or no token in it yet).

    Raises :class:`SettingsError` for a file that cannot be used (see the module).
    """
    path = path if path is not None else settings_path()
    settings = _read(path)
    return None if settings is None else _token_of(settings, path)


def _token_of(settings: dict[str, object], path: Path) -> str | None:
    if "token" not in settings:
        return None
    token = settings["token"]
    if not isinstance(token, str) or not _valid_token(token):
        raise SettingsError(f"the settings file {path} holds no valid access token "
                            f"(visible ASCII, 1 to {_MAX_TOKEN_CHARS} characters); "
                            f"{_recovery(path)}")
    return token


def saved_token(path: Path | None = None) -> TokenSettings:
    """The saved token, made and saved first if there is none (the first run).

    Raises :class:`SettingsError` (one line, naming the path) when the file
    or its directory cannot be used.
    """
    path = path if path is not None else settings_path()
    _private_dir(path.parent)
    for _ in range(3):
        settings = _read(path)
        saved = None if settings is None else _token_of(settings, path)
        if saved is not None:
            return TokenSettings(token=saved, path=path, created=False)
        token = new_token()
        merged = dict(settings) if settings is not None else {}
        merged["token"] = token
        if settings is not None:
            # a file without a token: completed in place
            _write_new(path, merged, replace=True)
            return TokenSettings(token=token, path=path, created=True)
        if _write_new(path, merged, replace=False):
            return TokenSettings(token=token, path=path, created=True)
        # another serve made the file between our read and our write: read theirs
    raise SettingsError(f"the settings file {path} keeps changing; {_recovery(path)}")


def replace_token(path: Path | None = None) -> TokenSettings:
    """A new token, saved over the old one (``serve --new-token``).

    Works on a corrupt file or one others could read too (it is written
    anew, ``0600``); the other settings of a readable file are kept.
    """
    path = path if path is not None else settings_path()
    _private_dir(path.parent)
    try:
        settings = _read(path) or {}
    except SettingsError:
        settings = {}  # replaced whole: that is the way out of a bad file
    token = new_token()
    _write_new(path, {**settings, "token": token}, replace=True)
    return TokenSettings(token=token, path=path, created=True)
