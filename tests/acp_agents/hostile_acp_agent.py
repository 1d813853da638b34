"""A hostile ACP agent: it answers ``initialize`` and ``session/new``, then misbehaves.

Run as ``python hostile_acp_agent.py MODE``; it speaks raw JSON-RPC on
stdin/stdout (no SDK, so it can write what no SDK would).  What it does at
``session/prompt`` (or, for ``silent-new``, at ``session/new``):

* ``flood-garbage``: writes lines that are not JSON, as fast as the pipe takes them;
* ``flood-unknown``: writes valid ``session/update`` notifications for a session
  nobody has, as fast as the pipe takes them;
* ``flood-reply``: streams its reply (``agent_message_chunk``) as fast as the pipe
  takes it;
* ``flood-permission``: asks ``session/request_permission`` for the prompt's session
  without end, never reading the answers (the host must not keep them all waiting);
* ``flood-requests``: sends requests of a method nobody has without end, never reading
  the answers (the host must not queue answers without bound);
* ``huge-line``: writes one line that never ends (64 KiB chunks, no newline);
* ``silent``: never answers its first prompt and ignores ``session/cancel``; answers
  later prompts (``end_turn``);
* ``silent-new``: never answers ``session/new``;
* ``silent-switch``: lists two models (``a``, ``b``) but never answers
  ``session/set_model``; answers every prompt (``end_turn``);
* ``exit``: exits with status 7; ``kill9``: SIGKILLs itself.

Every mode ends within 120 s on its own (and at a broken pipe), so a failed
test leaks nothing for long.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

LIFETIME = 120.0


def send(message: dict[str, Any]) -> None:
    sys.stdout.buffer.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
    sys.stdout.buffer.flush()


def forever(chunk: bytes) -> None:
    deadline = time.monotonic() + LIFETIME
    while time.monotonic() < deadline:
        sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()


def misbehave(mode: str) -> None:
    if mode == "flood-garbage":
        forever(b"this is not json {{{ \xff\xfe\n" * 512)
    elif mode == "flood-unknown":
        line = json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {
            "sessionId": "nobody", "update": {"sessionUpdate": "agent_message_chunk",
                                              "content": {"type": "text", "text": "x" * 64}}}})
        forever((line + "\n").encode() * 256)
    elif mode == "flood-permission":
        lines = b"".join((json.dumps({"jsonrpc": "2.0", "id": f"p{n}", "method":
                                      "session/request_permission", "params": {
                                          "sessionId": "hostile-1",
                                          "toolCall": {"toolCallId": f"call-{n}",
                                                       "title": "rm -rf /"},
                                          "options": [{"optionId": "allow", "name": "Allow",
                                                       "kind": "allow_once"}]}})
                          + "\n").encode() for n in range(256))
        forever(lines)
    elif mode == "flood-reply":
        line = json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {
            "sessionId": "hostile-1", "update": {"sessionUpdate": "agent_message_chunk",
                                                 "content": {"type": "text", "text": "x" * 64}}}})
        forever((line + "\n").encode() * 256)
    elif mode == "flood-requests":
        forever(b"".join((json.dumps({"jsonrpc": "2.0", "id": f"r{n}", "method": "x/what",
                                      "params": {"sessionId": "hostile-1"}})
                          + "\n").encode() for n in range(256)))
    elif mode == "huge-line":
        forever(b"[" + b'"' + b"x" * (64 * 1024))  # never a newline
    elif mode == "exit":
        os._exit(7)
    elif mode == "kill9":
        os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    mode = sys.argv[1]
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # a closed pipe ends us
    prompts = 0
    for raw in sys.stdin.buffer:
        try:
            message = json.loads(raw)
        except ValueError:
            continue
        method, request_id = message.get("method"), message.get("id")
        if method == "initialize":
            send({"id": request_id, "result": {
                "protocolVersion": 1, "agentCapabilities": {},
                "agentInfo": {"name": "hostile", "version": "1"}}})
        elif method == "session/new":
            if mode == "silent-new":
                continue
            result: dict[str, Any] = {"sessionId": "hostile-1"}
            if mode == "silent-switch":
                result["models"] = {"availableModels": [{"modelId": "a", "name": "A"},
                                                        {"modelId": "b", "name": "B"}],
                                    "currentModelId": "a"}
            send({"id": request_id, "result": result})
        elif method == "session/prompt":
            prompts += 1
            if (mode == "silent" and prompts > 1) or mode == "silent-switch":
                send({"id": request_id, "result": {"stopReason": "end_turn"}})
                continue
            send({"method": "session/update", "params": {
                "sessionId": "hostile-1", "update": {
                    "sessionUpdate": "agent_message_chunk",
                    "content": {"type": "text", "text": "working"}}}})
            misbehave(mode)
        # silent: no answer to the prompt, session/cancel ignored


if __name__ == "__main__":
    main()
