"""Pure reducers: ``(state, action) -> state`` for each of the seven stateful channels.

Every reducer has the same shape::

    new_state = session_reducer(state, action, now=None, on_unknown=None)

* **Pure.**  ``state`` is a frozen model value and is never modified; the new
  state shares every untouched part with the old one.  A reducer never raises
  on well-typed input, whatever the order of the actions.
* **No-op identity.**  An action of another channel, an
  :class:`~agenthost_protocol.types.UnknownAction`, and any action that
  changes nothing return ``state`` itself, so ``new is old`` is a cheap
  "nothing changed" test.
* **Clock.**  ``now`` is a zero-argument callable returning epoch
  milliseconds (:data:`Clock`); ``None`` means the wall clock.  Only the
  chat reducer reads it (``modifiedAt``); no other reducer stamps time.
* **Unknown actions.**  ``on_unknown`` is called with every
  :class:`~agenthost_protocol.types.UnknownAction` a reducer receives (an
  action type from a newer peer); the state is returned unchanged.

:func:`reduce` picks the reducer from the channel URI of the action's
envelope.  See ``docs/reducers.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final, Protocol, TypeVar, overload

from ..channels import STATE_TYPES, ChannelKind, channel_kind
from ..errors import LocalProtocolError
from ..types import (
    AnnotationsState,
    ChangesetState,
    ChatState,
    ResourceWatchState,
    RootState,
    SessionState,
    SnapshotState,
    StateAction,
    TerminalState,
    UnknownAction,
)
from ._clock import Clock
from .annotations import annotations_reducer
from .changeset import changeset_reducer
from .chat import chat_reducer
from .resource_watch import resource_watch_reducer
from .root import root_reducer
from .session import session_reducer
from .terminal import terminal_reducer

__all__ = [
    "REDUCERS",
    "STATE_TYPES",
    "Clock",
    "Reducer",
    "annotations_reducer",
    "changeset_reducer",
    "chat_reducer",
    "reduce",
    "resource_watch_reducer",
    "root_reducer",
    "session_reducer",
    "terminal_reducer",
]

_S = TypeVar("_S")


class Reducer(Protocol[_S]):
    """The shape shared by every channel reducer."""

    def __call__(
        self,
        state: _S,
        action: StateAction,
        *,
        now: Clock | None = None,
        on_unknown: Callable[[UnknownAction], None] | None = None,
    ) -> _S: ...


REDUCERS: Final[Mapping[ChannelKind, Reducer[Any]]] = MappingProxyType(
    {
        ChannelKind.ROOT: root_reducer,
        ChannelKind.SESSION: session_reducer,
        ChannelKind.CHAT: chat_reducer,
        ChannelKind.TERMINAL: terminal_reducer,
        ChannelKind.CHANGESET: changeset_reducer,
        ChannelKind.ANNOTATIONS: annotations_reducer,
        ChannelKind.RESOURCE_WATCH: resource_watch_reducer,
    }
)
"""The reducer of each stateful channel kind (OTLP and MCP channels have no state)."""


_KIND_OF_STATE: Final[Mapping[type[Any], ChannelKind]] = {
    state_type: kind for kind, state_type in STATE_TYPES.items()
}

_OnUnknown = Callable[[UnknownAction], None]


@overload
def reduce(
    channel: str,
    state: RootState,
    action: StateAction,
    *,
    now: Clock | None = None,
    on_unknown: _OnUnknown | None = None,
) -> RootState: ...
@overload
def reduce(
    channel: str,
    state: SessionState,
    action: StateAction,
    *,
    now: Clock | None = None,
    on_unknown: _OnUnknown | None = None,
) -> SessionState: ...
@overload
def reduce(
    channel: str,
    state: ChatState,
    action: StateAction,
    *,
    now: Clock | None = None,
    on_unknown: _OnUnknown | None = None,
) -> ChatState: ...
@overload
def reduce(
    channel: str,
    state: TerminalState,
    action: StateAction,
    *,
    now: Clock | None = None,
    on_unknown: _OnUnknown | None = None,
) -> TerminalState: ...
@overload
def reduce(
    channel: str,
    state: ChangesetState,
    action: StateAction,
    *,
    now: Clock | None = None,
    on_unknown: _OnUnknown | None = None,
) -> ChangesetState: ...
@overload
def reduce(
    channel: str,
    state: AnnotationsState,
    action: StateAction,
    *,
    now: Clock | None = None,
    on_unknown: _OnUnknown | None = None,
) -> AnnotationsState: ...
@overload
def reduce(
    channel: str,
    state: ResourceWatchState,
    action: StateAction,
    *,
    now: Clock | None = None,
    on_unknown: _OnUnknown | None = None,
) -> ResourceWatchState: ...
@overload
def reduce(
    channel: str,
    state: SnapshotState,
    action: StateAction,
    *,
    now: Clock | None = None,
    on_unknown: _OnUnknown | None = None,
) -> SnapshotState: ...
def reduce(
    channel: str,
    state: SnapshotState,
    action: StateAction,
    *,
    now: Clock | None = None,
    on_unknown: _OnUnknown | None = None,
) -> SnapshotState:
    """Apply ``action``, received on ``channel``, to that channel's ``state``.

    The reducer is chosen by the channel URI (:func:`~agenthost_protocol.channels.channel_kind`;
    ``ahp-session:/<id>/annotations`` is the annotations channel).  When the
    scheme is not recognised (terminal and changeset URIs may be
    server-defined) the type of ``state`` decides.

    Raises :class:`~agenthost_protocol.errors.LocalProtocolError` when
    ``state`` is not the state type of a recognised channel (or of any
    channel), or when the channel is stateless (OTLP, MCP): the caller passed
    the wrong state.  Never raises otherwise.
    """
    if not isinstance(channel, str):
        raise LocalProtocolError(f"channel must be a URI string, not {type(channel).__name__}")
    state_kind = _KIND_OF_STATE.get(type(state))
    if state_kind is None:
        for state_type, candidate in _KIND_OF_STATE.items():
            if isinstance(state, state_type):
                state_kind = candidate
                break
        else:
            raise LocalProtocolError(f"{type(state).__name__} is not the state of any AHP channel")
    kind = channel_kind(channel)
    if kind is not None and kind != state_kind:
        if kind.is_stateful:
            raise LocalProtocolError(
                f"{channel!r} is a {kind.value} channel, its state is "
                f"{STATE_TYPES[kind].__name__}, not {type(state).__name__}"
            )
        raise LocalProtocolError(f"{channel!r} is a stateless {kind.value} channel")
    reducer: Reducer[SnapshotState] = REDUCERS[state_kind]
    return reducer(state, action, now=now, on_unknown=on_unknown)
