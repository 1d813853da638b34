// The AHP 0.7.0 reducers on wire JSON, for the web client.
//
// A port of agenthost_protocol/reducers/*.py (the reference: they pass the
// official corpus), working on what JSON.parse gives for the host's messages
// (camelCase keys, optional values absent).  For the same state, action and
// clock reading the result, as JSON, is what the Python reducer's result
// encodes to; tests/test_web_reducers.py holds the two to each other on the
// corpus and on generated sequences.
//
// Pure: the inputs are never modified (a changed value is a copy that shares
// the untouched parts), and an action that changes nothing, an action of
// another channel and an action of an unknown type return the state itself.
// A value absent on the wire is absent here: a field set to "nothing" is
// deleted, never stored as null or undefined.

import { ACTIONS, CLASSES, STATES } from "./shapes.js";

// -- JSON helpers ---------------------------------------------------------------

const hasOwn = (value, key) => Object.prototype.hasOwnProperty.call(value, key);

function isObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

// Present on the wire: the codec reads null as absent.
function given(value) {
  return value !== undefined && value !== null;
}

// JavaScript's `value ?? fallback`, kept as a name for the Python `_or`.
function or(value, fallback) {
  return given(value) ? value : fallback;
}

// A new object of the fields that are present (an absent field is left out).
function build(fields) {
  const out = {};
  for (const key of Object.keys(fields)) {
    if (given(fields[key])) out[key] = fields[key];
  }
  return out;
}

// `object` with `changes` written: a change to null or undefined deletes the key.
function evolve(object, changes) {
  const out = { ...object };
  for (const key of Object.keys(changes)) {
    if (given(changes[key])) out[key] = changes[key];
    else delete out[key];
  }
  return out;
}

function replaceAt(items, index, item) {
  const out = items.slice();
  out[index] = item;
  return out;
}

// Equality as JSON sees it: true is not 1, key order does not matter.
export function jsonEqual(a, b) {
  if (a === b) return true;
  if (Array.isArray(a)) {
    if (!Array.isArray(b) || a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (!jsonEqual(a[i], b[i])) return false;
    return true;
  }
  if (isObject(a)) {
    if (!isObject(b)) return false;
    const keys = Object.keys(a).filter((k) => a[k] !== undefined);
    const other = Object.keys(b).filter((k) => b[k] !== undefined);
    if (keys.length !== other.length) return false;
    for (const key of keys) {
      if (!hasOwn(b, key) || !jsonEqual(a[key], b[key])) return false;
    }
    return true;
  }
  // an absent optional value and null are the same absence
  return !given(a) && !given(b);
}

// `state` itself when `next` equals it: for the actions that rebuild the
// state wholesale, so a repeat that changes nothing comes back identical.
function settled(state, next) {
  return next !== state && jsonEqual(next, state) ? state : next;
}

// Model equality of two optional values: absent equals absent.
function same(a, b) {
  return jsonEqual(given(a) ? a : null, given(b) ? b : null);
}

// `object` with `key` set to `value`, or `object` itself when the value is the same (a
// reducer returns its state unchanged where Python's does).
function setField(object, key, value) {
  return same(object[key], value) ? object : evolve(object, { [key]: value });
}

// -- the clock ------------------------------------------------------------------

const MAX_TIME_MS = 8.64e15;

/**
 * `ms` as an integer inside the JavaScript Date range, as
 * agenthost_protocol/reducers/_clock.py clamps it (NaN is 0, a fraction is
 * truncated): a reducer never throws, whatever the clock says.
 */
export function clampMs(ms) {
  if (typeof ms !== "number" || Number.isNaN(ms)) return 0;
  if (ms === Infinity) return MAX_TIME_MS;
  if (ms === -Infinity) return -MAX_TIME_MS;
  const whole = Math.trunc(ms);
  if (whole > MAX_TIME_MS) return MAX_TIME_MS;
  if (whole < -MAX_TIME_MS) return -MAX_TIME_MS;
  return whole;
}

/** `new Date(ms).toISOString()`, clamped to the Date range (NaN is the epoch). */
export function isoTimestamp(ms) {
  return new Date(clampMs(ms)).toISOString();
}

// `now` is epoch milliseconds, or a function returning them, called only when
// a reducer needs the time (the reconciler reads its clock lazily that way).
function stamp(now) {
  return isoTimestamp(typeof now === "function" ? now() : now);
}

// -- status bits ----------------------------------------------------------------
//
// A status is a bitset of any width (unknown bits of newer peers are kept):
// BigInt arithmetic, since JavaScript's bitwise operators cut to 32 bits.

const IDLE = 1n;
const ERROR = 2n;
const IN_PROGRESS = 8n;
const INPUT_NEEDED = 24n;
const IS_READ = 32n;
const IS_ARCHIVED = 64n;
const ACTIVITY_MASK = 31n;

function bits(status) {
  if (typeof status === "number" && Number.isInteger(status) && status >= 0) return BigInt(status);
  return 0n; // not a status the codec would have let through
}

function withActivity(status, activity) {
  return Number((bits(status) & ~ACTIVITY_MASK) | activity);
}

function withoutBits(status, flag) {
  return Number(bits(status) & ~flag);
}

function withBits(status, flag) {
  return Number(bits(status) | flag);
}

// -- channels -------------------------------------------------------------------

const SCHEMES = [
  ["ahp-chat:", "chat"],
  ["ahp-terminal:", "terminal"],
  ["ahp-changeset:", "changeset"],
  ["ahp-resource-watch:", "resourceWatch"],
  ["ahp-otlp:", "otlp"],
  ["mcp:", "mcp"],
];

/**
 * The kind of channel `uri` names, as agenthost_protocol.channels.channel_kind:
 * "root", "session", "chat", "terminal", "resourceWatch", and also "changeset",
 * "annotations" (ahp-session:/<id>/annotations), "otlp" and "mcp"; null when
 * the scheme is not recognised.
 */
export function channelKind(uri) {
  if (typeof uri !== "string") return null;
  if (uri.startsWith("ahp-root:")) return "root";
  if (uri.startsWith("ahp-session:")) {
    const prefix = "ahp-session:/";
    const suffix = "/annotations";
    if (uri.startsWith(prefix) && uri.endsWith(suffix)) {
      const id = uri.slice(prefix.length, uri.length - suffix.length);
      if (uri.length >= prefix.length + suffix.length && id && !id.includes("/")) {
        return "annotations";
      }
    }
    return "session";
  }
  for (const [scheme, kind] of SCHEMES) if (uri.startsWith(scheme)) return kind;
  return null;
}

// -- root -------------------------------------------------------------------------

function configChanged(state, action) {
  const config = state.config;
  if (!given(config)) return state;
  const values = isObject(action.config) ? action.config : {};
  const merged = action.replace ? { ...values } : { ...(config.values || {}), ...values };
  if (jsonEqual(merged, config.values || {})) return state;
  return { ...state, config: { ...config, values: merged } };
}

function rootReducer(state, action) {
  switch (action.type) {
    case "root/agentsChanged":
      return setField(state, "agents", action.agents);
    case "root/activeSessionsChanged":
      return setField(state, "activeSessions", action.activeSessions);
    case "root/terminalsChanged":
      return setField(state, "terminals", action.terminals);
    case "root/configChanged":
      return configChanged(state, action);
    default:
      return state;
  }
}

// -- session ----------------------------------------------------------------------

// Python's `==` on JSON values, for keys an unknown variant may hold as
// anything: true equals 1, key order does not matter.
function pyEqual(a, b) {
  const scalar = (v) => typeof v === "number" || typeof v === "boolean";
  if (scalar(a) && scalar(b)) return Number(a) === Number(b);
  if (Array.isArray(a) || Array.isArray(b)) {
    return Array.isArray(a) && Array.isArray(b) && a.length === b.length
      && a.every((item, i) => pyEqual(item, b[i]));
  }
  if (isObject(a) || isObject(b)) {
    if (!isObject(a) || !isObject(b)) return false;
    const keys = Object.keys(a);
    return keys.length === Object.keys(b).length
      && keys.every((k) => hasOwn(b, k) && pyEqual(a[k], b[k]));
  }
  return a === b || (!given(a) && !given(b));
}

// Replace the entry with `item`'s key in place, else append; `items` itself if equal.
function upsert(items, item, key) {
  const wanted = key(item);
  for (let i = 0; i < items.length; i++) {
    if (pyEqual(key(items[i]), wanted)) {
      return jsonEqual(items[i], item) ? items : replaceAt(items, i, item);
    }
  }
  return [...items, item];
}

const idOf = (entry) => (isObject(entry) ? entry.id : undefined);

// The fields of a ChatSummary that session/chatUpdated may patch (all but `resource`).
const CHAT_PATCH_FIELDS = [
  "title", "status", "activity", "modifiedAt", "origin", "interactivity", "workingDirectories",
];

function patchChat(chat, changes) {
  const updates = {};
  let any = false;
  for (const key of CHAT_PATCH_FIELDS) {
    if (isObject(changes) && given(changes[key])) {
      updates[key] = changes[key];
      any = true;
    }
  }
  if (!any) return chat;
  const patched = { ...chat, ...updates };
  return jsonEqual(patched, chat) ? chat : patched;
}

function withStatusFlag(state, flag, on) {
  const status = on ? withBits(state.status, flag) : withoutBits(state.status, flag);
  return status === state.status ? state : { ...state, status };
}

function inputNeededRemoved(state, id) {
  const needed = state.inputNeeded;
  if (!given(needed)) return state;
  const kept = needed.filter((request) => idOf(request) !== id);
  if (kept.length === needed.length) return state;
  // Emptying the list clears only bit 4: InputNeeded (24) falls back to
  // InProgress (8), any other activity stays (the reference's rule).
  const status = kept.length
    ? withActivity(state.status, INPUT_NEEDED)
    : withoutBits(state.status, 16n);
  return evolve(state, { inputNeeded: kept.length ? kept : null, status });
}

const CONTAINERS = new Set(["plugin", "directory"]);

function withEnabled(entry, enabled) {
  if (entry.enabled === enabled) return entry;
  return { ...entry, enabled };
}

function toggleCustomization(state, target, enabled) {
  const items = state.customizations;
  if (!given(items)) return state;
  for (let i = 0; i < items.length; i++) {
    if (idOf(items[i]) === target) {
      const toggled = withEnabled(items[i], enabled);
      if (toggled === items[i]) return state;
      return { ...state, customizations: replaceAt(items, i, toggled) };
    }
  }
  for (let i = 0; i < items.length; i++) {
    const entry = items[i];
    if (!CONTAINERS.has(entry.type)) continue;
    const children = entry.children || [];
    for (let c = 0; c < children.length; c++) {
      if (idOf(children[c]) === target) {
        const toggled = withEnabled(children[c], enabled);
        if (toggled === children[c]) return state;
        const container = { ...entry, children: replaceAt(children, c, toggled) };
        return { ...state, customizations: replaceAt(items, i, container) };
      }
    }
  }
  return state;
}

// `change(children, index)` on the first child with id `target` of every
// container; `items` itself when no container changed.
function mapChildren(items, target, change) {
  let changed = false;
  const out = items.map((entry) => {
    if (CONTAINERS.has(entry.type) && given(entry.children) && entry.children.length) {
      const children = entry.children;
      const index = children.findIndex((child) => idOf(child) === target);
      if (index >= 0) {
        const updated = change(children, index);
        if (updated !== children) {
          changed = true;
          return { ...entry, children: updated };
        }
      }
    }
    return entry;
  });
  return changed ? out : items;
}

function removeCustomization(state, target) {
  const items = state.customizations;
  if (!given(items)) return state;
  const index = items.findIndex((entry) => idOf(entry) === target);
  if (index >= 0) {
    return { ...state, customizations: [...items.slice(0, index), ...items.slice(index + 1)] };
  }
  const kept = mapChildren(items, target, (children, i) => [
    ...children.slice(0, i), ...children.slice(i + 1),
  ]);
  return kept === items ? state : { ...state, customizations: kept };
}

function setMcpServerState(state, target, serverState, channel) {
  const items = state.customizations;
  if (!given(items)) return state;
  const updated = (entry) => {
    // only an MCP server has a state; any other entry is left as it is
    if (entry.type !== "mcpServer") return entry;
    if (jsonEqual(entry.state, serverState) && same(entry.channel, channel)) return entry;
    return evolve(entry, { state: serverState, channel });
  };
  const index = items.findIndex((entry) => idOf(entry) === target);
  if (index >= 0) {
    // a top-level entry with the id decides alone; children are not searched
    const server = updated(items[index]);
    return server === items[index]
      ? state
      : { ...state, customizations: replaceAt(items, index, server) };
  }
  const servers = mapChildren(items, target, (children, i) => {
    const server = updated(children[i]);
    return server === children[i] ? children : replaceAt(children, i, server);
  });
  return servers === items ? state : { ...state, customizations: servers };
}

function sessionReducer(state, action) {
  switch (action.type) {
    case "session/ready":
      // purely a lifecycle transition: the status is left alone
      return state.lifecycle === "ready" ? state : { ...state, lifecycle: "ready" };
    case "session/creationFailed":
      if (state.lifecycle === "creationFailed" && same(state.creationError, action.error)) {
        return state;
      }
      return evolve(state, { lifecycle: "creationFailed", creationError: action.error });
    case "session/chatAdded": {
      const chats = upsert(state.chats || [], action.summary, (chat) => chat.resource);
      return chats === state.chats ? state : { ...state, chats };
    }
    case "session/chatRemoved": {
      const chats = state.chats || [];
      const kept = chats.filter((chat) => chat.resource !== action.chat);
      if (kept.length === chats.length) return state;
      const defaultChat = state.defaultChat === action.chat ? null : state.defaultChat;
      return evolve(state, { chats: kept, defaultChat });
    }
    case "session/chatUpdated": {
      const chats = state.chats || [];
      const index = chats.findIndex((chat) => chat.resource === action.chat);
      if (index < 0) return state;
      const patched = patchChat(chats[index], action.changes);
      return patched === chats[index] ? state : { ...state, chats: replaceAt(chats, index, patched) };
    }
    case "session/defaultChatChanged":
      return setField(state, "defaultChat", action.defaultChat);
    case "session/titleChanged":
      return state.title === action.title ? state : { ...state, title: action.title };
    case "session/serverToolsChanged":
      return setField(state, "serverTools", action.tools);
    case "session/activeClientSet": {
      const clients = upsert(state.activeClients || [], action.activeClient, (c) => c.clientId);
      return clients === state.activeClients ? state : { ...state, activeClients: clients };
    }
    case "session/activeClientRemoved": {
      const clients = state.activeClients || [];
      const kept = clients.filter((c) => c.clientId !== action.clientId);
      return kept.length === clients.length ? state : { ...state, activeClients: kept };
    }
    case "session/workingDirectorySet": {
      const directories = state.workingDirectories || [];
      if (directories.includes(action.directory)) return state;
      return { ...state, workingDirectories: [...directories, action.directory] };
    }
    case "session/workingDirectoryRemoved": {
      // the array stays, possibly empty: the key is not deleted
      const present = state.workingDirectories;
      if (!given(present) || !present.includes(action.directory)) return state;
      const index = present.indexOf(action.directory);
      return {
        ...state,
        workingDirectories: [...present.slice(0, index), ...present.slice(index + 1)],
      };
    }
    case "session/inputNeededSet": {
      const needed = upsert(state.inputNeeded || [], action.request, idOf);
      const status = withActivity(state.status, INPUT_NEEDED);
      if (needed === state.inputNeeded && status === state.status) return state;
      return { ...state, inputNeeded: needed, status };
    }
    case "session/inputNeededRemoved":
      return inputNeededRemoved(state, action.id);
    case "session/customizationsChanged":
      return setField(state, "customizations", action.customizations);
    case "session/customizationToggled":
      return toggleCustomization(state, action.id, action.enabled);
    case "session/customizationUpdated": {
      const items = upsert(state.customizations || [], action.customization, idOf);
      return items === state.customizations ? state : { ...state, customizations: items };
    }
    case "session/customizationRemoved":
      return removeCustomization(state, action.id);
    case "session/mcpServerStateChanged":
      return setMcpServerState(state, action.id, action.state, action.channel);
    case "session/mcpServerStartRequested":
      return setMcpServerState(state, action.id, { kind: "starting" }, null);
    case "session/mcpServerStopRequested":
      return setMcpServerState(state, action.id, { kind: "stopped" }, null);
    case "session/isReadChanged":
      return withStatusFlag(state, IS_READ, action.isRead);
    case "session/isArchivedChanged":
      return withStatusFlag(state, IS_ARCHIVED, action.isArchived);
    case "session/activityChanged":
      return setField(state, "activity", action.activity);
    case "session/changesetsChanged":
      return setField(state, "changesets", action.changesets);
    case "session/configChanged":
      return configChanged(state, action);
    case "session/metaChanged":
      return setField(state, "_meta", action._meta);
    default:
      return state;
  }
}

// -- terminal ---------------------------------------------------------------------

function appendData(state, data) {
  const content = state.content || [];
  const last = content.length ? content[content.length - 1] : null;
  let grown;
  if (isObject(last) && last.type === "command" && !last.isComplete) {
    if (!data) return state;
    grown = { ...last, output: (last.output || "") + data };
  } else if (isObject(last) && last.type === "unclassified") {
    if (!data) return state;
    grown = { ...last, value: (last.value || "") + data };
  } else {
    return { ...state, content: [...content, { type: "unclassified", value: data }] };
  }
  return { ...state, content: [...content.slice(0, -1), grown] };
}

function finishCommand(state, action) {
  let changed = false;
  const parts = (state.content || []).map((part) => {
    if (isObject(part) && part.type === "command" && part.commandId === action.commandId) {
      const finished = evolve(part, {
        isComplete: true, exitCode: action.exitCode, durationMs: action.durationMs,
      });
      if (!jsonEqual(finished, part)) {
        changed = true;
        return finished;
      }
    }
    return part;
  });
  return changed ? { ...state, content: parts } : state;
}

function terminalReducer(state, action) {
  switch (action.type) {
    case "terminal/data":
      return appendData(state, action.data);
    case "terminal/input":
      return state;
    case "terminal/resized":
      if (same(state.cols, action.cols) && same(state.rows, action.rows)) return state;
      return evolve(state, { cols: action.cols, rows: action.rows });
    case "terminal/claimed":
      return setField(state, "claim", action.claim);
    case "terminal/titleChanged":
      return state.title === action.title ? state : { ...state, title: action.title };
    case "terminal/cwdChanged":
      return setField(state, "cwd", action.cwd);
    case "terminal/exited":
      return setField(state, "exitCode", action.exitCode);
    case "terminal/cleared":
      return (state.content || []).length ? { ...state, content: [] } : state;
    case "terminal/commandDetectionAvailable":
      return state.supportsCommandDetection ? state : { ...state, supportsCommandDetection: true };
    case "terminal/commandExecuted": {
      const part = {
        type: "command",
        commandId: action.commandId,
        commandLine: action.commandLine,
        output: "",
        timestamp: action.timestamp,
        isComplete: false,
      };
      return { ...state, content: [...(state.content || []), part], supportsCommandDetection: true };
    }
    case "terminal/commandFinished":
      return finishCommand(state, action);
    default:
      return state;
  }
}

// -- changeset --------------------------------------------------------------------

function changesetReducer(state, action) {
  switch (action.type) {
    case "changeset/statusChanged": {
      const error = action.status === "error" ? action.error : null;
      if (state.status === action.status && same(state.error, error)) return state;
      return evolve(state, { status: action.status, error });
    }
    case "changeset/fileSet": {
      const files = state.files || [];
      const index = files.findIndex((file) => file.id === action.file.id);
      if (index >= 0) {
        return jsonEqual(files[index], action.file)
          ? state
          : { ...state, files: replaceAt(files, index, action.file) };
      }
      return { ...state, files: [...files, action.file] };
    }
    case "changeset/fileRemoved": {
      const files = state.files || [];
      const kept = files.filter((file) => file.id !== action.fileId);
      return kept.length === files.length ? state : { ...state, files: kept };
    }
    case "changeset/filesReviewChanged": {
      // an absent `reviewed` counts as different, so `false` is written out
      const wanted = new Set(action.files || []);
      let changed = false;
      const files = (state.files || []).map((file) => {
        if (wanted.has(file.id) && file.reviewed !== action.reviewed) {
          changed = true;
          return evolve(file, { reviewed: action.reviewed });
        }
        return file;
      });
      return changed ? { ...state, files } : state;
    }
    case "changeset/contentChanged": {
      const operations = given(action.operations) ? action.operations : state.operations;
      if (jsonEqual(state.files, action.files) && same(state.operations, operations)
          && same(state.error, action.error)) {
        return state;
      }
      return evolve(state, { files: action.files, operations, error: action.error });
    }
    case "changeset/operationsChanged":
      return setField(state, "operations", action.operations);
    case "changeset/operationStatusChanged": {
      const operations = state.operations;
      if (!given(operations) || !operations.length) return state;
      const error = action.status === "error" ? action.error : null;
      const index = operations.findIndex((op) => op.id === action.operationId);
      if (index < 0) return state;
      const operation = operations[index];
      if (operation.status === action.status && same(operation.error, error)) return state;
      const updated = evolve(operation, { status: action.status, error });
      return { ...state, operations: replaceAt(operations, index, updated) };
    }
    case "changeset/cleared":
      return (state.files || []).length ? { ...state, files: [] } : state;
    default:
      return state;
  }
}

// -- annotations ------------------------------------------------------------------

function annotationsReducer(state, action) {
  const annotations = state.annotations || [];
  const find = (id) => annotations.findIndex((a) => a.id === id);
  const at = (index, annotation) => ({ ...state, annotations: replaceAt(annotations, index, annotation) });
  switch (action.type) {
    case "annotations/set": {
      const index = find(action.annotation.id);
      if (index >= 0) {
        return jsonEqual(annotations[index], action.annotation) ? state : at(index, action.annotation);
      }
      return { ...state, annotations: [...annotations, action.annotation] };
    }
    case "annotations/updated": {
      const index = find(action.annotationId);
      if (index < 0) return state;
      const found = annotations[index];
      const patched = evolve(found, {
        turnId: or(action.turnId, found.turnId),
        resource: or(action.resource, found.resource),
        range: or(action.range, found.range),
        resolved: or(action.resolved, found.resolved),
      });
      return jsonEqual(patched, found) ? state : at(index, patched);
    }
    case "annotations/removed": {
      const kept = annotations.filter((a) => a.id !== action.annotationId);
      return kept.length === annotations.length ? state : { ...state, annotations: kept };
    }
    case "annotations/entrySet": {
      const index = find(action.annotationId);
      if (index < 0) return state;
      const found = annotations[index];
      const entries = found.entries || [];
      const entryIndex = entries.findIndex((e) => e.id === action.entry.id);
      let updated;
      if (entryIndex >= 0) {
        if (jsonEqual(entries[entryIndex], action.entry)) return state;
        updated = replaceAt(entries, entryIndex, action.entry);
      } else {
        updated = [...entries, action.entry];
      }
      return at(index, { ...found, entries: updated });
    }
    case "annotations/entryRemoved": {
      const index = find(action.annotationId);
      if (index < 0) return state;
      const found = annotations[index];
      const entries = found.entries || [];
      const kept = entries.filter((e) => e.id !== action.entryId);
      return kept.length === entries.length ? state : at(index, { ...found, entries: kept });
    }
    default:
      return state;
  }
}

// -- chat: parts and status ---------------------------------------------------------

const KNOWN_PART_KINDS = new Set([
  "markdown", "contentRef", "toolCall", "reasoning", "systemNotification", "inputRequest",
]);
const KNOWN_CALL_STATUSES = new Set([
  "streaming", "pending-confirmation", "running", "auth-required",
  "pending-result-confirmation", "completed", "cancelled",
]);
const BLOCKING_STATUSES = new Set([
  "pending-confirmation", "pending-result-confirmation", "auth-required",
]);

function toolCallOf(part) {
  return isObject(part) && part.kind === "toolCall" && isObject(part.toolCall) ? part.toolCall : null;
}

// A tool call in a status this library knows (an unknown one is never changed).
function isKnownCall(call) {
  return call !== null && KNOWN_CALL_STATUSES.has(call.status);
}

function isOpenRequest(part) {
  return isObject(part) && part.kind === "inputRequest" && !given(part.response);
}

// The activity of a chat with this active turn (chat/error aside).
function activityOf(turn) {
  if (!given(turn)) return IDLE;
  for (const part of turn.responseParts || []) {
    const call = toolCallOf(part);
    if (call !== null) {
      if (BLOCKING_STATUSES.has(call.status)) return INPUT_NEEDED;
    } else if (isOpenRequest(part)) {
      return INPUT_NEEDED;
    }
  }
  return IN_PROGRESS;
}

function chatStatus(status, turn, error = false) {
  return withActivity(status, error ? ERROR : activityOf(turn));
}

function withParts(state, turn, parts) {
  return { ...state, activeTurn: { ...turn, responseParts: parts } };
}

// -- chat: text -------------------------------------------------------------------

// chat/delta (markdown) and chat/reasoning: append to the first part with that id.
function appendText(state, action, partKind) {
  const turn = state.activeTurn;
  const text = action.content;
  if (!given(turn) || turn.id !== action.turnId || !text) return state;
  const parts = turn.responseParts || [];
  const partId = action.partId;
  let index = -1;
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i];
    if (!isObject(part)) continue;
    if (part.kind === "toolCall") {
      if (isObject(part.toolCall) && part.toolCall.toolCallId === partId) return state;
    } else if (part.kind === "markdown" || part.kind === "reasoning") {
      if (part.id === partId) {
        index = i;
        break;
      }
    } else if (!KNOWN_PART_KINDS.has(part.kind) && part.id === partId) {
      return state; // a part of an unknown kind holds that id
    }
  }
  if (index < 0 || parts[index].kind !== partKind) return state;
  const part = parts[index];
  return withParts(state, turn, replaceAt(parts, index, { ...part, content: (part.content || "") + text }));
}

// -- chat: tool calls -------------------------------------------------------------

// The fields a call keeps through every transition; an action's _meta over its own.
function base(call, meta) {
  return {
    toolCallId: call.toolCallId,
    toolName: call.toolName,
    displayName: call.displayName,
    intention: call.intention,
    contributor: call.contributor,
    _meta: or(meta, call._meta),
  };
}

function postConfirmation(call) {
  return {
    invocationMessage: call.invocationMessage,
    toolInput: call.toolInput,
    confirmed: call.confirmed,
    selectedOption: call.selectedOption,
  };
}

function toolCallDelta(call, action) {
  if (call.status !== "streaming") return call;
  let buffer = call.partialInput;
  const content = action.content;
  // appending "" starts an (empty) input where there was none
  if (given(content) && (content || !given(buffer))) buffer = (given(buffer) ? buffer : "") + content;
  const meta = or(action._meta, call._meta);
  const invocationMessage = or(action.invocationMessage, call.invocationMessage);
  if (buffer === call.partialInput && same(meta, call._meta)
      && same(invocationMessage, call.invocationMessage)) {
    return call;
  }
  return evolve(call, { _meta: meta, partialInput: buffer, invocationMessage });
}

// toolCallReady refines the contributor, but client ownership is fixed at toolCallStart.
function refinedContributor(current, proposed) {
  if (!given(proposed)) return current;
  const isClient = (c) => isObject(c) && c.kind === "client";
  if (isClient(current)) {
    return isClient(proposed) && proposed.clientId === current.clientId ? proposed : current;
  }
  if (isClient(proposed)) return current;
  return proposed;
}

function ready(call, action) {
  let toolInput = action.toolInput;
  if (call.status === "streaming") {
    // nothing to fall back on: the input was still streaming
  } else if (call.status === "running" || call.status === "pending-confirmation") {
    toolInput = or(toolInput, call.toolInput);
  } else {
    return call;
  }
  const fields = {
    toolCallId: call.toolCallId,
    toolName: call.toolName,
    displayName: call.displayName,
    intention: or(action.intention, call.intention),
    contributor: refinedContributor(call.contributor, action.contributor),
    _meta: or(action._meta, call._meta),
    invocationMessage: action.invocationMessage,
    toolInput,
  };
  if (action.confirmed) {
    return build({ status: "running", ...fields, confirmed: action.confirmed });
  }
  // a call that was already pending keeps what this action does not restate
  const previous = call.status === "pending-confirmation" ? call : {};
  return build({
    status: "pending-confirmation",
    ...fields,
    confirmationTitle: or(action.confirmationTitle, previous.confirmationTitle),
    riskAssessment: or(action.riskAssessment, previous.riskAssessment),
    edits: or(action.edits, previous.edits),
    editable: or(action.editable, previous.editable),
    options: or(action.options, previous.options),
  });
}

function selectedOption(options, optionId) {
  if (!optionId || !given(options)) return null;
  return options.find((option) => isObject(option) && option.id === optionId) || null;
}

function approved(call, action) {
  if (call.status !== "pending-confirmation") return call;
  let toolInput = call.toolInput;
  // a ContentRef input is edited by rewriting the resource it points to
  if (given(action.editedToolInput) && typeof toolInput === "string") toolInput = action.editedToolInput;
  return build({
    status: "running",
    ...base(call, action._meta),
    invocationMessage: call.invocationMessage,
    toolInput,
    confirmed: action.confirmed,
    selectedOption: selectedOption(call.options, action.selectedOptionId),
  });
}

function denied(call, action) {
  if (call.status !== "pending-confirmation") return call;
  return build({
    status: "cancelled",
    ...base(call, action._meta),
    invocationMessage: call.invocationMessage,
    toolInput: call.toolInput,
    reason: action.reason,
    reasonMessage: action.reasonMessage,
    userSuggestion: action.userSuggestion,
    selectedOption: selectedOption(call.options, action.selectedOptionId),
  });
}

function complete(call, action) {
  const result = isObject(action.result) ? action.result : {};
  let content = result.content;
  let confirmed;
  let option;
  if (call.status === "running") {
    confirmed = call.confirmed;
    option = call.selectedOption;
  } else if (call.status === "auth-required") {
    // execution never resumed after the auth challenge: only a failure ends
    // it, keeping what the tool produced before the pause
    if (result.success) return call;
    confirmed = call.confirmed;
    option = call.selectedOption;
    content = or(content, call.content);
  } else if (call.status === "pending-confirmation") {
    confirmed = "not-needed";
    option = null;
  } else {
    return call;
  }
  const status = action.requiresResultConfirmation && call.status !== "auth-required"
    ? "pending-result-confirmation"
    : "completed";
  return build({
    status,
    toolCallId: call.toolCallId,
    toolName: call.toolName,
    displayName: call.displayName,
    intention: call.intention,
    contributor: call.contributor,
    _meta: or(action._meta, call._meta),
    invocationMessage: call.invocationMessage,
    toolInput: call.toolInput,
    confirmed,
    selectedOption: option,
    success: result.success,
    pastTenseMessage: result.pastTenseMessage,
    content,
    structuredContent: result.structuredContent,
    error: result.error,
  });
}

function resultConfirmed(call, action) {
  if (call.status !== "pending-result-confirmation") return call;
  if (action.approved) {
    return build({
      status: "completed",
      ...base(call, action._meta),
      ...postConfirmation(call),
      success: call.success,
      pastTenseMessage: call.pastTenseMessage,
      content: call.content,
      structuredContent: call.structuredContent,
      error: call.error,
    });
  }
  return build({
    status: "cancelled",
    ...base(call, action._meta),
    invocationMessage: call.invocationMessage,
    toolInput: call.toolInput,
    reason: "result-denied",
    selectedOption: call.selectedOption,
  });
}

function contentChanged(call, action) {
  if (call.status !== "running") return call;
  const meta = or(action._meta, call._meta);
  if (same(action.content, call.content) && same(meta, call._meta)) return call;
  return evolve(call, { content: action.content, _meta: meta });
}

function authRequired(call, action) {
  if (call.status !== "running") return call;
  if (!isObject(call.contributor) || call.contributor.kind !== "mcp") return call;
  return build({
    status: "auth-required",
    ...base(call, action._meta),
    ...postConfirmation(call),
    content: call.content,
    auth: action.auth,
  });
}

function authResolved(call, action) {
  if (call.status !== "auth-required") return call;
  return build({
    status: "running",
    ...base(call, action._meta),
    ...postConfirmation(call),
    content: call.content,
  });
}

// Apply `update` to every known tool call of the active turn with the action's id.
function updateToolCalls(state, action, update) {
  const turn = state.activeTurn;
  if (!given(turn) || turn.id !== action.turnId) return state;
  const parts = turn.responseParts || [];
  let out = null;
  parts.forEach((part, index) => {
    const call = toolCallOf(part);
    if (!isKnownCall(call) || call.toolCallId !== action.toolCallId) return;
    const updated = update(call, action);
    if (updated === call) return;
    if (out === null) out = parts.slice();
    out[index] = { ...part, toolCall: updated };
  });
  return out === null ? state : withParts(state, turn, out);
}

// A transition that recomputes the status whether or not a call matched (the
// reference does: a late toolCallComplete after chat/error turns ERROR into IDLE).
function transition(state, action, update) {
  const turn = state.activeTurn;
  let next = state;
  if (given(turn) && turn.id === action.turnId) next = updateToolCalls(state, action, update);
  const status = chatStatus(state.status, next.activeTurn);
  if (status === state.status) return next;
  return { ...next, status };
}

// -- chat: the end of a turn --------------------------------------------------------

const KEPT_ON_CANCEL = [
  "toolCallId", "toolName", "displayName", "intention", "contributor", "_meta",
  "invocationMessage", "toolInput",
];
const REQUIRED_ON_CANCEL = ["toolCallId", "toolName", "displayName", "invocationMessage"];

// The codec's reading of a few types, for cancelling a call of an unknown
// status: the decoded value (unknown keys dropped), or FAIL.
const FAIL = Symbol("fail");

function decodeInt(value) {
  return typeof value === "number" && Number.isFinite(value) ? value : FAIL;
}

function decodeStruct(value, fields) {
  if (!isObject(value)) return FAIL;
  const out = {};
  for (const [key, decode, required] of fields) {
    if (!given(value[key])) {
      if (required) return FAIL;
      continue;
    }
    const decoded = decode(value[key]);
    if (decoded === FAIL) return FAIL;
    out[key] = decoded;
  }
  return out;
}

const decodeString = (value) => (typeof value === "string" ? value : FAIL);

function decodeStringOr(struct) {
  return (value) => (typeof value === "string" ? value : isObject(value) ? struct(value) : FAIL);
}

const decodeMarkdown = (value) => decodeStruct(value, [["markdown", decodeString, true]]);
const decodeContentRef = (value) => decodeStruct(value, [
  ["uri", decodeString, true], ["sizeHint", decodeInt, false],
  ["contentType", decodeString, false], ["nonce", decodeString, false],
]);

function decodeContributor(value) {
  if (!isObject(value) || typeof value.kind !== "string") return FAIL;
  if (value.kind === "client") return decodeStruct(value, [["kind", decodeString, true], ["clientId", decodeString, true]]);
  if (value.kind === "mcp") {
    return decodeStruct(value, [["kind", decodeString, true], ["customizationId", decodeString, true]]);
  }
  return value; // an unknown kind is kept verbatim
}

const decodeMeta = (value) => (isObject(value) ? value : FAIL);

const CANCELLED_FIELDS = [
  ["status", decodeString, true],
  ["toolCallId", decodeString, true],
  ["toolName", decodeString, true],
  ["displayName", decodeString, true],
  ["intention", decodeString, false],
  ["contributor", decodeContributor, false],
  ["_meta", decodeMeta, false],
  ["invocationMessage", decodeStringOr(decodeMarkdown), true],
  ["toolInput", decodeStringOr(decodeContentRef), false],
  ["reason", decodeString, true],
];

// A call in a status from a newer peer, cancelled as the reference cancels it;
// where the result would lack a field a cancelled call requires, the empty
// string stands in (agenthost_protocol/reducers/chat.py, _cancelled_from_unknown).
function cancelledFromUnknown(raw) {
  const cancelled = { status: "cancelled" };
  for (const key of KEPT_ON_CANCEL) if (given(raw[key])) cancelled[key] = raw[key];
  cancelled.reason = "skipped";
  let decoded = decodeStruct(cancelled, CANCELLED_FIELDS);
  if (decoded !== FAIL) return decoded;
  for (const key of REQUIRED_ON_CANCEL) if (typeof cancelled[key] !== "string") cancelled[key] = "";
  decoded = decodeStruct(cancelled, CANCELLED_FIELDS);
  if (decoded !== FAIL) return decoded;
  const bare = {};
  for (const key of ["status", "reason", ...REQUIRED_ON_CANCEL]) bare[key] = cancelled[key];
  return bare;
}

// The part as a finished turn keeps it: unfinished tool calls become cancelled.
function forceCancel(part) {
  const call = toolCallOf(part);
  if (call === null || call.status === "completed" || call.status === "cancelled") return part;
  if (!KNOWN_CALL_STATUSES.has(call.status)) {
    return { kind: "toolCall", toolCall: cancelledFromUnknown(call) };
  }
  const streaming = call.status === "streaming";
  return {
    kind: "toolCall",
    toolCall: build({
      status: "cancelled",
      ...base(call),
      invocationMessage: streaming ? or(call.invocationMessage, "") : call.invocationMessage,
      toolInput: streaming ? null : call.toolInput,
      reason: "skipped",
    }),
  };
}

function endTurn(state, action, end, error, now) {
  const turn = state.activeTurn;
  if (!given(turn) || turn.id !== action.turnId) return state;
  const finished = build({
    id: turn.id,
    startedAt: turn.startedAt,
    // the duration is the producer's; a negative one would only confuse a display
    duration: Math.max(0, action.duration),
    message: turn.message,
    responseParts: (turn.responseParts || []).map(forceCancel),
    usage: turn.usage,
    state: end,
    error,
  });
  return evolve(state, {
    turns: [...(state.turns || []), finished],
    activeTurn: null,
    modifiedAt: stamp(now),
    status: chatStatus(state.status, null, end === "error"),
  });
}

function turnStarted(state, action, now) {
  const turn = {
    id: action.turnId, startedAt: action.startedAt, message: action.message, responseParts: [],
  };
  // a turn without parts is in progress; IS_READ is cleared
  const status = Number((bits(state.status) & ~ACTIVITY_MASK & ~IS_READ) | IN_PROGRESS);
  let steering = state.steeringMessage;
  let queued = state.queuedMessages;
  const consumed = action.queuedMessageId;
  if (consumed) {
    if (given(steering) && steering.id === consumed) steering = null;
    if (given(queued)) {
      const kept = queued.filter((message) => message.id !== consumed);
      queued = kept.length ? kept : null;
    }
  }
  const next = evolve(state, {
    activeTurn: turn, status, modifiedAt: stamp(now), steeringMessage: steering, queuedMessages: queued,
  });
  return given(state.activeTurn) ? settled(state, next) : next;
}

function truncated(state, action, now) {
  let turns;
  let cursor = state.turnsNextCursor;
  if (!given(action.turnId)) {
    turns = [];
    cursor = null; // nothing older is left to page in
  } else {
    const index = (state.turns || []).findIndex((turn) => turn.id === action.turnId);
    if (index < 0) return state;
    turns = state.turns.slice(0, index + 1);
  }
  return settled(state, evolve(state, {
    turns,
    turnsNextCursor: cursor,
    activeTurn: null,
    modifiedAt: stamp(now),
    status: chatStatus(state.status, null),
  }));
}

function turnsLoaded(state, action) {
  const turns = state.turns || [];
  const present = new Set(turns.map((turn) => turn.id));
  const older = (action.turns || []).filter((turn) => !present.has(turn.id));
  const cursor = action.turnsNextCursor;
  if (!older.length && same(cursor, state.turnsNextCursor)) return state;
  return evolve(state, { turns: older.length ? [...older, ...turns] : turns, turnsNextCursor: cursor });
}

// -- chat: pending messages -----------------------------------------------------

function pendingMessageSet(state, action) {
  const entry = { id: action.id, message: action.message };
  // any kind but steering is a queued message, as the reference has it
  if (action.kind === "steering") {
    return jsonEqual(state.steeringMessage, entry) ? state : { ...state, steeringMessage: entry };
  }
  const queued = state.queuedMessages || [];
  const index = queued.findIndex((message) => message.id === entry.id);
  if (index >= 0) {
    return jsonEqual(queued[index], entry) ? state : { ...state, queuedMessages: replaceAt(queued, index, entry) };
  }
  return { ...state, queuedMessages: [...queued, entry] };
}

function pendingMessageRemoved(state, action) {
  if (action.kind === "steering") {
    const steering = state.steeringMessage;
    if (!given(steering) || steering.id !== action.id) return state;
    return evolve(state, { steeringMessage: null });
  }
  const queued = state.queuedMessages;
  if (!given(queued)) return state;
  const kept = queued.filter((message) => message.id !== action.id);
  if (kept.length === queued.length) return state;
  return evolve(state, { queuedMessages: kept.length ? kept : null });
}

// Listed ids first, then the rest in their old order; unknown and repeated ids
// are ignored; of a repeated id in the queue the last one is kept and placed.
function queuedMessagesReordered(state, action) {
  const queued = state.queuedMessages;
  if (!given(queued)) return state;
  const byId = new Map();
  for (const message of queued) byId.set(message.id, message);
  const placed = new Set();
  const reordered = [];
  for (const id of action.order || []) {
    if (byId.has(id) && !placed.has(id)) {
      placed.add(id);
      reordered.push(byId.get(id));
    }
  }
  for (const message of queued) if (!placed.has(message.id)) reordered.push(message);
  if (reordered.length === queued.length && reordered.every((m, i) => m === queued[i])) return state;
  return { ...state, queuedMessages: reordered };
}

// -- chat: input requests -------------------------------------------------------

function openRequestIndex(parts, requestId) {
  return parts.findIndex((part) => isOpenRequest(part) && isObject(part.request) && part.request.id === requestId);
}

function inputRequested(state, action, now) {
  const turn = state.activeTurn;
  if (!given(turn)) return state;
  let request = action.request;
  const parts = turn.responseParts || [];
  const index = openRequestIndex(parts, request.id);
  let newParts;
  if (index < 0) {
    newParts = [...parts, { kind: "inputRequest", request }];
  } else {
    const old = parts[index].request;
    // drafts the clients already synced survive a re-sent request
    if (!given(request.answers) && given(old.answers)) request = { ...request, answers: old.answers };
    newParts = replaceAt(parts, index, { kind: "inputRequest", request });
  }
  const newTurn = { ...turn, responseParts: newParts };
  const status = withoutBits(chatStatus(state.status, newTurn), IS_READ);
  return settled(state, { ...state, activeTurn: newTurn, status, modifiedAt: stamp(now) });
}

function inputAnswerChanged(state, action, now) {
  const turn = state.activeTurn;
  if (!given(turn)) return state;
  const parts = turn.responseParts || [];
  const index = openRequestIndex(parts, action.requestId);
  if (index < 0) return state;
  const part = parts[index];
  // entries, not `answers[id] = ...`: an id "__proto__" is a key like any other
  const entries = Object.entries(part.request.answers || {});
  const at = entries.findIndex(([id]) => id === action.questionId);
  if (!given(action.answer)) {
    if (at >= 0) entries.splice(at, 1);
  } else if (at >= 0) {
    entries[at] = [action.questionId, action.answer];
  } else {
    entries.push([action.questionId, action.answer]);
  }
  const answers = Object.fromEntries(entries);
  const request = evolve(part.request, { answers: Object.keys(answers).length ? answers : null });
  const newTurn = { ...turn, responseParts: replaceAt(parts, index, { ...part, request }) };
  return settled(state, { ...state, activeTurn: newTurn, modifiedAt: stamp(now) });
}

function inputCompleted(state, action, now) {
  const turn = state.activeTurn;
  if (!given(turn)) return state;
  const parts = turn.responseParts || [];
  const index = openRequestIndex(parts, action.requestId);
  if (index < 0) return state;
  const part = parts[index];
  const answers = { ...(part.request.answers || {}), ...(action.answers || {}) };
  const request = evolve(part.request, { answers: Object.keys(answers).length ? answers : null });
  const newTurn = {
    ...turn,
    responseParts: replaceAt(parts, index, build({ kind: "inputRequest", request, response: action.response })),
  };
  return {
    ...state, activeTurn: newTurn, status: chatStatus(state.status, newTurn), modifiedAt: stamp(now),
  };
}

// -- chat: the reducer ----------------------------------------------------------------

function chatReducer(state, action, now) {
  switch (action.type) {
    case "chat/delta":
      return appendText(state, action, "markdown");
    case "chat/reasoning":
      return appendText(state, action, "reasoning");
    case "chat/responsePart": {
      const turn = state.activeTurn;
      if (!given(turn) || turn.id !== action.turnId) return state;
      return withParts(state, turn, [...(turn.responseParts || []), action.part]);
    }
    case "chat/toolCallStart": {
      const turn = state.activeTurn;
      if (!given(turn) || turn.id !== action.turnId) return state;
      const call = build({
        status: "streaming",
        toolCallId: action.toolCallId,
        toolName: action.toolName,
        displayName: action.displayName,
        intention: action.intention,
        contributor: action.contributor,
        _meta: action._meta,
      });
      return withParts(state, turn, [...(turn.responseParts || []), { kind: "toolCall", toolCall: call }]);
    }
    case "chat/toolCallDelta":
      return updateToolCalls(state, action, toolCallDelta);
    case "chat/toolCallReady":
      return transition(state, action, ready);
    case "chat/toolCallConfirmed":
      if (action.approved === true) return transition(state, action, approved);
      if (action.approved === false) return transition(state, action, denied);
      return state;
    case "chat/toolCallComplete":
      return transition(state, action, complete);
    case "chat/toolCallResultConfirmed":
      return transition(state, action, resultConfirmed);
    case "chat/toolCallAuthRequired":
      return transition(state, action, authRequired);
    case "chat/toolCallAuthResolved":
      return transition(state, action, authResolved);
    case "chat/toolCallContentChanged":
      return updateToolCalls(state, action, contentChanged);
    case "chat/turnStarted":
      return turnStarted(state, action, now);
    case "chat/turnComplete":
      return endTurn(state, action, "complete", null, now);
    case "chat/turnCancelled":
      return endTurn(state, action, "cancelled", null, now);
    case "chat/error":
      return endTurn(state, action, "error", action.error, now);
    case "chat/usage": {
      const turn = state.activeTurn;
      if (!given(turn) || turn.id !== action.turnId || same(turn.usage, action.usage)) return state;
      return { ...state, activeTurn: evolve(turn, { usage: action.usage }) };
    }
    case "chat/activityChanged":
      return setField(state, "activity", action.activity);
    case "chat/workingDirectorySet": {
      const directories = state.workingDirectories;
      if (given(directories) && directories.includes(action.directory)) return state;
      return { ...state, workingDirectories: [...(directories || []), action.directory] };
    }
    case "chat/workingDirectoryRemoved": {
      // an empty array stays: [] means "no access", absent means "inherit"
      const directories = state.workingDirectories;
      if (!given(directories) || !directories.includes(action.directory)) return state;
      const index = directories.indexOf(action.directory);
      return { ...state, workingDirectories: [...directories.slice(0, index), ...directories.slice(index + 1)] };
    }
    case "chat/pendingMessageSet":
      return pendingMessageSet(state, action);
    case "chat/pendingMessageRemoved":
      return pendingMessageRemoved(state, action);
    case "chat/queuedMessagesReordered":
      return queuedMessagesReordered(state, action);
    case "chat/draftChanged":
      return setField(state, "draft", action.draft);
    case "chat/inputRequested":
      return inputRequested(state, action, now);
    case "chat/inputAnswerChanged":
      return inputAnswerChanged(state, action, now);
    case "chat/inputCompleted":
      return inputCompleted(state, action, now);
    case "chat/truncated":
      return truncated(state, action, now);
    case "chat/turnsLoaded":
      return turnsLoaded(state, action);
    default:
      return state;
  }
}

// -- reading a value as the Python codec does -----------------------------------------

// `value` read by `shape` (see shapes.js): the keys no AHP type defines dropped,
// a null standing for an absent value dropped; anything else as it is.
function normalize(shape, value) {
  if (shape === 0 || value === null || typeof value !== "object") return value;
  if (typeof shape === "string") {
    const fields = CLASSES[shape];
    if (!isObject(value)) return value;
    const out = {};
    for (const key of Object.keys(value)) {
      if (hasOwn(fields, key) && given(value[key])) out[key] = normalize(fields[key], value[key]);
    }
    return out;
  }
  switch (shape[0]) {
    case "t":
      return Array.isArray(value) ? value.map((item) => normalize(shape[1], item)) : value;
    case "m":
      return isObject(value)
        ? Object.fromEntries(Object.entries(value).map(([key, item]) => [key, normalize(shape[1], item)]))
        : value;
    case "u": {
      if (!isObject(value)) return value;
      const tag = String(value[shape[1]]);
      // a tag this library does not know: a newer peer's variant, kept as it is
      return hasOwn(shape[2], tag) ? normalize(shape[2][tag], value) : value;
    }
    case "o":
      return isObject(value) ? normalize(shape[1], value) : value;
    default:
      return value;
  }
}

/**
 * `action` as the Python codec reads it: the keys no AHP 0.7.0 type defines
 * dropped, and a null standing for an absent value.  An action of a type it
 * does not know is returned as it is.  `reduce` reads every action so.
 */
export function normalizeAction(action) {
  if (!isObject(action) || typeof action.type !== "string" || !hasOwn(ACTIONS, action.type)) {
    return action;
  }
  return normalize(ACTIONS[action.type], action);
}

/** A channel state of `kind` as the Python codec reads it (see normalizeAction). */
export function normalizeState(kind, state) {
  return hasOwn(STATES, kind) ? normalize(STATES[kind], state) : state;
}

// -- the entry point --------------------------------------------------------------

const REDUCERS = {
  root: rootReducer,
  session: sessionReducer,
  chat: chatReducer,
  terminal: terminalReducer,
  changeset: changesetReducer,
  annotations: annotationsReducer,
  resourceWatch: (state) => state, // change events are read off the action stream
};

/** The channel kinds that have a state (and so a reducer). */
export const STATEFUL_KINDS = Object.freeze(Object.keys(REDUCERS));

/**
 * Apply `action` (wire JSON) to `state` (wire JSON) of a channel of `kind`
 * ("root", "session", "chat", "terminal", "changeset", "annotations",
 * "resourceWatch"; a channel URI is also accepted) and return the new state.
 * `now` is the clock reading in epoch milliseconds (or a function returning
 * it, called only if the action needs the time): only the chat reducer reads
 * it, for `modifiedAt`.  Never modifies its inputs; returns `state` itself
 * for an action that changes nothing, of another channel or of an unknown
 * type, and for a kind that has no state.
 */
export function reduce(kind, state, action, now = Date.now()) {
  const named = hasOwn(REDUCERS, kind) ? kind : channelKind(kind);
  const reducer = hasOwn(REDUCERS, named) ? REDUCERS[named] : null;
  if (!reducer || !isObject(state) || !isObject(action) || typeof action.type !== "string") return state;
  return reducer(state, normalizeAction(action), now);
}
