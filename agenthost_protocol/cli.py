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
* ``agenthost-protocol chat URL MESSAGE [--yes] [--stdio] [--timeout S]``: one turn
  with an AHP host: creates a session, sends MESSAGE, streams the reply, asks y/n
  for tool calls (or --yes); exit 0 when the turn ends, 1 turn failed or host
  error, 3 cannot connect, 4 version mismatch, 5 timeout (``docs/client.md``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import IO, TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
    from . import types as t

# Each command imports what it uses: building the model takes most of a
# second, and `--help` or `serve --help` need none of it.

__all__ = ["main", "reduce_line"]


def _conformance(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    from .conformance import corpus_problem, run_corpus, summary_line  # noqa: PLC0415

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
    from . import types as t  # noqa: PLC0415
    from . import wire  # noqa: PLC0415
    from .channels import ChannelKind  # noqa: PLC0415
    from .conformance import FIXTURE_NOW_MS, STATE_TYPES  # noqa: PLC0415
    from .errors import ProtocolError  # noqa: PLC0415
    from .reducers import REDUCERS  # noqa: PLC0415
    from .reducers._clock import MAX_TIME_MS  # noqa: PLC0415

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


_LOG_LEVELS = ("debug", "info", "warning", "error")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not value >= 0:  # NaN too
        raise argparse.ArgumentTypeError(f"{text} is not a number of seconds")
    return value


def _positive_seconds(text: str) -> float:
    value = _seconds(text)
    if value == 0:
        raise argparse.ArgumentTypeError("a timeout of 0 seconds would time out at once")
    return value


_AGENTS = ("demo", "acp", "pi", "xcsh")


def _agent_choice(text: str) -> str:
    if text in _AGENTS or ":" in text:
        return text
    raise argparse.ArgumentTypeError(
        f"invalid choice: {text!r} (choose from {', '.join(_AGENTS)}, or MODULE:ATTR)")


def _add_serve(sub: Any) -> argparse.ArgumentParser:
    serve: argparse.ArgumentParser = sub.add_parser(
        "serve",
        help="run an AHP 0.7.0 host with the demo agent or an ACP/pi/xcsh agent process",
        usage="%(prog)s [options] [--agent {demo,acp,pi,xcsh}] [-- COMMAND [ARGS ...]]",
        description="Run a real AHP 0.7.0 host. By default its agent is a built-in "
        "deterministic demo: any conforming client can create sessions, start turns and "
        "confirm or deny its tool call. With --agent acp, pi or xcsh, the agent is "
        "COMMAND ARGS (after --), spawned over stdio: one ACP process for every session, "
        "or one pi/xcsh process in RPC mode per session. Prints 'serving ws://HOST:PORT' "
        "first; logs go to stderr. SIGINT or SIGTERM stops the agent processes, closes "
        "every connection and exits 0; exit 1 when it cannot start (the agent included), "
        "2 for a usage error. See docs/serve.md.",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on "
                       "(default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8765,
                       help="TCP port (default 8765; 0: any free port, printed)")
    serve.add_argument("--stdio", action="store_true",
                       help="serve one connection on stdin/stdout as JSON Lines instead")
    serve.add_argument("--log-level", choices=_LOG_LEVELS, default="info",
                       help="logging level on stderr (default info)")
    serve.add_argument("--max-message-size", type=_positive_int, default=16 * 1024 * 1024,
                       metavar="BYTES", help="largest message accepted (default 16 MiB); "
                       "a larger one closes that connection")
    serve.add_argument("--step-delay", type=_seconds, default=0.05, metavar="SECONDS",
                       help="pause between two steps of a demo turn (default 0.05; demo only)")
    serve.add_argument("--replay-window", type=_positive_int, default=10_000,
                       metavar="ENVELOPES", help="actions kept for reconnect replays "
                       "(default 10000; older gaps are answered with snapshots)")
    persistence = serve.add_argument_group(
        "persistence (docs/serve.md, Persistence)",
        "Sessions, chats and turns are kept in an SQLite file and are there again after a "
        "restart; the file in use is printed after the URL.")
    where = persistence.add_mutually_exclusive_group()
    where.add_argument("--store", metavar="PATH",
                       help="the store file (default: host.sqlite3 in the user's data "
                       "directory, e.g. ~/.local/share/agenthost-protocol/)")
    where.add_argument("--no-store", action="store_true",
                       help="keep everything in memory only: a restart forgets every session")
    serve.add_argument("--capture", metavar="DIR",
                       help="write each connection's traffic to a file of DIR (created, "
                       "private to this user), one JSON Lines transcript per connection, as "
                       "hostcheck reads them; each file stops at 64 MiB. Captures hold "
                       "everything the users sent and the agent answered (docs/serve.md, "
                       "Capturing traffic)")
    security = serve.add_argument_group(
        "access (docs/serve.md, Security)",
        "A WebSocket handshake must carry the access token (the URL's token= or "
        "Authorization: Bearer), name this server in its Host header, and carry no Origin "
        "header unless that origin is allowed. By default a random token is made and "
        "printed in the URL; AHP_TOKEN in the environment gives one instead.")
    security.add_argument("--token-file", metavar="PATH",
                          help="read the access token from PATH (its first line)")
    security.add_argument("--no-token", action="store_true",
                          help="ask for no token (loopback addresses only; any program on "
                          "this machine can then drive the agent)")
    security.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                          help="let browser pages of ORIGIN connect (e.g. "
                          "https://app.example; repeatable; none by default)")
    security.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                          help="accept NAME in the Host header besides localhost and IP "
                          "addresses (repeatable)")
    security.add_argument("--certfile", metavar="PEM",
                          help="serve wss:// with this certificate (chain)")
    security.add_argument("--keyfile", metavar="PEM",
                          help="the certificate's private key (default: in --certfile)")
    limits = serve.add_argument_group("limits (docs/serve.md, Limits)")
    defaults = _ServerLimitDefaults()
    limits.add_argument("--max-connections", type=_positive_int,
                        default=defaults.max_connections, metavar="N",
                        help=f"connections served at once (default {defaults.max_connections}); "
                        "one more gets HTTP 503")
    limits.add_argument("--max-queued-bytes", type=_positive_int,
                        default=defaults.max_total_queue_bytes, metavar="BYTES",
                        help="bytes waiting for all clients together (default "
                        f"{defaults.max_total_queue_bytes // 2**20} MiB); when full, clients "
                        "that stopped reading are dropped, longest stuck first")
    limits.add_argument("--max-queue-bytes", type=_positive_int,
                        default=defaults.max_queue_bytes, metavar="BYTES",
                        help="bytes waiting for one client before it is dropped (default "
                        f"{defaults.max_queue_bytes // 2**20} MiB)")
    limits.add_argument("--max-queue-messages", type=_positive_int,
                        default=defaults.max_queue_messages, metavar="N",
                        help="messages waiting for one client before it is dropped (default "
                        f"{defaults.max_queue_messages})")
    limits.add_argument("--stall-timeout", type=_seconds, default=defaults.stall_timeout,
                        metavar="SECONDS", help="a send stuck this long marks its client "
                        f"as not reading (default {defaults.stall_timeout:g})")
    limits.add_argument("--initialize-timeout", type=_positive_seconds,
                        default=defaults.initialize_timeout, metavar="SECONDS",
                        help="time a connection has to send initialize or reconnect "
                        f"(default {defaults.initialize_timeout:g})")
    limits.add_argument("--claim-probe-timeout", type=_positive_seconds,
                        default=defaults.claim_probe_timeout, metavar="SECONDS",
                        help="time the holder of a clientId claimed by a new connection has "
                        f"to answer a ping (default {defaults.claim_probe_timeout:g})")
    limits.add_argument("--max-subscriptions", type=_positive_int,
                        default=defaults.max_subscriptions, metavar="N",
                        help=f"channels one connection may subscribe to (default "
                        f"{defaults.max_subscriptions})")
    limits.add_argument("--compression", choices=("auto", "deflate", "none"), default="auto",
                        help="WebSocket permessage-deflate with clients that offer it "
                        "(default auto: none on a loopback address, deflate elsewhere)")
    limits.add_argument("--max-reconnects-per-minute", type=_positive_int,
                        default=defaults.max_reconnects_per_minute, metavar="N",
                        help="reconnect requests one connection may send per minute "
                        f"(default {defaults.max_reconnects_per_minute})")
    serve.add_argument("--agent", type=_agent_choice, default="demo",
                       metavar="{demo,acp,pi,xcsh,MODULE:ATTR}",
                       help="the agent: the built-in demo (default, no COMMAND), an ACP agent "
                       "(needs the acp extra), a pi or an xcsh agent in RPC mode (these three "
                       "need COMMAND), or MODULE:ATTR, an agenthost_protocol.agent.Agent "
                       "importable from the current directory (docs/agents.md)")
    serve.add_argument("agent_command", nargs=argparse.REMAINDER, metavar="COMMAND",
                       help="after --: the agent's command line, e.g. -- pi --mode rpc "
                       "--no-session")
    return serve


class _ServerLimitDefaults:
    """``ServerLimits``' defaults, without importing asyncio for ``--help``'s sake.

    A test holds these to ``ServerLimits``.
    """

    max_connections = 256
    max_total_queue_bytes = 256 * 1024 * 1024
    max_queue_bytes = 64 * 1024 * 1024
    max_queue_messages = 4096
    stall_timeout = 2.0
    initialize_timeout = 10.0
    claim_probe_timeout = 3.0
    max_subscriptions = 1024
    max_reconnects_per_minute = 30


def _read_token(args: argparse.Namespace, parser: argparse.ArgumentParser) -> str | None:
    """The token asked for: ``--token-file``, else ``AHP_TOKEN``, else ``None`` (make one)."""
    if args.token_file is not None:
        if args.no_token:
            parser.error("--token-file and --no-token contradict each other")
        try:
            with open(args.token_file, encoding="utf-8") as f:
                token = f.readline().strip()
        except (OSError, UnicodeDecodeError) as e:
            parser.error(f"cannot read the token file {args.token_file}: {e}")
        if not token:
            parser.error(f"the token file {args.token_file} is empty")
        return token
    token = os.environ.get("AHP_TOKEN", "").strip()
    if token and not args.no_token:
        return token
    return None


def _serve(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    command = list(args.agent_command)
    if command[:1] == ["--"]:  # argparse keeps the separator in a REMAINDER
        command = command[1:]
    agent_object = None
    if ":" in args.agent:
        if command:
            parser.error(f"--agent {args.agent} takes no command")
        # as `python -m` would: a module of the current directory is importable
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        from .agent.run import load_agent  # noqa: PLC0415

        try:
            agent_object = load_agent(args.agent)
        except ValueError as e:
            parser.error(f"--agent {args.agent}: {e}")
    elif args.agent == "demo" and command:
        parser.error(f"the demo agent takes no command (got {' '.join(command)!r}); "
                     "use --agent acp, pi or xcsh to run an agent process")
    if agent_object is None and args.agent != "demo" and not command:
        parser.error(f"--agent {args.agent} needs the agent's command line after --, "
                     f"e.g. serve --agent {args.agent} -- COMMAND ARGS")
    token = _read_token(args, parser)
    # imported here: the pure commands never load asyncio or the transports
    from .aio.access import is_loopback  # noqa: PLC0415
    from .aio.serve import ServeOptions, run  # noqa: PLC0415
    from .aio.server import ServerLimits  # noqa: PLC0415

    if args.no_token and not args.stdio and not is_loopback(args.host):
        parser.error(f"--no-token is refused for --host {args.host}: only a loopback "
                     "address may be served without a token")
    if args.keyfile is not None and args.certfile is None:
        parser.error("--keyfile needs --certfile")
    if args.no_token and not args.stdio:
        print("agenthost-protocol serve: warning: --no-token: any program on this machine "
              "can connect and drive the agent", file=sys.stderr, flush=True)

    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    options = ServeOptions(
        host=args.host,
        port=args.port,
        stdio=args.stdio,
        step_delay=args.step_delay,
        replay_window=args.replay_window,
        limits=ServerLimits(
            max_message_size=args.max_message_size,
            max_connections=args.max_connections,
            max_total_queue_bytes=args.max_queued_bytes,
            max_queue_bytes=args.max_queue_bytes,
            max_queue_messages=args.max_queue_messages,
            stall_timeout=args.stall_timeout,
            initialize_timeout=args.initialize_timeout,
            claim_probe_timeout=args.claim_probe_timeout,
            max_subscriptions=args.max_subscriptions,
            max_reconnects_per_minute=args.max_reconnects_per_minute,
            compression=args.compression,
        ),
        agent=args.agent if agent_object is None else "demo",
        agent_object=agent_object,
        agent_command=tuple(command),
        token=token,
        no_token=args.no_token,
        allowed_origins=tuple(args.allow_origin),
        allowed_hosts=tuple(args.allow_host),
        certfile=args.certfile,
        keyfile=args.keyfile,
        store=args.store,
        no_store=args.no_store,
        capture=args.capture,
    )
    return run(options)


def _add_chat(sub: Any) -> None:
    chat = sub.add_parser(
        "chat",
        help="send one message to an AHP host and stream the reply (WebSocket or stdio)",
        description="Connect to an AHP host, create a session, send MESSAGE as a new turn, "
        "print the reply as it streams (reasoning and tool calls on stderr), ask y/n for "
        "each tool call awaiting confirmation (or approve them all with --yes), and exit "
        "when the turn ends. Exit status: 0 the turn ended, 1 it failed or the host refused, "
        "2 usage, 3 cannot connect, 4 protocol version mismatch, 5 timeout. "
        "See docs/client.md.",
    )
    chat.add_argument("target", metavar="URL",
                      help="the host's ws:// or wss:// URL (with --stdio: a command to run)")
    chat.add_argument("message", metavar="MESSAGE", help="the message to send")
    chat.add_argument("-y", "--yes", action="store_true",
                      help="approve every tool call without asking")
    chat.add_argument("--stdio", action="store_true",
                      help="URL is a command line: spawn it and speak JSON Lines on its "
                      "stdin/stdout (e.g. \"agenthost-protocol serve --stdio\")")
    chat.add_argument("--timeout", type=_positive_seconds, default=30.0, metavar="SECONDS",
                      help="give up when the host says nothing for this long (default 30)")
    chat.add_argument("--provider", default=None,
                      help="the agent provider (default: the host's first agent)")
    chat.add_argument("--no-reasoning", action="store_true",
                      help="do not print the agent's reasoning (on stderr)")
    chat.add_argument("--log-level", choices=_LOG_LEVELS, default="warning",
                      help="logging level on stderr (default warning)")


def _chat(args: argparse.Namespace) -> int:
    # imported here: the pure commands never load asyncio or the transports
    from .aio.chat import run_from_args  # noqa: PLC0415

    return run_from_args(args)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``agenthost-protocol`` command."""
    parser = argparse.ArgumentParser(
        prog="agenthost-protocol",
        description="Agent Host Protocol tools: conformance runner, batch reducer, "
        "wire-shape check, a demo host, a chat client.",
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
    serve = _add_serve(sub)
    _add_chat(sub)
    from .hostcheck.command import (  # noqa: PLC0415
        add_parsers,
        check_host_command,
        check_traffic_command,
    )

    add_parsers(sub)
    args = parser.parse_args(argv)
    if args.command == "check-host":
        return check_host_command(args, sys.stdout, sys.stderr)
    if args.command == "check-traffic":
        return check_traffic_command(args, sys.stdout, sys.stderr)
    if args.command == "serve":
        return _serve(args, serve)
    if args.command == "chat":
        return _chat(args)
    if args.command == "conformance":
        return _conformance(args, sys.stdout, sys.stderr)
    if args.command == "compat":
        from . import compat  # noqa: PLC0415

        return compat.main([])
    return _reduce(args, sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
