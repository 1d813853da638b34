"""Argument types and choices shared by the commands' parsers (no asyncio: ``--help``
must stay fast)."""

from __future__ import annotations

import argparse

__all__ = [
    "AGENTS",
    "LOG_LEVELS",
    "add_host_arguments",
    "agent_choice",
    "positive_int",
    "positive_seconds",
    "seconds",
]

LOG_LEVELS = ("debug", "info", "warning", "error")


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def byte_size(text: str) -> int:
    """A positive number of bytes: ``1048576``, ``512K``, ``64M``, ``1G`` (binary units;
    a trailing ``B`` or ``iB`` is allowed: ``64MiB``)."""
    body = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = body[-1:] if body[-1:] in _UNITS else ""
    try:
        value = int(body[:len(body) - len(unit)]) * _UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text} is not a size in bytes (e.g. 512M, 2G)") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive size")
    return value


def seconds(text: str) -> float:
    value = float(text)
    if not value >= 0:  # NaN too
        raise argparse.ArgumentTypeError(f"{text} is not a number of seconds")
    return value


def positive_seconds(text: str) -> float:
    value = seconds(text)
    if value == 0:
        raise argparse.ArgumentTypeError("a timeout of 0 seconds would time out at once")
    return value


AGENTS = ("demo", "acp", "pi", "xcsh")


def agent_choice(text: str) -> str:
    if text in AGENTS or ":" in text:
        return text
    raise argparse.ArgumentTypeError(
        f"invalid choice: {text!r} (choose from {', '.join(AGENTS)}, or MODULE:ATTR)")


def add_host_arguments(parser: argparse.ArgumentParser, *, timeout_help: str) -> None:
    """The arguments of a command that talks to a host (``chat``, ``sessions``): its
    URL (or, with ``--stdio``, a command to spawn) and the ``--timeout`` of a wait."""
    parser.add_argument("target", metavar="URL",
                        help="the host's ws:// or wss:// URL (with --stdio: a command to run)")
    parser.add_argument("--stdio", action="store_true",
                        help="URL is a command line: spawn it and speak JSON Lines on its "
                        "stdin/stdout (e.g. \"agenthost-protocol serve --stdio\")")
    parser.add_argument("--timeout", type=positive_seconds, default=30.0, metavar="SECONDS",
                        help=timeout_help)
