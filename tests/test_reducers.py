"""Rules of the root, session, terminal, changeset, annotations and resource-watch
reducers, and of ``reduce``, beyond what the official fixtures check.

The fixtures (``test_reducer_fixtures.py``) pin the happy paths; this file pins
the contract around them: no-op identity, foreign and unknown actions, the
clock, unknown status bits, open-union entries, purity, and routing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agenthost_protocol
from agenthost_protocol import wire
from agenthost_protocol.channels import ChannelKind
from agenthost_protocol.errors import LocalProtocolError
from agenthost_protocol.reducers import (
    REDUCERS,
    STATE_TYPES,
    annotations_reducer,
    changeset_reducer,
    reduce,
    resource_watch_reducer,
    root_reducer,
    session_reducer,
    terminal_reducer,
)
from agenthost_protocol.types import (
    Annotation,
    AnnotationEntry,
    AnnotationsEntryRemovedAction,
    AnnotationsEntrySetAction,
    AnnotationsRemovedAction,
    AnnotationsSetAction,
    AnnotationsState,
    AnnotationsUpdatedAction,
    ChangesetClearedAction,
    ChangesetContentChangedAction,
    ChangesetFile,
    ChangesetFileRemovedAction,
    ChangesetFileSetAction,
    ChangesetFilesReviewChangedAction,
    ChangesetOperation,
    ChangesetOperationStatusChangedAction,
    ChangesetState,
    ChangesetStatusChangedAction,
    ChatInputRequest,
    ChatState,
    ChatSummary,
    ConfigSchema,
    ErrorInfo,
    FileEdit,
    McpServerCustomization,
    McpServerReadyState,
    McpServerStartingState,
    McpServerStoppedState,
    PartialChatSummary,
    PluginCustomization,
    ResourceChange,
    ResourceChangeList,
    ResourceWatchChangedAction,
    ResourceWatchState,
    RootActiveSessionsChangedAction,
    RootConfigChangedAction,
    RootConfigState,
    RootState,
    SessionActiveClient,
    SessionActiveClientRemovedAction,
    SessionActiveClientSetAction,
    SessionActivityChangedAction,
    SessionChatInputRequest,
    SessionChatRemovedAction,
    SessionChatUpdatedAction,
    SessionConfigChangedAction,
    SessionConfigSchema,
    SessionConfigState,
    SessionCustomizationRemovedAction,
    SessionCustomizationToggledAction,
    SessionCustomizationUpdatedAction,
    SessionInputNeededRemovedAction,
    SessionInputNeededSetAction,
    SessionIsArchivedChangedAction,
    SessionIsReadChangedAction,
    SessionMcpServerStartRequestedAction,
    SessionMcpServerStateChangedAction,
    SessionMcpServerStopRequestedAction,
    SessionReadyAction,
    SessionState,
    SessionStatus,
    SessionTitleChangedAction,
    SessionWorkingDirectoryRemovedAction,
    SessionWorkingDirectorySetAction,
    SkillCustomization,
    StateAction,
    TerminalClaimedAction,
    TerminalClearedAction,
    TerminalClientClaim,
    TerminalCommandExecutedAction,
    TerminalCommandFinishedAction,
    TerminalCommandPart,
    TerminalDataAction,
    TerminalInputAction,
    TerminalResizedAction,
    TerminalState,
    TerminalUnclassifiedPart,
    TextPosition,
    TextRange,
    UnknownAction,
    UnknownChildCustomization,
    UnknownCustomization,
    UnknownTerminalContentPart,
)

FIXED: Callable[[], int] = lambda: 9999  # noqa: E731


# ── builders ─────────────────────────────────────────────────────────────────


def session(**changes: Any) -> SessionState:
    state = SessionState(
        provider="copilot",
        title="Session",
        status=SessionStatus.IDLE,
        lifecycle="creating",
        active_clients=(),
        chats=(),
    )
    return attrs.evolve(state, **changes)


def with_status(state: SessionState, status: int) -> SessionState:
    return attrs.evolve(state, status=SessionStatus(status))


def terminal(*parts: Any) -> TerminalState:
    return TerminalState(title="bash", content=parts, claim=TerminalClientClaim(client_id="c1"))


def chat_summary(uri: str, **changes: Any) -> ChatSummary:
    base = ChatSummary(
        resource=uri, title=uri, status=SessionStatus.IDLE, modified_at="1970-01-01T00:00:01.000Z"
    )
    return attrs.evolve(base, **changes)


def plugin(pid: str, *children: Any, enabled: bool = True) -> PluginCustomization:
    return PluginCustomization(
        id=pid, uri=f"https://p/{pid}", name=pid, enabled=enabled, children=children or None
    )


def skill(sid: str) -> SkillCustomization:
    return SkillCustomization(id=sid, uri=f"https://p/{sid}", name=sid)


def mcp(mid: str, channel: str | None = None) -> McpServerCustomization:
    return McpServerCustomization(
        id=mid,
        uri=f"https://p/{mid}",
        name=mid,
        enabled=True,
        state=McpServerStartingState(),
        channel=channel,
    )


def rng(a: int, b: int) -> TextRange:
    return TextRange(start=TextPosition(line=a, character=0), end=TextPosition(line=b, character=0))


def annotation(aid: str, *entry_ids: str, **changes: Any) -> Annotation:
    entries = tuple(AnnotationEntry(id=e, text=f"text {e}") for e in entry_ids or ("e1",))
    base = Annotation(
        id=aid,
        turn_id="t1",
        resource="file:///a.py",
        range=rng(1, 2),
        resolved=False,
        entries=entries,
    )
    return attrs.evolve(base, **changes)


def changeset_file(fid: str) -> ChangesetFile:
    return ChangesetFile(id=fid, edit=FileEdit())


def operation(oid: str, status: str = "idle") -> ChangesetOperation:
    return ChangesetOperation(id=oid, label=oid, scopes=("changeset",), status=status)


ERROR = ErrorInfo(error_type="boom", message="it broke")

# One state and one action per channel, for the cross-channel tests.
STATES: dict[ChannelKind, Any] = {
    ChannelKind.ROOT: RootState(agents=(), active_sessions=1),
    ChannelKind.SESSION: session(),
    ChannelKind.TERMINAL: terminal(),
    ChannelKind.CHANGESET: ChangesetState(status="ready", files=(changeset_file("f1"),)),
    ChannelKind.ANNOTATIONS: AnnotationsState(annotations=(annotation("a1"),)),
    ChannelKind.RESOURCE_WATCH: ResourceWatchState(root="file:///w", recursive=True),
}
ACTIONS: dict[ChannelKind, StateAction] = {
    ChannelKind.ROOT: RootActiveSessionsChangedAction(active_sessions=7),
    ChannelKind.SESSION: SessionTitleChangedAction(title="New"),
    ChannelKind.TERMINAL: TerminalDataAction(data="x"),
    ChannelKind.CHANGESET: ChangesetClearedAction(),
    ChannelKind.ANNOTATIONS: AnnotationsRemovedAction(annotation_id="a1"),
    ChannelKind.RESOURCE_WATCH: ResourceWatchChangedAction(
        changes=ResourceChangeList(items=(ResourceChange(uri="file:///w/a", type="created"),))
    ),
}
MINE: dict[ChannelKind, Callable[..., Any]] = {
    ChannelKind.ROOT: root_reducer,
    ChannelKind.SESSION: session_reducer,
    ChannelKind.TERMINAL: terminal_reducer,
    ChannelKind.CHANGESET: changeset_reducer,
    ChannelKind.ANNOTATIONS: annotations_reducer,
    ChannelKind.RESOURCE_WATCH: resource_watch_reducer,
}


# ── every reducer ────────────────────────────────────────────────────────────


@pytest.mark.parametrize("kind", list(MINE), ids=lambda k: k.value)
def test_own_action_applies(kind: ChannelKind) -> None:
    reducer, state = MINE[kind], STATES[kind]
    result = reducer(state, ACTIONS[kind], now=FIXED)
    assert type(result) is type(state)
    if kind is ChannelKind.RESOURCE_WATCH:
        assert result is state  # a pass-through channel
    else:
        assert result != state


@pytest.mark.parametrize("kind", list(MINE), ids=lambda k: k.value)
def test_foreign_actions_return_the_same_state(kind: ChannelKind) -> None:
    reducer, state = MINE[kind], STATES[kind]
    for other, action in ACTIONS.items():
        if other is not kind:
            assert reducer(state, action, now=FIXED) is state


@pytest.mark.parametrize("kind", list(MINE), ids=lambda k: k.value)
def test_unknown_action_calls_the_hook_and_returns_the_same_state(kind: ChannelKind) -> None:
    reducer, state = MINE[kind], STATES[kind]
    action = UnknownAction(type=f"{kind.value}/fromTheFuture", raw={"type": "x", "n": 1})
    seen: list[UnknownAction] = []
    assert reducer(state, action, on_unknown=seen.append) is state
    assert seen == [action]
    assert reducer(state, action) is state  # no hook: still fine


@pytest.mark.parametrize("kind", list(MINE), ids=lambda k: k.value)
def test_known_actions_never_reach_the_hook(kind: ChannelKind) -> None:
    def hook(action: UnknownAction) -> None:
        raise AssertionError(action)

    for action in ACTIONS.values():
        MINE[kind](STATES[kind], action, now=FIXED, on_unknown=hook)


# ── root ─────────────────────────────────────────────────────────────────────


def test_root_same_session_count_is_a_noop() -> None:
    state = RootState(agents=(), active_sessions=3)
    assert root_reducer(state, RootActiveSessionsChangedAction(active_sessions=3)) is state


def test_root_config_merge_does_not_touch_the_old_values() -> None:
    values = {"a": 1, "b": 2}
    state = RootState(
        agents=(), config=RootConfigState(schema=ConfigSchema(properties={}), values=values)
    )
    merged = root_reducer(state, RootConfigChangedAction(config={"b": 3, "c": 4}))
    assert merged.config is not None
    assert merged.config.values == {"a": 1, "b": 3, "c": 4}
    assert values == {"a": 1, "b": 2}
    replaced = root_reducer(state, RootConfigChangedAction(config={"z": 0}, replace=True))
    assert replaced.config is not None
    assert replaced.config.values == {"z": 0}


# ── session ──────────────────────────────────────────────────────────────────


def test_session_reducer_never_reads_the_clock() -> None:
    def clock() -> int:
        raise AssertionError("the session reducer stamps no time in 0.7.0")

    state = session(config=SessionConfigState(schema=SessionConfigSchema(properties={}), values={}))
    titled = session_reducer(state, SessionTitleChangedAction(title="T"), now=clock)
    assert titled.title == "T"
    configured = session_reducer(state, SessionConfigChangedAction(config={"a": 1}), now=clock)
    assert configured.config is not None and configured.config.values == {"a": 1}
    assert session_reducer(titled, SessionTitleChangedAction(title="T"), now=clock) is titled


def test_session_flags_keep_unknown_status_bits() -> None:
    unknown_bit = 1 << 31
    state = with_status(session(), SessionStatus.IN_PROGRESS | unknown_bit)
    read = session_reducer(state, SessionIsReadChangedAction(is_read=True))
    assert int(read.status) == 8 | 32 | unknown_bit
    archived = session_reducer(read, SessionIsArchivedChangedAction(is_archived=True))
    assert int(archived.status) == 8 | 32 | 64 | unknown_bit
    unread = session_reducer(archived, SessionIsReadChangedAction(is_read=False))
    assert int(unread.status) == 8 | 64 | unknown_bit


def test_session_flag_already_in_place_is_a_noop() -> None:
    state = with_status(session(), 1 | 32)
    assert session_reducer(state, SessionIsReadChangedAction(is_read=True)) is state
    assert session_reducer(state, SessionIsArchivedChangedAction(is_archived=False)) is state


def test_session_ready_leaves_status_alone_and_repeats_as_noop() -> None:
    state = with_status(session(), 8)
    ready = session_reducer(state, SessionReadyAction())
    assert ready.lifecycle == "ready"
    assert int(ready.status) == 8
    assert session_reducer(ready, SessionReadyAction()) is ready


@pytest.mark.parametrize(
    "action",
    [
        SessionChatRemovedAction(chat="ahp-chat:/nope"),
        SessionChatUpdatedAction(chat="ahp-chat:/nope", changes=PartialChatSummary(title="x")),
        SessionChatUpdatedAction(
            chat="ahp-chat:/c1", changes=PartialChatSummary(title="ahp-chat:/c1")
        ),
        SessionChatUpdatedAction(chat="ahp-chat:/c1", changes=PartialChatSummary()),
        SessionActiveClientRemovedAction(client_id="nobody"),
        SessionActivityChangedAction(activity=None),
        SessionCustomizationToggledAction(id="nope", enabled=False),
        SessionCustomizationToggledAction(id="p1", enabled=True),
        SessionCustomizationRemovedAction(id="nope"),
        SessionMcpServerStateChangedAction(id="nope", state=McpServerReadyState()),
        SessionMcpServerStateChangedAction(id="p1", state=McpServerReadyState()),
        SessionMcpServerStateChangedAction(id="s1", state=McpServerReadyState()),
        SessionMcpServerStateChangedAction(id="m1", state=McpServerStartingState()),
        SessionMcpServerStartRequestedAction(id="m1"),  # already starting, no channel
        SessionMcpServerStartRequestedAction(id="s1"),  # a skill, not an MCP server
        SessionMcpServerStopRequestedAction(id="nope"),
        SessionConfigChangedAction(config={"a": 1}),  # no config on this session
        SessionWorkingDirectorySetAction(directory="file:///w"),  # already there
        SessionWorkingDirectoryRemovedAction(directory="file:///elsewhere"),
        SessionInputNeededRemovedAction(id="nope"),
        SessionTitleChangedAction(title="Session"),
    ],
    ids=lambda a: a.type.value,
)
def test_session_noops_return_the_same_state(action: StateAction) -> None:
    state = session(
        chats=(chat_summary("ahp-chat:/c1"),),
        customizations=(plugin("p1", skill("s1"), mcp("m1")),),
        working_directories=("file:///w",),
    )
    assert session_reducer(state, action, now=FIXED) is state


def test_session_chat_updated_ignores_resource_and_absent_fields() -> None:
    state = session(chats=(chat_summary("ahp-chat:/c1", activity="busy"),))
    changes = PartialChatSummary(resource="ahp-chat:/other", title="Renamed")
    chat = session_reducer(
        state, SessionChatUpdatedAction(chat="ahp-chat:/c1", changes=changes)
    ).chats[0]
    assert (chat.resource, chat.title, chat.activity) == ("ahp-chat:/c1", "Renamed", "busy")


def test_session_chat_removed_keeps_an_unrelated_default_chat() -> None:
    state = session(
        chats=(chat_summary("ahp-chat:/c1"), chat_summary("ahp-chat:/c2")),
        default_chat="ahp-chat:/c2",
    )
    result = session_reducer(state, SessionChatRemovedAction(chat="ahp-chat:/c1"))
    assert [c.resource for c in result.chats] == ["ahp-chat:/c2"]
    assert result.default_chat == "ahp-chat:/c2"


def test_session_active_client_set_upserts_in_place() -> None:
    a, b = (
        SessionActiveClient(client_id="a", tools=()),
        SessionActiveClient(client_id="b", tools=()),
    )
    state = session(active_clients=(a, b))
    a2 = SessionActiveClient(client_id="a", display_name="A", tools=())
    assert session_reducer(
        state, SessionActiveClientSetAction(active_client=a2)
    ).active_clients == (a2, b)
    assert session_reducer(state, SessionActiveClientSetAction(active_client=a)) is state


def test_session_config_changed_does_not_alias() -> None:
    values = {"mode": "fast"}
    config = SessionConfigState(schema=SessionConfigSchema(properties={}), values=values)
    update = {"mode": "slow"}
    result = session_reducer(
        session(config=config), SessionConfigChangedAction(config=update), now=FIXED
    )
    assert result.config is not None
    assert result.config.values == {"mode": "slow"}
    assert values == {"mode": "fast"}
    assert result.config.values is not update


def test_session_customization_removed_prefers_top_level_then_every_container() -> None:
    # Inventory §2.2: a top-level match is removed with its children; otherwise the
    # first child with the id is removed from *every* container.
    state = session(
        customizations=(
            plugin("p1", skill("x"), skill("y"), skill("x")), plugin("p2", skill("x")), mcp("m")
        )
    )
    removed = session_reducer(state, SessionCustomizationRemovedAction(id="x"))
    assert removed.customizations == (
        plugin("p1", skill("y"), skill("x")), attrs.evolve(plugin("p2"), children=()), mcp("m")
    )
    removed_top = session_reducer(state, SessionCustomizationRemovedAction(id="p2"))
    assert removed_top.customizations == (
        plugin("p1", skill("x"), skill("y"), skill("x")), mcp("m")
    )


def test_session_customization_toggled_top_level_first_then_first_container() -> None:
    state = session(
        customizations=(plugin("p1", skill("s")), plugin("p2", skill("s")), plugin("s"))
    )
    top = session_reducer(state, SessionCustomizationToggledAction(id="s", enabled=False))
    assert top.customizations == (
        plugin("p1", skill("s")), plugin("p2", skill("s")), attrs.evolve(plugin("s"), enabled=False)
    )
    children = (plugin("p1", skill("a")), plugin("p2", skill("s")), plugin("p3", skill("s")))
    state = session(customizations=children)
    child = session_reducer(state, SessionCustomizationToggledAction(id="s", enabled=False))
    assert child.customizations == (
        plugin("p1", skill("a")),
        plugin("p2", attrs.evolve(skill("s"), enabled=False)),
        plugin("p3", skill("s")),
    )
    assert session_reducer(child, SessionCustomizationToggledAction(id="s", enabled=False)) is child
    # ``enabled`` absent on a child means enabled, but the reducer writes the value given.
    explicit = session_reducer(state, SessionCustomizationToggledAction(id="s", enabled=True))
    assert explicit.customizations is not None
    written = explicit.customizations[1]
    assert isinstance(written, PluginCustomization) and written.children is not None
    assert getattr(written.children[0], "enabled", None) is True


def test_session_mcp_server_start_and_stop_requests() -> None:
    top = mcp("m1", channel="mcp://old")
    state = session(customizations=(top, plugin("p1", mcp("m2", channel="mcp://a")),
                                    plugin("p2", mcp("m2", channel="mcp://b"))))
    stopped = session_reducer(state, SessionMcpServerStopRequestedAction(id="m1"))
    assert stopped.customizations is not None
    expected = attrs.evolve(top, state=McpServerStoppedState(), channel=None)
    assert stopped.customizations[0] == expected
    started = session_reducer(state, SessionMcpServerStartRequestedAction(id="m2"))
    assert started.customizations is not None
    assert started.customizations[0] is top
    for container in started.customizations[1:]:  # every container's child, channel cleared
        assert isinstance(container, PluginCustomization)
        assert container.children == (
            attrs.evolve(mcp("m2"), state=McpServerStartingState(), channel=None),
        )
    # A top-level entry with the id decides alone, even when it is no MCP server.
    shadowed = session(customizations=(plugin("p1", mcp("x")), plugin("x")))
    assert session_reducer(shadowed, SessionMcpServerStartRequestedAction(id="x")) is shadowed


def test_session_working_directories() -> None:
    state = session()
    one = session_reducer(state, SessionWorkingDirectorySetAction(directory="file:///a"))
    two = session_reducer(one, SessionWorkingDirectorySetAction(directory="file:///b"))
    assert two.working_directories == ("file:///a", "file:///b")
    assert session_reducer(two, SessionWorkingDirectorySetAction(directory="file:///a")) is two
    back = session_reducer(two, SessionWorkingDirectoryRemovedAction(directory="file:///a"))
    assert back.working_directories == ("file:///b",)
    empty = session_reducer(back, SessionWorkingDirectoryRemovedAction(directory="file:///b"))
    assert empty.working_directories == ()  # the key stays, as an empty array
    assert wire.unstructure(empty)["workingDirectories"] == []
    assert session_reducer(state, SessionWorkingDirectoryRemovedAction(directory="x")) is state


def test_session_input_needed_aggregate_and_status_bits() -> None:
    chat_input = SessionChatInputRequest(
        id="r1", chat="ahp-chat:/c", request=ChatInputRequest(id="r1", message="?")
    )
    other = attrs.evolve(chat_input, id="r2")
    state = with_status(session(), SessionStatus.IDLE | SessionStatus.IS_READ | (1 << 30))
    raised = session_reducer(state, SessionInputNeededSetAction(request=chat_input))
    assert raised.input_needed == (chat_input,)
    assert int(raised.status) == 24 | 32 | (1 << 30)
    assert session_reducer(raised, SessionInputNeededSetAction(request=chat_input)) is raised
    both = session_reducer(raised, SessionInputNeededSetAction(request=other))
    replaced = session_reducer(both, SessionInputNeededSetAction(request=attrs.evolve(
        chat_input, chat="ahp-chat:/d")))
    assert replaced.input_needed is not None
    assert [getattr(r, "chat", None) for r in replaced.input_needed] == [
        "ahp-chat:/d", "ahp-chat:/c"
    ]
    one_left = session_reducer(both, SessionInputNeededRemovedAction(id="r1"))
    assert one_left.input_needed == (other,) and int(one_left.status) == 24 | 32 | (1 << 30)
    none_left = session_reducer(one_left, SessionInputNeededRemovedAction(id="r2"))
    # Only bit 16 is cleared: an idle session raised to InputNeeded ends InProgress.
    assert none_left.input_needed is None
    assert int(none_left.status) == 8 | 32 | (1 << 30)
    error = with_status(session(input_needed=(chat_input,)), SessionStatus.ERROR)
    assert int(session_reducer(error, SessionInputNeededRemovedAction(id="r1")).status) == 2


def test_session_customizations_of_unknown_type_are_matched_by_raw_id() -> None:
    future = UnknownCustomization(
        type="future", raw={"type": "future", "id": "f1", "enabled": False}
    )
    child = UnknownChildCustomization(type="gadget", raw={"type": "gadget", "id": "g1"})
    state = session(customizations=(future, plugin("p1", child, skill("s1"))))

    toggled = session_reducer(state, SessionCustomizationToggledAction(id="f1", enabled=True))
    assert toggled.customizations is not None
    entry = toggled.customizations[0]
    assert isinstance(entry, UnknownCustomization)
    assert entry.raw == {"type": "future", "id": "f1", "enabled": True}
    assert future.raw["enabled"] is False

    without_child = session_reducer(state, SessionCustomizationRemovedAction(id="g1"))
    assert without_child.customizations == (future, plugin("p1", skill("s1")))

    replacement = UnknownCustomization(type="future", raw={"type": "future", "id": "f1", "v": 2})
    updated = session_reducer(state, SessionCustomizationUpdatedAction(customization=replacement))
    assert updated.customizations is not None
    assert updated.customizations[0] is replacement


def test_session_customization_updated_creates_the_list_and_replaces_children() -> None:
    created = session_reducer(
        session(), SessionCustomizationUpdatedAction(customization=plugin("p1"))
    )
    assert created.customizations == (plugin("p1"),)
    state = session(customizations=(plugin("p1", skill("s1")), plugin("p2")))
    replaced = session_reducer(state, SessionCustomizationUpdatedAction(customization=plugin("p1")))
    assert replaced.customizations == (plugin("p1"), plugin("p2"))


def test_session_mcp_server_state_replaces_state_and_clears_channel() -> None:
    top, container = mcp("m1", channel="mcp://old"), plugin("p1", mcp("m2", channel="mcp://kept"))
    state = session(customizations=(top, container))
    result = session_reducer(
        state, SessionMcpServerStateChangedAction(id="m1", state=McpServerReadyState())
    )
    assert result.customizations is not None
    assert result.customizations[0] == attrs.evolve(top, state=McpServerReadyState(), channel=None)
    assert result.customizations[1] is container
    nested = session_reducer(
        state,
        SessionMcpServerStateChangedAction(
            id="m2", state=McpServerReadyState(), channel="mcp://new"
        ),
    )
    assert nested.customizations is not None
    changed = nested.customizations[1]
    assert isinstance(changed, PluginCustomization)
    assert changed.children == (
        attrs.evolve(mcp("m2"), state=McpServerReadyState(), channel="mcp://new"),
    )


# ── terminal ─────────────────────────────────────────────────────────────────


def test_terminal_noops_return_the_same_state() -> None:
    state = attrs.evolve(terminal(TerminalUnclassifiedPart(value="$ ")), cols=80, rows=24)
    assert terminal_reducer(state, TerminalInputAction(data="ls\r")) is state
    assert terminal_reducer(state, TerminalResizedAction(cols=80, rows=24)) is state
    assert (
        terminal_reducer(state, TerminalClaimedAction(claim=TerminalClientClaim(client_id="c1")))
        is state
    )
    assert terminal_reducer(state, TerminalDataAction(data="")) is state
    assert (
        terminal_reducer(state, TerminalCommandFinishedAction(command_id="nope", exit_code=0))
        is state
    )
    empty = terminal()
    assert terminal_reducer(empty, TerminalClearedAction()) is empty


def test_terminal_data_keeps_older_states_valid() -> None:
    def text(state: TerminalState) -> str:
        (part,) = state.content
        assert isinstance(part, TerminalUnclassifiedPart)
        return part.value

    s1 = terminal_reducer(terminal(), TerminalDataAction(data="a"))
    s2 = terminal_reducer(s1, TerminalDataAction(data="b"))
    s3 = terminal_reducer(s1, TerminalDataAction(data="c"))  # branches off an older state
    s4 = terminal_reducer(s2, TerminalDataAction(data="d"))
    assert [text(s) for s in (s1, s2, s3, s4)] == ["a", "ab", "ac", "abd"]


def test_terminal_data_streams_in_linear_time() -> None:
    state = terminal_reducer(
        terminal(), TerminalCommandExecutedAction(command_id="c", command_line="x", timestamp=1)
    )
    for _ in range(20_000):
        state = terminal_reducer(state, TerminalDataAction(data="0123456789"))
    part = state.content[0]
    assert isinstance(part, TerminalCommandPart)
    assert len(part.output) == 200_000


def test_terminal_data_after_an_unknown_part_pushes_an_unclassified_part() -> None:
    unknown = UnknownTerminalContentPart(type="image", raw={"type": "image"})
    result = terminal_reducer(terminal(unknown), TerminalDataAction(data="hi"))
    assert result.content == (unknown, TerminalUnclassifiedPart(value="hi"))


def test_terminal_command_finished_marks_every_part_with_the_id() -> None:
    def part(output: str) -> TerminalCommandPart:
        return TerminalCommandPart(
            command_id="c", command_line="x", output=output, timestamp=1, is_complete=False
        )

    state = terminal(part("1"), TerminalUnclassifiedPart(value="-"), part("2"))
    result = terminal_reducer(state, TerminalCommandFinishedAction(command_id="c", duration_ms=5))
    done = [p for p in result.content if isinstance(p, TerminalCommandPart)]
    assert [(p.is_complete, p.exit_code, p.duration_ms, p.output) for p in done] == [
        (True, None, 5, "1"),
        (True, None, 5, "2"),
    ]


# ── changeset ────────────────────────────────────────────────────────────────


def test_changeset_error_only_lives_with_the_error_status() -> None:
    state = ChangesetState(status="computing", files=())
    failed = changeset_reducer(state, ChangesetStatusChangedAction(status="error", error=ERROR))
    assert failed.error == ERROR
    ready = changeset_reducer(failed, ChangesetStatusChangedAction(status="ready", error=ERROR))
    assert (ready.status, ready.error) == ("ready", None)
    assert changeset_reducer(ready, ChangesetStatusChangedAction(status="ready")) is ready


def test_changeset_content_changed_keeps_operations_unless_given() -> None:
    state = ChangesetState(status="ready", files=(), operations=(operation("o1"),), error=ERROR)
    result = changeset_reducer(state, ChangesetContentChangedAction(files=(changeset_file("f"),)))
    assert result.operations == (operation("o1"),)
    assert result.error is None
    assert result.files == (changeset_file("f"),)


def test_changeset_files_review_changed() -> None:
    f1, f2, f3 = changeset_file("f1"), changeset_file("f2"), changeset_file("f3")
    state = ChangesetState(status="ready", files=(f1, f2, f3))
    reviewed = changeset_reducer(
        state, ChangesetFilesReviewChangedAction(files=("f1", "f3", "nope"), reviewed=True)
    )
    assert [f.reviewed for f in reviewed.files] == [True, None, True]
    assert reviewed.files[1] is f2
    same = ChangesetFilesReviewChangedAction(files=("f1", "f3"), reviewed=True)
    assert changeset_reducer(reviewed, same) is reviewed
    # An absent ``reviewed`` counts as different: ``false`` is written out explicitly.
    cleared = changeset_reducer(
        state, ChangesetFilesReviewChangedAction(files=("f2",), reviewed=False)
    )
    assert cleared.files[1].reviewed is False
    assert wire.unstructure(cleared)["files"][1]["reviewed"] is False
    unknown = ChangesetFilesReviewChangedAction(files=("nope",), reviewed=True)
    assert changeset_reducer(state, unknown) is state


def test_changeset_noops_return_the_same_state() -> None:
    state = ChangesetState(
        status="ready", files=(changeset_file("f1"),), operations=(operation("o1"),)
    )
    for action in (
        ChangesetFileRemovedAction(file_id="nope"),
        ChangesetFileSetAction(file=changeset_file("f1")),
        ChangesetOperationStatusChangedAction(operation_id="nope", status="running"),
        ChangesetOperationStatusChangedAction(operation_id="o1", status="idle", error=ERROR),
        ChangesetContentChangedAction(files=(changeset_file("f1"),)),
    ):
        assert changeset_reducer(state, action) is state, action
    bare = ChangesetState(status="ready", files=())
    assert (
        changeset_reducer(
            bare, ChangesetOperationStatusChangedAction(operation_id="o1", status="error")
        )
        is bare
    )
    assert changeset_reducer(bare, ChangesetClearedAction()) is bare


def test_changeset_operation_error_follows_its_status() -> None:
    state = ChangesetState(status="ready", files=(), operations=(operation("o1"), operation("o2")))
    failed = changeset_reducer(
        state, ChangesetOperationStatusChangedAction(operation_id="o2", status="error", error=ERROR)
    )
    assert failed.operations == (
        operation("o1"),
        attrs.evolve(operation("o2", "error"), error=ERROR),
    )
    running = changeset_reducer(
        failed,
        ChangesetOperationStatusChangedAction(operation_id="o2", status="running", error=ERROR),
    )
    assert running.operations == (operation("o1"), operation("o2", "running"))


# ── annotations ──────────────────────────────────────────────────────────────


def test_annotations_updated_patches_only_given_fields_and_cannot_clear_range() -> None:
    state = AnnotationsState(annotations=(annotation("a1", "e1", "e2", meta={"k": 1}),))
    result = annotations_reducer(state, AnnotationsUpdatedAction(annotation_id="a1", resolved=True))
    assert result.annotations[0] == attrs.evolve(state.annotations[0], resolved=True)
    moved = annotations_reducer(
        state, AnnotationsUpdatedAction(annotation_id="a1", range=rng(5, 6))
    )
    assert moved.annotations[0].range == rng(5, 6)
    assert annotations_reducer(state, AnnotationsUpdatedAction(annotation_id="a1")) is state
    assert (
        annotations_reducer(state, AnnotationsUpdatedAction(annotation_id="a1", resolved=False))
        is state
    )


def test_annotations_entries_upsert_in_place_and_may_become_empty() -> None:
    state = AnnotationsState(annotations=(annotation("a1", "e1", "e2"),))
    edited = AnnotationEntry(id="e1", text="new")
    result = annotations_reducer(state, AnnotationsEntrySetAction(annotation_id="a1", entry=edited))
    assert [e.id for e in result.annotations[0].entries] == ["e1", "e2"]
    assert result.annotations[0].entries[0] is edited
    emptied = state
    for entry_id in ("e1", "e2"):
        emptied = annotations_reducer(
            emptied, AnnotationsEntryRemovedAction(annotation_id="a1", entry_id=entry_id)
        )
    assert emptied.annotations[0].entries == ()  # the one-entry rule is the producers' job


def test_annotations_noops_return_the_same_state() -> None:
    a1 = annotation("a1", "e1")
    state = AnnotationsState(annotations=(a1,))
    for action in (
        AnnotationsSetAction(annotation=a1),
        AnnotationsRemovedAction(annotation_id="nope"),
        AnnotationsUpdatedAction(annotation_id="nope", resolved=True),
        AnnotationsEntrySetAction(annotation_id="nope", entry=AnnotationEntry(id="e9", text="x")),
        AnnotationsEntrySetAction(annotation_id="a1", entry=a1.entries[0]),
        AnnotationsEntryRemovedAction(annotation_id="a1", entry_id="nope"),
        AnnotationsEntryRemovedAction(annotation_id="nope", entry_id="e1"),
    ):
        assert annotations_reducer(state, action) is state, action


# ── reduce ───────────────────────────────────────────────────────────────────


def test_registry_covers_every_stateful_channel() -> None:
    stateful = {kind for kind in ChannelKind if kind.is_stateful}
    assert set(REDUCERS) == stateful == set(STATE_TYPES)
    for kind, reducer in MINE.items():
        assert REDUCERS[kind] is reducer


@pytest.mark.parametrize(
    ("channel", "kind"),
    [
        ("ahp-root://", ChannelKind.ROOT),
        ("ahp-session:/s1", ChannelKind.SESSION),
        ("ahp-session:/s1/annotations", ChannelKind.ANNOTATIONS),
        ("ahp-terminal:/t1", ChannelKind.TERMINAL),
        ("ahp-changeset:/c1", ChannelKind.CHANGESET),
        ("ahp-resource-watch:/w1", ChannelKind.RESOURCE_WATCH),
        ("copilot:/test-session/terminal/1", ChannelKind.TERMINAL),  # server-defined: by state type
        ("copilot:/test-session/changeset/x", ChannelKind.CHANGESET),
        ("ahp-session:/s1", ChannelKind.SESSION),
    ],
)
def test_reduce_routes_by_channel_then_state_type(channel: str, kind: ChannelKind) -> None:
    state, action = STATES[kind], ACTIONS[kind]
    assert reduce(channel, state, action, now=FIXED) == MINE[kind](state, action, now=FIXED)
    seen: list[UnknownAction] = []
    unknown = UnknownAction(type="x/y", raw={"type": "x/y"})
    assert reduce(channel, state, unknown, on_unknown=seen.append) is state
    assert seen == [unknown]


@pytest.mark.parametrize(
    ("channel", "kind"),
    [
        ("ahp-root://", ChannelKind.SESSION),
        ("ahp-session:/s1", ChannelKind.ANNOTATIONS),
        ("ahp-session:/s1/annotations", ChannelKind.SESSION),
        ("ahp-terminal:/t1", ChannelKind.CHANGESET),
        ("ahp-chat:/c1", ChannelKind.SESSION),
        ("ahp-otlp://host/logs", ChannelKind.ROOT),
        ("mcp://server", ChannelKind.ROOT),
    ],
)
def test_reduce_rejects_a_state_of_another_channel(channel: str, kind: ChannelKind) -> None:
    with pytest.raises(LocalProtocolError):
        reduce(channel, STATES[kind], ACTIONS[kind])


def test_reduce_rejects_a_value_that_is_no_state() -> None:
    with pytest.raises(LocalProtocolError):
        reduce(
            "copilot:/x", SessionActiveClient(client_id="a", tools=()), ACTIONS[ChannelKind.ROOT]
        )  # type: ignore[call-overload]


def test_reduce_keeps_the_state_type_for_mypy() -> None:
    chat_state: type[ChatState] = STATE_TYPES[ChannelKind.CHAT]
    assert chat_state is ChatState
    result: SessionState = reduce("ahp-session:/s1", session(), SessionReadyAction())
    assert result.lifecycle == "ready"


# ── purity and totality over the fixture corpus ──────────────────────────────

_CORPUS = Path(agenthost_protocol.__file__).parent / "_corpus" / "reducers"
_FIXTURES = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(_CORPUS.glob("*.json"))]
_ALL_ACTIONS = [wire.parse_action(raw) for f in _FIXTURES for raw in f["actions"]]
_INITIALS = [
    (ChannelKind(f["reducer"]), f["initial"])
    for f in _FIXTURES
    if ChannelKind(f["reducer"]) in MINE
]


@settings(max_examples=6 * settings().max_examples)
@given(
    start=st.sampled_from(_INITIALS),
    actions=st.lists(st.sampled_from(_ALL_ACTIONS), max_size=25),
)
def test_any_action_sequence_is_total_and_pure(
    start: tuple[ChannelKind, dict[str, Any]], actions: list[StateAction]
) -> None:
    kind, raw = start
    state = wire.structure(raw, STATE_TYPES[kind])
    history = [(state, wire.dump(state))]
    for action in actions:
        state = MINE[kind](state, action, now=FIXED)
        assert isinstance(state, STATE_TYPES[kind])
        history.append((state, wire.dump(state)))
    for old, encoded in history:
        assert wire.dump(old) == encoded  # no reducer modified a state it was given
    assert wire.structure(history[-1][1], STATE_TYPES[kind]) == state
