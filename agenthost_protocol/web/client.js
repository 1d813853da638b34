// The page's AHP client: JSON-RPC over one WebSocket to the host that served the page.
// It owns a Reconciler (the write-ahead state of every subscribed channel), keeps an
// action log for the Inspector, and reconnects by itself (replay or snapshots).
import { Reconciler } from "./ahp/reconciler.js";

export const PROTOCOL_VERSION = "0.7.0";
const REQUEST_TIMEOUT_MS = 30000;
const MAX_LOG = 2000;
const MAX_MESSAGE_CHARS = 64 * 1024 * 1024;
const BACKOFF_MS = [250, 500, 1000, 2000, 4000];

function base64url(text) {
  const bytes = new TextEncoder().encode(text);
  let binary = "";
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function newId() {
  if (globalThis.crypto && crypto.randomUUID) return crypto.randomUUID();
  return `${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`;
}

export class RequestError extends Error {
  constructor(method, error) {
    super(`${method}: ${error && error.message ? error.message : "failed"}`);
    this.code = error && error.code;
    this.data = error && error.data;
  }
}

// Events (this is an EventTarget): "state" {channel}, "notification" {method, params},
// "connection" {status, detail}, "settled" {result of Reconciler.receive}, "log" {entry}.
export class AhpClient extends EventTarget {
  constructor({ url, token, tokenCheckUrl = "/token-check" }) {
    super();
    this.url = url;
    this.token = token;
    this.tokenCheckUrl = tokenCheckUrl;
    this.clientId = `web-${newId()}`;
    this.reconciler = new Reconciler(this.clientId);
    this.log = []; // {serverSeq, channel, type, origin, time, kind, rejectionReason?}
    this.settledLog = []; // the page's own actions and their fate
    this.connection = { status: "connecting", detail: "", attempts: 0, reconnects: 0, lastResult: null };
    this.serverInfo = null;
    this._ws = null;
    this._nextId = 1;
    this._requests = new Map();
    this._initialized = false;
    this._closed = false;
    this._timer = null;
    this._queue = [];
  }

  get channels() {
    return this.reconciler.channels;
  }

  tracks(channel) {
    return this.reconciler.channels.includes(channel);
  }

  // The state the page shows (the optimistic one); undefined for a channel not tracked.
  state(channel) {
    return this.tracks(channel) ? this.reconciler.optimistic(channel) : undefined;
  }

  confirmed(channel) {
    return this.tracks(channel) ? this.reconciler.confirmed(channel) : undefined;
  }

  pending(channel) {
    return this.tracks(channel) ? this.reconciler.pending(channel) : [];
  }

  start() {
    this._open();
  }

  close() {
    this._closed = true;
    clearTimeout(this._timer);
    if (this._ws) this._ws.close(1000, "page closed");
  }

  _setConnection(status, detail = "") {
    this.connection = { ...this.connection, status, detail };
    this.dispatchEvent(new CustomEvent("connection", { detail: this.connection }));
  }

  _open() {
    if (this._closed) return;
    const protocols = ["ahp"];
    if (this.token) protocols.push(`ahp.token.${base64url(this.token)}`);
    let ws;
    try {
      ws = new WebSocket(this.url, protocols);
    } catch (error) {
      this._setConnection("failed", String(error));
      return;
    }
    this._ws = ws;
    let opened = false;
    ws.onopen = () => {
      opened = true;
      this.connection.attempts = 0;
      this._handshake().catch((error) => {
        this._setConnection("failed", error.message);
        ws.close();
      });
    };
    ws.onmessage = (event) => {
      if (typeof event.data !== "string" || event.data.length > MAX_MESSAGE_CHARS) return;
      let message;
      try {
        message = JSON.parse(event.data);
      } catch {
        return;
      }
      if (message && typeof message === "object") this._onMessage(message);
    };
    ws.onclose = () => {
      if (this._ws !== ws) return;
      this._ws = null;
      for (const [, pending] of this._requests) {
        clearTimeout(pending.timer);
        pending.reject(new Error("the connection closed"));
      }
      this._requests.clear();
      if (this._closed) return;
      if (!opened) {
        this._whyRefused().then((refused) => {
          if (refused) {
            this._setConnection("refused", refused);
          } else {
            this._retry();
          }
        });
        return;
      }
      this._retry();
    };
  }

  // A browser sees no status for a refused WebSocket handshake: ask the host whether
  // the token is the reason (the answer is 204 or 401; the token travels in a header).
  async _whyRefused() {
    if (!this.token) return "This page has no access token: open the web address serve printed (it ends with #token=…).";
    try {
      const response = await fetch(this.tokenCheckUrl, {
        headers: { Authorization: `Bearer ${this.token}` }, cache: "no-store", credentials: "omit",
      });
      if (response.status === 401) return "The host refused this page's access token: open the web address serve printed last.";
    } catch {
      return null; // the host is not there: keep trying
    }
    return null;
  }

  _retry() {
    const attempt = this.connection.attempts++;
    const delay = BACKOFF_MS[Math.min(attempt, BACKOFF_MS.length - 1)];
    this._setConnection("reconnecting", `connection lost; reconnecting (attempt ${attempt + 1})`);
    clearTimeout(this._timer);
    this._timer = setTimeout(() => this._open(), delay);
  }

  async _handshake() {
    if (!this._initialized) {
      const result = await this.request("initialize", {
        channel: "ahp-root://", protocolVersions: [PROTOCOL_VERSION], clientId: this.clientId,
        clientInfo: { name: "agenthost-protocol web client" }, initialSubscriptions: ["ahp-root://"],
        locale: navigator.language,
      });
      this.serverInfo = result.serverInfo || null;
      for (const snapshot of result.snapshots || []) this._subscribed(snapshot);
      this._initialized = true;
      this._setConnection("connected", "connected");
      this.dispatchEvent(new CustomEvent("ready", { detail: { reconnected: false } }));
      return;
    }
    const params = { channel: "ahp-root://", ...this.reconciler.reconnectParams() };
    let result;
    try {
      result = await this.request("reconnect", params);
    } catch (error) {
      // the host forgot us (a new host, or its window passed): start afresh
      const channels = this.reconciler.channels;
      const fresh = await this.request("initialize", {
        channel: "ahp-root://", protocolVersions: [PROTOCOL_VERSION], clientId: this.clientId,
        clientInfo: { name: "agenthost-protocol web client" }, initialSubscriptions: channels,
      });
      result = { type: "snapshot", snapshots: fresh.snapshots || [] };
    }
    const { rejected, dropped } = this.reconciler.applyReconnect(result);
    for (const entry of rejected) this._settled({ channel: entry.channel, kind: "rejected", clientSeq: entry.clientSeq, rejectionReason: entry.reason, action: entry.action });
    // what the host never answered is said, not sent again: the user decides
    for (const entry of dropped || []) this._settled({ channel: entry.channel, kind: "dropped", clientSeq: entry.clientSeq, rejectionReason: "lost with the connection", action: entry.action });
    if (result.type === "replay") {
      for (const envelope of result.actions || []) this._logEnvelope(envelope, "replayed");
    }
    this.connection.reconnects += 1;
    this.connection.lastResult = result.type;
    const how = result.type === "replay"
      ? `reconnected: ${(result.actions || []).length} missed actions replayed`
      : "reconnected: fresh snapshots";
    this._setConnection("connected", how);
    for (const channel of this.reconciler.channels) this._changed(channel);
    this.dispatchEvent(new CustomEvent("ready", { detail: { reconnected: true, type: result.type } }));
  }

  request(method, params) {
    const ws = this._ws;
    if (!ws || ws.readyState !== WebSocket.OPEN) return Promise.reject(new Error("not connected"));
    const id = this._nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this._requests.delete(id);
        reject(new Error(`${method}: no answer in ${REQUEST_TIMEOUT_MS / 1000} s`));
      }, REQUEST_TIMEOUT_MS);
      this._requests.set(id, { method, resolve, reject, timer });
      ws.send(JSON.stringify({ jsonrpc: "2.0", id, method, params }));
    });
  }

  async subscribe(channel) {
    if (this.tracks(channel)) return {}; // tracked already: its state is current
    const result = await this.request("subscribe", { channel });
    // another call may have subscribed it meanwhile
    if (result && result.snapshot && !this.tracks(channel)) this._subscribed(result.snapshot);
    return result;
  }

  unsubscribe(channel) {
    if (!this.tracks(channel)) return;
    for (const entry of this.reconciler.unsubscribe(channel)) {
      this._settled({ channel, kind: "dropped", clientSeq: entry.clientSeq, rejectionReason: "unsubscribed before the host answered", action: entry.action });
    }
    const ws = this._ws;
    if (ws && ws.readyState === WebSocket.OPEN) {
      ws.send(JSON.stringify({ jsonrpc: "2.0", method: "unsubscribe", params: { channel } }));
    }
  }

  // Apply `action` at once (write-ahead) and send it; its fate comes as a "settled" event.
  dispatch(channel, action) {
    let params;
    try {
      params = this.reconciler.dispatch(channel, action);
    } catch (error) {
      // the page's own mistake (or a state the host sent that cannot take it): said
      this.dispatchEvent(new CustomEvent("settled", { detail: { channel, kind: "rejected", rejectionReason: error.message } }));
      return null;
    }
    this.settledLog.push({ clientSeq: params.clientSeq, channel, type: action.type, fate: "pending", time: Date.now() });
    if (this.settledLog.length > MAX_LOG) this.settledLog.shift();
    const ws = this._ws;
    if (ws && ws.readyState === WebSocket.OPEN) {
      ws.send(JSON.stringify({ jsonrpc: "2.0", method: "dispatchAction", params }));
    }
    this._changed(channel);
    return params.clientSeq;
  }

  _subscribed(snapshot) {
    this.reconciler.subscribe(snapshot);
    this._changed(snapshot.resource);
  }

  _changed(channel) {
    this.dispatchEvent(new CustomEvent("state", { detail: { channel } }));
  }

  _logEnvelope(envelope, kind) {
    const action = envelope.action || {};
    const entry = {
      serverSeq: envelope.serverSeq, channel: envelope.channel, type: action.type,
      origin: envelope.origin || null, time: Date.now(), kind,
    };
    if (envelope.rejectionReason !== undefined) entry.rejectionReason = envelope.rejectionReason;
    this.log.push(entry);
    if (this.log.length > MAX_LOG) this.log.shift();
    this.dispatchEvent(new CustomEvent("log", { detail: entry }));
  }

  _settled(result) {
    const record = this.settledLog.find((r) => r.clientSeq === result.clientSeq);
    if (record) {
      record.fate = result.kind;
      if (result.rejectionReason !== undefined) record.reason = result.rejectionReason;
    }
    this.dispatchEvent(new CustomEvent("settled", { detail: result }));
  }

  _onMessage(message) {
    if (message.id !== undefined && message.method === undefined) {
      const pending = this._requests.get(message.id);
      if (!pending) return;
      this._requests.delete(message.id);
      clearTimeout(pending.timer);
      if (message.error) pending.reject(new RequestError(pending.method, message.error));
      else pending.resolve(message.result);
      return;
    }
    const params = message.params || {};
    if (message.method === "action") {
      let result;
      try {
        result = this.reconciler.receive(params);
      } catch (error) {
        // an envelope the reconciler cannot take: the host's fault; reconnecting
        // brings a state both agree on (replay or snapshots)
        this._setConnection("reconnecting", `the host sent an action this page cannot apply (${error.message})`);
        if (this._ws) this._ws.close(4000, "bad action");
        return;
      }
      this._logEnvelope(params, result.kind);
      if (result.kind === "confirmed" || result.kind === "rejected") this._settled(result);
      if (result.kind !== "ignored") this._changed(params.channel);
      return;
    }
    if (message.method === "ping" && message.id !== undefined) {
      this._ws.send(JSON.stringify({ jsonrpc: "2.0", id: message.id, result: {} }));
      return;
    }
    if (typeof message.method === "string") {
      this.dispatchEvent(new CustomEvent("notification", { detail: { method: message.method, params } }));
    }
  }
}
