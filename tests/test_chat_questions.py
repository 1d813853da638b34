"""How ``chat`` reads an answer to each kind of question, and shows a hostile agent's question.

Unit and property tests of :mod:`agenthost_protocol.cli.questions`, then
:func:`run_chat` in-process against the demo host whose turns a test plays:
questions full of escape sequences, a request too big to ask, the notices of
a long wait.  Every wait is bounded.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("websockets")

from agenthost_protocol import types as t
from agenthost_protocol.cli import chat as chat_module
from agenthost_protocol.cli import common
from agenthost_protocol.cli.chat import EXIT_FAILED, EXIT_OK, EXIT_TIMEOUT, run_chat
from agenthost_protocol.cli.common import CommandFailed
from agenthost_protocol.cli.questions import (
    MAX_QUESTIONS,
    BadAnswer,
    answerable,
    parse_answer,
    prompt_for,
    question_lines,
)
from agenthost_protocol.host import ClientActionApplied
from agenthost_protocol.host import Event as HostEvent

from ._aio_hosts import TIMEOUT, DemoHost, demo_host, run
from .test_chat_terminal import controls_in

SUBMITTED = t.ChatInputAnswerState.SUBMITTED


def answered(value: t.ChatInputAnswerValue) -> t.ChatInputAnswer:
    return t.ChatInputAnswered(state=t.ChatInputAnswerState.SUBMITTED, value=value)


OPTIONS = (t.ChatInputOption(id="g", label="Green"),
           t.ChatInputOption(id="b", label="Black", recommended=True),
           t.ChatInputOption(id="m", label="Mint"))


# -- one line, one answer -------------------------------------------------------------------


def test_text() -> None:
    q = t.ChatInputTextQuestion(id="q", message="name?", min=2, max=5, default_value="Bob")
    assert parse_answer(q, " Ada ") == answered(t.ChatInputTextAnswerValue(value=" Ada "))
    assert parse_answer(q, "") == answered(t.ChatInputTextAnswerValue(value="Bob"))
    with pytest.raises(BadAnswer, match="at least 2 characters"):
        parse_answer(q, "A")
    with pytest.raises(BadAnswer, match="at most 5 characters"):
        parse_answer(q, "Adalbert")
    assert parse_answer(t.ChatInputTextQuestion(id="q", message="?"), "") == t.ChatInputSkipped()
    with pytest.raises(BadAnswer, match="required"):
        parse_answer(t.ChatInputTextQuestion(id="q", message="?", required=True), "")


def test_numbers() -> None:
    number = t.ChatInputNumberQuestion(kind=t.ChatInputQuestionKind.NUMBER, id="n",
                                       message="?", min=-1, max=10)
    assert parse_answer(number, " 2.5 ") == answered(t.ChatInputNumberAnswerValue(value=2.5))
    assert parse_answer(number, "-1") == answered(t.ChatInputNumberAnswerValue(value=-1.0))
    for bad in ("nan", "inf", "1_0", "ten", "11", "-1.5"):
        with pytest.raises(BadAnswer):
            parse_answer(number, bad)
    integer = t.ChatInputNumberQuestion(kind=t.ChatInputQuestionKind.INTEGER, id="i",
                                        message="?", default_value=3)
    assert parse_answer(integer, "") == answered(t.ChatInputNumberAnswerValue(value=3.0))
    assert parse_answer(integer, "7") == answered(t.ChatInputNumberAnswerValue(value=7.0))
    with pytest.raises(BadAnswer, match="whole number"):
        parse_answer(integer, "7.5")
    assert prompt_for(integer) == "  whole number [default: 3]: "
    assert prompt_for(number) == "  number [-1-10; empty: skip]: "


def test_boolean() -> None:
    q = t.ChatInputBooleanQuestion(id="b", message="?", default_value=False)
    for line, value in (("y", True), ("YES", True), ("true", True), ("1", True), ("n", False),
                        ("No", False), ("0", False), ("", False)):
        assert parse_answer(q, line) == answered(t.ChatInputBooleanAnswerValue(value=value))
    with pytest.raises(BadAnswer, match="answer y or n"):
        parse_answer(q, "maybe")
    assert prompt_for(q) == "  y/N: "
    assert prompt_for(t.ChatInputBooleanQuestion(id="b", message="?", required=True)) == "  y/n: "


def test_single_select() -> None:
    q = t.ChatInputSingleSelectQuestion(id="s", message="?", options=OPTIONS)
    for line in ("3", "mint", " MINT ", "m"):
        assert parse_answer(q, line) == answered(t.ChatInputSelectedAnswerValue(value="m"))
    assert parse_answer(q, "") == answered(t.ChatInputSelectedAnswerValue(value="b"))
    for bad in ("0", "4", "Earl Grey", "1,2"):
        with pytest.raises(BadAnswer, match="choose one of 1-3"):
            parse_answer(q, bad)
    free = t.ChatInputSingleSelectQuestion(id="s", message="?", options=OPTIONS,
                                           allow_freeform_input=True)
    assert parse_answer(free, "Earl Grey") == answered(t.ChatInputSelectedAnswerValue(
        value="Earl Grey", freeform_values=("Earl Grey",)))
    assert prompt_for(free) == "  choose 1-3 [or type your own; default: 2]: "
    assert question_lines(q, 2, 3) == ["  (2/3) ?", "    1) Green", "    2) Black (recommended)",
                                       "    3) Mint"]


def test_multi_select() -> None:
    q = t.ChatInputMultiSelectQuestion(id="m", message="?", options=OPTIONS, min=1, max=2)
    assert parse_answer(q, "3, green,3") == answered(t.ChatInputSelectedManyAnswerValue(
        value=("m", "g")))
    assert parse_answer(q, "") == answered(t.ChatInputSelectedManyAnswerValue(value=("b",)))
    with pytest.raises(BadAnswer, match="at most 2"):
        parse_answer(q, "1,2,3")
    with pytest.raises(BadAnswer, match="no option 'tea'"):
        parse_answer(q, "1,tea")
    none = t.ChatInputMultiSelectQuestion(id="m", message="?", options=OPTIONS[:1], min=1)
    with pytest.raises(BadAnswer, match="at least 1"):
        parse_answer(none, "")
    free = t.ChatInputMultiSelectQuestion(id="m", message="?", options=OPTIONS,
                                          allow_freeform_input=True)
    assert parse_answer(free, "1, Oolong") == answered(t.ChatInputSelectedManyAnswerValue(
        value=("g",), freeform_values=("Oolong",)))
    assert parse_answer(free, "") == answered(t.ChatInputSelectedManyAnswerValue(value=("b",)))


def test_a_request_too_big_or_unanswerable_is_not_asked() -> None:
    many = tuple(t.ChatInputTextQuestion(id=f"q{i}", message="?")
                 for i in range(MAX_QUESTIONS + 1))
    assert "more than 64" in str(answerable(t.ChatInputRequest(id="r", questions=many)))
    unknown = t.UnknownChatInputQuestion(kind="color", raw={"kind": "color", "id": "c",
                                                            "required": True})
    assert "unknown kind (color)" in str(answerable(t.ChatInputRequest(
        id="r", questions=(unknown,))))
    assert answerable(t.ChatInputRequest(id="r", questions=many[:3])) is None


questions = st.one_of(
    st.builds(t.ChatInputTextQuestion, id=st.just("q"), message=st.text(),
              required=st.booleans(), min=st.none() | st.integers(0, 5),
              max=st.none() | st.integers(0, 50), default_value=st.none() | st.text()),
    st.builds(t.ChatInputNumberQuestion,
              kind=st.sampled_from([t.ChatInputQuestionKind.NUMBER,
                                    t.ChatInputQuestionKind.INTEGER]),
              id=st.just("q"), message=st.text(), required=st.booleans(),
              min=st.none() | st.floats(-10, 10), max=st.none() | st.floats(-10, 10),
              default_value=st.none() | st.floats(allow_nan=False)),
    st.builds(t.ChatInputBooleanQuestion, id=st.just("q"), message=st.text(),
              required=st.booleans(), default_value=st.none() | st.booleans()),
    st.builds(t.ChatInputSingleSelectQuestion, id=st.just("q"), message=st.text(),
              required=st.booleans(), allow_freeform_input=st.none() | st.booleans(),
              options=st.lists(st.builds(t.ChatInputOption, id=st.text(min_size=1),
                                         label=st.text(), recommended=st.none() | st.booleans()),
                               max_size=5).map(tuple)),
    st.builds(t.ChatInputMultiSelectQuestion, id=st.just("q"), message=st.text(),
              required=st.booleans(), allow_freeform_input=st.none() | st.booleans(),
              min=st.none() | st.integers(0, 3), max=st.none() | st.integers(0, 3),
              options=st.lists(st.builds(t.ChatInputOption, id=st.text(min_size=1),
                                         label=st.text(), recommended=st.none() | st.booleans()),
                               max_size=5).map(tuple)),
)


@given(questions, st.text())
def test_any_line_gives_an_answer_that_fits_or_a_bad_answer(question: t.ChatInputQuestion,
                                                            line: str) -> None:
    try:
        answer = parse_answer(question, line)
    except BadAnswer as e:
        assert str(e)
        return
    if isinstance(answer, t.ChatInputSkipped):
        assert not getattr(question, "required", False)
        return
    assert isinstance(answer, t.ChatInputAnswered) and answer.state == SUBMITTED
    expected = {t.ChatInputTextQuestion: t.ChatInputTextAnswerValue,
                t.ChatInputNumberQuestion: t.ChatInputNumberAnswerValue,
                t.ChatInputBooleanQuestion: t.ChatInputBooleanAnswerValue,
                t.ChatInputSingleSelectQuestion: t.ChatInputSelectedAnswerValue,
                t.ChatInputMultiSelectQuestion: t.ChatInputSelectedManyAnswerValue}
    assert isinstance(answer.value, expected[type(question)])
    assert prompt_for(question).endswith(": ")


# -- a hostile agent's question, in-process ---------------------------------------------------

ESC = "\x1b]0;pwned\x07"
RLO = "\u202e"


def asking(request: t.ChatInputRequest, completed: list[t.ChatInputCompletedAction]):  # type: ignore[no-untyped-def]
    """An intercept that asks ``request`` at each turn, and ends the turn once answered."""
    def play(demo: DemoHost, event: HostEvent) -> bool:
        if not isinstance(event, ClientActionApplied):
            return False
        chat, action = event.envelope.channel, event.envelope.action
        if isinstance(action, t.ChatTurnStartedAction):
            demo.host.dispatch(chat, t.ChatInputRequestedAction(request=request))
            return True
        if isinstance(action, t.ChatInputCompletedAction):
            completed.append(action)
            state = demo.host.state(chat)
            assert isinstance(state, t.ChatState) and state.active_turn is not None
            demo.host.dispatch(chat, t.ChatTurnCompleteAction(turn_id=state.active_turn.id,
                                                              duration=5))
            return True
        return False

    return play


class Terminal:
    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        if not self.answers:
            raise EOFError
        return self.answers.pop(0)


def test_a_hostile_question_is_shown_escaped_and_answered() -> None:
    request = t.ChatInputRequest(id="r1", message=f"Pick{ESC}", url=f"https://x/{RLO}y", questions=(
        t.ChatInputTextQuestion(id="a", title=f"T{ESC}", message=f"say{RLO}",
                                default_value=f"d{ESC}"),
        t.ChatInputSingleSelectQuestion(id="b", message="which", options=(
            t.ChatInputOption(id="x", label=f"X{ESC}", description=f"\x9b2J{RLO}"),
            t.ChatInputOption(id="y", label="Y", recommended=True))),
    ))
    completed: list[t.ChatInputCompletedAction] = []
    terminal = Terminal("", "zzz", "1")

    async def body() -> None:
        async with demo_host(intercept=asking(request, completed)) as demo:
            out, err = io.StringIO(), io.StringIO()
            status = await run_chat(demo.url, "hi", out=out, err=err, input_fn=terminal,
                                    timeout=TIMEOUT, interactive=True)
            assert status == EXIT_OK, err.getvalue()
            text = err.getvalue()
            assert controls_in(text) == [] and controls_in("".join(terminal.prompts)) == []
            assert "[the agent asks] Pick\\x1b]0;pwned\\x07\n  open: https://x/\\u202ey\n" in text
            assert "  (1/2) T\\x1b]0;pwned\\x07: say\\u202e\n" in text
            assert "    1) X\\x1b]0;pwned\\x07 - \\x9b2J\\u202e\n" in text
            assert "  choose one of 1-2 (or an option's name) (or /decline, /cancel)\n" in text
            assert terminal.prompts[0] == "  answer [default: d\\x1b]0;pwned\\x07]: "

    run(body())
    (done,) = completed
    assert done.response == t.ChatInputResponseKind.ACCEPT
    assert done.answers == {
        "a": answered(t.ChatInputTextAnswerValue(value=f"d{ESC}")),  # the default, as sent
        "b": answered(t.ChatInputSelectedAnswerValue(value="x")),
    }


def test_a_request_too_big_is_declined_unasked_and_a_plain_one_asks_to_accept() -> None:
    many = tuple(t.ChatInputBooleanQuestion(id=f"q{i}", message="?") for i in range(100))
    for request, answers, response in (
        (t.ChatInputRequest(id="r", message="lots", questions=many), (), "decline"),
        (t.ChatInputRequest(id="r", message="open this", url="https://example.com"), ("y",),
         "accept"),
        (t.ChatInputRequest(id="r", message="open this", url="https://example.com"),
         ("/cancel",), "cancel"),
    ):
        completed: list[t.ChatInputCompletedAction] = []
        terminal = Terminal(*answers)

        async def body(request: t.ChatInputRequest = request, terminal: Terminal = terminal,
                       completed: list[t.ChatInputCompletedAction] = completed) -> None:
            async with demo_host(intercept=asking(request, completed)) as demo:
                err = io.StringIO()
                status = await run_chat(demo.url, "hi", out=io.StringIO(), err=err,
                                        input_fn=terminal, timeout=TIMEOUT)
                assert status == EXIT_OK, err.getvalue()

        run(body())
        assert [c.response for c in completed] == [response]
        assert len(terminal.prompts) == len(answers)


def test_the_end_of_input_at_a_question_cancels_the_turn() -> None:
    request = t.ChatInputRequest(id="r", questions=(
        t.ChatInputBooleanQuestion(id="b", message="?"),))

    async def body() -> None:
        async with demo_host(intercept=asking(request, [])) as demo:
            err = io.StringIO()
            status = await run_chat(demo.url, "hi", out=io.StringIO(), err=err,
                                    input_fn=Terminal(), timeout=TIMEOUT)
            assert status == EXIT_FAILED
            assert err.getvalue().endswith(
                "[the turn was cancelled]\nagenthost-protocol chat: end of input: the agent's "
                "question was not answered\n")
            (chat,) = [c for c in demo.host.channels if c.startswith("ahp-chat:")]
            state = demo.host.state(chat)
            assert isinstance(state, t.ChatState) and state.active_turn is None
            assert state.turns[-1].state == t.TurnState.CANCELLED

    run(body())


# -- a long wait says what it waits for -------------------------------------------------------


def test_a_long_wait_says_what_it_waits_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chat_module, "WAIT_NOTICE_AFTER", 0.2)

    def stall_in_a_tool(demo: DemoHost, event: HostEvent) -> bool:
        if isinstance(event, ClientActionApplied) and isinstance(
                event.envelope.action, t.ChatTurnStartedAction):
            turn, chat = event.envelope.action.turn_id, event.envelope.channel
            demo.host.dispatch(chat, t.ChatToolCallStartAction(
                turn_id=turn, tool_call_id="c", tool_name="grep", display_name="Grep"))
            demo.host.dispatch(chat, t.ChatToolCallReadyAction(
                turn_id=turn, tool_call_id="c", invocation_message="grepping",
                confirmed=t.ToolCallConfirmationReason.NOT_NEEDED))
            return True
        return False

    def ignore(demo: DemoHost, event: HostEvent) -> bool:
        return isinstance(event, ClientActionApplied) and isinstance(
            event.envelope.action, t.ChatTurnStartedAction)

    async def body() -> None:
        for intercept, what in ((ignore, "the agent to reply"),
                                (stall_in_a_tool, "the tool Grep to finish")):
            async with demo_host(intercept=intercept) as demo:
                err = io.StringIO()
                status = await run_chat(demo.url, "hi", out=io.StringIO(), err=err,
                                        input_fn=Terminal(), timeout=1.0)
                assert status == EXIT_TIMEOUT
                text = err.getvalue()
                assert f"[waiting for {what}]\n" in text, text
                assert text.endswith(f"agenthost-protocol chat: timed out after 1 s waiting for "
                                     f"{what}\n"), text
                assert "the host sent nothing" not in text

    run(body())


def test_the_docs_show_the_example_as_it_is() -> None:
    root = Path(__file__).parent.parent
    page = (root / "docs" / "agents.md").read_text()
    section = page.split("## Asking the user: `ask()`", 1)[1].split("\n## ", 1)[0]
    block = section.split("```python\n", 1)[1].split("```", 1)[0]
    example = (root / "examples" / "ask.py").read_text()
    for piece in block.split("\n\n\n"):  # the page leaves describe() out
        assert piece in example, piece


# -- finding a session: every page of listSessions, bounded -----------------------------------


def summary(uri: str, modified: str) -> t.SessionSummary:
    return t.SessionSummary(provider="demo", title="", status=t.SessionStatus.IDLE,
                            resource=uri, created_at="2026-01-01T00:00:00.000Z",
                            modified_at=modified)


class Pages:
    """What ``listSessions`` answers, by cursor; ``endless``: a fresh empty page each time."""

    def __init__(self, pages: dict[str | None, t.ListSessionsResult], *,
                 endless: bool = False, items: int = 0) -> None:
        self.pages = pages
        self.endless = endless
        self.items = items
        self.calls = 0

    async def list_sessions(self, *, limit: int | None = None, cursor: str | None = None
                            ) -> t.ListSessionsResult:
        self.calls += 1
        if self.endless:
            return t.ListSessionsResult(items=tuple(
                summary(f"ahp-session:/s{self.calls}-{i}", "2026-01-01T00:00:00Z")
                for i in range(self.items)), next_cursor=f"c{self.calls}")
        return self.pages[cursor]


def a_chat() -> chat_module._Chat:
    return chat_module._Chat(yes=False, out=io.StringIO(), err=io.StringIO(),
                             input_fn=Terminal(), timeout=TIMEOUT, provider=None,
                             reasoning=False, interactive=False)


def test_continue_and_a_prefix_read_every_page(monkeypatch: pytest.MonkeyPatch) -> None:
    pages = Pages({
        None: t.ListSessionsResult(items=(
            summary("ahp-session:/aaa1", "2026-01-02T00:00:00.000Z"),
            summary("ahp-session:/bbb1", "2026-01-01T00:00:00Z")), next_cursor="p2"),
        "p2": t.ListSessionsResult(items=(
            summary("ahp-session:/aaa2", "2026-01-03T00:00:00.000+00:00"),
            summary("ahp-session:/ccc1", "not a date")), next_cursor="p3"),
        "p3": t.ListSessionsResult(items=(), next_cursor="p2"),  # a cursor seen before: done
    })
    chat = a_chat()

    async def body() -> None:
        client = pages  # duck-typed: only list_sessions is used
        assert await chat._latest_session(client) == "ahp-session:/aaa2"  # type: ignore[arg-type]
        assert await chat._find_session(client, "bb") == "ahp-session:/bbb1"  # type: ignore[arg-type]
        assert await chat._find_session(client, "ccc1") == "ahp-session:/ccc1"  # type: ignore[arg-type]
        with pytest.raises(CommandFailed, match="'aaa' names 2 sessions"):
            await chat._find_session(client, "aaa")  # type: ignore[arg-type]
        with pytest.raises(CommandFailed, match="no session's URI ends in a segment starting"):
            await chat._find_session(client, "zzz")  # type: ignore[arg-type]
        # a URI is taken as it is, without listing
        calls = pages.calls
        assert await chat._find_session(client, "ahp-session:/x") == "ahp-session:/x"  # type: ignore[arg-type]
        assert pages.calls == calls

        endless = Pages({}, endless=True)  # empty pages, each with a new cursor
        with pytest.raises(CommandFailed, match="no session to continue"):
            await chat._latest_session(endless)  # type: ignore[arg-type]
        assert endless.calls == 1  # an empty page that says there is more ends the listing

        monkeypatch.setattr(common, "MAX_PAGES", 5)
        full = Pages({}, endless=True, items=1)  # a session a page, never the last page
        assert (await chat._latest_session(full)).startswith("ahp-session:/")  # type: ignore[arg-type]
        assert full.calls == 5

    run(body())
