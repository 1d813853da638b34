"""Shared test values: clocks, channel URIs and small states.

No host lives here: the property tests run the library's own
:class:`~agenthost_protocol.host.Host` over
:mod:`agenthost_protocol.testing.network`.
"""

from __future__ import annotations

from collections.abc import Callable

from agenthost_protocol.reducers._clock import iso_timestamp
from agenthost_protocol.types import (
    ChangesetFile,
    ChangesetState,
    ChangesetStatus,
    ChatState,
    FileEdit,
    Message,
    MessageKind,
    MessageOrigin,
    ModelSelection,
    SessionLifecycle,
    SessionState,
    SessionStatus,
)

FIXED_NOW = 1_767_225_600_000
"""The instant the test clocks start at (2026-01-01T00:00:00Z)."""


def clock() -> int:
    """A clock that stands still: host and clients agree, so states compare exactly."""
    return FIXED_NOW


def stopped_at(ms: int) -> Callable[[], int]:
    """A clock that always reads ``ms``."""
    return lambda: ms


class Ticker:
    """The clock of one run: epoch ms from :data:`FIXED_NOW`, ``step`` ms later at each reading.

    ``step=0`` is :func:`clock`.  Host and clients share one ticker, so with
    a non-zero step no two readings are equal.
    """

    def __init__(self, step: int = 0) -> None:
        self.step = step
        self.ms = FIXED_NOW

    def __call__(self) -> int:
        self.ms += self.step
        return self.ms

    @property
    def moves(self) -> bool:
        return self.step != 0

    def iso(self) -> str:
        """A reading as an ISO timestamp, for ``startedAt``."""
        return iso_timestamp(self())


SESSION = "ahp-session:/s1"
CHAT_A = "ahp-chat:/a"
CHAT_B = "ahp-chat:/b"
CHANGESET = "ahp-changeset:/s1/working"

PRIMARY_DIRECTORY = "file:///work/main"
"""The session's first working directory, which the host will not remove."""
DIRECTORIES = (PRIMARY_DIRECTORY, "file:///work/lib", "file:///work/docs")
"""The directories clients add to and remove from the session (and chats)."""
FILES = ("f1", "f2", "f3")
"""The files of the changeset at the start."""


def session_state(uri: str = SESSION) -> SessionState:
    return SessionState(
        provider="test",
        title="untitled",
        status=SessionStatus.IDLE,
        working_directories=(PRIMARY_DIRECTORY,),
        lifecycle=SessionLifecycle.READY,
        active_clients=(),
        chats=(),
    )


def chat_state(uri: str) -> ChatState:
    return ChatState(
        resource=uri,
        title="chat",
        status=SessionStatus.IDLE,
        modified_at=iso_timestamp(FIXED_NOW),
        turns=(),
    )


def changeset_state() -> ChangesetState:
    files = tuple(ChangesetFile(id=file_id, edit=FileEdit()) for file_id in FILES)
    return ChangesetState(status=ChangesetStatus.READY, files=files)


def message(text: str, kind: MessageKind = MessageKind.USER, model: str | None = None) -> Message:
    selection = None if model is None else ModelSelection(id=model)
    return Message(text=text, origin=MessageOrigin(kind=kind), model=selection)
