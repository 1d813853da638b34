"""The reducer of a session channel ``ahp-session:/<id>`` (``SessionState``).

Spec: the 27 ``session/*`` actions of AHP 0.7.0 covering the lifecycle, the
session metadata (title, read/archived flags, activity, working
directories), the chat catalogue, active clients, the ``inputNeeded``
aggregate, customizations and their MCP servers, the changeset catalogue,
config and ``_meta``.  ``SessionState`` is flat since 0.5.0 (no ``summary``).

Rules worth knowing (inventory §2.2):

* The session reducer never stamps a time: ``SessionState`` has no timestamp.
* Only ``inputNeededSet``/``Removed`` touch the activity bits of ``status``
  (``Removed`` emptying the list clears only bit 16, so 24 becomes 8), and
  only ``isReadChanged``/``isArchivedChanged`` touch its flags.
* Customizations are two levels deep: top-level entries first, then the
  children of the containers (plugins and directories).  A toggle changes the
  first matching child of the first container that has one; a removal drops
  the first matching child of every container; MCP-server actions address a
  top-level entry (which must then be an MCP server) or else the matching
  MCP-server child of every container.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, TypeVar, cast, get_args

import attrs
from typing_extensions import TypeIs, assert_never

from .._json import json_equal
from ..types import (
    ChatSummary,
    ChildCustomization,
    Customization,
    DirectoryCustomization,
    McpServerCustomization,
    McpServerState,
    PartialChatSummary,
    PluginCustomization,
    SessionAction,
    SessionActiveClientRemovedAction,
    SessionActiveClientSetAction,
    SessionActivityChangedAction,
    SessionChangesetsChangedAction,
    SessionChatAddedAction,
    SessionChatRemovedAction,
    SessionChatUpdatedAction,
    SessionConfigChangedAction,
    SessionCreationFailedAction,
    SessionCustomizationRemovedAction,
    SessionCustomizationsChangedAction,
    SessionCustomizationToggledAction,
    SessionCustomizationUpdatedAction,
    SessionDefaultChatChangedAction,
    SessionInputNeededRemovedAction,
    SessionInputNeededSetAction,
    SessionInputRequest,
    SessionIsArchivedChangedAction,
    SessionIsReadChangedAction,
    SessionLifecycle,
    SessionMcpServerStartRequestedAction,
    SessionMcpServerStateChangedAction,
    SessionMcpServerStopRequestedAction,
    SessionMetaChangedAction,
    SessionReadyAction,
    SessionServerToolsChangedAction,
    SessionState,
    SessionStatus,
    SessionTitleChangedAction,
    SessionWorkingDirectoryRemovedAction,
    SessionWorkingDirectorySetAction,
    StateAction,
    UnknownAction,
    UnknownChildCustomization,
    UnknownCustomization,
    UnknownSessionInputRequest,
)
from ..types.customizations import McpServerStartingState, McpServerStoppedState
from ..types.enums import ACTIVITY_MASK
from ._clock import Clock
from ._copy import evolve
from ._status import status_of

__all__ = ["session_reducer"]

_T = TypeVar("_T")
_E = TypeVar("_E", bound="Customization | ChildCustomization")

# Exact classes, as the chat reducer routes: a set lookup, not an ``isinstance`` per class.
_SESSION_ACTIONS: Final[frozenset[type]] = frozenset(get_args(SessionAction))

# ``session/chatUpdated`` patches every ``ChatSummary`` field it shares with
# ``PartialChatSummary`` except the identity field ``resource``.
_CHAT_PATCH_FIELDS: Final = tuple(
    (field.name, field.alias or field.name)
    for field in attrs.fields(PartialChatSummary)
    if field.name != "resource" and field.name in attrs.fields_dict(ChatSummary)
)


def _is_session_action(action: StateAction) -> TypeIs[SessionAction]:
    return type(action) in _SESSION_ACTIONS


def session_reducer(
    state: SessionState,
    action: StateAction,
    *,
    now: Clock | None = None,
    on_unknown: Callable[[UnknownAction], None] | None = None,
) -> SessionState:
    """Apply one action to a session state and return the new state.

    Pure: ``state`` is never modified.  Actions of other channels and
    :class:`~agenthost_protocol.types.UnknownAction` (after calling
    ``on_unknown``) return ``state`` itself, as does every action that changes
    nothing.  ``now`` is accepted for a uniform signature: no session action
    carries a timestamp.
    """
    if not _is_session_action(action):
        return state
    match action:
        case SessionReadyAction():
            # Purely a lifecycle transition: status is left alone (fixture 147).
            if state.lifecycle == SessionLifecycle.READY:
                return state
            return evolve(state, lifecycle=SessionLifecycle.READY)
        case SessionCreationFailedAction(error=error):
            if (
                state.lifecycle == SessionLifecycle.CREATION_FAILED
                and state.creation_error == error
            ):
                return state
            return evolve(state, lifecycle=SessionLifecycle.CREATION_FAILED, creation_error=error)
        case SessionChatAddedAction(summary=chat_summary):
            chats = _upsert(state.chats, chat_summary, lambda chat: chat.resource)
            return state if chats is state.chats else evolve(state, chats=chats)
        case SessionChatRemovedAction(chat=uri):
            kept = tuple(chat for chat in state.chats if chat.resource != uri)
            if len(kept) == len(state.chats):
                return state
            default_chat = None if state.default_chat == uri else state.default_chat
            return evolve(state, chats=kept, default_chat=default_chat)
        case SessionChatUpdatedAction(chat=uri, changes=changes):
            for index, chat in enumerate(state.chats):
                if chat.resource == uri:
                    patched = _patch_chat(chat, changes)
                    if patched is chat:
                        return state
                    return evolve(state, chats=_replace_at(state.chats, index, patched))
            return state
        case SessionDefaultChatChangedAction(default_chat=default_chat):
            if state.default_chat == default_chat:
                return state
            return evolve(state, default_chat=default_chat)
        case SessionTitleChangedAction(title=title):
            return state if state.title == title else evolve(state, title=title)
        case SessionServerToolsChangedAction(tools=tools):
            if state.server_tools == tools:
                return state
            return evolve(state, server_tools=tools)
        case SessionActiveClientSetAction(active_client=client):
            clients = _upsert(state.active_clients, client, lambda entry: entry.client_id)
            return (
                state if clients is state.active_clients else evolve(state, active_clients=clients)
            )
        case SessionActiveClientRemovedAction(client_id=client_id):
            kept_clients = tuple(c for c in state.active_clients if c.client_id != client_id)
            if len(kept_clients) == len(state.active_clients):
                return state
            return evolve(state, active_clients=kept_clients)
        case SessionWorkingDirectorySetAction(directory=directory):
            directories = state.working_directories or ()
            if directory in directories:
                return state
            return evolve(state, working_directories=(*directories, directory))
        case SessionWorkingDirectoryRemovedAction(directory=directory):
            # The array stays, possibly empty: the key is not deleted.
            present = state.working_directories
            if present is None or directory not in present:
                return state
            index = present.index(directory)
            return evolve(state, working_directories=(*present[:index], *present[index + 1 :]))
        case SessionInputNeededSetAction(request=request):
            needed = _upsert(state.input_needed or (), request, _request_id)
            status = _with_activity(state.status, SessionStatus.INPUT_NEEDED)
            if needed is state.input_needed and status is state.status:
                return state
            return evolve(state, input_needed=needed, status=status)
        case SessionInputNeededRemovedAction(id=request_id):
            return _input_needed_removed(state, request_id)
        case SessionCustomizationsChangedAction(customizations=customizations):
            if state.customizations == customizations:
                return state
            return evolve(state, customizations=customizations)
        case SessionCustomizationToggledAction(id=target, enabled=enabled):
            return _toggle_customization(state, target, enabled)
        case SessionCustomizationUpdatedAction(customization=customization):
            items = _upsert(state.customizations or (), customization, _customization_id)
            if items is state.customizations:
                return state
            return evolve(state, customizations=items)
        case SessionCustomizationRemovedAction(id=target):
            return _remove_customization(state, target)
        case SessionMcpServerStateChangedAction(id=target, state=server_state, channel=channel):
            return _set_mcp_server_state(state, target, server_state, channel)
        case SessionMcpServerStartRequestedAction(id=target):
            return _set_mcp_server_state(state, target, McpServerStartingState(), None)
        case SessionMcpServerStopRequestedAction(id=target):
            return _set_mcp_server_state(state, target, McpServerStoppedState(), None)
        case SessionIsReadChangedAction(is_read=is_read):
            return _with_status_flag(state, SessionStatus.IS_READ, is_read)
        case SessionIsArchivedChangedAction(is_archived=is_archived):
            return _with_status_flag(state, SessionStatus.IS_ARCHIVED, is_archived)
        case SessionActivityChangedAction(activity=activity):
            if state.activity == activity:
                return state
            return evolve(state, activity=activity)
        case SessionChangesetsChangedAction(changesets=changesets):
            if state.changesets == changesets:
                return state
            return evolve(state, changesets=changesets)
        case SessionConfigChangedAction(config=values, replace=replace):
            config = state.config
            if config is None:
                return state
            merged = dict(values) if replace else {**config.values, **values}
            if json_equal(merged, config.values):  # JSON equality: ``true`` is not ``1``
                return state
            return evolve(state, config=evolve(config, values=merged))
        case SessionMetaChangedAction(meta=meta):
            if json_equal(state.meta, meta):
                return state
            return evolve(state, meta=meta)
        case UnknownAction():
            if on_unknown is not None:
                on_unknown(action)
            return state
        case _:
            assert_never(action)


# ── helpers ──────────────────────────────────────────────────────────────────


def _replace_at(items: tuple[_T, ...], index: int, item: _T) -> tuple[_T, ...]:
    return (*items[:index], item, *items[index + 1 :])


def _upsert(items: tuple[_T, ...], item: _T, key: Callable[[_T], object]) -> tuple[_T, ...]:
    """Replace the entry with ``item``'s key in place, else append; ``items`` itself if equal."""
    wanted = key(item)
    for index, existing in enumerate(items):
        if key(existing) == wanted:
            if existing == item:
                return items
            return _replace_at(items, index, item)
    return (*items, item)


def _patch_chat(chat: ChatSummary, changes: PartialChatSummary) -> ChatSummary:
    """``chat`` with every present field of ``changes`` written, or ``chat`` if none differs."""
    updates: dict[str, Any] = {
        alias: value
        for name, alias in _CHAT_PATCH_FIELDS
        if (value := getattr(changes, name)) is not None
    }
    if not updates:
        return chat
    patched = evolve(chat, **updates)
    # Model equality follows JSON for open fields (``_meta``): true is not 1.
    return chat if patched == chat else patched


def _with_status_flag(state: SessionState, flag: SessionStatus, on: bool) -> SessionState:
    # Integer arithmetic keeps status bits this library does not know.
    old = int(state.status)
    new = old | int(flag) if on else old & ~int(flag)
    if new == old:
        return state
    return evolve(state, status=status_of(new))


def _with_activity(status: SessionStatus, activity: SessionStatus) -> SessionStatus:
    """``status`` with its activity bits replaced; flags (and unknown bits) kept."""
    value = (int(status) & ~ACTIVITY_MASK) | int(activity)
    return status if value == int(status) else status_of(value)


def _request_id(request: SessionInputRequest) -> object:
    if isinstance(request, UnknownSessionInputRequest):
        return request.raw.get("id")
    return request.id


def _input_needed_removed(state: SessionState, request_id: str) -> SessionState:
    needed = state.input_needed
    if needed is None:
        return state
    kept = tuple(request for request in needed if _request_id(request) != request_id)
    if len(kept) == len(needed):
        return state
    if kept:
        status = _with_activity(state.status, SessionStatus.INPUT_NEEDED)
    else:
        # Only bit 4 is cleared: InputNeeded (24) falls back to InProgress (8),
        # any other activity value stays (the reference's rule, inventory §2.2).
        value = int(state.status) & ~16
        status = state.status if value == int(state.status) else status_of(value)
    return evolve(state, input_needed=kept or None, status=status)


def _customization_id(entry: Customization | ChildCustomization) -> object:
    if isinstance(entry, (UnknownCustomization, UnknownChildCustomization)):
        return entry.raw.get("id")
    return entry.id


def _with_enabled(entry: _E, enabled: bool) -> _E:
    """``entry`` with ``enabled`` set (``entry`` itself when it already is)."""
    if isinstance(entry, (UnknownCustomization, UnknownChildCustomization)):
        if entry.raw.get("enabled") is enabled:
            return entry
        return cast(_E, evolve(entry, raw={**entry.raw, "enabled": enabled}))
    if getattr(entry, "enabled", None) is enabled:
        return entry
    return evolve(entry, enabled=enabled)


def _toggle_customization(state: SessionState, target: str, enabled: bool) -> SessionState:
    items = state.customizations
    if items is None:
        return state
    for index, entry in enumerate(items):
        if _customization_id(entry) == target:
            toggled = _with_enabled(entry, enabled)
            if toggled is entry:
                return state
            return evolve(state, customizations=_replace_at(items, index, toggled))
    for index, entry in enumerate(items):
        if not isinstance(entry, (PluginCustomization, DirectoryCustomization)):
            continue
        children = entry.children or ()
        for child_index, child in enumerate(children):
            if _customization_id(child) == target:
                toggled_child = _with_enabled(child, enabled)
                if toggled_child is child:
                    return state
                container = evolve(
                    entry, children=_replace_at(children, child_index, toggled_child)
                )
                return evolve(state, customizations=_replace_at(items, index, container))
    return state


def _map_children(
    items: tuple[Customization, ...],
    target: str,
    change: Callable[[tuple[ChildCustomization, ...], int], tuple[ChildCustomization, ...]],
) -> tuple[Customization, ...]:
    """Apply ``change`` to the first child with id ``target`` in every container.

    ``change(children, index)`` returns the new children (``children`` itself
    for no change).  Returns ``items`` itself when no container changed.
    """
    changed = False
    out: list[Customization] = []
    for entry in items:
        new_entry = entry
        if isinstance(entry, (PluginCustomization, DirectoryCustomization)) and entry.children:
            children = entry.children
            index = next(
                (i for i, child in enumerate(children) if _customization_id(child) == target), -1
            )
            if index >= 0:
                new_children = change(children, index)
                if new_children is not children:
                    new_entry = evolve(entry, children=new_children)
                    changed = True
        out.append(new_entry)
    return tuple(out) if changed else items


def _remove_customization(state: SessionState, target: str) -> SessionState:
    items = state.customizations
    if items is None:
        return state
    for index, entry in enumerate(items):
        if _customization_id(entry) == target:
            return evolve(state, customizations=(*items[:index], *items[index + 1 :]))
    kept = _map_children(items, target, lambda children, i: (*children[:i], *children[i + 1 :]))
    return state if kept is items else evolve(state, customizations=kept)


def _set_mcp_server_state(
    state: SessionState, target: str, server_state: McpServerState, channel: str | None
) -> SessionState:
    items = state.customizations
    if items is None:
        return state

    def updated(entry: _E) -> _E:
        # Only an MCP server has a state; any other entry is left as it is.
        if not isinstance(entry, McpServerCustomization):
            return entry
        if entry.state == server_state and entry.channel == channel:
            return entry
        return cast(_E, evolve(entry, state=server_state, channel=channel))

    for index, entry in enumerate(items):
        if _customization_id(entry) == target:
            # A top-level entry with the id decides alone; children are not searched.
            server = updated(entry)
            if server is entry:
                return state
            return evolve(state, customizations=_replace_at(items, index, server))

    def change(children: tuple[ChildCustomization, ...], i: int) -> tuple[ChildCustomization, ...]:
        server = updated(children[i])
        if server is children[i]:
            return children
        return _replace_at(children, i, server)

    servers = _map_children(items, target, change)
    return state if servers is items else evolve(state, customizations=servers)
