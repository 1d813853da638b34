"""A raw JSON-RPC ACP agent that reproduces what real agents did behind ``serve`` (issue 18).

Run as ``python raw_agent.py --record PATH [options]``: it speaks ACP on
stdin/stdout without the SDK (so it can send what the SDK's models would
drop or refuse), one message at a time, and appends one line per event to
``PATH`` (first ``agent PID``, then ``session/new``, ``session/prompt``,
``session/cancel``, ``session/set_model MODEL``, ``session/close
SESSION``, ``EOF``, ``SIGTERM``, ``grandchild PID``, ``tool PID``),
flushed at once, so a test can read what the agent got, in order, and
which processes it started.

Options, each a behaviour seen in a real agent:

* ``--prompt-error details|message|string``: ``session/prompt`` fails with
  ``-32603 Internal error`` and the cause in ``data.details`` (Qwen Code),
  ``data.message`` (Codex) or ``data`` itself;
* ``--new-error``: ``session/new`` fails the same way (``data.details``);
* ``--close``: advertises ``sessionCapabilities.close`` (Claude Code) and
  answers ``session/close``;
* ``--models``: ``session/new`` lists its models in the unstable ``models``
  field and ``session/set_model`` switches them (Gemini CLI);
* ``--grandchild``: starts a process at ``initialize`` that inherits stdout
  and ignores SIGTERM (Codex's native binary under its Node wrapper);
* ``--tool``: a prompt starts a "tool" process like the grandchild (a
  shell tool's command: Gemini CLI), reports it running, and answers
  ``cancelled`` at ``session/cancel`` without stopping it;
* ``--stubborn``: ignores SIGTERM and stays after the end of stdin;
* ``--exit-on-prompt``: exits with status 3 at a prompt (a crash).

Every process it starts sleeps at most 60 s: a failed test leaks nothing
for long.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

SLEEPER = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
           "time.sleep(60)")
CAUSE = "400 Bad Request: model not found"
NEW_SESSION_CAUSE = "Authentication required: set GEMINI_API_KEY"
MODELS = {"availableModels": [
    {"modelId": "gemini-2.5-pro", "name": "Gemini 2.5 Pro", "description": "the big one"},
    {"modelId": "gemini-2.5-flash", "name": "Gemini 2.5 Flash"},
], "currentModelId": "gemini-2.5-pro"}


class Agent:
    def __init__(self, options: argparse.Namespace) -> None:
        self.options = options
        self.sessions = 0
        self.pending_prompt: Any = None
        self.children: list[subprocess.Popen[bytes]] = []

    def record(self, line: str) -> None:
        with open(self.options.record, "a") as f:
            f.write(line + "\n")

    def send(self, message: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
        sys.stdout.flush()

    def result(self, request_id: Any, result: Any) -> None:
        self.send({"id": request_id, "result": result})

    def error(self, request_id: Any, data: Any) -> None:
        self.send({"id": request_id, "error": {"code": -32603, "message": "Internal error",
                                               "data": data}})

    def spawn_sleeper(self, what: str) -> None:
        child = subprocess.Popen([sys.executable, "-c", SLEEPER])  # stdout inherited
        self.children.append(child)
        self.record(f"{what} {child.pid}")

    def handle(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        params = message.get("params") or {}
        request_id = message.get("id")
        if method == "initialize":
            caps: dict[str, Any] = {"promptCapabilities": {}}
            if self.options.close:
                caps["sessionCapabilities"] = {"close": {}}
            if self.options.grandchild:
                self.spawn_sleeper("grandchild")
            self.result(request_id, {"protocolVersion": 1, "agentCapabilities": caps,
                                     "agentInfo": {"name": "raw", "version": "1"}})
        elif method == "session/new":
            self.record("session/new")
            if self.options.new_error:
                self.error(request_id, {"details": NEW_SESSION_CAUSE})
                return
            self.sessions += 1
            answer: dict[str, Any] = {"sessionId": f"raw-{self.sessions}"}
            if self.options.models:
                answer["models"] = MODELS
            self.result(request_id, answer)
        elif method == "session/set_model":
            self.record(f"session/set_model {params.get('modelId')}")
            self.result(request_id, {})
        elif method == "session/prompt":
            self.prompt(request_id, params)
        elif method == "session/cancel":
            self.record("session/cancel")
            if self.pending_prompt is not None:
                self.result(self.pending_prompt, {"stopReason": "cancelled"})
                self.pending_prompt = None
        elif method == "session/close":
            self.record(f"session/close {params.get('sessionId')}")
            self.result(request_id, {})
        elif request_id is not None:
            self.send({"id": request_id, "error": {"code": -32601,
                                                   "message": "Method not found"}})

    def prompt(self, request_id: Any, params: dict[str, Any]) -> None:
        self.record("session/prompt")
        session_id = params.get("sessionId")
        kind = self.options.prompt_error
        if self.options.exit_on_prompt:
            os._exit(3)
        if kind == "details":
            self.error(request_id, {"details": CAUSE})
        elif kind == "message":
            self.error(request_id, {"message": CAUSE, "codexErrorInfo": "other"})
        elif kind == "string":
            self.error(request_id, CAUSE)
        elif self.options.tool:
            self.spawn_sleeper("tool")
            self.send({"method": "session/update", "params": {"sessionId": session_id,
                       "update": {"sessionUpdate": "tool_call", "toolCallId": "shell-1",
                                  "title": "sleep 60", "kind": "execute",
                                  "status": "in_progress"}}})
            self.pending_prompt = request_id  # answered at session/cancel
        else:
            self.send({"method": "session/update", "params": {"sessionId": session_id,
                       "update": {"sessionUpdate": "agent_message_chunk",
                                  "content": {"type": "text", "text": "ok"}}}})
            self.result(request_id, {"stopReason": "end_turn"})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--record", required=True)
    parser.add_argument("--prompt-error", choices=("details", "message", "string"))
    for flag in ("--new-error", "--close", "--models", "--grandchild", "--tool", "--stubborn",
                 "--exit-on-prompt"):
        parser.add_argument(flag, action="store_true")
    options = parser.parse_args()
    agent = Agent(options)

    def on_sigterm(_signum: int, _frame: object) -> None:
        agent.record("SIGTERM")
        if not options.stubborn:
            os._exit(0)

    signal.signal(signal.SIGTERM, on_sigterm)
    agent.record(f"agent {os.getpid()}")
    for line in sys.stdin:
        if line.strip():
            agent.handle(json.loads(line))
    agent.record("EOF")
    if options.stubborn:
        time.sleep(60)


if __name__ == "__main__":
    main()
