"""The web client's reconciler (``web/ahp/reconciler.js``), run in Chromium, against
``agenthost_protocol.reconciler.ClientReconciler``.

A scenario is a list of operations on one channel: subscribe, dispatch, an
envelope from another client or from the host, the echo of one of our
pending actions (some rejected, some answered out of order), a duplicate
``serverSeq``, a reconnect answered with a replay or with snapshots,
unsubscribing and the late echo of an action it dropped.  The Python
reconciler runs each operation as it is drawn (so an echo can name a pending
action); then the page runs the same operations, and after each one both
sides must agree on what it did (its result, or that it was refused), on
``confirmed``, ``optimistic`` and ``pending`` (``clientSeq``, action and
``dispatchedAt``) and on ``lastSeenServerSeq``.  Both sides read the same
stepping clock, so a reading taken at another moment (the clock policy)
shows as a different ``modifiedAt``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agenthost_protocol import types as t
from agenthost_protocol import wire
from agenthost_protocol.channels import STATE_TYPES, ChannelKind
from agenthost_protocol.errors import ProtocolError
from agenthost_protocol.reconciler import ClientReconciler, PendingAction, Received, ReceiveKind
from agenthost_protocol.testing import strategies as ahst
from agenthost_protocol.types._tags import ACTION_CLASSES
from agenthost_protocol.versions import IS_CLIENT_DISPATCHABLE

from . import _browser, _web_modules
from ._web_modules import canonical, pooled

if TYPE_CHECKING:
    from playwright.sync_api import Page

# the fixtures, by name (a test's parameter names its fixture)
browser = _browser.browser
module_page = _web_modules.module_page

ME = "web-client"
CHANNELS = {
    ChannelKind.CHAT: "ahp-chat:/a",
    ChannelKind.SESSION: "ahp-session:/s",
    ChannelKind.TERMINAL: "ahp-terminal:/t",
    ChannelKind.ROOT: "ahp-root://",
}
_START_MS = 1_767_225_600_000

_RUN = """async (text) => {
  const { Reconciler } = await import("/ahp/reconciler.js");
  const receiveResult = (r) => ({
    kind: r.kind, applied: r.applied, clientSeq: r.clientSeq ?? null,
    reason: r.rejectionReason ?? null,
  });
  return JSON.stringify(JSON.parse(text).map((ops) => {
    let ms = __START__;
    const rec = new Reconciler("__ME__", () => (ms += 1000));
    return ops.map((op) => {
      let result;
      try {
        if (op.op === "subscribe") {
          rec.subscribe(op.snapshot);
          result = null;
        } else if (op.op === "dispatch") {
          const sent = rec.dispatch(op.channel, op.action);
          result = { channel: sent.channel, clientSeq: sent.clientSeq, action: sent.action };
        } else if (op.op === "receive") {
          result = receiveResult(rec.receive(op.envelope));
        } else if (op.op === "unsubscribe") {
          result = { dropped: rec.unsubscribe(op.channel).map((p) => p.clientSeq) };
        } else {
          const outcome = rec.applyReconnect(op.result);
          result = {
            kind: outcome.kind,
            received: outcome.received.map(receiveResult),
            rejected: outcome.rejected.map((r) => [r.clientSeq, r.reason]),
            dropped: outcome.dropped.map((p) => p.clientSeq),
            removed: outcome.removed,
          };
        }
      } catch (error) {
        if (error.name !== "ReconcilerError") throw error;
        result = { error: true };
      }
      const channels = {};
      for (const uri of rec.channels) {
        channels[uri] = {
          confirmed: rec.confirmed(uri),
          optimistic: rec.optimistic(uri),
          pending: rec.pending(uri).map((p) => [p.clientSeq, p.action, p.dispatchedAt]),
        };
      }
      return { result, channels, lastSeen: rec.lastSeenServerSeq };
    });
  }));
}""".replace("__START__", str(_START_MS)).replace("__ME__", ME)


# -- the Python side -------------------------------------------------------------

_KINDS = {
    ReceiveKind.ECHO: "confirmed",
    ReceiveKind.LATE_ECHO: "confirmed",
    ReceiveKind.FOREIGN: "foreign",
    ReceiveKind.REJECTED: "rejected",
    ReceiveKind.FOREIGN_REJECTED: "ignored",
    ReceiveKind.DUPLICATE: "ignored",
    ReceiveKind.UNSUBSCRIBED: "ignored",
}


def _received(received: Received) -> dict[str, Any]:
    answered = received.echo_of
    return {
        "kind": _KINDS[received.kind],
        "applied": received.applied,
        "clientSeq": None if answered is None or received.kind is ReceiveKind.FOREIGN
        else answered.client_seq,
        "reason": None if received.rejection is None else received.rejection.reason,
    }


def _clock() -> Callable[[], int]:
    ticks = itertools.count(_START_MS + 1000, 1000)
    return lambda: next(ticks)


class _Scenario:
    """The Python reconciler, and what each operation did to it (what the page must match)."""

    def __init__(self) -> None:
        self.rec = ClientReconciler(ME, now=_clock())
        self.ops: list[dict[str, Any]] = []
        self.seen: list[dict[str, Any]] = []
        self.orphans: list[PendingAction] = []

    def run(self, op: dict[str, Any]) -> None:
        rec = self.rec
        result: Any
        try:
            if op["op"] == "subscribe":
                rec.subscribe(wire.structure(op["snapshot"], t.Snapshot))
                result = None
            elif op["op"] == "dispatch":
                sent = rec.dispatch(op["channel"], wire.parse_action(op["action"]))
                result = {
                    "channel": sent.channel, "clientSeq": sent.client_seq,
                    "action": wire.unstructure(sent.action),
                }
            elif op["op"] == "receive":
                result = _received(rec.receive(wire.parse_envelope(op["envelope"])))
            elif op["op"] == "unsubscribe":
                dropped = rec.unsubscribe(op["channel"])
                self.orphans.extend(dropped)
                result = {"dropped": [p.client_seq for p in dropped]}
            else:
                outcome = rec.apply_reconnect(wire.structure(op["result"], t.ReconnectResult))
                self.orphans.extend(outcome.dropped)
                result = {
                    "kind": outcome.kind.value,
                    "received": [_received(r) for r in outcome.received],
                    "rejected": [[r.client_seq, r.reason] for r in outcome.rejections],
                    "dropped": [p.client_seq for p in outcome.dropped],
                    "removed": list(outcome.removed),
                }
        except ProtocolError:
            result = {"error": True}
        channels = {
            uri: {
                "confirmed": wire.unstructure(rec.confirmed(uri)),
                "optimistic": wire.unstructure(rec.optimistic(uri)),
                "pending": [
                    [p.client_seq, wire.unstructure(p.action), p.dispatched_at]
                    for p in rec.pending(uri)
                ],
            }
            for uri in rec.channels
        }
        self.ops.append(op)
        self.seen.append({"result": result, "channels": channels,
                          "lastSeen": rec.last_seen_server_seq})


def _envelope(channel: str, action: Any, seq: int, origin: tuple[str, int] | None = None,
              reason: str | None = None) -> dict[str, Any]:
    envelope = {"channel": channel, "action": action, "serverSeq": seq}
    if origin is not None:
        envelope["origin"] = {"clientId": origin[0], "clientSeq": origin[1]}
    if reason is not None:
        envelope["rejectionReason"] = reason
    return envelope


def _classes(dispatchable: bool, kind: ChannelKind | None = None) -> list[type]:
    """The action classes a client may (or may not) dispatch, of ``kind`` or of any."""
    classes: list[type] = []
    for action_type, cls in ACTION_CLASSES.items():
        name = str(getattr(action_type, "value", action_type))
        if kind is not None and not name.startswith(kind.value + "/"):
            continue
        if IS_CLIENT_DISPATCHABLE.get(name, False) is dispatchable:
            classes.extend(get_args(cls) or (cls,))
    return classes


def _dispatchable(kind: ChannelKind) -> st.SearchStrategy[Any]:
    return st.one_of([ahst.from_type(cls, max_depth=2) for cls in _classes(True, kind)])


def _refused(kind: ChannelKind) -> st.SearchStrategy[Any]:
    """Actions ``dispatch`` refuses on a channel of ``kind``: of another kind, or server-only."""
    others = [cls for k in CHANNELS if k is not kind for cls in _classes(True, k)]
    return st.one_of([ahst.from_type(cls, max_depth=1) for cls in _classes(False) + others])


_STEPS = (  # interleaved: hypothesis favours the first few
    "dispatch", "echo", "drain", "foreign", "dispatch", "echo", "reject", "dispatch", "foreign",
    "replay", "late", "duplicate", "snapshot", "resubscribe", "refused",
)


def _scenario(draw: Callable[..., Any], kind: ChannelKind) -> _Scenario:
    """Draw and run one scenario on a channel of ``kind``."""
    channel = CHANNELS[kind]
    state_type = STATE_TYPES[kind]
    scenario = _Scenario()
    seq = draw(st.integers(0, 3))

    def snapshot(at: int) -> dict[str, Any]:
        state = pooled(draw, draw(ahst.states(state_type, max_depth=2)))
        return {"resource": channel, "state": wire.unstructure(state), "fromSeq": at}

    def action(own: bool = True) -> Any:
        strategy = _dispatchable(kind) if own else ahst.actions(kind, max_depth=2)
        return wire.unstructure(pooled(draw, draw(strategy)))

    scenario.run({"op": "subscribe", "snapshot": snapshot(seq)})
    other_seq = itertools.count(1)
    for step in draw(st.lists(st.sampled_from(_STEPS), min_size=4, max_size=14)):
        tracked = channel in scenario.rec.channels
        pending = scenario.rec.pending(channel) if tracked else ()
        if step == "dispatch" and tracked:
            scenario.run({"op": "dispatch", "channel": channel, "action": action()})
        elif step == "refused" and tracked:
            # not client-dispatchable, or of another channel
            refused = draw(_refused(kind))
            scenario.run({"op": "dispatch", "channel": channel,
                          "action": wire.unstructure(refused)})
        elif step == "foreign":
            seq += 1
            origin = draw(st.sampled_from([None, ("other", next(other_seq))]))
            scenario.run({"op": "receive",
                          "envelope": _envelope(channel, action(own=False), seq, origin)})
        elif step in ("echo", "reject") and pending:
            entry = pending[draw(st.integers(0, len(pending) - 1))]  # mostly the head
            seq += 1
            echoed = wire.unstructure(entry.action)
            if step == "echo" and not draw(st.integers(0, 4)):
                echoed = action()  # the host applied it otherwise
            reason = "refused by the host" if step == "reject" else None
            scenario.run({"op": "receive", "envelope": _envelope(
                channel, echoed, seq, (ME, entry.client_seq), reason)})
        elif step == "drain" and pending:
            # the host answers every pending action, in order, some of them refused
            for entry in pending:
                seq += 1
                reason = "refused" if not draw(st.integers(0, 3)) else None
                scenario.run({"op": "receive", "envelope": _envelope(
                    channel, wire.unstructure(entry.action), seq, (ME, entry.client_seq), reason)})
        elif step == "duplicate":
            scenario.run({"op": "receive",
                          "envelope": _envelope(channel, action(own=False), seq)})
        elif step == "replay" and tracked:
            envelopes = []
            for entry in pending:
                if draw(st.booleans()):
                    seq += 1
                    reason = "refused" if not draw(st.integers(0, 3)) else None
                    envelopes.append(_envelope(channel, wire.unstructure(entry.action), seq,
                                               (ME, entry.client_seq), reason))
                if draw(st.booleans()):
                    seq += 1
                    envelopes.append(_envelope(channel, action(own=False), seq))
            missing = [channel] if not draw(st.integers(0, 5)) else []
            scenario.run({"op": "reconnect",
                          "result": {"type": "replay", "actions": envelopes, "missing": missing}})
        elif step == "snapshot" and tracked:
            # a restarted host may count from a lower serverSeq
            seq = draw(st.sampled_from([seq, seq + 2, max(0, seq - 2)]))
            scenario.run({"op": "reconnect",
                          "result": {"type": "snapshot", "snapshots": [snapshot(seq)]}})
        elif step == "resubscribe" and tracked:
            scenario.run({"op": "unsubscribe", "channel": channel})
            scenario.run({"op": "subscribe", "snapshot": snapshot(seq)})
        elif step == "late" and scenario.orphans:
            entry = scenario.orphans[draw(st.integers(0, len(scenario.orphans) - 1))]
            seq += 1
            reason = "refused" if draw(st.booleans()) else None
            scenario.run({"op": "receive", "envelope": _envelope(
                entry.channel, wire.unstructure(entry.action), seq, (ME, entry.client_seq),
                reason)})
        elif not tracked:
            scenario.run({"op": "subscribe", "snapshot": snapshot(seq)})
    return scenario


def _check(page: Page, scenarios: list[_Scenario]) -> None:
    results = json.loads(page.evaluate(_RUN, json.dumps([s.ops for s in scenarios])))
    for scenario, steps in zip(scenarios, results, strict=True):
        for op, expected, got in zip(scenario.ops, scenario.seen, steps, strict=True):
            assert canonical(got["result"]) == canonical(expected["result"]), op
            assert got["lastSeen"] == expected["lastSeen"], op
            assert sorted(got["channels"]) == sorted(expected["channels"]), op
            for uri, state in expected["channels"].items():
                mine = got["channels"][uri]
                for key in ("confirmed", "pending", "optimistic"):
                    assert canonical(mine[key]) == canonical(state[key]), (op, key)


@pytest.mark.parametrize("kind", list(CHANNELS), ids=lambda kind: kind.value)
@settings(max_examples=max(5, settings().max_examples // 4))
@given(data=st.data())
def test_reconciler_agrees_with_python(module_page: Page, kind: ChannelKind,
                                        data: st.DataObject) -> None:
    count = data.draw(st.integers(1, 4), label="scenarios")
    _check(module_page, [_scenario(data.draw, kind) for _ in range(count)])


# -- scripted ----------------------------------------------------------------------


def _scripted() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    chat = CHANNELS[ChannelKind.CHAT]
    state = {"resource": chat, "title": "t", "status": 1, "modifiedAt": "x", "turns": []}
    message = {"text": "hi", "origin": {"kind": "user"}}

    def start(turn: str) -> dict[str, Any]:
        return {"type": "chat/turnStarted", "turnId": turn, "startedAt": "s", "message": message}

    def draft(text: str) -> dict[str, Any]:
        return {"type": "chat/draftChanged", "draft": {"text": text, "origin": {"kind": "user"}}}

    subscribe = {"op": "subscribe", "snapshot": {"resource": chat, "state": state, "fromSeq": 5}}

    def receive(action: dict[str, Any], seq: int, client_seq: int | None = None,
                reason: str | None = None, client: str = ME) -> dict[str, Any]:
        origin = None if client_seq is None else (client, client_seq)
        return {"op": "receive", "envelope": _envelope(chat, action, seq, origin, reason)}

    yield "dispatch then echo", [
        subscribe, {"op": "dispatch", "channel": chat, "action": start("t1")},
        receive(start("t1"), 6, 1),
    ]
    yield "a foreign action under a pending one", [
        subscribe, {"op": "dispatch", "channel": chat, "action": draft("mine")},
        receive({"type": "chat/activityChanged", "activity": "x"}, 6),
        receive({"type": "chat/activityChanged", "activity": "busy"}, 7, 3, client="other"),
        receive(draft("mine"), 8, 1),
    ]
    yield "rejection", [
        subscribe, {"op": "dispatch", "channel": chat, "action": draft("a")},
        {"op": "dispatch", "channel": chat, "action": draft("b")},
        receive(draft("a"), 6, 1, reason="no"), receive(draft("b"), 7, 2),
    ]
    yield "echoes out of order and a duplicate", [
        subscribe, {"op": "dispatch", "channel": chat, "action": start("t1")},
        {"op": "dispatch", "channel": chat, "action": draft("b")},
        receive(draft("b"), 6, 2), receive(draft("b"), 6, 2), receive(start("t1"), 7, 1),
    ]
    yield "refused calls change nothing", [
        subscribe, {"op": "dispatch", "channel": chat, "action": draft("a")},
        receive(draft("x"), 6, 9),  # an echo that matches none of ours
        {"op": "receive", "envelope": {**_envelope(chat, draft("x"), 6), "serverSeq": "7"}},
        {"op": "receive", "envelope": _envelope("ahp-chat:/elsewhere", draft("x"), 7)},
        {"op": "dispatch", "channel": "ahp-chat:/elsewhere", "action": draft("b")},
        {"op": "dispatch", "channel": chat, "action": {"type": "chat/delta", "turnId": "t",
                                                       "partId": "p", "content": "x"}},
        {"op": "reconnect", "result": {"type": "snapshot", "snapshots": [
            {"resource": "ahp-chat:/elsewhere", "state": state, "fromSeq": 1}]}},
        receive(draft("a"), 6, 1),
    ]
    yield "reconnect with a replay", [
        subscribe, {"op": "dispatch", "channel": chat, "action": draft("a")},
        {"op": "dispatch", "channel": chat, "action": start("t1")},
        {"op": "reconnect", "result": {"type": "replay", "missing": [], "actions": [
            _envelope(chat, draft("a"), 6, (ME, 1)),
            _envelope(chat, {"type": "chat/activityChanged", "activity": "y"}, 7),
        ]}},
        receive(start("t1"), 8, 2),  # the dropped action, answered late
    ]
    yield "reconnect with snapshots", [
        subscribe, {"op": "dispatch", "channel": chat, "action": draft("a")},
        {"op": "reconnect", "result": {"type": "snapshot", "snapshots": [
            {"resource": chat, "state": {**state, "title": "fresh"}, "fromSeq": 2},
        ]}},
        receive(draft("a"), 3, 1, reason="too late"),
    ]


    root = CHANNELS[ChannelKind.ROOT]
    root_state = {"agents": [], "config": {"schema": {"type": "object", "properties": {}},
                                           "values": {"a": 1}}}
    both = [
        subscribe, {"op": "subscribe", "snapshot": {"resource": root, "state": root_state,
                                                    "fromSeq": 9}},
        {"op": "dispatch", "channel": root,
         "action": {"type": "root/configChanged", "config": {"b": 2}}},
        {"op": "dispatch", "channel": chat, "action": draft("a")},
    ]
    yield "two channels, one missing from the replay", [*both, {"op": "reconnect", "result": {
        "type": "replay", "missing": [root],
        "actions": [_envelope(chat, draft("a"), 10, (ME, 2))],
    }}, receive(draft("z"), 11), {"op": "receive", "envelope": _envelope(root, draft("x"), 12)}]
    yield "two channels, a snapshot for one", [*both, {"op": "reconnect", "result": {
        "type": "snapshot", "snapshots": [{"resource": root, "state": root_state, "fromSeq": 3}],
    }}, {"op": "receive", "envelope": _envelope(
        root, {"type": "root/configChanged", "config": {"b": 2}}, 4, (ME, 1))}]


@pytest.mark.parametrize("ops", [ops for _, ops in _scripted()],
                         ids=[name for name, _ in _scripted()])
def test_scripted_scenarios(module_page: Page, ops: list[dict[str, Any]]) -> None:
    scenario = _Scenario()
    for op in ops:
        scenario.run(op)
    _check(module_page, [scenario])
