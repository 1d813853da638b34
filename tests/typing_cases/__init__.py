"""Source files type-checked by ``tests/test_typing_exhaustive.py``; never imported or run.

Project-wide mypy ignores this package (see ``[tool.mypy]`` overrides); the
test checks each file on its own.
"""
