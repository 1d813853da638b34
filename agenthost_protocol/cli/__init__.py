"""The ``agenthost-protocol`` command.

* ``agenthost-protocol conformance [PATH]``: run an AHP test corpus (the
  bundled official one by default); one line per failing case, then
  ``N passed, M failed``; exit status 0 only when nothing failed, 2 (and one
  line on stderr) when PATH holds no corpus.
* ``agenthost-protocol reduce``: a batch reducer for differential testing
  against other implementations; JSON Lines in, JSON Lines out (see
  :func:`reduce_line`).
* ``agenthost-protocol compat``: check the wire model against the frozen wire
  shape of the protocol version, then list the wire differences of every
  older supported version, type by type; exit status 1 only when the model
  breaks the frozen shape (:mod:`agenthost_protocol.compat`).
* ``agenthost-protocol serve [--host H] [--port P] [--stdio] [--agent KIND] ...
  [-- COMMAND ARGS...]``: a real AHP 0.7.0 host with the built-in demo agent,
  or an ACP, pi or xcsh agent process spawned over stdio, on WebSocket (the
  ``ws`` extra) or on stdin/stdout as JSON Lines; first line
  ``serving ws://HOST:PORT``; exit status 0 after SIGINT/SIGTERM, 1 when it
  cannot start (the agent included), 2 usage (``docs/serve.md``).
* ``agenthost-protocol chat URL [MESSAGE] [--session S | --continue] [--yes] [--stdio]
  [--timeout S]``: turns with an AHP host: creates (or continues) a session, sends
  MESSAGE (none: each line of input), streams the reply, asks y/n for tool calls
  (or --yes) and the agent's questions; exit 0 when the turn ends, 1 turn failed,
  host error or unanswered question, 3 cannot connect, 4 version mismatch, 5
  timeout, 130 interrupted (``docs/client.md``).
* ``agenthost-protocol sessions [list] URL``, ``sessions show URL SESSION``,
  ``sessions rm URL SESSION...``: a host's sessions, the most recently changed
  first; one session's default chat; disposal (``docs/sessions.md``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import IO, TYPE_CHECKING, Any

from .._version import __version__
from ._args import LOG_LEVELS, add_host_arguments, positive_int
from .serve import add_parser as add_serve_parser
from .serve import serve_command

if TYPE_CHECKING:
    from .. import types as t

# Each command imports what it uses: building the model takes most of a
# second, and `--help` or `serve --help` need none of it.

__all__ = ["main", "reduce_line"]


def _conformance(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    from ..conformance import corpus_problem, run_corpus, summary_line  # noqa: PLC0415

    if args.path is not None:
        missing = corpus_problem(args.path)
        if missing is not None:
            # A typo in a CI script must not pass as "0 passed, 0 failed".
            print(f"agenthost-protocol conformance: {missing}", file=err)
            return 2
    results = run_corpus(args.path)
    for r in results:
        if not r.passed:
            print(f"FAIL {r.kind} {r.name}: {r.message}", file=out)
        elif args.verbose:
            print(f"ok   {r.kind} {r.name}", file=out)
    print(summary_line(results), file=out)
    return 0 if all(r.passed for r in results) else 1


def reduce_line(line: str | bytes) -> dict[str, Any]:
    """Answer one input line of ``agenthost-protocol reduce``.

    Input: ``{"reducer": "chat"|"session"|"root"|"terminal"|"changeset"|
    "annotations"|"resourceWatch", "initial": <state>, "actions": [<action>...],
    "now": <epoch ms, default 9999>, "trace": <bool, default false>}``.
    Output: ``{"state": <final state>}`` plus ``"trace": [<state after each
    action>]`` when asked, or ``{"error": "<message>"}`` when the input does
    not decode.  States are encoded by the codec (absent fields omitted).
    """
    from .. import types as t  # noqa: PLC0415
    from .. import wire  # noqa: PLC0415
    from ..channels import ChannelKind  # noqa: PLC0415
    from ..conformance import FIXTURE_NOW_MS, STATE_TYPES  # noqa: PLC0415
    from ..errors import ProtocolError  # noqa: PLC0415
    from ..reducers import REDUCERS  # noqa: PLC0415
    from ..reducers._clock import MAX_TIME_MS  # noqa: PLC0415

    try:
        obj = wire.parse_json(line)
        if not isinstance(obj, dict):
            return {"error": "expected a JSON object"}
        name = obj.get("reducer")
        if not isinstance(name, str) or name not in STATE_TYPES:
            return {"error": f"unknown reducer {name!r}; expected one of {sorted(STATE_TYPES)}"}
        now_ms = obj.get("now", FIXTURE_NOW_MS)
        if not isinstance(now_ms, int) or isinstance(now_ms, bool):
            return {"error": "now must be an integer (epoch milliseconds)"}
        if abs(now_ms) > MAX_TIME_MS:
            return {"error": f"now must be within ±{MAX_TIME_MS} ms, the range of a JavaScript "
                    "Date (toISOString cannot write it otherwise)"}
        trace = obj.get("trace", False)
        if not isinstance(trace, bool):
            return {"error": "trace must be a boolean"}
        if "initial" not in obj:
            return {"error": "initial missing"}
        actions_raw = obj.get("actions")
        if not isinstance(actions_raw, list):
            return {"error": "actions must be an array"}
        state: t.SnapshotState = wire.structure(
            obj["initial"], STATE_TYPES[name], path=("initial",)
        )
        actions = [
            wire.structure(a, t.StateAction, path=("actions", i))
            for i, a in enumerate(actions_raw)
        ]
    except ProtocolError as e:
        return {"error": str(e)}
    reducer: Callable[..., Any] = REDUCERS[ChannelKind(name)]

    def clock() -> int:
        return now_ms

    states = []
    for action in actions:
        state = reducer(state, action, now=clock)
        if trace:
            states.append(wire.unstructure(state))
    result: dict[str, Any] = {"state": wire.unstructure(state)}
    if trace:
        result["trace"] = states
    return result


def _reduce(_: argparse.Namespace, inp: IO[bytes], out: IO[bytes]) -> int:
    # Bytes in, bytes out: the locale must not decide what a line means, and a
    # line that is not UTF-8 gets an error line like any other bad input.
    for raw in inp:
        if not raw.strip():
            continue
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            result: dict[str, Any] = {"error": f"not UTF-8: {e.reason} at byte {e.start}"}
        else:
            result = reduce_line(line)
        out.write(json.dumps(result, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))
        out.write(b"\n")
        out.flush()
    return 0


def add_chat_parser(sub: Any) -> None:
    chat = sub.add_parser(
        "chat",
        help="talk to an AHP host: one message, or a conversation (WebSocket or stdio)",
        description="Connect to an AHP host, create a session (or continue one: --session, "
        "--continue), send MESSAGE as a new turn, print the reply as it streams (reasoning, "
        "tool calls and questions on stderr), ask y/n for each tool call awaiting "
        "confirmation (or approve them all with --yes), put the agent's questions to you, and "
        "exit when the turn ends. Without MESSAGE, each line of input is a turn of the same "
        "session, until the end of input. Answer a question on one line (empty: its "
        "default; /decline or /cancel: refuse the request); on piped input one line per "
        "question, and a bad answer declines the request and exits 1. The token comes from "
        "the URL (?token=...) or the AHP_TOKEN environment variable. Exit status: 0 the "
        "turn ended, 1 it failed, the host refused, or a question went unanswered, 2 usage, "
        "3 cannot connect, 4 protocol version mismatch, 5 timeout, 130 interrupted (Ctrl-C; "
        "the turn is cancelled first). See docs/client.md.",
    )
    add_host_arguments(chat, timeout_help="give up when nothing comes from the host or the "
                       "agent for this long (default 30; time spent answering does not count)")
    chat.add_argument("message", metavar="MESSAGE", nargs="?", default=None,
                      help="the message to send (none: a conversation, one turn a line)")
    which = chat.add_mutually_exclusive_group()
    which.add_argument("--session", metavar="SESSION", default=None,
                       help="continue this session (its URI as `sessions` prints it, or the "
                       "start of its id) instead of creating one")
    which.add_argument("--continue", dest="continue_last", action="store_true",
                       help="continue the session changed last")
    chat.add_argument("-y", "--yes", action="store_true",
                      help="approve every tool call without asking (questions are still asked)")
    chat.add_argument("--provider", default=None,
                      help="the agent provider of a new session (default: the host's first "
                      "agent)")
    chat.add_argument("--no-reasoning", action="store_true",
                      help="do not print the agent's reasoning (on stderr)")
    chat.add_argument("--log-level", choices=LOG_LEVELS, default="warning",
                      help="logging level on stderr (default warning)")


SESSIONS_VERBS = ("list", "show", "rm")
PROG_SESSIONS = "agenthost-protocol sessions"


def add_sessions_parser(sub: Any) -> argparse.ArgumentParser:
    """``sessions [list] URL``, ``sessions show URL SESSION``, ``sessions rm URL SESSION...``
    (``list`` is the default: :func:`_sessions_argv` puts it in)."""
    sessions: argparse.ArgumentParser = sub.add_parser(
        "sessions",
        help="list a host's sessions, show one, or dispose of some",
        usage="%(prog)s [list] [options] URL | show [options] URL SESSION | "
        "rm [options] URL SESSION...",
        description="List the sessions of an AHP host, the most recently changed first, one "
        "line each: URI, last change, status, turns, provider, title, tab-separated "
        "(list, the default); print a session's default chat (show); dispose of sessions "
        "(rm). SESSION is a URI as listed, or the start of the last segment of exactly "
        "one (for rm, 4 characters at least). AHP_TOKEN in the environment is the access "
        "token when URL has none. Exit status: 0 done, 1 the host refused or no such "
        "session, 2 usage, 3 cannot connect, 4 protocol version mismatch, 5 timeout. "
        "See docs/sessions.md.",
    )
    verbs = sessions.add_subparsers(dest="verb", required=True, metavar="{list,show,rm}")
    common = argparse.ArgumentParser(add_help=False)
    add_host_arguments(common, timeout_help="give up on a connection or an answer after "
                       "this long (default 30)")
    common.add_argument("--page-size", type=positive_int, default=None, metavar="N",
                        help="sessions asked for per listSessions request (default: the "
                        "host's choice)")
    listing = verbs.add_parser("list", parents=[common],
                               prog=f"{PROG_SESSIONS} list", help="list the sessions (default)",
                               description="One line per session, the most recently changed "
                               "first: URI, last change (ISO 8601), status, turns of its "
                               "default chat, provider, title; tab-separated.")
    listing.add_argument("--json", action="store_true",
                         help="one JSON object per line instead (JSON Lines)")
    listing.add_argument("--limit", type=positive_int, default=None, metavar="N",
                         help="only the N most recently changed sessions")
    listing.add_argument("--no-turns", action="store_true",
                         help="do not count turns (no subscription to each session: "
                         "faster; the column shows -)")
    show = verbs.add_parser("show", parents=[common],
                            prog=f"{PROG_SESSIONS} show", help="print a session's default chat",
                            description="Print every turn of a session's default chat: the "
                            "user's message after '> ', the reply, tool calls and how the "
                            "turn ended.")
    show.add_argument("session", metavar="SESSION", help="the session (URI or prefix)")
    show.add_argument("--no-reasoning", action="store_true",
                      help="leave out the agent's reasoning")
    rm = verbs.add_parser("rm", parents=[common],
                          prog=f"{PROG_SESSIONS} rm", help="dispose of sessions",
                          description="disposeSession each SESSION; one 'disposed URI' line "
                          "per session disposed.")
    rm.add_argument("sessions", metavar="SESSION", nargs="+",
                    help="a session (URI or prefix)")
    return sessions


def _sessions_argv(argv: Sequence[str]) -> list[str]:
    """``sessions URL ...`` read as ``sessions list URL ...``: a verb, when there is one,
    comes first."""
    words = list(argv)
    if words[:1] == ["sessions"] and len(words) > 1 and words[1] not in (
            *SESSIONS_VERBS, "-h", "--help"):
        words.insert(1, "list")
    return words


def chat_command(args: argparse.Namespace) -> int:
    # imported here: the pure commands never load asyncio or the transports
    from .chat import run_from_args  # noqa: PLC0415

    return run_from_args(args)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``agenthost-protocol`` command."""
    parser = argparse.ArgumentParser(
        prog="agenthost-protocol",
        description="Agent Host Protocol tools: a host (serve), a client (chat, "
        "sessions), host and traffic checks (check-host, check-traffic), the conformance "
        "runner, a batch reducer and the wire-shape check.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    conf = sub.add_parser(
        "conformance",
        help="run an AHP test corpus (PATH/reducers, PATH/round-trips)",
        description="Run an AHP test corpus: PATH/reducers/*.json and PATH/round-trips/*.json "
        "(either may be absent). Without PATH, the bundled official 0.7.0 corpus.",
    )
    conf.add_argument("path", nargs="?", default=None, help="corpus folder")
    conf.add_argument("-v", "--verbose", action="store_true", help="also list passing cases")
    sub.add_parser(
        "reduce",
        help="batch reducer: JSON Lines on stdin, one result line per input on stdout",
        description=reduce_line.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub.add_parser(
        "compat",
        help="check the wire model against the frozen wire shapes; list version differences",
        description="Check the wire model against the frozen wire shape of the protocol "
        "version, then list the wire differences of every older supported version, type by "
        "type (see docs/versioning.md). Exit status 1 only if the model breaks the shape.",
    )
    serve = add_serve_parser(sub)
    add_chat_parser(sub)
    add_sessions_parser(sub)
    from .check_host import (  # noqa: PLC0415
        add_parsers,
        check_host_command,
        check_traffic_command,
    )

    add_parsers(sub)
    args, extra = parser.parse_known_args(
        _sessions_argv(sys.argv[1:] if argv is None else argv))
    if (extra and args.command == "chat" and args.message is None and len(extra) == 1
            and not extra[0].startswith("-")):
        # `chat URL --session S MESSAGE`: argparse gave the optional MESSAGE's place away
        # when it met the option, and calls MESSAGE unrecognized
        args.message = extra[0]
        extra = []
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "check-host":
        return check_host_command(args, sys.stdout, sys.stderr)
    if args.command == "check-traffic":
        return check_traffic_command(args, sys.stdout, sys.stderr)
    if args.command == "serve":
        return serve_command(args, serve)
    if args.command == "chat":
        return chat_command(args)
    if args.command == "sessions":
        from .sessions import run_from_args  # noqa: PLC0415  # asyncio only when it runs

        return run_from_args(args)
    if args.command == "conformance":
        return _conformance(args, sys.stdout, sys.stderr)
    if args.command == "compat":
        from .. import compat  # noqa: PLC0415

        return compat.main([])
    return _reduce(args, sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
