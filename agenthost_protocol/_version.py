"""The library's own version (distinct from the AHP protocol version)."""

__version__ = "0.2.0.dev0"
