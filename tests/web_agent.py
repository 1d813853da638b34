"""An agent for the web client's browser tests (``serve --agent tests.web_agent:agent``).

A turn whose message starts with ``hostile`` plays :data:`HOSTILE`: markdown, a
title, a tool call and a question carrying script and HTML every way an agent could
try to get it into the page.  One that starts with ``confirm`` streams a sentence and
runs a tool call that needs a confirmation.  Any other turn asks one question of every kind, then
streams the answers it got back as JSON, and runs a tool call that needs no
confirmation.
"""

from __future__ import annotations

import json

from agenthost_protocol import types as t
from agenthost_protocol import wire
from agenthost_protocol.agent import Agent, Turn

XSS = "window.__pwned = (window.__pwned || []).concat"
HOSTILE = "\n\n".join((
    f"<script>{XSS}(['script'])</script>",
    f'<img src="x" onerror="{XSS}([\'img\'])">',
    f"[a javascript link](javascript:{XSS}(['link']))",
    f"[an encoded one](jav&#x61;script:{XSS}(['entity']))",
    f"<a href=\"javascript:{XSS}(['anchor'])\">an anchor</a>",
    f'<svg onload="{XSS}([\'svg\'])"><script>{XSS}([\'svg-script\'])</script></svg>',
    f"**<img src=x onerror=\"{XSS}(['bold'])\">**",
    f"![an image](javascript:{XSS}(['image']))",
    "![a network image](http://127.0.0.1:9/never-loaded.png)",
    f"<iframe src=\"javascript:{XSS}(['iframe'])\"></iframe>",
    f"[data](data:text/html,<script>{XSS}(['data'])</script>)",
    f"<details open ontoggle=\"{XSS}(['details'])\">x</details>",
    "```html\n<script>alert('in a code block')</script>\n```",
    f"`<img src=x onerror=\"{XSS}(['code'])\">`",
    "[a safe link](https://example.org/ok)",
))
HOSTILE_TITLE = f"<img src=x onerror=\"{XSS}(['title'])\">"

QUESTIONS: tuple[t.ChatInputQuestion, ...] = (
    t.ChatInputTextQuestion(id="name", message="Your name?"),
    t.ChatInputNumberQuestion(id="count", message="How many?",
                              kind=t.ChatInputQuestionKind.INTEGER),
    t.ChatInputNumberQuestion(id="ratio", message="Which ratio?",
                              kind=t.ChatInputQuestionKind.NUMBER),
    t.ChatInputBooleanQuestion(id="sure", message="Are you sure?"),
    t.ChatInputSingleSelectQuestion(id="color", message="Which color?", options=(
        t.ChatInputOption(id="red", label="Red"), t.ChatInputOption(id="blue", label="Blue"))),
    t.ChatInputMultiSelectQuestion(id="tools", message="Which tools?", options=(
        t.ChatInputOption(id="saw", label="Saw"), t.ChatInputOption(id="drill", label="Drill"),
        t.ChatInputOption(id="file", label="File"))),
)


class WebTestAgent(Agent):
    provider = "webtest"
    display_name = "Web test agent"
    description = "Asks every kind of question, or plays hostile text."
    models = ("careful", "quick")  # a choice: the page's "New session" opens its dialog

    async def turn(self, turn: Turn) -> None:
        if turn.text.startswith("hostile"):
            await self.hostile(turn)
            return
        if turn.text.startswith("confirm"):
            await self.confirm(turn)
            return
        answer = await turn.ask("A few questions", questions=QUESTIONS)
        answers = {key: wire.unstructure(value) for key, value in (answer.answers or {}).items()}
        await turn.stream("Answers:\n\n```json\n" + json.dumps(
            {"response": str(getattr(answer.response, "value", answer.response)),
             "answers": answers, "model": turn.model}, sort_keys=True) + "\n```\n")
        call = await turn.tool("lookup", {"q": turn.text}, display_name="Lookup")
        await call.complete("found it", past_tense="Looked it up")

    async def confirm(self, turn: Turn) -> None:
        for word in ("Working ", "on ", "it."):
            await turn.stream(word)
        call = await turn.tool("write", {"path": "notes.txt"}, display_name="Write a file",
                               confirm=True, confirmation_title="Write notes.txt?")
        if call.approved:
            await call.complete("written", past_tense="Wrote notes.txt")
        await turn.stream(" Approved." if call.approved else " Denied.")

    async def hostile(self, turn: Turn) -> None:
        await turn.title(HOSTILE_TITLE)
        await turn.reasoning(f"<script>{XSS}(['reasoning'])</script>")
        await turn.stream(HOSTILE)
        call = await turn.tool(
            f"<img src=x onerror=\"{XSS}(['toolname'])\">", {"html": HOSTILE_TITLE},
            display_name=f"<b onmouseover=\"{XSS}(['display'])\">tool</b>",
            message=f"<script>{XSS}(['invocation'])</script>")
        await call.complete(f"<script>{XSS}(['result'])</script>",
                            past_tense=f"<img src=x onerror=\"{XSS}(['past'])\">")
        await turn.ask(f"<img src=x onerror=\"{XSS}(['ask'])\">", questions=(
            t.ChatInputSingleSelectQuestion(
                id="pick", message=f"<svg onload=\"{XSS}(['question'])\">", options=(
                    t.ChatInputOption(id="a", label=f"<img src=x onerror=\"{XSS}(['option'])\">"),
                )),
        ))


agent = WebTestAgent()
