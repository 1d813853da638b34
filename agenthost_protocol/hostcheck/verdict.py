"""Every property, and :func:`check`: a transcript in, each property's violations out."""

from __future__ import annotations

from attrs import evolve

from .properties import CONNECTION_PROPERTIES, Property, Violation
from .state import RUN_PROPERTIES
from .transcript import Transcript

__all__ = ["PROPERTIES", "check"]

PROPERTIES: tuple[Property, ...] = CONNECTION_PROPERTIES + RUN_PROPERTIES
"""The properties, in the order they are reported."""


def check(transcript: Transcript,
          properties: tuple[Property, ...] = PROPERTIES) -> dict[str, tuple[Violation, ...]]:
    """Every property's violations in ``transcript`` (an empty tuple: it holds).

    A property of one connection is checked on each connection's records
    (``Record.conn``) on their own; its violations still count records of the
    whole transcript."""
    connections = transcript.connections()
    found: dict[str, tuple[Violation, ...]] = {}
    for prop in properties:
        if prop.across:
            found[prop.name] = tuple(prop.check(transcript))
            continue
        violations = []
        for indices in connections.values():
            one = transcript if len(connections) == 1 else transcript.only(indices)
            violations += [evolve(v, index=indices[v.index]) for v in prop.check(one)]
        found[prop.name] = tuple(sorted(violations, key=lambda v: v.index))
    return found
