"""Runnable benchmark scripts (not collected by pytest); see ``docs/performance.md``."""
