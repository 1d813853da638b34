"""Built-in agents, written on the agent layer (:mod:`agenthost_protocol.agent`).

* :mod:`agenthost_protocol.agents.demo`: the deterministic demo agent of
  ``agenthost-protocol serve`` (see ``docs/serve.md``).
"""

from __future__ import annotations

from .demo import (
    DEMO_MODEL,
    DEMO_PROVIDER,
    DemoAgent,
    demo_agent_info,
    demo_root_state,
)

__all__ = [
    "DEMO_MODEL",
    "DEMO_PROVIDER",
    "DemoAgent",
    "demo_agent_info",
    "demo_root_state",
]
