"""A browser page with the web client's ES modules loaded, for testing them in Chromium.

The page's origin is ``http://ahp.test``, served by Playwright's request
routing from the package's ``web/`` directory (so a module is loaded exactly
as the browser loads it from the host); every other request is refused, so
nothing reaches the network.  A test module names the fixtures (assigned,
not imported, so that the tests' parameters of the same names do not read as
redefinitions)::

    from . import _browser, _web_modules

    browser = _browser.browser
    module_page = _web_modules.module_page

and ``module_page.evaluate(...)`` with ``await import("/ahp/reducers.js")``.
The values crossing into the page go as JSON text (``JSON.parse`` there),
so the page sees exactly what it would read off the WebSocket.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page, Route

ORIGIN = "http://ahp.test"
WEB = Path(str(resources.files("agenthost_protocol") / "web"))
_BLANK = "<!doctype html><meta charset=utf-8><title>module tests</title>"
_TYPES = {".js": "text/javascript", ".html": "text/html", ".css": "text/css"}


def _serve(route: Route) -> None:
    path = route.request.url[len(ORIGIN):].split("?", 1)[0].split("#", 1)[0]
    if path in ("", "/__modules__.html"):
        route.fulfill(status=200, content_type="text/html", body=_BLANK)
        return
    target = (WEB / path.lstrip("/")).resolve()
    if WEB.resolve() not in target.parents or not target.is_file():
        route.fulfill(status=404, body="not found")
        return
    route.fulfill(
        status=200,
        content_type=_TYPES.get(target.suffix, "application/octet-stream"),
        body=target.read_bytes(),
    )


@pytest.fixture(scope="module")
def module_page(browser: Browser) -> Iterator[Page]:
    """A page of origin ``http://ahp.test`` that can ``import()`` the web modules."""
    context = browser.new_context()
    try:
        # routes registered later are tried first: everything not ours is refused
        context.route("**/*", lambda route: route.abort())
        context.route(f"{ORIGIN}/**", _serve)
        page = context.new_page()
        page.goto(f"{ORIGIN}/__modules__.html")
        yield page
    finally:
        context.close()


_SAFE = 2**53


def canonical(value: Any) -> str:
    """``value`` as comparable JSON text: keys sorted, numbers as ``JSON.parse`` reads them.

    JavaScript has one number type: an integral float is an integer, and an
    integer beyond 2**53 is the nearest double.  ``true`` stays distinct from
    ``1`` (which Python's ``==`` would not keep apart).
    """
    return json.dumps(_numbers(value), sort_keys=True, ensure_ascii=False)


def _numbers(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value if -_SAFE <= value <= _SAFE else int(float(value))
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and value.is_integer() else value
    if isinstance(value, dict):
        return {key: _numbers(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_numbers(item) for item in value]
    raise TypeError(f"not a JSON value: {type(value).__name__}")
