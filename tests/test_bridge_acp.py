"""The ACP bridge, mapping by mapping (bridges.md §2.1-2.5), on a real host.

Every test plays the agent and the clients through ``tests/acp_agents/world.py``:
each action the bridge emits is dispatched on the host and must change the
state, each client action is validated as the host would before the bridge
sees it, and each agent request must be answered exactly once.
"""

from __future__ import annotations

import ast
import json
import logging
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from agenthost_protocol import types as t
from agenthost_protocol.bridges import acp as acp_module
from agenthost_protocol.bridges.acp import (
    AcpBridge,
    AcpErrorReply,
    AcpNotification,
    AcpReply,
    AcpRequest,
    AcpSessionSetup,
    AhpDispatch,
    PromptCapabilities,
    data_uri_store,
)
from tests.acp_agents.world import ACP_SESSION, CHAT, SESSION, START, USER, World

CANCELLED = {"outcome": {"outcome": "cancelled"}}
OPTIONS = (("allow", "allow_once"), ("always", "allow_always"), ("deny", "reject_once"))

SETUP = AcpSessionSetup.from_new_session({
    "sessionId": ACP_SESSION,
    "modes": {"currentModeId": "ask", "availableModes": [
        {"id": "ask", "name": "Ask", "description": "Asks first"}, {"id": "code", "name": "Code"},
    ]},
    "configOptions": [
        {"id": "model", "name": "Model", "category": "model", "type": "select",
         "currentValue": "fast", "options": [
             {"value": "fast", "name": "Fast"},
             {"group": "big", "name": "Big ones", "options": [{"value": "smart", "name": "Smart"}]},
         ]},
        {"id": "web", "name": "Web search", "type": "boolean", "currentValue": False},
        {"id": "broken", "type": "select"},
        {"id": "odd", "name": "Odd", "type": "slider", "currentValue": 3},
    ],
})


def text(s: str, kind: str = "agent_message_chunk", **extra: object) -> dict[str, object]:
    return {"sessionUpdate": kind, "content": {"type": "text", "text": s}, **extra}


def tool(tool_id: str, variant: str = "tool_call_update", /,
         **fields: object) -> dict[str, object]:
    return {"sessionUpdate": variant, "toolCallId": tool_id, **fields}


def types_of(outputs: list[Any]) -> list[str]:
    return [type(o.action).__name__ if isinstance(o, AhpDispatch) else type(o).__name__
            for o in outputs]


@pytest.fixture
def w() -> World:
    world = World(SETUP)
    world.start("hello")
    return world


def last_turn(w: World) -> t.Turn:
    return w.chat.turns[-1]


def parts(w: World) -> tuple[t.ResponsePart, ...]:
    turn = w.chat.active_turn
    return turn.response_parts if turn is not None else last_turn(w).response_parts


# ─── Setup ───────────────────────────────────────────────────────────────────


def test_session_setup_builds_the_config_and_the_models() -> None:
    config = SETUP.config
    assert config is not None
    assert config.values == {"model": "fast", "web": False, "mode": "ask"}
    props = config.schema.properties
    assert props["mode"].enum == ("ask", "code")
    assert props["mode"].enum_labels == ("Ask", "Code")
    assert props["mode"].enum_descriptions == ("Asks first", "")
    assert props["model"].enum == ("fast", "smart")  # groups are flattened
    assert props["web"].type == "boolean"
    assert all(p.session_mutable for p in props.values())
    assert "broken" not in props and "odd" not in props
    assert [m.id for m in SETUP.models("acp")] == ["fast", "smart"]
    assert SETUP.models("acp")[1] == t.SessionModelInfo(id="smart", provider="acp", name="Smart")


def test_session_setup_of_nothing() -> None:
    results: list[object] = [None, {}, [], {"modes": "x", "configOptions": 3}]
    for result in results:
        setup = AcpSessionSetup.from_new_session(result)
        assert setup.config is None and setup.models("p") == ()


def test_modes_give_way_to_a_config_option_named_mode() -> None:
    setup = AcpSessionSetup.from_new_session({
        "modes": {"currentModeId": "a", "availableModes": [{"id": "a", "name": "A"}]},
        "configOptions": [{"id": "mode", "name": "Mode", "category": "mode", "type": "select",
                           "currentValue": "b", "options": [{"value": "b", "name": "B"}]}],
    })
    assert setup.modes == () and setup.values() == {"mode": "b"}


def test_prompt_capabilities_from_initialize() -> None:
    caps = PromptCapabilities.from_initialize({"protocolVersion": 1, "agentCapabilities": {
        "promptCapabilities": {"image": True, "embeddedContext": True}}})
    assert caps == PromptCapabilities(image=True, audio=False, embedded_context=True)
    assert PromptCapabilities.from_initialize("nonsense") == PromptCapabilities()


def test_the_package_exports_lazily_and_the_mapper_needs_no_sdk() -> None:
    from agenthost_protocol import bridges

    assert bridges.AcpBridge is AcpBridge
    assert "AcpBridge" in dir(bridges)
    with pytest.raises(AttributeError):
        _ = bridges.NoSuchThing
    # the mapper and the package import nothing outside the standard library and this one
    for module in (acp_module, bridges):
        tree = ast.parse(Path(str(module.__file__)).read_text())
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                    for alias in node.names}
        imported |= {node.module or "" for node in ast.walk(tree)
                     if isinstance(node, ast.ImportFrom) and node.level == 0}
        assert not {name for name in imported
                    if name.split(".")[0] not in sys.stdlib_module_names
                    and name.split(".")[0] not in ("attrs", "agenthost_protocol")}, imported


# ─── Message and thought chunks ──────────────────────────────────────────────


def test_text_chunks_stream_into_one_markdown_part(w: World) -> None:
    out = w.update(text("Hel")) + w.update(text("lo"))
    assert types_of(out) == ["ChatResponsePartAction", "ChatDeltaAction", "ChatDeltaAction"]
    [part] = parts(w)
    assert isinstance(part, t.MarkdownResponsePart) and part.content == "Hello"


@pytest.mark.parametrize(("updates", "expected"), [
    # (kind, messageId) of each chunk → the parts: (kind, content)
    ([("msg", None), ("msg", None)], [("markdown", "ab")]),
    ([("thought", None), ("thought", None)], [("reasoning", "ab")]),
    ([("thought", None), ("msg", None)], [("reasoning", "a"), ("markdown", "b")]),
    ([("msg", None), ("thought", None), ("msg", None)],
     [("markdown", "a"), ("reasoning", "b"), ("markdown", "c")]),
    ([("msg", "m1"), ("msg", "m1"), ("msg", "m2")], [("markdown", "ab"), ("markdown", "c")]),
    ([("msg", None), ("msg", "m1")], [("markdown", "a"), ("markdown", "b")]),
])
def test_chunks_open_a_new_part_when_the_kind_or_message_changes(
    w: World, updates: list[tuple[str, str | None]], expected: list[tuple[str, str]]
) -> None:
    for letter, (kind, message_id) in zip("abc", updates, strict=False):
        extra = {"messageId": message_id} if message_id else {}
        w.update(text(letter, "agent_message_chunk" if kind == "msg" else "agent_thought_chunk",
                      **extra))
    got = [(p.kind, p.content) for p in parts(w)
           if isinstance(p, (t.MarkdownResponsePart, t.ReasoningResponsePart))]
    assert got == expected


def test_a_tool_call_closes_the_open_text_part(w: World) -> None:
    w.update(text("before"))
    w.update(tool("t1", "tool_call", title="Read"))
    w.update(text("after"))
    kinds = [p.kind for p in parts(w)]
    assert kinds == ["markdown", "toolCall", "markdown"]


@pytest.mark.parametrize("update", [
    text(""),                                                      # nothing to append
    text("x", "user_message_chunk"),                               # the prompt's echo
    {"sessionUpdate": "agent_thought_chunk",
     "content": {"type": "image", "data": "aGk=", "mimeType": "image/png"}},
    {"sessionUpdate": "agent_message_chunk",
     "content": {"type": "image", "data": "%%%", "mimeType": "image/png"}},  # bad base64
    {"sessionUpdate": "agent_message_chunk", "content": {"type": "hologram"}},
    {"sessionUpdate": "agent_message_chunk", "content": "not an object"},
    {"sessionUpdate": "agent_message_chunk"},
])
def test_chunks_without_an_ahp_form_are_skipped(w: World, update: dict[str, object]) -> None:
    assert w.update(update) == []


@pytest.mark.parametrize(("content", "expected"), [
    ({"type": "image", "data": "aGk=", "mimeType": "image/png"},
     t.ResourceReponsePart(uri="data:image/png;base64,aGk=", size_hint=2,
                           content_type="image/png")),
    ({"type": "audio", "data": "aGk=", "mimeType": "audio/wav"},
     t.ResourceReponsePart(uri="data:audio/wav;base64,aGk=", size_hint=2,
                           content_type="audio/wav")),
    ({"type": "resource_link", "uri": "file:///a.txt", "name": "a", "mimeType": "text/plain",
      "size": 12},
     t.ResourceReponsePart(uri="file:///a.txt", size_hint=12, content_type="text/plain")),
    ({"type": "resource", "resource": {"uri": "file:///b", "text": "hi"}},
     t.ResourceReponsePart(uri="data:text/plain;base64,aGk=", size_hint=2,
                           content_type="text/plain")),
    ({"type": "resource", "resource": {"uri": "file:///c", "blob": "aGk=",
                                       "mimeType": "application/x"}},
     t.ResourceReponsePart(uri="data:application/x;base64,aGk=", size_hint=2,
                           content_type="application/x")),
])
def test_non_text_message_chunks_become_content_refs(
    w: World, content: dict[str, object], expected: t.ResourceReponsePart
) -> None:
    w.update(text("see:"))
    w.update({"sessionUpdate": "agent_message_chunk", "content": content})
    w.update(text("done"))
    assert parts(w)[1] == expected
    assert isinstance(parts(w)[2], t.MarkdownResponsePart)  # a new part after the ref


def test_the_content_store_and_ids_come_from_the_caller() -> None:
    stored: list[tuple[bytes, str | None]] = []

    def store(data: bytes, content_type: str | None) -> str:
        stored.append((data, content_type))
        return f"store://{len(stored)}"

    bridge = AcpBridge(acp_session_id="a", session=SESSION, chat=CHAT,
                       new_id=lambda kind: f"my-{kind}", now=lambda: 5, content_store=store)
    bridge.receive_client_action(CHAT, t.ChatTurnStartedAction(
        turn_id="T", started_at="x", message=t.Message(text="", origin=USER)))
    out = bridge.receive_notification("session/update", {"sessionId": "a", "update": {
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "image", "data": "aGk=", "mimeType": "image/png"}}})
    [dispatch] = out
    assert isinstance(dispatch, AhpDispatch)
    assert dispatch.action == t.ChatResponsePartAction(turn_id="T", part=t.ResourceReponsePart(
        uri="store://1", size_hint=2, content_type="image/png"))
    assert stored == [(b"hi", "image/png")]
    out = bridge.receive_notification("session/update", {"sessionId": "a", "update": text("x")})
    assert out[0] == AhpDispatch(CHAT, t.ChatResponsePartAction(
        turn_id="T", part=t.MarkdownResponsePart(id="my-part", content="")))
    assert data_uri_store(b"", None) == "data:application/octet-stream;base64,"


def test_chunks_outside_a_turn_are_skipped() -> None:
    w = World()
    assert w.update(text("hello?")) == []
    w.start()
    w.finish()
    assert w.update(text("late")) == []


# ─── Tool calls ──────────────────────────────────────────────────────────────


@pytest.mark.parametrize(("status", "actions", "final"), [
    (None, ["ChatToolCallStartAction", "ChatToolCallDeltaAction"], t.ToolCallStreamingState),
    ("pending", ["ChatToolCallStartAction", "ChatToolCallDeltaAction"],
     t.ToolCallStreamingState),
    ("in_progress", ["ChatToolCallStartAction", "ChatToolCallReadyAction"],
     t.ToolCallRunningState),
    ("completed", ["ChatToolCallStartAction", "ChatToolCallReadyAction",
                   "ChatToolCallCompleteAction"], t.ToolCallCompletedState),
    ("failed", ["ChatToolCallStartAction", "ChatToolCallReadyAction",
                "ChatToolCallCompleteAction"], t.ToolCallCompletedState),
])
def test_tool_call_start_by_status(
    w: World, status: str | None, actions: list[str], final: type
) -> None:
    fields: dict[str, object] = {"title": "Run ls", "kind": "execute", "rawInput": {"cmd": "ls"}}
    if status is not None:
        fields["status"] = status
    out = w.update(tool("t1", "tool_call", **fields))
    assert types_of(out) == actions
    call = w.tool("t1")
    assert isinstance(call, final)
    assert call is not None and not isinstance(call, t.UnknownToolCallState)
    assert call.tool_name == "execute" and call.display_name == "Execute"
    assert call.meta == {"acp": {"kind": "execute"}}
    assert call.invocation_message == "Run ls"
    if not isinstance(call, t.ToolCallStreamingState):
        assert call.tool_input == '{"cmd": "ls"}'


def test_tool_call_lifecycle_with_updates(w: World) -> None:
    w.update(tool("t1", "tool_call", title="Reading", kind="read", status="pending",
                  locations=[{"path": "/a.py"}]))
    out = w.update(tool("t1", title="Reading a.py"))
    assert types_of(out) == ["ChatToolCallDeltaAction"]
    assert w.update(tool("t1", title="Reading a.py")) == []  # nothing changed
    out = w.update(tool("t1", status="in_progress"))
    assert types_of(out) == ["ChatToolCallReadyAction"]
    content = [{"type": "content", "content": {"type": "text", "text": "line 1"}}]
    assert types_of(w.update(tool("t1", content=content))) == ["ChatToolCallContentChangedAction"]
    assert w.update(tool("t1", content=content, status="in_progress")) == []
    out = w.update(tool("t1", status="completed", rawOutput={"lines": 1}))
    assert types_of(out) == ["ChatToolCallCompleteAction"]
    call = w.tool("t1")
    assert isinstance(call, t.ToolCallCompletedState)
    assert call.success and call.past_tense_message == "Reading a.py"
    assert call.content == (t.ToolResultTextContent(text="line 1"),)
    assert call.structured_content == {"lines": 1}
    assert call.meta == {"acp": {"kind": "read", "locations": [{"path": "/a.py"}]}}
    assert w.update(tool("t1", status="failed")) == []  # finished: nothing more


def test_failed_tool_call_carries_its_text_as_the_error(w: World) -> None:
    w.update(tool("t1", "tool_call", title="Run", status="in_progress"))
    w.update(tool("t1", status="failed", rawOutput="exit 1",
                  content=[{"type": "content", "content": {"type": "text", "text": "no!"}}]))
    call = w.tool("t1")
    assert isinstance(call, t.ToolCallCompletedState)
    assert not call.success and call.error == t.ToolCallError(message="no!")
    assert call.structured_content is None  # not an object


def test_update_of_an_unknown_tool_call_starts_it(w: World) -> None:
    out = w.update(tool("t9", title="Surprise", status="in_progress", name="grep"))
    assert types_of(out) == ["ChatToolCallStartAction", "ChatToolCallReadyAction"]
    call = w.tool("t9")
    assert isinstance(call, t.ToolCallRunningState)
    assert call.tool_name == "grep" and call.display_name == "Tool"


@pytest.mark.parametrize(("content", "expected"), [
    ({"type": "content", "content": {"type": "text", "text": "hi"}},
     t.ToolResultTextContent(text="hi")),
    ({"type": "content", "content": {"type": "image", "data": "aGk=", "mimeType": "image/png"}},
     t.ToolResultEmbeddedResourceContent(data="aGk=", content_type="image/png")),
    ({"type": "content", "content": {"type": "resource_link", "uri": "file:///x", "name": "x",
                                     "size": 4}},
     t.ToolResultResourceContent(uri="file:///x", size_hint=4)),
    ({"type": "content", "content": {"type": "resource", "resource": {"uri": "u",
                                                                      "text": "txt"}}},
     t.ToolResultTextContent(text="txt")),
    ({"type": "content", "content": {"type": "resource", "resource": {"uri": "u",
                                                                      "blob": "AA=="}}},
     t.ToolResultEmbeddedResourceContent(data="AA==", content_type="application/octet-stream")),
    ({"type": "terminal", "terminalId": "term-7"},
     t.ToolResultTextContent(text="(terminal term-7)")),
    ({"type": "diff", "path": "/src/a.py", "oldText": "a\nb\n", "newText": "a\nc\nd\n"},
     t.ToolResultFileEditContent(
         before=t.FileEditSide(uri="file:///src/a.py", content=t.ContentRef(
             uri="data:text/plain;base64,YQpiCg==", size_hint=4, content_type="text/plain")),
         after=t.FileEditSide(uri="file:///src/a.py", content=t.ContentRef(
             uri="data:text/plain;base64,YQpjCmQK", size_hint=6, content_type="text/plain")),
         diff=t.FileEditDiff(added=2, removed=1))),
    ({"type": "diff", "path": "C:\\x.txt", "newText": "new"},
     t.ToolResultFileEditContent(
         after=t.FileEditSide(uri="file:///C:/x.txt", content=t.ContentRef(
             uri="data:text/plain;base64,bmV3", size_hint=3, content_type="text/plain")),
         diff=t.FileEditDiff(added=1, removed=0))),
])
def test_tool_call_content_mapping(
    w: World, content: dict[str, object], expected: t.ToolResultContent
) -> None:
    w.update(tool("t1", "tool_call", status="in_progress"))
    w.update(tool("t1", content=[content, {"type": "mystery"}]))
    call = w.tool("t1")
    assert isinstance(call, t.ToolCallRunningState)
    assert call.content == (expected,)


def test_terminal_content_uses_the_hosts_terminal_uri() -> None:
    w = World()
    w.bridge = AcpBridge(acp_session_id=ACP_SESSION, session=SESSION, chat=CHAT,
                         new_id=w.new_id, now=w.clock,
                         terminal_uri={"term-1": "ahp-terminal:/1"}.get)
    w.start()
    w.update(tool("t1", "tool_call", status="in_progress",
                  content=[{"type": "terminal", "terminalId": "term-1"},
                           {"type": "terminal", "terminalId": "term-2"}]))
    call = w.tool("t1")
    assert isinstance(call, t.ToolCallRunningState)
    assert call.content == (
        t.ToolResultTerminalContent(resource="ahp-terminal:/1", title="Terminal term-1"),
        t.ToolResultTextContent(text="(terminal term-2)"),
    )


# ─── Permissions ─────────────────────────────────────────────────────────────


def test_permission_request_shows_a_confirmation(w: World) -> None:
    diff = {"type": "diff", "path": "/a.txt", "oldText": "x", "newText": "y"}
    w.update(tool("t1", "tool_call", title="Edit a.txt", kind="edit", status="pending",
                  rawInput={"path": "/a.txt"}, content=[diff]))
    rid = w.permission("t1")
    call = w.tool("t1")
    assert isinstance(call, t.ToolCallPendingConfirmationState)
    assert call.confirmation_title == "Edit file"
    assert call.invocation_message == "Edit a.txt"
    assert call.tool_input == '{"path": "/a.txt"}'
    assert call.editable is False
    assert call.options == (
        t.ConfirmationOption(id="allow", label="Allow", kind=t.ConfirmationOptionKind.APPROVE,
                             group=1),
        t.ConfirmationOption(id="always", label="Always",
                             kind=t.ConfirmationOptionKind.APPROVE, group=2),
        t.ConfirmationOption(id="deny", label="Deny", kind=t.ConfirmationOptionKind.DENY,
                             group=1),
    )
    assert call.edits is not None and len(call.edits.items) == 1
    assert call.edits.items[0].diff == t.FileEditDiff(added=1, removed=1)
    assert rid in w.open
    assert w.chat.status & 31 == t.SessionStatus.INPUT_NEEDED


@pytest.mark.parametrize(("approved", "option", "options", "outcome"), [
    (True, None, OPTIONS, {"outcome": "selected", "optionId": "allow"}),
    (True, "always", OPTIONS, {"outcome": "selected", "optionId": "always"}),
    (False, None, OPTIONS, {"outcome": "selected", "optionId": "deny"}),
    (False, "deny", OPTIONS, {"outcome": "selected", "optionId": "deny"}),
    (True, None, (("ok", "allow_always"),), {"outcome": "selected", "optionId": "ok"}),
    (False, None, (("ok", "allow_always"),), {"outcome": "cancelled"}),
    (True, None, (), {"outcome": "cancelled"}),
    (False, None, (("no", "reject_always"), ("nope", "reject_once")),
     {"outcome": "selected", "optionId": "nope"}),
])
def test_client_decision_answers_the_permission(
    w: World, approved: bool, option: str | None,
    options: tuple[tuple[str, str], ...], outcome: dict[str, str],
) -> None:
    rid = w.permission("t1", options, title="Run", kind="execute")
    w.confirm("t1", approved, option)
    assert w.replies[rid] == {"outcome": outcome}
    call = w.tool("t1")
    assert isinstance(call, t.ToolCallRunningState if approved else t.ToolCallCancelledState)


def test_after_approval_the_tool_runs_and_completes(w: World) -> None:
    w.update(tool("t1", "tool_call", title="Run", status="pending"))
    w.permission("t1")
    w.update(tool("t1", status="in_progress"))  # the agent jumped the gun: nothing to show
    w.update(tool("t1", content=[{"type": "content",
                                  "content": {"type": "text", "text": "out"}}]))
    out = w.confirm("t1")
    assert types_of(out) == ["AcpReply", "ChatToolCallContentChangedAction"]
    w.update(tool("t1", status="completed"))
    assert isinstance(w.tool("t1"), t.ToolCallCompletedState)


def test_a_denied_tool_call_ignores_the_agents_failure_report(w: World) -> None:
    w.permission("t1", title="Run")
    w.confirm("t1", approved=False)
    assert w.update(tool("t1", status="failed")) == []
    call = w.tool("t1")
    assert isinstance(call, t.ToolCallCancelledState) and call.reason == "denied"


def test_a_second_request_waits_for_the_first(w: World) -> None:
    first = w.permission("t1", title="Run")
    out = w.run(w.bridge.receive_request(99, "session/request_permission", {
        "sessionId": ACP_SESSION, "toolCall": {"toolCallId": "t1"},
        "options": [{"optionId": "again", "name": "Again", "kind": "allow_once"}]}))
    w.open.add(99)
    assert out == []  # queued: the clients still see the first one
    out = w.confirm("t1")
    assert types_of(out) == ["AcpReply", "ChatToolCallReadyAction"]
    call = w.tool("t1")
    assert isinstance(call, t.ToolCallPendingConfirmationState)  # running → re-confirmation
    assert [o.id for o in call.options or ()] == ["again"]
    w.confirm("t1", option="again")
    assert w.replies[first] == {"outcome": {"outcome": "selected", "optionId": "allow"}}
    assert w.replies[99] == {"outcome": {"outcome": "selected", "optionId": "again"}}


def test_a_second_request_after_a_denial_is_cancelled(w: World) -> None:
    w.permission("t1")
    second = w.permission("t1")
    w.confirm("t1", approved=False)
    assert w.replies[second] == CANCELLED


def test_requests_for_two_tool_calls_are_shown_side_by_side(w: World) -> None:
    w.permission("t1")
    w.permission("t2")
    assert isinstance(w.tool("t1"), t.ToolCallPendingConfirmationState)
    assert isinstance(w.tool("t2"), t.ToolCallPendingConfirmationState)


def test_completion_while_pending_answers_the_requests(w: World) -> None:
    first = w.permission("t1")
    second = w.permission("t1")
    out = w.update(tool("t1", status="completed"))
    assert types_of(out) == ["ChatToolCallCompleteAction", "AcpReply", "AcpReply"]
    assert w.replies[first] == w.replies[second] == CANCELLED
    call = w.tool("t1")
    assert isinstance(call, t.ToolCallCompletedState) and call.confirmed == "not-needed"


def test_turn_cancel_cancels_every_pending_request(w: World) -> None:
    a = w.permission("t1")
    b = w.permission("t1")
    c = w.permission("t2")
    e = w.request("elicitation/create", {"sessionId": ACP_SESSION, "mode": "form",
                                         "message": "?", "requestedSchema": {"properties": {}}})
    out = w.cancel()
    assert sum(isinstance(o, AcpReply) for o in out) == 4
    assert out[-1] == AcpNotification("session/cancel", {"sessionId": ACP_SESSION})
    assert w.replies[a] == w.replies[b] == w.replies[c] == CANCELLED
    assert w.replies[e] == {"action": "cancel"}
    # the agent's late updates and its stop reason are swallowed
    assert w.update(text("late")) == []
    assert w.finish("cancelled") == []
    [turn] = w.chat.turns
    assert turn.state == t.TurnState.CANCELLED
    w.assert_consistent()


@pytest.mark.parametrize("params", [
    {"sessionId": ACP_SESSION, "options": []},
    {"sessionId": ACP_SESSION, "toolCall": {"title": "no id"}, "options": []},
    "garbage",
])
def test_permission_requests_that_cannot_be_shown_are_cancelled(
    w: World, params: object
) -> None:
    rid = w.request("session/request_permission", params)
    assert w.replies[rid] == CANCELLED


def test_permission_request_outside_a_turn_is_cancelled() -> None:
    w = World()
    rid = w.permission("t1")
    assert w.replies[rid] == CANCELLED


def test_permission_for_a_finished_tool_call_is_cancelled(w: World) -> None:
    w.update(tool("t1", "tool_call", status="completed"))
    assert w.replies[w.permission("t1")] == CANCELLED


# ─── Elicitation ─────────────────────────────────────────────────────────────


@pytest.mark.parametrize(("prop", "question"), [
    ({"type": "string", "title": "Name", "description": "Your name", "minLength": 1,
      "maxLength": 9, "format": "email", "default": "a@b"},
     t.ChatInputTextQuestion(id="q", title="Name", message="Your name", required=True,
                             format="email", min=1, max=9, default_value="a@b")),
    ({"type": "string", "enum": ["a", "b"], "default": "b"},
     t.ChatInputSingleSelectQuestion(id="q", message="q", required=True, options=(
         t.ChatInputOption(id="a", label="a"),
         t.ChatInputOption(id="b", label="b", recommended=True)))),
    ({"type": "string", "oneOf": [{"const": "x", "title": "Ex", "description": "d"}]},
     t.ChatInputSingleSelectQuestion(id="q", message="q", required=True, options=(
         t.ChatInputOption(id="x", label="Ex", description="d"),))),
    ({"type": "integer", "minimum": 1, "maximum": 5, "default": 2},
     t.ChatInputNumberQuestion(kind=t.ChatInputQuestionKind.INTEGER, id="q", message="q",
                               required=True, min=1.0, max=5.0, default_value=2.0)),
    ({"type": "number", "title": "Ratio"},
     t.ChatInputNumberQuestion(kind=t.ChatInputQuestionKind.NUMBER, id="q", title="Ratio",
                               message="Ratio", required=True)),
    ({"type": "boolean", "default": True},
     t.ChatInputBooleanQuestion(id="q", message="q", required=True, default_value=True)),
    ({"type": "array", "items": {"type": "string", "enum": ["p", "q"]}, "minItems": 1,
      "default": ["q"]},
     t.ChatInputMultiSelectQuestion(id="q", message="q", required=True, min=1, options=(
         t.ChatInputOption(id="p", label="p"),
         t.ChatInputOption(id="q", label="q", recommended=True)))),
    ({"type": "array", "items": {"anyOf": [{"const": "r", "title": "Are"}]}},
     t.ChatInputMultiSelectQuestion(id="q", message="q", required=True, options=(
         t.ChatInputOption(id="r", label="Are"),))),
    ({"type": "_vendor", "title": "Odd"},
     t.ChatInputTextQuestion(id="q", title="Odd", message="Odd", required=True)),
])
def test_elicitation_schema_to_questions(
    w: World, prop: dict[str, object], question: t.ChatInputQuestion
) -> None:
    w.request("elicitation/create", {
        "sessionId": ACP_SESSION, "mode": "form", "message": "Tell me",
        "requestedSchema": {"type": "object", "properties": {"q": prop}, "required": ["q"]},
    })
    [part] = w.input_parts()
    assert part.request.message == "Tell me"
    assert part.request.questions == (question,)


def submitted(value: t.ChatInputAnswerValue) -> t.ChatInputAnswered:
    return t.ChatInputAnswered(state=t.ChatInputAnswerState.SUBMITTED, value=value)


def test_elicitation_accept_sends_typed_content(w: World) -> None:
    rid = w.request("elicitation/create", {
        "sessionId": ACP_SESSION, "toolCallId": "t1", "mode": "form", "message": "Config",
        "requestedSchema": {"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string"}, "count": {"type": "integer"},
            "ratio": {"type": "number"}, "ok": {"type": "boolean"},
            "pick": {"type": "string", "enum": ["a", "b"]},
            "many": {"type": "array", "items": {"type": "string", "enum": ["x", "y"]}},
            "skip": {"type": "string"},
        }},
    })
    [part] = w.input_parts()
    w.client(CHAT, t.ChatInputCompletedAction(
        request_id=part.request.id, response=t.ChatInputResponseKind.ACCEPT, answers={
            "name": submitted(t.ChatInputTextAnswerValue(value="Ada")),
            "count": submitted(t.ChatInputNumberAnswerValue(value=3.0)),
            "ratio": submitted(t.ChatInputNumberAnswerValue(value=0.5)),
            "ok": submitted(t.ChatInputBooleanAnswerValue(value=False)),
            "pick": submitted(t.ChatInputSelectedAnswerValue(value="b")),
            "many": submitted(t.ChatInputSelectedManyAnswerValue(value=("x", "y"))),
            "skip": t.ChatInputSkipped(),
        }))
    content = {"name": "Ada", "count": 3, "ratio": 0.5, "ok": False, "pick": "b",
               "many": ["x", "y"]}
    assert w.replies[rid] == {"action": "accept", "content": content}
    assert isinstance(content["count"], int)
    [part] = w.input_parts()
    assert part.response == t.ChatInputResponseKind.ACCEPT


@pytest.mark.parametrize("response", ["decline", "cancel"])
def test_elicitation_decline_and_cancel(w: World, response: str) -> None:
    rid = w.request("elicitation/create", {"sessionId": ACP_SESSION, "mode": "form",
                                           "message": "?", "requestedSchema": {}})
    [part] = w.input_parts()
    w.client(CHAT, t.ChatInputCompletedAction(request_id=part.request.id,
                                              response=t.ChatInputResponseKind(response)))
    assert w.replies[rid] == {"action": response}


def test_url_elicitation_and_its_completion(w: World) -> None:
    rid = w.request("elicitation/create", {"sessionId": ACP_SESSION, "mode": "url",
                                           "message": "Log in", "elicitationId": "e1",
                                           "url": "https://example.com/login"})
    [part] = w.input_parts()
    assert part.request.url == "https://example.com/login" and part.request.questions is None
    out = w.notify("elicitation/complete", {"elicitationId": "e1"})
    assert types_of(out) == ["ChatInputCompletedAction", "AcpReply"]
    assert w.replies[rid] == {"action": "accept"}
    assert w.notify("elicitation/complete", {"elicitationId": "e1"}) == []


def test_url_elicitation_accepted_by_a_client(w: World) -> None:
    rid = w.request("elicitation/create", {"sessionId": ACP_SESSION, "mode": "url",
                                           "message": "Log in", "elicitationId": "e1",
                                           "url": "https://example.com/login"})
    [part] = w.input_parts()
    w.client(CHAT, t.ChatInputCompletedAction(request_id=part.request.id,
                                              response=t.ChatInputResponseKind.ACCEPT))
    assert w.replies[rid] == {"action": "accept"}
    assert w.notify("elicitation/complete", {"elicitationId": "e1"}) == []


@pytest.mark.parametrize(("params", "reply"), [
    ({"sessionId": ACP_SESSION, "mode": "telepathy", "message": "?"}, {"action": "decline"}),
    ({"sessionId": ACP_SESSION, "mode": "url", "message": "?"}, {"action": "decline"}),
    ({"sessionId": "other", "mode": "form", "message": "?"}, {"action": "cancel"}),
])
def test_elicitations_that_cannot_be_shown(
    w: World, params: dict[str, object], reply: dict[str, str]
) -> None:
    rid = w.request("elicitation/create", params)
    assert w.replies[rid] == reply
    assert w.input_parts() == []


def test_elicitation_outside_a_turn_is_cancelled() -> None:
    w = World()
    rid = w.request("elicitation/create", {"requestId": 4, "mode": "form", "message": "?"})
    assert w.replies[rid] == {"action": "cancel"}


def test_turn_end_cancels_open_elicitations(w: World) -> None:
    rid = w.request("elicitation/create", {"sessionId": ACP_SESSION, "mode": "form",
                                           "message": "?", "requestedSchema": {}})
    w.finish()
    assert w.replies[rid] == {"action": "cancel"}
    [part] = w.input_parts()
    assert part.response is None  # unanswered, it stays in the transcript


# ─── Stop reasons, errors, usage ─────────────────────────────────────────────


@pytest.mark.parametrize(("result", "state", "meta", "error"), [
    ({"stopReason": "end_turn"}, t.TurnState.COMPLETE, None, None),
    ({"stopReason": "max_tokens"}, t.TurnState.COMPLETE, {"stopReason": "max_tokens"}, None),
    ({"stopReason": "max_turn_requests"}, t.TurnState.COMPLETE,
     {"stopReason": "max_turn_requests"}, None),
    ({"stopReason": "refusal"}, t.TurnState.ERROR, None, "refusal"),
    ({"stopReason": "cancelled"}, t.TurnState.CANCELLED, None, None),
    ({"stopReason": "taking_a_nap"}, t.TurnState.COMPLETE, {"stopReason": "taking_a_nap"}, None),
    ({}, t.TurnState.COMPLETE, {"stopReason": None}, None),
    ("not even an object", t.TurnState.COMPLETE, {"stopReason": None}, None),
])
def test_stop_reasons_end_the_turn(
    w: World, result: object, state: t.TurnState, meta: object, error: str | None
) -> None:
    w.update(tool("t1", "tool_call", status="pending"))
    w.now += 1234
    [prompt] = w.prompts
    out = w.answer(prompt.token, result)
    end = out[-1]
    assert isinstance(end, AhpDispatch)
    assert getattr(end.action, "meta", None) == meta
    turn = last_turn(w)
    assert turn.state == state and turn.duration == 1234
    assert (turn.error.error_type if turn.error else None) == error
    w.assert_consistent()  # the streaming tool call was cancelled by the turn end


def test_prompt_error_ends_the_turn_with_chat_error(w: World) -> None:
    [prompt] = w.prompts
    w.run(w.bridge.receive_error(prompt.token, -32000, "overloaded", {"retry": True}))
    turn = last_turn(w)
    assert turn.state == t.TurnState.ERROR
    assert turn.error == t.ErrorInfo(error_type="acp:-32000", message="overloaded (acp:-32000)",
                                     meta={"data": {"retry": True}})
    assert w.chat.status & 31 == t.SessionStatus.ERROR


def test_usage_accumulates_across_updates_and_the_prompt_answer() -> None:
    w = World(SETUP)
    w.start()
    w.update({"sessionUpdate": "usage_update", "used": 10, "size": 100,
              "cost": {"amount": 0.01, "currency": "USD"}})
    assert w.update({"sessionUpdate": "usage_update", "used": 10, "size": 100,
                     "cost": {"amount": 0.01, "currency": "USD"}}) == []
    w.finish(usage={"inputTokens": 5, "outputTokens": 7, "totalTokens": 14,
                    "thoughtTokens": 2, "cachedReadTokens": 1})
    assert last_turn(w).usage == t.UsageInfo(
        input_tokens=5, output_tokens=7, cache_read_tokens=1, model="fast",
        meta={"contextUsed": 10, "contextSize": 100,
              "cost": {"amount": 0.01, "currency": "USD"}, "totalTokens": 14,
              "thoughtTokens": 2},
    )


def test_usage_update_outside_a_turn_goes_to_the_session_meta() -> None:
    w = World()
    w.update({"sessionUpdate": "usage_update", "used": 1, "size": 2})
    assert w.session.meta == {"acp.context": {"contextUsed": 1, "contextSize": 2}}
    assert w.update({"sessionUpdate": "usage_update"}) == []


# ─── Plan, commands, modes, config, session info, notices ───────────────────


def test_plan_sets_the_activity_and_the_session_meta(w: World) -> None:
    entries = [{"content": "Read", "priority": "high", "status": "completed"},
               {"content": "Write", "priority": "low", "status": "in_progress"}]
    out = w.update({"sessionUpdate": "plan", "entries": entries})
    assert types_of(out) == ["SessionMetaChangedAction", "ChatActivityChangedAction"]
    chat, session = w.chat, w.session
    assert chat.activity == "Write" and session.meta == {"acp.plan": entries}
    assert w.update({"sessionUpdate": "plan", "entries": entries}) == []
    w.update({"sessionUpdate": "plan", "entries": []})
    chat, session = w.chat, w.session
    assert chat.activity is None and session.meta is None


def test_unstable_plan_updates_and_removal(w: World) -> None:
    plan = {"type": "markdown", "planId": "p1", "content": "# Plan"}
    w.update({"sessionUpdate": "plan_update", "plan": plan})
    assert w.session.meta == {"acp.plans": {"p1": plan}}
    assert w.update({"sessionUpdate": "plan_update", "plan": {"type": "items"}}) == []
    w.update({"sessionUpdate": "plan_removed", "planId": "p1"})
    session = w.session
    assert session.meta is None
    assert w.update({"sessionUpdate": "plan_removed", "planId": "p1"}) == []


def test_compaction_shows_as_activity(w: World) -> None:
    w.update({"sessionUpdate": "compaction_update", "compactionId": "c", "status": "in_progress"})
    chat = w.chat
    assert chat.activity == "Compacting the context"
    w.update({"sessionUpdate": "compaction_update", "compactionId": "c", "status": "failed",
              "error": "too big"})
    chat = w.chat
    assert chat.activity is None
    assert parts(w)[-1] == t.SystemNotificationResponsePart(content="too big")


def test_available_commands(w: World) -> None:
    commands = [{"name": "web", "description": "Search", "input": {"hint": "query"}}]
    w.update({"sessionUpdate": "available_commands_update", "availableCommands": commands})
    assert w.bridge.available_commands == tuple(commands)
    assert w.session.meta == {"acp.commands": commands}


def test_mode_and_config_updates_change_the_session_config(w: World) -> None:
    w.update({"sessionUpdate": "current_mode_update", "currentModeId": "code"})
    assert w.session.config is not None and w.session.config.values["mode"] == "code"
    assert w.update({"sessionUpdate": "current_mode_update", "currentModeId": "code"}) == []
    out = w.update({"sessionUpdate": "config_option_update", "configOptions": [
        {"id": "model", "name": "Model", "category": "model", "type": "select",
         "currentValue": "smart", "options": [{"value": "smart", "name": "Smart"}]},
        {"id": "web", "name": "Web", "type": "boolean", "currentValue": False},
        {"id": "brand-new", "name": "New", "type": "boolean", "currentValue": True},
    ]})
    assert [o.action for o in out] == [  # type: ignore[union-attr]
        t.SessionConfigChangedAction(config={"model": "smart"})]
    assert w.bridge.config_values["model"] == "smart"


def test_config_updates_without_a_session_config_are_skipped() -> None:
    w = World()
    assert w.update({"sessionUpdate": "current_mode_update", "currentModeId": "x"}) == []
    assert w.update({"sessionUpdate": "config_option_update", "configOptions": [
        {"id": "web", "name": "Web", "type": "boolean", "currentValue": True}]}) == []


@pytest.mark.parametrize(("title", "changed"), [("Fix it", True), (None, False), ("", False)])
def test_session_info_title(w: World, title: str | None, changed: bool) -> None:
    out = w.update({"sessionUpdate": "session_info_update", "title": title,
                    "updatedAt": "2026-01-01T00:00:00Z"})
    assert bool(out) is changed
    if changed:
        assert w.session.title == title


def test_notice_becomes_a_system_notification(w: World) -> None:
    w.update({"sessionUpdate": "notice", "severity": "warning", "title": "Slow",
              "description": "the model is busy"})
    assert parts(w)[-1] == t.SystemNotificationResponsePart(
        content="Slow: the model is busy", meta={"acp": {"severity": "warning"}})


# ─── AHP → ACP ───────────────────────────────────────────────────────────────


def test_turn_started_sends_the_prompt_with_its_attachments() -> None:
    w = World(caps=PromptCapabilities(image=True, embedded_context=True))
    w.start("look", attachments=(
        t.SimpleMessageAttachment(label="sel", model_representation="def f(): ..."),
        t.MessageEmbeddedResourceAttachment(label="shot.png", data="aGk=",
                                            content_type="image/png"),
        t.MessageEmbeddedResourceAttachment(label="a.wav", data="aGk=",
                                            content_type="audio/wav"),
        t.MessageResourceAttachment(label="a.py", uri="file:///a.py", content_type="text/x",
                                    size_hint=9),
        t.MessageAnnotationsAttachment(label="notes", resource="ahp-session:/s1/annotations"),
    ))
    [prompt] = w.prompts
    assert prompt.method == "session/prompt"
    assert prompt.params == {"sessionId": ACP_SESSION, "prompt": [
        {"type": "text", "text": "look"},
        {"type": "text", "text": "def f(): ..."},
        {"type": "image", "data": "aGk=", "mimeType": "image/png"},
        {"type": "resource", "resource": {"uri": "attachment:a.wav", "blob": "aGk=",
                                          "mimeType": "audio/wav"}},
        {"type": "resource_link", "uri": "file:///a.py", "name": "a.py", "mimeType": "text/x",
         "size": 9},
        {"type": "text", "text": "[notes]"},
    ]}


def test_attachments_an_agent_cannot_take_are_described() -> None:
    w = World()
    w.start("", attachments=(t.MessageEmbeddedResourceAttachment(
        label="shot.png", data="aGk=", content_type="image/png"),))
    [prompt] = w.prompts
    assert prompt.params["prompt"] == [
        {"type": "text", "text": "[shot.png (image/png) was attached; this agent cannot "
                                 "receive it]"}]


def test_message_model_switches_the_agents_model_before_the_prompt() -> None:
    w = World(SETUP)
    w.start("hi", model=t.ModelSelection(id="smart"))
    [switch] = w.requests.values()  # the prompt waits for the switch
    assert switch.method == "session/set_config_option"
    assert switch.params == {"sessionId": ACP_SESSION, "configId": "model", "value": "smart"}
    out = w.answer(switch.token, {"configOptions": [
        {"id": "model", "name": "Model", "category": "model", "type": "select",
         "currentValue": "smart", "options": []}]})
    assert types_of(out) == ["SessionConfigChangedAction", "AcpRequest"]
    assert w.session.config is not None and w.session.config.values["model"] == "smart"
    w.finish()
    w.start("again", model=t.ModelSelection(id="smart"))
    assert [r.method for r in w.requests.values()] == ["session/prompt"]  # no switch needed


def test_a_new_turn_waits_for_the_cancelled_prompt() -> None:
    w = World()
    w.start("one")
    [first] = w.prompts
    w.cancel()
    w.start("two")
    assert w.prompts == [first]  # held until the agent answers the cancelled prompt
    assert w.update(text("late from one")) == []
    out = w.answer(first.token, {"stopReason": "cancelled"})
    [second] = [o for o in out if isinstance(o, AcpRequest)]
    assert second.params["prompt"] == [{"type": "text", "text": "two"}]
    w.update(text("for two"))
    w.finish()
    assert [turn.state for turn in w.chat.turns] == [t.TurnState.CANCELLED,
                                                      t.TurnState.COMPLETE]


def test_turn_started_over_an_active_turn_cancels_the_agent() -> None:
    w = World()
    w.start("one")
    rid = w.permission("t1")
    w.start("two")
    assert w.replies[rid] == CANCELLED
    assert w.sent[-1] == AcpNotification("session/cancel", {"sessionId": ACP_SESSION})
    w.finish("cancelled")  # the first prompt's answer: swallowed, the second goes out
    w.finish()
    assert [turn.id for turn in w.chat.turns] == ["turn-2"]  # the replaced turn left no trace


def test_queued_messages_start_when_the_turn_ends() -> None:
    w = World()
    w.start("one")
    w.client(CHAT, t.ChatPendingMessageSetAction(
        kind=t.PendingMessageKind.QUEUED, id="q1", message=t.Message(text="two", origin=USER)))
    w.client(CHAT, t.ChatPendingMessageSetAction(
        kind=t.PendingMessageKind.QUEUED, id="q2", message=t.Message(text="three",
                                                                     origin=USER)))
    w.client(CHAT, t.ChatQueuedMessagesReorderedAction(order=("q2",)))
    out = w.finish()
    assert types_of(out) == ["ChatTurnCompleteAction", "ChatPendingMessageRemovedAction",
                             "ChatTurnStartedAction", "AcpRequest"]
    active = w.chat.active_turn
    assert active is not None and active.message.text == "three"
    assert w.chat.queued_messages is not None and [m.id for m in w.chat.queued_messages] == ["q1"]
    w.client(CHAT, t.ChatPendingMessageRemovedAction(kind=t.PendingMessageKind.QUEUED,
                                                     id="q1"))
    w.finish()
    assert w.chat.active_turn is None


def test_a_message_queued_on_an_idle_chat_starts_at_once() -> None:
    w = World()
    out = w.client(CHAT, t.ChatPendingMessageSetAction(
        kind=t.PendingMessageKind.QUEUED, id="q1", message=t.Message(text="go", origin=USER)))
    assert types_of(out) == ["ChatPendingMessageRemovedAction", "ChatTurnStartedAction",
                             "AcpRequest"]
    assert w.chat.active_turn is not None and w.chat.queued_messages is None


def test_steering_waits_for_the_turn_end() -> None:
    w = World()
    w.start("one")
    w.client(CHAT, t.ChatPendingMessageSetAction(
        kind=t.PendingMessageKind.STEERING, id="s1",
        message=t.Message(text="also this", origin=USER)))
    assert len(w.prompts) == 1
    w.finish()
    active = w.chat.active_turn
    assert active is not None and active.message.text == "also this"
    assert w.chat.steering_message is None


def test_session_config_changes_reach_the_agent(w: World) -> None:
    out = w.client(SESSION, t.SessionConfigChangedAction(config={"mode": "code", "web": True}))
    assert [(r.method, r.params) for r in out if isinstance(r, AcpRequest)] == [
        ("session/set_mode", {"sessionId": ACP_SESSION, "modeId": "code"}),
        ("session/set_config_option", {"sessionId": ACP_SESSION, "configId": "web",
                                       "value": True, "type": "boolean"}),
    ]
    mode, web = [r.token for r in out if isinstance(r, AcpRequest)]
    assert w.answer(mode, None) == []
    out = w.fail(web, -32602, "not now")
    assert [o.action for o in out] == [  # type: ignore[union-attr]
        t.SessionConfigChangedAction(config={"web": False})]
    assert w.session.config is not None and w.session.config.values["web"] is False


def test_truncating_the_chat_cancels_the_active_turn(w: World) -> None:
    out = w.client(CHAT, t.ChatTruncatedAction())
    assert out == [AcpNotification("session/cancel", {"sessionId": ACP_SESSION})]
    assert w.bridge.active_turn is None
    assert w.finish("cancelled") == []


def test_start_turn_for_the_embedder() -> None:
    w = World()
    out = w.run(w.bridge.start_turn("init", t.Message(text="first", origin=USER)))
    assert types_of(out) == ["ChatTurnStartedAction", "AcpRequest"]
    assert w.chat.active_turn is not None and w.chat.active_turn.started_at == (
        "2026-01-01T00:00:00.000Z")
    assert w.now == START


# ─── Totality ────────────────────────────────────────────────────────────────


@pytest.mark.parametrize(("method", "params"), [
    ("session/update", None),
    ("session/update", {"sessionId": ACP_SESSION}),
    ("session/update", {"sessionId": ACP_SESSION, "update": {"sessionUpdate": "new_thing"}}),
    ("session/update", {"sessionId": "other", "update": text("x")}),
    ("session/update", [1, 2]),
    ("elicitation/complete", {}),
    ("$/progress", {"x": 1}),
])
def test_unknown_or_malformed_notifications_are_skipped(
    w: World, method: str, params: object, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="agenthost_protocol.bridges.acp"):
        assert w.notify(method, params) == []
    assert caplog.records and all(r.levelno < logging.ERROR for r in caplog.records)


@pytest.mark.parametrize("method", ["fs/read_text_file", "terminal/create", "x/y"])
def test_unsupported_requests_get_method_not_found(w: World, method: str) -> None:
    rid = w.request(method, {"sessionId": ACP_SESSION})
    reply = w.replies[rid]
    assert isinstance(reply, AcpErrorReply) and reply.code == -32601


def test_unknown_tokens_are_skipped(w: World) -> None:
    assert w.bridge.receive_response("nope", {}) == []
    assert w.bridge.receive_error("nope", 1, "x") == []


def test_an_internal_error_is_logged_not_raised(
    w: World, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(bridge: AcpBridge, update: object) -> None:
        raise RuntimeError("bug")

    monkeypatch.setitem(acp_module._UPDATES, "plan", broken)
    assert w.update({"sessionUpdate": "plan", "entries": []}) == []
    assert any(r.levelno == logging.ERROR for r in caplog.records)


def test_agent_closed_ends_the_turn() -> None:
    w = World()
    w.start()
    w.permission("t1")
    out = w.run(w.bridge.agent_closed("the agent crashed"))
    assert types_of(out) == ["ChatErrorAction"]
    turn = last_turn(w)
    assert turn.error == t.ErrorInfo(error_type="acp:disconnected", message="the agent crashed")
    assert w.update(text("ghost")) == []
    w.start("anyone there?")  # a new turn ends at once: nobody would answer it
    assert w.chat.active_turn is None
    assert last_turn(w).error == t.ErrorInfo(error_type="acp:disconnected",
                                             message="the agent crashed")
    assert w.sent[-1].method == "session/prompt"  # the first turn's; nothing sent since


def test_dispose_answers_what_the_agent_waits_for() -> None:
    w = World()
    w.start()
    rid = w.permission("t1")
    out = w.run(w.bridge.dispose())
    assert out == [AcpReply(rid, CANCELLED),
                   AcpNotification("session/cancel", {"sessionId": ACP_SESSION})]
    assert w.update(text("late")) == [] and w.bridge.dispose() == []
    idle = World()
    idle.start()
    idle.cancel()  # the prompt is still in flight: the agent is told again
    assert idle.bridge.dispose() == [AcpNotification("session/cancel",
                                                     {"sessionId": ACP_SESSION})]


def test_outputs_are_plain_json_for_the_agent(w: World) -> None:
    """What goes to the agent serialises as JSON as it is."""
    w.permission("t1")
    w.cancel()
    for sent in w.sent:
        json.dumps(sent.params)
    for reply in w.replies.values():
        assert not isinstance(reply, AcpErrorReply)
        json.dumps(reply)


def test_the_docs_example_runs() -> None:
    page = Path(__file__).parent.parent / "docs" / "bridges.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), re.S)
    exec(compile(blocks[0], "docs/bridges.md", "exec"), {})
