"""An agent for ``serve --agent tests.asking_agent:agent``: each turn asks the user one
question (``turn.ask``), then says how it was answered.  Its texts are secrets the host's
log must never show (``tests/test_serve_logging.py``)."""

from __future__ import annotations

from agenthost_protocol import types as t
from agenthost_protocol.agent import Agent, Turn

QUESTION = "What is the private-owl-phrase?"


class Asking(Agent):
    provider = "asking"
    display_name = "Asking"
    description = "Asks one question per turn."

    async def turn(self, turn: Turn) -> None:
        answer = await turn.ask(QUESTION, questions=(t.ChatInputTextQuestion(
            id="phrase", message=QUESTION),))
        await turn.stream(f"you chose {answer.response}")


agent = Asking()
