"""Session and chat bookkeeping for the host's helpers.

Pure pieces: new session and chat states, summaries, and :class:`SessionBook`,
which remembers what the state does not hold (when a session was created,
which session owns a chat, the order in which ``listSessions`` pages them).
"""

from __future__ import annotations

from collections.abc import Callable

from .. import types as t
from ..errors import InvalidParams
from ..reducers._clock import iso_timestamp

__all__ = ["SessionBook", "chat_summary", "iso", "new_chat", "new_session", "summary_of"]


def iso(ms: int) -> str:
    """``new Date(ms).toISOString()``."""
    return iso_timestamp(ms)


def new_session(
    provider: str,
    title: str,
    working_directories: tuple[str, ...] | None,
    config: t.SessionConfigState | None,
) -> t.SessionState:
    """A session in lifecycle ``creating``, with no chats yet."""
    return t.SessionState(
        provider=provider,
        title=title,
        status=t.SessionStatus.IDLE,
        working_directories=working_directories,
        lifecycle=t.SessionLifecycle.CREATING,
        active_clients=(),
        chats=(),
        config=config,
    )


def new_chat(uri: str, title: str, modified_at: str) -> t.ChatState:
    """An idle chat with no turns."""
    return t.ChatState(
        resource=uri, title=title, status=t.SessionStatus.IDLE, modified_at=modified_at, turns=()
    )


def chat_summary(chat: t.ChatState) -> t.ChatSummary:
    """The catalogue entry of ``chat``."""
    return t.ChatSummary(
        resource=chat.resource,
        title=chat.title,
        status=chat.status,
        activity=chat.activity,
        modified_at=chat.modified_at,
        origin=chat.origin,
        interactivity=chat.interactivity,
        working_directories=chat.working_directories,
    )


def summary_of(
    uri: str, state: t.SessionState, created_at: str, chats: list[t.ChatState]
) -> t.SessionSummary:
    """The ``SessionSummary`` of a session: ``modifiedAt`` is the latest of its chats'."""
    # ISO strings of one precision and format compare as the times they name
    modified = max((chat.modified_at for chat in chats), default=created_at)
    return t.SessionSummary(
        resource=uri,
        provider=state.provider,
        title=state.title,
        status=state.status,
        activity=state.activity,
        project=state.project,
        working_directories=state.working_directories,
        created_at=created_at,
        modified_at=max(modified, created_at),
    )


class SessionBook:
    """What the helpers remember per session, with ``listSessions`` cursors.

    Sessions get an ordinal in creation order; a cursor is the ordinal of
    the last session of the page it ends, so deleting sessions never
    invalidates a cursor, and a cursor this host never issued is unknown.
    """

    def __init__(self, page_size: int) -> None:
        self.page_size = page_size
        self._ordinal = 0
        self._sessions: dict[str, tuple[int, str]] = {}
        self._owner: dict[str, str] = {}
        self._chats: dict[str, dict[str, None]] = {}

    def created(self, uri: str, created_at: str) -> None:
        self._ordinal += 1
        self._sessions[uri] = (self._ordinal, created_at)
        self._chats[uri] = {}

    def created_at(self, uri: str) -> str | None:
        entry = self._sessions.get(uri)
        return None if entry is None else entry[1]

    def chat_added(self, chat: str, session: str) -> None:
        self._owner[chat] = session
        self._chats.setdefault(session, {})[chat] = None

    def owner_of(self, chat: str) -> str | None:
        return self._owner.get(chat)

    def chats_of(self, session: str) -> tuple[str, ...]:
        return tuple(self._chats.get(session, ()))

    def forget_channel(self, uri: str) -> None:
        self._sessions.pop(uri, None)
        for chat in self._chats.pop(uri, ()):
            self._owner.pop(chat, None)
        owner = self._owner.pop(uri, None)
        if owner is not None:
            self._chats.get(owner, {}).pop(uri, None)

    def page(
        self, cursor: str | None, limit: int | None, listed: Callable[[str], bool]
    ) -> tuple[list[str], str | None]:
        """The URIs of one page of the sessions ``listed`` admits, and the next cursor.

        The cursor is ``None`` at the end.
        """
        if limit is not None and limit < 1:
            raise InvalidParams("limit must be at least 1", path="$.params.limit")
        size = min(limit or self.page_size, self.page_size)
        after = 0
        if cursor is not None:
            if not (cursor.isascii() and cursor.isdigit()) or int(cursor) > self._ordinal:
                raise InvalidParams("unknown cursor", path="$.params.cursor")
            after = int(cursor)
        # dict order is creation order, so ordinals ascend
        rest = [(n, uri) for uri, (n, _) in self._sessions.items() if n > after and listed(uri)]
        page = rest[:size]
        next_cursor = str(page[-1][0]) if len(rest) > size else None
        return [uri for _, uri in page], next_cursor
