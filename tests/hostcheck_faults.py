"""A broken host, for proving that ``check-host`` catches what it claims to (test only).

:class:`FaultyHost` is a WebSocket proxy in front of a real host (our
``serve``): what clients send passes through; what the host sends passes
through a :class:`Fault`, which may edit, drop, repeat or add messages, the
way a host with that bug would.  Each fault names the property that must
catch it.  The proxy runs its own event loop on a thread, on loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator
from typing import Any

from attrs import define, field
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve

from agenthost_protocol.versions import is_action_known_to_version

Message = dict[str, Any]


@define
class Conn:
    """One client connection as the proxy sees it."""

    number: int
    socket: ServerConnection
    version: str | None = None
    client_id: str | None = None
    channels: set[str] = field(factory=set)
    asked: dict[str, str] = field(factory=dict)  # request id (JSON) -> method
    envelopes: int = 0
    last_seq: int = 0

    def seen_from_client(self, message: object) -> None:
        if not isinstance(message, dict):
            return
        raw = message.get("params")
        params: dict[str, Any] = raw if isinstance(raw, dict) else {}
        method = message.get("method")
        if "id" in message and isinstance(method, str):
            self.asked[json.dumps(message["id"])] = method
        if method in ("initialize", "reconnect"):
            self.client_id = params.get("clientId")
            self.channels.update(params.get("initialSubscriptions") or ())
            self.channels.update(params.get("subscriptions") or ())
        elif method == "subscribe" and isinstance(params.get("channel"), str):
            self.channels.add(params["channel"])
        elif method == "unsubscribe":
            self.channels.discard(params.get("channel"))

    def answers(self, message: Message) -> str | None:
        """The method of the request ``message`` answers (``None``: not an answer)."""
        if "method" in message or "id" not in message:
            return None
        return self.asked.get(json.dumps(message["id"]))


class Fault:
    """Pass-through; a subclass changes what the host sends.  ``breaks``: the property
    that must report it."""

    name = "none"
    breaks = ""

    def __init__(self) -> None:
        self.proxy: FaultyHost | None = None
        self.count = 0
        """How many times the fault changed something."""

    def to_client(self, conn: Conn, message: Message) -> list[Message]:
        return [message]

    def others(self, conn: Conn) -> Iterator[Conn]:
        assert self.proxy is not None
        return (c for c in list(self.proxy.conns) if c is not conn)


def _is_envelope(m: Message) -> bool:
    return m.get("method") == "action" and isinstance(m.get("params"), dict)


def _is_own_echo(conn: Conn, m: Message) -> bool:
    origin = m["params"].get("origin")
    return isinstance(origin, dict) and origin.get("clientId") == conn.client_id


class ReusedServerSeq(Fault):
    name, breaks = "reused serverSeq", "server-seq-increasing"

    def to_client(self, conn: Conn, message: Message) -> list[Message]:
        if _is_envelope(message):
            conn.envelopes += 1
            seq = message["params"]["serverSeq"]
            if conn.envelopes == 3:
                message["params"]["serverSeq"] = conn.last_seq
                self.count += 1
            conn.last_seq = seq
        return [message]


class MissingOrigin(Fault):
    name, breaks = "missing origin", "echo-complete"

    def to_client(self, conn: Conn, message: Message) -> list[Message]:
        if _is_envelope(message) and "rejectionReason" not in message["params"] \
                and _is_own_echo(conn, message):
            del message["params"]["origin"]
            self.count += 1
        return [message]


class RejectedApplied(Fault):
    """The host rejects an action to its origin, and applies it for everyone else."""

    name, breaks = "a rejected action applied anyway", "rejection-unapplied"

    def to_client(self, conn: Conn, message: Message) -> list[Message]:
        if _is_envelope(message) and "rejectionReason" in message["params"]:
            applied = json.loads(json.dumps(message))
            del applied["params"]["rejectionReason"]
            for other in self.others(conn):
                if applied["params"]["channel"] in other.channels:
                    self.count += 1
                    assert self.proxy is not None
                    self.proxy.inject(other, applied)
        return [message]


class DroppedEnvelope(Fault):
    name, breaks = "a dropped envelope", "state-agrees"

    def to_client(self, conn: Conn, message: Message) -> list[Message]:
        if _is_envelope(message) and not _is_own_echo(conn, message) \
                and message["params"]["channel"].startswith("ahp-session:"):
            conn.envelopes += 1
            if conn.envelopes == 1:
                self.count += 1
                return []
        return [message]


class DuplicatedEnvelope(Fault):
    name, breaks = "a duplicated envelope", "server-seq-increasing"

    def to_client(self, conn: Conn, message: Message) -> list[Message]:
        if _is_envelope(message):
            conn.envelopes += 1
            if conn.envelopes == 2:
                self.count += 1
                return [message, message]
        return [message]


class ActionToOlderVersion(Fault):
    """What the host filters out for a client of an older version, it sends it anyway."""

    name, breaks = "an action sent to a client of an older version", "version-filter"

    def to_client(self, conn: Conn, message: Message) -> list[Message]:
        if _is_envelope(message) and "rejectionReason" not in message["params"]:
            kind = message["params"].get("action", {}).get("type")
            for other in self.others(conn):
                if other.version is not None and isinstance(kind, str) \
                        and message["params"]["channel"] in other.channels \
                        and not is_action_known_to_version(kind, other.version) \
                        and not _is_own_echo(other, message):
                    self.count += 1
                    assert self.proxy is not None
                    self.proxy.inject(other, message)
        return [message]


class WrongErrorCode(Fault):
    name, breaks = "a wrong error code", "error-codes"

    def to_client(self, conn: Conn, message: Message) -> list[Message]:
        error = message.get("error")
        if isinstance(error, dict) and error.get("code") == -32601:
            error["code"] = -32603
            self.count += 1
        return [message]


class StaleSnapshot(Fault):
    """A subscription's snapshot holds the state the channel had the first time anyone
    subscribed, under the current ``fromSeq``."""

    name, breaks = "a snapshot out of step with fromSeq", "state-agrees"

    def __init__(self) -> None:
        super().__init__()
        self.first: dict[str, object] = {}

    def to_client(self, conn: Conn, message: Message) -> list[Message]:
        if conn.answers(message) == "subscribe" and isinstance(message.get("result"), dict):
            snapshot = message["result"].get("snapshot")
            if isinstance(snapshot, dict):
                first = self.first.setdefault(snapshot["resource"], snapshot["state"])
                if first != snapshot["state"]:
                    snapshot["state"] = first
                    self.count += 1
        return [message]


def _replay(conn: Conn, message: Message) -> list[Any] | None:
    result = message.get("result")
    if conn.answers(message) == "reconnect" and isinstance(result, dict) \
            and result.get("type") == "replay":
        return result["actions"]  # type: ignore[no-any-return]
    return None


class IncompleteReplay(Fault):
    name, breaks = "an incomplete replay", "replay-complete"

    def to_client(self, conn: Conn, message: Message) -> list[Message]:
        actions = _replay(conn, message)
        if actions:
            del actions[0]
            self.count += 1
        return [message]


class ReorderedReplay(Fault):
    name, breaks = "a reordered replay", "replay-in-order"

    def to_client(self, conn: Conn, message: Message) -> list[Message]:
        actions = _replay(conn, message)
        if actions and len(actions) > 1:
            actions.reverse()
            self.count += 1
        return [message]


class NullResultOmitted(Fault):
    name, breaks = '"result" omitted for null', "well-formed-response"

    def to_client(self, conn: Conn, message: Message) -> list[Message]:
        if "result" in message and message["result"] is None:
            del message["result"]
            self.count += 1
        return [message]


class ChangedRequestId(Fault):
    name, breaks = "a changed request id", "one-response-per-request"

    def to_client(self, conn: Conn, message: Message) -> list[Message]:
        if conn.answers(message) == "ping":
            message["id"] = str(message["id"])
            self.count += 1
        return [message]


class SessionCreatedTwice(Fault):
    name, breaks = "a session URI in use created again", "session-exists"

    def to_client(self, conn: Conn, message: Message) -> list[Message]:
        error = message.get("error")
        if isinstance(error, dict) and error.get("code") == -32003:
            del message["error"]
            message["result"] = None
            self.count += 1
        return [message]


FAULTS: tuple[type[Fault], ...] = (
    ReusedServerSeq, MissingOrigin, RejectedApplied, DroppedEnvelope, DuplicatedEnvelope,
    ActionToOlderVersion, WrongErrorCode, StaleSnapshot, IncompleteReplay, ReorderedReplay,
    NullResultOmitted, ChangedRequestId, SessionCreatedTwice,
)


class FaultyHost:
    """``with FaultyHost(upstream_url, fault) as proxy``: clients connect to ``proxy.url``."""

    def __init__(self, upstream: str, fault: Fault) -> None:
        self.upstream = upstream
        self.fault = fault
        fault.proxy = self
        self.conns: list[Conn] = []
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: Any = None

    def __enter__(self) -> FaultyHost:
        self._thread.start()
        async def start() -> Any:
            return await serve(self._handle, "127.0.0.1", 0, compression=None, max_size=None)
        self._server = asyncio.run_coroutine_threadsafe(start(), self._loop).result(10)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"ws://127.0.0.1:{port}"
        return self

    def __exit__(self, *_: object) -> None:
        async def stop() -> None:
            self._server.close()
            await self._server.wait_closed()
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def inject(self, conn: Conn, message: Message) -> None:
        """Send ``message`` to another connection, as the host would have."""
        task = self._loop.create_task(conn.socket.send(json.dumps(message)))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _handle(self, socket: ServerConnection) -> None:
        conn = Conn(number=len(self.conns) + 1, socket=socket)
        self.conns.append(conn)
        try:
            async with connect(self.upstream, compression=None, max_size=None) as up:
                async def client_to_host() -> None:
                    async for data in socket:
                        with contextlib.suppress(ValueError):
                            conn.seen_from_client(json.loads(data))
                        await up.send(data)

                async def host_to_client() -> None:
                    async for data in up:
                        message = json.loads(data)
                        method = conn.answers(message) if isinstance(message, dict) else None
                        if method == "initialize" and isinstance(message.get("result"), dict):
                            conn.version = message["result"].get("protocolVersion")
                        out = self.fault.to_client(conn, message) \
                            if isinstance(message, dict) else [message]
                        for item in out:
                            await socket.send(json.dumps(item))

                tasks = [asyncio.ensure_future(client_to_host()),
                         asyncio.ensure_future(host_to_client())]
                _, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                for task in pending:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        except Exception:
            pass
        finally:
            self.conns.remove(conn)
