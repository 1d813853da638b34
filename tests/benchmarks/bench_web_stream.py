"""Benchmark: the realistic agent stream reduced by the web client, in Chromium.

The stream of ``bench_stream`` (227 actions a turn: five sections of a
markdown part, 40 deltas of 8 characters and a tool call), encoded as the
host sends it, reduced in the page by ``web/ahp/reducers.js`` (``reduce``),
then received by ``web/ahp/reconciler.js`` as another client's envelopes
(``Reconciler.receive``, which reduces into the confirmed state).  The page
times itself (``performance.now``); parsing the JSON is not timed.  Prints
actions/s and µs/action for each.

Needs Chromium and Playwright (as the browser tests do).  Run from the
repository root::

    .venv/bin/python -m tests.benchmarks.bench_web_stream [--turns 200]
"""

from __future__ import annotations

import argparse
import json
import sys

from agenthost_protocol import wire

from .._browser import FLAGS, chromium_path
from .._web_modules import ORIGIN, serve_web
from ._stream import ACTIONS_PER_TURN, CLOCK, initial_state, stream

_RUN = """async (text) => {
  const { reduce } = await import("/ahp/reducers.js");
  const { Reconciler } = await import("/ahp/reconciler.js");
  const { channel, initial, actions, repeat } = JSON.parse(text);
  const best = { reduce: Infinity, receive: Infinity };
  let final = null;
  for (let run = 0; run < repeat; run++) {
    let state = initial;
    let start = performance.now();
    for (const action of actions) state = reduce("chat", state, action, __CLOCK__);
    best.reduce = Math.min(best.reduce, performance.now() - start);
    final = state;
    const envelopes = actions.map((action, i) => ({ channel, action, serverSeq: i + 1 }));
    const rec = new Reconciler("bench", () => __CLOCK__);
    rec.subscribe({ resource: channel, state: initial, fromSeq: 0 });
    start = performance.now();
    for (const envelope of envelopes) rec.receive(envelope);
    best.receive = Math.min(best.receive, performance.now() - start);
  }
  return { ...best, turns: final.turns.length, active: final.activeTurn !== undefined };
}""".replace("__CLOCK__", str(CLOCK))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3, help="runs; the best is kept")
    args = parser.parse_args()
    executable = chromium_path()
    if executable is None:
        sys.exit("no Chromium installed (Debian: apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    actions = [wire.unstructure(action) for action in stream(args.turns)]
    text = json.dumps({
        "channel": initial_state().resource,
        "initial": wire.unstructure(initial_state()),
        "actions": actions,
        "repeat": args.repeat,
    })
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable, args=list(FLAGS), headless=True
        )
        try:
            context = browser.new_context()
            context.route("**/*", lambda route: route.abort())
            context.route(f"{ORIGIN}/**", serve_web)
            page = context.new_page()
            page.goto(f"{ORIGIN}/__modules__.html")
            result = page.evaluate(_RUN, text)
        finally:
            browser.close()
    assert result["turns"] == args.turns and not result["active"], result
    count = args.turns * ACTIONS_PER_TURN
    print(f"web client, {args.turns} turns ({count} actions), best of {args.repeat}:")
    for name in ("reduce", "receive"):
        ms = result[name]
        rate, cost = count / ms * 1000, ms * 1000 / count
        print(f"  {name:8} {rate:12,.0f} actions/s  {cost:8.2f} µs/action")


if __name__ == "__main__":
    main()
