"""Benchmark: a host fanning one chat's stream out to many subscribed connections.

100 connections (by default) initialize, each offering 0.7.0 or, for every
fourth one, 0.6.0, and subscribe to one chat; the host then dispatches the
227,000-action agent stream of ``bench_stream`` (1,000 turns) as server
actions, and every connection's output is drained as a transport would.
Prints actions/s dispatched, messages and bytes/s out, encodes per envelope
(the host serialises an envelope once, whatever the number of connections and
versions: filtering drops envelopes, it never rewrites them),
and the growth of the process's maximum resident memory while streaming.

``--activity LEVEL`` observes the host with an
:class:`~agenthost_protocol.aio.activity.ActivityLog` whose logger is at
``LEVEL`` (``warning``: the check alone; ``info``, ``debug``: its lines, made
and dropped by a handler that writes nothing), as ``HostServer`` does.

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_fanout [--connections 100] [--turns 1000]
        [--activity off|warning|info|debug]
"""

from __future__ import annotations

import argparse
import gc
import logging
import resource
import time
from unittest import mock

from agenthost_protocol import wire
from agenthost_protocol.aio.activity import ActivityLog
from agenthost_protocol.host import Host
from agenthost_protocol.types import ChatState

from ._stream import CHANNEL, clock, initial_state, stream


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--drain-every", type=int, default=227,
                        help="actions between two drains of every connection")
    parser.add_argument("--activity", choices=("off", "warning", "info", "debug"),
                        default="off", help="observe the host with an ActivityLog at this level")
    args = parser.parse_args()

    host = Host(clock=clock)
    if args.activity != "off":
        logger = logging.getLogger("bench.activity")
        logger.propagate = False
        logger.addHandler(logging.NullHandler())
        logger.setLevel(args.activity.upper())
        host.observer = ActivityLog(host, logger=logger)
    host.add_channel(CHANNEL, initial_state())
    connections = []
    for number in range(args.connections):
        conn = host.connect()
        version = "0.6.0" if number % 4 == 3 else "0.7.0"
        conn.receive_data(wire.dumps({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"channel": "ahp-root://", "protocolVersions": [version],
                       "clientId": f"client-{number}", "initialSubscriptions": [CHANNEL]},
        }))
        conn.data_to_send()
        connections.append(conn)
    actions = stream(args.turns)

    encodes = 0
    real_dumps = wire.dumps

    def counting_dumps(obj: object) -> str:
        nonlocal encodes
        encodes += 1
        return real_dumps(obj)

    gc.collect()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    messages = out_bytes = 0
    with mock.patch.object(wire, "dumps", counting_dumps):
        start = time.process_time()
        for index, action in enumerate(actions, 1):
            host.dispatch(CHANNEL, action)
            if index % args.drain_every == 0 or index == len(actions):
                for conn in connections:
                    for message in conn.data_to_send():
                        messages += 1
                        out_bytes += len(message)
        elapsed = time.process_time() - start
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    state = host.state(CHANNEL)
    assert isinstance(state, ChatState) and len(state.turns) == args.turns
    print(f"{args.connections} connections (3/4 on 0.7.0, 1/4 on 0.6.0), "
          f"{len(actions):,} actions, CPU time, activity log {args.activity}")
    print(f"dispatch + fan-out: {elapsed * 1000:,.0f} ms, {len(actions) / elapsed:,.0f} actions/s")
    print(f"out: {messages:,} messages, {out_bytes / 1e6:,.1f} MB, "
          f"{messages / elapsed:,.0f} messages/s, {out_bytes / elapsed / 1e6:,.1f} MB/s")
    print(f"encodes: {encodes:,} ({encodes / len(actions):.2f} per action; "
          "one per envelope, shared by every connection that may see it)")
    print(f"max RSS: {rss_after / 1024:,.0f} MB ({(rss_after - rss_before) / 1024:,.0f} MB "
          "more than before streaming; output drained every --drain-every actions)")


if __name__ == "__main__":
    main()
