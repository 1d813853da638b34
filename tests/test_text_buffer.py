"""``TextBuffer``, the storage of streamed text: values that never change, shared prefixes.

Hostile use: appends to old and new handles in any order, branches of
branches (deep enough to break anything recursive), many threads extending
and reading one buffer at once, pickling and copying, and the memory that
one-character deltas and branches hold.  The chat reducer's hint (the parts
before the streaming part) is checked against states that defeat it.
"""

from __future__ import annotations

import copy
import pickle
import sys
import threading
from collections.abc import Iterator

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agenthost_protocol.reducers.chat import chat_reducer
from agenthost_protocol.types import (
    ActiveTurn,
    ChatDeltaAction,
    ChatReasoningAction,
    ChatState,
    MarkdownResponsePart,
    Message,
    MessageKind,
    MessageOrigin,
    ReasoningResponsePart,
    ResponsePart,
    SessionStatus,
    ToolCallResponsePart,
    ToolCallStreamingState,
)
from agenthost_protocol.types._text import _LOOSE, TextBuffer, _Line


def line_of(buffer: TextBuffer) -> _Line:
    line = buffer._line
    assert line is not None
    return line


def chain(*texts: str) -> list[TextBuffer]:
    """The buffers of appending ``texts`` one after the other to an empty buffer."""
    buffers = [TextBuffer.of("")]
    for text in texts:
        buffers.append(buffers[-1].appended(text))
    return buffers


# ─── Values ──────────────────────────────────────────────────────────────────


def test_every_handle_keeps_its_text() -> None:
    buffers = chain(*"abcdefghij" * 20)
    for length, buffer in enumerate(buffers):
        assert buffer.value == ("abcdefghij" * 20)[:length]
        assert len(buffer) == length
    # Reading them in any order, again, changes nothing.
    for buffer in reversed(buffers):
        assert len(buffer.value) == len(buffer)


def test_appending_nothing_is_the_same_value() -> None:
    buffer = TextBuffer.of("abc")
    assert buffer.appended("") is buffer


def test_a_text_never_appended_to_has_no_line_until_then() -> None:
    text = "x" * 1000
    buffer = TextBuffer.of(text)
    assert buffer._line is None and buffer.value is text
    first, second = buffer.appended("1"), buffer.appended("2")
    # Each append started a line of its own, sharing the str rather than copying it.
    assert line_of(first) is not line_of(second)
    assert line_of(first).parts[0] is text and line_of(second).parts[0] is text
    assert (first.value, second.value, buffer.value) == (text + "1", text + "2", text)
    assert first.appended("a").value == text + "1a"
    # Texts of the same length without a line are compared by their text.
    assert TextBuffer.of("ab") != TextBuffer.of("ba")
    assert TextBuffer.of("ab") == TextBuffer.of("ab")


def test_equality_and_hash_follow_the_text() -> None:
    a = chain("ab", "c")[-1]
    b = TextBuffer.of("abc")
    c = chain("a", "bc")[-1]
    assert a == b == c and hash(a) == hash(b) == hash(c) == hash("abc")
    assert a != TextBuffer.of("abd") and a != TextBuffer.of("ab")
    assert (a == "abc") is False  # a buffer is not a str (the model exposes the str)
    assert repr(a) == "'abc'"


@given(st.lists(st.tuples(st.integers(min_value=0), st.text(max_size=3)), max_size=60))
def test_any_order_of_appends_keeps_every_value(steps: list[tuple[int, str]]) -> None:
    """Extend any earlier handle (newest or not) in any order: every handle keeps its text."""
    buffers = [TextBuffer.of("")]
    texts = [""]
    for pick, text in steps:
        index = pick % len(buffers)
        buffers.append(buffers[index].appended(text))
        texts.append(texts[index] + text)
    for buffer, text in zip(buffers, texts, strict=True):
        assert buffer.value == text and len(buffer) == len(text)
    for buffer, text in zip(buffers, texts, strict=True):  # after everything was read
        assert buffer.appended("!").value == text + "!"


# ─── Branches share the text they branch off ─────────────────────────────────


def test_a_branch_shares_the_older_text_instead_of_copying_it() -> None:
    *_, older, newer = chain(*["x" * 1000] * 100)
    assert newer.value == "x" * 100_000
    branch = older.appended("!")
    assert branch.value == "x" * 99_000 + "!"
    assert older.value == "x" * 99_000 and newer.value == "x" * 100_000
    # The branch holds the older buffer and its own delta, not a copy of the text.
    line = line_of(branch)
    assert line.prefix is older and line.base == 99_000
    assert sum(len(part) for part in line.parts) == 1


def test_branches_of_branches_nest_without_limit() -> None:
    """20,000 nested branches: reading, comparing and pickling are not recursive."""
    depth = 20_000
    buffer = TextBuffer.of("")
    for _ in range(depth):
        buffer.appended("z")  # extends ``buffer``'s line: ``buffer`` is an older handle now
        buffer = buffer.appended("a")  # so this branches off it
    nesting, line = 0, line_of(buffer)
    while line.prefix is not None:
        nesting, line = nesting + 1, line_of(line.prefix)
    assert nesting == depth - 1  # the first ``appended("a")`` started a line of its own
    assert buffer.value == "a" * depth
    assert pickle.loads(pickle.dumps(buffer)) == buffer
    assert buffer == TextBuffer.of("a" * depth)
    del buffer  # and freeing it is not recursive either


def test_many_branches_off_one_older_text_hold_little_memory() -> None:
    *_, older, _newer = chain(*["y" * 100] * 1000)  # an older text of 99,900 characters
    branches = [older.appended(f"<{i}>") for i in range(4000)]
    own = sum(len(part) for branch in branches for part in line_of(branch).parts)
    assert own == sum(len(f"<{i}>") for i in range(4000))
    assert branches[123].value == "y" * 99_900 + "<123>"


# ─── Memory of many small deltas ─────────────────────────────────────────────


def test_small_deltas_are_joined_as_they_come() -> None:
    """100,000 one-character deltas: a string per ``_LOOSE`` deltas at most, not one each."""
    buffer = TextBuffer.of("")
    for i in range(100_000):
        buffer = buffer.appended(chr(0x4E00 + i % 1000))
    parts = line_of(buffer).parts
    assert len(parts) <= 100_000 // _LOOSE + _LOOSE + 1
    held = sys.getsizeof(parts) + sum(map(sys.getsizeof, parts))
    assert held < 3 * sys.getsizeof(buffer.value)
    assert buffer.value[-1] == chr(0x4E00 + 99_999 % 1000)


# ─── Threads ─────────────────────────────────────────────────────────────────


@pytest.fixture
def busy_switching() -> Iterator[None]:
    """Switch threads as often as the interpreter allows, to provoke interleavings."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


@pytest.mark.usefixtures("busy_switching")
def test_threads_extending_the_same_newest_buffer_each_get_their_own_text() -> None:
    base = chain(*"base")[-1]
    results: dict[int, list[TextBuffer]] = {}
    start = threading.Barrier(8)

    def work(n: int) -> None:
        start.wait()
        mine = []
        for i in range(300):
            mine.append(base.appended(f"[{n}:{i}]"))  # every thread extends the same handle
        results[n] = mine

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert base.value == "base"
    for n, mine in results.items():
        for i, buffer in enumerate(mine):
            assert buffer.value == f"base[{n}:{i}]"


@pytest.mark.usefixtures("busy_switching")
def test_threads_streaming_and_reading_one_line() -> None:
    """Writers extend chains off one buffer while readers read every handle they see."""
    root = TextBuffer.of("")
    seen: list[tuple[TextBuffer, str]] = []
    start = threading.Barrier(6)
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        start.wait()
        buffer, text = root, ""
        for i in range(2000):
            delta = f"{n}.{i};"
            buffer, text = buffer.appended(delta), text + delta
            if i % 97 == 0:
                seen.append((buffer, text))

    def reader() -> None:
        start.wait()
        try:
            for _ in range(200):
                for buffer, text in list(seen):
                    assert buffer.value == text
        except BaseException as error:  # pragma: no cover  (reported below)
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert all(buffer.value == text for buffer, text in seen)


# ─── Pickling and copying ────────────────────────────────────────────────────


def test_pickling_and_copying_keep_the_text_and_share_nothing() -> None:
    *_, older, newer = chain(*"pickle me")
    branch = older.appended("?")
    for buffer in (older, newer, branch):
        for clone in (
            pickle.loads(pickle.dumps(buffer)),
            copy.copy(buffer),
            copy.deepcopy(buffer),
        ):
            assert clone == buffer and clone.value == buffer.value
            assert clone.appended("!").value == buffer.value + "!"
        assert pickle.loads(pickle.dumps(buffer))._line is not line_of(buffer)
    part = MarkdownResponsePart(id="md-1", content=newer)
    assert pickle.loads(pickle.dumps(part)) == part


# ─── The chat reducer's hint ─────────────────────────────────────────────────


def _state(*parts: ResponsePart) -> ChatState:
    message = Message(text="Hi", origin=MessageOrigin(kind=MessageKind.USER))
    turn = ActiveTurn(id="t", started_at="x", message=message, response_parts=parts)
    return ChatState(
        resource="ahp-chat:/c",
        title="c",
        status=SessionStatus.IN_PROGRESS,
        modified_at="x",
        turns=(),
        active_turn=turn,
    )


def _delta(part_id: str, text: str) -> ChatDeltaAction:
    return ChatDeltaAction(turn_id="t", part_id=part_id, content=text)


def _texts(state: ChatState) -> list[str]:
    assert state.active_turn is not None
    return [
        part.content
        for part in state.active_turn.response_parts
        if isinstance(part, (MarkdownResponsePart, ReasoningResponsePart))
    ]


def _with_parts(state: ChatState, *parts: ResponsePart) -> ChatState:
    assert state.active_turn is not None
    return attrs.evolve(state, active_turn=attrs.evolve(state.active_turn, response_parts=parts))


def test_the_first_part_with_the_id_wins_even_after_a_hint() -> None:
    first = MarkdownResponsePart(id="md-0", content="0")
    state = _state(first, MarkdownResponsePart(id="md-2", content=""))
    for text in "abc":
        state = chat_reducer(state, _delta("md-2", text))  # leaves a hint on md-2's text
    assert _texts(state) == ["0", "abc"]
    assert state.active_turn is not None
    streamed = state.active_turn.response_parts[-1]
    # The same streamed part after an earlier part with its id: the earlier one wins.
    twin = MarkdownResponsePart(id="md-2", content="twin")
    clash = _with_parts(state, twin, streamed)
    assert _texts(chat_reducer(clash, _delta("md-2", "!"))) == ["twin!", "abc"]
    # A tool call with that id comes first: nothing is appended.
    call = ToolCallResponsePart(
        tool_call=ToolCallStreamingState(tool_call_id="md-2", tool_name="ls", display_name="ls")
    )
    blocked = _with_parts(state, call, streamed)
    assert chat_reducer(blocked, _delta("md-2", "!")) is blocked
    # The hinted text reused by a part of another id, after a part of that id.
    assert isinstance(streamed, MarkdownResponsePart)
    reused = MarkdownResponsePart(id="md-0", content=streamed._content)
    assert _texts(chat_reducer(_with_parts(state, first, reused), _delta("md-0", "!"))) == [
        "0!",
        "abc",
    ]
    # And the stream itself goes on as before.
    assert _texts(chat_reducer(state, _delta("md-2", "d"))) == ["0", "abcd"]


def test_only_the_newest_part_of_a_turn_keeps_a_hint() -> None:
    state = _state()
    parts: list[ResponsePart] = []
    for n in range(5):
        parts.append(MarkdownResponsePart(id=f"md-{n}", content=""))
        state = _with_parts(state, *parts)
        for text in "xy":
            state = chat_reducer(state, _delta(f"md-{n}", text))
        assert state.active_turn is not None
        parts = list(state.active_turn.response_parts)
    hints = [part._content._line.hint for part in parts]  # type: ignore[union-attr]
    assert hints[:-1] == [None] * 4 and hints[-1] is not None
    assert _texts(state) == ["xy"] * 5


def test_reasoning_streams_alongside_markdown() -> None:
    state = _state(
        ReasoningResponsePart(id="r", content=""), MarkdownResponsePart(id="m", content="")
    )
    for i in range(10):
        state = chat_reducer(state, ChatReasoningAction(turn_id="t", part_id="r", content=f"r{i}"))
        state = chat_reducer(state, _delta("m", f"m{i}"))
        state = chat_reducer(state, _delta("r", "no"))  # a delta never goes to reasoning
    assert _texts(state) == ["".join(f"{kind}{i}" for i in range(10)) for kind in "rm"]
