"""A hostile pi stand-in (``pi --mode rpc``): it answers ``get_state`` and
``get_available_models``, then misbehaves at its first ``prompt``.

Run as ``python hostile_pi_agent.py MODE``; what it does at the prompt (after
acknowledging it and starting a run, ``agent_start`` and a text delta):

* ``flood-garbage``: writes lines that are not JSON, as fast as the pipe takes them;
* ``flood-unknown``: writes valid frames of a type pi does not have, as fast as it can;
* ``flood-dialogs``: opens ``confirm`` dialogs and sets status keys without end, never
  reading the answers;
* ``huge-line``: writes one line that never ends (64 KiB chunks, no newline);
* ``silent``: the run never ends and ``abort`` is ignored;
* ``exit``: exits with status 7; ``kill9``: SIGKILLs itself.

A later process's prompts (a new session) are answered normally: the run
says ``Done.`` and ends.  Every mode ends within 120 s on its own (and at a
broken pipe), so a failed test leaks nothing for long.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

LIFETIME = 120.0


def send(frame: dict[str, Any]) -> None:
    sys.stdout.buffer.write(json.dumps(frame).encode() + b"\n")
    sys.stdout.buffer.flush()


def ok(cmd: dict[str, Any], data: Any = None) -> None:
    frame: dict[str, Any] = {"id": cmd.get("id"), "type": "response", "command": cmd["type"],
                             "success": True}
    if data is not None:
        frame["data"] = data
    send(frame)


def forever(chunk: bytes) -> None:
    deadline = time.monotonic() + LIFETIME
    while time.monotonic() < deadline:
        sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()


def delta(text: str) -> dict[str, Any]:
    return {"type": "message_update", "message": {"role": "assistant", "content": []},
            "assistantMessageEvent": {"type": "text_delta", "contentIndex": 0, "delta": text}}


def run(text: str) -> None:
    send({"type": "agent_start"})
    send({"type": "message_start", "message": {"role": "assistant", "content": []}})
    send(delta(text))


def end_run() -> None:
    send({"type": "message_end", "message": {"role": "assistant", "content": [],
                                             "stopReason": "stop"}})
    send({"type": "agent_end", "messages": []})


def misbehave(mode: str) -> None:
    if mode == "flood-garbage":
        forever(b"this is not json {{{ \xff\xfe\n" * 512)
    elif mode == "flood-unknown":
        forever((json.dumps({"type": "noise", "payload": "x" * 64}) + "\n").encode() * 256)
    elif mode == "flood-dialogs":
        lines = b"".join((json.dumps({"type": "extension_ui_request", "id": f"d{n}",
                                      "method": "confirm", "title": "rm -rf /?"}) + "\n"
                          + json.dumps({"type": "extension_ui_request", "id": f"s{n}",
                                        "method": "setStatus", "statusKey": f"k{n}",
                                        "statusText": "x" * 1000}) + "\n").encode()
                         for n in range(256))
        deadline = time.monotonic() + LIFETIME
        while time.monotonic() < deadline:  # new ids each round: every dialog is new
            sys.stdout.buffer.write(lines.replace(b'"d', b'"d%d-' % int(time.monotonic_ns()))
                                    .replace(b'"k', b'"k%d-' % int(time.monotonic_ns())))
            sys.stdout.buffer.flush()
    elif mode == "huge-line":
        forever(b'{"type": "message_update", "x": "' + b"x" * (64 * 1024))
    elif mode == "exit":
        os._exit(7)
    elif mode == "kill9":
        os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    mode = sys.argv[1]
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # a closed pipe ends us
    running = False
    for line in sys.stdin.buffer:
        try:
            cmd = json.loads(line)
        except ValueError:
            continue
        kind = cmd.get("type")
        if kind == "get_state":
            ok(cmd, {"isStreaming": running, "isCompacting": False, "sessionId": "hostile",
                     "messageCount": 0})
        elif kind == "get_available_models":
            ok(cmd, {"models": []})
        elif kind == "prompt":
            ok(cmd)
            if running:
                continue  # pi refuses a prompt while it streams; this one does not even say
            run("working")
            running = True
            misbehave(mode)
        elif kind == "abort":
            if mode != "silent":
                ok(cmd)
        else:
            ok(cmd)


if __name__ == "__main__":
    main()
