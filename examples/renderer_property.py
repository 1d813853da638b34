"""A property test of a client's renderer on states the reducers really produce (random
actions reduced: interleaved turns, unknown kinds, out-of-order actions; no fixtures).
Run: ``.venv/bin/python -m examples.renderer_property`` (needs hypothesis, extra testing)."""

from __future__ import annotations

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from agenthost_protocol import types as t
from agenthost_protocol.reducers import reduce
from agenthost_protocol.testing import strategies as ahst

CHAT, EXAMPLES, TEXT = "ahp-chat:/example", 100, st.text(max_size=12)
USER = t.MessageOrigin(kind=t.MessageKind.USER)


def all_turns(state: t.ChatState) -> tuple[t.Turn | t.ActiveTurn, ...]:
    return (*state.turns, *([state.active_turn] if state.active_turn else []))


def render(state: t.ChatState) -> str:
    """The chat as text: each turn's message, markdown and tool calls (other parts: skipped)."""
    lines = [f"# {state.title}"]
    for turn in all_turns(state):
        lines.append(f"> {turn.message.text}")
        for part in turn.response_parts:
            if isinstance(part, t.MarkdownResponsePart):
                lines.append(part.content)
            elif isinstance(part, t.ToolCallResponsePart):
                call = part.tool_call
                # a newer host's tool-call status has no class here: show its raw name
                lines.append(f"[tool: {call.status}]" if isinstance(call, t.UnknownToolCallState)
                             else f"[{call.display_name}: {call.status.value}]")
    return "\n".join(lines)


@st.composite
def turns(draw: st.DrawFn) -> list[t.StateAction]:
    """Whole turns, arbitrary chat actions between: random ids alone would hit nothing."""
    actions: list[t.StateAction] = []
    for n in range(draw(st.integers(0, 3))):
        turn, parts = f"t{n}", list[str]()
        actions.append(t.ChatTurnStartedAction(turn_id=turn, started_at="2026-01-01T00:00:00Z",
                                               message=t.Message(text=draw(TEXT), origin=USER)))
        for step in draw(st.lists(st.sampled_from(["part", "delta", "tool", "any"]), max_size=8)):
            if step == "part" or (step == "delta" and not parts):
                parts.append(f"{turn}.p{len(parts)}")
                actions.append(t.ChatResponsePartAction(turn_id=turn, part=t.MarkdownResponsePart(
                    id=parts[-1], content=draw(TEXT))))
            elif step == "delta":
                actions.append(t.ChatDeltaAction(turn_id=turn, part_id=draw(st.sampled_from(parts)),
                                                 content=draw(TEXT)))
            elif step == "tool":
                actions.append(t.ChatToolCallStartAction(
                    turn_id=turn, tool_call_id=f"c{len(actions)}", tool_name="x",
                    display_name=draw(TEXT)))
            else:
                actions.append(draw(ahst.actions("chat", max_depth=2)))
        if draw(st.booleans()):
            actions.append(t.ChatTurnCompleteAction(turn_id=turn, duration=1))
    return actions


@settings(max_examples=EXAMPLES, derandomize=True, deadline=None,  # the same 100 every run
          phases=[p for p in Phase if p is not Phase.explain],  # explain re-runs for minutes
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(state=ahst.states(t.ChatState, max_depth=2), actions=turns())
def test_render_shows_all_markdown(state: t.ChatState, actions: list[t.StateAction]) -> None:
    for action in actions:
        state = reduce(CHAT, state, action, now=lambda: 1_767_225_600_000)
    text = render(state)  # a raise here is a failure hypothesis shrinks and reports
    assert all(part.content in text for turn in all_turns(state) for part in turn.response_parts
               if isinstance(part, t.MarkdownResponsePart)), text


if __name__ == "__main__":
    test_render_shows_all_markdown()
    print(f"render: {EXAMPLES} reduced chat states rendered, every markdown part shown")
