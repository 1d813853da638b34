"""Benchmark: what ``Host(authorize=OwnershipPolicy(...))`` costs a busy host.

1,000 sessions (by default) owned by 10 principals, and 100 connections, 10 of
each principal, every one subscribed to the root and to 10 of its
principal's sessions.  Timed, in CPU time, the same work with no policy and
with the ownership policy:

* *dispatch*: client ``dispatchAction``\\ s (``session/titleChanged``) fed as
  wire bytes by random connections into their own sessions, each followed by
  the ``root/sessionSummaryChanged`` the agent layer sends for it (which the
  policy shows each root subscriber only if its principal may see the
  session), every connection drained as a transport would;
* *sessions*: sessions created, announced, counted (``activeSessions``, which
  the policy narrows per principal) and disposed.

Prints operations/s for both and the policy's cost in per cent (the target is
at most 10 % on dispatch).  Run from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_authorize [--sessions 1000]
        [--connections 100] [--principals 10] [--actions 20000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import random
import time

from agenthost_protocol import types as t
from agenthost_protocol import wire
from agenthost_protocol.channels import ROOT_CHANNEL
from agenthost_protocol.host import Authorize, Host, HostConnection, Operation, OwnershipPolicy

NOW = 1_767_225_600_000
AGENT = t.AgentInfo(provider="bench", display_name="Bench", description="", models=())


def clock() -> int:
    return NOW


def count(host: Host) -> None:
    host.dispatch(ROOT_CHANNEL, t.RootActiveSessionsChangedAction(
        active_sessions=len(host.listed_sessions())))


def allow_all(principal: object, session: str, operation: Operation) -> bool:
    return True


POLICIES: dict[str, Authorize | OwnershipPolicy | None] = {
    "no policy": None,
    "allow-all": allow_all,
    "ownership": OwnershipPolicy(),
}
"""``allow-all`` costs the checks and sends what no policy sends: the checks' price."""

Connections = list[tuple[HostConnection, list[str]]]


def build(args: argparse.Namespace, policy: str) -> tuple[Host, Connections]:
    host = Host(clock=clock, root=t.RootState(agents=(AGENT,), active_sessions=0),
                authorize=POLICIES[policy])
    principals = [f"user-{n}" for n in range(args.principals)]
    owned: dict[str, list[str]] = {p: [] for p in principals}
    for n in range(args.sessions):
        principal = principals[n % len(principals)]
        uri = f"ahp-session:/s{n}"
        host.create_session(uri, provider="bench", principal=principal)
        host.ready_session(uri, default_chat=f"ahp-chat:/s{n}")
        owned[principal].append(uri)
    count(host)
    connections = []
    per = args.connections // len(principals)
    for n in range(args.connections):
        principal = principals[n % len(principals)]
        conn = host.connect(principal=principal)
        mine = owned[principal]
        share = len(mine) // per
        slot = n // len(principals)
        subscribed = mine[slot * share:(slot + 1) * share][:10]
        conn.receive_data(wire.dumps({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersions": ["0.7.0"], "clientId": f"client-{n}",
                       "initialSubscriptions": [ROOT_CHANNEL, *subscribed]},
        }))
        conn.data_to_send()
        connections.append((conn, subscribed))
    return host, connections


def drain(connections: Connections) -> int:
    return sum(len(conn.data_to_send()) for conn, _ in connections)


def dispatch(args: argparse.Namespace, policy: str, summaries: bool) -> tuple[float, int]:
    host, connections = build(args, policy)
    rng = random.Random(1)
    seqs = [0] * len(connections)
    picks = [rng.randrange(len(connections)) for _ in range(args.actions)]
    announced = {uri: host.session_summary(uri) for uri in host.listed_sessions()}
    out = 0
    start = time.process_time()
    for index, n in enumerate(picks, 1):
        conn, subscribed = connections[n]
        session = subscribed[index % len(subscribed)]
        seqs[n] += 1
        conn.receive_data(wire.dumps({
            "jsonrpc": "2.0", "method": "dispatchAction",
            "params": {"channel": session, "clientSeq": seqs[n],
                       "action": {"type": "session/titleChanged", "title": f"t{index}"}},
        }))
        if summaries:
            announced[session] = host.announce_summary(session, announced[session])
        if index % 100 == 0:
            out += drain(connections)
    out += drain(connections)
    return time.process_time() - start, out


def check(args: argparse.Namespace, policy: str) -> float:
    """CPU seconds per client action that the policy's check takes alone (what the host
    asks before it applies a client action: the channel's session, then the policy)."""
    host, connections = build(args, policy)
    conn, subscribed = connections[0]
    calls = 100_000
    start = time.process_time()
    for n in range(calls):
        host.may(conn.principal, subscribed[n % len(subscribed)], Operation.DISPATCH)
    return (time.process_time() - start) / calls


def sessions(args: argparse.Namespace, policy: str) -> float:
    host, connections = build(args, policy)
    start = time.process_time()
    for n in range(args.cycles):
        uri = f"ahp-session:/new{n}"
        host.create_session(uri, provider="bench", principal=f"user-{n % args.principals}")
        host.ready_session(uri, default_chat=f"ahp-chat:/new{n}")
        count(host)
        host.dispose_session(uri)
        count(host)
        drain(connections)
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--principals", type=int, default=10)
    parser.add_argument("--actions", type=int, default=20_000)
    parser.add_argument("--cycles", type=int, default=200,
                        help="sessions created and disposed in the sessions part")
    parser.add_argument("--rounds", type=int, default=3, help="best of this many runs")
    args = parser.parse_args()

    print(f"{args.sessions:,} sessions, {args.connections} connections of "
          f"{args.principals} principals, CPU time, best of {args.rounds}")
    for summaries in (False, True):
        what = ("client actions, each with its root/sessionSummaryChanged" if summaries
                else "client actions")
        # the variants take turns, round after round: a machine that slows down or
        # speeds up meanwhile weighs on all of them alike
        runs: dict[str, list[tuple[float, int]]] = {policy: [] for policy in POLICIES}
        for _ in range(args.rounds):
            for policy in POLICIES:
                runs[policy].append(dispatch(args, policy, summaries))
        best: dict[str, float] = {}
        for policy in POLICIES:
            elapsed, out = min(runs[policy])
            best[policy] = elapsed
            print(f"dispatch, {policy:>9}: {args.actions / elapsed:,.0f} {what}/s "
                  f"({out:,} messages out)")
        for policy in ("allow-all", "ownership"):
            cost = (best[policy] - best["no policy"]) / best["no policy"] * 100
            print(f"  {policy}: {cost:+.1f} % CPU time against no policy")
        if not summaries:
            per_action = best["no policy"] / args.actions
            for policy in ("allow-all", "ownership"):
                alone = min(check(args, policy) for _ in range(args.rounds))
                print(f"  {policy}: its check alone {alone * 1e6:.2f} us a client action, "
                      f"{alone / per_action * 100:.1f} % of one without a policy "
                      f"({per_action * 1e6:.1f} us)")
    cycles: dict[str, list[float]] = {policy: [] for policy in POLICIES}
    for _ in range(args.rounds):
        for policy in POLICIES:
            cycles[policy].append(sessions(args, policy))
    cycle = {policy: min(times) for policy, times in cycles.items()}
    for policy in POLICIES:
        print(f"sessions, {policy:>9}: {args.cycles / cycle[policy]:,.0f} sessions created, "
              "announced, counted and disposed /s")
    for policy in ("allow-all", "ownership"):
        cost = (cycle[policy] - cycle["no policy"]) / cycle["no policy"] * 100
        print(f"  {policy}: {cost:+.1f} % CPU time against no policy")


if __name__ == "__main__":
    main()
