"""Issue 22 (begun): the transcript properties hold on our host and catch each fault.

The clean transcript is one connection of our sans-I/O host, driven with raw
JSON-RPC: a handshake, subscriptions, an accepted and a rejected action, a
ping, an unreadable message and an unknown method, then another connection
refused for its version.  Each fault is a small edit of that transcript, as
a broken host would have sent it; the property it breaks must say so, and
only the properties it breaks.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from agenthost_protocol import types as t
from agenthost_protocol.host import Host, HostConnection
from agenthost_protocol.hostcheck import PROPERTIES, Direction, Record, Transcript, check
from agenthost_protocol.hostcheck.transcript import TranscriptError

NOW = 1_767_225_600_000
SESSION = "ahp-session:/s"
CHAT = "ahp-chat:/s/c"


def _record(host: Host, messages: list[bytes], conn: HostConnection | None = None
            ) -> list[Record]:
    conn = host.connect() if conn is None else conn
    records = []
    for data in messages:
        try:
            sent: object = json.loads(data)
        except ValueError:
            sent = data.decode()  # kept as the string that could not be read
        records.append(Record(sender=Direction.CLIENT, message=sent))
        conn.receive_data(data)
        records += [Record(sender=Direction.HOST, message=json.loads(out))
                    for out in conn.data_to_send()]
    return records


def _msg(**fields: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", **fields}).encode()


@pytest.fixture(scope="module")
def clean() -> Transcript:
    host = Host(clock=lambda: NOW, root=t.RootState(agents=()))
    host.create_session(SESSION, provider="demo", title="s")
    host.ready_session(SESSION, default_chat=CHAT)
    records = _record(host, [
        _msg(id=1, method="initialize", params={"protocolVersions": ["0.7.0"], "clientId": "me",
                                                "initialSubscriptions": [SESSION]}),
        _msg(id="two", method="subscribe", params={"channel": CHAT}),
        _msg(method="dispatchAction", params={"channel": SESSION, "clientSeq": 1, "action": {
            "type": "session/titleChanged", "title": "new"}}),
        # another channel's action: rejected
        _msg(method="dispatchAction", params={"channel": CHAT, "clientSeq": 2, "action": {
            "type": "session/titleChanged", "title": "x"}}),
        _msg(id=3, method="ping", params={}),
        b'{"jsonrpc": "2.0", "id": 4, "method"',
        _msg(id=5, method="noSuchMethod", params={}),
    ])
    return Transcript(records=records)


@pytest.fixture(scope="module")
def refused() -> Transcript:
    """A connection refused for its version (a transcript of its own)."""
    host = Host(clock=lambda: NOW, root=t.RootState(agents=()))
    return Transcript(records=_record(host, [_msg(id=1, method="initialize", params={
        "protocolVersions": ["9.0.0"], "clientId": "old"})]))


@pytest.fixture(scope="module")
def reconnected() -> Transcript:
    """A client of 0.5.1 that reconnects on a new connection and is replayed two actions."""
    host = Host(clock=lambda: NOW, root=t.RootState(agents=()))
    host.create_session(SESSION, provider="demo", title="s")
    host.ready_session(SESSION, default_chat=CHAT)
    first = host.connect()
    first.receive_data(_msg(id=1, method="initialize", params={
        "protocolVersions": ["0.5.1"], "clientId": "me", "initialSubscriptions": [SESSION]}))
    seen = json.loads(first.data_to_send()[0])["result"]["serverSeq"]
    first.connection_lost()
    for title in ("one", "two"):
        host.dispatch(SESSION, t.SessionTitleChangedAction(title=title))
    conn = host.connect()
    records = _record(host, [_msg(id=1, method="reconnect", params={
        "clientId": "me", "lastSeenServerSeq": seen, "subscriptions": [SESSION]})], conn)
    host.dispatch(SESSION, t.SessionTitleChangedAction(title="three"))
    # a 0.7.0 action the host must not send to a client of 0.5.1
    host.dispatch(SESSION, t.SessionWorkingDirectorySetAction(directory="file:///w"))
    records += [Record(sender=Direction.HOST, message=json.loads(out))
                for out in conn.data_to_send()]
    return Transcript(records=records)


def _violated(transcript: Transcript) -> set[str]:
    return {name for name, found in check(transcript).items() if found}


def test_our_host_keeps_every_property(clean: Transcript, refused: Transcript) -> None:
    for transcript in (clean, refused):
        assert check(transcript) == {prop.name: () for prop in PROPERTIES}
    kinds = [r.message.get("method") or ("error" if "error" in r.message else "result")
             for r in clean if r.sender is Direction.HOST and isinstance(r.message, dict)]
    # what the faults below edit is there to be edited
    assert kinds.count("action") >= 2 and kinds.count("error") >= 2


def _edit(clean: Transcript, change: Any) -> Transcript:
    records = [Record(sender=r.sender, message=copy.deepcopy(r.message)) for r in clean]
    change(records)
    return Transcript(records=records)


def _find(records: list[Record], pred: Any) -> int:
    return next(i for i, r in enumerate(records)
                if r.sender is Direction.HOST and isinstance(r.message, dict) and pred(r.message))


def _ping_answer(m: dict[str, Any]) -> bool:
    return m.get("id") == 3


def _envelope(rejected: bool) -> Any:
    return lambda m: m.get("method") == "action" and ("rejectionReason" in m["params"]) is rejected


def _duplicate_answer(records: list[Record]) -> None:
    i = _find(records, _ping_answer)
    records.insert(i + 1, records[i])


def _id_as_string(records: list[Record]) -> None:
    records[_find(records, _ping_answer)].message["id"] = "3"  # type: ignore[index]


def _result_left_out(records: list[Record]) -> None:
    del records[_find(records, _ping_answer)].message["result"]  # type: ignore[attr-defined]


def _no_supported_versions(records: list[Record]) -> None:
    i = _find(records, lambda m: m.get("error", {}).get("code") == -32005)
    del records[i].message["error"]["data"]  # type: ignore[index]


def _reused_seq(records: list[Record]) -> None:
    accepted, rejected = _find(records, _envelope(False)), _find(records, _envelope(True))
    seq = records[accepted].message["params"]["serverSeq"]  # type: ignore[index]
    records[rejected].message["params"]["serverSeq"] = seq  # type: ignore[index]


def _rejection_without_origin(records: list[Record]) -> None:
    del records[_find(records, _envelope(True))].message["params"]["origin"]  # type: ignore[index]


def _invented_origin(records: list[Record]) -> None:
    i = _find(records, _envelope(False))
    records[i].message["params"]["origin"]["clientSeq"] = 99  # type: ignore[index]


def _echo_on_another_channel(records: list[Record]) -> None:
    records[_find(records, _envelope(False))].message["params"]["channel"] = CHAT  # type: ignore[index]


def _float_code(records: list[Record]) -> None:
    i = _find(records, lambda m: m.get("id") == 5)
    records[i].message["error"]["code"] = -32601.0  # type: ignore[index]


def _null_id_for_a_readable_request(records: list[Record]) -> None:
    records[_find(records, lambda m: m.get("id") == 5)].message["id"] = None  # type: ignore[index]


@pytest.mark.parametrize(("fault", "broken"), [
    (_duplicate_answer, {"one-response-per-request"}),
    (_id_as_string, {"one-response-per-request"}),
    (_result_left_out, {"well-formed-response"}),
    (_float_code, {"error-codes"}),
    (_reused_seq, {"server-seq-increasing"}),
    (_rejection_without_origin, {"echo-origin", "echo-complete"}),
    (_invented_origin, {"echo-origin", "echo-complete"}),
    (_echo_on_another_channel, {"echo-origin"}),
    (_null_id_for_a_readable_request, {"one-response-per-request"}),
], ids=lambda v: getattr(v, "__name__", ""))
def test_each_fault_breaks_its_property(clean: Transcript, fault: Any, broken: set[str]) -> None:
    assert _violated(_edit(clean, fault)) == broken


def test_a_refusal_without_the_supported_versions_is_caught(refused: Transcript) -> None:
    assert _violated(_edit(refused, _no_supported_versions)) == {"error-codes"}


def _replayed(transcript: Transcript) -> list[Any]:
    answer = next(r.message for r in transcript if r.sender is Direction.HOST
                  and isinstance(r.message, dict) and r.message.get("id") == 1)
    actions: list[Any] = answer["result"]["actions"]
    return actions


def test_a_replay_is_checked_in_order(reconnected: Transcript) -> None:
    assert check(reconnected) == {prop.name: () for prop in PROPERTIES}
    assert len(_replayed(reconnected)) == 2

    def swapped(records: list[Record]) -> None:
        actions = _replayed(Transcript(records=records))
        actions.reverse()

    def stale(records: list[Record]) -> None:
        _replayed(Transcript(records=records))[0]["serverSeq"] = 1

    def behind(records: list[Record]) -> None:
        last = _replayed(Transcript(records=records))[-1]["serverSeq"]
        i = _find(records, lambda m: m.get("method") == "action")
        records[i].message["params"]["serverSeq"] = last  # type: ignore[index]

    for fault in (swapped, stale):
        assert _violated(_edit(reconnected, fault)) == {"replay-in-order"}
    assert _violated(_edit(reconnected, behind)) == {"replay-in-order"}


def test_an_action_a_clients_version_lacks_is_caught() -> None:
    host = Host(clock=lambda: NOW, root=t.RootState(agents=()))
    host.create_session(SESSION, provider="demo", title="s")
    host.ready_session(SESSION, default_chat=CHAT)
    records = _record(host, [_msg(id=1, method="initialize", params={
        "protocolVersions": ["0.5.1"], "clientId": "old", "initialSubscriptions": [SESSION]})])
    # what a host that does not filter would send: a 0.7.0 action, a 0.5.0 notification
    records += [
        Record(sender=Direction.HOST, message={"jsonrpc": "2.0", "method": "action", "params": {
            "channel": SESSION, "serverSeq": 99, "action": {
                "type": "session/workingDirectorySet", "directory": "file:///w"}}}),
    ]
    assert _violated(Transcript(records=records)) == {"version-filter"}
    (violation,) = check(Transcript(records=records))["version-filter"]
    assert "session/workingDirectorySet" in violation.message and "0.5.1" in violation.message


def test_a_violation_names_its_place() -> None:
    transcript = Transcript(records=[
        Record(sender=Direction.CLIENT, message={"jsonrpc": "2.0", "id": 1, "method": "ping"}),
        Record(sender=Direction.HOST, message={"jsonrpc": "2.0", "id": True, "result": None}),
    ])
    unanswered, unasked = check(transcript)["one-response-per-request"]
    assert unasked.index == 1 and "True" in str(unasked)  # true is not 1
    # so the request itself was never answered
    assert unanswered.index == 0 and "never answered" in unanswered.message


def test_transcripts_round_trip_as_json_lines(clean: Transcript) -> None:
    again = Transcript.from_lines(list(clean.to_lines()))
    assert again == clean


@pytest.mark.parametrize(("line", "reason"), [
    ("{", "not JSON"),
    ('{"from": "server", "message": {}}', '"from"'),
    ('{"from": "host", "t": "now", "message": {}}', '"t"'),
    ('{"from": "host"}', '"message"'),
    ('{"from": "host", "message": {}, "extra": 1}', "a record"),
    ('{"from": "host", "message": {"x": NaN}}', "not JSON"),
    ("[" * 100_000 + "]" * 100_000, "not JSON"),
], ids=["not-json", "from", "t", "no-message", "extra-key", "nan", "too-deep"])
def test_a_bad_line_is_refused_with_its_number(line: str, reason: str) -> None:
    with pytest.raises(TranscriptError, match=reason) as caught:
        Transcript.from_lines(["", '{"from": "client", "message": {}}', line])
    assert caught.value.line == 3


def test_a_record_copies_what_it_is_given() -> None:
    message = {"jsonrpc": "2.0", "id": 1, "result": {"a": [1]}}
    record = Record(sender=Direction.HOST, message=message)
    message["result"]["a"].append(2)  # type: ignore[index]
    assert record.message == {"jsonrpc": "2.0", "id": 1, "result": {"a": [1]}}
