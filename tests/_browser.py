"""Headless Chromium from the system's packages (Debian's ``chromium``), driven by Playwright.

No test downloads a browser: Playwright is pointed at the system's executable
(``AHP_CHROMIUM`` names another).  Where none is installed the browser tests
are skipped with the reason, except when ``AHP_REQUIRE_BROWSER`` is set (CI
sets it, after installing the package): then its absence fails them.

A test module uses the ``browser`` fixture by importing it::

    from ._browser import browser  # noqa: F401  (a fixture)
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Browser

CANDIDATES = ("chromium", "chromium-browser")
"""The names Debian and Ubuntu give the browser's executable."""

FLAGS = (
    # the sandbox needs user namespaces, which CI containers (run as root) lack
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    # the machine's network is closed: without these, Chromium keeps trying to reach
    # Google's services, and many refused connections slow every start
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
)
"""The switches every test browser starts with."""


def chromium_path() -> str | None:
    """The Chromium executable to drive, or ``None`` when none is installed."""
    named = os.environ.get("AHP_CHROMIUM")
    if named:
        return named if os.access(named, os.X_OK) else None
    for name in CANDIDATES:
        found = shutil.which(name)
        if found is not None:
            return found
    return None


def require_chromium() -> str:
    """The executable, else the test is skipped (or fails under ``AHP_REQUIRE_BROWSER``)."""
    path = chromium_path()
    if path is None:
        why = ("no Chromium installed (Debian: apt-get install chromium; or set AHP_CHROMIUM "
               "to its executable)")
        if os.environ.get("AHP_REQUIRE_BROWSER"):
            pytest.fail(why + ", and AHP_REQUIRE_BROWSER is set")
        pytest.skip(why)
    try:
        import playwright  # noqa: F401
    except ImportError:
        why = "Playwright is not installed (pip install -e '.[dev]')"
        if os.environ.get("AHP_REQUIRE_BROWSER"):
            pytest.fail(why + ", and AHP_REQUIRE_BROWSER is set")
        pytest.skip(why)
    return path


# Module scope: while Playwright's sync API runs, its event loop is the thread's
# running loop, so asyncio.run() fails in every test after it in the same process
# (pytest-xdist interleaves modules on a worker): the browser is closed when its
# module's tests are done.  Each test module that imports the fixture holds its own
# definition of it; Playwright's sync API allows one running instance per thread, so
# a module that asks while another one's is open shares it, and the last to finish
# closes it.
_shared: dict[str, Any] = {"users": 0}


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One headless Chromium per test module (each test opens its own context)."""
    executable = require_chromium()
    if not _shared["users"]:
        from playwright.sync_api import sync_playwright

        manager = sync_playwright()
        playwright = manager.start()
        try:
            launched = playwright.chromium.launch(
                executable_path=executable, args=list(FLAGS), headless=True
            )
        except BaseException:
            manager.__exit__(None, None, None)
            raise
        _shared.update(manager=manager, browser=launched)
    _shared["users"] += 1
    try:
        yield _shared["browser"]
    finally:
        _shared["users"] -= 1
        if not _shared["users"]:
            try:
                _shared["browser"].close()
            finally:
                _shared.pop("manager").__exit__(None, None, None)
                _shared.pop("browser")
