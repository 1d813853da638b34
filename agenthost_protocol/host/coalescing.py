"""Delta coalescing: what a ``subscribe`` with ``delivery.maxLatencyMs`` allows the host.

A client that subscribes to a channel with ``delivery: {maxLatencyMs: W}``
(``W > 0``) lets the host hold its envelopes up to ``W`` ms to merge them
(the spec's subscriptions page).  The host merges only what merges into the
same state: consecutive ``chat/delta`` (or ``chat/reasoning``) actions of one
turn and part, with no ``_meta``, origin or rejection.  Their ``content`` is
joined and the merged envelope carries the last one's ``serverSeq``, so a
client that reduces it reaches exactly the state the separate actions give,
and a ``reconnect`` resumes after the last of them.

What is held is always the newest thing a connection would be sent: anything
else queued for a member of a held group (an answer, a notification, another
channel's envelope) releases the group first, so nothing is reordered.  A
group is shared by every connection subscribed to the channel with the same
window, and encoded once for all of them.  A connection that subscribes
(or reconnects) to a channel releases that channel's group for its window
first: the snapshot or replay it gets already holds the group's deltas.

The host is sans-I/O: :meth:`Host.deliver_due <agenthost_protocol.host.Host.deliver_due>`
releases the groups whose window has passed on the host's clock, and
:meth:`Host.next_delivery <agenthost_protocol.host.Host.next_delivery>` says
when that is next needed (``HostServer`` sets a timer for it).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Protocol, TypeAlias

from attrs import evolve

from .. import types as t

__all__ = ["Coalescer", "Held", "is_mergeable"]


class HostConnection(Protocol):
    """What coalescing needs of a :class:`~agenthost_protocol.host.HostConnection` (a
    protocol, so that the connection's module and this one do not import each other)."""

    _outbox: list[bytes]
    _windows: dict[str, int]
    _subscriptions: dict[str, None]
    _held: Held | None

    @property
    def closed(self) -> bool: ...

_Text: TypeAlias = "t.ChatDeltaAction | t.ChatReasoningAction"
_MERGEABLE = (t.ChatDeltaAction, t.ChatReasoningAction)


def _text(envelope: t.ActionEnvelope) -> str:
    action: _Text = envelope.action  # type: ignore[assignment]
    return action.content


def is_mergeable(envelope: t.ActionEnvelope) -> bool:
    """Whether ``envelope`` may be merged with its neighbours of the same part."""
    action = envelope.action
    return (
        type(action) in _MERGEABLE
        and action.meta is None  # type: ignore[union-attr]
        and envelope.origin is None
        and envelope.rejection_reason is None
    )


class Held:
    """Consecutive mergeable envelopes of one channel, held for the connections that
    subscribed to it with one window."""

    __slots__ = ("channel", "due", "members", "parts", "size", "window")

    def __init__(self, channel: str, window: int, due: int) -> None:
        self.channel = channel
        self.window = window
        self.due = due
        """Host-clock ms by which the group must be released."""
        self.members: list[HostConnection] = []
        self.parts: list[tuple[t.ActionEnvelope, bytes]] = []
        """Each envelope with its encoding (sent as it is when it is alone)."""
        self.size = 0

    def accepts(self, envelope: t.ActionEnvelope, size: int, limit: int) -> bool:
        first: _Text = self.parts[0][0].action  # type: ignore[assignment]
        action = envelope.action
        return (
            type(action) is type(first)
            and action.turn_id == first.turn_id
            and action.part_id == first.part_id
            and self.size + size <= limit
        )


class Coalescer:
    """The held groups of one host, and the windows its clients asked for."""

    def __init__(self, encode: Callable[[t.ActionEnvelope], bytes]) -> None:
        self._encode = encode
        self._groups: dict[tuple[str, int], Held] = {}
        self._channels: dict[str, int] = {}
        """Per channel, how many of its groups are held (to skip channels without)."""
        self._windows: dict[str, dict[str, int]] = {}
        """Per clientId, the windows of its subscriptions (kept across a reconnect)."""
        self._released: list[tuple[bytes, tuple[tuple[t.ActionEnvelope, bytes], ...]]] = []
        """Merged messages queued since the last commit, with what they merged: a failed
        commit takes back parts of them (only tracked with a store)."""
        self.tracking = False

    def __len__(self) -> int:
        return len(self._groups)

    # -- windows --

    def set_window(self, client_id: str | None, conn: HostConnection, uri: str,
                   window: int) -> None:
        """``conn`` (of ``client_id``) is subscribed to ``uri`` with ``window`` ms (0: none)."""
        if window > 0:
            self.release_channel(uri, window)
            conn._windows[uri] = window
            if client_id is not None:
                self._windows.setdefault(client_id, {})[uri] = window
            return
        conn._windows.pop(uri, None)
        if client_id is not None:
            self.clear_window(client_id, uri)

    def restore_windows(self, client_id: str, conn: HostConnection) -> None:
        """A reconnect: the windows ``client_id`` had for the channels ``conn`` is
        subscribed to again apply again (the reconnect request cannot carry them)."""
        known = self._windows.get(client_id)
        conn._windows.clear()
        if not known:
            return
        for uri in tuple(known):
            if uri in conn._subscriptions:
                self.release_channel(uri, known[uri])
                conn._windows[uri] = known[uri]
            else:
                del known[uri]
        if not known:
            del self._windows[client_id]

    def clear_window(self, client_id: str, uri: str) -> None:
        known = self._windows.get(client_id)
        if known is not None:
            known.pop(uri, None)
            if not known:
                del self._windows[client_id]

    def forget_client(self, client_id: str) -> None:
        self._windows.pop(client_id, None)

    # -- holding and releasing --

    def hold(self, conn: HostConnection, window: int, envelope: t.ActionEnvelope, data: bytes,
             *, clock: Callable[[], int], limit: int) -> None:
        """Hold ``envelope`` (encoded as ``data``) for ``conn``, merging it into the group of
        its channel and window when it can be."""
        key = (envelope.channel, window)
        group = self._groups.get(key)
        if group is not None and group.parts[-1][0] is not envelope:
            if group.accepts(envelope, len(data), limit):
                group.parts.append((envelope, data))
                group.size += len(data)
            else:
                self.release(group)
                group = None
        if group is None:
            # the clock is read once a group, not once a recipient
            group = self._groups[key] = Held(envelope.channel, window, clock() + window)
            self._channels[envelope.channel] = self._channels.get(envelope.channel, 0) + 1
            group.parts.append((envelope, data))
            group.size = len(data)
        if conn._held is not group:
            if conn._held is not None:
                self.release(conn._held)
            group.members.append(conn)
            conn._held = group

    def release(self, group: Held) -> None:
        """Queue ``group``'s envelopes, merged, for every member that still holds it."""
        if self._groups.get((group.channel, group.window)) is group:
            del self._groups[group.channel, group.window]
            left = self._channels[group.channel] - 1
            if left:
                self._channels[group.channel] = left
            else:
                del self._channels[group.channel]
        data = self._merged(group.parts)
        if data is not None and self.tracking and len(group.parts) > 1:
            self._released.append((data, tuple(group.parts)))
        for conn in group.members:
            if conn._held is group:
                conn._held = None
                if data is not None and not conn.closed:
                    conn._outbox.append(data)
        group.members.clear()

    def release_channel(self, channel: str, window: int | None = None) -> None:
        """Release ``channel``'s groups (only the one of ``window`` when given)."""
        if channel not in self._channels:
            return
        for key in [key for key in self._groups if key[0] == channel]:
            if window is None or key[1] == window:
                self.release(self._groups[key])

    def holds(self, channel: str) -> bool:
        return channel in self._channels

    def leave(self, conn: HostConnection) -> None:
        """``conn`` is gone: its group is released for the others (and for it, if the
        host closed it: what was sent before the close still goes)."""
        group = conn._held
        if group is not None:
            self.release(group)

    def release_due(self, now: int) -> None:
        for group in [group for group in self._groups.values() if group.due <= now]:
            self.release(group)

    def next_due(self) -> int | None:
        return min((group.due for group in self._groups.values()), default=None)

    def _merged(self, parts: list[tuple[t.ActionEnvelope, bytes]]) -> bytes | None:
        if not parts:
            return None
        if len(parts) == 1:
            return parts[0][1]
        first: _Text = parts[0][0].action  # type: ignore[assignment]
        last = parts[-1][0]
        content = "".join(_text(envelope) for envelope, _ in parts)
        return self._encode(evolve(last, action=evolve(first, content=content)))

    # -- the store --

    def committed(self) -> None:
        self._released.clear()

    def rolled_back(self, dropped: Collection[int]) -> dict[int, bytes | None]:
        """A commit failed: the envelopes encoded as ``dropped`` (ids of their data) are
        taken back.  Held groups forget them; returns what to put in place of the
        merged messages already queued that held some (``None``: nothing)."""
        for group in list(self._groups.values()):
            kept = [part for part in group.parts if id(part[1]) not in dropped]
            if len(kept) == len(group.parts):
                continue
            if kept:
                group.parts[:] = kept
                group.size = sum(len(data) for _, data in kept)
            else:
                group.parts.clear()
                self.release(group)  # nothing to send: it only lets go of its members
        replace: dict[int, bytes | None] = {}
        for data, parts in self._released:
            kept = [part for part in parts if id(part[1]) not in dropped]
            if len(kept) < len(parts):
                replace[id(data)] = self._merged(kept)
        self._released.clear()
        return replace
