"""A host kept apart by an ``authorize`` policy, driven with raw JSON-RPC as a transport would.

:class:`Embedder` answers the session commands the way the agent layer does
(``AgentDriver``): ``createSession`` with the connection's principal, a ready
session with a default chat and the root's ``activeSessions`` kept; the
others with the host's own helpers.  :class:`Peer` is one connection and
what it received.
"""

from __future__ import annotations

import json
from typing import Any

from agenthost_protocol import types as t
from agenthost_protocol.channels import ROOT_CHANNEL
from agenthost_protocol.host import Host, HostConnection, RequestReceived
from agenthost_protocol.host.authorize import OwnershipPolicy
from agenthost_protocol.host.store import HostStore
from agenthost_protocol.types.error_codes import AhpErrorCode, JsonRpcErrorCode

NOW = 1_767_225_600_000
ADMIN = "admin"

AGENT = t.AgentInfo(
    provider="demo", display_name="Demo", description="", models=(),
    capabilities=t.AgentCapabilities(
        multiple_chats=t.MultipleChatsCapability(fork=True, side_chat=True)),
)


def policy() -> OwnershipPolicy:
    return OwnershipPolicy(is_admin=lambda principal: principal == ADMIN)


def make_host(store: HostStore | None = None, *, authorize: object = "policy") -> Host:
    return Host(
        clock=lambda: NOW,
        root=t.RootState(agents=(AGENT,), active_sessions=0, terminals=()),
        store=store,
        authorize=policy() if authorize == "policy" else authorize,  # type: ignore[arg-type]
    )


def session_uri(name: str) -> str:
    return f"ahp-session:/{name}"


def chat_uri(name: str) -> str:
    return f"ahp-chat:/{name}"


class Embedder:
    """The session commands answered as the agent layer answers them."""

    def __init__(self, host: Host) -> None:
        self.host = host

    def run(self) -> None:
        for event in self.host.events():
            if isinstance(event, RequestReceived):
                self.answer(event)

    def count(self) -> None:
        self.host.dispatch(ROOT_CHANNEL, t.RootActiveSessionsChangedAction(
            active_sessions=len(self.host.listed_sessions())))

    def answer(self, event: RequestReceived) -> None:
        host, params = self.host, event.params
        if isinstance(params, t.CreateSessionParams):
            uri = params.channel
            if host.has_channel(uri):
                event.responder.error(AhpErrorCode.SESSION_ALREADY_EXISTS, f"{uri!r} exists")
                return
            host.create_session(uri, provider="demo", principal=event.connection.principal)
            event.responder.respond(None)
            host.ready_session(uri, default_chat=chat_uri(uri.removeprefix("ahp-session:/")))
            self.count()
        elif isinstance(params, t.DisposeSessionParams):
            if not host.has_channel(params.channel):
                event.responder.error(AhpErrorCode.SESSION_NOT_FOUND,
                                      f"no session {params.channel!r}")
                return
            host.dispose_session(params.channel)
            event.responder.respond(None)
            self.count()
        elif isinstance(params, t.CreateChatParams):
            host.answer_create_chat(event)
        elif isinstance(params, t.DisposeChatParams):
            host.answer_dispose_chat(event)
        elif isinstance(params, t.FetchTurnsParams):
            host.fetch_turns(event, ())
        elif isinstance(params, t.ListSessionsParams):
            host.answer_list_sessions(event)
        elif isinstance(params, t.CreateTerminalParams):
            host.answer_create_terminal(event)
        elif isinstance(params, t.DisposeTerminalParams):
            host.answer_dispose_terminal(event)
        else:
            event.responder.error(JsonRpcErrorCode.METHOD_NOT_FOUND, event.method)


class Peer:
    """One connection of ``principal``, speaking raw JSON-RPC; ``inbox`` is all it got."""

    def __init__(self, host: Host, embedder: Embedder, principal: object, name: str) -> None:
        self.host, self.embedder = host, embedder
        self.principal = principal
        self.name = name
        self.conn: HostConnection = host.connect(principal=principal)
        self.inbox: list[dict[str, Any]] = []
        self._ids = 0

    def pull(self) -> list[dict[str, Any]]:
        got = [json.loads(data) for data in self.conn.data_to_send()]
        self.inbox.extend(got)
        return got

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send a request, let the embedder answer, return the answer."""
        self._ids += 1
        request_id = self._ids
        self.conn.receive_data(json.dumps(
            {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}))
        self.embedder.run()
        answers = [m for m in self.pull() if m.get("id") == request_id and "method" not in m]
        assert len(answers) == 1, answers
        return answers[0]

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self.conn.receive_data(json.dumps({"jsonrpc": "2.0", "method": method,
                                           "params": params}))
        self.embedder.run()

    def initialize(self, subscriptions: tuple[str, ...] = (ROOT_CHANNEL,)) -> dict[str, Any]:
        return self.request("initialize", {
            "protocolVersions": ["0.7.0"], "clientId": self.name,
            "initialSubscriptions": list(subscriptions)})

    def create_session(self, name: str) -> dict[str, Any]:
        return self.request("createSession", {"channel": session_uri(name), "provider": "demo"})

    def listed(self) -> list[str]:
        answer = self.request("listSessions", {})
        return [item["resource"] for item in answer["result"]["items"]]

    def dispatch(self, channel: str, action: dict[str, Any], seq: int = 1) -> None:
        self.notify("dispatchAction", {"channel": channel, "clientSeq": seq, "action": action})


def error_code(answer: dict[str, Any]) -> int | None:
    error = answer.get("error")
    return None if error is None else int(error["code"])


def complete_turn(host: Host, chat: str, turn_id: str = "t1", text: str = "hello") -> None:
    host.dispatch(chat, t.ChatTurnStartedAction(
        turn_id=turn_id, started_at="2026-01-01T00:00:00.000Z",
        message=t.Message(text=text, origin=t.MessageOrigin(kind=t.MessageKind.USER))))
    host.dispatch(chat, t.ChatTurnCompleteAction(turn_id=turn_id, duration=1))
