"""What one connection may ask of the host: the core's own budgets.

The transport-level budgets (connections, queued bytes, deadlines) are the
I/O layer's (:class:`~agenthost_protocol.aio.ServerLimits`, which applies
these too); these are the ones the sans-I/O core can enforce by itself,
because they are about what a request asks for.
"""

from __future__ import annotations

from attrs import frozen

from ..errors import LocalProtocolError
from .content import DEFAULT_INLINE_LIMIT

__all__ = ["HostLimits"]


@frozen(kw_only=True)
class HostLimits:
    """Per-connection budgets of a :class:`~agenthost_protocol.host.Host`.

    An exceeded budget is answered with an error naming it (``-32602`` for
    too many subscriptions, ``-32600`` for too many reconnects, sessions or
    chats); nothing changes.
    """

    max_subscriptions: int = 1024
    """Distinct channels one connection may be subscribed to.  ``initialize``
    and ``reconnect`` asking for more are refused whole; a ``subscribe``
    beyond it is refused.  Duplicates count once (and are answered once)."""
    max_reconnects_per_minute: int = 30
    """``reconnect`` requests one connection may send in any 60 s (each may
    cost a replay or every snapshot); the first one of a new connection
    counts too."""
    max_message_size: int = 16 * 1024 * 1024
    """The largest message the host sends (what its clients accept: the
    library's own client takes 16 MiB by default).  Chat snapshots, replays
    and pages of turns are cut to fit it (less 64 KiB for what wraps them),
    and the fields that make a chat big are bounded at dispatch
    (:mod:`~agenthost_protocol.host.bounds`).  An action whose envelope would
    still be larger is refused at dispatch; a result that would be larger is
    answered with an error instead; nothing is ever half-sent."""
    inline_content_bytes: int = DEFAULT_INLINE_LIMIT
    """The largest tool-result block kept inline by :meth:`Host.by_reference`;
    a larger one is stored and sent as a reference (``resourceRead``)."""

    max_client_id_length: int = 256
    """The longest ``clientId`` an ``initialize`` or ``reconnect`` may name, in
    characters (a UUID has 36).  The host remembers clientIds for
    ``reconnect``, so their length bounds that memory; a longer one is refused
    ``-32602`` and the connection stays waiting for its handshake."""
    max_sessions: int = 10_000
    """Sessions the host keeps at once, stored ones included (each is a row the host
    reads at start and a channel in memory when loaded): a ``createSession`` beyond it
    is refused with ``-32600`` (``InvalidRequest``) until sessions are disposed of.
    Host-wide, unlike the budgets above."""
    max_chats_per_session: int = 256
    """Chats one session may have: a ``createChat`` beyond it is refused with
    ``-32600`` until chats are disposed of."""

    max_delivery_latency_ms: int = 1000
    """The longest a subscription's ``delivery.maxLatencyMs`` may have deltas held to
    merge them (the spec makes the window advisory: a longer one is cut to this);
    ``0`` turns coalescing off."""

    def __attrs_post_init__(self) -> None:
        if self.max_delivery_latency_ms < 0:
            raise LocalProtocolError("max_delivery_latency_ms must not be negative")
        if min(self.max_subscriptions, self.max_reconnects_per_minute,
               self.max_message_size, self.inline_content_bytes,
               self.max_client_id_length, self.max_sessions,
               self.max_chats_per_session) < 1:
            raise LocalProtocolError("the host limits must be positive")
