"""A scripted stand-in for ``pi --mode rpc`` (no tests here): run it as a script.

It speaks the pi RPC frames on stdin/stdout, enough for the runner's tests:
``get_state``, ``get_available_models``, ``prompt`` (a run that echoes the
message; ``tool`` in it runs a bash tool call, ``confirm`` asks an extension
confirm dialog and waits for its answer, ``slow`` streams a piece and waits
for an ``abort``, ``crash`` exits in the middle of the run), ``abort`` and
every other command answered with success.  ``--xcsh`` starts with xcsh's
``ready`` frame.  It exits at the end of its stdin.

For the resume tests: ``--session-dir DIR`` makes ``get_state`` name
``DIR/session-<pid>.jsonl`` as its ``sessionFile``, a line appended to it per
prompt (pi writes its file once there is something to keep); without it
there is no ``sessionFile``, as with ``--no-session`` (which it ignores).
``switch_session`` {sessionPath} answers ``{cancelled: false}`` if that file
exists (then names it in ``get_state``), else fails; ``--switch-fails``
fails it always.  ``--log PATH`` appends ``pid <pid>`` once, then every
command received, one JSON line each.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def option(name: str) -> str | None:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else None


DIRECTORY = option("--session-dir")
SESSION_FILE: list[str | None] = [
    None if DIRECTORY is None else os.path.join(DIRECTORY, f"session-{os.getpid()}.jsonl")]
"""The session file get_state names (a list: switch_session changes it)."""
LOG = option("--log")


def log(line: str) -> None:
    if LOG is not None:
        with open(LOG, "a", encoding="utf-8") as f:
            f.write(line + "\n")


def send(frame: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(frame) + "\n")
    sys.stdout.flush()


def command() -> dict[str, Any] | None:
    line = sys.stdin.readline()
    if not line:
        return None
    value = json.loads(line)
    assert isinstance(value, dict)
    log(json.dumps(value))
    return value


def ok(cmd: dict[str, Any], data: Any = None) -> None:
    frame = {"id": cmd.get("id"), "type": "response", "command": cmd["type"], "success": True}
    if data is not None:
        frame["data"] = data
    send(frame)


def delta(text: str, index: int = 0) -> None:
    send({"type": "message_update", "message": {"role": "assistant", "content": []},
          "assistantMessageEvent": {"type": "text_delta", "contentIndex": index, "delta": text,
                                    "partial": {"role": "assistant", "content": []}}})


def end_run(stop: str) -> None:
    send({"type": "message_end", "message": {
        "role": "assistant", "content": [], "stopReason": stop, "model": "echo",
        "usage": {"input": 3, "output": 5, "cacheRead": 0, "cacheWrite": 0,
                  "cost": {"total": 0.0}}}})
    send({"type": "agent_end", "messages": []})


def run(cmd: dict[str, Any]) -> bool:
    """One agent run for a prompt; ``False`` when stdin ended in the middle."""
    message = str(cmd.get("message", ""))
    ok(cmd)
    if SESSION_FILE[0] is not None:
        with open(SESSION_FILE[0], "a", encoding="utf-8") as f:
            f.write(json.dumps({"role": "user", "content": message}) + "\n")
    send({"type": "agent_start"})
    send({"type": "message_start", "message": {"role": "user", "content": message}})
    send({"type": "message_start", "message": {"role": "assistant", "content": []}})
    delta("You said: ")
    delta(message)
    if "crash" in message:
        sys.exit(3)
    if "slow" in message:
        while (nxt := command()) is not None:
            if nxt["type"] == "abort":
                end_run("aborted")
                ok(nxt)
                return True
            ok(nxt)
        return False
    if "confirm" in message:
        send({"type": "extension_ui_request", "id": "d1", "method": "confirm",
              "title": "Proceed?", "message": "The stand-in asks."})
        while (nxt := command()) is not None and nxt["type"] != "extension_ui_response":
            ok(nxt)
        if nxt is None:
            return False
        delta(f" (confirmed={nxt.get('confirmed')})")
    if "tool" in message:
        send({"type": "message_update", "message": {"role": "assistant", "content": []},
              "assistantMessageEvent": {"type": "toolcall_end", "contentIndex": 1, "toolCall": {
                  "type": "toolCall", "id": "call-1", "name": "bash",
                  "arguments": {"command": "echo hi"}}}})
        send({"type": "message_end", "message": {"role": "assistant", "content": [],
                                                 "stopReason": "toolUse"}})
        send({"type": "tool_execution_start", "toolCallId": "call-1", "toolName": "bash",
              "args": {"command": "echo hi"}})
        send({"type": "tool_execution_end", "toolCallId": "call-1", "toolName": "bash",
              "result": {"content": [{"type": "text", "text": "hi\n"}]}, "isError": False})
        send({"type": "message_start", "message": {"role": "assistant", "content": []}})
        delta("Done.")
    end_run("stop")
    return True


def main() -> int:
    if "--xcsh" in sys.argv:
        send({"type": "ready", "version": "0.0-standin"})
    log(f"pid {os.getpid()}")
    while (cmd := command()) is not None:
        kind = cmd["type"]
        if kind == "get_state":
            state: dict[str, Any] = {
                "isStreaming": False, "isCompacting": False, "sessionId": "standin",
                "sessionName": "Stand-in session", "messageCount": 0}
            if SESSION_FILE[0] is not None:
                state["sessionFile"] = SESSION_FILE[0]
            ok(cmd, state)
        elif kind == "switch_session":
            path = str(cmd.get("sessionPath"))
            if "--switch-fails" in sys.argv or not os.path.isfile(path):
                send({"id": cmd.get("id"), "type": "response", "command": kind,
                      "success": False, "error": f"cannot switch to {path}"})
            else:
                SESSION_FILE[0] = path
                ok(cmd, {"cancelled": False})
        elif kind == "get_available_models":
            ok(cmd, {"models": [{"id": "echo", "name": "Echo", "provider": "standin",
                                 "input": ["text"], "contextWindow": 1000, "maxTokens": 100}]})
        elif kind == "prompt":
            if not run(cmd):
                return 0
        else:
            ok(cmd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
