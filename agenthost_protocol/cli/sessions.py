"""``agenthost-protocol sessions``: list, read and dispose of a host's sessions.

* ``sessions [list] URL``: one line per session, the most recently changed
  first: ``URI``, when it last changed, its status, its number of turns, its
  provider and its title, tab-separated (``--json``: one JSON object a line).
* ``sessions show URL SESSION``: the session's default chat, every turn, as
  text (:mod:`.render`).
* ``sessions rm URL SESSION...``: ``disposeSession`` each.

``SESSION`` is a session URI as listed, or a prefix of the last segment of
exactly one listed session's URI (for ``rm``, of 4 characters at least).  Everything the
host sends is hostile: it is bounded and written through
:func:`~.terminal.safe_text` (``--json`` escapes it).  Exit statuses are
``chat``'s: 0 done, 1 the host refused (or no such session), 2 usage, 3
cannot connect, 4 protocol version mismatch, 5 timeout.  The parser is in
:mod:`agenthost_protocol.cli` (no asyncio for ``--help``); ``docs/sessions.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from typing import IO, Final

from attrs import frozen

from .. import types as t
from ..aio.client import (
    AsyncClient,
    ClientError,
    ClientTimeout,
    ConnectError,
    Connecting,
    RequestError,
    VersionMismatch,
    connect,
    connect_stdio,
    redact_url,
)
from ..errors import ProtocolError
from ..types.error_codes import AhpErrorCode
from .common import (
    EXIT_CONNECT,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    EXIT_VERSION,
    MAX_SESSIONS,
    list_all,
    resolve_session,
)
from .common import CommandFailed as _Failed
from .render import MAX_LINE_CHARS, chat_lines, one_line, status_name
from .terminal import safe_text

__all__ = [
    "MAX_SESSIONS",
    "MIN_PREFIX",
    "Listed",
    "resolve_session",
    "run_from_args",
    "run_sessions",
]

log = logging.getLogger(__name__)

PROG: Final = "agenthost-protocol sessions"

MIN_PREFIX: Final = 4
"""The shortest prefix of a URI's last segment that names a session to ``rm``."""
MAX_CHAT_PAGES: Final = 10_000
"""The most ``fetchTurns`` pages ``show`` asks for."""


@frozen(kw_only=True)
class Listed:
    """A session as ``sessions`` lists it."""

    summary: t.SessionSummary
    turns: int | None = None
    """Its default chat's turns (the active one included); ``None``: not counted."""
    more: bool = False
    """The host held back older turns than those counted (``turns`` is a floor)."""

    def line(self) -> str:
        """``URI  MODIFIED  STATUS  TURNS  PROVIDER  TITLE``, tab-separated, safe."""
        s = self.summary
        turns = "-" if self.turns is None else f"{self.turns}{'+' if self.more else ''}"
        return "\t".join((one_line(s.resource), one_line(s.modified_at, 40),
                          status_name(s.status), turns, one_line(s.provider, 64),
                          one_line(s.title) or "(untitled)"))

    def json(self) -> str:
        s = self.summary
        record = {
            "session": s.resource[:MAX_LINE_CHARS * 4], "modified": s.modified_at[:40],
            "created": s.created_at[:40], "status": status_name(s.status),
            "turns": self.turns, "moreTurns": self.more, "provider": s.provider[:64],
            "title": s.title[:MAX_LINE_CHARS * 4],
        }
        # ASCII only: every control character and bidi mark arrives escaped
        return json.dumps(record, ensure_ascii=True)


async def _default_chat(client: AsyncClient, session: str) -> str | None:
    snapshot = await client.subscribe(session)
    state = snapshot.state if snapshot is not None else None
    if not isinstance(state, t.SessionState):
        raise _Failed(EXIT_FAILED, f"{session} is not a session")
    if state.default_chat is not None:
        return state.default_chat
    return state.chats[0].resource if state.chats else None


async def _count_turns(client: AsyncClient, summary: t.SessionSummary) -> Listed:
    session = summary.resource
    try:
        chat = await _default_chat(client, session)
        if chat is None:
            return Listed(summary=summary, turns=0)
        snapshot = await client.subscribe(chat, view=t.SubscribeView())
        state = snapshot.state if snapshot is not None else None
        if not isinstance(state, t.ChatState):
            return Listed(summary=summary)
        turns = len(state.turns) + (state.active_turn is not None)
        listed = Listed(summary=summary, turns=turns, more=state.turns_next_cursor is not None)
        await client.unsubscribe(chat)
    except (RequestError, _Failed) as e:
        log.info("cannot count the turns of %s: %s", session, e)
        return Listed(summary=summary)
    finally:
        if client.is_tracked(session):
            await client.unsubscribe(session)
    return listed


async def _list(client: AsyncClient, args: argparse.Namespace, out: IO[str],
                err: IO[str]) -> int:
    sessions, cut = await list_all(client, page=args.page_size)
    if cut:
        print(f"{PROG}: the host's listing was cut short after {len(sessions)} sessions",
              file=err)
    shown = sessions if args.limit is None else sessions[: args.limit]
    for summary in shown:
        listed = Listed(summary=summary) if args.no_turns else await _count_turns(
            client, summary)
        print(listed.json() if args.json else listed.line(), file=out, flush=True)
    return EXIT_OK


async def _show(client: AsyncClient, args: argparse.Namespace, out: IO[str],
                err: IO[str]) -> int:
    session = args.session
    if ":" not in session:
        sessions, _cut = await list_all(client, page=args.page_size)
        session = resolve_session(session, sessions)
    try:
        chat = await _default_chat(client, session)
    except RequestError as e:
        raise _Failed(EXIT_FAILED, f"no session {session}: {e.error.message}") from None
    if chat is None:
        print(f"{PROG}: {safe_text(session)} has no chat", file=err)
        return EXIT_OK
    await client.subscribe(chat, view=t.SubscribeView())
    for _ in range(MAX_CHAT_PAGES):
        if not await client.fetch_older_turns(chat):
            break
    state = client.confirmed(chat)
    if not isinstance(state, t.ChatState):
        raise _Failed(EXIT_FAILED, f"{chat} is not a chat")
    for block in chat_lines(state, reasoning=not args.no_reasoning):
        print(block, file=out)
    out.flush()
    return EXIT_OK


async def _rm(client: AsyncClient, args: argparse.Namespace, out: IO[str],
              err: IO[str]) -> int:
    words: list[str] = list(args.sessions)
    listing: list[t.SessionSummary] | None = None
    status = EXIT_OK
    for word in words:
        try:
            if ":" not in word and listing is None:
                listing, _cut = await list_all(client, page=args.page_size)
            # disposing cannot be undone: a prefix must be long enough not to be a slip
            uri = resolve_session(word, listing or [], min_prefix=MIN_PREFIX)
        except _Failed as e:
            print(f"{PROG}: {safe_text(e.message)}", file=err)
            status = max(status, e.status)
            continue
        try:
            await client.dispose_session(uri)
        except RequestError as e:
            if isinstance(e, VersionMismatch):
                raise
            what = ("no such session" if e.code == AhpErrorCode.SESSION_NOT_FOUND
                    else "the host refused")
            print(f"{PROG}: {safe_text(uri)}: {what}: {one_line(e.error.message, 400)}",
                  file=err)
            status = max(status, EXIT_FAILED)
            continue
        print(f"disposed {one_line(uri)}", file=out, flush=True)
    return status


_VERBS: Final = {"list": _list, "show": _show, "rm": _rm}


async def run_sessions(
    args: argparse.Namespace,
    *,
    out: IO[str] | None = None,
    err: IO[str] | None = None,
) -> int:
    """The ``sessions`` command for the arguments its parser made; the exit status."""
    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr
    target: str = args.target
    timeout: float = args.timeout
    connecting: Connecting
    if args.stdio:
        import shlex  # noqa: PLC0415  # --stdio only

        try:
            command = shlex.split(target)
        except ValueError as e:
            print(f"{PROG}: cannot parse the command {redact_url(target)!r}: {e}", file=err)
            return EXIT_USAGE
        if not command:
            print(f"{PROG}: --stdio needs a command to run", file=err)
            return EXIT_USAGE
        connecting = connect_stdio(command, request_timeout=timeout, reconnect=False)
    else:
        if not target.startswith(("ws://", "wss://")):
            print(f"{PROG}: {redact_url(target)!r} is not a ws:// or wss:// URL (use --stdio "
                  "to run a host command)", file=err)
            return EXIT_USAGE
        try:
            connecting = connect(target, request_timeout=timeout, reconnect=False,
                                 open_timeout=timeout, chat_view_turns=None)
        except ValueError as e:  # an AHP_TOKEN no header can carry
            print(f"{PROG}: {e}", file=err)
            return EXIT_USAGE
    verb = _VERBS[args.verb]
    try:
        async with connecting as client:
            await client.initialize()
            return await verb(client, args, out, err)
    except _Failed as e:
        print(f"{PROG}: {safe_text(e.message)}", file=err)
        return e.status
    except ConnectError as e:
        # a refused handshake too (a wrong token, a refused Origin): the message says which
        print(f"{PROG}: {safe_text(str(e))}", file=err)
        return EXIT_CONNECT
    except VersionMismatch as e:
        print(f"{PROG}: {safe_text(str(e))}", file=err)
        return EXIT_VERSION
    except ClientTimeout as e:
        print(f"{PROG}: timed out: {safe_text(str(e))}", file=err)
        return EXIT_TIMEOUT
    except RequestError as e:
        print(f"{PROG}: the host refused {e.method}: {one_line(e.error.message, 400)} "
              f"({e.code})", file=err)
        return EXIT_FAILED
    except (ClientError, ProtocolError) as e:
        print(f"{PROG}: {safe_text(str(e))}", file=err)
        return EXIT_FAILED


def run_from_args(args: argparse.Namespace) -> int:
    """Run the command from what ``agenthost-protocol sessions`` parsed; the exit status."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    try:
        return asyncio.run(run_sessions(args))
    except KeyboardInterrupt:
        print(f"\n{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # `sessions URL | head`: the reader had enough; nothing more goes to it at exit
        import os  # noqa: PLC0415

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
