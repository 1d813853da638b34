"""An in-memory network: one :class:`~agenthost_protocol.host.Host` and any number
of :class:`~agenthost_protocol.client.ClientConnection`\\ s, without sockets.

Each :class:`Link` is one transport connection: two ordered, reliable queues
of whole JSON-RPC messages, one per direction, as AHP asks of a transport.
Nothing moves until the test says so (:meth:`Network.deliver`,
:meth:`Network.run_until_quiet`, or one message on one link with
:meth:`Network.deliver_to_host` and :meth:`Network.deliver_to_client`), so
interleavings are the test's choice and every run is the same.

The network drives both ends as a careful embedder would:

* what a host connection queues (``data_to_send``) is moved onto its link;
* a client's :class:`~agenthost_protocol.client.ProtocolViolation` reply is
  sent back to the host, and a fatal one drops the link (both sides learn);
* a host connection that closes itself (after ``-32005``) ends the link once
  its last message has reached the client.

Everything else is the test's: client events collect on :attr:`Link.events`,
host events stay in the host (``host.events()``), and an ``on_host_event``
/ ``on_client_event`` callback given to :meth:`Network.run_until_quiet` can
answer requests as they arrive.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from ..client import ClientConnection, ClientState, ProtocolViolation
from ..client import Event as ClientEvent
from ..errors import LocalProtocolError
from ..host import Event as HostEvent
from ..host import Host, HostConnection

__all__ = ["Link", "Network"]


class Link:
    """One transport connection between a client and the host."""

    def __init__(self, client: ClientConnection, connection: HostConnection) -> None:
        self.client = client
        self.connection = connection
        """The host's end."""
        self.to_host: deque[bytes] = deque()
        self.to_client: deque[bytes] = deque()
        self.events: list[ClientEvent] = []
        """Every event the client produced on this link, in order."""
        self.open = True

    def __repr__(self) -> str:
        state = "open" if self.open else "dropped"
        return f"<Link {self.client.client_id!r} #{self.connection.number} {state}>"

    def send(self, data: bytes) -> None:
        """Queue a message from the client (what a ``ClientConnection`` method returned)."""
        if not self.open:
            raise LocalProtocolError("the link was dropped")
        self.to_host.append(data)

    def take_events(self) -> list[ClientEvent]:
        """The client events collected so far, emptying :attr:`events`."""
        events, self.events = self.events, []
        return events

    def drop(self) -> None:
        """The transport breaks: what is in flight is lost, and both ends learn."""
        if not self.open:
            return
        self.open = False
        self.to_host.clear()
        self.to_client.clear()
        self.connection.connection_lost()
        self.events.extend(self.client.connection_lost())

    def _pull(self) -> None:
        self.to_client.extend(self.connection.data_to_send())


class Network:
    """The host and the links of its clients."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self._links: dict[ClientConnection, Link] = {}

    @property
    def links(self) -> tuple[Link, ...]:
        """The current link of every client, open or dropped."""
        return tuple(self._links.values())

    def link(self, client: ClientConnection) -> Link:
        """``client``'s current link."""
        link = self._links.get(client)
        if link is None:
            raise LocalProtocolError(f"client {client.client_id!r} was never connected")
        return link

    def connect(self, client: ClientConnection) -> Link:
        """Open a new transport for ``client`` (its previous one must be dropped)."""
        old = self._links.get(client)
        if old is not None and old.open:
            raise LocalProtocolError(f"client {client.client_id!r} is still connected")
        link = Link(client, self.host.connect())
        self._links[client] = link
        return link

    def reconnect(self, client: ClientConnection) -> Link:
        """Drop ``client``'s link if open, open a new one and send ``reconnect`` on it."""
        old = self._links.get(client)
        if old is not None:
            old.drop()
        link = self.connect(client)
        link.send(client.reconnect())
        return link

    def deliver(
        self,
        on_host_event: Callable[[HostEvent], None] | None = None,
        on_client_event: Callable[[Link, ClientEvent], None] | None = None,
    ) -> bool:
        """Move at most one message each way on every open link, in connection order.

        Returns whether anything moved.  ``on_host_event`` sees every host
        event as it is produced (answer requests with its responder);
        ``on_client_event`` every client event (send answers with
        :meth:`Link.send`).  Without ``on_host_event`` host events stay in
        the host's queue.
        """
        moved = False
        for link in tuple(self._links.values()):
            if not link.open:
                continue
            moved = self._one_to_host(link, on_host_event) or moved
            moved = self._one_to_client(link, on_client_event) or moved
        return moved

    def deliver_to_host(
        self,
        client: ClientConnection,
        on_host_event: Callable[[HostEvent], None] | None = None,
    ) -> bool:
        """Move the oldest message ``client`` sent on its link to the host, if any.

        Returns whether one moved.  Nothing moves on a dropped link.
        """
        link = self.link(client)
        return link.open and self._one_to_host(link, on_host_event)

    def deliver_to_client(
        self,
        client: ClientConnection,
        on_client_event: Callable[[Link, ClientEvent], None] | None = None,
    ) -> bool:
        """Move the oldest message the host queued for ``client`` to it, if any.

        Returns whether one moved (or the link ended because the host hung up).
        """
        link = self.link(client)
        return link.open and self._one_to_client(link, on_client_event)

    def _one_to_host(
        self, link: Link, on_host_event: Callable[[HostEvent], None] | None
    ) -> bool:
        link._pull()
        if not link.to_host:
            return False
        link.connection.receive_data(link.to_host.popleft())
        self._host_events(on_host_event)
        link._pull()
        return True

    def _one_to_client(
        self, link: Link, on_client_event: Callable[[Link, ClientEvent], None] | None
    ) -> bool:
        link._pull()
        moved = False
        if link.to_client:
            self._to_client(link, link.to_client.popleft(), on_client_event)
            moved = True
        if link.open and link.connection.closed and not link.to_client:
            # the host hung up (after -32005): the client sees the end of the line
            link.drop()
            moved = True
        return moved

    def run_until_quiet(
        self,
        on_host_event: Callable[[HostEvent], None] | None = None,
        on_client_event: Callable[[Link, ClientEvent], None] | None = None,
        *,
        max_rounds: int = 100_000,
    ) -> int:
        """:meth:`deliver` until nothing is in flight; returns the number of rounds.

        Raises :class:`LocalProtocolError` after ``max_rounds`` (peers that
        answer each other forever).
        """
        for rounds in range(max_rounds):
            self._host_events(on_host_event)
            if not self.deliver(on_host_event, on_client_event):
                return rounds
        raise LocalProtocolError(f"the network is not quiet after {max_rounds} rounds")

    def _host_events(self, on_host_event: Callable[[HostEvent], None] | None) -> None:
        if on_host_event is None:
            return
        while (event := self.host.next_event()) is not None:
            on_host_event(event)

    def _to_client(
        self,
        link: Link,
        data: bytes,
        on_client_event: Callable[[Link, ClientEvent], None] | None,
    ) -> None:
        client = link.client
        if client.connection_state is ClientState.CLOSED:
            return  # it stopped reading at its violation; the link is being dropped
        events = client.receive_data(data)
        link.events.extend(events)
        fatal = False
        for event in events:
            if isinstance(event, ProtocolViolation):
                if event.reply is not None:
                    if event.fatal:
                        # the last word before hanging up goes out at once
                        link.connection.receive_data(event.reply)
                    else:
                        link.to_host.append(event.reply)
                fatal = fatal or event.fatal
            if on_client_event is not None:
                on_client_event(link, event)
        if fatal:
            link.drop()
