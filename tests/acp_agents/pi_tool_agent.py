"""A pi stand-in (``pi --mode rpc``) whose prompt runs a tool that outlives a careless stop.

Run as ``python pi_tool_agent.py RECORD``.  It answers ``get_state`` and
``get_available_models``; a ``prompt`` starts a run with a ``bash`` tool
call whose command is a real process (it inherits stdout and ignores
SIGTERM, as a shell's child may), and the run goes on until ``abort``,
which ends it (``aborted``) and is answered, but leaves the tool's process
running: only signalling the agent's whole process group stops it.  It
appends one line per event to ``RECORD`` (first ``agent PID``, then
``prompt``, ``abort``, ``EOF``, ``SIGTERM``, ``tool PID``), so a test sees
whether ``abort`` came before the end of stdin, and which process to check.

Its tool sleeps at most 60 s: a failed test leaks nothing for long.  (It
lives with the ACP stand-ins, the tests' directory of agent scripts.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any

SLEEPER = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
           "time.sleep(60)")


def record(line: str) -> None:
    with open(sys.argv[1], "a") as f:
        f.write(line + "\n")


def send(frame: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(frame) + "\n")
    sys.stdout.flush()


def ok(cmd: dict[str, Any], data: Any = None) -> None:
    frame: dict[str, Any] = {"id": cmd.get("id"), "type": "response", "command": cmd["type"],
                             "success": True}
    if data is not None:
        frame["data"] = data
    send(frame)


def start_tool_run(cmd: dict[str, Any]) -> None:
    ok(cmd)
    send({"type": "agent_start"})
    send({"type": "message_start", "message": {"role": "user", "content": cmd.get("message")}})
    send({"type": "message_start", "message": {"role": "assistant", "content": []}})
    send({"type": "message_update", "message": {"role": "assistant", "content": []},
          "assistantMessageEvent": {"type": "toolcall_end", "contentIndex": 0, "toolCall": {
              "type": "toolCall", "id": "call-1", "name": "bash",
              "arguments": {"command": "sleep 60"}}}})
    send({"type": "message_end", "message": {"role": "assistant", "content": [],
                                             "stopReason": "toolUse"}})
    tool = subprocess.Popen([sys.executable, "-c", SLEEPER])  # stdout inherited
    record(f"tool {tool.pid}")
    send({"type": "tool_execution_start", "toolCallId": "call-1", "toolName": "bash",
          "args": {"command": "sleep 60"}})


def abort_run(cmd: dict[str, Any]) -> None:
    send({"type": "tool_execution_end", "toolCallId": "call-1", "toolName": "bash",
          "result": {"content": [{"type": "text", "text": "aborted"}]}, "isError": True})
    send({"type": "message_start", "message": {"role": "assistant", "content": []}})
    send({"type": "message_end", "message": {"role": "assistant", "content": [],
                                             "stopReason": "aborted"}})
    send({"type": "agent_end", "messages": []})
    ok(cmd)


def main() -> int:
    def on_sigterm(_signum: int, _frame: object) -> None:
        record("SIGTERM")
        os._exit(0)

    signal.signal(signal.SIGTERM, on_sigterm)
    record(f"agent {os.getpid()}")
    running = False
    for line in sys.stdin:
        cmd = json.loads(line)
        kind = cmd["type"]
        if kind == "get_state":
            ok(cmd, {"isStreaming": running, "isCompacting": False, "sessionId": "tool",
                     "messageCount": 0})
        elif kind == "get_available_models":
            ok(cmd, {"models": []})
        elif kind == "prompt":
            record("prompt")
            start_tool_run(cmd)
            running = True
        elif kind == "abort":
            record("abort")
            if running:
                abort_run(cmd)
                running = False
            else:
                ok(cmd)
        else:
            ok(cmd)
    record("EOF")
    return 0


if __name__ == "__main__":
    sys.exit(main())
