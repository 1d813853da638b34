"""What a host must do, checked on one connection's transcript.

Each :class:`Property` names the section of the AHP specification it checks
and is a pure function of a :class:`~agenthost_protocol.hostcheck.transcript.Transcript`
that yields a :class:`Violation` for each place the host broke it.  These
are the checks a single connection can make without knowing the host's
state; the ones that need state (a client's confirmed state against a fresh
snapshot, replay completeness) build on them (issue 22, under way).

JSON-RPC ids are compared as JSON sees them: ``1`` and ``"1"`` differ, and so
do ``1`` and ``true``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TypeAlias

from attrs import frozen

from .. import wire
from ..errors import ProtocolError
from ..methods import Direction as MethodDirection
from ..methods import request_method
from ..types.error_codes import AhpErrorCode, JsonRpcErrorCode
from ..versions import (
    PROTOCOL_VERSION,
    compare_protocol_versions,
    is_action_known_to_version,
    is_notification_known_to_version,
)
from .transcript import Direction, Transcript

__all__ = ["CONNECTION_PROPERTIES", "Property", "Violation"]

_VALIDATION = "Session Channel: Server Validation of Client Actions"


@frozen(kw_only=True)
class Violation:
    """One place a host broke a property: the record's index in the transcript."""

    prop: str
    index: int
    message: str

    def __str__(self) -> str:
        return f"{self.prop} at message {self.index}: {self.message}"


Check: TypeAlias = Callable[[Transcript], Iterator[Violation]]


@frozen(kw_only=True)
class Property:
    """A rule of the spec a host's traffic must keep."""

    name: str
    section: str
    """Where the AHP specification says it: the page's title, and the heading of the
    section in it ("Overview: Requests").  The specification is upstream, not a file
    of this repository: it is named, not linked."""
    summary: str
    check: Check
    across: bool = False
    """Checks a transcript of all the connections at once (``False``: each on its own)."""


def _id_key(value: object) -> tuple[str, object] | None:
    """An id as JSON sees it (``None``: not a valid JSON-RPC id)."""
    if type(value) is str or type(value) is int:
        return (type(value).__name__, value)
    return None


def _from_host(transcript: Transcript) -> Iterator[tuple[int, Mapping[str, object]]]:
    for index, record in enumerate(transcript):
        if record.sender is Direction.HOST and isinstance(record.message, Mapping):
            yield index, record.message


def _walk(transcript: Transcript) -> Iterator[
        tuple[int, Direction, Mapping[str, object], Mapping[str, object] | None]]:
    """Each message that is a JSON object, with, for a host's response, the client's
    request it answers (by id; ``None`` for anything else)."""
    asked: dict[tuple[str, object], Mapping[str, object]] = {}
    for index, record in enumerate(transcript):
        message = record.message
        if not isinstance(message, Mapping):
            continue
        key = _id_key(message.get("id"))
        request = None
        if record.sender is Direction.CLIENT:
            if key is not None and type(message.get("method")) is str:
                asked[key] = message
        elif key is not None and "method" not in message:
            request = asked.pop(key, None)
        yield index, record.sender, message, request


def _walk_all(transcript: Transcript) -> Iterator[
        tuple[int, Direction, object, Mapping[str, object] | None]]:
    """:func:`_walk`, with the messages that are not JSON objects too."""
    walked = _walk(transcript)
    step = next(walked, None)
    for index, record in enumerate(transcript):
        if step is not None and step[0] == index:
            yield step
            step = next(walked, None)
        else:
            yield index, record.sender, record.message, None


def _field(message: Mapping[str, object], name: str) -> object:
    """``message["params"][name]``, or ``None`` where there is none."""
    params = message.get("params")
    return params.get(name) if isinstance(params, Mapping) else None


def _asked(request: Mapping[str, object] | None, method: str) -> bool:
    return request is not None and request.get("method") == method


def _is_response(message: Mapping[str, object]) -> bool:
    return "method" not in message and ("result" in message or "error" in message
                                        or "id" in message)


def _one_response_per_request(transcript: Transcript) -> Iterator[Violation]:
    name = "one-response-per-request"
    pending: dict[tuple[str, object], int] = {}  # request id -> where it was sent
    answered: set[tuple[str, object]] = set()
    loose: set[tuple[str, object]] = set()
    for index, record in enumerate(transcript):
        message = record.message
        if not isinstance(message, Mapping):
            continue
        if record.sender is Direction.CLIENT:
            key = _id_key(message.get("id"))
            if key is not None and "method" in message:
                if message.get("jsonrpc") == "2.0":
                    pending[key] = index
                else:
                    loose.add(key)  # not JSON-RPC 2.0: answered with its id or null
            continue
        if not _is_response(message):
            continue
        raw_id = message.get("id")
        if raw_id is None:
            error = message.get("error")
            code = error.get("code") if isinstance(error, Mapping) else None
            if code not in (-32700, -32600):
                yield Violation(prop=name, index=index, message=(
                    "a response with a null id is only for a request that could not be "
                    f"read (-32700, -32600), not {code!r}"))
            continue
        key = _id_key(raw_id)
        if key in answered:
            yield Violation(prop=name, index=index,
                            message=f"request {raw_id!r} answered twice")
        elif key in loose:
            loose.discard(key)
            answered.add(key)
        elif key is None or key not in pending:
            yield Violation(prop=name, index=index, message=(
                f"a response with id {raw_id!r}, which no request of the client had "
                "(the id must be echoed exactly, its JSON type too)"))
        else:
            del pending[key]
            answered.add(key)
    for key, at in pending.items():
        yield Violation(prop=name, index=at, message=(
            f"request {key[1]!r} was never answered (by the end of the connection)"))


def _well_formed_response(transcript: Transcript) -> Iterator[Violation]:
    name = "well-formed-response"
    for index, message in _from_host(transcript):
        if not _is_response(message):
            continue
        if message.get("jsonrpc") != "2.0":
            yield Violation(prop=name, index=index, message='"jsonrpc" is not "2.0"')
        has_result, has_error = "result" in message, "error" in message
        if has_result == has_error:
            yield Violation(prop=name, index=index, message=(
                'a response has "result" or "error", exactly one of them'
                + (' ("result": null must be written, not left out)' if not has_result
                   else "")))


def _expected_code(request: object) -> int | None:
    """The code JSON-RPC fixes for a request that is wrong as a message (``None``: any)."""
    if isinstance(request, str):
        return JsonRpcErrorCode.PARSE_ERROR
    if not isinstance(request, Mapping) or request.get("jsonrpc") != "2.0" \
            or type(request.get("method")) is not str:
        return JsonRpcErrorCode.INVALID_REQUEST
    method = request_method(str(request["method"]), MethodDirection.CLIENT_TO_SERVER)
    if method is None:
        return JsonRpcErrorCode.METHOD_NOT_FOUND
    try:
        wire.structure(request.get("params", {}), method.params)
    except ProtocolError:
        return JsonRpcErrorCode.INVALID_PARAMS
    return None


_UNREAD = (JsonRpcErrorCode.PARSE_ERROR, JsonRpcErrorCode.INVALID_REQUEST)


def _error_codes(transcript: Transcript) -> Iterator[Violation]:
    name = "error-codes"
    # what the client sent that JSON-RPC refuses before reading an id, in order: a
    # null-id error answers the first of them (one with an id may be answered by it)
    unread: list[object] = []
    for index, sender, message, request in _walk_all(transcript):
        if sender is Direction.CLIENT:
            if _expected_code(message) in _UNREAD:
                unread.append(message)
            continue
        if not isinstance(message, Mapping) or "method" in message:
            continue
        error = message.get("error")
        expected = None
        if request is not None:
            expected = _expected_code(request)
            unread = [m for m in unread if m is not request]
        elif message.get("id") is None and unread:
            expected = _expected_code(unread.pop(0))
        if expected is not None and (not isinstance(error, Mapping)
                                     or error.get("code") != expected):
            got = error.get("code") if isinstance(error, Mapping) else "a result"
            yield Violation(prop=name, index=index, message=(
                f"answered {got!r} where JSON-RPC asks for {int(expected)} "
                f"({JsonRpcErrorCode(expected).name})"))
        if error is None:
            continue
        if not isinstance(error, Mapping):
            yield Violation(prop=name, index=index, message='"error" is not an object')
            continue
        code = error.get("code")
        if type(code) is not int:
            yield Violation(prop=name, index=index,
                            message=f"the error code {code!r} is not an integer")
        if type(error.get("message")) is not str:
            yield Violation(prop=name, index=index, message="the error has no message string")
        if code == AhpErrorCode.UNSUPPORTED_PROTOCOL_VERSION:
            data = error.get("data")
            versions = data.get("supportedVersions") if isinstance(data, Mapping) else None
            if not (isinstance(versions, list) and versions
                    and all(type(v) is str for v in versions)):
                yield Violation(prop=name, index=index, message=(
                    "-32005 (UnsupportedProtocolVersion) must carry "
                    "data.supportedVersions, the versions the host speaks"))


def _server_seq_increasing(transcript: Transcript) -> Iterator[Violation]:
    name = "server-seq-increasing"
    floor: int | None = None
    for index, sender, message, request in _walk(transcript):
        if sender is Direction.CLIENT:
            continue
        if _asked(request, "initialize"):
            result = message.get("result")
            seq = result.get("serverSeq") if isinstance(result, Mapping) else None
            if type(seq) is int:
                # envelopes after the handshake come after the state it gave
                floor = seq
            continue
        if message.get("method") != "action":
            continue
        seq = _field(message, "serverSeq")
        if type(seq) is not int or seq < 1:
            yield Violation(prop=name, index=index,
                            message=f"serverSeq {seq!r} is not a positive integer")
            continue
        if floor is not None and seq <= floor:
            yield Violation(prop=name, index=index, message=(
                f"serverSeq {seq} after {floor}: it must grow on a connection"))
        floor = seq if floor is None else max(floor, seq)


def _origins(transcript: Transcript) -> Iterator[Violation]:
    name = "echo-origin"
    client_id: object = None
    dispatched: dict[int, object] = {}
    echoed: set[int] = set()
    for index, record in enumerate(transcript):
        message = record.message
        if not isinstance(message, Mapping):
            continue
        params = message.get("params")
        if not isinstance(params, Mapping):
            continue
        method = message.get("method")
        if record.sender is Direction.CLIENT:
            if method in ("initialize", "reconnect"):
                client_id = params.get("clientId")
            elif method == "dispatchAction" and type(params.get("clientSeq")) is int:
                dispatched[params["clientSeq"]] = params.get("channel")
            continue
        if method != "action":
            continue
        origin = params.get("origin")
        rejected = "rejectionReason" in params
        if origin is None:
            if rejected:
                yield Violation(prop=name, index=index, message=(
                    "a rejection without an origin: a rejection is the echo of a "
                    "client's action and names it"))
            continue
        if not isinstance(origin, Mapping):
            yield Violation(prop=name, index=index, message="origin is not an object")
            continue
        if rejected and type(params.get("rejectionReason")) is not str:
            yield Violation(prop=name, index=index, message="rejectionReason is not a string")
        if origin.get("clientId") != client_id or client_id is None:
            if rejected:
                yield Violation(prop=name, index=index, message=(
                    "a rejection of another client's action: rejections go to the "
                    "client that dispatched it"))
            continue
        seq = origin.get("clientSeq")
        if type(seq) is not int or seq not in dispatched:
            yield Violation(prop=name, index=index, message=(
                f"origin clientSeq {seq!r}: this client dispatched no such action"))
        elif seq in echoed:
            yield Violation(prop=name, index=index,
                            message=f"clientSeq {seq} echoed twice")
        else:
            echoed.add(seq)
            if params.get("channel") != dispatched[seq]:
                yield Violation(prop=name, index=index, message=(
                    f"clientSeq {seq} was dispatched to {dispatched[seq]!r}, echoed on "
                    f"{params.get('channel')!r}"))


def _echo_complete(transcript: Transcript) -> Iterator[Violation]:
    name = "echo-complete"
    client_id: object = None
    followed: set[str] = set()  # channels this connection holds a snapshot of
    waiting: dict[int, int] = {}  # clientSeq -> index of its dispatch
    due: dict[int, int] = {}  # clientSeq -> index: a later request was answered
    asked: dict[tuple[str, object], list[int]] = {}
    for index, sender, message, request in _walk(transcript):
        method = message.get("method")
        if sender is Direction.CLIENT:
            if method in ("initialize", "reconnect"):
                client_id = _field(message, "clientId")
            elif method == "unsubscribe":
                followed.discard(str(_field(message, "channel")))
            elif method == "dispatchAction":
                seq = _field(message, "clientSeq")
                if type(seq) is int and _field(message, "channel") in followed:
                    waiting[seq] = index
            key = _id_key(message.get("id"))
            if key is not None and type(method) is str:
                asked[key] = list(waiting)
            continue
        if method == "action":
            origin = _field(message, "origin")
            if isinstance(origin, Mapping) and origin.get("clientId") == client_id:
                seq = origin.get("clientSeq")
                if type(seq) is int:
                    waiting.pop(seq, None)
                    due.pop(seq, None)
            continue
        if request is None:
            continue
        for seq in asked.pop(_id_key(request.get("id")) or ("", None), ()):
            if seq in waiting:
                due.setdefault(seq, waiting[seq])
        result = message.get("result")
        if not isinstance(result, Mapping):
            continue
        if request.get("method") == "subscribe":
            snapshot = result.get("snapshot")
            if isinstance(snapshot, Mapping) and type(snapshot.get("resource")) is str:
                followed.add(snapshot["resource"])
        for snapshot in result.get("snapshots") or ():
            if isinstance(snapshot, Mapping) and type(snapshot.get("resource")) is str:
                followed.add(snapshot["resource"])
    for seq, index in sorted(due.items(), key=lambda item: item[1]):
        yield Violation(prop=name, index=index, message=(
            f"clientSeq {seq}, dispatched to a channel the client follows, was never "
            "echoed (applied or rejected), though a request sent after it was answered"))


def _negotiated(answer: Mapping[str, object]) -> str | None:
    """The version an ``initialize`` answer settled on, when this library can judge it
    (``None``: a version newer than the ones it knows, or none)."""
    result = answer.get("result")
    version = result.get("protocolVersion") if isinstance(result, Mapping) else None
    if type(version) is not str:
        return None
    try:
        return version if compare_protocol_versions(version, PROTOCOL_VERSION) <= 0 else None
    except ValueError:
        return None


def _versions_known(transcript: Transcript) -> Iterator[Violation]:
    name = "version-filter"
    version: str | None = None
    for index, sender, message, request in _walk(transcript):
        if sender is Direction.CLIENT:
            continue
        if _asked(request, "initialize"):
            assert request is not None
            version = _negotiated(message) or version
            chosen = message.get("result")
            chosen = chosen.get("protocolVersion") if isinstance(chosen, Mapping) else None
            offered = _field(request, "protocolVersions")
            if chosen is not None and isinstance(offered, list) and chosen not in offered:
                yield Violation(prop=name, index=index, message=(
                    f"protocolVersion {chosen!r} is not one the client offered {offered!r}"))
            continue
        method = message.get("method")
        if version is None or type(method) is not str or "id" in message:
            continue
        if method != "action":
            if not is_notification_known_to_version(method, version):
                yield Violation(prop=name, index=index, message=(
                    f"notification {method!r} sent to a client of {version}, which does "
                    "not know it"))
            continue
        params = message.get("params")
        action = params.get("action") if isinstance(params, Mapping) else None
        kind = action.get("type") if isinstance(action, Mapping) else None
        if type(kind) is str and not is_action_known_to_version(kind, version):
            yield Violation(prop=name, index=index, message=(
                f"action {kind!r} sent to a client of {version}, which does not know it"))


def _replay_in_order(transcript: Transcript) -> Iterator[Violation]:
    name = "replay-in-order"
    floor: int | None = None
    for index, sender, message, request in _walk(transcript):
        if sender is Direction.CLIENT:
            continue
        if _asked(request, "reconnect"):
            assert request is not None
            asked = request.get("params")
            last = asked.get("lastSeenServerSeq") if isinstance(asked, Mapping) else None
            result = message.get("result")
            actions = result.get("actions") if isinstance(result, Mapping) else None
            if type(last) is not int or not isinstance(actions, list):
                continue  # refused, or answered with snapshots
            for envelope in actions:
                seq = envelope.get("serverSeq") if isinstance(envelope, Mapping) else None
                if type(seq) is not int or seq <= last:
                    yield Violation(prop=name, index=index, message=(
                        f"replayed serverSeq {seq!r} after {last}: a replay gives what "
                        "came after lastSeenServerSeq, in order"))
                else:
                    last = seq
            floor = last
            continue
        if floor is not None and message.get("method") == "action":
            seq = _field(message, "serverSeq")
            if type(seq) is int and seq <= floor:
                yield Violation(prop=name, index=index, message=(
                    f"serverSeq {seq} after a replay that ended at {floor}"))
            floor = None


CONNECTION_PROPERTIES: tuple[Property, ...] = (
    Property(name="one-response-per-request", section="Overview: Requests",
             summary="every request is answered once, with its id echoed exactly",
             check=_one_response_per_request),
    Property(name="well-formed-response", section="Overview: Responses",
             summary='a response is "jsonrpc": "2.0" with "result" (null written) or '
                     '"error"', check=_well_formed_response),
    Property(name="error-codes", section="Versioning: Negotiation",
             summary="an error has an integer code and a message; -32005 carries "
                     "data.supportedVersions", check=_error_codes),
    Property(name="server-seq-increasing",
             section="Channels & Subscriptions: Action Delivery",
             summary="every envelope's serverSeq is a positive integer, growing on the "
                     "connection from the handshake's", check=_server_seq_increasing),
    Property(name="echo-origin", section=_VALIDATION,
             summary="an envelope naming this client's origin echoes an action it "
                     "dispatched, once, on its channel; a rejection carries origin and "
                     "rejectionReason", check=_origins),
    Property(name="echo-complete", section=_VALIDATION,
             summary="every action the client dispatches to a channel it follows is "
                     "echoed to it, applied or rejected, with its origin",
             check=_echo_complete),
    Property(name="version-filter", section="Versioning: Forward Compatibility",
             summary="no action or notification reaches a client whose negotiated version "
                     "does not know it", check=_versions_known),
    Property(name="replay-in-order", section="Connection Lifecycle: Reconnection",
             summary="a reconnect's replay gives what came after lastSeenServerSeq, in "
                     "order, and the envelopes after it go on from its end",
             check=_replay_in_order),
)
"""The properties one connection's traffic can show, in the order they are reported."""
