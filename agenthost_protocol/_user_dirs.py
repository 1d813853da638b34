"""Where the library keeps a user's files, by platform convention (so backups,
cleaners and the user find them): the data directory (``serve``'s stores) and the
config directory (``serve``'s settings).  Reads the environment only; makes nothing."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Final, Literal

__all__ = ["LIBRARY", "user_dir"]

LIBRARY: Final = "agenthost-protocol"
"""The name of the library's folder in each directory."""

# (Windows variable, Windows fallback under the home folder, XDG variable, XDG fallback)
_KINDS: Final = {
    "data": ("LOCALAPPDATA", ("AppData", "Local"), "XDG_DATA_HOME", (".local", "share")),
    "config": ("APPDATA", ("AppData", "Roaming"), "XDG_CONFIG_HOME", (".config",)),
}


def user_dir(kind: Literal["data", "config"]) -> Path:
    """This user's ``kind`` directory for the library: ``agenthost-protocol`` in
    ``$XDG_DATA_HOME`` / ``$XDG_CONFIG_HOME`` (Linux and the BSDs), ``~/Library/Application
    Support`` (macOS), ``%LOCALAPPDATA%`` / ``%APPDATA%`` (Windows)."""
    windows_var, windows_fallback, xdg_var, xdg_fallback = _KINDS[kind]
    home = Path.home()
    if sys.platform == "win32":
        value = os.environ.get(windows_var)
        base = Path(value) if value else home.joinpath(*windows_fallback)
    elif sys.platform == "darwin":
        base = home / "Library" / "Application Support"
    else:
        xdg = os.environ.get(xdg_var)
        # the XDG spec: a relative value is invalid and is ignored
        base = Path(xdg) if xdg and os.path.isabs(xdg) else home.joinpath(*xdg_fallback)
    return base / LIBRARY
