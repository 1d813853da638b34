"""Benchmark: the reconciler's bookkeeping at scale, at N and 4N pending actions.

Three operations whose cost must grow linearly with the number of pending
actions (the hardening issue measured them quadratic):

* **unsubscribe**: dropping a channel with N pending actions, which are
  remembered for late echoes (only the last ``ORPHAN_LIMIT`` can be);
* **reconnect**: a replay that answers none of N pending actions, which are
  all dropped and remembered the same way;
* **newest-first echoes**: N pending actions answered last to first, as by a
  host that holds actions and applies them later.

In-order echoes, the usual case, are timed alongside for comparison.  Only
the measured call (or loop of ``receive`` calls) is timed; the dispatches
that build the pending actions are not.  The optimistic state is not read
between echoes: a rebase after an out-of-order echo costs a replay of the
pending actions by design, and that cost is the application's choice.

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_reconciler [--n-drop 20000] [--n-echo 2500] [--wall]
"""

from __future__ import annotations

import argparse
import gc
from collections.abc import Callable

from agenthost_protocol.reconciler import ClientReconciler, ReceiveKind
from agenthost_protocol.types import (
    ActionEnvelope,
    ActionOrigin,
    ReconnectReplayResult,
    SessionIsReadChangedAction,
    SessionLifecycle,
    SessionState,
    SessionStatus,
    Snapshot,
)

from ._stream import add_timer_option, timer, timer_name

CLIENT = "bench-client"
SESSION = "ahp-session:/bench"
FROM_SEQ = 1


def clock() -> int:
    return 1_767_225_600_000


def subscribed() -> ClientReconciler:
    state = SessionState(
        provider="bench",
        title="Benchmark",
        status=SessionStatus.IDLE,
        lifecycle=SessionLifecycle.READY,
        active_clients=(),
        chats=(),
    )
    rec = ClientReconciler(CLIENT, now=clock)
    rec.subscribe(Snapshot(resource=SESSION, state=state, from_seq=FROM_SEQ))
    return rec


def with_pending(count: int) -> ClientReconciler:
    """A reconciler with ``count`` pending actions on one session (``clientSeq`` 1..count)."""
    rec = subscribed()
    for n in range(count):
        rec.dispatch(SESSION, SessionIsReadChangedAction(is_read=n % 2 == 0))
    return rec


def echoes(rec: ClientReconciler, newest_first: bool) -> list[ActionEnvelope]:
    pending = rec.pending(SESSION)
    order = reversed(pending) if newest_first else iter(pending)
    return [
        ActionEnvelope(
            channel=SESSION,
            action=entry.action,
            server_seq=FROM_SEQ + 1 + index,
            origin=ActionOrigin(client_id=CLIENT, client_seq=entry.client_seq),
        )
        for index, entry in enumerate(order)
    ]


def time_unsubscribe(count: int, now: Callable[[], float]) -> float:
    rec = with_pending(count)
    gc.collect()
    start = now()
    dropped = rec.unsubscribe(SESSION)
    elapsed = now() - start
    assert len(dropped) == count
    return elapsed


def time_reconnect(count: int, now: Callable[[], float]) -> float:
    rec = with_pending(count)
    result = ReconnectReplayResult(actions=(), missing=())
    gc.collect()
    start = now()
    outcome = rec.apply_reconnect(result)
    elapsed = now() - start
    assert len(outcome.dropped) == count
    return elapsed


def time_echoes(count: int, now: Callable[[], float], *, newest_first: bool) -> float:
    rec = with_pending(count)
    envelopes = echoes(rec, newest_first)
    receive = rec.receive
    gc.collect()
    start = now()
    for envelope in envelopes:
        receive(envelope)
    elapsed = now() - start
    assert rec.pending(SESSION) == ()
    assert receive(envelopes[-1]).kind is ReceiveKind.DUPLICATE
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-drop", type=int, default=20_000, help="N for unsubscribe, reconnect")
    parser.add_argument("--n-echo", type=int, default=2_500, help="N for the echo benchmarks")
    parser.add_argument("--repeat", type=int, default=3, help="runs per size; the best is kept")
    add_timer_option(parser)
    args = parser.parse_args()
    now = timer(args)
    cases: list[tuple[str, int, Callable[[int], float]]] = [
        ("unsubscribe with N pending", args.n_drop, lambda n: time_unsubscribe(n, now)),
        ("reconnect dropping N pending", args.n_drop, lambda n: time_reconnect(n, now)),
        (
            "N echoes, newest first",
            args.n_echo,
            lambda n: time_echoes(n, now, newest_first=True),
        ),
        (
            "N echoes, in order",
            args.n_echo,
            lambda n: time_echoes(n, now, newest_first=False),
        ),
    ]
    print(f"reconciler bookkeeping, best of {args.repeat}, {timer_name(args)}:")
    for name, n, run in cases:
        best = {size: min(run(size) for _ in range(args.repeat)) for size in (n, 4 * n)}
        ratio = best[4 * n] / best[n] if best[n] > 0 else float("inf")
        print(
            f"  {name:<30} N={n:>7,}: {best[n] * 1e3:9.2f} ms   "
            f"4N={4 * n:>7,}: {best[4 * n] * 1e3:9.2f} ms   "
            f"ratio {ratio:5.2f} (linear = 4)"
        )


if __name__ == "__main__":
    main()
