"""What a host must do across connections: the checks that need the host's state.

A transcript of several connections (``Record.conn``) is read in the order
its records were seen.  Each client (by ``clientId``, across its
reconnections) keeps, for every channel it holds a snapshot of, the states
that snapshot and the envelopes after it give through this library's
reducers: its *confirmed* state, as the spec's write-ahead client keeps it.
Three properties follow:

* ``state-agrees``: whenever the host hands anyone a snapshot of a channel
  (``fromSeq`` F), every client of the same protocol version that follows
  that channel must, once it is known to have received everything up to F,
  have the same state at F.  "Known to have received": it got an answer to a
  request it sent after the snapshot was seen (the transport is ordered and
  the host answers a connection's requests in turn).  A client's own
  re-subscription is compared at once.  Clock-made fields (a chat's
  ``modifiedAt``) are left out: each side's reducers stamp their own.
* ``replay-complete``: a ``reconnect`` replay holds every envelope of the
  client's channels after ``lastSeenServerSeq`` that the host had sent to
  others before the reconnect, or up to the replay's last ``serverSeq``
  (rejections, which go to their origin only, and actions the client's
  version does not know are not asked for).
* ``rejection-unapplied``: an action rejected to its origin reaches no one as
  applied.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from attrs import define, field

from .. import types as t
from .. import wire
from ..channels import STATE_TYPES, ChannelKind, channel_kind
from ..errors import ProtocolError
from ..reducers import REDUCERS
from ..types.error_codes import AhpErrorCode
from ..versions import is_action_known_to_version
from .properties import _VALIDATION, Property, Violation, _field, _id_key
from .transcript import Direction, Record, Transcript

__all__ = ["RUN_PROPERTIES"]

_NOW = 0  # a fixed clock: the fields it stamps are not compared


def _clock() -> int:
    return _NOW


_STAMPED: Mapping[ChannelKind, frozenset[str]] = {ChannelKind.CHAT: frozenset({"modifiedAt"})}
"""Fields each side's reducers stamp from their own clock."""


def _comparable(kind: ChannelKind, state: object) -> object:
    encoded = wire.unstructure(state)
    drop = _STAMPED.get(kind)
    if drop and isinstance(encoded, dict):
        return {k: v for k, v in encoded.items() if k not in drop}
    return encoded


@define
class _Track:
    """One channel as one client follows it: (serverSeq, state) from its snapshot on."""

    kind: ChannelKind
    seqs: list[int]
    states: list[Any]

    @classmethod
    def of(cls, kind: ChannelKind, seq: int, state: object) -> _Track:
        return cls(kind=kind, seqs=[seq], states=[state])

    @property
    def last(self) -> int:
        return self.seqs[-1]

    def add(self, seq: int, state: object) -> None:
        self.seqs.append(seq)
        self.states.append(state)

    def at(self, seq: int) -> Any | None:
        """The state after everything up to ``seq`` (``None``: followed from later)."""
        found = bisect_right(self.seqs, seq)
        return self.states[found - 1] if found else None


@define
class _Client:
    client_id: str
    version: str | None = None
    tracks: dict[str, _Track] = field(factory=dict)
    conn: int | None = None


@define
class _Pending:
    """A snapshot another client must agree with once it has caught up."""

    channel: str
    seq: int
    state: object
    seen_at: int


class _Run:
    """One pass over a transcript, building each client's confirmed state."""

    def __init__(self) -> None:
        self.clients: dict[str, _Client] = {}
        self.by_conn: dict[int, _Client] = {}
        self.waiting: dict[str, list[_Pending]] = {}
        self.violations: list[Violation] = []

    def _violation(self, index: int, message: str) -> None:
        self.violations.append(Violation(prop="state-agrees", index=index, message=message))

    def _client(self, conn: int, client_id: object) -> _Client | None:
        if type(client_id) is not str:
            return None
        client = self.clients.setdefault(client_id, _Client(client_id=client_id))
        client.conn = conn
        self.by_conn[conn] = client
        return client

    def _decode(self, kind: ChannelKind, state: object, index: int) -> object | None:
        try:
            decoded: object = wire.structure(state, STATE_TYPES[kind], path=("state",))
        except ProtocolError as e:
            self._violation(index, f"a snapshot that does not decode: {e}")
            return None
        return decoded

    def snapshot(self, client: _Client, snap: object, index: int) -> None:
        if not isinstance(snap, Mapping):
            return
        channel, seq = snap.get("resource"), snap.get("fromSeq")
        kind = channel_kind(channel) if type(channel) is str else None
        if kind is None or kind not in STATE_TYPES or type(seq) is not int:
            return
        assert isinstance(channel, str)
        state = self._decode(kind, snap.get("state"), index)
        if state is None:
            return
        seen = _comparable(kind, state)
        own = client.tracks.get(channel)
        if own is not None:
            self._compare(client, own, channel, seq=seq, seen=seen, index=index)
        for other in self.clients.values():
            if other is not client and other.version == client.version \
                    and channel in other.tracks:
                self.waiting.setdefault(other.client_id, []).append(
                    _Pending(channel=channel, seq=seq, state=seen, seen_at=index))
        client.tracks[channel] = _Track.of(kind, seq, state)

    def _compare(self, client: _Client, track: _Track, channel: str, *, seq: int,
                 seen: object, index: int) -> None:
        mine = track.at(seq)
        if mine is None:
            return
        if _comparable(track.kind, mine) != seen:
            self._violation(index, (
                f"{channel} at serverSeq {seq}: client {client.client_id!r}'s confirmed "
                "state (its snapshot and the envelopes since, through the reducers) is not "
                "the snapshot the host gave at that serverSeq"))

    def envelope(self, client: _Client, envelope: object, index: int) -> None:
        if not isinstance(envelope, Mapping) or "rejectionReason" in envelope:
            return
        channel, seq = envelope.get("channel"), envelope.get("serverSeq")
        track = client.tracks.get(channel) if type(channel) is str else None
        if track is None or type(seq) is not int or seq <= track.last:
            return
        try:
            action = wire.structure(envelope.get("action"), t.StateAction, path=("action",))
        except ProtocolError as e:
            self._violation(index, f"an action that does not decode: {e}")
            return
        reducer: Callable[..., Any] = REDUCERS[track.kind]
        track.add(seq, reducer(track.states[-1], action, now=_clock))

    def caught_up(self, client: _Client, sent_at: int, index: int) -> None:
        """``client`` has everything the host sent before ``sent_at``."""
        waiting = self.waiting.get(client.client_id)
        if not waiting:
            return
        still = []
        for pending in waiting:
            if pending.seen_at >= sent_at:
                still.append(pending)
                continue
            track = client.tracks.get(pending.channel)
            if track is not None:
                self._compare(client, track, pending.channel, seq=pending.seq,
                              seen=pending.state, index=index)
        self.waiting[client.client_id] = still


def _answered(run: _Run, client: _Client | None, request: Mapping[str, object],
              message: Mapping[str, object], index: int) -> None:
    result = message.get("result")
    if not isinstance(result, Mapping) or client is None:
        return
    method = request.get("method")
    if method == "initialize":
        version = result.get("protocolVersion")
        client.version = version if type(version) is str else None
        client.tracks.clear()
        for snap in result.get("snapshots") or ():
            run.snapshot(client, snap, index)
    elif method == "subscribe":
        run.snapshot(client, result.get("snapshot"), index)
    elif method == "reconnect":
        if result.get("type") == "snapshot":
            client.tracks.clear()
            for snap in result.get("snapshots") or ():
                run.snapshot(client, snap, index)
        else:
            for envelope in result.get("actions") or ():
                run.envelope(client, envelope, index)
            for gone in result.get("missing") or ():
                if type(gone) is str:
                    client.tracks.pop(gone, None)


def _walk_run(transcript: Transcript) -> Iterator[
        tuple[int, Record, Mapping[str, object], tuple[int, Mapping[str, object]] | None]]:
    """Each message that is a JSON object, with, for a host's answer, the request it
    answers on its connection and where that was sent (``None`` for anything else):
    :func:`~agenthost_protocol.hostcheck.properties._walk` across connections."""
    asked: dict[tuple[int, tuple[str, object]], tuple[int, Mapping[str, object]]] = {}
    for index, record in enumerate(transcript):
        message = record.message
        if not isinstance(message, Mapping):
            continue
        key = _id_key(message.get("id"))
        answered = None
        if record.sender is Direction.CLIENT:
            if key is not None and type(message.get("method")) is str:
                asked[(record.conn, key)] = (index, message)
        elif key is not None and "method" not in message:
            answered = asked.pop((record.conn, key), None)
        yield index, record, message, answered


def _state_agrees(transcript: Transcript) -> Iterator[Violation]:
    run = _Run()
    for index, record, message, answered in _walk_run(transcript):
        conn = record.conn
        if record.sender is Direction.CLIENT:
            method = message.get("method")
            if method in ("initialize", "reconnect"):
                run._client(conn, _field(message, "clientId"))
            elif method == "unsubscribe":
                client = run.by_conn.get(conn)
                channel = _field(message, "channel")
                if client is not None and type(channel) is str:
                    client.tracks.pop(channel, None)
            continue
        client = run.by_conn.get(conn)
        if message.get("method") == "action":
            if client is not None:
                run.envelope(client, message.get("params"), index)
            continue
        if answered is None:
            continue
        sent_at, request = answered
        _answered(run, client, request, message, index)
        if client is not None and client.conn == conn:
            run.caught_up(client, sent_at, index)
    yield from run.violations


def _seq(envelope: object) -> int | None:
    seq = envelope.get("serverSeq") if isinstance(envelope, Mapping) else None
    return seq if type(seq) is int else None


def _replay_complete(transcript: Transcript) -> Iterator[Violation]:
    """Each replay against what the other connections were sent (see the module doc)."""
    name = "replay-complete"
    client_of: dict[int, str] = {}
    versions: dict[str, str] = {}
    seen: list[tuple[int, int, str, Mapping[str, object]]] = []  # index, conn, channel, env
    for index, record, message, request in _walk_run(transcript):
        if record.sender is Direction.CLIENT:
            if message.get("method") in ("initialize", "reconnect"):
                client_id = _field(message, "clientId")
                if type(client_id) is str:
                    client_of[record.conn] = client_id
            continue
        params = message.get("params")
        if message.get("method") == "action" and isinstance(params, Mapping):
            if "rejectionReason" not in params and type(params.get("channel")) is str:
                seen.append((index, record.conn, params["channel"], params))
            continue
        result = message.get("result")
        if request is None or not isinstance(result, Mapping):
            continue
        sent_at, sent = request
        client_id = client_of.get(record.conn)
        if sent.get("method") == "initialize" and client_id is not None:
            version = result.get("protocolVersion")
            if type(version) is str:
                versions[client_id] = version
        if sent.get("method") != "reconnect" or result.get("type") != "replay":
            continue
        last = _field(sent, "lastSeenServerSeq")
        channels = _field(sent, "subscriptions")
        actions = result.get("actions")
        if type(last) is not int or not isinstance(channels, list) \
                or not isinstance(actions, list):
            continue
        missing = result.get("missing")
        wanted = set(channels) - set(missing if isinstance(missing, list) else ())
        replayed = {seq for seq in map(_seq, actions) if seq is not None}
        bound = max(replayed, default=last)
        version = versions.get(client_id) if client_id is not None else None
        for at, conn, channel, envelope in seen:
            seq = _seq(envelope)
            if conn == record.conn or channel not in wanted or seq is None or seq <= last \
                    or seq in replayed or (at > sent_at and seq > bound):
                continue
            action = envelope.get("action")
            kind = action.get("type") if isinstance(action, Mapping) else None
            if version is not None and type(kind) is str \
                    and not is_action_known_to_version(kind, version):
                continue
            yield Violation(prop=name, index=index, message=(
                f"the replay after lastSeenServerSeq {last} leaves out serverSeq {seq} on "
                f"{channel} (message {at}, sent to another client)"))
            replayed.add(seq)  # one report an envelope, however many saw it


def _rejection_unapplied(transcript: Transcript) -> Iterator[Violation]:
    name = "rejection-unapplied"
    rejected: set[tuple[object, object]] = set()
    applied: dict[tuple[object, object], int] = {}
    for index, record in enumerate(transcript):
        message = record.message
        if record.sender is not Direction.HOST or not isinstance(message, Mapping) \
                or message.get("method") != "action":
            continue
        params = message.get("params")
        if not isinstance(params, Mapping) or not isinstance(params.get("origin"), Mapping):
            continue
        origin = params["origin"]
        key = (_id_key(origin.get("clientId")), origin.get("clientSeq"))
        if "rejectionReason" in params:
            if key in applied:
                yield Violation(prop=name, index=index, message=(
                    f"clientSeq {key[1]!r} of {origin.get('clientId')!r} is rejected here "
                    f"and was applied at message {applied[key]}"))
            rejected.add(key)
        else:
            if key in rejected:
                yield Violation(prop=name, index=index, message=(
                    f"clientSeq {key[1]!r} of {origin.get('clientId')!r} was rejected, and "
                    "is sent here as applied"))
            applied.setdefault(key, index)


def _session_exists(transcript: Transcript) -> Iterator[Violation]:
    name = "session-exists"
    created: set[object] = set()
    for index, _, message, answered in _walk_run(transcript):
        if answered is None or answered[1].get("method") != "createSession":
            continue
        request = answered[1]
        channel = _field(request, "channel")
        error = message.get("error")
        if channel in created:
            code = error.get("code") if isinstance(error, Mapping) else "a result"
            if code != AhpErrorCode.SESSION_ALREADY_EXISTS:
                yield Violation(prop=name, index=index, message=(
                    f"createSession of {channel!r}, which exists, answered {code!r}: "
                    "SessionAlreadyExists (-32003) is the answer"))
        elif "result" in message:
            created.add(channel)


# state-agrees comes last: it catches most faults, after the property that names them
RUN_PROPERTIES: tuple[Property, ...] = (
    Property(name="replay-complete", section="Connection Lifecycle: Reconnection",
             summary="a reconnect's replay holds every envelope of the client's channels "
                     "after lastSeenServerSeq", check=_replay_complete, across=True),
    Property(name="rejection-unapplied", section=_VALIDATION,
             summary="an action rejected to its origin reaches no one as applied",
             check=_rejection_unapplied, across=True),
    Property(name="session-exists", section="Session Channel: Creation",
             summary="createSession of a URI in use is refused with SessionAlreadyExists "
                     "(-32003)", check=_session_exists, across=True),
    Property(name="state-agrees", section="Channels & Subscriptions: Subscribe",
             summary="every client's confirmed state equals the host's snapshot of the same "
                     "serverSeq, once the client has caught up", check=_state_agrees,
             across=True),
)
