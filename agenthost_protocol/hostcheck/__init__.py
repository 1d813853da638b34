"""Conformance checks of an AHP *host*, from what one client sent and received.

Issue 22 builds ``agenthost-protocol check-host URL`` (a live host driven by
generated clients) and ``check-traffic FILE`` (a recorded session) on one
core: a :class:`~agenthost_protocol.hostcheck.transcript.Transcript` of one
connection, both directions in order, and the properties in
:mod:`~agenthost_protocol.hostcheck.properties`, each a pure function of a
transcript that names the spec section it checks.  Nothing here does I/O.
"""

from __future__ import annotations

from .properties import Property, Violation
from .transcript import Direction, Record, Transcript, TranscriptError
from .verdict import PROPERTIES, check

__all__ = [
    "PROPERTIES", "Direction", "Property", "Record", "Transcript", "TranscriptError", "Violation",
    "check",
]
