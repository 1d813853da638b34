"""The reducer of a session channel ``ahp-session:/<id>`` (``SessionState``).

Spec: 23 ``session/*`` actions covering the lifecycle, the summary (title,
model, agent, read/archived flags, activity), the chat catalogue, active
clients, customizations, the changeset catalogue, config and ``_meta``.
Turns live on chat channels since 0.4.0, so nothing here recomputes the
activity bits of ``summary.status``.

``summary.modifiedAt`` (epoch milliseconds from the clock) is touched by
``session/titleChanged``, ``session/modelChanged``, ``session/agentChanged``
and an applied ``session/configChanged``; by nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, TypeVar, get_args

import attrs
from attrs import evolve
from typing_extensions import TypeIs, assert_never

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
    SessionIsArchivedChangedAction,
    SessionIsReadChangedAction,
    SessionLifecycle,
    SessionMcpServerStateChangedAction,
    SessionMetaChangedAction,
    SessionReadyAction,
    SessionServerToolsChangedAction,
    SessionState,
    SessionStatus,
    SessionTitleChangedAction,
    StateAction,
    UnknownAction,
    UnknownChildCustomization,
    UnknownCustomization,
)
from ._clock import Clock

__all__ = ["session_reducer"]

_T = TypeVar("_T")

_SESSION_ACTIONS: Final = tuple(get_args(SessionAction))

# ``session/chatUpdated`` patches every ``ChatSummary`` field it shares with
# ``PartialChatSummary`` except the identity field ``resource``.
_CHAT_PATCH_FIELDS: Final = tuple(
    (field.name, field.alias or field.name)
    for field in attrs.fields(PartialChatSummary)
    if field.name != "resource" and field.name in attrs.fields_dict(ChatSummary)
)


def _is_session_action(action: StateAction) -> TypeIs[SessionAction]:
    return isinstance(action, _SESSION_ACTIONS)


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
    nothing.  ``now`` supplies ``summary.modifiedAt`` (epoch milliseconds;
    the wall clock when ``None``).
    """
    if not _is_session_action(action):
        return state
    match action:
        case SessionReadyAction():
            # Purely a lifecycle transition: summary.status is left alone.
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
            return evolve(state, config=evolve(config, values=merged))
        case SessionMetaChangedAction(meta=meta):
            if state.meta == meta:
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
    updates: dict[str, Any] = {}
    for name, alias in _CHAT_PATCH_FIELDS:
        value = getattr(changes, name)
        if value is not None and value != getattr(chat, name):
            updates[alias] = value
    return evolve(chat, **updates) if updates else chat


def _with_status_flag(state: SessionState, flag: SessionStatus, on: bool) -> SessionState:
    # Integer arithmetic keeps status bits this library does not know.
    old = int(state.status)
    new = old | int(flag) if on else old & ~int(flag)
    if new == old:
        return state
    return evolve(state, status=SessionStatus(new))


def _customization_id(entry: Customization | ChildCustomization) -> object:
    if isinstance(entry, (UnknownCustomization, UnknownChildCustomization)):
        return entry.raw.get("id")
    return entry.id


def _children(entry: Customization) -> tuple[ChildCustomization, ...]:
    if isinstance(entry, (PluginCustomization, DirectoryCustomization)):
        return entry.children or ()
    return ()


def _toggle_customization(state: SessionState, target: str, enabled: bool) -> SessionState:
    items = state.customizations
    if items is None:
        return state
    for index, entry in enumerate(items):
        if _customization_id(entry) != target:
            continue
        toggled: Customization
        if isinstance(entry, UnknownCustomization):
            if entry.raw.get("enabled") == enabled:
                return state
            toggled = evolve(entry, raw={**entry.raw, "enabled": enabled})
        else:
            if entry.enabled == enabled:
                return state
            toggled = evolve(entry, enabled=enabled)
        return evolve(state, customizations=_replace_at(items, index, toggled))
    return state


def _remove_customization(state: SessionState, target: str) -> SessionState:
    items = state.customizations
    if items is None:
        return state
    for index, entry in enumerate(items):
        if _customization_id(entry) == target:
            return evolve(state, customizations=(*items[:index], *items[index + 1 :]))
    for index, entry in enumerate(items):
        if not isinstance(entry, (PluginCustomization, DirectoryCustomization)):
            continue
        children = _children(entry)
        for child_index, child in enumerate(children):
            if _customization_id(child) == target:
                kept = (*children[:child_index], *children[child_index + 1 :])
                return evolve(
                    state, customizations=_replace_at(items, index, evolve(entry, children=kept))
                )
    return state


def _set_mcp_server_state(
    state: SessionState, target: str, server_state: McpServerState, channel: str | None
) -> SessionState:
    items = state.customizations
    if items is None:
        return state

    def updated(entry: Customization | ChildCustomization) -> McpServerCustomization | None:
        # None: the entry with the id is not an MCP server, so nothing changes.
        if not isinstance(entry, McpServerCustomization):
            return None
        if entry.state == server_state and entry.channel == channel:
            return entry
        return evolve(entry, state=server_state, channel=channel)

    for index, entry in enumerate(items):
        if _customization_id(entry) == target:
            server = updated(entry)
            if server is None or server is entry:
                return state
            return evolve(state, customizations=_replace_at(items, index, server))
        if not isinstance(entry, (PluginCustomization, DirectoryCustomization)):
            continue
        children = _children(entry)
        for child_index, child in enumerate(children):
            if _customization_id(child) == target:
                server = updated(child)
                if server is None or server is child:
                    return state
                container = evolve(entry, children=_replace_at(children, child_index, server))
                return evolve(state, customizations=_replace_at(items, index, container))
    return state
