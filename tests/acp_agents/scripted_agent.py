"""A real ACP agent for the bridge's end-to-end tests, written with the ACP SDK's agent side.

Run as ``python scripted_agent.py``: it speaks ACP on stdin/stdout
(``acp.run_agent``).  Every prompt plays this script, whatever its text:

1. a thought (``agent_thought_chunk``) and a streamed reply
   (``agent_message_chunk``\\ s) echoing the prompt;
2. a tool call ``echo-N`` (kind ``execute``) that asks permission
   (``session/request_permission``); allowed, it runs (``in_progress``, its
   output as content) and completes; rejected, it fails;
3. an elicitation (``elicitation/create``, form mode) asking for a name, and
   a reply greeting it (or saying it was declined);
4. ``end_turn``, with the turn's usage.

A prompt whose text is ``wait`` instead streams one chunk and waits for
``session/cancel``, then answers ``cancelled``: the test of cancellation.
``session/new`` advertises two modes and a model option, so the host gets a
session config and the root state the agent's models.

Options (the resume tests): ``--load`` advertises ``loadSession`` and answers
``session/load`` for any id this script makes (``scripted-<pid>-<n>``: unique
across runs), after replaying a conversation as ``session/update``\\ s (a user
chunk, a reply, a title, a plan, a mode change) the host must not turn into
actions; ``--load-fails`` advertises it and answers every load with an error;
``--log PATH`` appends one JSON line per ``session/new``, ``session/load`` and
``session/prompt`` received (``{"method", "sessionId", "cwd"?, "text"?}``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
from typing import Any

import acp
from acp.helpers import update_current_mode
from acp.schema import (
    AgentCapabilities,
    AllowedOutcome,
    ElicitationFormSessionMode,
    ElicitationSchema,
    ElicitationStringPropertySchema,
    Implementation,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PermissionOption,
    PromptCapabilities,
    PromptResponse,
    SessionConfigOptionBoolean,
    SessionConfigOptionSelect,
    SessionConfigSelectOption,
    SessionInfoUpdate,
    SessionMode,
    SessionModeState,
    ToolCallUpdate,
    Usage,
)

SESSION_PREFIX = "scripted-"
LOAD_ERROR = "the scripted agent lost that session"
REPLAYED_TITLE = "Replayed title"


class ScriptedAgent:
    """The ACP ``Agent`` side: the SDK calls these methods with the decoded params."""

    def __init__(self, *, load: bool = False, load_fails: bool = False,
                 log: str | None = None) -> None:
        self._conn: Any = None
        self._sessions = itertools.count(1)
        self._tools = itertools.count(1)
        self._cancelled: dict[str, asyncio.Event] = {}
        self._load = load or load_fails
        self._load_fails = load_fails
        self._log = log

    def on_connect(self, conn: Any) -> None:
        self._conn = conn

    def _record(self, method: str, session_id: str, **more: Any) -> None:
        if self._log is not None:
            with open(self._log, "a", encoding="utf-8") as f:
                f.write(json.dumps({"method": method, "sessionId": session_id, **more}) + "\n")

    async def initialize(self, protocol_version: int, client_capabilities: Any = None,
                         client_info: Any = None, **_: Any) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=1,
            agent_capabilities=AgentCapabilities(prompt_capabilities=PromptCapabilities(),
                                                 load_session=self._load),
            agent_info=Implementation(name="scripted", title="Scripted agent", version="1.0"),
        )

    @staticmethod
    def _modes() -> SessionModeState:
        return SessionModeState(current_mode_id="ask", available_modes=[
            SessionMode(id="ask", name="Ask"), SessionMode(id="code", name="Code"),
        ])

    @staticmethod
    def _options() -> list[SessionConfigOptionSelect | SessionConfigOptionBoolean]:
        return [SessionConfigOptionSelect(
            id="model", name="Model", category="model", type="select",
            current_value="small", options=[
                SessionConfigSelectOption(value="small", name="Small"),
                SessionConfigSelectOption(value="large", name="Large"),
            ],
        )]

    async def new_session(self, cwd: str, mcp_servers: Any = None, **_: Any) -> NewSessionResponse:
        session_id = f"{SESSION_PREFIX}{os.getpid()}-{next(self._sessions)}"
        self._cancelled[session_id] = asyncio.Event()
        self._record("session/new", session_id, cwd=cwd)
        return NewSessionResponse(session_id=session_id, modes=self._modes(),
                                  config_options=self._options())

    async def load_session(self, cwd: str, session_id: str, mcp_servers: Any = None,
                           **_: Any) -> LoadSessionResponse:
        self._record("session/load", session_id, cwd=cwd)
        if not self._load or self._load_fails or not session_id.startswith(SESSION_PREFIX):
            raise acp.RequestError.invalid_params({"details": LOAD_ERROR})
        self._cancelled[session_id] = asyncio.Event()
        # ACP: the whole conversation is replayed before the answer
        conn = self._conn
        await conn.session_update(session_id, acp.update_user_message_text("hello"))
        await conn.session_update(session_id, acp.update_agent_thought_text("Replaying."))
        await conn.session_update(session_id, acp.update_agent_message_text("You said: hello."))
        await conn.session_update(session_id, SessionInfoUpdate(
            session_update="session_info_update", title=REPLAYED_TITLE))
        await conn.session_update(session_id, acp.update_plan([acp.plan_entry(
            "replayed step", status="in_progress")]))
        await conn.session_update(session_id, update_current_mode("code"))
        return LoadSessionResponse(modes=self._modes(), config_options=self._options())

    async def set_session_mode(self, session_id: str, mode_id: str, **_: Any) -> None:
        await self._conn.session_update(session_id, update_current_mode(mode_id))

    async def cancel(self, session_id: str, **_: Any) -> None:
        event = self._cancelled.get(session_id)
        if event is not None:
            event.set()

    async def prompt(self, session_id: str, prompt: list[Any], **_: Any) -> PromptResponse:
        conn = self._conn
        cancelled = self._cancelled.setdefault(session_id, asyncio.Event())
        cancelled.clear()
        text = " ".join(getattr(block, "text", "") for block in prompt).strip()
        self._record("session/prompt", session_id, text=text)
        if text == "wait":
            await conn.session_update(session_id, acp.update_agent_message_text("Waiting..."))
            await asyncio.wait_for(cancelled.wait(), 30)
            return PromptResponse(stop_reason="cancelled")

        await conn.session_update(session_id, acp.update_agent_thought_text(
            f"The user said {len(text)} characters."))
        for piece in ("You said: ", text, "."):
            await conn.session_update(session_id, acp.update_agent_message_text(piece))

        tool_id = f"echo-{next(self._tools)}"
        await conn.session_update(session_id, acp.start_tool_call(
            tool_id, f"Echo {text!r}", kind="execute", status="pending",
            raw_input={"text": text}))
        permission = await conn.request_permission(
            session_id,
            ToolCallUpdate(tool_call_id=tool_id, title=f"Echo {text!r}", kind="execute"),
            [PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
             PermissionOption(option_id="reject", name="Reject", kind="reject_once")],
        )
        allowed = (isinstance(permission.outcome, AllowedOutcome)
                   and permission.outcome.option_id == "allow")
        if allowed:
            await conn.session_update(session_id, acp.update_tool_call(
                tool_id, status="in_progress",
                content=[acp.tool_content(acp.text_block(text))]))
            await conn.session_update(session_id, acp.update_tool_call(
                tool_id, status="completed", raw_output={"echoed": text}))
        else:
            await conn.session_update(session_id, acp.update_tool_call(tool_id, status="failed"))

        answer = await conn.create_elicitation(
            message="What is your name?",
            mode=ElicitationFormSessionMode(
                session_id=session_id, tool_call_id=tool_id,
                requested_schema=ElicitationSchema(
                    properties={"name": ElicitationStringPropertySchema(
                        type="string", title="Name", min_length=1)},
                    required=["name"],
                ),
            ),
        )
        if answer.action == "accept" and answer.content:
            reply = f" Nice to meet you, {answer.content.get('name')}!"
        else:
            reply = f" No name ({answer.action})."
        await conn.session_update(session_id, acp.update_agent_message_text(reply))
        return PromptResponse(stop_reason="end_turn", usage=Usage(
            input_tokens=len(text), output_tokens=10, total_tokens=len(text) + 10))


def main() -> None:
    args = sys.argv[1:]
    log = args[args.index("--log") + 1] if "--log" in args else None
    agent = ScriptedAgent(load="--load" in args, load_fails="--load-fails" in args, log=log)
    asyncio.run(acp.run_agent(agent))  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
