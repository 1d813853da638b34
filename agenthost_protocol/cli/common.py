"""What the client commands (``chat``, ``sessions``) share: their exit statuses, the
exception that ends one with a status, and reading and naming a host's sessions.

A host's listing is hostile input like the rest: it is read page by page up to
:data:`MAX_SESSIONS` sessions and :data:`MAX_PAGES` pages, and a page without items
or a cursor seen before ends it (a host could page without end).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Final

from .. import types as t
from .render import one_line

if TYPE_CHECKING:
    from ..aio.client import AsyncClient

__all__ = [
    "EXIT_CONNECT",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_TIMEOUT",
    "EXIT_USAGE",
    "EXIT_VERSION",
    "MAX_PAGES",
    "MAX_SESSIONS",
    "CommandFailed",
    "list_all",
    "resolve_session",
]

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
"""The turn failed, the host refused, a session named is not there."""
EXIT_USAGE: Final = 2
EXIT_CONNECT: Final = 3
"""No connection: refused, a bad URL, a command that cannot start, a refused handshake."""
EXIT_VERSION: Final = 4
EXIT_TIMEOUT: Final = 5
EXIT_INTERRUPTED: Final = 130

MAX_SESSIONS: Final = 100_000
"""The most sessions read from a host's listing."""
MAX_PAGES: Final = 10_000
"""The most ``listSessions`` pages read."""


class CommandFailed(Exception):
    """End the command with ``status`` after printing ``message``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _when(summary: t.SessionSummary) -> float:
    """``modifiedAt`` as a number (unreadable: the oldest): offsets and precisions differ."""
    try:
        return datetime.fromisoformat(summary.modified_at.replace("Z", "+00:00")).timestamp()
    except (ValueError, OverflowError):
        return float("-inf")


def _newest_first(summary: t.SessionSummary) -> tuple[float, str, str]:
    return (_when(summary), summary.created_at, summary.resource)


async def list_all(client: AsyncClient, *, page: int | None = None,
                   cap: int = MAX_SESSIONS) -> tuple[list[t.SessionSummary], bool]:
    """Every session of the host's listing, paged with ``page`` a request, the most
    recently changed first; and whether the listing was cut (at ``cap`` sessions or
    :data:`MAX_PAGES` pages, or because its paging went wrong)."""
    found: dict[str, t.SessionSummary] = {}
    cursor: str | None = None
    cursors: set[str] = set()
    cut = False
    while True:
        result = await client.list_sessions(limit=page, cursor=cursor)
        for summary in result.items:
            if len(found) >= cap:
                cut = True
                break
            found.setdefault(summary.resource, summary)
        following = result.next_cursor
        if following is None or cut:
            break
        if not result.items or following in cursors or len(cursors) + 1 >= MAX_PAGES:
            cut = True  # what the host gave is used
            break
        cursors.add(following)
        cursor = following
    return sorted(found.values(), key=_newest_first, reverse=True), cut


def resolve_session(word: str, sessions: Sequence[t.SessionSummary], *,
                    min_prefix: int = 1) -> str:
    """The session ``word`` names: a URI (``ahp-session:/...``, anything with a ``:``),
    as is; or a prefix of at least ``min_prefix`` characters of the last segment of
    exactly one listed session's URI.  :class:`CommandFailed` otherwise: exit 1 when it
    names none or several, 2 when it is too short."""
    word = word.strip()
    if ":" in word:
        return word
    if len(word) < max(1, min_prefix):
        raise CommandFailed(EXIT_USAGE, f"{word!r} is too short to name a session here: give "
                            f"its URI or at least {max(1, min_prefix)} characters of its "
                            "last segment")
    matches = [s.resource for s in sessions
               if s.resource.rstrip("/").rpartition("/")[2].startswith(word)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise CommandFailed(EXIT_FAILED,
                            f"no session's URI ends in a segment starting with {word!r}")
    shown = ", ".join(one_line(m) for m in matches[:5])
    raise CommandFailed(EXIT_FAILED, f"{word!r} names {len(matches)} sessions ({shown}"
                        f"{', ...' if len(matches) > 5 else ''}): give more of it, or the URI")
