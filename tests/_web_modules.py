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
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import pytest
from hypothesis import strategies as st

from agenthost_protocol import types as t

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page, Route

ORIGIN = "http://ahp.test"
WEB = Path(str(resources.files("agenthost_protocol") / "web"))
_BLANK = "<!doctype html><meta charset=utf-8><title>module tests</title>"
_TYPES = {".js": "text/javascript", ".html": "text/html", ".css": "text/css"}


def serve_web(route: Route) -> None:
    """Answer a request of the page from the package's ``web/`` directory."""
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
        context.route(f"{ORIGIN}/**", serve_web)
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


_IDS = ("a", "a", "a", "b")
_ID_FIELDS = frozenset({
    "id", "turn_id", "tool_call_id", "part_id", "request_id", "question_id", "command_id",
    "annotation_id", "entry_id", "file_id", "operation_id", "client_id", "queued_message_id",
    "selected_option_id", "customization_id", "default_chat",
})
_CHAT_URIS = ("ahp-chat:/a", "ahp-chat:/b")


def pooled(draw: Callable[..., Any], value: Any, depth: int = 0) -> Any:
    """``value`` with most of its ids (at any depth) drawn from a pool of two.

    Generated ids never meet: with a pool, a delta finds the part a
    ``chat/responsePart`` added, a tool call its start, a completion its
    request, and a tool call id is sometimes a part id, as the reducers'
    tie-breaking rules need.
    """
    if depth > 8:
        return value
    if isinstance(value, tuple):
        items = tuple(pooled(draw, item, depth + 1) for item in value)
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    if not attrs.has(type(value)):
        return value
    changes: dict[str, Any] = {}
    for field in attrs.fields(type(value)):
        old = getattr(value, field.name)
        if isinstance(old, str) and field.name in _ID_FIELDS:
            new = draw(st.sampled_from((*_IDS, old)))
        elif isinstance(old, str) and field.name == "directory":
            new = draw(st.sampled_from(("/a", "/b", old)))
        elif isinstance(old, str) and (
            field.name == "chat" or (field.name == "resource" and type(value) is t.ChatSummary)
        ):
            new = draw(st.sampled_from((*_CHAT_URIS, old)))
        elif isinstance(old, tuple) or attrs.has(type(old)):
            new = pooled(draw, old, depth + 1)
        else:
            continue
        if new is not old:
            changes[field.alias or field.name] = new
    return attrs.evolve(value, **changes) if changes else value
