"""The library's own version (distinct from the AHP protocol version)."""

__version__ = "0.1.0.dev0"
