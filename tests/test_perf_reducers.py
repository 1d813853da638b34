"""The fast paths of the reducers and the decoder give what the plain code gives.

Each shortcut is checked against the code it stands for, on the action
sequences of ``test_chat_reducer`` (ids from small pools, so that actions
find their parts and tool calls, in any order) and on model values drawn
from ``agenthost_protocol.testing.strategies``:

* the ``chat/delta`` path written into ``chat_reducer`` against the scan of
  ``_append_text``;
* a tool-call transition (one scan, one copy) against the update of every
  matching call followed by the status recompute of ``chat_status``;
* the generated copies of ``reducers._copy`` against ``attrs.evolve``;
* a finished turn's texts, kept without their lines (``TextBuffer.settle``);
* the decoder: model objects built without their ``__init__``, and the names
  that recur in a chat shared.
"""

from __future__ import annotations

import inspect
import random
import threading
from typing import Any, get_args

import attrs
import pytest
from attrs.exceptions import FrozenInstanceError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agenthost_protocol import types as t
from agenthost_protocol import wire
from agenthost_protocol.reducers import _copy, _status
from agenthost_protocol.reducers import chat as chat_module
from agenthost_protocol.reducers.chat import chat_reducer
from agenthost_protocol.testing import strategies as ahst
from agenthost_protocol.types._text import TextBuffer

from .test_chat_reducer import (
    _ACTIONS,
    _INITIAL,
    IN_PROGRESS,
    active,
    clock,
    complete_turn,
    delta,
    markdown,
    reasoning,
    running,
    tc_part,
)

_TRANSITIONS: dict[type, Any] = {
    t.ChatToolCallReadyAction: chat_module._ready,
    t.ChatToolCallApprovedAction: chat_module._approved,
    t.ChatToolCallDeniedAction: chat_module._denied,
    t.ChatToolCallCompleteAction: chat_module._complete,
    t.ChatToolCallResultConfirmedAction: chat_module._result_confirmed,
    t.ChatToolCallAuthRequiredAction: chat_module._auth_required,
    t.ChatToolCallAuthResolvedAction: chat_module._auth_resolved,
}

# A call of a status from a newer peer, with the id the actions use.
_FUTURE_CALL = t.UnknownToolCallState(
    status="future", raw={"status": "future", "toolCallId": "tc-1", "toolName": "t"}
)
_INITIAL_WITH_FUTURE = st.one_of(
    _INITIAL,
    st.just(active(tc_part(_FUTURE_CALL), markdown(), tc_part(running("tc-2")))),
)


def _recomputed(state: t.ChatState, action: Any) -> t.ChatState:
    """What a transition did before it was fused: every matching call updated, then
    the status recomputed."""
    new = chat_module._update_tool_calls(state, action, _TRANSITIONS[type(action)])
    status = _status.chat_status(new.status, new.active_turn)
    if status == new.status:
        return new
    return attrs.evolve(new, status=status)


@given(_INITIAL_WITH_FUTURE, st.lists(_ACTIONS, max_size=40))
def test_fast_paths_give_what_the_plain_code_gives(
    initial: t.ChatState, actions: list[t.StateAction]
) -> None:
    state = initial
    for action in actions:
        new = chat_reducer(state, action, now=clock)
        if type(action) in _TRANSITIONS:
            expected = _recomputed(state, action)
            assert new == expected, action
            assert (new is state) == (expected is state), action
        elif type(action) is t.ChatDeltaAction:
            scanned = chat_module._append_text(
                state, action, t.MarkdownResponsePart, chat_module._with_markdown_text
            )
            assert new == scanned, action
            assert (new is state) == (scanned is state), action
        assert (new is state) == (new == state), action
        state = new


@given(st.lists(st.sampled_from(["a", "bc", "", "d" * 40]), max_size=120), st.randoms())
def test_streamed_texts_match_plain_strings(texts: list[str], rnd: random.Random) -> None:
    """Deltas to the newest state, to older states (branches) and to a second part."""
    states = [active(markdown("md-1"), markdown("md-2"))]
    expected = [("", "")]
    for text in texts:
        base = rnd.randrange(len(states)) if rnd.random() < 0.2 else len(states) - 1
        part_id = "md-2" if rnd.random() < 0.9 else "md-1"
        states.append(chat_reducer(states[base], delta(text, part_id), now=clock))
        one, two = expected[base]
        expected.append((one + text, two) if part_id == "md-1" else (one, two + text))
    for state, (one, two) in zip(states, expected, strict=True):
        assert state.active_turn is not None
        parts = state.active_turn.response_parts
        assert isinstance(parts[0], t.MarkdownResponsePart)
        assert isinstance(parts[1], t.MarkdownResponsePart)
        assert (parts[0].content, parts[1].content) == (one, two)


def test_reasoning_streams_through_its_own_fast_path() -> None:
    state = active(t.ReasoningResponsePart(id="r-1", content=""))
    for text in ("a", "b", "c"):
        state = chat_reducer(state, reasoning(text), now=clock)
    assert state.active_turn is not None
    part = state.active_turn.response_parts[0]
    assert isinstance(part, t.ReasoningResponsePart) and part.content == "abc"


# ─── The reducer's shape ─────────────────────────────────────────────────────


def test_the_fused_reducer_has_the_signature_and_routing_of_the_def() -> None:
    reference = chat_reducer.__wrapped__  # type: ignore[attr-defined]
    assert inspect.signature(chat_reducer) == inspect.signature(reference)
    assert chat_reducer.__doc__ == reference.__doc__
    assert chat_reducer.__module__ == "agenthost_protocol.reducers.chat"
    assert frozenset(chat_module._HANDLERS) == frozenset(get_args(t.ChatAction))
    state = active(markdown(content="x"))
    for action in (delta("y"), reasoning("y", part_id="md-1"), complete_turn()):
        assert reference(state, action, now=clock) == chat_reducer(state, action, now=clock)


# ─── Generated copies ────────────────────────────────────────────────────────

_COPIED = [
    t.ChatState, t.SessionState, t.RootState, t.TerminalState, t.ChangesetState,
    t.AnnotationsState, t.ToolCallRunningState, t.MarkdownResponsePart,
    t.TerminalUnclassifiedPart, t.PluginCustomization, t.ChatSummary,
]


@pytest.mark.parametrize("cls", _COPIED, ids=lambda c: c.__name__)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_evolve_is_attrs_evolve(cls: type, data: st.DataObject) -> None:
    old = data.draw(ahst.from_type(cls, max_depth=2), label="old")
    other = data.draw(ahst.from_type(cls, max_depth=2), label="other")
    fields = attrs.fields(cls)
    chosen = data.draw(st.sets(st.sampled_from([f.name for f in fields])), label="fields")
    # ``__init__`` names, and the values as ``__init__`` takes them (a text as ``str``).
    changes = {
        (f.alias or f.name): (
            getattr(other, f.name).value
            if isinstance(getattr(other, f.name), TextBuffer)
            else getattr(other, f.name)
        )
        for f in fields
        if f.name in chosen
    }
    new = _copy.evolve(old, **changes)
    assert type(new) is cls
    assert new == attrs.evolve(old, **changes)
    assert wire.unstructure(new) == wire.unstructure(attrs.evolve(old, **changes))
    with pytest.raises(FrozenInstanceError):
        new.anything = 1  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        _copy.evolve(old, no_such_field=1)


# ─── Finished turns keep their text without the line ─────────────────────────


def test_a_finished_turn_keeps_its_texts_as_strings() -> None:
    state = active(markdown("md-1"), t.ReasoningResponsePart(id="r-1", content="r"))
    states = [state]
    for i in range(100):
        states.append(chat_reducer(states[-1], delta(f"<{i}>"), now=clock))
    states.append(chat_reducer(states[-1], reasoning("!"), now=clock))
    text = "".join(f"<{i}>" for i in range(100))
    ended = chat_reducer(states[-1], complete_turn(), now=clock)
    turn = ended.turns[-1]
    for part, value in zip(turn.response_parts, (text, "r!"), strict=True):
        assert isinstance(part, (t.MarkdownResponsePart, t.ReasoningResponsePart))
        assert part._content._line is None and part.content == value
    # The states before keep their texts, and can still be extended.
    for i, older in enumerate(states[:101]):
        assert older.active_turn is not None
        part = older.active_turn.response_parts[0]
        assert isinstance(part, t.MarkdownResponsePart)
        assert part.content == text[: len("".join(f"<{j}>" for j in range(i)))]
    grown = chat_reducer(states[-1], delta("+"), now=clock)
    assert grown.active_turn is not None
    part = grown.active_turn.response_parts[0]
    assert isinstance(part, t.MarkdownResponsePart) and part.content == text + "+"


def test_a_settled_text_reads_and_grows_as_before() -> None:
    buffers = [TextBuffer.of("")]
    for i in range(200):
        buffers.append(buffers[-1].appended(f"{i},"))
    newest = buffers[-1]
    branch = buffers[50].appended("x")
    value = newest.value
    newest.settle()
    assert newest._line is None and newest.value == value and len(newest) == len(value)
    assert newest.appended("!").value == value + "!"
    assert buffers[120].value == "".join(f"{i}," for i in range(120))
    assert branch.value == "".join(f"{i}," for i in range(50)) + "x"
    assert newest == TextBuffer.of(value) and hash(newest) == hash(value)
    newest.settle()  # settling twice changes nothing
    assert newest.value == value


def test_settling_while_other_threads_read() -> None:
    for _ in range(20):
        buffers = [TextBuffer.of("")]
        for i in range(300):
            buffers.append(buffers[-1].appended(f"{i};"))
        # Branches whose prefix is the handle being settled.
        branches = [buffers[-1].appended(f"<{n}>") for n in range(8)]
        expected = "".join(f"{i};" for i in range(300))
        seen: list[str] = []
        barrier = threading.Barrier(9)

        def read(n: int, barrier: threading.Barrier, branches: list[TextBuffer]) -> None:
            barrier.wait()
            seen.append(branches[n].value)  # noqa: B023

        threads = [
            threading.Thread(target=read, args=(n, barrier, branches)) for n in range(8)
        ]
        for thread in threads:
            thread.start()
        barrier.wait()
        buffers[-1].settle()
        for thread in threads:
            thread.join()
        assert sorted(seen) == sorted(expected + f"<{n}>" for n in range(8))


# ─── The decoder ─────────────────────────────────────────────────────────────


def test_decoded_objects_are_built_without_their_init() -> None:
    for cls in (t.ChatDeltaAction, t.ActionEnvelope, t.JsonRpcNotification,
                t.MarkdownResponsePart, t.ToolCallResult):
        assert wire._plain_init(cls), cls
    line = (
        '{"jsonrpc":"2.0","method":"action","params":{"channel":"ahp-chat:/c","serverSeq":1,'
        '"action":{"type":"chat/responsePart","turnId":"t","part":{"kind":"markdown",'
        '"id":"m","content":"x"}}}}'
    )
    message: Any = wire.parse_message(line)
    part = message.params.action.part
    assert type(message) is t.JsonRpcNotification
    assert type(message.params) is t.ActionEnvelope
    assert type(part) is t.MarkdownResponsePart and part.content == "x"
    assert type(part._content) is TextBuffer
    with pytest.raises(FrozenInstanceError):
        part.id = "y"  # type: ignore[misc]
    assert wire.dumps(message) == wire.dumps(wire.parse_message(wire.dumps(message)))


def test_names_that_recur_in_a_chat_are_decoded_once() -> None:
    def start(call: str) -> Any:
        return wire.parse_action({
            "type": "chat/toolCallStart", "turnId": "turn-1", "toolCallId": call,
            "toolName": "".join(["gr", "ep"]), "displayName": "".join(["Sea", "rch"]),
            "contributor": {"kind": "client", "clientId": "".join(["cl", "ient-1"])},
        })

    one, two = start("tc-1"), start("tc-2")
    assert one.tool_name is two.tool_name and one.tool_name == "grep"
    assert one.display_name is two.display_name
    assert one.contributor.client_id is two.contributor.client_id
    assert one.tool_call_id is not two.tool_call_id
    state = chat_reducer(
        chat_reducer(active(), one, now=clock), two, now=clock
    )
    assert state.status == IN_PROGRESS
    calls: list[Any] = [p.tool_call for p in state.active_turn.response_parts]  # type: ignore[union-attr]
    assert calls[0].tool_name is calls[1].tool_name


@pytest.mark.parametrize("cls", sorted(get_args(t.ChatAction), key=str))
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_handler_table_is_the_exhaustive_match(cls: type, data: st.DataObject) -> None:
    # the type checker proves _handler_of covers ChatAction; the table routes by class
    action = data.draw(ahst.from_type(cls))
    assert chat_module._handler_of(action) is chat_module._HANDLERS[cls]
