"""An agent that streams your words back in reverse, then asks before echoing them.

    agenthost-protocol serve --agent examples.reverse:agent     # from the repository root
    agenthost-protocol chat 'ws://127.0.0.1:8765/?token=...' "one two three four" --yes
"""

from __future__ import annotations

import asyncio

from agenthost_protocol.agent import Agent, Turn, run


class Reverse(Agent):
    provider = "reverse"
    display_name = "Reverse"
    description = "Streams your words back in reverse order, then echoes them if you agree."

    async def turn(self, turn: Turn) -> None:
        words = turn.text.split()
        await turn.reasoning(f"{len(words)} words to turn around.")
        for word in reversed(words):
            await turn.stream(word + " ")
            await asyncio.sleep(0.02)  # a model would take its time too
        call = await turn.tool("echo", {"text": turn.text}, message="Echo your message",
                               confirm=True)
        if call.approved:
            await call.complete(turn.text, past_tense="Echoed your message")
            await turn.stream("\n\nEchoed.")
        else:
            await turn.stream("\n\nNot echoed.")


agent = Reverse()

if __name__ == "__main__":
    raise SystemExit(run(agent))
