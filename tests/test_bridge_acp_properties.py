"""Property tests of the ACP bridge: any agent events, any valid client actions.

Hypothesis plays an ACP agent (every ``session/update`` variant, permission
and elicitation requests, prompt answers, in any order, valid or unknown or
malformed) against clients playing valid actions on a real host.  Whatever
the sequence:

* every AHP action the bridge emits changes the state (the world raises on an
  action the reducers drop, see ``tests/acp_agents/world.py``);
* the bridge never raises, and logs no internal error;
* its idea of the active turn is the chat's;
* every agent request is answered exactly once, and once every prompt is
  answered the chat is idle, consistent (no finished turn keeps an
  unfinished tool call) and no agent request is left waiting.
"""

from __future__ import annotations

import logging
import string
from collections.abc import Iterator
from contextlib import contextmanager

from hypothesis import given
from hypothesis import strategies as st

from agenthost_protocol import types as t
from agenthost_protocol.bridges.acp import AcpSessionSetup
from tests.acp_agents.world import ACP_SESSION, CHAT, SESSION, USER, World

TOOL_IDS = ("t1", "t2", "t3")
MODELS = ("fast", "smart")

SETUP = AcpSessionSetup.from_new_session({
    "sessionId": ACP_SESSION,
    "modes": {"currentModeId": "ask", "availableModes": [
        {"id": "ask", "name": "Ask"}, {"id": "code", "name": "Code"},
    ]},
    "configOptions": [
        {"id": "model", "name": "Model", "category": "model", "type": "select",
         "currentValue": "fast", "options": [{"value": m, "name": m.title()} for m in MODELS]},
        {"id": "web", "name": "Web search", "type": "boolean", "currentValue": False},
    ],
})

# ─── JSON and ACP payloads ───────────────────────────────────────────────────

short_text = st.text(alphabet=string.ascii_letters + " \n", max_size=6)
json_scalar = st.none() | st.booleans() | st.integers(-3, 3) | short_text
json_value = st.recursive(
    json_scalar,
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(short_text, inner, max_size=2),
    max_leaves=4,
)
maybe_garbage = json_value  # where a field should be one thing, anything


def optional(key: str, values: st.SearchStrategy[object]) -> st.SearchStrategy[dict[str, object]]:
    return st.one_of(st.just({}), values.map(lambda v: {key: v}))


text_chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "x"}}
text_block = st.builds(lambda s: {"type": "text", "text": s}, short_text)
content_block = st.one_of(
    text_block,
    st.sampled_from([
        {"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"},
        {"type": "audio", "data": "not base64!", "mimeType": "audio/wav"},
        {"type": "resource_link", "uri": "file:///a.txt", "name": "a", "size": 3},
        {"type": "resource", "resource": {"uri": "file:///b", "text": "bee"}},
        {"type": "resource", "resource": {"uri": "file:///c", "blob": "AAE=",
                                          "mimeType": "application/x"}},
        {"type": "video"},
    ]),
    maybe_garbage,
)
tool_content = st.one_of(
    st.builds(lambda b: {"type": "content", "content": b}, content_block),
    st.builds(lambda old, new: {"type": "diff", "path": "/src/x.py", "oldText": old,
                                "newText": new}, st.none() | short_text, short_text),
    st.just({"type": "terminal", "terminalId": "term-1"}),
    maybe_garbage,
)
tool_status = st.sampled_from(["pending", "in_progress", "completed", "failed", "weird"])


@st.composite
def tool_fields(draw: st.DrawFn) -> dict[str, object]:
    fields: dict[str, object] = {"toolCallId": draw(st.sampled_from(TOOL_IDS))}
    fields |= draw(optional("title", short_text))
    fields |= draw(optional("kind", st.sampled_from(["read", "edit", "execute", "other", "new"])))
    fields |= draw(optional("status", tool_status | st.none()))
    fields |= draw(optional("content", st.lists(tool_content, max_size=2) | maybe_garbage))
    fields |= draw(optional("rawInput", json_value))
    fields |= draw(optional("rawOutput", json_value))
    fields |= draw(optional("locations", st.just([{"path": "/src/x.py", "line": 3}])))
    return fields


chunk = st.builds(
    lambda kind, content, message: {"sessionUpdate": kind, "content": content, **message},
    st.sampled_from(["agent_message_chunk", "agent_thought_chunk", "user_message_chunk"]),
    st.sampled_from([0, 0, 0, 1]).flatmap(lambda i: (text_block, content_block)[i]),
    optional("messageId", st.sampled_from(["m1", "m2"])),
)
tool_update = st.builds(
    lambda kind, fields: {"sessionUpdate": kind, **fields},
    st.sampled_from(["tool_call", "tool_call_update"]),
    tool_fields(),
)
plan = st.builds(
    lambda entries: {"sessionUpdate": "plan", "entries": entries},
    st.lists(st.fixed_dictionaries({
        "content": short_text,
        "priority": st.sampled_from(["high", "low"]),
        "status": st.sampled_from(["pending", "in_progress", "completed"]),
    }), max_size=3),
)
session_level = st.one_of(
    plan,
    st.just({"sessionUpdate": "plan_update", "plan": {"type": "markdown", "planId": "p",
                                                       "content": "# plan"}}),
    st.just({"sessionUpdate": "plan_removed", "planId": "p"}),
    st.builds(lambda names: {"sessionUpdate": "available_commands_update",
                             "availableCommands": [{"name": n, "description": n} for n in names]},
              st.lists(st.sampled_from(["web", "test"]), max_size=2, unique=True)),
    st.builds(lambda m: {"sessionUpdate": "current_mode_update", "currentModeId": m},
              st.sampled_from(["ask", "code"])),
    st.builds(lambda model, web, extra: {"sessionUpdate": "config_option_update",
                                         "configOptions": [
        {"id": "model", "name": "Model", "category": "model", "type": "select",
         "currentValue": model, "options": [{"value": m, "name": m} for m in MODELS]},
        {"id": "web", "name": "Web", "type": "boolean", "currentValue": web},
        *extra]},
        st.sampled_from(MODELS), st.booleans(),
        st.lists(st.just({"id": "new", "name": "New", "type": "boolean",
                          "currentValue": True}), max_size=1)),
    st.builds(lambda title: {"sessionUpdate": "session_info_update", "title": title},
              st.none() | short_text),
    st.builds(lambda used, cost: {"sessionUpdate": "usage_update", "used": used, "size": 100,
                                  **cost},
              st.integers(0, 100), optional("cost", st.just({"amount": 0.5, "currency": "USD"}))),
    st.builds(lambda title: {"sessionUpdate": "notice", "severity": "warning", "title": title},
              short_text),
    st.builds(lambda status: {"sessionUpdate": "compaction_update", "compactionId": "c",
                              "status": status},
              st.sampled_from(["in_progress", "completed", "failed"])),
    st.just({"sessionUpdate": "compaction_summary_chunk", "compactionId": "c"}),
    st.just({"sessionUpdate": "brand_new_variant", "x": 1}),
    st.dictionaries(short_text, json_value, max_size=2),  # no sessionUpdate at all
)
update = st.sampled_from([0, 0, 0, 1, 1, 1, 1, 2]).flatmap(
    lambda i: (chunk, tool_update, session_level)[i]
)

permission_options = st.lists(
    st.builds(lambda i, kind: {"optionId": f"o{i}", "name": f"Option {i}", "kind": kind},
              st.integers(0, 3),
              st.sampled_from(["allow_once", "allow_always", "reject_once", "reject_always"])),
    max_size=3, unique_by=lambda o: o["optionId"],
)
schema_property = st.sampled_from([
    {"type": "string", "title": "Name", "minLength": 1},
    {"type": "string", "enum": ["a", "b"], "default": "a"},
    {"type": "string", "oneOf": [{"const": "x", "title": "Ex"}]},
    {"type": "integer", "minimum": 0, "maximum": 9},
    {"type": "number"},
    {"type": "boolean", "default": True},
    {"type": "array", "items": {"type": "string", "enum": ["p", "q"]}, "minItems": 1},
    {"type": "array", "items": {"anyOf": [{"const": "r", "title": "Are"}]}},
    {"type": "_custom"},
])
form = st.builds(
    lambda props, required: {
        "sessionId": ACP_SESSION, "message": "Tell me", "mode": "form",
        "requestedSchema": {"type": "object", "properties": props,
                            "required": [k for k in props if k in required]},
    },
    st.dictionaries(st.sampled_from(["q1", "q2", "q3"]), schema_property, max_size=3),
    st.sets(st.sampled_from(["q1", "q2", "q3"])),
)
url_form = st.builds(
    lambda eid: {"sessionId": ACP_SESSION, "message": "Log in", "mode": "url",
                 "elicitationId": eid, "url": "https://example.com/login"},
    st.sampled_from(["e1", "e2"]),
)

# ─── Steps ───────────────────────────────────────────────────────────────────

def weighted(*choices: tuple[int, st.SearchStrategy[tuple[object, ...]]]
             ) -> st.SearchStrategy[tuple[object, ...]]:
    """Draw branch ``i`` with a probability proportional to its weight.

    (``one_of`` does not weigh: listing a strategy twice does not draw it twice as often.)
    """
    strategies = [strategy for _, strategy in choices]
    indexes = [i for i, (weight, _) in enumerate(choices) for _ in range(weight)]
    return st.sampled_from(indexes).flatmap(lambda i: strategies[i])


client_step = st.tuples(st.just("client"), st.sampled_from([
    "start", "start-model", "cancel", "approve", "approve", "deny", "input", "input",
    "queue", "steer", "unqueue", "config", "title", "truncate",
]), st.integers(0, 5), st.sampled_from(["accept", "accept", "decline", "cancel"]))

step = weighted(
    (16, st.tuples(st.just("update"), update)),
    (1, st.tuples(st.just("wrong-session"), update)),
    (3, st.tuples(st.just("permission"), tool_fields(), permission_options)),
    (2, st.tuples(st.just("elicit"), form | url_form | st.just({"mode": "carrier-pigeon"}))),
    (1, st.tuples(st.just("elicit-complete"), st.sampled_from(["e1", "e2", "e9"]))),
    (1, st.tuples(st.just("answer"), st.sampled_from(
        ["end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled", "odd", "error"]
    ), st.booleans())),
    (1, st.tuples(st.just("switch"), st.booleans())),
    (1, st.tuples(st.just("garbage"), short_text, json_value, st.booleans())),
    (4, st.tuples(st.just("start"))),
    (4, client_step),
    (3, st.tuples(st.just("client"), st.sampled_from(["approve", "approve", "deny"]),
                  st.integers(0, 5), st.just("accept"))),
    (2, st.tuples(st.just("client"), st.just("input"), st.integers(0, 5),
                  st.sampled_from(["accept", "accept", "decline", "cancel"]))),
    (1, st.tuples(st.just("tick"), st.integers(1, 5000))),
    (1, st.tuples(st.just("die"))),
)


@contextmanager
def no_internal_errors() -> Iterator[None]:
    """Fail on any ERROR record of the bridge (its safety net caught an exception)."""
    records: list[logging.LogRecord] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("agenthost_protocol.bridges.acp")
    handler = Catch(level=logging.ERROR)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
    assert not records, records[0].getMessage() + str(records[0].exc_info)


def answers_for(part: t.InputRequestResponsePart) -> dict[str, t.ChatInputAnswer]:
    """Submitted answers of the right kind to every question (what a client would send)."""
    answers: dict[str, t.ChatInputAnswer] = {}
    for q in part.request.questions or ():
        value: t.ChatInputAnswerValue
        if isinstance(q, t.ChatInputTextQuestion):
            value = t.ChatInputTextAnswerValue(value="text")
        elif isinstance(q, t.ChatInputNumberQuestion):
            value = t.ChatInputNumberAnswerValue(value=3.0)
        elif isinstance(q, t.ChatInputBooleanQuestion):
            value = t.ChatInputBooleanAnswerValue(value=True)
        elif isinstance(q, t.ChatInputSingleSelectQuestion):
            value = t.ChatInputSelectedAnswerValue(value=q.options[0].id)
        elif isinstance(q, t.ChatInputMultiSelectQuestion):
            value = t.ChatInputSelectedManyAnswerValue(value=(q.options[0].id,))
        else:
            continue
        answers[q.id] = t.ChatInputAnswered(state=t.ChatInputAnswerState.SUBMITTED, value=value)
    return answers


def play_client(w: World, what: str, n: int, response: str, counter: list[int]) -> None:
    chat = w.chat
    turn = chat.active_turn
    counter[0] += 1
    if what == "start":
        w.start(f"message {counter[0]}")
    elif what == "start-model":
        w.start("switch", model=t.ModelSelection(id=MODELS[n % 2]))
    elif what == "cancel" and turn is not None:
        w.cancel()
    elif what in ("approve", "deny") and turn is not None:
        pending = [p.tool_call for p in turn.response_parts
                   if isinstance(p, t.ToolCallResponsePart)
                   and isinstance(p.tool_call, t.ToolCallPendingConfirmationState)]
        if pending:
            call = pending[n % len(pending)]
            assert isinstance(call, t.ToolCallPendingConfirmationState)
            options = call.options or ()
            option = options[n % len(options)].id if options and n % 2 else None
            w.confirm(call.tool_call_id, approved=what == "approve", option=option)
    elif what == "input" and turn is not None:
        parts = [p for p in turn.response_parts
                 if isinstance(p, t.InputRequestResponsePart) and p.response is None]
        if parts:
            part = parts[n % len(parts)]
            w.client(CHAT, t.ChatInputCompletedAction(
                request_id=part.request.id, response=t.ChatInputResponseKind(response),
                answers=answers_for(part) if response == "accept" else None,
            ))
    elif what in ("queue", "steer"):
        kind = t.PendingMessageKind.QUEUED if what == "queue" else t.PendingMessageKind.STEERING
        w.client(CHAT, t.ChatPendingMessageSetAction(
            kind=kind, id=f"pm-{counter[0]}",
            message=t.Message(text=f"pending {counter[0]}", origin=USER),
        ))
    elif what == "unqueue" and chat.queued_messages:
        queued = chat.queued_messages[n % len(chat.queued_messages)]
        w.client(CHAT, t.ChatPendingMessageRemovedAction(kind=t.PendingMessageKind.QUEUED,
                                                         id=queued.id))
    elif what == "config" and w.session.config is not None:
        key, value = [("mode", "code"), ("mode", "ask"), ("model", "smart"),
                      ("model", "fast"), ("web", True), ("web", False)][n]
        w.client(SESSION, t.SessionConfigChangedAction(config={key: value}))
    elif what == "title":
        w.client(SESSION, t.SessionTitleChangedAction(title=f"title {n}"))
    elif what == "truncate" and (turn is not None or chat.turns):
        w.client(CHAT, t.ChatTruncatedAction())


def play(w: World, event: tuple[object, ...], counter: list[int]) -> None:
    kind = event[0]
    if kind == "update":
        w.update(event[1])  # type: ignore[arg-type]
    elif kind == "wrong-session":
        w.update(event[1], session_id="someone-else")  # type: ignore[arg-type]
    elif kind == "permission":
        _, call, options = event
        w.request("session/request_permission", {
            "sessionId": ACP_SESSION, "toolCall": call, "options": options,
        })
    elif kind == "elicit":
        w.request("elicitation/create", event[1])
    elif kind == "elicit-complete":
        w.notify("elicitation/complete", {"elicitationId": event[1]})
    elif kind == "answer":
        _, reason, with_usage = event
        prompts = w.prompts
        if prompts:
            token = prompts[0].token
            if reason == "error":
                w.fail(token)
            else:
                usage = {"usage": {"inputTokens": 5, "outputTokens": 7, "totalTokens": 12,
                                   "thoughtTokens": 2}} if with_usage else {}
                w.answer(token, {"stopReason": reason, **usage})
    elif kind == "switch":
        switches = [r for r in w.requests.values() if r.method != "session/prompt"]
        if switches:
            token = switches[0].token
            if event[1]:
                w.answer(token, {})
            else:
                w.fail(token)
    elif kind == "garbage":
        _, method, params, as_request = event
        if as_request:
            w.request(str(method), params)
        else:
            w.notify(str(method), params)
    elif kind == "client":
        _, what, n, response = event
        play_client(w, str(what), int(n), str(response), counter)  # type: ignore[call-overload]
    elif kind == "start":
        if w.chat.active_turn is None:  # a client starts a turn when the chat is idle
            counter[0] += 1
            w.start(f"message {counter[0]}")
    elif kind == "tick":
        w.now += int(event[1])  # type: ignore[call-overload]


def drain(w: World) -> None:
    """Answer whatever the bridge still waits for until it waits for nothing."""
    for _ in range(20):
        if not w.requests:
            break
        token = next(iter(w.requests))
        request = w.requests[token]
        w.answer(token, {"stopReason": "end_turn"} if request.method == "session/prompt" else {})
    assert not w.requests, "the bridge keeps asking"


@given(st.lists(step, min_size=1, max_size=60), st.booleans())
def test_any_agent_events_yield_only_applicable_actions(
    events: list[tuple[object, ...]], with_setup: bool
) -> None:
    with no_internal_errors():
        w = World(SETUP if with_setup else None)
        counter = [0]
        for event in events:
            if event[0] == "die":  # the agent process is gone: nothing is answered any more
                w.run(w.bridge.agent_closed())
                w.open.clear()
                w.requests.clear()
                assert w.chat.active_turn is None and not w.bridge.busy
                assert w.update(text_chunk) == []
                w.start()  # ends at once: nobody would answer it
                assert w.chat.active_turn is None and w.chat.turns[-1].state == "error"
                break
            play(w, event, counter)
            active = w.chat.active_turn
            assert w.bridge.active_turn == (active.id if active is not None else None)
        else:
            drain(w)
            assert w.chat.active_turn is None
            assert not w.bridge.busy
            w.assert_consistent()
        # every prompt reached the agent in the session it belongs to
        assert all(r.params.get("sessionId") == ACP_SESSION for r in w.sent)


@given(st.lists(st.tuples(st.just("update"), update), max_size=30))
def test_agent_events_alone_in_one_turn(events: list[tuple[object, ...]]) -> None:
    """One turn, only agent events, then the stop reason: the turn ends consistent."""
    with no_internal_errors():
        w = World(SETUP)
        w.start()
        for event in events:
            play(w, event, [0])
        w.finish()
        assert w.chat.active_turn is None
        w.assert_consistent()


turn_step = weighted(
    (6, st.tuples(st.just("update"), tool_update)),
    (2, st.tuples(st.just("update"), chunk)),
    (4, st.tuples(st.just("permission"), tool_fields(), permission_options)),
    (4, st.tuples(st.just("client"), st.sampled_from(["approve", "approve", "deny"]),
                  st.integers(0, 5), st.just("accept"))),
    (1, st.tuples(st.just("elicit"), form | url_form)),
    (1, st.tuples(st.just("client"), st.just("input"), st.integers(0, 5),
                  st.sampled_from(["accept", "decline", "cancel"]))),
)


@given(st.lists(turn_step, max_size=40),
       st.sampled_from(["end_turn", "refusal", "cancelled", "error", "client-cancel"]))
def test_tool_calls_and_permissions_in_one_turn(
    events: list[tuple[object, ...]], end: str
) -> None:
    """The tool-call state machine under permission requests and client decisions."""
    with no_internal_errors():
        w = World(SETUP)
        w.start()
        counter = [0]
        for event in events:
            play(w, event, counter)
        if end == "client-cancel":
            w.cancel()
            assert any(getattr(s, "method", None) == "session/cancel" for s in w.sent)
            w.finish("cancelled")  # swallowed: the turn is over already
        elif end == "error":
            [prompt] = w.prompts
            w.fail(prompt.token)
        else:
            w.finish(end)
        assert w.chat.active_turn is None
        w.assert_consistent()
