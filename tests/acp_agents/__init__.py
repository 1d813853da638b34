"""Test fixtures of the ACP bridge: a host harness and a scripted ACP agent (SDK agent side)."""
