"""The web client in a real browser (Debian's Chromium, driven by Playwright), against
real ``serve`` subprocesses: the demo agent and an agent of the agent API
(``tests/web_agent.py``).  One ``serve`` per agent for the module (the tests use sessions
of their own); the restart test has its own.  The screenshots of docs/web.md are taken
here, and written to docs/web/*.png with ``AHP_SCREENSHOTS=1`` (to refresh the docs'
pictures); without it a test run leaves the work tree as it was."""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import re
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from agenthost_protocol.agent.demo import APPROVED_TEXT, DENIED_TEXT

from . import _browser
from ._web_serve import REPO, Served, serve

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, Page

TIMEOUT_MS = 15_000
SHOTS = REPO / "docs" / "web"
DESKTOP = {"width": 1100, "height": 700}

browser = _browser.browser  # the fixture
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("web-demo")
    with serve(["--store", str(tmp / "demo.sqlite3"), "--step-delay", "0.01"], tmp) as s:
        yield s


@pytest.fixture(scope="module")
def webtest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("web-agent")
    with serve(["--store", str(tmp / "agent.sqlite3"), "--agent", "tests.web_agent:agent"],
               tmp) as s:
        yield s


class Pages:
    """A browser context whose pages are watched: any script error fails the test."""

    def __init__(self, chromium: Browser, **options: Any) -> None:
        self.context: BrowserContext = chromium.new_context(**options)
        self.context.set_default_timeout(TIMEOUT_MS)
        # what the Content-Security-Policy blocked: nothing of the page's own may be
        self.context.add_init_script(
            "document.addEventListener('securitypolicyviolation', (e) => {"
            " window.__csp = (window.__csp || []).concat("
            "[e.violatedDirective + ' ' + e.blockedURI]); });")
        self.errors: list[str] = []
        self.requests: list[str] = []

    def open(self, url: str, *, connected: bool = True) -> Page:
        page = self.context.new_page()
        page.on("pageerror", lambda error: self.errors.append(str(error)))
        page.on("request", lambda request: self.requests.append(request.url))
        page.goto(url)
        if connected:
            wait_connected(page)
        return page

    def close(self) -> None:
        for page in self.context.pages:
            with contextlib.suppress(Exception):
                blocked = page.evaluate("window.__csp || []")
                if blocked and page.url.startswith(("http://127.0.0.1", "http://localhost")):
                    self.errors.append(f"CSP violations on {page.url}: {blocked}")
        self.context.close()


@pytest.fixture
def pages(browser: Browser) -> Iterator[Callable[..., Pages]]:
    made: list[Pages] = []

    def make(**options: Any) -> Pages:
        made.append(Pages(browser, **{"viewport": DESKTOP, **options}))
        return made[-1]

    yield make
    for p in made:
        p.close()
    for p in made:
        assert not p.errors, p.errors


def expect(locator: Any) -> Any:
    """Playwright's ``expect`` with the tests' bound (its own 5 s is short on a loaded
    2-core machine; the bound says "not forever", not how fast)."""
    from playwright.sync_api import expect as _expect

    _expect.set_options(timeout=TIMEOUT_MS)
    return _expect(locator)


def wait_connected(page: Page) -> None:
    expect(page.locator("#connection")).to_have_attribute("data-status", "connected")


def new_session(page: Page, model: str | None = None) -> str:
    """Start a session (with ``model``, where the agent offers a choice); its URI."""
    before = page.evaluate("window.ahpClient.session")
    page.get_by_role("button", name="New session", exact=True).click()
    if model is not None:
        dialog = page.get_by_role("dialog", name="New session")
        dialog.get_by_label("Model").select_option(model)
        dialog.get_by_role("button", name="Create", exact=True).click()
    page.wait_for_function("(old) => window.ahpClient.chat && window.ahpClient.session !== old",
                           arg=before)
    return str(page.evaluate("window.ahpClient.session"))


def say(page: Page, text: str) -> None:
    box = page.get_by_role("textbox", name="Message")
    box.fill(text)
    box.press("Enter")


def last_turn(page: Page) -> Any:
    return page.locator("#transcript > li.turn").last


def shot(page: Page, name: str) -> None:
    picture = page.screenshot()
    assert picture.startswith(b"\x89PNG")
    if os.environ.get("AHP_SCREENSHOTS"):
        SHOTS.mkdir(parents=True, exist_ok=True)
        (SHOTS / name).write_bytes(picture)


# -- the host's own view, for comparison --------------------------------------------------


def host_states(served: Served, channels: list[str]) -> dict[str, Any]:
    """What a fresh Python client gets subscribing to ``channels`` now."""
    from websockets.sync.client import connect

    with connect(served.ws_url, open_timeout=10) as ws:
        ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "channel": "ahp-root://", "protocolVersions": ["0.7.0"],
            "clientId": f"py-{uuid.uuid4()}", "initialSubscriptions": channels}}))
        while True:
            message = json.loads(ws.recv(timeout=10))
            if message.get("id") == 1:
                break
    return {s["resource"]: s["state"] for s in message["result"]["snapshots"]}


def without_clock(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_clock(v) for k, v in value.items() if k != "modifiedAt"}
    if isinstance(value, list):
        return [without_clock(v) for v in value]
    return value


def assert_page_equals_host(page: Page, served: Served) -> None:
    """The page's reconciled state of its session, chat and root equals the host's."""
    channels = page.evaluate("[window.ahpClient.session, window.ahpClient.chat, 'ahp-root://']")
    host = host_states(served, channels)
    for channel in channels:
        mine = page.evaluate("(c) => ({confirmed: window.ahpClient.confirmed(c), "
                             "optimistic: window.ahpClient.state(c), "
                             "pending: window.ahpClient.pending(c).length})", channel)
        assert mine["pending"] == 0, channel
        assert without_clock(mine["confirmed"]) == without_clock(host[channel]), channel
        assert mine["optimistic"] == mine["confirmed"], channel


# -- the demo agent --------------------------------------------------------------------


def test_a_whole_turn_streams_asks_and_ends(pages: Callable[..., Pages], demo: Served) -> None:
    p = pages()
    page = p.open(demo.web_url)
    # the token left the address bar, kept for this tab only
    assert "token" not in page.url
    assert page.evaluate("sessionStorage.getItem('ahp-token')") == demo.token
    session = new_session(page)
    say(page, "Hello, *web* page")
    turn = last_turn(page)
    expect(turn.locator(".message.user")).to_contain_text("Hello, *web* page")
    # the reply streams in before the confirmation: the reasoning folded, the quote rendered
    expect(turn.locator("details.folded summary", has_text="Reasoning")).to_be_visible()
    expect(turn.locator(".markdown blockquote em")).to_have_text("web")
    approve = page.get_by_role("button", name="Approve", exact=True)
    expect(approve).to_be_visible()
    expect(turn.locator(".tool")).to_have_attribute("data-status", "pending-confirmation")
    expect(page.locator(f"#sessions li[data-session='{session}'] .badge")).to_have_text(
        "needs input")
    shot(page, "confirmation.png")
    approve.click()
    expect(turn.locator(".markdown").last).to_contain_text(APPROVED_TEXT.replace("`", ""))
    expect(turn.locator(".tool")).to_have_attribute("data-status", "completed")
    expect(turn.locator(".streaming")).to_have_count(0)
    expect(page.get_by_role("button", name="Approve", exact=True)).to_have_count(0)
    turn.locator(".tool summary", has_text="Input").click()
    expect(turn.locator(".tool-input")).to_contain_text("Hello, *web* page")
    shot(page, "chat.png")
    # it streamed: many deltas of one part, each an action of the log
    deltas = page.evaluate("window.ahpClient.log.filter((e) => e.type === 'chat/delta').length")
    assert deltas >= 3, deltas
    # what the Inspector reads: the action log and the settled write-ahead actions
    log = page.evaluate("window.ahpClient.log.slice(-3)")
    assert all({"serverSeq", "channel", "type", "origin", "time"} <= set(e) for e in log)
    settled = page.evaluate("window.ahpClient.settled")
    assert [s["type"] for s in settled] == ["chat/turnStarted", "chat/toolCallConfirmed"]
    assert {s["fate"] for s in settled} == {"confirmed"}
    assert_page_equals_host(page, demo)
    # a reload keeps the tab's token and opens the same session again
    page.reload()
    wait_connected(page)
    expect(last_turn(page).locator(".tool")).to_have_attribute("data-status", "completed")
    assert page.evaluate("window.ahpClient.session") == session


def test_deny(pages: Callable[..., Pages], demo: Served) -> None:
    page = pages().open(demo.web_url)
    new_session(page)
    say(page, "deny this one")
    page.get_by_role("button", name="Deny", exact=True).click()
    turn = last_turn(page)
    expect(turn.locator(".markdown").last).to_contain_text(DENIED_TEXT.replace("`", ""))
    expect(turn.locator(".tool")).to_have_attribute("data-status", "cancelled")
    expect(turn.locator(".tool-status")).to_have_text("denied")
    assert_page_equals_host(page, demo)


def test_cancel_and_queue(pages: Callable[..., Pages], demo: Served) -> None:
    page = pages().open(demo.web_url)
    new_session(page)
    say(page, "first")
    expect(page.get_by_role("button", name="Approve", exact=True)).to_be_visible()
    # a message sent while the turn runs waits in the queue
    say(page, "second, queued")
    expect(page.locator("#queued")).to_contain_text("second, queued")
    page.get_by_role("button", name="Cancel turn", exact=True).click()
    turns = page.locator("#transcript > li.turn")
    expect(turns.first.locator(".ended.cancelled")).to_be_visible()
    expect(turns.first.locator(".tool")).to_have_attribute("data-status", "cancelled")
    # the queued message starts the next turn
    expect(turns).to_have_count(2)
    expect(turns.last.locator(".message.user .text")).to_have_text("second, queued")
    expect(page.locator("#queued")).to_be_hidden()
    page.get_by_role("button", name="Approve", exact=True).click()
    expect(turns.last.locator(".tool")).to_have_attribute("data-status", "completed")
    assert_page_equals_host(page, demo)


def test_a_second_tab_converges(pages: Callable[..., Pages], demo: Served) -> None:
    p = pages()
    one = p.open(demo.web_url)
    session = new_session(one)
    two = p.open(demo.web_url)
    # the list is live: the session is there, and marked while it waits
    say(one, "from tab one")
    entry = two.locator(f"#sessions li[data-session='{session}']")
    expect(entry.locator(".badge")).to_have_text("needs input")
    entry.get_by_role("button").click()
    expect(last_turn(two).locator(".message.user")).to_contain_text("from tab one")
    # the other tab approves; both end in the same state
    two.get_by_role("button", name="Approve", exact=True).click()
    for page in (one, two):
        expect(last_turn(page).locator(".tool")).to_have_attribute("data-status", "completed")
        expect(last_turn(page).locator(".markdown").last).to_contain_text("Done.")
    assert one.locator("#transcript").inner_text() == two.locator("#transcript").inner_text()
    one_state = one.evaluate("(c) => window.ahpClient.confirmed(c)", one.evaluate(
        "window.ahpClient.chat"))
    two_state = two.evaluate("(c) => window.ahpClient.confirmed(c)", one.evaluate(
        "window.ahpClient.chat"))
    assert without_clock(one_state) == without_clock(two_state)
    assert_page_equals_host(two, demo)
    # dispose (two clicks): the other tab's list drops it too
    one.get_by_role("button", name="Dispose session", exact=True).click()
    one.get_by_role("button", name="Confirm dispose", exact=True).click()
    expect(two.locator(f"#sessions li[data-session='{session}']")).to_have_count(0)
    expect(one.locator(f"#sessions li[data-session='{session}']")).to_have_count(0)
    expect(two.locator("#empty")).to_be_visible()


def focus_by_tab(page: Page, name: str, *, backwards: bool = False) -> None:
    """Press Tab (Shift+Tab) until the button ``name`` has the focus (bounded)."""
    for _ in range(60):
        if page.evaluate("document.activeElement && document.activeElement.textContent") == name:
            return
        page.keyboard.press("Shift+Tab" if backwards else "Tab")
    raise AssertionError(f"{name!r} never got the focus")


def test_by_keyboard_alone(pages: Callable[..., Pages], demo: Served) -> None:
    page = pages().open(demo.web_url)
    focus_by_tab(page, "New session")
    page.keyboard.press("Enter")
    # the new session's message box has the focus: type, Enter sends
    expect(page.get_by_role("textbox", name="Message")).to_be_focused()
    page.keyboard.type("typed, not clicked")
    page.keyboard.press("Enter")
    expect(page.get_by_role("button", name="Approve", exact=True)).to_be_visible()
    focus_by_tab(page, "Approve", backwards=True)
    page.keyboard.press("Enter")
    expect(last_turn(page).locator(".tool")).to_have_attribute("data-status", "completed")
    expect(last_turn(page).locator(".message.user .text")).to_have_text("typed, not clicked")


def test_a_wrong_token_is_shown_as_such(pages: Callable[..., Pages], demo: Served) -> None:
    p = pages()
    page = p.open(f"{demo.origin}/#token=not-the-token", connected=False)
    status = page.locator("#connection")
    expect(status).to_have_attribute("data-status", "refused")
    expect(status).to_contain_text("refused this page's access token")
    shot(page, "refused.png")
    bare = pages().open(f"{demo.origin}/", connected=False)
    expect(bare.locator("#connection")).to_contain_text("no access token")


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def other_origin(root: Path) -> Iterator[str]:
    """A plain page served from another origin (another port of 127.0.0.1)."""
    (root / "index.html").write_text("<!doctype html><title>elsewhere</title>")
    handler = functools.partial(_Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


OPEN_WS = """(url) => new Promise((done) => {
  const ws = new WebSocket(url);
  ws.onopen = () => { done("open"); ws.close(); };
  ws.onerror = () => done("refused");
  setTimeout(() => done("timeout"), 8000);
})"""


def test_another_origin_is_refused(pages: Callable[..., Pages], demo: Served,
                                   tmp_path: Path) -> None:
    p = pages()
    with other_origin(tmp_path) as url:
        elsewhere = p.open(url, connected=False)
        # the right token, from the wrong page
        assert elsewhere.evaluate(OPEN_WS, demo.ws_url) == "refused"
    own = p.open(demo.web_url)
    assert own.evaluate(OPEN_WS, demo.ws_url) == "open"


def test_the_phone_sized_layout(pages: Callable[..., Pages], demo: Served) -> None:
    p = pages(viewport=PHONE, is_mobile=True, has_touch=True)
    page = p.open(demo.web_url)
    expect(page.get_by_role("list", name="Sessions")).to_be_visible()
    shot(page, "phone-sessions.png")
    new_session(page)
    # the list folds away behind the menu once a session is open
    expect(page.get_by_role("button", name="New session", exact=True)).not_to_be_in_viewport()
    say(page, "from a phone")
    page.get_by_role("button", name="Approve", exact=True).click()
    expect(last_turn(page).locator(".tool")).to_have_attribute("data-status", "completed")
    expect(last_turn(page).locator(".markdown").last).to_contain_text("Done.")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], width
    for name in ("Message", ):
        box = page.get_by_role("textbox", name=name).bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"]
    shot(page, "phone-chat.png")
    page.get_by_role("button", name="Sessions list", exact=True).click()
    expect(page.get_by_role("button", name="New session", exact=True)).to_be_in_viewport()


def test_the_host_restarts_and_the_tab_reconnects(pages: Callable[..., Pages],
                                                  tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    store = tmp_path / "restart.sqlite3"
    args = ["--store", str(store), "--step-delay", "0.01"]
    p = pages()
    with serve(args, tmp_path, port=port) as first:
        page = p.open(first.web_url)
        new_session(page)
        say(page, "before the restart")
        page.get_by_role("button", name="Approve", exact=True).click()
        expect(last_turn(page).locator(".markdown").last).to_contain_text("Done.")
        expect(last_turn(page).locator(".streaming")).to_have_count(0)  # the turn ended
        before = page.locator("#transcript").inner_text()
    # the host is gone: the page says so and keeps trying
    expect(page.locator("#connection")).to_have_attribute("data-status", "reconnecting")
    expect(page.locator("#connection")).to_contain_text("reconnecting")
    with serve(args, tmp_path, port=port) as second:
        expect(page.locator("#connection")).to_contain_text("reconnected", timeout=20_000)
        wait_connected(page)
        assert page.locator("#transcript").inner_text() == before
        assert_page_equals_host(page, second)
        # and it goes on
        say(page, "after the restart")
        page.get_by_role("button", name="Approve", exact=True).click()
        expect(last_turn(page).locator(".markdown").last).to_contain_text("Done.")
        assert_page_equals_host(page, second)


# -- an agent of the agent API -------------------------------------------------------------


def test_every_question_kind_answered(pages: Callable[..., Pages], webtest: Served) -> None:
    page = pages().open(webtest.web_url)
    new_session(page, "quick")
    say(page, "ask me")
    form = page.locator("form.input-request")
    expect(form).to_be_visible()
    form.get_by_label("Your name?").fill("Ada")
    form.get_by_label("How many?").fill("3")
    form.get_by_label("Which ratio?").fill("0.5")
    form.get_by_label("Are you sure?").check()
    form.get_by_label("Blue").check()
    form.get_by_label("Saw").check()
    form.get_by_label("File").check()
    shot(page, "questions.png")
    form.get_by_role("button", name="Submit answer", exact=True).click()
    code = last_turn(page).locator(".markdown pre code")
    expect(code).to_contain_text('"response": "accept"')
    got = json.loads(code.inner_text())
    values = {k: v["value"]["value"] for k, v in got["answers"].items()}
    assert values == {"name": "Ada", "count": 3, "ratio": 0.5, "sure": True, "color": "blue",
                      "tools": ["saw", "file"]}
    assert {v["state"] for v in got["answers"].values()} == {"submitted"}
    assert got["model"] == "quick"  # as chosen in the dialog
    expect(last_turn(page).locator(".tool")).to_have_attribute("data-status", "completed")
    expect(last_turn(page).locator(".input-request.done")).to_contain_text("Ada")
    assert_page_equals_host(page, webtest)


def test_an_agent_api_turn_approved_denied_cancelled(pages: Callable[..., Pages],
                                                     webtest: Served) -> None:
    page = pages().open(webtest.web_url)
    new_session(page, "quick")
    turns = page.locator("#transcript > li.turn")
    for n, (button, status, text) in enumerate((
            ("Approve", "completed", ["Working on it.", "Approved."]),
            ("Deny", "cancelled", ["Working on it.", "Denied."]),
            ("Cancel turn", "cancelled", None))):
        say(page, f"confirm {n}")
        expect(turns.nth(n).locator(".tool")).to_have_attribute("data-status",
                                                                "pending-confirmation")
        expect(turns.nth(n).locator(".confirm-title")).to_have_text("Write notes.txt?")
        page.get_by_role("button", name=button, exact=True).click()
        expect(turns.nth(n).locator(".tool")).to_have_attribute("data-status", status)
        if text is not None:
            expect(turns.nth(n).locator(".markdown")).to_have_text(text)
        else:
            expect(turns.nth(n).locator(".ended.cancelled")).to_be_visible()
        expect(turns.nth(n).locator(".streaming")).to_have_count(0)
    assert_page_equals_host(page, webtest)


def test_a_question_declined_and_a_bad_number_refused(pages: Callable[..., Pages],
                                                       webtest: Served) -> None:
    page = pages().open(webtest.web_url)
    new_session(page, "careful")
    say(page, "ask again")
    form = page.locator("form.input-request")
    form.get_by_label("How many?").fill("2.5")
    form.get_by_role("button", name="Submit answer", exact=True).click()
    expect(form.get_by_role("alert")).to_contain_text("whole number")
    form.get_by_role("button", name="Decline", exact=True).click()
    code = last_turn(page).locator(".markdown pre code")
    expect(code).to_contain_text('"response": "decline"')
    assert json.loads(code.inner_text())["model"] == "careful"


def test_hostile_agent_text_runs_nothing(pages: Callable[..., Pages], webtest: Served) -> None:
    p = pages()
    page = p.open(webtest.web_url)
    new_session(page, "careful")
    say(page, "hostile <img src=x onerror=\"window.__pwned=['user']\">")
    form = page.locator("form.input-request")
    expect(form).to_be_visible()
    turn = last_turn(page)
    expect(turn.locator(".tool")).to_have_attribute("data-status", "completed")
    # open every fold, hover everything: no handler may fire
    for summary in turn.locator("summary").all():
        summary.click()
    for node in turn.locator("b, a, span, p").all()[:40]:
        with contextlib.suppress(Exception):
            node.hover(timeout=500)
    form.get_by_role("radio").check()
    form.get_by_role("button", name="Submit answer", exact=True).click()
    expect(turn.locator(".input-request.done")).to_be_visible()
    shot(page, "hostile.png")
    assert page.evaluate("window.__pwned") is None
    # no element an agent's text could have made
    for tag in ("script", "img", "svg", "iframe", "object", "embed", "details[ontoggle]",
                "[onerror]", "[onload]", "[onmouseover]", "[ontoggle]"):
        assert page.locator(f"#transcript {tag}").count() == 0, tag
        assert page.locator(f"#sessions {tag}").count() == 0, tag
    hrefs = page.locator("#transcript a").evaluate_all("(as) => as.map((a) => a.href)")
    assert hrefs, "the safe links are links"
    assert all(re.match(r"^(https?:|mailto:)", h) for h in hrefs), hrefs
    assert "https://example.org/ok" in hrefs
    rels = page.locator("#transcript a").evaluate_all("(as) => as.map((a) => a.rel)")
    assert set(rels) == {"noopener noreferrer"}
    # the HTML is there as text, the code block as code
    text = turn.inner_text()
    assert "<script>" in text and "onerror" in text
    expect(turn.locator("pre code")).to_contain_text("<script>alert('in a code block')")
    # a network image is a link to click, never loaded
    expect(turn.locator("a.image-link")).to_contain_text("a network image")
    assert not [u for u in p.requests if "never-loaded" in u or ":9/" in u], p.requests
    expect(page.locator("#session-title")).to_have_text(re.compile("^<img src=x onerror="))
    assert_page_equals_host(page, webtest)


# -- the Markdown renderer alone, in the page ----------------------------------------------

RENDER = """async (texts) => {
  const { renderMarkdown } = await import("/markdown.js");
  const out = [];
  for (const text of texts) {
    const box = document.createElement("div");
    box.append(renderMarkdown(text, document));
    const tags = [...box.querySelectorAll("*")].map((e) => e.tagName.toLowerCase());
    const attributes = [...box.querySelectorAll("*")]
      .flatMap((e) => [...e.attributes].map((a) => a.name));
    const links = [...box.querySelectorAll("a")].map((a) => a.getAttribute("href"));
    out.push({ tags, attributes, links, text: box.textContent, html: box.innerHTML });
  }
  return out;
}"""

HOSTILE_MARKDOWN = [
    "<script>window.__pwned=1</script>",
    "<img src=x onerror=window.__pwned=1>",
    "[x](javascript:window.__pwned=1)",
    "[x]( JAVASCRIPT:window.__pwned=1)",
    "[x](java\tscript:window.__pwned=1)",
    "[x](vbscript:msgbox)",
    "[x](data:text/html;base64,PHNjcmlwdD4=)",
    "[x](/relative/path)",
    "[x](//evil.example/x)",
    "<javascript:window.__pwned=1>",
    "<svg><script>window.__pwned=1</script></svg>",
    "**<iframe src=javascript:1>**",
    "> <style>body{display:none}</style>",
    "![x](https://evil.example/pixel.png)",
    "![x](javascript:window.__pwned=1)",
    "| a | b |\n|---|---|\n| <img src=x onerror=1> | [y](javascript:1) |",
    "- <a href=javascript:1>list</a>\n- [ok](https://ok.example/)",
    "```\n</code></pre><script>1</script>\n```",
    "*" * 5000 + "[" * 3000 + "x",
]


def test_markdown_renders_hostile_text_as_text(pages: Callable[..., Pages],
                                                demo: Served) -> None:
    p = pages()
    page = p.open(demo.web_url)
    results = page.evaluate(RENDER, HOSTILE_MARKDOWN)
    allowed = {"p", "br", "strong", "em", "del", "code", "pre", "a", "blockquote", "ul", "ol",
               "li", "table", "thead", "tbody", "tr", "th", "td", "h3", "h4", "h5", "h6", "hr"}
    for text, got in zip(HOSTILE_MARKDOWN, results, strict=True):
        assert set(got["tags"]) <= allowed, (text, got["html"])
        assert set(got["attributes"]) <= {"href", "rel", "target", "referrerpolicy", "class",
                                          "start", "data-language"}, (text, got["html"])
        for href in got["links"]:
            assert re.match(r"^(https?|mailto):", href), (text, href)
    # the text is all there, as text
    assert results[0]["text"] == HOSTILE_MARKDOWN[0]
    assert "onerror" in results[1]["text"]
    # only the safe links are links; an image is a link to open, not an <img>
    assert [r["links"] for r in results[2:10]] == [[]] * 8
    assert results[13]["links"] == ["https://evil.example/pixel.png"]
    assert results[16]["links"] == ["https://ok.example/"]
    assert page.evaluate("window.__pwned") is None
    assert not [u for u in p.requests if "evil.example" in u]


def test_markdown_renders_what_agents_write(pages: Callable[..., Pages], demo: Served) -> None:
    page = pages().open(demo.web_url)
    [got] = page.evaluate(RENDER, ["# Title\n\nSome **bold**, *em*, `code` and a "
                                   "[link](https://example.org/a?b=1).\n\n"
                                   "1. one\n2. two\n   - nested\n\n> quoted\n\n"
                                   "```python\nprint('x')\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |"
                                   "\n\n---\nsee https://example.org/plain."])
    assert got["html"].startswith("<h3>Title</h3><p>Some <strong>bold</strong>, <em>em</em>, "
                                  "<code>code</code> and a <a href=\"https://example.org/a?b=1\"")
    for fragment in ("<ol><li><p>one</p></li><li><p>two</p><ul><li><p>nested</p></li></ul>",
                     "<blockquote><p>quoted</p></blockquote>",
                     "<pre><code data-language=\"python\">print('x')</code></pre>",
                     "<th>a</th>", "<td>2</td>", "<hr>",
                     "<a href=\"https://example.org/plain\""):
        assert fragment in got["html"], (fragment, got["html"])


def test_the_session_list_is_paged(pages: Callable[..., Pages], demo: Served) -> None:
    from websockets.sync.client import connect

    with connect(demo.ws_url, open_timeout=10) as ws:
        ws.send(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "channel": "ahp-root://", "protocolVersions": ["0.7.0"],
            "clientId": f"py-{uuid.uuid4()}"}}))
        for n in range(1, 56):
            ws.send(json.dumps({"jsonrpc": "2.0", "id": n, "method": "createSession", "params": {
                "channel": f"ahp-session:/paged-{n}", "provider": "demo"}}))
        answered: set[int] = set()
        while len(answered) < 56:
            message = json.loads(ws.recv(timeout=10))
            if "id" in message:
                assert "error" not in message, message
                answered.add(message["id"])
    page = pages().open(demo.web_url)
    total = len(host_list(demo))
    sessions = page.get_by_role("list", name="Sessions").get_by_role("listitem")
    expect(sessions).to_have_count(50)
    page.get_by_role("button", name="More sessions", exact=True).click()
    expect(sessions).to_have_count(total)
    expect(page.get_by_role("button", name="More sessions", exact=True)).to_be_hidden()
    # the Inspector's place
    page.get_by_role("button", name="Inspector", exact=True).click()
    expect(page.get_by_role("region", name="Inspector")).to_be_visible()
    expect(page.get_by_role("textbox", name="Message")).to_be_hidden()
    page.get_by_role("button", name="Chat", exact=True).click()
    expect(page.get_by_role("region", name="Inspector")).to_be_hidden()


def host_list(served: Served) -> list[Any]:
    """Every session the host lists, page after page."""
    from websockets.sync.client import connect

    items: list[Any] = []
    with connect(served.ws_url, open_timeout=10) as ws:
        ws.send(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "channel": "ahp-root://", "protocolVersions": ["0.7.0"],
            "clientId": f"py-{uuid.uuid4()}"}}))
        cursor: str | None = None
        for n in range(1, 100):
            params: dict[str, Any] = {"channel": "ahp-root://", "limit": 100}
            if cursor:
                params["cursor"] = cursor
            ws.send(json.dumps({"jsonrpc": "2.0", "id": n, "method": "listSessions",
                                "params": params}))
            while True:
                message = json.loads(ws.recv(timeout=10))
                if message.get("id") == n:
                    break
            items += message["result"]["items"]
            cursor = message["result"].get("nextCursor")
            if not cursor:
                break
    return items


def test_the_sessions_other_chats(pages: Callable[..., Pages], demo: Served) -> None:
    """A fork made on the page, and a side chat made by another client, are reachable."""
    from websockets.sync.client import connect

    page = pages().open(demo.web_url)
    session = new_session(page)
    say(page, "the source turn")
    page.get_by_role("button", name="Approve", exact=True).click()
    expect(last_turn(page).locator(".tool")).to_have_attribute("data-status", "completed")
    source = page.evaluate("window.ahpClient.chat")
    turn_id = last_turn(page).get_attribute("data-turn")
    # another client opens a side chat of the same session
    with connect(demo.ws_url, open_timeout=10) as ws:
        ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "channel": "ahp-root://", "protocolVersions": ["0.7.0"],
            "clientId": f"py-{uuid.uuid4()}"}}))
        side = f"ahp-chat:/side-{uuid.uuid4()}"
        ws.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "createChat", "params": {
            "channel": session, "chat": side,
            "source": {"kind": "sideChat", "chat": source, "turnId": turn_id}}}))
        while True:
            message = json.loads(ws.recv(timeout=10))
            if message.get("id") == 2:
                assert "error" not in message, message
                break
    chats = page.get_by_role("combobox", name="Chat", exact=True)
    expect(chats.locator("option")).to_have_count(2)
    chats.select_option(side)
    expect(page.locator("#transcript > li.turn")).to_have_count(0)  # a side chat starts empty
    chats.select_option(source)
    expect(last_turn(page).locator(".message.user")).to_contain_text("the source turn")
    # a fork from a finished turn: its history copied, then its own
    last_turn(page).get_by_role("button", name="Fork from this turn", exact=True).click()
    expect(chats.locator("option")).to_have_count(3)
    page.wait_for_function("(s) => window.ahpClient.chat !== s", arg=source)
    expect(chats.locator("option:checked")).to_contain_text("(fork)")
    expect(last_turn(page).locator(".message.user")).to_contain_text("the source turn")
    say(page, "in the fork")
    page.get_by_role("button", name="Approve", exact=True).click()
    expect(page.locator("#transcript > li.turn")).to_have_count(2)
    expect(last_turn(page).locator(".tool")).to_have_attribute("data-status", "completed")
    assert_page_equals_host(page, demo)
