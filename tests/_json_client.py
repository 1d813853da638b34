"""A client speaking raw JSON-RPC to a host's connection, in process, for runner tests.

``send`` feeds one message and flushes the server; ``until`` polls (bounded)
while the agent's tasks run; the answers and notifications collect in ``inbox``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable
from typing import Any

from agenthost_protocol import types as t
from agenthost_protocol import wire
from agenthost_protocol.aio.server import HostServer


class JsonClient:
    """One connection of ``server``'s host, driven by hand."""

    timeout = 15.0

    def __init__(self, server: HostServer) -> None:
        self.server = server
        self.host = server.host
        self.conn = self.host.connect()
        self.ids = itertools.count(1)
        self.seq = itertools.count(1)
        self.inbox: list[dict[str, Any]] = []

    def send(self, message: dict[str, Any]) -> None:
        self.conn.receive_data(json.dumps({"jsonrpc": "2.0", **message}))
        self.server.flush()
        self.inbox += [json.loads(m) for m in self.conn.data_to_send()]

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        number = next(self.ids)
        self.send({"id": number, "method": method, "params": params})
        await self.until(lambda: any(m.get("id") == number for m in self.inbox))
        [answer] = [m for m in self.inbox if m.get("id") == number]
        assert "error" not in answer, answer
        return answer["result"]

    def dispatch(self, channel: str, action: t.StateAction) -> None:
        self.send({"method": "dispatchAction", "params": {
            "channel": channel, "clientSeq": next(self.seq), "action": wire.unstructure(action)}})

    async def until(self, condition: Callable[[], bool], timeout: float | None = None) -> None:
        async def poll() -> None:
            while not condition():
                await asyncio.sleep(0.01)
                self.inbox += [json.loads(m) for m in self.conn.data_to_send()]
        await asyncio.wait_for(poll(), self.timeout if timeout is None else timeout)

    def chat(self, uri: str) -> t.ChatState:
        state = self.host.state(uri)
        assert isinstance(state, t.ChatState)
        return state

    def session(self, uri: str) -> t.SessionState:
        state = self.host.state(uri)
        assert isinstance(state, t.SessionState)
        return state
