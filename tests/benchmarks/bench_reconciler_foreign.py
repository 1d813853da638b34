"""Benchmark: reading ``optimistic`` after every foreign envelope, P pending x F foreign.

A client has P of its own actions pending on a channel while F envelopes of
other parties' actions arrive; the application reads ``optimistic(channel)``
after each one, as a UI does to render.  Timed: the loop of ``receive`` +
``optimistic`` over the F envelopes, in one process, two ways side by side:

* **replay** (before): every foreign action that changes ``confirmed`` makes
  the next read replay the P pending actions, P reductions per read.  That
  is the reconciler with its footprints switched off (the private
  ``_incremental = False``), i.e. the behaviour before them;
* **footprints** (after): a foreign action whose footprint does not overlap
  the pending actions' is applied to the cached optimistic state, one
  reduction per read.

Scenarios:

* ``chat``: the user has P draft edits pending (``chat/draftChanged``) while
  the agent streams the realistic turns of ``_stream.py`` (deltas, response
  parts, tool calls, turn starts and ends): the spec's own argument for
  write-ahead, pending actions and the stream touch different data;
* ``session``: the user has P title and read-flag changes pending while the
  host updates the chat catalogue and the activity (``session/chatUpdated``,
  ``session/activityChanged``);
* ``conflict``: the user's P draft edits against another client's draft
  edits: every foreign action overlaps, both ways replay (the fall-back
  costs what it did).

A mode that costs P reductions per read is timed over at most ``--sample``
reads and extrapolated to F (its cost per read is constant: the same P
reductions on states of the same size), unless ``--full``.  Before timing,
each run is checked: both ways read equal states, and reductions per read
are counted over the first reads.

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_reconciler_foreign [--sizes 1000 10000]
        [--sample 1000] [--full] [--wall]
"""

from __future__ import annotations

import argparse
import gc
import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import agenthost_protocol.reconciler as reconciler_module
from agenthost_protocol.reconciler import ClientReconciler
from agenthost_protocol.reducers import reduce
from agenthost_protocol.types import (
    ActionEnvelope,
    ActionOrigin,
    ChatDraftChangedAction,
    ChatSummary,
    Message,
    MessageKind,
    MessageOrigin,
    PartialChatSummary,
    SessionActivityChangedAction,
    SessionChatUpdatedAction,
    SessionIsReadChangedAction,
    SessionLifecycle,
    SessionState,
    SessionStatus,
    SessionTitleChangedAction,
    Snapshot,
    SnapshotState,
    StateAction,
)

from ._stream import CHANNEL, add_timer_option, clock, initial_state, stream, timer, timer_name

CLIENT = "bench-client"
OTHER = "other-client"
SESSION = "ahp-session:/bench"
CHAT_IN_SESSION = "ahp-chat:/bench-1"
FROM_SEQ = 1
COUNTED_READS = 20
"""Reads over which reductions are counted (outside the timed loops)."""


def _draft(n: int) -> ChatDraftChangedAction:
    user = MessageOrigin(kind=MessageKind.USER)
    return ChatDraftChangedAction(draft=Message(text=f"draft {n}", origin=user))


def _session_state() -> SessionState:
    summary = ChatSummary(
        resource=CHAT_IN_SESSION,
        title="Chat",
        status=SessionStatus.IDLE,
        modified_at="2025-06-15T12:00:00.000Z",
    )
    return SessionState(
        provider="bench",
        title="Benchmark",
        status=SessionStatus.IDLE,
        lifecycle=SessionLifecycle.READY,
        active_clients=(),
        chats=(summary,),
    )


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """A channel, its state, the user's pending actions and the foreign ones."""

    name: str
    channel: str
    state: SnapshotState
    own: Callable[[int], StateAction]
    """The user's n-th action."""
    foreign: Callable[[int], list[StateAction]]
    """The first ``count`` foreign actions."""
    origin: ActionOrigin | None = None
    """The foreign envelopes' origin (``None``: the host's)."""
    commutes: bool = True
    """Whether the foreign actions commute with the pending ones (else both ways replay)."""

    def prepared(self, pending: int, incremental: bool) -> ClientReconciler:
        """Subscribed, with ``pending`` own actions dispatched and the optimistic state read."""
        rec = ClientReconciler(CLIENT, now=clock)
        rec._incremental = incremental
        rec.subscribe(Snapshot(resource=self.channel, state=self.state, from_seq=FROM_SEQ))
        for n in range(pending):
            rec.dispatch(self.channel, self.own(n))
        rec.optimistic(self.channel)
        return rec

    def envelopes(self, count: int) -> list[ActionEnvelope]:
        return [
            ActionEnvelope(
                channel=self.channel,
                action=action,
                server_seq=FROM_SEQ + 1 + index,
                origin=self.origin,
            )
            for index, action in enumerate(self.foreign(count))
        ]


def _chat_stream(count: int) -> list[StateAction]:
    turns = count // 227 + 1
    return list(itertools.islice(stream(turns), count))


def _session_updates(count: int) -> list[StateAction]:
    actions: list[StateAction] = []
    for n in range(count):
        if n % 2:
            actions.append(SessionActivityChangedAction(activity=f"step {n}"))
        else:
            changes = PartialChatSummary(resource=CHAT_IN_SESSION, activity=f"working {n}")
            actions.append(SessionChatUpdatedAction(chat=CHAT_IN_SESSION, changes=changes))
    return actions


def _session_own(n: int) -> StateAction:
    if n % 2:
        return SessionIsReadChangedAction(is_read=n % 4 == 1)
    return SessionTitleChangedAction(title=f"Title {n}")


SCENARIOS = (
    Scenario(
        name="chat", channel=CHANNEL, state=initial_state(), own=_draft, foreign=_chat_stream
    ),
    Scenario(
        name="session",
        channel=SESSION,
        state=_session_state(),
        own=_session_own,
        foreign=_session_updates,
    ),
    Scenario(
        name="conflict",
        channel=CHANNEL,
        state=initial_state(),
        own=_draft,
        foreign=lambda count: [_draft(-n) for n in range(count)],
        origin=ActionOrigin(client_id=OTHER, client_seq=1),
        commutes=False,
    ),
)


@contextmanager
def counting() -> Iterator[list[int]]:
    """Count the reductions the reconciler performs (for the check, never while timing)."""
    calls = [0]

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return reduce(*args, **kwargs)

    reconciler_module.reduce = counted  # type: ignore[attr-defined]
    try:
        yield calls
    finally:
        reconciler_module.reduce = reduce  # type: ignore[attr-defined]


def check(scenario: Scenario, pending: int) -> tuple[float, float]:
    """Both ways read equal states; their reductions per envelope (receive + read).

    Over the first :data:`COUNTED_READS` envelopes, outside the timed runs.
    """
    envelopes = scenario.envelopes(COUNTED_READS)
    costs: list[float] = []
    reads: list[list[SnapshotState]] = []
    for incremental in (False, True):
        rec = scenario.prepared(pending, incremental)
        states = []
        with counting() as calls:
            for envelope in envelopes:
                rec.receive(envelope)
                states.append(rec.optimistic(scenario.channel))
        costs.append(calls[0] / len(envelopes))
        reads.append(states)
    assert reads[0] == reads[1], f"{scenario.name}: the two ways read different states"
    return costs[0], costs[1]


def time_reads(
    scenario: Scenario,
    pending: int,
    envelopes: list[ActionEnvelope],
    *,
    incremental: bool,
    now: Callable[[], float],
) -> tuple[float, SnapshotState]:
    """Seconds for ``receive`` + ``optimistic`` over ``envelopes``; the last state read."""
    rec = scenario.prepared(pending, incremental)
    receive, optimistic, channel = rec.receive, rec.optimistic, scenario.channel
    gc.collect()
    start = now()
    for envelope in envelopes:
        receive(envelope)
        state = optimistic(channel)
    elapsed = now() - start
    return elapsed, state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=[1_000, 10_000], help="P = F values to run"
    )
    parser.add_argument(
        "--sample",
        type=int,
        default=1_000,
        help="reads timed at most for a mode costing P per read",
    )
    parser.add_argument("--full", action="store_true", help="time every read, never extrapolate")
    parser.add_argument("--scenarios", nargs="+", default=[s.name for s in SCENARIOS])
    add_timer_option(parser)
    args = parser.parse_args()
    now = timer(args)
    print(f"reading optimistic after each foreign envelope, {timer_name(args)}, one run:")
    for scenario in SCENARIOS:
        if scenario.name not in args.scenarios:
            continue
        for size in args.sizes:
            pending = foreign = size
            before_cost, after_cost = check(scenario, pending)
            envelopes = scenario.envelopes(foreign)
            results = []
            for incremental in (False, True):
                replays = not (incremental and scenario.commutes)
                timed = foreign if args.full or not replays else min(foreign, args.sample)
                elapsed, state = time_reads(
                    scenario, pending, envelopes[:timed], incremental=incremental, now=now
                )
                results.append((elapsed * foreign / timed, timed, state))
            (before, before_timed, before_state), (after, after_timed, after_state) = results
            if before_timed == after_timed:
                assert before_state == after_state
            note = "" if before_timed == foreign else f" (extrapolated from {before_timed:,} reads)"
            if after_timed != foreign:
                note += f" (after: from {after_timed:,} reads)"
            print(
                f"  {scenario.name:<8} P={pending:>6,} F={foreign:>6,}: "
                f"replay {before:9.3f} s ({before_cost:6,.0f} reductions/envelope)   "
                f"footprints {after:9.3f} s ({after_cost:6,.0f})   "
                f"x{before / after:,.0f}{note}"
            )


if __name__ == "__main__":
    main()
