"""An agent that asks you one question of each kind, then tells you what you answered.

    agenthost-protocol serve --agent examples.ask:agent          # from the repository root
    agenthost-protocol chat 'ws://127.0.0.1:8765/?token=...' "ask me"

``chat`` puts each question on the terminal (or reads one line per question
from piped input: ``printf 'Ada\\n4\\n0.5\\ny\\n2\\n1,3\\n' | chat URL "ask me"``).

    .venv/bin/python -m examples.ask

runs a self-check instead: the agent on a host in this process, a client that
answers its questions the way ``chat`` does, and the agent's report printed.
"""

from __future__ import annotations

import asyncio
import time

from agenthost_protocol import types as t
from agenthost_protocol.agent import Agent, Turn

QUESTIONS: tuple[t.ChatInputQuestion, ...] = (
    t.ChatInputTextQuestion(id="name", title="Name", message="What should I call you?",
                            default_value="friend", max=80),
    t.ChatInputNumberQuestion(kind=t.ChatInputQuestionKind.INTEGER, id="cups",
                              message="How many cups of tea today?", min=0, max=20,
                              default_value=2),
    t.ChatInputNumberQuestion(kind=t.ChatInputQuestionKind.NUMBER, id="sugar",
                              message="Spoons of sugar per cup?", min=0, max=5, required=True),
    t.ChatInputBooleanQuestion(id="milk", message="Milk?", default_value=True),
    t.ChatInputSingleSelectQuestion(
        id="tea", message="Which tea?", allow_freeform_input=True, options=(
            t.ChatInputOption(id="green", label="Green"),
            t.ChatInputOption(id="black", label="Black", recommended=True,
                              description="strong"),
            t.ChatInputOption(id="mint", label="Mint"),
        )),
    t.ChatInputMultiSelectQuestion(
        id="snacks", message="Anything with it?", min=1, options=(
            t.ChatInputOption(id="biscuit", label="Biscuits"),
            t.ChatInputOption(id="cake", label="Cake"),
            t.ChatInputOption(id="scone", label="Scones"),
        )),
)


def describe(question: t.ChatInputQuestion, answer: t.ChatInputAnswer | None) -> str:
    """An answer in words (the options by their labels)."""
    if answer is None:
        return "no answer"
    if isinstance(answer, t.ChatInputSkipped):
        return "skipped"
    if not isinstance(answer, t.ChatInputAnswered):
        return "an answer of an unknown kind"
    value = answer.value
    labels: dict[str, str] = {}
    if isinstance(question, (t.ChatInputSingleSelectQuestion, t.ChatInputMultiSelectQuestion)):
        labels = {o.id: o.label for o in question.options}
    if isinstance(value, t.ChatInputTextAnswerValue):
        return repr(value.value)
    if isinstance(value, t.ChatInputNumberAnswerValue):
        return f"{value.value:g}"
    if isinstance(value, t.ChatInputBooleanAnswerValue):
        return "yes" if value.value else "no"
    if isinstance(value, t.ChatInputSelectedAnswerValue):
        return labels.get(value.value, repr(value.value))
    if isinstance(value, t.ChatInputSelectedManyAnswerValue):
        chosen = [labels.get(v, repr(v)) for v in value.value]
        chosen += [repr(v) for v in value.freeform_values or ()]
        return ", ".join(chosen) or "none"
    return "an answer of an unknown kind"


class Ask(Agent):
    provider = "ask"
    display_name = "Ask"
    description = "Asks one question of each kind, then tells you what you answered."

    async def turn(self, turn: Turn) -> None:
        await turn.stream("Before I make the tea, a few questions.")
        done = await turn.ask("Tea time", QUESTIONS)
        if done.response != t.ChatInputResponseKind.ACCEPT:
            # decline: the user said no; cancel: the user dismissed the questions
            response = getattr(done.response, "value", done.response)
            await turn.stream(f"\n\nNo tea, then (you chose to {response}).")
            return
        answers = done.answers or {}
        lines = [f"- {q.message} {describe(q, answers.get(q.id))}"
                 for q in QUESTIONS if not isinstance(q, t.UnknownChatInputQuestion)]
        await turn.stream("\n\nYou answered:\n\n" + "\n".join(lines) + "\n")


agent = Ask()


# -- the self-check: python -m examples.ask ------------------------------------------------

WAIT = 10.0  # seconds for any one step: a stuck example fails instead of hanging CI


async def self_check() -> str:
    """Play one turn against the agent in-process, answer as ``chat`` would; the reply."""
    from agenthost_protocol.agent import build_agent_server  # noqa: PLC0415
    from agenthost_protocol.agent.hosting import ServeOptions  # noqa: PLC0415
    from agenthost_protocol.aio import connected_client  # noqa: PLC0415

    def submitted(value: t.ChatInputAnswerValue) -> t.ChatInputAnswer:
        return t.ChatInputAnswered(state=t.ChatInputAnswerState.SUBMITTED, value=value)

    server, service = build_agent_server(agent, ServeOptions(), lambda: time.time_ns() // 10**6)
    await service.start()
    try:
        async with connected_client(server) as client:
            await client.initialize(["ahp-root://"])
            session = await client.create_session(provider="ask")
            snapshot = await client.subscribe(session)
            assert snapshot is not None and isinstance(snapshot.state, t.SessionState)
            chat = snapshot.state.default_chat
            assert chat is not None
            await client.subscribe(chat)
            await client.dispatch(chat, t.ChatTurnStartedAction(
                turn_id="t1", started_at="2026-01-01T00:00:00.000Z", message=t.Message(
                    text="ask me", origin=t.MessageOrigin(kind=t.MessageKind.USER))))

            def asking(state: t.SnapshotState) -> bool:
                return isinstance(state, t.ChatState) and state.active_turn is not None and any(
                    isinstance(p, t.InputRequestResponsePart)
                    for p in state.active_turn.response_parts)

            state = await client.wait_for_state(chat, asking, timeout=WAIT)
            assert isinstance(state, t.ChatState) and state.active_turn is not None
            (request,) = [p.request for p in state.active_turn.response_parts
                          if isinstance(p, t.InputRequestResponsePart)]
            await client.dispatch(chat, t.ChatInputCompletedAction(
                request_id=request.id, response=t.ChatInputResponseKind.ACCEPT, answers={
                    "name": submitted(t.ChatInputTextAnswerValue(value="Ada")),
                    "cups": submitted(t.ChatInputNumberAnswerValue(value=4)),
                    "sugar": submitted(t.ChatInputNumberAnswerValue(value=0.5)),
                    "milk": submitted(t.ChatInputBooleanAnswerValue(value=False)),
                    "tea": submitted(t.ChatInputSelectedAnswerValue(value="mint")),
                    "snacks": submitted(t.ChatInputSelectedManyAnswerValue(
                        value=("biscuit", "scone"))),
                }))
            state = await client.wait_for_state(
                chat, lambda s: isinstance(s, t.ChatState) and bool(s.turns), timeout=WAIT)
            assert isinstance(state, t.ChatState)
            assert state.turns[0].state == t.TurnState.COMPLETE, state.turns[0]
            return "".join(p.content for p in state.turns[0].response_parts
                           if isinstance(p, t.MarkdownResponsePart))
    finally:
        await service.close()
        await server.close()


if __name__ == "__main__":
    reply = asyncio.run(asyncio.wait_for(self_check(), 3 * WAIT))
    print(reply)
    expected = ("- What should I call you? 'Ada'", "- How many cups of tea today? 4",
                "- Spoons of sugar per cup? 0.5", "- Milk? no", "- Which tea? Mint",
                "- Anything with it? Biscuits, Scones")
    missing = [line for line in expected if line not in reply]
    if missing:
        raise SystemExit(f"the ask agent did not report {missing}")
