"""The ``check-host`` and ``check-traffic`` commands (``docs/conformance.md``).

Both print one line per property (``ok`` or ``FAIL``, its name, the section
of the AHP specification, and for a failure where and what), then ``N passed,
M failed``.  ``check-host`` first says that it creates sessions on the host
(and disposes of them), and after the results prints the shrunk failing
transcript, JSON Lines that ``check-host --replay FILE`` runs again and
``check-traffic FILE`` checks.

Exit status: 0 every property held; 1 one failed; 2 the command could not
run (usage, an unreadable file, a host it cannot reach or that refused the
handshake, a missing extra); 130 interrupted (SIGINT or SIGTERM), after
disposing of the sessions it created.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import IO, TYPE_CHECKING

from .._json import lone_surrogate_at
from .terminal import safe_json, safe_text

if TYPE_CHECKING:
    from ..hostcheck.driver import Cleanup, Target
    from ..hostcheck.machine import Outcome
    from ..hostcheck.properties import Violation
    from ..hostcheck.transcript import Transcript

# The model (wire, reducers) loads only when a command runs: `--help` needs none of it.

__all__ = ["add_parsers", "check_host_command", "check_traffic_command"]

_SHOWN = 3
"""Violations printed a property (all of them go to --report)."""
EXIT_INTERRUPTED = 130
TOKEN_ENV = "AHP_TOKEN"


def _say(text: str, *, file: IO[str], flush: bool = False) -> None:
    """``print``, with the controls a host (or a file) may have put in ``text`` escaped
    (:func:`~agenthost_protocol.cli.terminal.safe_text`): violations, the host's error
    texts, paths.  A lone surrogate, which no encoding writes, is shown as ``\\udXXX``."""
    text = safe_text(text)
    if lone_surrogate_at(text) >= 0:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    print(text, file=file, flush=flush)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError("must be a positive number of seconds")
    return value


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``check-host`` and ``check-traffic`` to the ``agenthost-protocol`` parser."""
    host = sub.add_parser(
        "check-host", help="property-based conformance test of a live AHP host",
        description="Drive a live AHP host with 1-4 generated clients of the supported "
        "versions (a hypothesis state machine) and check the spec's rules on the traffic. "
        "It creates sessions on the host (check-host-...) and disposes of them after each "
        "example, and at the end also when it fails or is interrupted; sessions it did not "
        "create are never touched. One line per property, then 'N passed, M failed'; a "
        "failure prints the shrunk transcript, which --replay runs again. Exit status 0 "
        "passed, 1 failed, 2 could not run (a refused token or Origin/Host included), 130 "
        "interrupted. Needs the testing extra (and ws for a URL). See docs/conformance.md.")
    host.add_argument("url", nargs="?", help="ws:// or wss:// URL of the host (the one serve "
                      "prints carries its token, which is sent in the Authorization header)")
    host.add_argument("--stdio", metavar="CMD", help="instead of a URL: start CMD, a host "
                      "that speaks JSON Lines on stdin/stdout (one connection per process)")
    token = host.add_mutually_exclusive_group()
    token.add_argument("--token-file", metavar="PATH", help="read the access token from PATH "
                       "(its first line). The token is this, or --token, else the URL's "
                       "token=, else AHP_TOKEN from the environment")
    token.add_argument("--token", help="the access token (visible to other users in the "
                       "process list: prefer --token-file or AHP_TOKEN)")
    host.add_argument("--examples", type=_positive, default=100,
                      help="examples to generate (default 100)")
    host.add_argument("--steps", type=_positive, default=30,
                      help="steps per example (default 30)")
    host.add_argument("--seed", type=int, default=None, help="hypothesis seed (repeatable runs)")
    host.add_argument("--timeout", type=_seconds, default=5.0,
                      help="seconds to wait for an answer (default 5)")
    host.add_argument("--shrink-time", type=_seconds, default=60.0,
                      help="seconds to spend shrinking a failing example (default 60)")
    host.add_argument("--max-traffic", metavar="MIB", type=_positive, default=128,
                      help="the most MiB of messages one example records (default 128): a "
                      "host that sends more ends the run (exit 2)")
    host.add_argument("--report", metavar="FILE", help="also write the results and the "
                      "failing transcript to FILE (JSON Lines)")
    host.add_argument("--replay", metavar="FILE", help="run the program of a transcript "
                      "check-host wrote, once, instead of generating examples")
    traffic = sub.add_parser(
        "check-traffic", help="check a recorded AHP session (JSON Lines) offline",
        description="Check the properties check-host checks on a recorded transcript: "
        "one client's capture (serve --capture DIR writes them) or a check-host report.")
    traffic.add_argument("file", help="the transcript (JSON Lines)")
    traffic.add_argument("--report", metavar="FILE", help="also write the results to FILE")


def _lines(found: dict[str, tuple[Violation, ...]]) -> Iterator[str]:
    from ..hostcheck.verdict import PROPERTIES  # noqa: PLC0415

    for prop in PROPERTIES:
        violations = found.get(prop.name, ())
        if not violations:
            yield f"ok   {prop.name} (AHP spec, {prop.section})"
            continue
        yield f"FAIL {prop.name} (AHP spec, {prop.section}): {len(violations)} violation(s)"
        for violation in violations[:_SHOWN]:
            yield f"     message {violation.index}: {safe_text(violation.message)}"


def _summary(found: dict[str, tuple[Violation, ...]]) -> tuple[int, int]:
    from ..hostcheck.verdict import PROPERTIES  # noqa: PLC0415

    failed = sum(1 for prop in PROPERTIES if found.get(prop.name))
    return len(PROPERTIES) - failed, failed


def _results(found: dict[str, tuple[Violation, ...]], **extra: object) -> str:
    from ..hostcheck.verdict import PROPERTIES  # noqa: PLC0415

    return json.dumps({"report": {**extra, "properties": [
        {"name": p.name, "section": p.section, "passed": not found.get(p.name),
         "violations": [{"index": v.index, "message": v.message}
                        for v in found.get(p.name, ())]} for p in PROPERTIES]}})


def program_lines(steps: Sequence[object], transcript: Transcript) -> Iterator[str]:
    """A run as JSON Lines: its program (``{"step": ...}``), then its messages."""
    for step in steps:
        yield json.dumps({"step": step}, separators=(",", ":"), ensure_ascii=False)
    yield from transcript.to_lines()


def _read_lines(path: str, err: IO[str]) -> list[str] | None:
    """The lines of a transcript file, each bounded (``None``: said on ``err``)."""
    from ..hostcheck.transcript import TranscriptError, read_lines  # noqa: PLC0415

    try:
        with open(path, "rb") as f:
            return list(read_lines(f))
    except (OSError, UnicodeDecodeError) as e:
        _say(f"agenthost-protocol: cannot read {path}: {e}", file=err)
        return None
    except TranscriptError as e:
        _say(f"agenthost-protocol: {path}: {e}", file=err)
        return None


def _write(path: str, lines: Iterator[str], err: IO[str]) -> bool:
    try:
        # a lone surrogate (a host's "\ud800") can only be in a JSON string, where
        # backslashreplace writes it as the same JSON escape
        with open(path, "w", encoding="utf-8", errors="backslashreplace") as f:
            f.writelines(line + "\n" for line in lines)
    except OSError as e:
        _say(f"agenthost-protocol: cannot write {path}: {e}", file=err)
        return False
    return True


def _program(lines: list[str]) -> list[dict[str, object]]:
    from ..hostcheck.transcript import TranscriptError  # noqa: PLC0415

    steps = []
    for number, line in enumerate(lines, 1):
        try:
            raw = json.loads(line) if line.strip() else None
        except ValueError as e:
            raise TranscriptError(number, f"not JSON: {e}") from None
        if isinstance(raw, dict) and set(raw) == {"step"}:
            if not isinstance(raw["step"], dict):
                raise TranscriptError(number, "a step is a JSON object")
            steps.append(raw["step"])
    return steps


class _Usage(Exception):
    """A command line that cannot run (exit 2)."""


def _flag_token(args: argparse.Namespace) -> str | None:
    """The token ``--token-file`` or ``--token`` gives (``None``: neither)."""
    if args.token_file is not None:
        try:
            with open(args.token_file, encoding="utf-8") as f:
                token = f.readline().strip()
        except (OSError, UnicodeDecodeError) as e:
            raise _Usage(f"cannot read the token file {args.token_file}: {e}") from None
        if not token:
            raise _Usage(f"the token file {args.token_file} is empty")
        return token
    token = args.token
    return token if type(token) is str else None


def _token(args: argparse.Namespace) -> str | None:
    """The access token for the URL: ``--token-file`` or ``--token``; else the URL's
    own ``token=`` (``None`` here: the URL carries it); else ``AHP_TOKEN``."""
    from ..hostcheck.driver import header_safe, url_token  # noqa: PLC0415

    flag = _flag_token(args)
    if flag is not None:
        if not header_safe(flag):
            source = args.token_file or "--token"
            raise _Usage(f"the token of {source} is not a valid access token (visible "
                         "ASCII characters only)")
        return flag
    if url_token(args.url)[1] is not None:
        return None
    env = os.environ.get(TOKEN_ENV, "").strip()
    if not env:
        return None
    if not header_safe(env):
        raise _Usage(f"{TOKEN_ENV} is not a valid access token (visible ASCII characters "
                     "only)")
    return env


def _where(args: argparse.Namespace) -> str:
    """The host, as the first line names it (never with its token)."""
    from ..hostcheck.driver import url_token  # noqa: PLC0415

    if args.url is None:
        return f"the host '{args.stdio}' starts"
    import urllib.parse  # noqa: PLC0415

    url = url_token(args.url)[0]
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return url
    # nor with the password of a user:password@ part
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2])) \
        if "@" in parts.netloc else url


def _undisposed(cleanup: Cleanup, out: IO[str]) -> None:
    """Say which sessions the run created and could not dispose of."""
    if not cleanup.pending:
        return
    _say(f"check-host could not dispose of {len(cleanup.pending)} of the "
          f"{cleanup.created} session(s) it created (the host went away, or would not):",
          file=out)
    for session in cleanup.pending:
        why = cleanup.refused.get(session)
        _say(f"  {session}" + (f" (refused: {why})" if why else ""), file=out)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # SIGTERM stops a run as Ctrl-C does: the sessions go first


def check_host_command(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """``agenthost-protocol check-host``."""
    if (args.url is None) == (args.stdio is None):
        _say("agenthost-protocol check-host: give a URL or --stdio CMD (one of them)",
              file=err)
        return 2
    if args.stdio is not None and (args.token is not None or args.token_file is not None):
        _say("agenthost-protocol check-host: --token and --token-file are for a URL (a "
              "--stdio host is not asked for one)", file=err)
        return 2
    try:
        from ..hostcheck.driver import Cleanup, StdioTarget, WebSocketTarget  # noqa: PLC0415
        from ..hostcheck.transcript import TranscriptError  # noqa: PLC0415
        if args.url is not None:
            import websockets  # noqa: F401, PLC0415 (say now that the extra is missing)
        from ..hostcheck.machine import check_host  # noqa: PLC0415, F401 (hypothesis)
    except ImportError as e:
        _say(f"agenthost-protocol check-host: {e.name} is missing: pip install "
              "'agenthost-protocol[testing,ws]'", file=err)
        return 2
    target: Target
    try:
        target = (WebSocketTarget(url=args.url, token=_token(args), timeout=args.timeout)
                  if args.url is not None else StdioTarget(command=args.stdio))
    except _Usage as e:
        _say(f"agenthost-protocol check-host: {e}", file=err)
        return 2
    program: list[dict[str, object]] | None = None
    if args.replay is not None:
        lines = _read_lines(args.replay, err)
        if lines is None:
            return 2
        try:
            program = _program(lines)
        except TranscriptError as e:
            _say(f"agenthost-protocol check-host: {args.replay}: {e}", file=err)
            return 2
    _say(f"check-host creates sessions on {_where(args)} and disposes of them when it "
          "ends (only those it created)", file=out, flush=True)
    cleanup = Cleanup(target, timeout=args.timeout)
    # SIGTERM as Ctrl-C: a run stopped either way disposes of its sessions first
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if main_thread else None
    try:
        return _check_host(args, target, program, cleanup, out=out, err=err)
    except KeyboardInterrupt:
        # a second Ctrl-C stops the last disposal: what it had not done is listed
        if cleanup.pending:
            _say("check-host: interrupted", file=out, flush=True)
            _undisposed(cleanup, out)
        else:
            _say(f"check-host: interrupted; the {cleanup.created} session(s) it created "
                  "are disposed of", file=out, flush=True)
        return EXIT_INTERRUPTED
    finally:
        if previous is not None:  # None: a handler not set from Python, left as it was
            signal.signal(signal.SIGTERM, previous)


def _check_host(args: argparse.Namespace, target: Target, program: list[dict[str, object]]
                | None, cleanup: Cleanup, *, out: IO[str], err: IO[str]) -> int:
    from ..hostcheck.driver import TrafficLimit  # noqa: PLC0415
    from ..hostcheck.machine import check_host, replay  # noqa: PLC0415

    outcome: Outcome
    if program is not None:
        try:
            outcome = replay(target, program, timeout=args.timeout, cleanup=cleanup,
                             budget=args.max_traffic * 1024 * 1024)
        except (ConnectionError, OSError, TrafficLimit) as e:
            _say(f"agenthost-protocol check-host: {e}", file=err)
            _undisposed(cleanup, out)
            return 2
    else:
        outcome = check_host(target, examples=args.examples, steps=args.steps,
                             seed=args.seed, timeout=args.timeout,
                             shrink_budget=args.shrink_time, cleanup=cleanup,
                             budget=args.max_traffic * 1024 * 1024)
        if outcome.error is not None and not outcome.failed:
            _say(f"agenthost-protocol check-host: {outcome.error}", file=err)
            _undisposed(cleanup, out)
            return 2
    for line in _lines(outcome.violations):
        _say(line, file=out)
    passed, failed = _summary(outcome.violations)
    _say(f"{passed} passed, {failed} failed ({outcome.examples} example(s), "
          f"{outcome.seconds:.1f} s)", file=out)
    if failed:
        _say(f"shrunk transcript: {len(outcome.steps)} steps, {len(outcome.transcript)} "
              "messages (check-host --replay FILE runs it again):", file=out)
        for line in program_lines(outcome.steps, outcome.transcript):
            # JSON escapes, not safe_text's: the lines stay JSON that --replay reads
            print(safe_json(line), file=out)
    _undisposed(cleanup, out)
    if args.report is not None:
        head = _results(outcome.violations, examples=outcome.examples,
                        seconds=round(outcome.seconds, 3), seed=args.seed,
                        sessions_created=outcome.created,
                        sessions_undisposed=list(outcome.undisposed))
        body = program_lines(outcome.steps, outcome.transcript) if failed else iter(())
        if not _write(args.report, iter([head, *body]), err):
            return 2
    return 1 if failed else 0


def check_traffic_command(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """``agenthost-protocol check-traffic``."""
    from ..hostcheck.transcript import Transcript, TranscriptError, read_lines  # noqa: PLC0415
    from ..hostcheck.verdict import check  # noqa: PLC0415

    try:
        # read a line at a time, each bounded: a capture can be large, and one line
        # of gigabytes is refused before it is read whole
        with open(args.file, "rb") as f:
            transcript = Transcript.from_lines(read_lines(f))
    except (OSError, UnicodeDecodeError) as e:
        _say(f"agenthost-protocol: cannot read {args.file}: {e}", file=err)
        return 2
    except TranscriptError as e:
        _say(f"agenthost-protocol check-traffic: {args.file}: {e}", file=err)
        return 2
    found = check(transcript)
    for line in _lines(found):
        _say(line, file=out)
    passed, failed = _summary(found)
    _say(f"{passed} passed, {failed} failed ({len(transcript)} messages)", file=out)
    if args.report is not None and not _write(args.report, iter([_results(found)]), err):
        return 2
    return 1 if failed else 0
