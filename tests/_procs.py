"""Processes seen in ``/proc`` (Linux): the tests that start agent processes check
that none is left behind."""

from __future__ import annotations

import os


def stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name; ``None`` if there is no such."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def children(pid: int) -> set[int]:
    """The processes whose parent is ``pid``, zombies included."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = stat_fields(int(entry))
            if fields is not None and fields[1] == str(pid):
                found.add(int(entry))
    return found
