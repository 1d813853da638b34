"""Users kept apart: the ``authorize`` hook of a host and the ready-made ownership policy.

A :class:`~agenthost_protocol.host.Host` built with ``authorize=`` asks it,
for every connection's principal (:attr:`HostConnection.principal
<agenthost_protocol.host.HostConnection.principal>`), whether that principal
may do an :class:`Operation` on a session.  The host resolves what a request
names to the session it belongs to first (a chat, the session's annotations,
a terminal claimed by the session, stored content a chat references), so a
policy only ever judges sessions: ``channel`` is a session URI (for
:attr:`Operation.CREATE`, the URI a ``createSession`` asks for).  What
belongs to no session (the root, a terminal claimed by a client) is not
asked about.  ``docs/host.md`` ("Users kept apart") says what is refused and
how.

:class:`OwnershipPolicy` is the common policy, ready-made: a session belongs
to the principal that created it, an admin predicate sees everything.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from enum import Enum
from typing import Final, TypeAlias

from attrs import frozen

__all__ = [
    "Authorize",
    "BoundOwnership",
    "Operation",
    "OwnerKey",
    "OwnershipPolicy",
    "default_owner_key",
]


class Operation(str, Enum):
    """What a principal asks to do with a session."""

    SEE = "see"
    """Know it exists: ``listSessions``, the root's ``root/session*`` notifications,
    the root's ``activeSessions`` count and ``terminals`` catalogue."""
    SUBSCRIBE = "subscribe"
    """Subscribe to it, its chats, its annotations or its terminals (``subscribe``,
    ``initialize``'s and ``reconnect``'s subscriptions)."""
    DISPATCH = "dispatch"
    """``dispatchAction`` on it or its chats; requests about it (``completions`` ...)."""
    FETCH_TURNS = "fetchTurns"
    """Page older turns of one of its chats."""
    READ_CONTENT = "readContent"
    """``resourceRead`` of stored content (``agenthost-content:``) its chats reference."""
    CREATE_CHAT = "createChat"
    """``createChat`` in it: a new chat, a fork or a side chat of one of its chats."""
    DISPOSE = "dispose"
    """``disposeSession`` of it, ``disposeChat`` of one of its chats."""
    CREATE = "create"
    """``createSession`` of this URI (the session does not exist yet)."""


Authorize: TypeAlias = Callable[[object, str, Operation], bool]
"""``authorize(principal, session, operation)``: whether ``principal`` may do
``operation`` on ``session``.  Called on the host's hot paths (a request, a
root notification per subscriber): it returns quickly, never raises and never
calls the host back to change it."""

OwnerKey: TypeAlias = Callable[[object], "str | None"]
"""A principal's stable owner key (what a store keeps as a session's owner);
``None``: the principal owns nothing."""


def default_owner_key(principal: object) -> str | None:
    """A ``str`` principal is its own key; anything else (``None`` included) has none."""
    return principal if isinstance(principal, str) else None


def key_of(owner_key: OwnerKey, principal: object) -> str | None:
    """``owner_key(principal)``, ``None`` when it raises or gives no ``str``."""
    try:
        key = owner_key(principal)
    except Exception:
        return None
    return key if isinstance(key, str) else None


def _nobody(principal: object) -> bool:
    return False


_ADMIN: Final = object()
"""What :meth:`BoundOwnership._key` gives for an admin."""


def fail_closed(authorize: Authorize) -> Authorize:
    """``authorize`` refusing whatever it raises on (a policy's bug is no way in, nor a
    way to break the host's fan-out)."""

    def guarded(principal: object, session: str, operation: Operation) -> bool:
        try:
            return bool(authorize(principal, session, operation))
        except Exception:
            return False

    return guarded


@frozen(kw_only=True)
class OwnershipPolicy:
    """A session belongs to the principal that created it.

    ``Host(authorize=OwnershipPolicy(...))``.  ``owner_key`` maps a principal
    to the stable key the host records as the owner of each session it
    creates (and its store keeps, so ownership survives a restart); a
    principal whose key is ``None`` owns nothing, sees nothing and may not
    create sessions.  ``is_admin`` principals may do everything, to every
    session, sessions without an owner included (those of a store written
    before owners were kept, and those the agent or embedder created
    without a principal).  Other principals may do everything to the
    sessions they own and nothing to any other.

    The policy itself keeps no state: a host binds it to its own record of
    owners (:meth:`bind`), so one policy may serve several hosts.
    """

    owner_key: OwnerKey = default_owner_key
    is_admin: Callable[[object], bool] = _nobody

    def bind(self, owner_of: Callable[[str], str | None]) -> Authorize:
        """The ``authorize`` function of a host whose session owners ``owner_of`` gives."""
        return BoundOwnership(self, owner_of)


class BoundOwnership:
    """An :class:`OwnershipPolicy` bound to one host's owners: its ``authorize``."""

    def __init__(self, policy: OwnershipPolicy, owner_of: Callable[[str], str | None]) -> None:
        self.policy = policy
        self._owner_of = owner_of

    def __call__(self, principal: object, session: str, operation: Operation) -> bool:
        key = self._key(principal)
        if key is _ADMIN:
            return True
        if key is None:
            return False
        return operation is Operation.CREATE or self._owner_of(session) == key

    def same(self, owner: object, principal: object) -> bool:
        """Whether ``principal`` may act as ``owner``: an admin, or the same owner key."""
        key = self._key(principal)
        if key is _ADMIN:
            return True
        return isinstance(key, str) and key == self._key(owner)

    def _key(self, principal: object) -> str | object | None:
        """The principal's owner key, :data:`_ADMIN`, or ``None``; the embedder's
        functions failing (raising, or a key that is no ``str``) count as ``None``:
        a policy that fails refuses."""
        try:
            if self.policy.is_admin(principal):
                return _ADMIN
            key = self.policy.owner_key(principal)
        except Exception:
            return None
        return key if isinstance(key, str) else None

    def counter(self, sessions: tuple[str, ...]) -> Callable[[object], int]:
        """How many of ``sessions`` a principal may see (what a loop of calls would
        say), for many principals at the cost of one lookup a session."""
        tally = Counter(self._owner_of(uri) for uri in sessions)
        total = len(sessions)

        def seen(principal: object) -> int:
            key = self._key(principal)
            if key is _ADMIN:
                return total
            return tally[key] if isinstance(key, str) else 0

        return seen
