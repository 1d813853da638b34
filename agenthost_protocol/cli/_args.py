"""Argument types and choices shared by the commands' parsers (no asyncio: ``--help``
must stay fast)."""

from __future__ import annotations

import argparse

__all__ = ["AGENTS", "LOG_LEVELS", "agent_choice", "positive_int", "positive_seconds", "seconds"]

LOG_LEVELS = ("debug", "info", "warning", "error")


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
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
