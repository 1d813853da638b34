"""``check-host``: a hypothesis state machine of up to four clients against a live host.

Each rule of :class:`HostMachine` is one step of the driver's program
(:mod:`~agenthost_protocol.hostcheck.driver`): connect a client of some
supported version (or of none the host speaks), reconnect one that dropped,
subscribe and unsubscribe, dispatch an action (valid where it is sent, or
not), send something malformed, ping, list or create sessions and chats.  At
the end of each example the driver quiesces, lets a fresh subscriber of each
version see every channel, and every property is checked on the transcript.
The first failing example is then shrunk (:func:`shrink`) and kept, with its
program, so that ``--replay`` can run it again.

The sessions a run creates are disposed of (a
:class:`~agenthost_protocol.hostcheck.driver.Cleanup`): after each example
and each run while shrinking, once its traffic is recorded, and at the end
of the run whatever ended it.

Needs the ``testing`` extra (hypothesis); a WebSocket host the ``ws`` extra.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

from attrs import define, evolve, field
from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis.errors import Flaky
from hypothesis.stateful import (
    RuleBasedStateMachine,
    get_state_machine_test,
    initialize,
    precondition,
    rule,
)

from ..versions import SUPPORTED_PROTOCOL_VERSIONS
from .driver import (
    ACTIONS,
    MALFORMED,
    MAX_RECORDED_BYTES,
    Budget,
    Cleanup,
    Driver,
    Step,
    Target,
    TrafficLimit,
    run_program,
)
from .properties import Violation
from .transcript import Transcript
from .verdict import PROPERTIES, check

__all__ = ["Outcome", "check_host", "replay", "shrink"]

UNSPOKEN = "99.0.0"
"""A version no host speaks: a client offering only it must be refused with -32005."""


@define
class Outcome:
    """What a run found: each property's violations, in the smallest failing example."""

    violations: dict[str, tuple[Violation, ...]]
    examples: int
    seconds: float
    steps: list[Step] = field(factory=list)
    transcript: Transcript = field(factory=lambda: Transcript(records=()))
    error: str | None = None
    """Why the run could not be completed (the host refused connections, say)."""
    created: int = 0
    """How many sessions the run created on the host (each was disposed of after its
    example, but for :attr:`undisposed`)."""
    undisposed: tuple[str, ...] = ()
    """Sessions the run created and could not dispose of (the host went away)."""

    @property
    def failed(self) -> list[str]:
        return [name for name, found in self.violations.items() if found]


class _Violated(AssertionError):
    """Raised from a machine's teardown when a property was broken."""


@define
class _Runs:
    """What every example of a run left: the count, and the last that failed."""

    examples: int = 0
    failing: tuple[list[Step], Transcript, dict[str, tuple[Violation, ...]]] | None = None


def _versions() -> st.SearchStrategy[list[str]]:
    one = st.sampled_from((*SUPPORTED_PROTOCOL_VERSIONS, UNSPOKEN))
    return st.lists(one, min_size=1, max_size=2, unique=True)


_CLIENT = st.integers(min_value=0, max_value=3)
_CHANNEL = st.integers(min_value=-1, max_value=7)
_ACTION = st.integers(min_value=0, max_value=len(ACTIONS) - 1)
_TEXT = st.text(st.characters(codec="utf-8", categories=("L", "N", "P", "S", "Zs")), max_size=12)


def _machine(target: Target, runs: _Runs, timeout: float, cleanup: Cleanup, budget: Budget
             ) -> type[RuleBasedStateMachine]:
    class HostMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.driver = Driver(target, timeout=timeout, cleanup=cleanup, budget=budget)
            self.aborted = False
            runs.examples += 1

        def _run(self, **step: object) -> None:
            try:
                self.driver.run(step)
            except BaseException:
                # the host failed the run, or the user stopped it: the teardown then
                # only closes (the run's end disposes of the sessions)
                self.aborted = True
                raise

        @initialize(versions=st.just([SUPPORTED_PROTOCOL_VERSIONS[0]]) | st.lists(
                        st.sampled_from(SUPPORTED_PROTOCOL_VERSIONS), min_size=1, max_size=2,
                        unique=True),
                    other=st.just(SUPPORTED_PROTOCOL_VERSIONS[-1])
                    | st.sampled_from(SUPPORTED_PROTOCOL_VERSIONS))
        def start(self, versions: list[str], other: str) -> None:
            # most of what is worth checking needs two clients sharing a session and a
            # chat; the first speaks the newest version half the time and the second the
            # oldest, so that actions the second does not know are sent where it listens
            self._run(op="connect", versions=versions)
            self._run(op="createSession", client=0)
            self._run(op="createChat", client=0, session=0)
            for client in (0, 1):
                if client == 1 and target.many:
                    self._run(op="connect", versions=[other])
                self._run(op="subscribe", client=client, channel=1)
                self._run(op="subscribe", client=client, channel=2)

        @precondition(lambda self: sum(c.link is not None for c in self.driver.clients) < 4)
        @rule(versions=_versions())
        def connect(self, versions: list[str]) -> None:
            self._run(op="connect", versions=versions)

        @precondition(lambda self: target.many)
        @rule(client=_CLIENT)
        def drop(self, client: int) -> None:
            self._run(op="drop", client=client)

        @precondition(lambda self: target.many)
        @rule(client=_CLIENT)
        def reconnect(self, client: int) -> None:
            self._run(op="reconnect", client=client)

        @rule(client=_CLIENT, channel=_CHANNEL)
        def subscribe(self, client: int, channel: int) -> None:
            self._run(op="subscribe", client=client, channel=channel)

        @rule(client=_CLIENT, channel=_CHANNEL)
        def unsubscribe(self, client: int, channel: int) -> None:
            self._run(op="unsubscribe", client=client, channel=channel)

        def _dispatch(self, client: int, channel: int, action: int, text: str,
                      flag: bool) -> None:
            # a client sends only what its version knows: the action is picked among those
            known = self.driver.known_actions(client)
            if known:
                self._run(op="dispatch", client=client, channel=channel,
                          action=known[action % len(known)], text=text, flag=flag)

        # actions are most of what a host handles: three rules, three times the weight
        @rule(client=_CLIENT, channel=_CHANNEL, action=_ACTION, text=_TEXT, flag=st.booleans())
        def dispatch(self, client: int, channel: int, action: int, text: str,
                     flag: bool) -> None:
            self._dispatch(client, channel, action, text, flag)

        @rule(client=_CLIENT, channel=_CHANNEL, action=_ACTION, text=_TEXT, flag=st.booleans())
        def dispatch_again(self, client: int, channel: int, action: int, text: str,
                           flag: bool) -> None:
            self._dispatch(client, channel, action, text, flag)

        @rule(client=_CLIENT, channel=_CHANNEL, action=_ACTION, text=_TEXT, flag=st.booleans())
        def dispatch_once_more(self, client: int, channel: int, action: int, text: str,
                               flag: bool) -> None:
            self._dispatch(client, channel, action, text, flag)

        @rule(client=_CLIENT, kind=st.sampled_from(MALFORMED))
        def malformed(self, client: int, kind: str) -> None:
            self._run(op="malformed", client=client, kind=kind)

        @rule(client=_CLIENT)
        def ping(self, client: int) -> None:
            self._run(op="ping", client=client)

        @rule(client=_CLIENT)
        def list_sessions(self, client: int) -> None:
            self._run(op="listSessions", client=client)

        @rule(client=_CLIENT)
        def create_session(self, client: int) -> None:
            self._run(op="createSession", client=client)

        @rule(client=_CLIENT, session=st.integers(min_value=0, max_value=3))
        def create_session_again(self, client: int, session: int) -> None:
            self._run(op="createSession", client=client, again=session)

        @rule(client=_CLIENT, session=st.integers(min_value=0, max_value=3))
        def create_chat(self, client: int, session: int) -> None:
            self._run(op="createChat", client=client, session=session)

        def teardown(self) -> None:
            # an interrupt between two steps ends the example as a failed step does
            if self.aborted or isinstance(sys.exc_info()[1], KeyboardInterrupt):
                self.driver.close()
                self.driver.recorder.forget()
                return
            transcript = self.driver.finish()
            # recorded and closed: the disposal is no part of what is checked
            cleanup.dispose()
            found = check(transcript)
            broken = [name for name, violations in found.items() if violations]
            if broken:
                runs.failing = (list(self.driver.steps), transcript, found)
                first = found[broken[0]][0]
                raise _Violated(str(first))

    return HostMachine


def check_host(target: Target, *, examples: int = 100, steps: int = 30, seed: int | None = None,
               timeout: float = 5.0, shrink_budget: float = 60.0,
               cleanup: Cleanup | None = None, budget: int | Budget = MAX_RECORDED_BYTES
               ) -> Outcome:
    """Run the state machine against ``target``; the smallest failing example, if any.

    Every session the run creates is disposed of: after each example (and each
    run while shrinking), and again at the end, also when the run fails or is
    interrupted (``KeyboardInterrupt`` then propagates, and ``cleanup``, if given,
    holds what is left).  Sessions it did not create are never touched.

    The host's messages the run holds at once (the example running, and the
    failing one it keeps while shrinking) are at most ``budget`` bytes: a host
    that sends more ends the run with an :attr:`Outcome.error` that says so.  A
    :class:`~agenthost_protocol.hostcheck.driver.Budget` may be shared with others."""
    cleanup = cleanup if cleanup is not None else Cleanup(target, timeout=timeout)
    try:
        outcome = _check_host(target, examples=examples, steps=steps, seed=seed,
                              timeout=timeout, shrink_budget=shrink_budget, cleanup=cleanup,
                              budget=budget)
    finally:
        cleanup.dispose()
    return evolve(outcome, created=cleanup.created, undisposed=tuple(cleanup.pending))


def _check_host(target: Target, *, examples: int, steps: int, seed: int | None,
                timeout: float, shrink_budget: float, cleanup: Cleanup, budget: int | Budget
                ) -> Outcome:
    runs = _Runs()
    traffic = budget if isinstance(budget, Budget) else Budget(budget)
    machine = _machine(target, runs, timeout, cleanup, traffic)
    test = get_state_machine_test(machine, settings=settings(
        max_examples=examples, stateful_step_count=steps, deadline=None, database=None,
        derandomize=False,
        suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet,
        report_multiple_bugs=False, print_blob=False,
        phases=(Phase.generate,)))
    if seed is not None:
        test = hypothesis_seed(seed)(test)
    started = time.monotonic()
    error = None
    try:
        test()
    except _Violated:
        pass
    except Flaky:
        pass  # the host did not fail the same way twice: the last failure is kept
    except (ConnectionError, OSError, TrafficLimit) as e:
        error = str(e)
    if runs.failing is None:
        seconds = time.monotonic() - started
        return Outcome(violations={p.name: () for p in PROPERTIES}, examples=runs.examples,
                       seconds=seconds, error=error)
    program, transcript, found = runs.failing
    broken = {name for name, violations in found.items() if violations}
    try:
        smaller = shrink(target, program, broken, timeout=timeout, budget=shrink_budget,
                         cleanup=cleanup, traffic=traffic)
    except (ConnectionError, OSError, TrafficLimit) as e:
        # the host went away or flooded while shrinking: the example found stands
        smaller, error = None, error or str(e)
    if smaller is not None:
        program, transcript, found = smaller
    return Outcome(violations=found, examples=runs.examples,
                   seconds=time.monotonic() - started, steps=program, transcript=transcript,
                   error=error)


Found = tuple[list[Step], Transcript, dict[str, tuple[Violation, ...]]]


def _fails(target: Target, program: list[Step], props: set[str], *, timeout: float,
           cleanup: Cleanup | None, traffic: int | Budget) -> Found | None:
    transcript = run_program(target, program, timeout=timeout, cleanup=cleanup, budget=traffic)
    found = check(transcript)
    return (program, transcript, found) if all(found.get(p) for p in props) else None


def shrink(target: Target, program: list[Step], props: set[str], *, timeout: float = 5.0,
           budget: float = 60.0, cleanup: Cleanup | None = None,
           traffic: int | Budget = MAX_RECORDED_BYTES) -> Found | None:
    """The smallest program found that still breaks the properties of ``props`` it
    breaks when run again: runs of steps are left out, halves first, then ever shorter
    runs, while the host still fails so (``None``: the program broke none of them
    again).  Keeping every such property keeps what the example showed: a fault that
    breaks two properties is not shrunk into an example of one of them.

    Hypothesis's own shrinker is not used: a stateful example keeps its length while it
    shrinks (a step can only become a simpler step), and every try is a live run.  After
    ``budget`` seconds the smallest found so far is the answer.  ``traffic`` bounds
    the bytes of the host's messages held at once (:func:`check_host`'s ``budget``;
    a number: of each run)."""
    # what a live host does again: a property broken by timing alone may not be, so
    # the program runs up to three times, and what none of them broke is let go
    best: Found | None = None
    again: set[str] = set()
    for _ in range(3):
        transcript = run_program(target, program, timeout=timeout, cleanup=cleanup,
                                 budget=traffic)
        found = check(transcript)
        broken = {p for p in props if found.get(p)}
        if best is None or len(broken) > len(again):
            best, again = (program, transcript, found), broken
        if again == props:
            break
    props = again
    if best is None or not props:
        return None
    steps = best[0]
    chunk = max(1, len(steps) // 2)
    ends = time.monotonic() + budget
    while True:
        start = 0
        while start < len(steps):
            if time.monotonic() > ends:
                return best
            candidate = steps[:start] + steps[start + chunk:]
            smaller = _fails(target, candidate, props, timeout=timeout, cleanup=cleanup,
                             traffic=traffic) if candidate else None
            if smaller is not None:
                best, steps = smaller, candidate
            else:
                start += chunk
        if chunk == 1:
            return best
        chunk = max(1, chunk // 2)


def replay(target: Target, program: Sequence[Step], *, timeout: float = 5.0,
           cleanup: Cleanup | None = None, budget: int = MAX_RECORDED_BYTES) -> Outcome:
    """Run one program again (``check-host --replay``) and check it; the sessions it
    creates are disposed of as :func:`check_host` does.  A host that sends more than
    ``budget`` bytes raises :class:`~agenthost_protocol.hostcheck.driver.TrafficLimit`."""
    cleanup = cleanup if cleanup is not None else Cleanup(target, timeout=timeout)
    started = time.monotonic()
    try:
        transcript = run_program(target, program, timeout=timeout, cleanup=cleanup,
                                 budget=budget)
    finally:
        cleanup.dispose()
    return Outcome(violations=check(transcript), examples=1,
                   seconds=time.monotonic() - started, steps=list(program),
                   transcript=transcript, created=cleanup.created,
                   undisposed=tuple(cleanup.pending))
