"""Runnable examples (CI runs each one; see examples/README.md)."""
