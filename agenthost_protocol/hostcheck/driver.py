"""Drive a live host: the clients ``check-host`` runs, and the program they follow.

A *program* is a list of steps, each a JSON object (``{"op": "subscribe",
"client": 1, "channel": 2}``), so that a failing one can be written out and
run again (``check-host --replay``).  Steps name clients and channels by
number, taken modulo what exists when the step runs; a step that has nothing
to act on (no client connected yet) does nothing.  That keeps every program
runnable, which is what lets hypothesis shrink one freely.

The :class:`Driver` runs steps against a :class:`Target` and records every
message both ways, on every connection, into one
:class:`~agenthost_protocol.hostcheck.transcript.Transcript`.  The host is a
peer like any other: what it sends is bounded in size and count, every wait
is bounded in time, and a host that stops answering only makes the run fail.

This module does I/O (threads, sockets, processes); the checks it feeds do
none.  A WebSocket target needs the ``ws`` extra.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import shlex
import signal
import subprocess
import threading
import time
import urllib.parse
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from attrs import define, field

from .. import types as t
from .. import wire
from ..types.error_codes import AhpErrorCode
from ..versions import PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS, is_action_known_to_version
from .transcript import Direction, Raw, Record, Transcript, brief

__all__ = [
    "ACTIONS",
    "MALFORMED",
    "Budget",
    "MAX_RECORDED_BYTES",
    "Cleanup",
    "Driver",
    "HandshakeRefused",
    "Link",
    "Recorder",
    "StdioTarget",
    "Target",
    "TrafficLimit",
    "WebSocketTarget",
    "url_token",
]

Step = Mapping[str, object]

ROOT = "ahp-root://"
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
"""The largest message a host may send the checker (a longer one ends the run)."""
MAX_RECORDS = 200_000
"""The most messages one run records (a host that floods ends the run)."""
MAX_RECORDED_BYTES = 128 * 1024 * 1024
"""The most bytes of messages one run records by default (``check-host --max-traffic``):
a host that sends more ends the run."""
_CLEANUP_BYTES = 2 * MAX_MESSAGE_BYTES
"""What a :class:`Cleanup` connection records: a few small answers are all it needs."""

# What the host sends is parsed once as it arrives (to find the answers) and kept as
# it came: one message parsed at a time, whatever the number of connections, is what
# a flood of them costs beyond the bytes
_PARSING = threading.Lock()


class Budget:
    """The bytes of the host's messages a run may hold at once, shared by its recorders.

    A recorder takes the size of each message it keeps; the bytes come back when
    the last message of that recorder is gone (its transcript too), so the examples
    a run has checked and let go cost nothing, and the failing one it keeps while
    shrinking counts."""

    def __init__(self, total: int) -> None:
        if total < 1:
            raise ValueError("the budget must be 1 byte or more")
        self.total = total
        self.held = 0
        self._lock = threading.Lock()

    def take(self, size: int) -> bool:
        """Take ``size`` bytes (``False``: there is not that much left)."""
        for again in (False, True):
            if again:
                # what is let go but held in a cycle comes back only at a collection
                gc.collect()
            with self._lock:
                if self.held + size <= self.total:
                    self.held += size
                    return True
        return False

    def give(self, size: int) -> None:
        with self._lock:
            self.held -= size


class _Held:
    """What one recorder took of its budget, given back when the last of its messages
    (and the recorder) is gone."""

    def __init__(self, budget: Budget) -> None:
        self.size = [0]
        weakref.finalize(self, _give_back, budget, self.size)


def _give_back(budget: Budget, size: list[int]) -> None:
    budget.give(size[0])


class TrafficLimit(RuntimeError):
    """The host sent more than a run takes (:data:`MAX_RECORDS` messages, more bytes than
    the run's budget, or too large a message)."""


class HandshakeRefused(ConnectionError):
    """The host refused the WebSocket handshake with an HTTP status: final for a run,
    since every connection would be refused the same way.

    ``status`` 401 is the access token; 403 the ``Origin`` or ``Host`` header."""

    def __init__(self, status: int, said: str = "") -> None:
        if status == 401:
            cause = ("the host refused the access token (HTTP 401): give the right one "
                     "with --token-file, AHP_TOKEN, --token or the URL's token=")
        elif status == 403:
            cause = ("the host refused the connection's Origin or Host header (HTTP 403): "
                     "the host must accept the name in the URL (serve --allow-host NAME)")
        else:
            cause = f"the host refused the WebSocket handshake (HTTP {status})"
        super().__init__(cause + (f"; it says: {said}" if said else ""))
        self.status = status


class Recorder:
    """Every message of a run, from every connection's reader thread, in arrival order.

    A :class:`Target`'s connection hands it what the host sends (:meth:`received`)
    and says when the connection ended (:meth:`close`).  What the host sends is
    kept as it came (:class:`~agenthost_protocol.hostcheck.transcript.Raw`) and
    counted against ``budget`` (bytes, or a :class:`Budget` the run's recorders
    share): the first message past it, or past :data:`MAX_RECORDS`, ends the run
    (:attr:`overflow`, and :attr:`why`)."""

    def __init__(self, *, budget: int | Budget = MAX_RECORDED_BYTES) -> None:
        self._changed = threading.Condition()
        self.budget = budget if isinstance(budget, Budget) else Budget(budget)
        self._held = _Held(self.budget)
        self.records: list[Record] = []
        self.answered: dict[tuple[int, str], Raw] = {}
        """The first answer to each (connection, JSON id), as it came."""
        self.asked: set[tuple[int, str]] = set()
        self.strays: dict[int, int] = {}
        """How many answers with an id no request of the connection had."""
        self.closed: set[int] = set()
        """Connections the host (or the checker) closed: nothing more will come on them."""
        self.nulls: dict[int, int] = {}
        """How many answers with a null id each connection was sent."""
        self.overflow = False
        self.why = ""
        """What ended the run, when :attr:`overflow` is set."""

    def _over(self, why: str) -> None:
        if not self.overflow:
            self.overflow, self.why = True, why
        self._changed.notify_all()

    def _room(self) -> bool:
        """Whether one more message may be recorded (``False``: the run is over)."""
        if self.overflow:
            return False
        if len(self.records) >= MAX_RECORDS:
            self._over(f"the host sent more than {MAX_RECORDS} messages in one run")
            return False
        return True

    def sent(self, conn: int, message: object) -> None:
        """The checker sent ``message`` on ``conn`` (its own: not counted in bytes)."""
        with self._changed:
            if self._room():
                self.records.append(Record(sender=Direction.CLIENT, message=message,
                                           time=time.time() * 1000, conn=conn))

    def received(self, conn: int, data: str | bytes) -> bool:
        """The host sent ``data`` on ``conn``; ``False``: the run is over, read no more."""
        when = time.time() * 1000
        with self._changed:
            if not self._room():
                return False
        if not self.budget.take(len(data)):
            with self._changed:
                self._over("the host sent more than check-host holds at once: "
                           f"{self.budget.total} bytes of messages (check-host --max-traffic)")
            return False
        with self._changed:
            self._held.size[0] += len(data)
        with _PARSING:
            message = Raw(data).parse()
            key = None
            if isinstance(message, dict) and "method" not in message:
                key = json.dumps(message.get("id"))
            raw = Raw(data, brief=brief(message), owner=self._held)
            del message
        with self._changed:
            self.records.append(Record(sender=Direction.HOST, message=raw, time=when,
                                       conn=conn))
            if key is not None:
                answer = (conn, key)
                if key == "null":
                    self.nulls[conn] = self.nulls.get(conn, 0) + 1
                elif answer not in self.asked:
                    # an id no request had: whatever it answers, waiting for the
                    # right one would only wait out the timeout
                    self.strays[conn] = self.strays.get(conn, 0) + 1
                self.answered.setdefault(answer, raw)
            self._changed.notify_all()
        return True

    def answer(self, conn: int, key: str) -> dict[str, object] | None:
        """The first answer to request ``key`` on ``conn``, parsed (``None``: none yet)."""
        with self._changed:
            raw = self.answered.get((conn, key))
        if raw is None:
            return None
        with _PARSING:
            message = raw.parse()
        return message if isinstance(message, dict) else None

    def expect(self, conn: int, key: str) -> int:
        """A request ``key`` is about to be sent on ``conn``; how many stray answers the
        connection has had so far."""
        with self._changed:
            self.asked.add((conn, key))
            return self.strays.get(conn, 0)

    def overflowed(self, why: str) -> None:
        """The host sent a message over the limit: the run ends."""
        with self._changed:
            self._over(why)

    def close(self, conn: int) -> None:
        with self._changed:
            self.closed.add(conn)
            self._changed.notify_all()

    def wait(self, ready: Callable[[], bool], timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: ready() or self.overflow, timeout)

    def snapshot(self) -> list[Record]:
        with self._changed:
            return list(self.records)

    def forget(self) -> None:
        """Let go of every message recorded (a transcript made of them keeps them):
        their bytes go back to the budget once nothing else holds them, even while
        the recorder lives on in a cycle that only a collection frees."""
        with self._changed:
            self.records = []
            self.answered = {}
            # the old count lives on in the messages kept, and goes with the last
            self._held = _Held(self.budget)


def _parse(text: str | bytes) -> object:
    return Raw(text).parse()


TOKEN_PARAMETERS = ("token", "tkn")
"""The query parameters a host's URL may carry its access token in."""


def url_token(url: str) -> tuple[str, str | None]:
    """``url`` without its access token, and the token (``None``: it has none).

    The token goes to the host in the ``Authorization`` header instead, where
    no access log records it."""
    try:
        parts = urllib.parse.urlsplit(url)
        query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    except ValueError:
        return url, None  # not a URL: the connection says so
    tokens = [value for key, value in query if key in TOKEN_PARAMETERS and value]
    if not tokens:
        return url, None
    rest = [(key, value) for key, value in query if key not in TOKEN_PARAMETERS]
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(rest))), \
        tokens[0]


def header_safe(token: str) -> bool:
    """Whether an HTTP header can carry ``token`` (visible ASCII only)."""
    return bool(token) and all("!" <= char <= "~" for char in token)


def _printable(data: bytes | bytearray, limit: int = 200) -> str:
    """What a refusing host said, bounded and shown safely (it is the host's text)."""
    text = bytes(data[:limit]).decode("utf-8", "replace")
    return "".join(c if c.isprintable() else " " for c in text).strip()


class Link(Protocol):
    """One open connection to the host."""

    def send(self, text: str) -> None: ...
    def close(self) -> None: ...


class Target(Protocol):
    """Where the host is, and how to open a connection to it."""

    many: bool
    """Whether several connections may be open at once to one host (and a client may
    reconnect to it)."""

    def open(self, conn: int, recorder: Recorder) -> Link: ...


class _Socket(Protocol):
    def send(self, message: str) -> None: ...
    def recv(self, timeout: float | None = None, decode: bool | None = None) -> str | bytes: ...


@define
class _WebSocketLink:
    socket: _Socket
    closing: contextlib.ExitStack
    reader: threading.Thread

    def send(self, text: str) -> None:
        with contextlib.suppress(Exception):  # a closed socket: the run sees no answer
            self.socket.send(text)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.closing.close()
        self.reader.join(timeout=5)


@define
class WebSocketTarget:
    """A host at a ``ws://`` or ``wss://`` URL.

    The access token (``token``, else the URL's ``token=`` or ``tkn=``) is
    sent as ``Authorization: Bearer``, and left out of the request target;
    one no header can carry stays in the URL.  A handshake the host refuses
    raises :class:`HandshakeRefused`."""

    url: str = field(repr=False)  # it may carry the token
    token: str | None = field(default=None, repr=False)
    timeout: float = 5.0
    many: bool = True

    @token.validator
    def _header_safe(self, _: object, token: str | None) -> None:
        if token is not None and not header_safe(token):
            raise ValueError("the access token is not valid: visible ASCII characters only")

    def _request(self) -> tuple[str, dict[str, str] | None]:
        """The URL to connect to, and the headers of the handshake."""
        bare, in_url = url_token(self.url)
        token = self.token if self.token is not None else in_url
        if token is None or not header_safe(token):
            return self.url, None
        return bare, {"Authorization": f"Bearer {token}"}

    def open(self, conn: int, recorder: Recorder) -> Link:
        from websockets.exceptions import InvalidStatus  # noqa: PLC0415 (the ws extra)
        from websockets.sync.client import connect  # noqa: PLC0415

        url, headers = self._request()
        stack = contextlib.ExitStack()
        try:
            socket = stack.enter_context(connect(
                url, additional_headers=headers, open_timeout=self.timeout, close_timeout=1,
                max_size=MAX_MESSAGE_BYTES, max_queue=4, compression=None))
        except InvalidStatus as e:
            status = e.response.status_code
            if status in (401, 403):
                said = _printable(e.response.body or b"")
                token = self.token if self.token is not None else url_token(self.url)[1]
                if token:  # a host that echoes it back does not get it printed
                    said = said.replace(token, "REDACTED")
                raise HandshakeRefused(status, said) from None
            raise

        def read() -> None:
            with contextlib.suppress(Exception):  # the connection ends: the reader ends
                # as bytes: text is kept as it came, a byte a byte of the budget
                while recorder.received(conn, socket.recv(decode=False)):
                    pass
            recorder.close(conn)
        reader = threading.Thread(target=read, name=f"check-host reader {conn}", daemon=True)
        reader.start()
        return _WebSocketLink(socket=socket, closing=stack, reader=reader)


@define
class _StdioLink:
    process: subprocess.Popen[bytes]
    reader: threading.Thread

    def send(self, text: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            assert self.process.stdin is not None
            self.process.stdin.write(text.encode() + b"\n")
            self.process.stdin.flush()

    def close(self) -> None:
        _stop_process(self.process)
        self.reader.join(timeout=5)


def _stop_process(process: subprocess.Popen[bytes]) -> None:
    """End the host's process group: stdin closed, then SIGTERM, then SIGKILL; reaped."""
    with contextlib.suppress(OSError, ValueError):
        if process.stdin is not None:
            process.stdin.close()
    for sig, grace in ((None, 1.0), (signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
        if sig is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, sig)
        try:
            process.wait(timeout=grace)
            break
        except subprocess.TimeoutExpired:
            continue
    # what else the host started in its group goes with it
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


@define
class StdioTarget:
    """A host started as ``command`` that speaks JSON Lines on its stdin and stdout.

    Each connection is a process of its own, so one is open at a time and a
    client cannot reconnect to the host it left."""

    command: str
    many: bool = False

    def open(self, conn: int, recorder: Recorder) -> Link:
        process = subprocess.Popen(  # the command the user asked to check
            shlex.split(self.command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, start_new_session=True)

        def read() -> None:
            assert process.stdout is not None
            with contextlib.suppress(Exception):
                while line := process.stdout.readline(MAX_MESSAGE_BYTES + 1):
                    if len(line) > MAX_MESSAGE_BYTES:
                        recorder.overflowed(f"the host sent a message over {MAX_MESSAGE_BYTES}"
                                            " bytes")
                        break
                    if line.strip() and not recorder.received(conn, line.rstrip(b"\r\n")):
                        break
            recorder.close(conn)
        reader = threading.Thread(target=read, name=f"check-host reader {conn}", daemon=True)
        reader.start()
        return _StdioLink(process=process, reader=reader)


USER = t.MessageOrigin(kind=t.MessageKind.USER)


def _action(name: str, text: str, flag: bool, turn: str) -> t.StateAction:
    """The action a ``dispatch`` step names (its JSON is built by the codec)."""
    directory = "file:///tmp/check-host/" + (text.encode().hex()[:16] or "d")
    match name:
        case "session/titleChanged":
            return t.SessionTitleChangedAction(title=text)
        case "session/isReadChanged":
            return t.SessionIsReadChangedAction(is_read=flag)
        case "session/isArchivedChanged":
            return t.SessionIsArchivedChangedAction(is_archived=flag)
        case "session/workingDirectorySet":
            return t.SessionWorkingDirectorySetAction(directory=directory)
        case "session/mcpServerStartRequested":
            return t.SessionMcpServerStartRequestedAction(id=text)
        case "chat/draftChanged":
            return t.ChatDraftChangedAction(draft=t.Message(text=text, origin=USER))
        case "chat/turnStarted":
            return t.ChatTurnStartedAction(turn_id=turn, started_at="2026-01-01T00:00:00.000Z",
                                           message=t.Message(text=text or "hi", origin=USER))
        case "chat/turnCancelled":
            return t.ChatTurnCancelledAction(turn_id=turn, duration=0)
        case _:
            return t.ChatWorkingDirectorySetAction(directory=directory)


ACTIONS: tuple[str, ...] = (
    "session/titleChanged", "session/isReadChanged", "session/isArchivedChanged",
    "session/workingDirectorySet", "session/mcpServerStartRequested", "chat/draftChanged",
    "chat/turnStarted", "chat/turnCancelled", "chat/workingDirectorySet",
)
"""What ``dispatch`` steps send.  Sent to any channel: to another kind's channel, an
action is invalid there and must be rejected."""

MALFORMED: tuple[str, ...] = ("parse", "not-object", "jsonrpc", "unknown-method",
                              "bad-params")
"""The kinds of ``malformed`` step: what JSON-RPC or AHP must refuse, each with its code."""


@define
class _Client:
    number: int
    client_id: str
    version: str | None = None
    conn: int | None = None
    link: Link | None = None
    subscriptions: list[str] = field(factory=list)
    next_id: int = 1
    next_seq: int = 1


class Driver:
    """Runs a program's steps against a target and records the traffic."""

    MAX_CLIENTS = 4

    def __init__(self, target: Target, *, timeout: float = 5.0, label: str | None = None,
                 cleanup: Cleanup | None = None, budget: int | Budget = MAX_RECORDED_BYTES
                 ) -> None:
        self.target = target
        self.timeout = timeout
        self.cleanup = cleanup
        """Where the sessions this driver creates are noted, to be disposed of."""
        self.label = label or uuid.uuid4().hex[:8]
        self.recorder = Recorder(budget=budget)
        self.steps: list[Step] = []
        self.clients: list[_Client] = []
        self.channels: list[str] = [ROOT]
        self.sessions: list[str] = []
        self.turns: dict[str, str] = {}
        self.providers: list[str] = []
        self.witness: _Client | None = None
        self._conns = 0
        self._links: list[Link] = []
        self._count = 0

    # -- connections ---------------------------------------------------------------

    def _open(self) -> tuple[int, Link] | None:
        if not self.target.many and any(c.link is not None for c in self.clients):
            return None
        self._conns += 1
        try:
            link = self.target.open(self._conns, self.recorder)
        except HandshakeRefused:
            raise  # the token or the Origin/Host: no connection would do better
        except Exception:  # a host that refuses the connection fails the run
            raise ConnectionError(f"cannot connect to the host (connection {self._conns})"
                                  ) from None
        self._links.append(link)
        return self._conns, link

    def _send(self, client: _Client, message: object) -> None:
        assert client.link is not None and client.conn is not None
        text = message if isinstance(message, str) else json.dumps(message)
        self.recorder.sent(client.conn, _parse(text) if isinstance(message, str) else message)
        client.link.send(text)

    def _request(self, client: _Client, method: str, params: object,
                 *, raw: Mapping[str, object] | None = None) -> Mapping[str, object] | None:
        """Send a request and wait for its answer (``None``: none came in time)."""
        request_id = client.next_id
        client.next_id += 1
        message = dict(raw) if raw is not None else {
            "jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        message["id"] = request_id
        assert client.conn is not None
        conn, key = client.conn, json.dumps(request_id)
        strays = self.recorder.expect(conn, key)
        self._send(client, message)
        self.recorder.wait(lambda: (conn, key) in self.recorder.answered
                           or self.recorder.strays.get(conn, 0) > strays
                           or conn in self.recorder.closed, self.timeout)
        if self.recorder.overflow:
            raise TrafficLimit(self.recorder.why)
        return self.recorder.answer(conn, key)

    def known_actions(self, number: int) -> list[str]:
        """The :data:`ACTIONS` live client ``number`` may send (what its version knows)."""
        client = self._live(number)
        if client is None or client.version is None:
            return []
        version = client.version
        return [name for name in ACTIONS if is_action_known_to_version(name, version)]

    def _live(self, number: object) -> _Client | None:
        live = [c for c in self.clients if c.link is not None]
        if not live or type(number) is not int:
            return None
        return live[number % len(live)]

    def _channel(self, number: object, *, stateful: bool = False) -> str:
        """Channel ``number`` (-1: one that does not exist); ``stateful``: not the root,
        when there is another (what clients dispatch to is mostly sessions and chats)."""
        if type(number) is not int or number < 0:
            return f"ahp-session:/check-host-{self.label}-none"
        channels = self.channels[1:] if stateful and len(self.channels) > 1 else self.channels
        return channels[number % len(channels)]

    def _target(self, client: _Client, number: object) -> str:
        """Where a ``dispatch`` goes: mostly a session or chat the client follows (an
        action there reaches the other clients that follow it too), else any channel."""
        followed = [c for c in client.subscriptions if c != ROOT]
        if type(number) is int and number >= 0 and followed:
            return followed[number % len(followed)]
        return self._channel(number, stateful=True)

    def _notice(self, client: _Client, answer: Mapping[str, object] | None) -> None:
        """What an answer tells the program: the agents, the channels it follows."""
        result = answer.get("result") if answer is not None else None
        if not isinstance(result, Mapping):
            return
        for snapshot in result.get("snapshots") or ():
            if not isinstance(snapshot, Mapping):
                continue
            state = snapshot.get("state")
            if snapshot.get("resource") == ROOT and isinstance(state, Mapping):
                for agent in state.get("agents") or ():
                    provider = agent.get("provider") if isinstance(agent, Mapping) else None
                    if type(provider) is str and provider not in self.providers:
                        self.providers.append(provider)

    # -- steps -----------------------------------------------------------------------

    def run(self, step: Step) -> None:
        """Run one step (and remember it: :attr:`steps` is the program so far)."""
        self.steps.append(dict(step))
        op = step.get("op")
        client = self._live(step.get("client"))
        match op:
            case "connect":
                self._connect(step)
            case "reconnect":
                self._reconnect(step)
            case _ if client is None:
                pass
            case "subscribe":
                channel = self._channel(step.get("channel"))
                answer = self._request(client, "subscribe", {"channel": channel})
                if answer is not None and "result" in answer \
                        and channel not in client.subscriptions:
                    client.subscriptions.append(channel)
            case "unsubscribe":
                channel = self._channel(step.get("channel"))
                self._send(client, {"jsonrpc": "2.0", "method": "unsubscribe",
                                    "params": {"channel": channel}})
                if channel in client.subscriptions:
                    client.subscriptions.remove(channel)
            case "dispatch":
                self._dispatch(client, step)
            case "ping":
                self._request(client, "ping", {})
            case "listSessions":
                self._request(client, "listSessions", {})
            case "createSession":
                self._create_session(client, step.get("again"))
            case "createChat":
                self._create_chat(client, step)
            case "malformed":
                self._malformed(client, step.get("kind"))
            case "drop":
                self._drop(client)
            case _:
                pass

    def _connect(self, step: Step) -> None:
        if sum(c.link is not None for c in self.clients) >= self.MAX_CLIENTS:
            return
        opened = self._open()
        if opened is None:
            return
        versions = step.get("versions")
        offered = [v for v in versions if type(v) is str] if isinstance(versions, list) \
            else []
        client = _Client(number=len(self.clients),
                         client_id=f"check-host-{self.label}-{len(self.clients)}")
        client.conn, client.link = opened
        self.clients.append(client)
        answer = self._request(client, "initialize", {
            "protocolVersions": offered or ["0.7.0"], "clientId": client.client_id,
            "initialSubscriptions": [ROOT]})
        result = answer.get("result") if answer is not None else None
        if not isinstance(result, Mapping):
            self._drop(client)  # refused (its version, say): the connection is done
            return
        version = result.get("protocolVersion")
        client.version = version if type(version) is str else None
        client.subscriptions = [ROOT]
        self._notice(client, answer)

    def _watch(self, channel: str) -> None:
        """Let the witness follow ``channel``.

        The witness is a client of the newest version that never drops and
        follows every channel the program made: what the host sent is then
        seen by someone, so a replay can be checked against it
        (``replay-complete``) and every client's state against its
        (``state-agrees``).  It is not a step: replays make it the same way."""
        if not self.target.many:
            return
        witness = self.witness
        if witness is None:
            opened = self._open()
            if opened is None:
                return
            witness = self.witness = _Client(
                number=-1, client_id=f"check-host-{self.label}-witness")
            witness.conn, witness.link = opened
            self._request(witness, "initialize", {
                "protocolVersions": [PROTOCOL_VERSION], "clientId": witness.client_id,
                "initialSubscriptions": [ROOT, channel]})
        elif witness.link is not None:
            self._request(witness, "subscribe", {"channel": channel})

    def _reconnect(self, step: Step) -> None:
        gone = [c for c in self.clients if c.link is None and c.version is not None]
        number = step.get("client")
        if not gone or type(number) is not int or not self.target.many:
            return
        client = gone[number % len(gone)]
        opened = self._open()
        if opened is None:
            return
        last = self._last_seen(client)
        client.conn, client.link = opened
        answer = self._request(client, "reconnect", {
            "clientId": client.client_id, "lastSeenServerSeq": last,
            "subscriptions": list(client.subscriptions)})
        result = answer.get("result") if answer is not None else None
        if isinstance(result, Mapping):
            missing = result.get("missing")
            if isinstance(missing, list):
                client.subscriptions = [c for c in client.subscriptions if c not in missing]
            if result.get("type") == "snapshot":
                client.subscriptions = [
                    s["resource"] for s in result.get("snapshots") or ()
                    if isinstance(s, Mapping) and type(s.get("resource")) is str]

    def _last_seen(self, client: _Client) -> int:
        """The highest ``serverSeq`` the client was sent, on any of its connections."""
        conns = {r.conn for r in self.recorder.snapshot() if r.sender is Direction.CLIENT
                 and isinstance(r.message, dict)
                 and isinstance(r.message.get("params"), dict)
                 and r.message["params"].get("clientId") == client.client_id}
        last = 0
        for record in self.recorder.snapshot():
            m = record.message
            if record.conn not in conns or record.sender is not Direction.HOST \
                    or not isinstance(m, dict):
                continue
            if m.get("method") == "action" and isinstance(m.get("params"), dict):
                seq = m["params"].get("serverSeq")
            elif isinstance(m.get("result"), dict):
                result = m["result"]
                seq = result.get("serverSeq")
                for envelope in result.get("actions") or ():
                    if isinstance(envelope, dict) and type(envelope.get("serverSeq")) is int:
                        last = max(last, envelope["serverSeq"])
            else:
                continue
            if type(seq) is int:
                last = max(last, seq)
        return last

    def _drop(self, client: _Client) -> None:
        if client.link is not None:
            client.link.close()
        client.link = None

    def _dispatch(self, client: _Client, step: Step) -> None:
        name = step.get("action")
        if type(name) is not str or name not in ACTIONS or client.version is None \
                or not is_action_known_to_version(name, client.version):
            return  # a client only sends what its version knows
        channel = self._target(client, step.get("channel"))
        text = step.get("text")
        self._count += 1
        if name == "chat/turnStarted":
            self.turns[channel] = f"turn-{self.label}-{self._count}"
        action = _action(name, text if type(text) is str else "", step.get("flag") is True,
                         self.turns.get(channel, f"turn-{self.label}-none"))
        seq = client.next_seq
        client.next_seq += 1
        self._send(client, {"jsonrpc": "2.0", "method": "dispatchAction", "params": {
            "channel": channel, "clientSeq": seq, "action": wire.unstructure(action)}})

    def _create_session(self, client: _Client, again: object = None) -> None:
        """``createSession`` of a new URI, or (``again``: a number) of one that exists,
        which the host must refuse with -32003."""
        if not self.providers:
            return
        if type(again) is int and self.sessions:
            self._request(client, "createSession", {
                "channel": self.sessions[again % len(self.sessions)],
                "provider": self.providers[0]})
            return
        self._count += 1
        session = f"ahp-session:/check-host-{self.label}-{self._count}"
        if self.cleanup is not None:
            # noted before it is asked for: an answer that never comes, or a run
            # interrupted while waiting, may still leave the session on the host
            self.cleanup.add(session)
        answer = self._request(client, "createSession", {
            "channel": session, "provider": self.providers[0]})
        if answer is not None and "result" in answer:
            self.sessions.append(session)
            self.channels.append(session)
            self._watch(session)

    def _create_chat(self, client: _Client, step: Step) -> None:
        number = step.get("session")
        if not self.sessions or type(number) is not int:
            return
        session = self.sessions[number % len(self.sessions)]
        self._count += 1
        chat = f"ahp-chat:/check-host-{self.label}-{self._count}"
        answer = self._request(client, "createChat", {"channel": session, "chat": chat})
        if answer is not None and "result" in answer:
            self.channels.append(chat)
            self._watch(chat)

    def _malformed(self, client: _Client, kind: object) -> None:
        match kind:
            case "parse":
                self._send(client, '{"jsonrpc": "2.0", "id": 1, "method"')
                self._null_answer(client)
            case "not-object":
                self._send(client, "42")
                self._null_answer(client)
            case "jsonrpc":
                # the host may answer with the id or with null (it may not read ids
                # of what is not JSON-RPC 2.0)
                request_id = client.next_id
                client.next_id += 1
                self._send(client, {"jsonrpc": "1.0", "id": request_id, "method": "ping",
                                    "params": {}})
                self._null_answer(client, also=request_id)
            case "unknown-method":
                self._request(client, "checkHost/noSuchMethod", {})
            case "bad-params":
                self._request(client, "subscribe", {"channel": 42})
            case _:
                pass

    def _null_answer(self, client: _Client, *, also: int | None = None) -> None:
        """Wait for an answer with a null id (or with ``also``)."""
        conn = client.conn
        key = json.dumps(also)
        before = self.recorder.nulls.get(conn, 0) if conn is not None else 0
        self.recorder.wait(lambda: self.recorder.nulls.get(conn or 0, 0) > before
                           or (conn, key) in self.recorder.answered
                           or conn in self.recorder.closed, self.timeout)

    # -- the end of a run ----------------------------------------------------------

    def finish(self) -> Transcript:
        """Quiesce, let fresh subscribers see every channel, close everything.

        Every live client pings (so it has all the host sent before); then, for
        each protocol version in use, a new client subscribes to every channel
        (on a host of one connection at a time, each live client subscribes to
        its channels again); then every live client pings again, which lets the
        ``state-agrees`` check compare it with those snapshots."""
        try:
            live = [c for c in self.clients if c.link is not None]
            for client in live:
                self._request(client, "ping", {})
            if self.target.many:
                versions = sorted({c.version for c in live if c.version is not None})
                for version in versions:
                    self._observe(version)
            else:
                for client in live:
                    for channel in client.subscriptions:
                        self._request(client, "subscribe", {"channel": channel})
            for client in live:
                self._request(client, "ping", {})
            if self.witness is not None and self.witness.link is not None:
                self._request(self.witness, "ping", {})
        finally:
            self.close()
        transcript = Transcript(records=self.recorder.snapshot())
        self.recorder.forget()
        return transcript

    def _observe(self, version: str) -> None:
        opened = self._open()
        if opened is None:
            return
        observer = _Client(number=-1, client_id=f"check-host-{self.label}-observer-{version}")
        observer.conn, observer.link = opened
        self._request(observer, "initialize", {
            "protocolVersions": [version], "clientId": observer.client_id,
            "initialSubscriptions": list(dict.fromkeys(self.channels))})
        observer.link.close()

    def close(self) -> None:
        """Close every connection this driver opened (idempotent)."""
        links, self._links = self._links, []
        for link in links:
            link.close()
        for client in self.clients:
            client.link = None


class Cleanup:
    """The sessions a run created on the host, until they are disposed of.

    Every URI a driver asks ``createSession`` for is noted (:meth:`add`) before
    it is sent; only those are ever disposed of, so a session of the host's
    own users is never touched.  :meth:`dispose` does it on a connection of its
    own, after the example that made the sessions was recorded and its
    connections closed: the disposal is in no transcript and changes nothing
    that is checked.  A session the host answers ``SessionNotFound`` (-32001)
    for is gone already (a ``--stdio`` host of memory only, or a refused
    ``createSession``); one it cannot be asked about (the host is gone, or does
    not answer) stays :attr:`pending`, for the next :meth:`dispose` and in the
    end for the report."""

    def __init__(self, target: Target, *, timeout: float = 5.0) -> None:
        self.target = target
        self.timeout = timeout
        self.created = 0
        """How many sessions the run asked the host for."""
        self.pending: list[str] = []
        """Sessions noted and not disposed of yet, oldest first."""
        self.refused: dict[str, str] = {}
        """Why the host refused to dispose of a pending session (its error)."""

    def add(self, session: str) -> None:
        if session not in self.pending:
            self.created += 1
            self.pending.append(session)

    def dispose(self) -> list[str]:
        """Dispose of every pending session; those still pending (bounded in time:
        the connection's, then one :attr:`timeout` for all the answers)."""
        pending = list(self.pending)
        if not pending:
            return []
        recorder = Recorder(budget=_CLEANUP_BYTES)
        try:
            link = self.target.open(0, recorder)
        except Exception:  # the host is gone, or refuses: the sessions stay pending
            return list(self.pending)
        try:
            self._ask(link, recorder, 0, "initialize", {
                "protocolVersions": list(SUPPORTED_PROTOCOL_VERSIONS),
                "clientId": f"check-host-cleanup-{uuid.uuid4().hex[:8]}",
                "initialSubscriptions": []})
            if not recorder.wait(lambda: self._answered(recorder, 0), self.timeout) \
                    or "result" not in (recorder.answer(0, "0") or {}):
                return list(self.pending)
            for number, session in enumerate(pending, 1):
                self._ask(link, recorder, number, "disposeSession", {"channel": session})
            recorder.wait(lambda: all(self._answered(recorder, n)
                                      for n in range(1, len(pending) + 1)), self.timeout)
            for number, session in enumerate(pending, 1):
                answer = recorder.answer(0, str(number))
                if answer is None:
                    continue
                error = answer.get("error")
                code = error.get("code") if isinstance(error, dict) else None
                # an answer that is no error is the host's yes, written right or not:
                # what it writes is checked elsewhere, not here
                if error is None or code == AhpErrorCode.SESSION_NOT_FOUND:
                    self.pending.remove(session)
                    self.refused.pop(session, None)
                else:
                    said = error.get("message") if isinstance(error, dict) else None
                    self.refused[session] = f"{code}: {said}" if type(said) is str \
                        else str(code)
        finally:
            link.close()
        return list(self.pending)

    @staticmethod
    def _ask(link: Link, recorder: Recorder, number: int, method: str,
             params: Mapping[str, object]) -> None:
        recorder.expect(0, str(number))
        link.send(json.dumps({"jsonrpc": "2.0", "id": number, "method": method,
                              "params": params}))

    @staticmethod
    def _answered(recorder: Recorder, number: int) -> bool:
        return (0, str(number)) in recorder.answered or 0 in recorder.closed


def run_program(target: Target, steps: Sequence[Step], *, timeout: float = 5.0,
                cleanup: Cleanup | None = None, budget: int | Budget = MAX_RECORDED_BYTES
                ) -> Transcript:
    """Run a whole program (a replay) and return its transcript.  With ``cleanup``,
    the sessions it created are disposed of once it is recorded.  A host that sends
    more than ``budget`` bytes raises :class:`TrafficLimit`."""
    driver = Driver(target, timeout=timeout, cleanup=cleanup, budget=budget)
    try:
        for step in steps:
            driver.run(step)
    except BaseException:
        driver.close()
        raise
    transcript = driver.finish()
    if cleanup is not None:
        cleanup.dispose()
    return transcript
