"""The session, chat and terminal commands, as the core helps an embedder answer them.

:class:`Commands` is a base of :class:`~agenthost_protocol.host.Host`:
``create_session``/``ready_session``/``fail_session``, ``add_chat`` and
``answer_create_chat`` (forks and side chats), ``dispose_*``, catalogue
mirroring and summaries (``mirror_chat``, ``announce_summary``),
``listSessions`` and ``fetchTurns`` answers, terminals.  The pure pieces
(new states, summaries, the session book) are in ``sessions.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attrs import evolve

from .. import types as t
from ..channels import ROOT_CHANNEL, ChannelKind, channel_kind
from ..errors import InvalidParams, LocalProtocolError
from ..types.error_codes import AhpErrorCode, JsonRpcErrorCode
from . import sessions
from .authorize import Authorize, Operation, OwnerKey, key_of
from .bounds import page_chunks, snapshot_budget
from .content import ContentStore
from .events import Event, RequestReceived, StoreFailed
from .limits import HostLimits
from .persistence import ChannelTable, Journal, decode_summary
from .store import HostStore, StoreError
from .validation import check_chat_source

if TYPE_CHECKING:
    from collections import deque
    from collections.abc import Callable

    from .connection import HostConnection
    from .events import ProtocolNotificationParams
    from .limits import HostLimits

__all__ = ["Commands", "wire_time"]


def wire_time(ms: int) -> str:
    """Epoch milliseconds as the spec's ISO timestamps."""
    return sessions.iso(ms)


class Commands:
    """The command helpers of a host (a base of :class:`~agenthost_protocol.host.Host`,
    which sets these attributes up)."""

    _states: ChannelTable
    _sessions: sessions.SessionBook
    _store: HostStore | None
    _journal: Journal | None
    _events: deque[Event]
    _clock: Callable[[], int]
    content: ContentStore
    _limits: HostLimits
    _authorize: Authorize | None
    _terminal_creators: dict[str, object]
    _owner_key: OwnerKey
    _cursor_seal: sessions.CursorSeal | None

    if TYPE_CHECKING:
        # the host's own, which these use
        def add_channel(self, uri: str, state: t.SnapshotState | None = None) -> None: ...
        def remove_channel(self, uri: str) -> None: ...
        def dispatch(self, channel: str, action: t.StateAction) -> t.ActionEnvelope: ...
        def notify(self, method: str, params: ProtocolNotificationParams) -> None: ...
        def _session_state(self, uri: str) -> t.SessionState: ...
        def _chat_states(self, session: t.SessionState) -> list[t.ChatState]: ...
        def _capabilities(self, session: t.SessionState | None) -> t.AgentCapabilities | None: ...
        def _chat_added(self, chat: str, session: str) -> None: ...
        def _is_listed(self, uri: str) -> bool: ...
        def _seers(self, session: str) -> frozenset[HostConnection] | None: ...
        def _notify(self, method: str, params: ProtocolNotificationParams,
                    seers: frozenset[HostConnection] | None) -> None: ...
        @property
        def limits(self) -> HostLimits: ...

    def session_refusal(self, creating: int = 0) -> str | None:
        """Why a ``createSession`` must be refused now (answer it ``-32600`` with this),
        or ``None``: the host holds ``HostLimits.max_sessions`` sessions, stored ones
        included, with ``creating`` more being set up by the embedder."""
        cap = self._limits.max_sessions
        if len(self._sessions) + creating >= cap:
            return (f"too many sessions: this host keeps at most {cap}; dispose of "
                    "sessions first")
        return None

    def create_session(
        self,
        uri: str,
        *,
        provider: str,
        title: str = "",
        working_directories: tuple[str, ...] | None = None,
        config: t.SessionConfigState | None = None,
        principal: object = None,
    ) -> t.SessionState:
        """Add session ``uri`` in lifecycle ``creating`` (answer ``createSession`` after this).

        ``principal``: who asked for it (the ``createSession`` request's
        connection's :attr:`~agenthost_protocol.host.HostConnection.principal`);
        its owner key (``Host(owner_key=...)``, the ownership policy's) is
        recorded, and stored, as the session's owner.  ``None``: nobody's
        session (one the agent made itself), which an ownership policy shows
        to admins only.
        """
        state = sessions.new_session(provider, title, working_directories, config)
        self.add_channel(uri, state)
        self._sessions.created(uri, wire_time(self._clock()),
                               key_of(self._owner_key, principal))
        if self._journal is not None:
            self._journal.new_sessions[uri] = None
            self._journal.undo.append(lambda: self._sessions.forget_channel(uri))
        return state

    def ready_session(
        self, uri: str, *, default_chat: str, chat_title: str = ""
    ) -> t.SessionSummary:
        """Give session ``uri`` its default chat, make it ``ready`` and announce it.

        Creates the chat channel, dispatches ``session/chatAdded``,
        ``session/defaultChatChanged`` and ``session/ready``, then sends
        ``root/sessionAdded`` to the root's subscribers.  Returns the summary.
        """
        self._session_state(uri)
        now = wire_time(self._clock())
        chat = sessions.new_chat(default_chat, chat_title, now)
        self.add_channel(default_chat, chat)
        self._chat_added(default_chat, uri)
        self.dispatch(uri, t.SessionChatAddedAction(summary=sessions.chat_summary(chat)))
        self.dispatch(uri, t.SessionDefaultChatChangedAction(default_chat=default_chat))
        self.dispatch(uri, t.SessionReadyAction())
        summary = self.session_summary(uri)
        added = t.SessionAddedParams(channel=ROOT_CHANNEL, summary=summary)
        self.notify("root/sessionAdded", added)
        return summary

    def fail_session(self, uri: str, error: t.ErrorInfo) -> t.ActionEnvelope:
        """Dispatch ``session/creationFailed`` on session ``uri``."""
        self._session_state(uri)
        return self.dispatch(uri, t.SessionCreationFailedAction(error=error))

    def add_chat(self, session: str, chat: str, *, title: str = "") -> t.ChatState:
        """Add chat ``chat`` to ``session``: its channel and ``session/chatAdded``."""
        self._session_state(session)
        state = sessions.new_chat(chat, title, wire_time(self._clock()))
        self.add_channel(chat, state)
        self._chat_added(chat, session)
        self.dispatch(session, t.SessionChatAddedAction(summary=sessions.chat_summary(state)))
        return state

    def answer_create_chat(self, event: RequestReceived) -> t.ChatState | None:
        """Answer a ``createChat`` request: check it, create the chat, ``session/chatAdded``.

        Errors: ``SessionNotFound`` (-32001) for an unknown session,
        ``AlreadyExists`` (-32010) for a taken URI, ``InvalidRequest`` (-32600) for a
        session with ``HostLimits.max_chats_per_session`` chats, ``InvalidParams`` for a URI
        that is not a chat's or a source or working directories that
        :func:`~agenthost_protocol.host.validation.check_chat_source` refuses.
        A fork copies the source's turns up to the named one and its working
        directories; a side chat records its origin.  Returns the new chat's
        state, or ``None`` when the request was refused; starting a turn for
        ``initialMessage`` is the agent's business.

        The spec has the host load older turns before a source names a turn
        outside the loaded window; the core cannot read the embedder's
        storage, so while :meth:`older_turns_to_load` names a cursor for this
        request this raises ``LocalProtocolError``: load that page
        (``chat/turnsLoaded`` with :meth:`dispatch`), then call again.
        """
        params = event.params
        if not isinstance(params, t.CreateChatParams):
            raise LocalProtocolError(f"{event.method} is not createChat")
        session = self._states.get(params.channel)
        if not isinstance(session, t.SessionState):
            event.responder.error(AhpErrorCode.SESSION_NOT_FOUND, f"no session {params.channel!r}")
            return None
        if params.chat in self._states:
            event.responder.error(AhpErrorCode.ALREADY_EXISTS, f"{params.chat!r} exists")
            return None
        if channel_kind(params.chat) is not ChannelKind.CHAT:
            event.responder.error(JsonRpcErrorCode.INVALID_PARAMS, "not a chat URI")
            return None
        cap = self._limits.max_chats_per_session
        if len(session.chats) >= cap:
            event.responder.error(JsonRpcErrorCode.INVALID_REQUEST,
                                  f"too many chats: a session has at most {cap}; dispose "
                                  "of chats first")
            return None
        chats = {chat.resource: chat for chat in self._chat_states(session)}
        source = params.source
        needed = self.older_turns_to_load(event)
        if needed is not None:
            raise LocalProtocolError(
                f"load the turns of {needed[0]!r} before cursor {needed[1]!r} first "
                "(chat/turnsLoaded), then answer createChat"
            )
        reason = check_chat_source(
            session, params.chat, source, chats, self._capabilities(session),
            working_directories=params.working_directories,
        )
        if reason is not None:
            event.responder.error(JsonRpcErrorCode.INVALID_PARAMS, reason)
            return None
        state = sessions.new_chat(params.chat, "", wire_time(self._clock()))
        if isinstance(source, t.ForkChatSource):
            origin = chats[source.chat]
            kept = [turn.id for turn in origin.turns].index(source.turn_id) + 1
            state = evolve(
                state,
                origin=t.ForkChatOrigin(chat=source.chat, turn_id=source.turn_id),
                turns=origin.turns[:kept],
                working_directories=origin.working_directories,
            )
        else:
            if isinstance(source, t.SideChatSource):
                state = evolve(state, origin=t.SideChatOrigin(
                    chat=source.chat, turn_id=source.turn_id, selection=source.selection
                ))
            state = evolve(state, working_directories=params.working_directories)
        self.add_channel(params.chat, state)
        if isinstance(source, t.ForkChatSource):
            self.content.share(source.chat, params.chat)  # the copied turns reference it
        self._chat_added(params.chat, params.channel)
        added = t.SessionChatAddedAction(summary=sessions.chat_summary(state))
        self.dispatch(params.channel, added)
        event.responder.respond(None)
        return state

    def dispose_session(self, uri: str) -> None:
        """Remove session ``uri``, its chats and annotations channel.

        Then sends ``root/sessionRemoved`` to the root's subscribers.
        """
        state = self._session_state(uri)
        for chat in [c.resource for c in state.chats] + list(self._sessions.chats_of(uri)):
            if chat in self._states:
                self.remove_channel(chat)
        annotations = uri + "/annotations"
        if annotations in self._states:
            self.remove_channel(annotations)
        # asked while the policy can still tell whose it was
        seers = self._seers(uri)
        self.remove_channel(uri)
        removed = t.SessionRemovedParams(channel=ROOT_CHANNEL, session=uri)
        self._notify("root/sessionRemoved", removed, seers)

    def session_summary(self, uri: str) -> t.SessionSummary:
        """The ``SessionSummary`` of session ``uri`` from its current state."""
        state = self._session_state(uri)
        created = self._sessions.created_at(uri) or wire_time(self._clock())
        return sessions.summary_of(uri, state, created, self._chat_states(state))

    def mirror_chat(self, session: str, chat: str) -> t.ActionEnvelope | None:
        """Bring ``session``'s catalogue entry for ``chat`` up to the chat's state.

        A chat's summary fields (title, status, ``modifiedAt`` ...) live in
        the chat and again in its session's ``chats``; the reducers keep
        them apart, so after changing a chat the agent side calls this.
        Dispatches ``session/chatUpdated`` with what differs and returns its
        envelope, or ``None`` when nothing differs (or either is unknown).
        """
        chat_state = self._states.get(chat)
        session_state = self._states.get(session)
        if not isinstance(chat_state, t.ChatState) or not isinstance(
            session_state, t.SessionState
        ):
            return None
        entry = next((c for c in session_state.chats if c.resource == chat), None)
        changes = None if entry is None else sessions.chat_summary_changes(entry, chat_state)
        if changes is None:
            return None
        return self.dispatch(session, t.SessionChatUpdatedAction(chat=chat, changes=changes))

    def announce_summary(self, session: str, since: t.SessionSummary) -> t.SessionSummary:
        """Send ``root/sessionSummaryChanged`` with what changed in ``session``'s
        summary since ``since`` (nothing when nothing did); returns the current
        summary, the ``since`` of the next call."""
        summary = self.session_summary(session)
        changes = sessions.session_summary_changes(since, summary)
        if changes is None:
            return since
        self.notify("root/sessionSummaryChanged", t.SessionSummaryChangedParams(
            channel=ROOT_CHANNEL, session=session, changes=changes))
        return summary

    def list_sessions(
        self, params: t.ListSessionsParams, *, connection: HostConnection | None = None
    ) -> t.ListSessionsResult:
        """One page of the ready sessions made by :meth:`create_session`, oldest first.

        Sessions still ``creating`` (or whose creation failed) are not listed:
        they have not been announced with ``root/sessionAdded`` either.
        Under an ``authorize`` policy, only those ``connection``'s principal
        may see (all of them when ``connection`` is ``None``: the embedder's
        own question).  Raises :class:`~agenthost_protocol.errors.InvalidParams`
        for an unknown cursor or a ``limit`` below 1.
        """
        listed = self._is_listed
        authorize = self._authorize
        if authorize is not None and connection is not None:
            principal = connection.principal

            def listed(uri: str) -> bool:
                return self._is_listed(uri) and authorize(principal, uri, Operation.SEE)

        uris, next_cursor = self._sessions.page(params.cursor, params.limit, listed,
                                                self._cursor_seal)
        stored: dict[str, bytes] = {}
        unloaded = [uri for uri in uris if not self._states.is_loaded(uri)]
        if unloaded and self._store is not None:
            # a page of sessions nobody has open is read from the store, not loaded
            try:
                stored = self._store.summaries(unloaded)
            except StoreError as e:
                self._events.append(StoreFailed(message=str(e), refused=0))
        items = []
        for uri in uris:
            if self._states.is_loaded(uri):
                items.append(self.session_summary(uri))
            elif uri in stored:
                summary = decode_summary(stored[uri])
                if summary is not None:
                    items.append(summary)
        return t.ListSessionsResult(items=tuple(items), next_cursor=next_cursor)

    def answer_list_sessions(self, event: RequestReceived) -> None:
        """Answer a ``listSessions`` request with :meth:`list_sessions` (or its error)."""
        if not isinstance(event.params, t.ListSessionsParams):
            raise LocalProtocolError(f"{event.method} is not listSessions")
        try:
            result = self.list_sessions(event.params, connection=event.connection)
        except InvalidParams as e:
            event.responder.error(e.code, str(e))
            return
        event.responder.respond(result)

    def fetch_turns(
        self,
        event: RequestReceived,
        turns: tuple[t.Turn, ...],
        next_cursor: str | None = None,
    ) -> None:
        """Answer ``fetchTurns``: dispatch ``chat/turnsLoaded`` with ``turns``, then ``{}``
        (nothing is dispatched when there is nothing to load and nothing was).

        A ``cursor`` that is not the chat's ``turnsNextCursor`` is answered
        with ``InvalidParams`` and nothing is dispatched; so is a chat that
        does not exist (``NotFound``).
        """
        params = event.params
        if not isinstance(params, t.FetchTurnsParams):
            raise LocalProtocolError(f"{event.method} is not fetchTurns")
        state = self._states.get(params.channel)
        if not isinstance(state, t.ChatState):
            event.responder.error(AhpErrorCode.NOT_FOUND, f"no chat {params.channel!r}")
            return
        if params.cursor is not None and params.cursor != state.turns_next_cursor:
            event.responder.error(JsonRpcErrorCode.INVALID_PARAMS, "unknown cursor")
            return
        if turns or next_cursor is not None or state.turns_next_cursor is not None:
            # with every turn loaded already, a chat/turnsLoaded of nothing is a no-op:
            # not worth a serverSeq.  A page too big for one message goes in several,
            # newest first (each prepends), the last one carrying the new cursor.
            chunks = page_chunks(turns, snapshot_budget(self.limits.max_message_size))
            for n, chunk in enumerate(chunks):
                cursor = next_cursor if n == len(chunks) - 1 else state.turns_next_cursor
                self.dispatch(
                    params.channel, t.ChatTurnsLoadedAction(turns=chunk, turns_next_cursor=cursor)
                )
        event.responder.respond(t.FetchTurnsResult())

    def older_turns_cursor(self, chat: str, turn_id: str | None = None) -> str | None:
        """The ``turnsNextCursor`` to load from before an operation on ``turn_id`` of ``chat``.

        ``None`` when nothing needs loading: ``turn_id`` is loaded (or active),
        or the chat has no older turns.  Without ``turn_id``: whenever older
        turns remain (what a fork, which copies the whole history, needs).
        The spec has the host load them eagerly before a fork, a side-chat
        source or a truncation names a turn outside the loaded window; only
        the embedder can read them (then :meth:`dispatch` ``chat/turnsLoaded``).
        Raises ``LocalProtocolError`` if ``chat`` is not a chat.
        """
        state = self._states.get(chat)
        if not isinstance(state, t.ChatState):
            raise LocalProtocolError(f"no chat {chat!r}")
        cursor = state.turns_next_cursor
        if cursor is None or turn_id is None:
            return cursor
        if any(turn.id == turn_id for turn in state.turns) or (
            state.active_turn is not None and state.active_turn.id == turn_id
        ):
            return None
        return cursor

    def older_turns_to_load(self, event: RequestReceived) -> tuple[str, str] | None:
        """``(chat, cursor)`` to load before answering ``event``, or ``None``.

        For ``createChat``: a fork needs its source's whole history (the
        copy would silently lack the unloaded turns), a side chat its source
        turn.  Other requests need nothing.
        """
        params = event.params
        if not isinstance(params, t.CreateChatParams) or params.source is None:
            return None
        source = params.source
        if not isinstance(self._states.get(source.chat), t.ChatState):
            return None  # answer_create_chat refuses an unknown source
        turn = None if isinstance(source, t.ForkChatSource) else source.turn_id
        cursor = self.older_turns_cursor(source.chat, turn)
        return None if cursor is None else (source.chat, cursor)

    # -- chats and terminals --

    def dispose_chat(self, uri: str) -> None:
        """Remove chat ``uri`` and its channel; ``session/chatRemoved`` on its session."""
        state = self._states.get(uri)
        if not isinstance(state, t.ChatState):
            raise LocalProtocolError(f"no chat {uri!r}")
        # the helpers' record first; a chat added by hand is found in a catalogue
        owner = self._sessions.owner_of(uri) or next(
            (
                session
                for session, candidate in self._states.items()
                if isinstance(candidate, t.SessionState)
                and any(chat.resource == uri for chat in candidate.chats)
            ),
            None,
        )
        self.remove_channel(uri)
        if isinstance(self._states.get(owner or ""), t.SessionState):
            assert owner is not None
            self.dispatch(owner, t.SessionChatRemovedAction(chat=uri))

    def answer_dispose_chat(self, event: RequestReceived) -> bool:
        """Answer ``disposeChat``: :meth:`dispose_chat`, or ``NotFound`` (-32008).

        Returns whether the chat was disposed (stopping its agent is the embedder's).
        """
        params = event.params
        if not isinstance(params, t.DisposeChatParams):
            raise LocalProtocolError(f"{event.method} is not disposeChat")
        if not isinstance(self._states.get(params.channel), t.ChatState):
            event.responder.error(AhpErrorCode.NOT_FOUND, f"no chat {params.channel!r}")
            return False
        self.dispose_chat(params.channel)
        event.responder.respond(None)
        return True

    def create_terminal(
        self,
        uri: str,
        *,
        claim: t.TerminalClaim,
        title: str = "",
        cwd: str | None = None,
        cols: int | None = None,
        rows: int | None = None,
    ) -> t.TerminalState:
        """Add terminal ``uri`` with no output yet and list it in the root's ``terminals``.

        The root's subscribers get ``root/terminalsChanged``; from then on the
        host keeps the catalogue entry in step with the terminal's title,
        claim and exit code.  Starting the pty is the embedder's business.
        """
        state = sessions.new_terminal(claim, title, cwd, cols, rows)
        self.add_channel(uri, state)
        root = self._root()
        listed = tuple(info for info in root.terminals or () if info.resource != uri)
        entry = sessions.terminal_info(uri, state)
        self.dispatch(ROOT_CHANNEL, t.RootTerminalsChangedAction(terminals=(*listed, entry)))
        return state

    def dispose_terminal(self, uri: str) -> None:
        """Remove terminal ``uri`` and its catalogue entry (``root/terminalsChanged``)."""
        if not isinstance(self._states.get(uri), t.TerminalState):
            raise LocalProtocolError(f"no terminal {uri!r}")
        self._terminal_creators.pop(uri, None)
        self.remove_channel(uri)
        root = self._root()
        listed = tuple(info for info in root.terminals or () if info.resource != uri)
        if listed != (root.terminals or ()):
            self.dispatch(ROOT_CHANNEL, t.RootTerminalsChangedAction(terminals=listed))

    def answer_create_terminal(self, event: RequestReceived) -> t.TerminalState | None:
        """Answer ``createTerminal``: check it, :meth:`create_terminal`, answer ``null``.

        Errors: ``AlreadyExists`` (-32010) for a URI in use, ``InvalidParams``
        for a URI that is not a terminal's, a client claim naming another
        client, or a claim of an unknown kind; ``SessionNotFound`` (-32001)
        for a session claim of an unknown session.  Returns the terminal's
        state (start its pty from it), or ``None`` when refused.
        """
        params = event.params
        if not isinstance(params, t.CreateTerminalParams):
            raise LocalProtocolError(f"{event.method} is not createTerminal")
        uri, claim = params.channel, params.claim
        if uri in self._states:
            event.responder.error(AhpErrorCode.ALREADY_EXISTS, f"{uri!r} exists")
            return None
        if channel_kind(uri) is not ChannelKind.TERMINAL:
            event.responder.error(JsonRpcErrorCode.INVALID_PARAMS, "not a terminal URI")
            return None
        if isinstance(claim, t.TerminalClientClaim):
            if claim.client_id != event.connection.client_id:
                event.responder.error(
                    JsonRpcErrorCode.INVALID_PARAMS, "a client claims terminals for itself only"
                )
                return None
        elif isinstance(claim, t.TerminalSessionClaim):
            if not isinstance(self._states.get(claim.session), t.SessionState):
                event.responder.error(
                    AhpErrorCode.SESSION_NOT_FOUND, f"no session {claim.session!r}"
                )
                return None
        else:
            event.responder.error(JsonRpcErrorCode.INVALID_PARAMS, "unknown claim kind")
            return None
        if self._authorize is not None and isinstance(claim, t.TerminalClientClaim):
            # before it is listed: the root's terminalsChanged is narrowed by it
            self._terminal_creators[uri] = event.connection.principal
        state = self.create_terminal(
            uri, claim=claim, title=params.name or "", cwd=params.cwd,
            cols=params.cols, rows=params.rows,
        )
        event.responder.respond(None)
        return state

    def answer_dispose_terminal(self, event: RequestReceived) -> bool:
        """Answer ``disposeTerminal``: :meth:`dispose_terminal`, or ``NotFound`` (-32008).

        Returns whether it was disposed (killing the pty is the embedder's).
        """
        params = event.params
        if not isinstance(params, t.DisposeTerminalParams):
            raise LocalProtocolError(f"{event.method} is not disposeTerminal")
        if not isinstance(self._states.get(params.channel), t.TerminalState):
            event.responder.error(AhpErrorCode.NOT_FOUND, f"no terminal {params.channel!r}")
            return False
        self.dispose_terminal(params.channel)
        event.responder.respond(None)
        return True

    def _root(self) -> t.RootState:
        root = self._states[ROOT_CHANNEL]
        assert isinstance(root, t.RootState)  # add_channel never replaces the root
        return root

    def _sync_terminal(self, uri: str, state: t.TerminalState) -> None:
        """Keep the root catalogue entry of terminal ``uri`` in step with its state."""
        root = self._root()
        listed = root.terminals or ()
        entry = sessions.terminal_info(uri, state)
        index = next((i for i, info in enumerate(listed) if info.resource == uri), None)
        if index is None or listed[index] == entry:
            return
        terminals = (*listed[:index], entry, *listed[index + 1 :])
        self.dispatch(ROOT_CHANNEL, t.RootTerminalsChangedAction(terminals=terminals))
