// The page: sessions, chat, connection. Everything an agent or another client sent is
// put into the DOM as text (textContent) or through renderMarkdown, never as HTML.
import { AhpClient } from "./client.js";
import { el } from "./dom.js";
import { renderMarkdown, safeUrl } from "./markdown.js";
import { mountInspector } from "./inspector.js";

const ROOT = "ahp-root://";
const PAGE_SIZE = 50;
const ACTIVITY = 31, ERROR = 2, IN_PROGRESS = 8, INPUT_NEEDED = 24;

const $ = (id) => document.getElementById(id);

// Put exactly `nodes` into `parent`, in order, moving only what is out of place: a node
// left where it was keeps its focus, its selection and what the user typed.
function syncChildren(parent, nodes) {
  let index = 0;
  for (const node of nodes) {
    const current = parent.children[index];
    if (current !== node) parent.insertBefore(node, current || null);
    index++;
  }
  while (parent.children.length > nodes.length) parent.lastElementChild.remove();
}

// A node made by `make` for `key`, the same node again while the key is the same.
class NodeCache {
  constructor() {
    this.entries = new Map();
    this.used = new Set();
  }

  get(id, key, make) {
    this.used.add(id);
    const hit = this.entries.get(id);
    if (hit && hit.key === key) return hit.node;
    const node = make();
    this.entries.set(id, { key, node });
    return node;
  }

  sweep() {
    for (const id of this.entries.keys()) if (!this.used.has(id)) this.entries.delete(id);
    this.used.clear();
  }

  clear() {
    this.entries.clear();
    this.used.clear();
  }
}

function newId() {
  return crypto.randomUUID ? crypto.randomUUID() : `${Date.now()}-${Math.random().toString(36).slice(2)}`;
}

function nowIso() {
  return new Date().toISOString();
}

function plain(value) {
  // StringOrMarkdown: a string is shown as it is, {markdown} rendered
  if (value && typeof value === "object" && typeof value.markdown === "string") return renderMarkdown(value.markdown, document);
  return document.createTextNode(value === undefined || value === null ? "" : String(value));
}

function statusWord(status) {
  switch ((status ?? 1) & ACTIVITY) {
    case INPUT_NEEDED: return "needs you";
    case IN_PROGRESS: return "working";
    case ERROR: return "error";
    default: return "idle";
  }
}

// -- the token -----------------------------------------------------------------------

function takeToken() {
  const hash = new URLSearchParams(location.hash.slice(1));
  let token = hash.get("token");
  if (token) {
    sessionStorage.setItem("ahp-token", token);
    // out of the address bar, the history and anything that reads location later
    history.replaceState(null, "", location.pathname + location.search);
  } else {
    token = sessionStorage.getItem("ahp-token");
  }
  return token || null;
}

// -- the app ---------------------------------------------------------------------------

class App {
  constructor() {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    this.client = new AhpClient({ url: `${scheme}//${location.host}/`, token: takeToken() });
    this.sessions = new Map(); // uri -> SessionSummary, in the host's order
    this.nextCursor = null;
    this.session = null; // the open session's URI
    this.chat = null; // the open chat's URI
    this.models = new Map(); // session URI -> model id chosen at creation
    this.openDetails = new Set(); // folded parts the user opened
    this.requestForms = new Map(); // input request id -> its form (kept while typing)
    this.sessionNodes = new NodeCache();
    this.turnNodes = new NodeCache();
    this.partNodes = new NodeCache();
    this.disposeArmed = false;
    this.frame = 0;
    this.bind();
    this.exposeForInspector();
    this.inspector = mountInspector($("inspector"), window.ahpClient);
  }

  exposeForInspector() {
    const client = this.client;
    const app = this;
    // The object the Inspector reads (docs/web.md): the client, its reconciler, logs.
    window.ahpClient = {
      client,
      get channels() { return client.channels; },
      get reconciler() { return client.reconciler; },
      get log() { return client.log; },
      get settled() { return client.settledLog; },
      get connection() { return client.connection; },
      get session() { return app.session; },
      get chat() { return app.chat; },
      state: (channel) => client.state(channel),
      confirmed: (channel) => client.confirmed(channel),
      pending: (channel) => client.pending(channel),
      events: client,
    };
  }

  bind() {
    const c = this.client;
    c.addEventListener("connection", () => this.renderConnection());
    c.addEventListener("state", () => this.schedule());
    c.addEventListener("ready", (e) => this.onReady(e.detail));
    c.addEventListener("notification", (e) => this.onNotification(e.detail));
    c.addEventListener("settled", (e) => {
      if (e.detail.kind === "rejected") this.notice(`The host refused an action: ${e.detail.rejectionReason}`);
      else if (e.detail.kind === "dropped") this.notice(`An action got no answer (${e.detail.rejectionReason}): check that it was done, and do it again if not.`);
    });
    $("composer").addEventListener("submit", (e) => {
      e.preventDefault();
      this.send();
    });
    $("message").addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        this.send();
      }
    });
    $("cancel").addEventListener("click", () => this.cancelTurn());
    $("new-session").addEventListener("click", () => this.newSession());
    $("more-sessions").addEventListener("click", () => this.loadSessions(this.nextCursor));
    $("dispose").addEventListener("click", () => this.dispose());
    $("chat-select").addEventListener("change", (e) => this.openChat(e.target.value));
    $("new-form").addEventListener("submit", (e) => {
      e.preventDefault();
      const provider = $("new-agent").value;
      const model = $("new-model").value || undefined;
      $("new-dialog").close();
      this.createSession(provider, model);
    });
    $("new-agent").addEventListener("change", () => this.fillModels());
    $("new-cancel").addEventListener("click", () => $("new-dialog").close());
    $("menu").addEventListener("click", () => {
      const open = !document.body.classList.contains("sidebar-open");
      document.body.classList.toggle("sidebar-open", open);
      $("menu").setAttribute("aria-expanded", String(open));
    });
    $("tab-chat").addEventListener("click", () => this.showView("chat"));
    $("tab-inspector").addEventListener("click", () => this.showView("inspector"));
  }

  showView(name) {
    const inspector = name === "inspector";
    $("inspector").hidden = !inspector;
    $("chat-view").hidden = inspector;
    $("tab-chat").setAttribute("aria-pressed", String(!inspector));
    $("tab-inspector").setAttribute("aria-pressed", String(inspector));
    // a phone shows the Inspector full-screen, even with no session open
    document.body.classList.toggle("inspecting", inspector);
    document.dispatchEvent(new CustomEvent("ahp-view", { detail: { view: name } }));
  }

  start() {
    this.renderConnection();
    this.client.start();
  }

  notice(text) {
    const box = $("notice");
    box.textContent = text;
    box.hidden = !text;
  }

  renderConnection() {
    const { status, detail } = this.client.connection;
    const line = $("connection");
    line.dataset.status = status;
    const words = {
      connecting: "Connecting…",
      connected: detail === "connected" ? "Connected" : `Connected (${detail})`,
      reconnecting: `Disconnected: ${detail}…`,
      refused: `Refused: ${detail}`,
      failed: `Connection failed: ${detail}`,
    };
    line.textContent = words[status] || status;
    document.body.classList.toggle("offline", status !== "connected");
  }

  async onReady({ reconnected }) {
    // protocol notifications are not replayed: the session list is fetched again
    await this.loadSessions(null);
    if (!reconnected) {
      const wanted = new URLSearchParams(location.search).get("session");
      if (wanted && this.sessions.has(wanted)) await this.openSession(wanted);
    } else if (this.session && !this.client.channels.includes(this.session)) {
      // the host lost it (disposed while we were away)
      this.closeSession();
    }
    this.schedule();
  }

  onNotification({ method, params }) {
    if (method === "root/sessionAdded" && params.summary) {
      const fresh = new Map([[params.summary.resource, params.summary]]);
      for (const [uri, summary] of this.sessions) if (uri !== params.summary.resource) fresh.set(uri, summary);
      this.sessions = fresh;
    } else if (method === "root/sessionRemoved") {
      this.sessions.delete(params.session);
      if (this.session === params.session) this.closeSession();
    } else if (method === "root/sessionSummaryChanged") {
      const old = this.sessions.get(params.session);
      if (old) this.sessions.set(params.session, { ...old, ...params.changes, resource: old.resource });
    } else {
      return;
    }
    this.schedule();
  }

  async loadSessions(cursor) {
    const params = { channel: ROOT, limit: PAGE_SIZE };
    if (cursor) params.cursor = cursor;
    let result;
    try {
      result = await this.client.request("listSessions", params);
    } catch (error) {
      this.notice(`Could not list the sessions: ${error.message}`);
      return;
    }
    if (!cursor) this.sessions = new Map();
    for (const summary of result.items || []) this.sessions.set(summary.resource, summary);
    this.nextCursor = result.nextCursor || null;
    this.schedule();
  }

  // -- sessions ----------------------------------------------------------------------

  agents() {
    const root = this.client.state(ROOT);
    return (root && root.agents) || [];
  }

  newSession() {
    const agents = this.agents();
    if (!agents.length) {
      this.notice("The host offers no agent.");
      return;
    }
    const choices = agents.reduce((n, a) => n + Math.max(1, (a.models || []).length), 0);
    if (choices === 1) {
      const agent = agents[0];
      this.createSession(agent.provider, agent.models && agent.models[0] ? agent.models[0].id : undefined);
      return;
    }
    const select = $("new-agent");
    select.replaceChildren(...agents.map((a) => el("option", { value: a.provider, text: a.displayName || a.provider })));
    this.fillModels();
    $("new-dialog").showModal();
  }

  fillModels() {
    const agent = this.agents().find((a) => a.provider === $("new-agent").value);
    const models = (agent && agent.models) || [];
    $("new-model").replaceChildren(...models.map((m) => el("option", { value: m.id, text: m.name || m.id })));
    $("new-model").disabled = !models.length;
  }

  async createSession(provider, model) {
    const uri = `ahp-session:/${newId()}`;
    try {
      await this.client.request("createSession", { channel: uri, provider });
    } catch (error) {
      this.notice(`The host refused the new session: ${error.message}`);
      return;
    }
    if (model) this.models.set(uri, model);
    await this.openSession(uri);
    this.render(); // the composer shows now, so it can take the focus
    $("message").focus();
  }

  async openSession(uri) {
    if (this.session && this.session !== uri) {
      if (this.chat) this.client.unsubscribe(this.chat);
      this.client.unsubscribe(this.session);
    }
    this.session = uri;
    this.chat = null;
    this.disposeArmed = false;
    this.notice("");
    // a reload of the tab opens the same session again
    history.replaceState(null, "", `${location.pathname}?session=${encodeURIComponent(uri)}`);
    this.requestForms.clear();
    this.turnNodes.clear();
    this.partNodes.clear();
    document.body.classList.remove("sidebar-open");
    try {
      await this.client.subscribe(uri);
    } catch (error) {
      this.notice(`Could not open the session: ${error.message}`);
      this.session = null;
      this.schedule();
      return;
    }
    const state = this.client.state(uri);
    const chat = (state && (state.defaultChat || (state.chats[0] && state.chats[0].resource))) || null;
    if (chat) await this.openChat(chat);
    this.schedule();
  }

  async openChat(uri) {
    if (this.chat === uri) return;
    if (this.chat) this.client.unsubscribe(this.chat);
    this.chat = uri;
    this.requestForms.clear();
    try {
      await this.client.subscribe(uri);
    } catch (error) {
      this.notice(`Could not open the chat: ${error.message}`);
    }
    this.schedule();
  }

  canFork() {
    const session = this.session ? this.client.state(this.session) : undefined;
    const agent = session && this.agents().find((a) => a.provider === session.provider);
    const chats = agent && agent.capabilities && agent.capabilities.multipleChats;
    return Boolean(chats && chats.fork);
  }

  // A new chat of the session with this chat's history through `turnId`.
  async fork(turnId) {
    const uri = `ahp-chat:/${newId()}`;
    try {
      await this.client.request("createChat", { channel: this.session, chat: uri, source: { kind: "fork", chat: this.chat, turnId } });
    } catch (error) {
      this.notice(`The host refused the fork: ${error.message}`);
      return;
    }
    await this.openChat(uri);
  }

  closeSession() {
    this.session = null;
    this.chat = null;
    history.replaceState(null, "", location.pathname);
    this.schedule();
  }

  async dispose() {
    if (!this.session) return;
    if (!this.disposeArmed) {
      this.disposeArmed = true;
      $("dispose").textContent = "Confirm dispose";
      return;
    }
    const uri = this.session;
    this.disposeArmed = false;
    try {
      await this.client.request("disposeSession", { channel: uri });
    } catch (error) {
      this.notice(`The host refused to dispose of the session: ${error.message}`);
      return;
    }
    if (this.chat) this.client.unsubscribe(this.chat);
    this.client.unsubscribe(uri);
    this.sessions.delete(uri);
    this.closeSession();
  }

  // -- the chat ------------------------------------------------------------------------

  chatState() {
    return this.chat ? this.client.state(this.chat) : undefined;
  }

  send() {
    const box = $("message");
    const text = box.value;
    const chat = this.chatState();
    if (!text.trim() || !chat) return;
    const message = { text, origin: { kind: "user" } };
    // the model chosen at creation, else the one the chat's last message went with
    const last = chat.activeTurn || chat.turns[chat.turns.length - 1];
    const model = this.models.get(this.session) || (last && last.message.model && last.message.model.id);
    if (model) message.model = { id: model };
    if (chat.activeTurn) {
      // a turn runs: the message waits in the queue and starts when the turn ends
      this.client.dispatch(this.chat, { type: "chat/pendingMessageSet", kind: "queued", id: `queued-${newId()}`, message });
    } else {
      this.client.dispatch(this.chat, { type: "chat/turnStarted", turnId: `turn-${newId()}`, startedAt: nowIso(), message });
    }
    box.value = "";
  }

  cancelTurn() {
    const chat = this.chatState();
    if (!chat || !chat.activeTurn) return;
    const started = Date.parse(chat.activeTurn.startedAt);
    const duration = Number.isFinite(started) ? Math.max(0, Date.now() - started) : 0;
    this.client.dispatch(this.chat, { type: "chat/turnCancelled", turnId: chat.activeTurn.id, duration });
  }

  confirmTool(turnId, toolCall, approved) {
    const action = approved
      ? { type: "chat/toolCallConfirmed", turnId, toolCallId: toolCall.toolCallId, approved: true, confirmed: "user-action" }
      : { type: "chat/toolCallConfirmed", turnId, toolCallId: toolCall.toolCallId, approved: false, reason: "denied" };
    this.client.dispatch(this.chat, action);
  }

  // -- rendering -------------------------------------------------------------------------

  schedule() {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.render();
    });
  }

  render() {
    this.renderSessions();
    this.renderChat();
    document.dispatchEvent(new CustomEvent("ahp-render"));
  }

  renderSessions() {
    const list = $("sessions");
    const items = [];
    for (const summary of this.sessions.values()) {
      const current = summary.resource === this.session;
      const key = JSON.stringify([summary.title, summary.status, summary.provider, current]);
      items.push(this.sessionNodes.get(summary.resource, key, () => this.sessionItem(summary, current)));
    }
    this.sessionNodes.sweep();
    if (!items.length) items.push(this.sessionNodes.get("", "", () => el("li", { className: "empty", text: "No sessions yet." })));
    syncChildren(list, items);
    $("more-sessions").hidden = !this.nextCursor;
  }

  sessionItem(summary, current) {
    const activity = (summary.status ?? 1) & ACTIVITY;
    const title = summary.title || "New session";
    const badge = activity === INPUT_NEEDED
      ? el("span", { className: "badge attention", text: "needs input" })
      : activity === IN_PROGRESS ? el("span", { className: "badge working", text: "working" })
        : activity === ERROR ? el("span", { className: "badge error", text: "error" }) : null;
    const button = el("button", {
      type: "button", className: "session-button", "aria-current": current ? "true" : null,
      onclick: () => this.openSession(summary.resource),
    }, el("span", { className: "session-title", text: title }),
    el("span", { className: "session-meta", text: `${summary.provider} · ${statusWord(summary.status)}` }), badge);
    return el("li", { "data-session": summary.resource }, button);
  }

  renderChat() {
    const session = this.session ? this.client.state(this.session) : undefined;
    const chat = this.chatState();
    $("empty").hidden = Boolean(session);
    document.body.classList.toggle("has-session", Boolean(session));
    $("session-head").hidden = !session;
    $("composer").hidden = !chat;
    if (!this.disposeArmed) $("dispose").textContent = "Dispose session";
    if (!session) {
      document.title = "Agent host";
      $("transcript").replaceChildren();
      $("queued").hidden = true;
      $("heading").textContent = "Agent host";
      return;
    }
    const title = session.title || "New session";
    $("heading").textContent = title;
    document.title = `${title} · Agent host`;
    $("session-title").textContent = title;
    const agent = this.agents().find((a) => a.provider === session.provider);
    // the summary's status aggregates the chats' (the session state's does not)
    const summary = this.sessions.get(this.session);
    const status = summary ? summary.status : session.status;
    $("session-meta").textContent = `${agent ? agent.displayName || agent.provider : session.provider} · ${statusWord(status)}${session.lifecycle === "creationFailed" ? " · creation failed" : ""}`;
    const select = $("chat-select");
    const options = session.chats.map((c, n) => {
      const origin = c.origin && c.origin.kind !== "user" ? ` (${c.origin.kind === "sideChat" ? "side chat" : c.origin.kind})` : "";
      return el("option", { value: c.resource, selected: c.resource === this.chat, text: `${c.title || `Chat ${n + 1}`}${origin} · ${statusWord(c.status)}` });
    });
    select.replaceChildren(...options);
    select.disabled = session.chats.length < 2;
    if (this.chat && !session.chats.some((c) => c.resource === this.chat)) {
      // the open chat was removed: back to the session's default, if any
      const next = session.defaultChat || (session.chats[0] && session.chats[0].resource);
      const gone = this.chat;
      this.chat = null;
      this.client.unsubscribe(gone);
      if (next) this.openChat(next);
    }
    if (!chat) {
      $("transcript").replaceChildren();
      return;
    }
    this.renderTranscript(chat);
    this.renderQueue(chat);
    $("cancel").hidden = !chat.activeTurn;
    $("send").textContent = "Send";
    $("message").placeholder = chat.activeTurn ? "Message (queued until the turn ends)" : "Message (Enter sends, Shift+Enter for a new line)";
  }

  renderQueue(chat) {
    const queued = chat.queuedMessages || [];
    const list = $("queued");
    list.hidden = !queued.length && !chat.steeringMessage;
    const items = queued.map((m) => el("li", { className: "queued-message" },
      el("span", { className: "label", text: "Queued: " }), el("span", { text: m.message.text }),
      el("button", {
        type: "button", "aria-label": "Remove queued message", text: "✕",
        onclick: () => this.client.dispatch(this.chat, { type: "chat/pendingMessageRemoved", kind: "queued", id: m.id }),
      })));
    if (chat.steeringMessage) items.unshift(el("li", { className: "queued-message" }, el("span", { className: "label", text: "Steering: " }), el("span", { text: chat.steeringMessage.message.text })));
    list.replaceChildren(...items);
  }

  renderTranscript(chat) {
    const list = $("transcript");
    const atBottom = list.scrollHeight - list.scrollTop - list.clientHeight < 40;
    const items = [];
    // a finished turn does not change: its node is made once
    for (const turn of chat.turns) {
      items.push(this.turnNodes.get(`${this.chat}|${turn.id}`, `done|${turn.state}|${turn.responseParts.length}`, () => this.renderTurn(turn, false)));
    }
    if (chat.activeTurn) items.push(this.renderTurn(chat.activeTurn, true));
    this.turnNodes.sweep();
    syncChildren(list, items);
    this.partNodes.sweep();
    if (atBottom) list.scrollTop = list.scrollHeight;
  }

  renderTurn(turn, active) {
    const id = `${this.chat}|${turn.id}|${active ? "active" : "done"}`;
    const li = this.turnNodes.get(`${id}|li`, "", () => {
      const node = el("li", { className: `turn${active ? " active" : ""}`, "data-turn": turn.id });
      node.append(el("div", { className: "message user" }, el("span", { className: "who", text: "You" }), el("div", { className: "text", text: turn.message.text })),
        el("div", { className: "message agent" }));
      return node;
    });
    const reply = li.lastElementChild;
    const nodes = [this.partNodes.get(`${id}|who`, "", () => el("span", { className: "who", text: "Agent" }))];
    turn.responseParts.forEach((part, n) => {
      const key = JSON.stringify(part);
      const node = this.partNodes.get(`${id}|${n}`, key, () => this.renderPart(turn, part, active));
      if (node) nodes.push(node);
    });
    if (!active && turn.state === "complete" && this.canFork()) {
      nodes.push(el("div", { className: "turn-actions" }, el("button", {
        type: "button", className: "fork", text: "Fork from this turn", onclick: () => this.fork(turn.id),
      })));
    }
    if (active) nodes.push(this.partNodes.get(`${id}|streaming`, "", () => el("p", { className: "streaming", role: "status", text: "…" })));
    else if (turn.state === "cancelled") nodes.push(el("p", { className: "ended cancelled", text: "The turn was cancelled." }));
    else if (turn.state === "error") nodes.push(el("p", { className: "ended error", text: `The turn failed: ${turn.error ? turn.error.message : "an error"}` }));
    syncChildren(reply, nodes);
    return li;
  }

  folded(id, summary, body) {
    const details = el("details", { className: "folded", open: this.openDetails.has(id) });
    details.addEventListener("toggle", () => {
      if (details.open) this.openDetails.add(id); else this.openDetails.delete(id);
    });
    details.append(el("summary", { text: summary }), body);
    return details;
  }

  renderPart(turn, part, active) {
    switch (part.kind) {
      case "markdown": {
        const div = el("div", { className: "markdown" });
        div.append(renderMarkdown(part.content, document));
        return div;
      }
      case "reasoning":
        return this.folded(`${turn.id}/${part.id}`, "Reasoning", el("div", { className: "reasoning", text: part.content }));
      case "toolCall": return this.renderTool(turn, part.toolCall, active);
      case "inputRequest": return this.renderRequest(part, active);
      case "systemNotification": {
        const p = el("p", { className: "system" });
        p.append(plain(part.content));
        return p;
      }
      case "resource": return el("p", { className: "resource", text: `Resource: ${part.uri || ""}` });
      default: return el("p", { className: "unknown", text: `(a part of a kind this page does not show: ${part.kind})` });
    }
  }

  renderTool(turn, tc, active) {
    const status = tc.status;
    const box = el("div", { className: `tool status-${status}`, "data-tool-call": tc.toolCallId, "data-status": status });
    const words = {
      streaming: "preparing", "pending-confirmation": "waiting for your confirmation", running: "running",
      "auth-required": "needs authentication", "pending-result-confirmation": "result waiting for review",
      completed: tc.success === false ? "failed" : "done", cancelled: tc.reason === "denied" ? "denied" : "cancelled",
    };
    box.append(el("div", { className: "tool-head" },
      el("span", { className: "tool-name", text: tc.displayName || tc.toolName }),
      el("span", { className: "tool-status", text: words[status] || status })));
    if (tc.invocationMessage) {
      const p = el("p", { className: "tool-message" });
      p.append(plain(status === "completed" && tc.pastTenseMessage ? tc.pastTenseMessage : tc.invocationMessage));
      box.append(p);
    }
    if (tc.toolInput !== undefined) {
      const input = typeof tc.toolInput === "string" ? tc.toolInput : JSON.stringify(tc.toolInput, null, 2);
      box.append(this.folded(`${tc.toolCallId}/input`, "Input", el("pre", { className: "tool-input", text: input })));
    }
    if (status === "completed" || status === "pending-result-confirmation") {
      const out = el("div", { className: "tool-result" });
      for (const item of tc.content || []) {
        if (item.type === "text") out.append(el("pre", { text: item.text }));
        else out.append(el("p", { className: "meta", text: `(${item.type} content)` }));
      }
      if (tc.error && tc.error.message) out.append(el("p", { className: "error", text: tc.error.message }));
      box.append(this.folded(`${tc.toolCallId}/result`, "Result", out));
    }
    if (status === "pending-confirmation" && active) {
      box.append(el("p", { className: "confirm-title", text: tc.confirmationTitle ? String(tc.confirmationTitle.markdown ?? tc.confirmationTitle) : "Run this tool?" }),
        el("div", { className: "confirm-buttons" },
          el("button", { type: "button", className: "approve", text: "Approve", onclick: () => this.confirmTool(turn.id, tc, true) }),
          el("button", { type: "button", className: "deny", text: "Deny", onclick: () => this.confirmTool(turn.id, tc, false) })));
    }
    if (status === "cancelled" && tc.reasonMessage) box.append(el("p", { className: "meta" }, plain(tc.reasonMessage)));
    return box;
  }

  renderRequest(part, active) {
    const request = part.request;
    if (part.response !== undefined || !active) {
      const done = el("div", { className: "input-request done" });
      if (request.message) done.append(el("p", { text: request.message }));
      const answers = request.answers || {};
      for (const q of request.questions || []) {
        const answer = answers[q.id];
        let text = "(no answer)";
        if (answer && answer.state === "skipped") text = "(skipped)";
        else if (answer && answer.value) {
          // a choice by its label, as it was offered
          const label = (id) => ((q.options || []).find((o) => o.id === id) || { label: id }).label;
          const value = answer.value.value;
          text = Array.isArray(value) ? value.map(label).join(", ") : answer.value.kind === "selected" ? label(value) : String(value);
          if (answer.value.freeformValues) text += ` (${answer.value.freeformValues.join(", ")})`;
        }
        done.append(el("p", { className: "answer" }, el("span", { className: "label", text: `${q.title || q.message}: ` }), el("span", { text })));
      }
      done.append(el("p", { className: "meta", text: part.response === undefined ? "not answered" : part.response === "accept" ? "answered" : `${part.response}d` }));
      return done;
    }
    const kept = this.requestForms.get(request.id);
    if (kept) return kept;
    const form = this.buildRequestForm(request);
    this.requestForms.set(request.id, form);
    return form;
  }

  buildRequestForm(request) {
    const form = el("form", { className: "input-request", novalidate: true, "aria-label": request.message || "Question", "data-request": request.id });
    if (request.message) form.append(el("p", { className: "request-message", text: request.message }));
    if (request.url) {
      const href = safeUrl(request.url);
      if (href) form.append(el("p", {}, el("a", { href, rel: "noopener noreferrer", target: "_blank", text: `Open ${href}` })));
    }
    const readers = [];
    (request.questions || []).forEach((q, n) => {
      const id = `q-${request.id}-${n}`.replace(/[^A-Za-z0-9_-]/g, "_");
      const label = q.title ? `${q.title}: ${q.message}` : q.message;
      const field = el("div", { className: "question" });
      const draft = request.answers && request.answers[q.id] && request.answers[q.id].value;
      if (q.kind === "text" || q.kind === "number" || q.kind === "integer") {
        const numeric = q.kind !== "text";
        const input = el(numeric ? "input" : "textarea", { id, name: q.id, rows: numeric ? null : 2, type: numeric ? "number" : null, step: q.kind === "integer" ? "1" : numeric ? "any" : null, min: numeric ? q.min : null, max: numeric ? q.max : null, required: q.required });
        if (!numeric) { if (q.min !== undefined) input.minLength = q.min; if (q.max !== undefined) input.maxLength = q.max; }
        const initial = draft ? draft.value : q.defaultValue;
        if (initial !== undefined) input.value = String(initial);
        field.append(el("label", { for: id, text: label }), input);
        readers.push(() => {
          if (input.value === "") return q.required ? { error: `"${label}" needs an answer` } : null;
          if (!numeric) return { kind: "text", value: input.value };
          const value = Number(input.value);
          if (!Number.isFinite(value) || (q.kind === "integer" && !Number.isInteger(value))) return { error: `"${label}" needs a ${q.kind === "integer" ? "whole " : ""}number` };
          return { kind: "number", value };
        });
      } else if (q.kind === "boolean") {
        const input = el("input", { id, type: "checkbox", name: q.id });
        input.checked = Boolean(draft ? draft.value : q.defaultValue);
        field.append(input, el("label", { for: id, text: label }));
        readers.push(() => ({ kind: "boolean", value: input.checked }));
      } else if (q.kind === "single-select" || q.kind === "multi-select") {
        const many = q.kind === "multi-select";
        const set = el("fieldset", {}, el("legend", { text: label }));
        const boxes = (q.options || []).map((o, k) => {
          const oid = `${id}-${k}`;
          const input = el("input", { id: oid, type: many ? "checkbox" : "radio", name: id, value: o.id });
          if (draft && (many ? (draft.value || []).includes(o.id) : draft.value === o.id)) input.checked = true;
          else if (!draft && o.recommended && !many) input.checked = true;
          set.append(el("div", { className: "option" }, input, el("label", { for: oid, text: o.label }),
            o.description ? el("span", { className: "meta", text: ` ${o.description}` }) : null));
          return input;
        });
        let free = null;
        if (q.allowFreeformInput) {
          free = el("input", { type: "text", id: `${id}-free`, "aria-label": `${label} (your own answer)` });
          set.append(el("label", { for: `${id}-free`, text: "Or your own: " }), free);
        }
        field.append(set);
        readers.push(() => {
          const chosen = boxes.filter((b) => b.checked).map((b) => b.value);
          const extra = free && free.value.trim() ? [free.value.trim()] : undefined;
          if (many) {
            if ((q.min || 0) > chosen.length + (extra ? 1 : 0)) return { error: `"${label}" needs at least ${q.min}` };
            if (q.max !== undefined && chosen.length > q.max) return { error: `"${label}" takes at most ${q.max}` };
            return { kind: "selected-many", value: chosen, ...(extra ? { freeformValues: extra } : {}) };
          }
          if (!chosen.length && !extra) return q.required ? { error: `"${label}" needs a choice` } : null;
          return { kind: "selected", value: chosen[0] ?? "", ...(extra ? { freeformValues: extra } : {}) };
        });
      } else {
        field.append(el("p", { className: "meta", text: `${label} (a question of a kind this page does not know: ${q.kind})` }));
        readers.push(() => null);
      }
      form.append(field);
    });
    const error = el("p", { className: "error", role: "alert" });
    const submit = el("button", { type: "submit", text: "Submit answer" });
    const decline = el("button", { type: "button", text: "Decline" });
    form.append(error, el("div", { className: "request-buttons" }, submit, decline));
    const complete = (response, answers) => {
      const action = { type: "chat/inputCompleted", requestId: request.id, response };
      if (answers && Object.keys(answers).length) action.answers = answers;
      this.client.dispatch(this.chat, action);
    };
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      const answers = {};
      const questions = request.questions || [];
      for (let n = 0; n < questions.length; n++) {
        const value = readers[n]();
        if (value && value.error) {
          error.textContent = value.error;
          return;
        }
        answers[questions[n].id] = value ? { state: "submitted", value } : { state: "skipped" };
      }
      complete("accept", answers);
    });
    decline.addEventListener("click", () => complete("decline"));
    return form;
  }
}

const app = new App();
window.ahpApp = app;
app.start();
