"""The web client's reducers (``web/ahp/reducers.js``), run in Chromium, against the Python ones.

* the official reducer corpus, as ``tests/test_reducer_fixtures.py`` runs it in Python;
* differential: generated states and action sequences (the library's
  hypothesis strategies, with ids drawn from a small pool so that actions
  meet the turns, parts, tool calls and requests they name), encoded with the
  wire codec, reduced by Python and by ``reduce`` in the page: every
  intermediate state equal as JSON, and returned as the state itself exactly
  when Python returns the state itself.  The page freezes every state and
  action it reduces, so a reducer that modified its input would throw.
  Many sequences go to the page in one call;
* ``channelKind`` and the ``modifiedAt`` clock against their Python twins.
"""

from __future__ import annotations

import importlib.util
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agenthost_protocol import types as t
from agenthost_protocol import wire
from agenthost_protocol.channels import ChannelKind, channel_kind
from agenthost_protocol.conformance import bundled_corpus, strip_nulls
from agenthost_protocol.errors import ProtocolError
from agenthost_protocol.reducers import REDUCERS, STATE_TYPES
from agenthost_protocol.reducers._clock import iso_timestamp
from agenthost_protocol.testing import strategies as ahst

from . import _browser, _web_modules
from ._web_modules import canonical, pooled

# the fixtures, by name (a test's parameter names its fixture)
browser = _browser.browser
module_page = _web_modules.module_page

if TYPE_CHECKING:
    from playwright.sync_api import Page

CORPUS = sorted((bundled_corpus() / "reducers").glob("*.json"))
KINDS = sorted(STATE_TYPES, key=lambda kind: kind.value)
BATCH = 6
"""Sequences per call into the page."""

_RUN_CORPUS = """async (text) => {
  const { reduce } = await import("/ahp/reducers.js");
  const out = {};
  for (const [name, fixture] of Object.entries(JSON.parse(text))) {
    let state = fixture.initial;
    try {
      for (const action of fixture.actions) state = reduce(fixture.reducer, state, action, 9999);
      out[name] = { state };
    } catch (error) {
      out[name] = { error: String(error && error.stack || error) };
    }
  }
  return JSON.stringify(out);
}"""

_RUN_SEQUENCES = """async (text) => {
  const { reduce } = await import("/ahp/reducers.js");
  // frozen deeply: in a module (strict code) a write to a frozen object throws
  const freeze = (value) => {
    if (value !== null && typeof value === "object" && !Object.isFrozen(value)) {
      Object.freeze(value);
      for (const key of Object.keys(value)) freeze(value[key]);
    }
    return value;
  };
  const { normalizeState } = await import("/ahp/reducers.js");
  return JSON.stringify(JSON.parse(text).map((sequence) => {
    // a state with keys no AHP type defines is read as the codec reads it
    let state = freeze(sequence.normalize
      ? normalizeState(sequence.kind, sequence.initial) : sequence.initial);
    const read = state;
    return [read, sequence.actions.map((action, index) => {
      let next;
      try {
        next = reduce(sequence.kind, state, freeze(action), sequence.clock[index]);
      } catch (error) {
        return { error: String(error && error.stack || error) };
      }
      const same = next === state;
      state = freeze(next);
      return { state: next, same };
    })];
  }));
}"""


# -- the corpus --------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus_results(module_page: Page) -> dict[str, Any]:
    """Every corpus case reduced in the page, in one call."""
    fixtures = {path.stem: json.loads(path.read_text(encoding="utf-8")) for path in CORPUS}
    results: dict[str, Any] = json.loads(module_page.evaluate(_RUN_CORPUS, json.dumps(fixtures)))
    return results


def test_corpus_is_there() -> None:
    assert len(CORPUS) == 247


@pytest.mark.parametrize("path", CORPUS, ids=[path.stem for path in CORPUS])
def test_corpus_case(path: Path, corpus_results: dict[str, Any]) -> None:
    fixture = json.loads(path.read_text(encoding="utf-8"))
    result = corpus_results[path.stem]
    assert "error" not in result, result.get("error")
    assert canonical(strip_nulls(result["state"])) == canonical(strip_nulls(fixture["expected"]))


# -- differential ------------------------------------------------------------------

_CLOCK = st.one_of(
    st.integers(1_600_000_000_000, 1_900_000_000_000),
    st.integers(-9 * 10**15, 9 * 10**15),  # both ends of the Date range, and beyond
)


@st.composite
def _sequence(draw: st.DrawFn, kind: ChannelKind) -> tuple[Any, list[Any], list[int]]:
    initial = pooled(draw, draw(ahst.states(STATE_TYPES[kind], max_depth=2)))
    own = ahst.actions(kind, max_depth=2)
    if kind is ChannelKind.CHAT and draw(st.booleans()):
        # a story: one turn, started first, that most of what follows addresses
        start = draw(ahst.from_type(t.ChatTurnStartedAction, max_depth=2))
        actions: list[Any] = [attrs.evolve(start, turn_id="a")]
        for cls in draw(st.lists(st.sampled_from(_STORY), min_size=3, max_size=16)):
            if cls is t.ChatResponsePartAction and draw(_MOSTLY):
                action = draw(_TEXT_PART)
            else:
                action = pooled(draw, draw(ahst.from_type(cls, max_depth=2)))
            changes: dict[str, Any] = {}
            for name in ("tool_call_id", "part_id", "request_id"):
                if hasattr(action, name):
                    changes[name] = draw(st.sampled_from(("a", "b")))
            if hasattr(action, "turn_id") and draw(_MOSTLY):
                changes["turn_id"] = "a"
            actions.append(attrs.evolve(action, **changes))
    else:
        drawn = draw(st.lists(st.one_of(own, own, own, ahst.actions(max_depth=1)), max_size=10))
        actions = [pooled(draw, action) for action in drawn]
    clock = draw(st.lists(_CLOCK, min_size=len(actions), max_size=len(actions)))
    return initial, actions, clock


_MOSTLY = st.sampled_from((True, True, True, True, False))
# a part that deltas and reasoning can stream into (a generated part rarely is one)
_TEXT_PART = st.builds(
    lambda cls, part_id, text: t.ChatResponsePartAction(
        turn_id="a", part=cls(id=part_id, content=text)
    ),
    st.sampled_from((t.MarkdownResponsePart, t.ReasoningResponsePart)),
    st.sampled_from(("a", "b")),
    st.text(max_size=5),
)
_STORY = (
    # what happens within a turn, often ...
    *(2 * (
        t.ChatDeltaAction, t.ChatReasoningAction, t.ChatResponsePartAction,
        t.ChatToolCallStartAction, t.ChatToolCallReadyAction, t.ChatToolCallApprovedAction,
        t.ChatToolCallCompleteAction, t.ChatInputRequestedAction,
    )),
    t.ChatToolCallDeltaAction, t.ChatToolCallDeniedAction, t.ChatToolCallResultConfirmedAction,
    t.ChatToolCallAuthRequiredAction, t.ChatToolCallAuthResolvedAction,
    t.ChatToolCallContentChangedAction, t.ChatInputAnswerChangedAction,
    t.ChatInputCompletedAction, t.ChatUsageAction, t.ChatPendingMessageSetAction,
    # ... and what ends it, rarely
    t.ChatTurnCompleteAction, t.ChatTurnCancelledAction, t.ChatErrorAction,
    t.ChatTruncatedAction, t.ChatTurnStartedAction,
)


def _python_steps(
    kind: ChannelKind, initial: Any, actions: list[Any], clock: list[int]
) -> list[tuple[Any, bool]]:
    reducer = REDUCERS[kind]
    state = initial
    steps = []
    for action, ms in zip(actions, clock, strict=True):
        new = reducer(state, action, now=_fixed(ms))
        steps.append((wire.unstructure(new), new is state))
        state = new
    return steps


def _fixed(ms: int) -> Callable[[], int]:
    return lambda: ms


def _strangers(rng: random.Random, value: Any) -> Any:
    """``value`` (wire JSON) with keys no AHP type defines added to some of its objects.

    The Python codec drops them on decoding (but inside any-JSON values and
    the raw objects of unknown variants, which it keeps as they are).
    """
    if isinstance(value, list):
        return [_strangers(rng, item) for item in value]
    if not isinstance(value, dict):
        return value
    out = {key: _strangers(rng, item) for key, item in value.items()}
    if rng.random() < 0.3:
        out[rng.choice(("x-newer", "zz", "__proto__", "constructor"))] = rng.choice(
            (None, 1, "text", {"nested": True}, [1, {"k": None}])
        )
    return out


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.value)
@settings(max_examples=max(5, settings().max_examples // 4))
@given(data=st.data())
def test_reducers_agree_with_python(
    module_page: Page, kind: ChannelKind, data: st.DataObject
) -> None:
    batch = data.draw(st.lists(_sequence(kind), min_size=1, max_size=BATCH), label="sequences")
    rng = data.draw(st.randoms(use_true_random=False), label="strangers")
    sent = []
    runs = []
    for initial, actions, clock in batch:
        state_json = wire.unstructure(initial)
        action_json = [wire.unstructure(action) for action in actions]
        strange = rng.random() < 0.5
        if strange:
            # what the page is sent carries keys no AHP type defines; Python reads it
            # (a key added to a map, not a struct, may be a value Python refuses: then
            # the sequence goes as it was)
            strange_state = _strangers(rng, state_json)
            strange_actions = [_strangers(rng, action) for action in action_json]
            try:
                read = wire.structure(strange_state, STATE_TYPES[kind])
                parsed = [wire.parse_action(a) for a in strange_actions]
            except ProtocolError:
                strange = False
            else:
                state_json, action_json = strange_state, strange_actions
                initial, actions = read, parsed  # noqa: PLW2901
        sent.append({"kind": kind.value, "initial": state_json, "actions": action_json,
                     "clock": clock, "normalize": strange})
        runs.append((initial, actions, clock))
    results = json.loads(module_page.evaluate(_RUN_SEQUENCES, json.dumps(sent)))
    for (initial, actions, clock), (read, steps) in zip(runs, results, strict=True):
        assert canonical(read) == canonical(wire.unstructure(initial))
        expected = _python_steps(kind, initial, actions, clock)
        for index, ((state, same), got) in enumerate(zip(expected, steps, strict=True)):
            action = wire.unstructure(actions[index])
            assert "error" not in got, (action, got.get("error"))
            assert canonical(got["state"]) == canonical(state), (index, action)
            assert got["same"] == same, (index, action, "identity")


def test_shapes_are_current() -> None:
    """``web/ahp/shapes.js`` is what ``tools/gen_web_shapes.py`` makes of the model."""
    tool = Path(__file__).resolve().parent.parent / "tools" / "gen_web_shapes.py"
    spec = importlib.util.spec_from_file_location("gen_web_shapes", tool)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.TARGET.read_text(encoding="utf-8") == module.render(), (
        "regenerate: python tools/gen_web_shapes.py"
    )


# -- channel kinds and the clock ---------------------------------------------------

_URIS = [
    "ahp-root://", "ahp-root:", "ahp-session:/s1", "ahp-session:/s1/annotations",
    "ahp-session:/annotations", "ahp-session://annotations", "ahp-session:/a/b/annotations",
    "ahp-session:/annotations/annotations", "ahp-session:/x/annotations/", "ahp-chat:/c",
    "ahp-terminal:/t", "ahp-changeset:/x", "ahp-resource-watch:/w", "ahp-otlp:/o", "mcp:/m",
    "file:///tmp", "", "AHP-ROOT://",
]


@settings(max_examples=max(5, settings().max_examples // 5))
@given(extra=st.lists(st.one_of(ahst.channel_uris(), st.text(max_size=30)), max_size=40))
def test_channel_kind_agrees_with_python(module_page: Page, extra: list[str]) -> None:
    uris = _URIS + extra
    got = module_page.evaluate(
        """async (uris) => {
          const { channelKind } = await import("/ahp/reducers.js");
          return uris.map(channelKind);
        }""",
        uris,
    )
    expected = [None if (kind := channel_kind(uri)) is None else kind.value for uri in uris]
    assert got == expected


@settings(max_examples=max(5, settings().max_examples // 5))
@given(values=st.lists(
    st.one_of(
        st.integers(-9 * 10**15, 9 * 10**15),
        st.floats(allow_nan=False, allow_infinity=False, min_value=-1e17, max_value=1e17),
        st.sampled_from([0, -1, 253402300800000, -62198755200000, 8.64e15, -8.64e15, 0.5]),
    ),
    max_size=40,
))
def test_iso_timestamp_agrees_with_python(module_page: Page, values: list[float]) -> None:
    got = module_page.evaluate(
        """async (values) => {
          const { isoTimestamp } = await import("/ahp/reducers.js");
          return [...values.map(isoTimestamp), isoTimestamp(NaN), isoTimestamp(Infinity),
                  isoTimestamp(-Infinity)];
        }""",
        values,
    )
    specials = [float("nan"), float("inf"), float("-inf")]
    assert got == [iso_timestamp(value) for value in [*values, *specials]]


def test_keys_named_like_object_properties_are_data(module_page: Page) -> None:
    """A question id ``__proto__`` is a key like any other, and a kind ``toString`` no kind."""
    chat = {
        "resource": "ahp-chat:/c", "title": "", "status": 8, "modifiedAt": "", "turns": [],
        "activeTurn": {
            "id": "t", "startedAt": "", "message": {"text": "", "origin": {"kind": "user"}},
            "responseParts": [{"kind": "inputRequest", "request": {"id": "r"}}],
        },
    }
    answer = {"state": "draft", "value": {"kind": "text", "value": "x"}}
    actions = [
        {"type": "chat/inputAnswerChanged", "requestId": "r", "questionId": "__proto__",
         "answer": answer},
        {"type": "chat/inputAnswerChanged", "requestId": "r", "questionId": "constructor",
         "answer": answer},
        {"type": "chat/inputAnswerChanged", "requestId": "r", "questionId": "__proto__"},
        {"type": "chat/inputCompleted", "requestId": "r", "response": "accept",
         "answers": {"__proto__": answer}},
    ]
    got = json.loads(module_page.evaluate(
        """async (text) => {
          const { reduce } = await import("/ahp/reducers.js");
          const [state, actions] = JSON.parse(text);
          const states = [];
          let current = state;
          for (const action of actions) states.push(current = reduce("chat", current, action, 0));
          const odd = ["toString", "constructor", "__proto__", "hasOwnProperty"]
            .every((kind) => reduce(kind, state, actions[0], 0) === state);
          return JSON.stringify({ states, odd });
        }""",
        json.dumps([chat, actions]),
    ))
    state = wire.structure(chat, t.ChatState)
    expected = []
    for action in actions:
        state = REDUCERS[ChannelKind.CHAT](state, wire.parse_action(action), now=lambda: 0)
        expected.append(wire.unstructure(state))
    assert [canonical(s) for s in got["states"]] == [canonical(s) for s in expected]
    assert got["odd"] is True
