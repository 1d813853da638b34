// The Inspector: each subscribed channel's live state as a tree, the action log, and this
// page's own actions with their fate (the write-ahead reconciler made visible). It reads
// only `window.ahpClient` (docs/web.md). Everything shown came from the host or another
// client, so it reaches the DOM through textContent and attributes, never as HTML.

import { el } from "./dom.js";

const RENDER_EVERY_MS = 100;
const MAX_LOG_ROWS = 300; // rows drawn; the page keeps 2000 envelopes
const MAX_SETTLED_ROWS = 200;
const MAX_CHILDREN = 500; // children of one object or array drawn at once
const MAX_TEXT = 400; // characters of a string shown before "Show all"
const MAX_DIFFS = 50;
const MAX_CACHED_NODES = 5000;

function clock(ms) {
  const d = new Date(ms);
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

function childPath(path, key) {
  return path === "" ? String(key) : `${path}.${key}`;
}

function isBranch(value) {
  return value !== null && typeof value === "object";
}

// The paths where `a` and `b` differ (at most `limit`). The reducers share what an action
// left unchanged, so `===` cuts every untouched subtree short.
function diffPaths(a, b, path = "", out = [], limit = MAX_DIFFS) {
  if (a === b || out.length >= limit) return out;
  if (isBranch(a) && isBranch(b) && Array.isArray(a) === Array.isArray(b)) {
    const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
    for (const key of keys) {
      diffPaths(a[key], b[key], childPath(path, key), out, limit);
      if (out.length >= limit) break;
    }
    return out;
  }
  out.push(path === "" ? "(the whole state)" : path);
  return out;
}

// Give `select` exactly these [value, text] options, touching it only when they changed:
// rebuilding the options of an open dropdown would close it under the user's pointer.
function setOptions(select, options) {
  const key = JSON.stringify(options);
  if (select.dataset.options === key) return;
  const value = select.value;
  select.replaceChildren(...options.map(([v, text, disabled]) => el("option", { value: v, text, disabled })));
  select.dataset.options = key;
  if (options.some(([v]) => v === value)) select.value = value;
}

function originText(origin, ownId) {
  if (!origin) return "host";
  const who = origin.clientId === ownId ? "this page" : String(origin.clientId);
  return `${who} #${origin.clientSeq}`;
}

class Inspector {
  constructor(container, ahp) {
    this.container = container;
    this.ahp = ahp;
    this.chosen = null; // the channel the user picked; null follows the open chat
    this.view = "optimistic"; // or "confirmed"
    this.open = new Set(); // "channel|view|/key/key" of expanded nodes
    this.nodes = new Map(); // "channel|view|/key/key" -> {value, node}: unchanged values keep their node
    this.rows = new WeakMap(); // log entry -> its row (entries never change)
    this.watched = new Set(); // channels subscribed to from here, for the Inspector alone
    this.timer = 0;
    this.dirty = true;
    this.build();
    const schedule = () => this.schedule();
    for (const name of ["state", "log", "settled", "connection", "ready"]) ahp.events.addEventListener(name, schedule);
    document.addEventListener("ahp-view", (e) => {
      if (e.detail && e.detail.view === "inspector") this.render();
    });
  }

  build() {
    const heading = (id, text) => el("h2", { id, text });
    this.channel = el("select", { id: "inspector-channel" });
    this.channel.addEventListener("change", () => {
      this.chosen = this.channel.value;
      this.render();
    });
    this.viewPick = el("select", { id: "inspector-state-view" },
      el("option", { value: "optimistic", text: "Optimistic (what the page shows)" }),
      el("option", { value: "confirmed", text: "Confirmed (what the host confirmed)" }));
    this.viewPick.addEventListener("change", () => {
      this.view = this.viewPick.value;
      this.render();
    });
    this.watchInput = el("input", { id: "inspector-watch", type: "text", placeholder: "ahp-terminal:/…, ahp-session:/…", autocomplete: "off", spellcheck: "false" });
    this.watchError = el("p", { className: "error", role: "alert" });
    const watchForm = el("form", { className: "inspector-controls inspector-watch", "aria-label": "Watch a channel" },
      el("label", { for: "inspector-watch", text: "Watch a channel" }), this.watchInput,
      el("button", { type: "submit", text: "Watch" }));
    watchForm.addEventListener("submit", (e) => {
      e.preventDefault();
      this.watch(this.watchInput.value.trim());
    });
    this.unwatch = el("button", { type: "button", text: "Stop watching", hidden: true });
    this.unwatch.addEventListener("click", () => {
      const channel = this.current();
      if (!channel || !this.watched.has(channel)) return;
      this.watched.delete(channel);
      // the chat view may have opened it since: it keeps it
      if (channel !== this.ahp.session && channel !== this.ahp.chat) this.ahp.client.unsubscribe(channel);
      this.chosen = null;
      this.render();
    });
    this.stateInfo = el("p", { className: "meta", role: "status" });
    this.diff = el("div", { className: "inspector-diff" });
    this.tree = el("ul", { className: "state-tree", "aria-label": "State" });
    const stateBox = el("section", { className: "inspector-part inspector-state", "aria-labelledby": "inspector-state-h" },
      heading("inspector-state-h", "State"),
      el("div", { className: "inspector-controls" },
        el("label", { for: "inspector-channel", text: "Channel" }), this.channel,
        el("label", { for: "inspector-state-view", text: "State" }), this.viewPick, this.unwatch),
      watchForm, this.watchError, this.stateInfo, this.diff, this.tree);

    this.logChannel = el("select", { id: "inspector-log-channel" });
    this.logChannel.addEventListener("change", () => this.renderLog());
    this.logType = el("input", { id: "inspector-log-type", type: "search", placeholder: "e.g. chat/delta", autocomplete: "off" });
    this.logType.addEventListener("input", () => this.renderLog());
    this.logCount = el("p", { className: "meta", role: "status" });
    this.logBody = el("tbody");
    const logTable = el("table", { className: "inspector-table", "aria-label": "Action log" },
      el("thead", {}, el("tr", {}, ...["serverSeq", "Channel", "Type", "Origin", "Time", "Outcome"].map((t) => el("th", { scope: "col", text: t })))),
      this.logBody);
    const logBox = el("section", { className: "inspector-part inspector-log", "aria-labelledby": "inspector-log-h" },
      heading("inspector-log-h", "Action log"),
      el("div", { className: "inspector-controls" },
        el("label", { for: "inspector-log-channel", text: "Channel" }), this.logChannel,
        el("label", { for: "inspector-log-type", text: "Type contains" }), this.logType),
      this.logCount, el("div", { className: "table-wrap" }, logTable));

    this.settledBody = el("tbody");
    this.settledCount = el("p", { className: "meta", role: "status" });
    const settledTable = el("table", { className: "inspector-table", "aria-label": "This page's actions" },
      el("thead", {}, el("tr", {}, ...["clientSeq", "Channel", "Type", "Fate", "Reason", "Time"].map((t) => el("th", { scope: "col", text: t })))),
      this.settledBody);
    const settledBox = el("section", { className: "inspector-part inspector-settled", "aria-labelledby": "inspector-settled-h" },
      heading("inspector-settled-h", "This page's actions"),
      el("p", { className: "meta", text: "Each action this page dispatched: applied at once (pending), then confirmed or rejected by the host, or dropped when no answer came before a reconnect." }),
      this.settledCount, el("div", { className: "table-wrap" }, settledTable));

    this.container.replaceChildren(stateBox, settledBox, logBox);
  }

  schedule() {
    if (this.container.hidden) {
      this.dirty = true; // drawn when shown
      return;
    }
    if (this.timer) return;
    this.timer = setTimeout(() => this.render(), RENDER_EVERY_MS);
  }

  render() {
    clearTimeout(this.timer);
    this.timer = 0;
    if (this.container.hidden) {
      this.dirty = true;
      return;
    }
    this.dirty = false;
    this.renderState();
    this.renderSettled();
    this.renderLog();
    document.dispatchEvent(new CustomEvent("ahp-inspector-render"));
  }

  // Subscribe to `channel` (a terminal, another session or chat) to see its state here.
  async watch(channel) {
    this.watchError.textContent = "";
    if (!channel) return;
    if (channel.length > 2048 || !/^[a-z][a-z0-9+.-]*:/i.test(channel)) {
      this.watchError.textContent = "Not a channel URI (e.g. ahp-terminal:/…).";
      return;
    }
    const had = this.ahp.channels.includes(channel);
    try {
      await this.ahp.client.subscribe(channel);
    } catch (error) {
      this.watchError.textContent = `The host refused to subscribe: ${error.message}`;
      return;
    }
    if (!had) this.watched.add(channel);
    this.chosen = channel;
    this.watchInput.value = "";
    this.render();
  }

  // -- state ---------------------------------------------------------------------------

  current() {
    const channels = this.ahp.channels;
    if (this.chosen && channels.includes(this.chosen)) return this.chosen;
    const follow = [this.ahp.chat, this.ahp.session, "ahp-root://"].find((c) => c && channels.includes(c));
    return follow || channels[0] || null;
  }

  renderState() {
    const channels = this.ahp.channels;
    const channel = this.current();
    const options = channels.map((c) => [c, this.watched.has(c) ? `${c} (watched)` : c]);
    if (this.chosen && !channels.includes(this.chosen)) options.push([this.chosen, `${this.chosen} (no longer subscribed)`, true]);
    setOptions(this.channel, options);
    if (channel) this.channel.value = channel;
    this.unwatch.hidden = !(channel && this.watched.has(channel));
    if (!channel) {
      this.stateInfo.textContent = "Not subscribed to any channel yet.";
      this.tree.replaceChildren();
      this.diff.replaceChildren();
      return;
    }
    const pending = this.ahp.pending(channel);
    const optimistic = this.ahp.state(channel);
    const confirmed = this.ahp.confirmed(channel);
    this.stateInfo.textContent = pending.length
      ? `${pending.length} action${pending.length === 1 ? "" : "s"} of this page pending on this channel.`
      : "No action of this page pending on this channel: the optimistic state is the confirmed one.";
    if (pending.length) {
      const paths = diffPaths(confirmed, optimistic);
      this.diff.replaceChildren(
        el("p", { className: "meta", text: paths.length ? "The optimistic state differs from the confirmed one at:" : "The pending actions change nothing yet." }),
        el("ul", { className: "diff-paths", "aria-label": "Pending differences" }, ...paths.map((p) => el("li", {}, el("code", { text: p })))),
        el("ul", { className: "pending-actions", "aria-label": "Pending actions" }, ...pending.map((p) => el("li", { text: `#${p.clientSeq} ${p.action && p.action.type}` }))));
    } else {
      this.diff.replaceChildren();
    }
    const value = this.view === "confirmed" ? confirmed : optimistic;
    if (this.nodes.size > MAX_CACHED_NODES) this.nodes.clear();
    const prefix = `${channel}|${this.view}|`;
    const top = this.children(prefix, "", value);
    if (this.tree.dataset.prefix !== prefix || this.tree.childNodes.length !== top.length || top.some((n, i) => this.tree.childNodes[i] !== n)) {
      this.tree.replaceChildren(...top);
      this.tree.dataset.prefix = prefix;
    }
  }

  // The items of an object's or array's children, drawn only while their parent is open.
  // `path` is for people and tests (`turns.0.id`); `where` names the node in the caches
  // without ambiguity: a key may hold "." (an agent's tool input, say), never an
  // unescaped "/".
  children(prefix, path, value, where = "") {
    if (!isBranch(value)) return [this.node(prefix, path, "(state)", value, where)];
    const keys = Object.keys(value);
    const items = keys.slice(0, MAX_CHILDREN).map((key) => this.node(prefix, childPath(path, key), key, value[key], `${where}/${encodeURIComponent(key)}`));
    if (keys.length > MAX_CHILDREN) items.push(el("li", { className: "meta", text: `… ${keys.length - MAX_CHILDREN} more` }));
    return items;
  }

  node(prefix, path, key, value, where) {
    const id = prefix + where;
    const hit = this.nodes.get(id);
    if (hit && hit.value === value) return hit.node;
    let node;
    if (isBranch(value)) {
      const size = Object.keys(value).length;
      const summary = Array.isArray(value) ? `[${size}]` : `{${size}}`;
      const details = el("details", { "data-path": path },
        el("summary", {}, el("span", { className: "tree-key", text: key }), el("span", { className: "tree-kind", text: ` ${summary}` })));
      const list = el("ul");
      details.append(list);
      let filled = false;
      const fill = () => {
        list.replaceChildren(...this.children(prefix, path, value, where));
        filled = true;
      };
      if (this.open.has(id)) {
        details.open = true;
        fill();
      }
      details.addEventListener("toggle", () => {
        if (details.open) {
          this.open.add(id);
          if (!filled) fill();
        } else {
          this.open.delete(id);
          list.replaceChildren(); // closed: nothing of it kept
          filled = false;
        }
      });
      node = el("li", {}, details);
    } else {
      node = el("li", { "data-path": path }, el("span", { className: "tree-key", text: key }), el("span", { className: "tree-sep", text: ": " }), this.leaf(value));
    }
    this.nodes.set(id, { value, node });
    return node;
  }

  leaf(value) {
    if (typeof value === "string") {
      const span = el("span", { className: "tree-value string" });
      if (value.length <= MAX_TEXT) {
        span.textContent = JSON.stringify(value);
        return span;
      }
      span.textContent = `${JSON.stringify(value.slice(0, MAX_TEXT))}…`;
      const more = el("button", { type: "button", className: "show-all", text: `Show all ${value.length} characters` });
      more.addEventListener("click", () => {
        span.textContent = JSON.stringify(value);
        more.remove();
      });
      return el("span", {}, span, more);
    }
    const kind = value === null ? "null" : typeof value;
    return el("span", { className: `tree-value ${kind}`, text: value === undefined ? "undefined" : String(value) });
  }

  // -- this page's actions ---------------------------------------------------------------

  renderSettled() {
    const all = this.ahp.settled;
    const shown = all.slice(-MAX_SETTLED_ROWS).reverse();
    const counts = {};
    for (const r of all) counts[r.fate] = (counts[r.fate] || 0) + 1;
    this.settledCount.textContent = all.length
      ? `${all.length} action${all.length === 1 ? "" : "s"}: ${Object.entries(counts).map(([f, n]) => `${n} ${f}`).join(", ")}${all.length > shown.length ? ` (the last ${shown.length} shown)` : ""}.`
      : "This page has dispatched no action yet.";
    const key = `${all.length}|${shown.map((r) => `${r.clientSeq}:${r.fate}`).join(",")}`;
    if (this.settledKey === key) return;
    this.settledKey = key;
    this.settledBody.replaceChildren(...shown.map((r) => el("tr", { className: `fate-${r.fate}`, "data-client-seq": r.clientSeq },
      el("td", { text: r.clientSeq }), el("td", { className: "channel", text: r.channel }), el("td", { text: r.type }),
      el("td", { className: "fate", text: r.fate }), el("td", { text: r.reason ?? "" }), el("td", { text: clock(r.time) }))));
  }

  // -- the action log ----------------------------------------------------------------------

  renderLog() {
    const log = this.ahp.log;
    const seen = new Set(log.map((e) => e.channel));
    const wanted = this.logChannel.value;
    setOptions(this.logChannel, [["", "All channels"], ...[...seen].sort().map((c) => [c, c])]);
    this.logChannel.value = seen.has(wanted) ? wanted : "";
    const channel = this.logChannel.value;
    const needle = this.logType.value.trim().toLowerCase();
    const own = this.ahp.client ? this.ahp.client.clientId : null;
    const rows = [];
    let matched = 0;
    for (let n = log.length - 1; n >= 0; n--) {
      const e = log[n];
      if (channel && e.channel !== channel) continue;
      if (needle && !String(e.type).toLowerCase().includes(needle)) continue;
      matched++;
      if (rows.length < MAX_LOG_ROWS) rows.push(this.logRow(e, own));
    }
    const filtered = channel || needle;
    this.logCount.textContent = `${filtered ? `${matched} of ${log.length}` : log.length} envelope${log.length === 1 ? "" : "s"}, newest first${matched > rows.length ? ` (the newest ${rows.length} shown)` : ""}; the page keeps the last 2000.`;
    this.logBody.replaceChildren(...rows);
  }

  logRow(e, own) {
    let row = this.rows.get(e);
    if (row) return row;
    const outcome = e.rejectionReason !== undefined ? `${e.kind}: ${e.rejectionReason}` : e.kind;
    row = el("tr", { className: `kind-${e.kind}`, "data-server-seq": e.serverSeq },
      el("td", { text: e.serverSeq }), el("td", { className: "channel", text: e.channel }), el("td", { className: "type", text: e.type }),
      el("td", { className: "origin", text: originText(e.origin, own) }), el("td", { text: clock(e.time) }), el("td", { text: outcome ?? "" }));
    this.rows.set(e, row);
    return row;
  }
}

// Fill `container` (the region "Inspector") with the Inspector of `ahpClient`; it draws
// while the container is shown, at most every 100 ms.
export function mountInspector(container, ahpClient) {
  const inspector = new Inspector(container, ahpClient);
  if (!container.hidden) inspector.render();
  return inspector;
}
