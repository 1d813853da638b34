"""The web client's Inspector in a real browser (Debian's Chromium via Playwright) against
a real ``serve`` of the demo agent: each channel's state as a tree, the action log and its
filters, this page's actions with their fate (confirmed, rejected with the host's reason,
pending then dropped), hostile text shown as text, the phone layout and the keyboard.
Writes docs/web/inspector.png and docs/web/phone-inspector.png."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from . import _browser
from ._web_serve import Served, serve
from .test_web_browser import (
    PHONE,
    Pages,
    expect,
    focus_by_tab,
    host_states,
    last_turn,
    new_session,
    pages,  # noqa: F401  (a fixture)
    say,
    shot,
    wait_connected,
)

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page

browser = _browser.browser  # the fixture

HOSTILE = "inspect <img src=x onerror=\"window.__pwned=1\"><script>window.__pwned=2</script>"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("web-inspector")
    with serve(["--store", str(tmp / "demo.sqlite3"), "--step-delay", "0.01",
                "--shell", "/bin/sh"], tmp) as s:
        yield s


def open_inspector(page: Page) -> Locator:
    page.get_by_role("button", name="Inspector", exact=True).click()
    region = page.get_by_role("region", name="Inspector")
    expect(region).to_be_visible()
    return region


def expand(region: Locator, path: str) -> None:
    """Open the tree node at ``path`` (``turns.0.message``), its parents first."""
    parts = path.split(".")
    for n in range(1, len(parts) + 1):
        node = region.locator(f"details[data-path='{'.'.join(parts[:n])}']")
        if node.get_attribute("open") is None:
            node.locator(":scope > summary").click()
        expect(node).to_have_attribute("open", "")


def column(table: Locator, index: int) -> list[str]:
    return [str(t) for t in table.locator(f"tbody tr td:nth-child({index})").all_inner_texts()]


def test_the_inspector_shows_state_log_and_fates(pages: Callable[..., Pages],  # noqa: F811
                                                  demo: Served) -> None:
    page = pages().open(demo.web_url)
    new_session(page)
    say(page, HOSTILE)
    page.get_by_role("button", name="Approve", exact=True).click()
    expect(last_turn(page).locator(".tool")).to_have_attribute("data-status", "completed")
    expect(last_turn(page).locator(".streaming")).to_have_count(0)
    chat = str(page.evaluate("window.ahpClient.chat"))
    region = open_inspector(page)

    # the state: the open chat by default, its turn in the tree, as the host has it
    state = region.get_by_role("region", name="State")
    expect(state.get_by_role("combobox", name="Channel")).to_have_value(chat)
    host = host_states(demo, [chat])[chat]
    expect(state.locator("details[data-path='turns'] > summary")).to_contain_text(
        f"[{len(host['turns'])}]")
    expand(state, "turns.0.message")
    text = state.locator("li[data-path='turns.0.message.text'] .tree-value")
    expect(text).to_have_text(text_json(HOSTILE))
    expect(state.locator("li[data-path='turns.0.id'] .tree-value")).to_have_text(
        text_json(host["turns"][0]["id"]))
    # hostile text is text: no element made of it, nothing ran
    for tag in ("img", "script", "[onerror]"):
        assert region.locator(tag).count() == 0, tag
    assert page.evaluate("window.__pwned") is None
    # it stays open as actions arrive, and follows them while shown: a second turn
    page.get_by_role("button", name="Chat", exact=True).click()
    say(page, "a second turn")
    expect(page.get_by_role("button", name="Approve", exact=True)).to_be_visible()
    open_inspector(page)
    expect(state.locator("details[data-path='activeTurn']")).to_have_count(1)
    expect(state.locator("details[data-path='turns'] > summary")).to_contain_text("[1]")
    # approved from the chat view's (hidden) button while the Inspector is shown
    page.evaluate("document.querySelector('#transcript button.approve').click()")
    expect(state.locator("details[data-path='turns'] > summary")).to_contain_text("[2]")
    expect(state.locator("details[data-path='activeTurn']")).to_have_count(0)
    expect(text).to_be_visible()

    # the log: newest first, serverSeq, type and origin; the filters narrow it
    log = region.get_by_role("table", name="Action log")
    total = page.evaluate("window.ahpClient.log.length")
    expect(log.locator("tbody tr")).to_have_count(min(total, 300))
    seqs = [int(s) for s in column(log, 1)]
    assert seqs == sorted(seqs, reverse=True), seqs[:10]
    types = column(log, 3)
    origins = column(log, 4)
    assert "chat/delta" in types and "chat/turnStarted" in types
    started = types.index("chat/turnStarted")
    assert origins[started].startswith("this page #"), origins[started]
    assert origins[types.index("chat/delta")] == "host"
    logs = region.get_by_role("region", name="Action log")
    logs.get_by_role("searchbox", name="Type contains").fill("TOOLCALL")
    expect(log.locator("tbody tr").first).to_contain_text("chat/toolCall")
    filtered = column(log, 3)
    assert filtered and all("toolcall" in t.lower() for t in filtered), filtered
    assert len(filtered) < len(types)
    logs.get_by_role("searchbox", name="Type contains").fill("")
    logs.get_by_role("combobox", name="Channel").select_option("ahp-root://")
    expect(log.locator("tbody tr").first).to_contain_text("ahp-root://")
    assert set(column(log, 2)) == {"ahp-root://"}

    # this page's actions: confirmed, then one the host rejects, with its reason
    mine = region.get_by_role("table", name="This page's actions")
    expect(mine.locator("tbody tr")).to_have_count(4)
    assert column(mine, 4) == ["confirmed"] * 4
    assert column(mine, 3)[-2:] == ["chat/toolCallConfirmed", "chat/turnStarted"]
    page.evaluate("(c) => window.ahpClient.client.dispatch(c, "
                  "{type: 'chat/turnCancelled', turnId: 'no-such-turn', duration: 0})", chat)
    rejected = mine.locator("tbody tr").first
    expect(rejected.locator("td").nth(3)).to_have_text("rejected")
    expect(rejected.locator("td").nth(4)).to_have_text("no such active turn")
    expect(rejected.locator("td").nth(2)).to_have_text("chat/turnCancelled")
    region.evaluate("(r) => { r.scrollTop = 0; }")
    shot(page, "inspector.png")

    # pending: with the socket down, an action waits; the tree's optimistic state shows it
    # and says where it differs from the confirmed one; back online, it is dropped
    page.evaluate("""() => {
      const c = window.ahpClient.client;
      window.__retry = c._retry;
      c._retry = () => {};
      c._ws.close();
    }""")
    # a function, not an expression: polling an expression is an eval, which the CSP forbids
    page.wait_for_function("() => window.ahpClient.client._ws === null")  # closed, no retry
    page.evaluate("(c) => window.ahpClient.client.dispatch(c, "
                  "{type: 'chat/draftChanged', draft: {text: 'a draft'}})", chat)
    expect(mine.locator("tbody tr").first.locator("td").nth(3)).to_have_text("pending")
    expect(state.get_by_role("status").first).to_contain_text("1 action of this page pending")
    expect(state.get_by_role("list", name="Pending differences")).to_have_text("draft")
    expect(state.locator("li[data-path='draft'] , details[data-path='draft']")).to_have_count(1)
    state.get_by_role("combobox", name="State").select_option("confirmed")
    expect(state.locator("details[data-path='draft']")).to_have_count(0)
    state.get_by_role("combobox", name="State").select_option("optimistic")
    expect(state.locator("details[data-path='draft']")).to_have_count(1)
    page.evaluate("() => { const c = window.ahpClient.client; c._retry = window.__retry;"
                  " c._retry(); }")
    wait_connected(page)
    dropped = mine.locator("tbody tr").first
    expect(dropped.locator("td").nth(3)).to_have_text("dropped")
    expect(dropped.locator("td").nth(4)).to_have_text("lost with the connection")
    expect(state.get_by_role("list", name="Pending differences")).to_have_count(0)


def text_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def test_the_inspector_on_a_phone_by_keyboard(pages: Callable[..., Pages],  # noqa: F811
                                              demo: Served) -> None:
    page = pages(viewport=PHONE, is_mobile=True, has_touch=True).open(demo.web_url)
    # with no session open, the Inspector still gets the whole screen
    focus_by_tab(page, "Inspector")
    page.keyboard.press("Enter")
    region = page.get_by_role("region", name="Inspector")
    expect(region).to_be_in_viewport()
    state = region.get_by_role("region", name="State")
    expect(state.get_by_role("combobox", name="Channel")).to_have_value("ahp-root://")
    agents = state.locator("details[data-path='agents']")
    summary = agents.locator(":scope > summary")
    summary.focus()
    page.keyboard.press("Enter")
    expect(agents).to_have_attribute("open", "")
    expect(state.locator("details[data-path='agents.0']")).to_be_visible()
    page.keyboard.press("Enter")
    expect(state.locator("details[data-path='agents.0']")).to_have_count(0)
    page.keyboard.press("Enter")
    state.locator("details[data-path='agents.0'] > summary").click()
    expect(state.locator("li[data-path='agents.0.provider'] .tree-value")).to_have_text('"demo"')
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], width
    expect(region.get_by_role("table", name="Action log")).to_be_attached()
    shot(page, "phone-inspector.png")
    page.get_by_role("button", name="Chat", exact=True).click()
    expect(page.get_by_role("list", name="Sessions")).to_be_visible()
    expect(region).to_be_hidden()


def test_watching_a_channel_the_page_does_not_open(pages: Callable[..., Pages],  # noqa: F811
                                                    demo: Served) -> None:
    from websockets.sync.client import connect

    other = f"ahp-session:/inspected-{uuid.uuid4()}"
    with connect(demo.ws_url, open_timeout=10) as ws:
        ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "channel": "ahp-root://", "protocolVersions": ["0.7.0"],
            "clientId": f"py-{uuid.uuid4()}"}}))
        ws.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "createSession", "params": {
            "channel": other, "provider": "demo"}}))
        while True:
            message = json.loads(ws.recv(timeout=10))
            if message.get("id") == 2:
                assert "error" not in message, message
                break
    page = pages().open(demo.web_url)
    region = open_inspector(page)
    state = region.get_by_role("region", name="State")
    field = state.get_by_role("textbox", name="Watch a channel")
    field.fill("not a uri")
    field.press("Enter")
    expect(state.get_by_role("alert")).to_have_text("Not a channel URI (e.g. ahp-terminal:/…).")
    field.fill("ahp-session:/no-such-session")
    state.get_by_role("button", name="Watch", exact=True).click()
    expect(state.get_by_role("alert")).to_contain_text("The host refused to subscribe")
    field.fill(other)
    field.press("Enter")
    expect(state.get_by_role("combobox", name="Channel")).to_have_value(other)
    expect(state.locator("li[data-path='provider'] .tree-value")).to_have_text('"demo"')
    assert other in page.evaluate("window.ahpClient.channels")
    state.get_by_role("button", name="Stop watching", exact=True).click()
    expect(state.get_by_role("combobox", name="Channel")).to_have_value("ahp-root://")
    assert other not in page.evaluate("window.ahpClient.channels")


def expand_all(region: Locator) -> None:
    """Open every fold of the tree (bounded)."""
    for _ in range(40):
        closed = region.locator("details:not([open]) > summary")
        if not closed.count():
            return
        closed.first.click()
    raise AssertionError("the tree kept growing")


def test_a_terminal_watched_live(pages: Callable[..., Pages], demo: Served) -> None:  # noqa: F811
    page = pages().open(demo.web_url)
    terminal = f"ahp-terminal:/inspected-{uuid.uuid4()}"
    # the page's own terminal (a client claim: it ends with the page's connection)
    page.evaluate("""(uri) => window.ahpClient.client.request("createTerminal", {channel: uri,
      claim: {kind: "client", clientId: window.ahpClient.client.clientId}})""", terminal)
    region = open_inspector(page)
    state = region.get_by_role("region", name="State")
    field = state.get_by_role("textbox", name="Watch a channel")
    field.fill(terminal)
    field.press("Enter")
    expect(state.get_by_role("combobox", name="Channel")).to_have_value(terminal)
    page.evaluate("(uri) => window.ahpClient.client.dispatch(uri, "
                  "{type: 'terminal/input', data: 'echo inspected-$((6*7))\\n'})", terminal)
    page.wait_for_function("(uri) => JSON.stringify(window.ahpClient.state(uri))"
                           ".includes('inspected-42')", arg=terminal)
    expand_all(state)
    for more in state.get_by_role("button", name=re.compile("^Show all")).all():
        more.click()
    expect(state.locator(".state-tree")).to_contain_text("inspected-42")
    mine = region.get_by_role("table", name="This page's actions")
    expect(mine.locator("tbody tr").first).to_contain_text("terminal/input")
    expect(mine.locator("tbody tr").first.locator("td").nth(3)).to_have_text("confirmed")
    logs = region.get_by_role("region", name="Action log")
    logs.get_by_role("combobox", name="Channel").select_option(terminal)
    expect(logs.get_by_role("table").locator("tbody tr").first).to_contain_text("terminal/")
    assert "host" in column(logs.get_by_role("table"), 4)


MOUNT = """async (state) => {
  const { mountInspector } = await import("/inspector.js");
  const box = document.createElement("section");
  document.body.append(box);
  const evil = "<img src=x onerror=window.__pwned=1>";
  const fake = {
    events: new EventTarget(), channels: ["ahp-chat:/x"], chat: "ahp-chat:/x", session: null,
    state: () => state, confirmed: () => state, pending: () => [], client: { clientId: "me" },
    settled: [{ clientSeq: 1, channel: "ahp-chat:/x", type: evil, fate: "rejected",
                reason: "<script>window.__pwned=2</script>", time: 0 }],
    log: [{ serverSeq: 1, channel: "ahp-chat:/x", type: evil, origin: { clientId: evil,
            clientSeq: 1 }, time: 0, kind: "foreign" }],
  };
  window.__inspector = mountInspector(box, fake);
  box.id = "fake-inspector";
}"""


def test_hostile_keys_and_values_are_text(pages: Callable[..., Pages],  # noqa: F811
                                          demo: Served) -> None:
    page = pages().open(demo.web_url)
    evil = "<img src=x onerror=window.__pwned=1>"
    page.evaluate(MOUNT, {"a.b": 1, "a": {"b": 1}, evil: {evil: f"<svg onload=x>{evil}"}})
    box = page.locator("#fake-inspector")
    expect(box.locator("li[data-path='a.b']")).to_have_count(1)
    # "a.b" the key and a → b the path are two nodes, each with its own key
    box.locator("details[data-path='a'] > summary").click()
    leaves = box.locator("li[data-path='a.b'] .tree-key")
    expect(leaves).to_have_text(["a.b", "b"])
    box.locator("details > summary", has_text=evil).click()
    expect(box.locator("li .tree-value.string")).to_have_text(text_json(f"<svg onload=x>{evil}"))
    expect(box.get_by_role("table", name="Action log")).to_contain_text(evil)
    expect(box.get_by_role("table", name="This page's actions")).to_contain_text(
        "<script>window.__pwned=2</script>")
    for tag in ("img", "svg", "script", "[onerror]", "[onload]"):
        assert box.locator(tag).count() == 0, tag
    assert page.evaluate("window.__pwned") is None
