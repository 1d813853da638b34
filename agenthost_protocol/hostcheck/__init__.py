"""Conformance checks of an AHP *host*, from the traffic its clients exchange with it.

``agenthost-protocol check-host URL`` (a live host driven by generated
clients) and ``check-traffic FILE`` (a recorded session) share one core: a
:class:`~agenthost_protocol.hostcheck.transcript.Transcript` of one or more
connections, both directions in order, and the properties in
:mod:`~agenthost_protocol.hostcheck.properties` (one connection) and
:mod:`~agenthost_protocol.hostcheck.state` (the host's state, across
connections), each a pure function of a transcript that names the spec
section it checks.  Those modules do no I/O; :mod:`.driver` and
:mod:`.machine` (the live runs) do.

The names below load on first use, so that the commands that do not check a
host (``serve``, ``chat``) start without building the model.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .properties import Property, Violation
    from .transcript import Direction, Record, Transcript, TranscriptError
    from .verdict import PROPERTIES, check

__all__ = [
    "PROPERTIES", "Direction", "Property", "Record", "Transcript", "TranscriptError", "Violation",
    "check",
]

_HOME = {
    "PROPERTIES": ".verdict", "check": ".verdict", "Property": ".properties",
    "Violation": ".properties", "Direction": ".transcript", "Record": ".transcript",
    "Transcript": ".transcript", "TranscriptError": ".transcript",
}


def __getattr__(name: str) -> object:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(home, __name__), name)
