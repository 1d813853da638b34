"""Dispatching what an agent produced: repaired when it cannot be encoded, never fatal.

An agent is a peer like any other: a JavaScript agent that cuts a string
inside an emoji sends a lone surrogate (``"\\ud83d"``), a model's number may
be NaN, and both decoders on the way (pi's line reader, the ACP SDK's
``json.loads``) let such values through.  :meth:`Host.dispatch` refuses
them without changing anything; here the value is repaired
(:func:`~agenthost_protocol.wire.repair`: U+FFFD, non-finite numbers
dropped), logged, and dispatched; what cannot be repaired is logged and
dropped, and the host goes on.  Tool outputs over the host's inline limit
are stored and referenced (``resourceRead``), so that no chat outgrows what
a client can open.

Texts the layer sends on an agent's behalf from an exception (a failed
turn's ``chat/error``, a failed session, a resume refused) are made
sendable first by :func:`error_text`: repaired, and cut to
:data:`ERROR_TEXT_LIMIT` bytes with a visible note, so that a turn always
ends, whatever the exception says.
"""

from __future__ import annotations

import logging
from typing import Final

from .. import types as t
from .. import wire
from ..errors import LocalProtocolError
from ..host import Host

__all__ = [
    "ERROR_TEXT_LIMIT", "bounded_text", "dispatch_agent_action", "error_name", "error_text",
]

ERROR_TEXT_LIMIT: Final = 4096
"""The most UTF-8 bytes of an error text the layer sends (``chat/error``,
``session/creationFailed``, a tool call's error ...); a longer one is cut, and
says so."""
_NAME_LIMIT: Final = 200
"""The most characters of an ``errorType`` taken from the agent."""


def bounded_text(text: str, limit: int = ERROR_TEXT_LIMIT) -> str:
    """``text`` made sendable: every lone surrogate replaced by U+FFFD, and cut to at
    most ``limit`` UTF-8 bytes (on a character boundary) followed by a note that
    says how long it was, when it was longer."""
    text = wire.repair(text)[0]
    if len(text) * 4 <= limit:
        return text  # no character takes more than 4 bytes: fits as it is
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    note = f" \u2026 [cut: the text was {len(data):,} bytes]"
    head = data[: max(0, limit - len(note.encode("utf-8")))]
    return head.decode("utf-8", errors="ignore") + note


def error_text(e: BaseException) -> str:
    """What the layer says of exception ``e``: its text (its type's name when it has
    none, or when its ``__str__`` fails), made sendable by :func:`bounded_text`."""
    try:
        text = str(e)
    except Exception:  # the agent's own exception class: its __str__ may fail too
        text = ""
    return bounded_text(text or type(e).__name__)


def error_name(name: str) -> str:
    """An ``errorType`` the agent chose, made sendable (repaired, at most 200 characters)."""
    name = wire.repair(name)[0]
    return name if len(name) <= _NAME_LIMIT else name[: _NAME_LIMIT - 1] + "\u2026"


def dispatch_agent_action(
    host: Host, channel: str, action: t.StateAction, log: logging.Logger
) -> t.ActionEnvelope | None:
    """``host.dispatch(channel, action)``, with large tool results stored and sent by
    reference (:meth:`Host.by_reference`) and an unencodable agent value repaired;
    ``None`` when even the repaired action could not be dispatched (logged)."""
    action = host.by_reference(action, channel)
    try:
        return host.dispatch(channel, action)
    except LocalProtocolError as e:
        first = e  # what is said when nothing can be repaired (too large, say)
        repaired, notes = wire.repair(action)
        if notes:
            log.warning("the agent sent a %s on %s that is not valid JSON; repaired: %s",
                        action.type, channel, "; ".join(notes))
            try:
                return host.dispatch(channel, repaired)
            except LocalProtocolError as again:
                first = again
        log.error("dropped the agent's %s on %s: %s", action.type, channel, first)
        return None
