"""``agenthost-protocol serve``: its arguments, checked, made into the
:class:`~agenthost_protocol.agent.hosting.ServeOptions` that the serving runtime
of the agent layer runs (``docs/serve.md``)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..aio.files import Root

from ._args import (
    LOG_LEVELS,
    agent_choice,
    byte_size,
    positive_int,
    positive_seconds,
    seconds,
)

__all__ = ["add_parser", "serve_command"]


def add_parser(sub: Any) -> argparse.ArgumentParser:
    serve: argparse.ArgumentParser = sub.add_parser(
        "serve",
        help="run an AHP 0.7.0 host at ws://HOST:PORT/?token=TOKEN (the token kept across "
        "restarts) with the demo agent, an ACP/pi/xcsh agent process or MODULE:ATTR",
        usage="%(prog)s [options] [--agent {demo,acp,pi,xcsh,MODULE:ATTR}] "
        "[-- COMMAND [ARGS ...]]",
        description="Run a real AHP 0.7.0 host; it prints 'serving "
        "ws://HOST:PORT/?token=TOKEN' first, the URL to give clients (TOKEN is kept in "
        "the settings file: a restart prints the same URL), then 'web "
        "http://HOST:PORT/#token=TOKEN', the web client it serves on the same port "
        "(docs/web.md). By default its agent is a "
        "built-in deterministic demo: any conforming client can create sessions, start "
        "turns and confirm or deny its tool call. With --agent acp, pi or xcsh, the agent "
        "is COMMAND ARGS (after --), spawned over stdio: one ACP process for every "
        "session, or one pi/xcsh process in RPC mode per session; with --agent "
        "MODULE:ATTR, an Agent of yours. Logs go to stderr. SIGINT or SIGTERM stops the "
        "agent processes, closes "
        "every connection and exits 0; exit 1 when it cannot start (the agent or the "
        "settings file included), "
        "2 for a usage error. See docs/serve.md.",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on "
                       "(default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8765,
                       help="TCP port (default 8765; 0: any free port, printed)")
    serve.add_argument("--stdio", action="store_true",
                       help="serve one connection on stdin/stdout as JSON Lines instead "
                       "(no token: the settings file is neither read nor made)")
    serve.add_argument("--log-level", choices=LOG_LEVELS, default="info",
                       help="logging level on stderr (default info)")
    serve.add_argument("--max-message-size", type=positive_int, default=16 * 1024 * 1024,
                       metavar="BYTES", help="largest message accepted (default 16 MiB); "
                       "a larger one closes that connection")
    serve.add_argument("--step-delay", type=seconds, default=0.05, metavar="SECONDS",
                       help="pause between two steps of a demo turn (default 0.05; demo only)")
    serve.add_argument("--close-timeout", type=seconds, default=3.0, metavar="SECONDS",
                       help="at a stop, how long to wait for turns, session set-ups and "
                       "hooks of the agent that do not end when cancelled, then as long for "
                       "the agent's close, or each step of stopping an agent process (default 3); "
                       "then they are abandoned and serve exits (a second SIGINT or SIGTERM "
                       "exits at once)")
    serve.add_argument("--replay-window", type=positive_int, default=10_000,
                       metavar="ENVELOPES", help="actions kept for reconnect replays "
                       "(default 10000; older gaps are answered with snapshots)")
    persistence = serve.add_argument_group(
        "persistence (docs/serve.md, Persistence)",
        "Sessions, chats and turns are kept in an SQLite file and are there again after a "
        "restart; the file in use is printed after the URL. A stored session of another "
        "agent (another provider) is listed, but a turn in it ends at once in an error.")
    where = persistence.add_mutually_exclusive_group()
    where.add_argument("--store", metavar="PATH",
                       help="the store file (default: one per agent, in the user's data "
                       "directory, e.g. ~/.local/share/agenthost-protocol/demo.sqlite3, "
                       "acp-PROGRAM.sqlite3, pi-PROGRAM.sqlite3 or PROVIDER.sqlite3; give "
                       "another PATH to serve the same agent twice, or host.sqlite3 to keep "
                       "using the one store of earlier versions)")
    where.add_argument("--no-store", action="store_true",
                       help="keep everything in memory only: a restart forgets every session")
    persistence.add_argument("--max-store-bytes", type=byte_size, default=2**30,
                             metavar="BYTES", help="the store's budget (default 1G; K, M and "
                             "G suffixes are binary units): past it, changes are refused and "
                             "disposing of sessions (sessions rm) frees space")
    serve.add_argument("--capture", metavar="DIR",
                       help="write each connection's traffic to a file of DIR (created, "
                       "private to this user), one JSON Lines transcript per connection, as "
                       "hostcheck reads them; each file stops at 64 MiB. Captures hold "
                       "everything the users sent and the agent answered (docs/serve.md, "
                       "Capturing traffic)")
    security = serve.add_argument_group(
        "access (docs/serve.md, Security)",
        "A WebSocket handshake must carry the access token (the URL's token= or tkn=, or "
        "Authorization: Bearer; else HTTP 401), name this server in its Host header and "
        "carry no Origin header unless that origin is allowed (else HTTP 403). The token "
        "is made on the first run and kept in settings.json of the user's config "
        "directory (e.g. ~/.config/agenthost-protocol/, mode 0600), so a restart prints "
        "the same URL; --new-token replaces it. --token-file, else AHP_TOKEN in the "
        "environment, give one instead. --stdio uses no token.")
    security.add_argument("--token-file", metavar="PATH",
                          help="read the access token from PATH (its first line)")
    security.add_argument("--new-token", action="store_true",
                          help="replace the saved token with a new random one and serve "
                          "it (the new URL is printed): every URL given out before is "
                          "refused from then on")
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
    limits.add_argument("--max-connections", type=positive_int,
                        default=defaults.max_connections, metavar="N",
                        help=f"connections served at once (default {defaults.max_connections}); "
                        "one more gets HTTP 503")
    limits.add_argument("--max-queued-bytes", type=positive_int,
                        default=defaults.max_total_queue_bytes, metavar="BYTES",
                        help="bytes waiting for all clients together (default "
                        f"{defaults.max_total_queue_bytes // 2**20} MiB); when full, clients "
                        "that stopped reading are dropped, longest stuck first")
    limits.add_argument("--max-queue-bytes", type=positive_int,
                        default=defaults.max_queue_bytes, metavar="BYTES",
                        help="bytes waiting for one client before it is dropped (default "
                        f"{defaults.max_queue_bytes // 2**20} MiB)")
    limits.add_argument("--max-queue-messages", type=positive_int,
                        default=defaults.max_queue_messages, metavar="N",
                        help="messages waiting for one client before it is dropped (default "
                        f"{defaults.max_queue_messages})")
    limits.add_argument("--stall-timeout", type=seconds, default=defaults.stall_timeout,
                        metavar="SECONDS", help="a send stuck this long marks its client "
                        f"as not reading (default {defaults.stall_timeout:g})")
    limits.add_argument("--initialize-timeout", type=positive_seconds,
                        default=defaults.initialize_timeout, metavar="SECONDS",
                        help="time a connection has to send initialize or reconnect "
                        f"(default {defaults.initialize_timeout:g})")
    limits.add_argument("--claim-probe-timeout", type=positive_seconds,
                        default=defaults.claim_probe_timeout, metavar="SECONDS",
                        help="time the holder of a clientId claimed by a new connection has "
                        f"to answer a ping (default {defaults.claim_probe_timeout:g})")
    limits.add_argument("--max-subscriptions", type=positive_int,
                        default=defaults.max_subscriptions, metavar="N",
                        help=f"channels one connection may subscribe to (default "
                        f"{defaults.max_subscriptions})")
    limits.add_argument("--compression", choices=("auto", "deflate", "none"), default="auto",
                        help="WebSocket permessage-deflate with clients that offer it "
                        "(default auto: none on a loopback address, deflate elsewhere)")
    limits.add_argument("--max-reconnects-per-minute", type=positive_int,
                        default=defaults.max_reconnects_per_minute, metavar="N",
                        help="reconnect requests one connection may send per minute "
                        f"(default {defaults.max_reconnects_per_minute})")
    limits.add_argument("--max-sessions", type=positive_int, default=defaults.max_sessions,
                        metavar="N", help="sessions the host keeps, stored ones included "
                        f"(default {defaults.max_sessions}); createSession beyond it is "
                        "refused until sessions are disposed of")
    limits.add_argument("--max-chats-per-session", type=positive_int,
                        default=defaults.max_chats_per_session, metavar="N",
                        help=f"chats one session may have (default "
                        f"{defaults.max_chats_per_session})")
    files = serve.add_argument_group(
        "files (docs/files.md)",
        "Clients read, list and watch the host's files under the roots (resourceRead, "
        "resourceList, resourceResolve, createResourceWatch), and change them in writable "
        "roots only; nothing outside a root is reached, through a symbolic link or "
        "otherwise.")
    files.add_argument("--root", action="append", default=[], metavar="DIR[:rw]",
                       help="serve the files under DIR, read-only, or writable with :rw "
                       "(repeatable; default: the working directory, read-only)")
    files.add_argument("--max-watches", type=positive_int, default=defaults.max_watches,
                       metavar="N", help="file watches the host keeps at once, every client "
                       f"together (default {defaults.max_watches})")
    terminals = serve.add_argument_group(
        "terminals (docs/terminals.md)",
        "Clients may open terminals: the user's shell in a pseudo-terminal, started in the "
        "directories served; bash and zsh report each command (command detection).")
    terminals.add_argument("--no-terminals", action="store_true",
                           help="serve no terminals (createTerminal is refused, and an "
                           "agent's turn.run fails)")
    terminals.add_argument("--shell", metavar="COMMAND",
                           help="what a terminal runs, split as a shell would (default: "
                           "$SHELL, else the user's login shell)")
    terminals.add_argument("--max-terminals", type=positive_int,
                           default=defaults.max_terminals, metavar="N",
                           help=f"terminals listed at once, exited ones until disposed (default "
                           f"{defaults.max_terminals})")
    serve.add_argument("--agent", type=agent_choice, default="demo",
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
    max_sessions = 10_000
    max_chats_per_session = 256
    max_watches = 64
    max_terminals = 64


def _read_token(args: argparse.Namespace, parser: argparse.ArgumentParser) -> str | None:
    """The token asked for: ``--token-file``, else ``AHP_TOKEN``, else ``None`` (the saved
    one, made on the first run)."""
    if args.new_token:
        if args.no_token:
            parser.error("--new-token and --no-token contradict each other")
        if args.token_file is not None:
            parser.error("--new-token and --token-file contradict each other: the token "
                         "file's token would be served, not the new one")
        if args.stdio:
            parser.error("--new-token with --stdio: a stdio host uses no token")
        if os.environ.get("AHP_TOKEN", "").strip():
            parser.error("--new-token: AHP_TOKEN is set, and it would be served instead of "
                         "the new token; unset AHP_TOKEN first")
        return None
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


def _roots(specs: list[str], parser: argparse.ArgumentParser) -> tuple[Root, ...] | None:
    """``--root`` values as roots (``None``: none given, the default); a usage error for a
    directory that does not exist."""
    if not specs:
        return None
    from ..aio.files import parse_root  # noqa: PLC0415

    roots = []
    for spec in specs:
        try:
            root = parse_root(spec)
        except ValueError as e:
            parser.error(f"--root {spec}: {e}")
        if not os.path.isdir(root.path):
            parser.error(f"--root {spec}: {root.path} is not a directory")
        roots.append(root)
    return tuple(roots)


def serve_command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
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
        from ..agent.run import load_agent  # noqa: PLC0415

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
    from ..agent.hosting import ServeOptions, run  # noqa: PLC0415
    from ..aio.access import is_loopback  # noqa: PLC0415
    from ..aio.server import ServerLimits  # noqa: PLC0415

    if args.no_token and not args.stdio and not is_loopback(args.host):
        parser.error(f"--no-token is refused for --host {args.host}: only a loopback "
                     "address may be served without a token")
    if args.keyfile is not None and args.certfile is None:
        parser.error("--keyfile needs --certfile")
    if not args.close_timeout <= 3600:
        parser.error("--close-timeout: at most 3600 seconds")
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
            max_sessions=args.max_sessions,
            max_chats_per_session=args.max_chats_per_session,
            max_terminals=args.max_terminals,
            compression=args.compression,
            max_watches=args.max_watches,
        ),
        roots=_roots(args.root, parser),
        agent=args.agent if agent_object is None else "demo",
        agent_object=agent_object,
        agent_command=tuple(command),
        token=token,
        no_token=args.no_token,
        new_token=args.new_token,
        allowed_origins=tuple(args.allow_origin),
        allowed_hosts=tuple(args.allow_host),
        certfile=args.certfile,
        keyfile=args.keyfile,
        store=args.store,
        no_store=args.no_store,
        max_store_bytes=args.max_store_bytes,
        capture=args.capture,
        close_timeout=args.close_timeout,
        no_terminals=args.no_terminals,
        shell=_shell_words(args.shell, parser),
    )
    return run(options)


def _shell_words(shell: str | None, parser: argparse.ArgumentParser) -> tuple[str, ...]:
    if shell is None:
        return ()
    import shlex  # noqa: PLC0415

    try:
        words = tuple(shlex.split(shell))
    except ValueError as e:
        parser.error(f"--shell: {e}")
    if not words:
        parser.error("--shell: empty")
    return words
