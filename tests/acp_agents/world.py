"""A test world for the ACP bridge: a real host, the bridge, and a bookkeeping of both sides.

Every :class:`~agenthost_protocol.bridges.acp.AhpDispatch` the bridge emits is
dispatched on the host and must change the channel's state (the reducers
return the state itself for an action they drop).  Every client action the
test plays is first checked with the host's validation rules, applied, and
fed to the bridge, as ``ClientActionApplied`` would.  Every agent request
must be answered exactly once; every bridge request is kept until the test
answers it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from agenthost_protocol import types as t
from agenthost_protocol.bridges.acp import (
    AcpBridge,
    AcpErrorReply,
    AcpNotification,
    AcpReply,
    AcpRequest,
    AcpSessionSetup,
    AhpDispatch,
    BridgeOutput,
    JsonObject,
    PromptCapabilities,
    RequestId,
)
from agenthost_protocol.host import Host, ValidationContext, validate
from agenthost_protocol.host.sessions import iso
from agenthost_protocol.types import SessionStatus

START = 1_767_225_600_000
SESSION = "ahp-session:/s1"
CHAT = "ahp-chat:/s1"
ACP_SESSION = "acp-1"
USER = t.MessageOrigin(kind=t.MessageKind.USER)


class NoOpDispatch(AssertionError):
    """The bridge emitted an action the reducers dropped."""


class World:
    """A host with one ACP-bridged session; the test plays the agent and the clients."""

    def __init__(
        self,
        setup: AcpSessionSetup | None = None,
        caps: PromptCapabilities | None = None,
    ) -> None:
        self.now = START
        self.host = Host(clock=self.clock)
        setup = setup if setup is not None else AcpSessionSetup()
        self.host.create_session(SESSION, provider="acp", config=setup.config)
        self.host.ready_session(SESSION, default_chat=CHAT)
        self._ids = itertools.count(1)
        self.bridge = AcpBridge(
            acp_session_id=ACP_SESSION, session=SESSION, chat=CHAT, new_id=self.new_id,
            now=self.clock, setup=setup, prompt_capabilities=caps,
        )
        self.dispatched: list[tuple[str, t.StateAction]] = []
        self.requests: dict[str, AcpRequest] = {}
        """What the bridge asked the agent and the test has not answered, by token."""
        self.sent: list[AcpRequest | AcpNotification] = []
        """Every request and notification for the agent, in order."""
        self.open: set[RequestId] = set()
        """The agent's requests not answered yet."""
        self.replies: dict[RequestId, JsonObject | AcpErrorReply] = {}
        self._turns = itertools.count(1)
        self._rids = itertools.count(1)

    def clock(self) -> int:
        return self.now

    def new_id(self, kind: str) -> str:
        return f"{kind}-{next(self._ids)}"

    # -- state --

    @property
    def chat(self) -> t.ChatState:
        state = self.host.state(CHAT)
        assert isinstance(state, t.ChatState)
        return state

    @property
    def session(self) -> t.SessionState:
        state = self.host.state(SESSION)
        assert isinstance(state, t.SessionState)
        return state

    def tool(self, tool_id: str) -> t.ToolCallState | None:
        turn = self.chat.active_turn
        parts = turn.response_parts if turn is not None else self.chat.turns[-1].response_parts
        for part in parts:
            if (
                isinstance(part, t.ToolCallResponsePart)
                and getattr(part.tool_call, "tool_call_id", None) == tool_id
            ):
                return part.tool_call
        return None

    def actions(self, kind: type[t.StateAction] | None = None) -> list[t.StateAction]:
        return [a for _, a in self.dispatched if kind is None or isinstance(a, kind)]

    @property
    def prompts(self) -> list[AcpRequest]:
        return [r for r in self.requests.values() if r.method == "session/prompt"]

    # -- carrying out what the bridge says --

    def run(self, outputs: Sequence[BridgeOutput]) -> list[BridgeOutput]:
        for output in outputs:
            if isinstance(output, AhpDispatch):
                before = self.host.state(output.channel)
                self.host.dispatch(output.channel, output.action)
                if self.host.state(output.channel) is before:
                    raise NoOpDispatch(f"dropped by the reducer: {output.action!r}")
                self.dispatched.append((output.channel, output.action))
            elif isinstance(output, AcpRequest):
                assert output.token not in self.requests
                self.requests[output.token] = output
                self.sent.append(output)
            elif isinstance(output, AcpNotification):
                self.sent.append(output)
            else:
                assert output.request_id in self.open, f"answered twice or never asked: {output}"
                self.open.discard(output.request_id)
                self.replies[output.request_id] = (
                    output.result if isinstance(output, AcpReply) else output
                )
        return list(outputs)

    # -- the agent's side --

    def update(self, update: JsonObject, session_id: str = ACP_SESSION) -> list[BridgeOutput]:
        return self.run(self.bridge.receive_notification(
            "session/update", {"sessionId": session_id, "update": update}
        ))

    def notify(self, method: str, params: object) -> list[BridgeOutput]:
        return self.run(self.bridge.receive_notification(method, params))

    def request(self, method: str, params: object, rid: RequestId | None = None) -> RequestId:
        rid = rid if rid is not None else next(self._rids)
        self.open.add(rid)
        self.run(self.bridge.receive_request(rid, method, params))
        return rid

    def permission(
        self, tool_id: str, options: Sequence[tuple[str, str]] = (
            ("allow", "allow_once"), ("always", "allow_always"), ("deny", "reject_once"),
        ), **call: object,
    ) -> RequestId:
        tool_call: dict[str, object] = {"toolCallId": tool_id, **call}
        return self.request("session/request_permission", {
            "sessionId": ACP_SESSION,
            "toolCall": tool_call,
            "options": [{"optionId": o, "name": o.title(), "kind": k} for o, k in options],
        })

    def answer(self, token: str, result: object) -> list[BridgeOutput]:
        del self.requests[token]
        return self.run(self.bridge.receive_response(token, result))

    def fail(self, token: str, code: int = -32603, message: str = "boom") -> list[BridgeOutput]:
        del self.requests[token]
        return self.run(self.bridge.receive_error(token, code, message))

    def finish(self, stop_reason: str = "end_turn", **extra: object) -> list[BridgeOutput]:
        """Answer the (only) prompt in flight with ``stop_reason``."""
        [prompt] = self.prompts
        return self.answer(prompt.token, {"stopReason": stop_reason, **extra})

    # -- the clients' side --

    def client(self, channel: str, action: t.StateAction) -> list[BridgeOutput]:
        state = self.host.state(channel)
        assert state is not None
        ctx = ValidationContext(client_id="ide", version="0.7.0", session=self.session)
        reason = validate(channel, state, action, ctx)
        assert reason is None, f"the test played an invalid client action: {reason}"
        self.host.dispatch(channel, action)
        return self.run(self.bridge.receive_client_action(channel, action))

    def start(self, text: str = "hello", **message: object) -> str:
        turn_id = f"turn-{next(self._turns)}"
        self.client(CHAT, t.ChatTurnStartedAction(
            turn_id=turn_id, started_at=iso(self.now),
            message=t.Message(text=text, origin=USER, **message),  # type: ignore[arg-type]
        ))
        return turn_id

    def cancel(self) -> list[BridgeOutput]:
        turn = self.chat.active_turn
        assert turn is not None
        return self.client(CHAT, t.ChatTurnCancelledAction(turn_id=turn.id, duration=0))

    def confirm(
        self, tool_id: str, approved: bool = True, option: str | None = None
    ) -> list[BridgeOutput]:
        turn = self.chat.active_turn
        assert turn is not None
        action: t.StateAction
        if approved:
            action = t.ChatToolCallApprovedAction(
                turn_id=turn.id, tool_call_id=tool_id,
                confirmed=t.ToolCallConfirmationReason.USER_ACTION, selected_option_id=option,
            )
        else:
            action = t.ChatToolCallDeniedAction(
                turn_id=turn.id, tool_call_id=tool_id,
                reason=t.ToolCallCancellationReason.DENIED, selected_option_id=option,
            )
        return self.client(CHAT, action)

    def input_parts(self) -> list[t.InputRequestResponsePart]:
        turn = self.chat.active_turn
        parts = turn.response_parts if turn is not None else self.chat.turns[-1].response_parts
        return [p for p in parts if isinstance(p, t.InputRequestResponsePart)]

    # -- checks --

    def assert_consistent(self) -> None:
        """No finished turn keeps an unfinished tool call; a chat without a turn is not busy."""
        for turn in self.chat.turns:
            for part in turn.response_parts:
                if isinstance(part, t.ToolCallResponsePart):
                    assert isinstance(part.tool_call, (t.ToolCallCompletedState,
                                                       t.ToolCallCancelledState)), part
        if self.chat.active_turn is None:
            assert self.chat.status & 31 in (SessionStatus.IDLE, SessionStatus.ERROR)
            assert not self.open, f"agent requests left unanswered: {self.open}"
