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
"""

from __future__ import annotations

import logging

from .. import types as t
from .. import wire
from ..errors import LocalProtocolError
from ..host import Host

__all__ = ["dispatch_agent_action"]


def dispatch_agent_action(
    host: Host, channel: str, action: t.StateAction, log: logging.Logger
) -> t.ActionEnvelope | None:
    """``host.dispatch(channel, action)``, with large tool results stored and sent by
    reference (:meth:`Host.by_reference`) and an unencodable agent value repaired;
    ``None`` when even the repaired action could not be dispatched (logged)."""
    action = host.by_reference(action, channel)
    try:
        return host.dispatch(channel, action)
    except LocalProtocolError:
        repaired, notes = wire.repair(action)
        if notes:
            log.warning("the agent sent a %s on %s that is not valid JSON; repaired: %s",
                        action.type, channel, "; ".join(notes))
            try:
                return host.dispatch(channel, repaired)
            except LocalProtocolError as e:
                first = e
        log.error("dropped the agent's %s on %s: %s", action.type, channel, first)
        return None
