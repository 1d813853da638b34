// The client-side write-ahead reconciler of the web client, on wire JSON.
//
// Modelled on agenthost_protocol/reconciler.py's ClientReconciler, without
// its footprint optimisation: for every subscribed channel it keeps
//
//   confirmed   the state the host acknowledged: the snapshot, then every
//               accepted envelope reduced into it;
//   pending     the client's own dispatched actions not yet answered, in
//               dispatch order;
//   optimistic  confirmed with the pending actions replayed on top: what to
//               render.  Cached; anything that changes confirmed or pending
//               makes the next read replay the pending actions (never the
//               history).
//
// Clock policy (the Python reconciler's): `now` is read once per dispatch and
// kept as the action's `dispatchedAt`, the instant it is reduced at whenever
// it is replayed, so a rebase never restamps it; an envelope is reduced at a
// reading taken when it is applied, read only if the reducer needs the time
// (at most once).  Reading the states never reads the clock.
//
// Errors: a ReconcilerError is thrown before anything changes, so the
// reconciler stays as it was and usable; `remote` says whether the host sent
// something out of protocol (else the caller misused the API).  No I/O here:
// the caller sends what dispatch and reconnectParams return and feeds in what
// the host sends.

import { channelKind, clampMs, normalizeAction, normalizeState, reduce } from "./reducers.js";

/** Thrown for a refused call; nothing has changed. */
export class ReconcilerError extends Error {
  constructor(message, { remote = false } = {}) {
    super(message);
    this.name = "ReconcilerError";
    /** true: the host sent something out of protocol; false: the caller's mistake. */
    this.remote = remote;
  }
}

/** How many dropped pending actions are remembered for late echoes. */
export const ORPHAN_LIMIT = 1024;

// The action types a client may dispatch in AHP 0.7.0
// (agenthost_protocol.versions.IS_CLIENT_DISPATCHABLE).
export const CLIENT_DISPATCHABLE = Object.freeze(new Set([
  "annotations/entryRemoved", "annotations/entrySet", "annotations/removed", "annotations/set",
  "annotations/updated", "changeset/filesReviewChanged", "chat/draftChanged",
  "chat/inputAnswerChanged", "chat/inputCompleted", "chat/pendingMessageRemoved",
  "chat/pendingMessageSet", "chat/queuedMessagesReordered", "chat/toolCallComplete",
  "chat/toolCallConfirmed", "chat/toolCallContentChanged", "chat/toolCallResultConfirmed",
  "chat/truncated", "chat/turnCancelled", "chat/turnStarted", "chat/workingDirectoryRemoved",
  "chat/workingDirectorySet", "root/configChanged", "session/activeClientRemoved",
  "session/activeClientSet", "session/configChanged", "session/customizationToggled",
  "session/isArchivedChanged", "session/isReadChanged", "session/mcpServerStartRequested",
  "session/mcpServerStopRequested", "session/titleChanged", "session/workingDirectoryRemoved",
  "session/workingDirectorySet", "terminal/claimed", "terminal/cleared", "terminal/input",
  "terminal/resized", "terminal/titleChanged",
]));

const FAMILY = {
  root: "root/",
  session: "session/",
  chat: "chat/",
  terminal: "terminal/",
  changeset: "changeset/",
  annotations: "annotations/",
  resourceWatch: "resourceWatch/",
};

const isObject = (value) => value !== null && typeof value === "object" && !Array.isArray(value);
const isInt = (value) => typeof value === "number" && Number.isInteger(value);
const absent = (value) => value === undefined || value === null;

// The kind of a channel whose URI the library does not recognise (terminal and
// changeset URIs may be server-defined): by the shape of its state.
function kindByShape(state) {
  if ("agents" in state) return "root";
  if ("provider" in state && "lifecycle" in state) return "session";
  if ("turns" in state) return "chat";
  if ("claim" in state && "content" in state) return "terminal";
  if ("files" in state) return "changeset";
  if ("annotations" in state) return "annotations";
  if ("root" in state && "recursive" in state) return "resourceWatch";
  return null;
}

function checkSnapshot(snapshot, where) {
  if (!isObject(snapshot)) throw new ReconcilerError(`${where}: not a snapshot`, { remote: true });
  if (typeof snapshot.resource !== "string") {
    throw new ReconcilerError(`${where}.resource: not a URI`, { remote: true });
  }
  if (!isInt(snapshot.fromSeq)) {
    throw new ReconcilerError(`${where}.fromSeq: not an integer`, { remote: true });
  }
  if (!isObject(snapshot.state)) {
    throw new ReconcilerError(`${where}.state: not a channel state`, { remote: true });
  }
  const byUri = channelKind(snapshot.resource);
  const kind = byUri === null ? kindByShape(snapshot.state) : byUri;
  if (!Object.prototype.hasOwnProperty.call(FAMILY, kind)) {
    throw new ReconcilerError(`${where}: ${snapshot.resource} has no state`, { remote: true });
  }
  return kind;
}

function checkEnvelope(envelope, where) {
  const fail = (what) => new ReconcilerError(`${where}${what}`, { remote: true });
  if (!isObject(envelope)) throw fail(": not an action envelope");
  if (typeof envelope.channel !== "string") throw fail(".channel: not a URI");
  if (!isInt(envelope.serverSeq)) throw fail(".serverSeq: not an integer");
  if (!isObject(envelope.action) || typeof envelope.action.type !== "string") {
    throw fail(".action: not a state action");
  }
  const origin = envelope.origin;
  if (!absent(origin)) {
    if (!isObject(origin)) throw fail(".origin: not an ActionOrigin");
    if (typeof origin.clientId !== "string") throw fail(".origin.clientId: not a string");
    if (!isInt(origin.clientSeq)) throw fail(".origin.clientSeq: not an integer");
  }
  if (!absent(envelope.rejectionReason) && typeof envelope.rejectionReason !== "string") {
    throw fail(".rejectionReason: not a string");
  }
}

function newChannel(kind, state, lastSeen) {
  return { kind, confirmed: state, lastSeen, pending: new Map(), cache: null };
}

function copyChannel(ch) {
  return { ...ch, pending: new Map(ch.pending) };
}

function publicEntry(entry) {
  return { clientSeq: entry.clientSeq, channel: entry.channel, action: entry.action, dispatchedAt: entry.dispatchedAt };
}

function rememberOrphans(orphans, dropped) {
  for (const entry of dropped.slice(Math.max(0, dropped.length - ORPHAN_LIMIT))) {
    orphans.set(entry.clientSeq, entry);
  }
  while (orphans.size > ORPHAN_LIMIT) orphans.delete(orphans.keys().next().value);
}

function allPending(channels) {
  const out = [];
  for (const ch of channels) out.push(...ch.pending.values());
  return out;
}

export class Reconciler {
  /**
   * `clientId` is the id sent in `initialize` (echoes whose origin.clientId
   * equals it are ours); `now` returns epoch milliseconds.
   */
  constructor(clientId, now = () => Date.now(), { serverSeq = 0 } = {}) {
    if (typeof clientId !== "string") throw new ReconcilerError("clientId is not a string");
    if (typeof now !== "function") throw new ReconcilerError("now is not a function");
    this.clientId = clientId;
    this._now = now;
    this._nextClientSeq = 1;
    this._lastSeen = serverSeq;
    this._channels = new Map();
    this._released = new Set(); // channels dropped; their envelopes may still be in flight
    this._orphans = new Map(); // dropped pending actions by clientSeq, for late echoes
  }

  // -- reading -------------------------------------------------------------------

  /** The highest serverSeq seen (envelopes and snapshots), for `reconnect`. */
  get lastSeenServerSeq() {
    return this._lastSeen;
  }

  /** The tracked channel URIs, in subscription order. */
  get channels() {
    return [...this._channels.keys()];
  }

  /** The kind of a tracked channel ("chat", ...). */
  kind(channel) {
    return this._get(channel).kind;
  }

  /** The host-acknowledged state of `channel`. */
  confirmed(channel) {
    return this._get(channel).confirmed;
  }

  /** Our dispatched, unanswered actions on `channel`, oldest first. */
  pending(channel) {
    return [...this._get(channel).pending.values()].map(publicEntry);
  }

  /** `confirmed` with the pending actions replayed, each at its dispatchedAt: what to render. */
  optimistic(channel) {
    const ch = this._get(channel);
    if (!ch.pending.size) return ch.confirmed;
    if (ch.cache === null) {
      let state = ch.confirmed;
      for (const entry of ch.pending.values()) {
        try {
          state = reduce(ch.kind, state, entry.action, entry.dispatchedAt);
        } catch (error) {
          // our actions reduced when dispatched: the host's state is at fault
          throw new ReconcilerError(
            `the state of ${channel} from the host cannot take ${entry.action.type}: ${error}`,
            { remote: true },
          );
        }
      }
      ch.cache = state;
    }
    return ch.cache;
  }

  /** The params of the `reconnect` request. */
  reconnectParams() {
    return { clientId: this.clientId, lastSeenServerSeq: this._lastSeen, subscriptions: this.channels };
  }

  // -- subscriptions ---------------------------------------------------------------

  /** Track the channel of a `subscribe` (or `initialize`) snapshot: `{resource, state, fromSeq}`. */
  subscribe(snapshot) {
    const kind = checkSnapshot(snapshot, "snapshot");
    const channel = snapshot.resource;
    if (this._channels.has(channel)) throw new ReconcilerError(`${channel} is already subscribed`);
    this._channels.set(channel, newChannel(kind, normalizeState(kind, snapshot.state), snapshot.fromSeq));
    this._released.delete(channel);
    this._lastSeen = Math.max(this._lastSeen, snapshot.fromSeq);
  }

  /** Stop tracking `channel`; returns its pending actions, which are dropped. */
  unsubscribe(channel) {
    const dropped = [...this._get(channel).pending.values()];
    this._channels.delete(channel);
    this._released.add(channel);
    rememberOrphans(this._orphans, dropped);
    return dropped.map(publicEntry);
  }

  // -- sending -----------------------------------------------------------------------

  /**
   * Apply `action` optimistically; returns the `dispatchAction` params to send,
   * `{channel, clientSeq, action}`.  Reads the clock once.
   */
  dispatch(channel, action) {
    const ch = this._get(channel);
    if (!isObject(action) || typeof action.type !== "string") {
      throw new ReconcilerError("dispatch takes a state action");
    }
    if (!CLIENT_DISPATCHABLE.has(action.type)) {
      throw new ReconcilerError(`${action.type} is not a client-dispatchable action`);
    }
    if (!action.type.startsWith(FAMILY[ch.kind])) {
      throw new ReconcilerError(`${action.type} cannot be dispatched to ${channel} (a ${ch.kind} channel)`);
    }
    // as the host will read it: keys no AHP type defines dropped
    action = normalizeAction(action);
    const dispatchedAt = this._readClock();
    let cache;
    try {
      cache = reduce(ch.kind, this.optimistic(channel), action, dispatchedAt);
    } catch (error) {
      if (error instanceof ReconcilerError) throw error;
      throw new ReconcilerError(`${action.type} cannot be applied: ${error}`);
    }
    const clientSeq = this._nextClientSeq++;
    ch.pending.set(clientSeq, { clientSeq, channel, action, dispatchedAt });
    ch.cache = cache;
    return { channel, clientSeq, action };
  }

  // -- receiving ---------------------------------------------------------------------

  /**
   * Reconcile one `action` notification's envelope.  Returns
   * `{channel, applied, kind, clientSeq?, rejectionReason?, late?}` where kind is
   * "foreign" (another client's or the host's action, applied), "confirmed" (our
   * own action echoed and applied; `late` when a reconnect or an unsubscribe had
   * already dropped it), "rejected" (our own action refused: nothing applied) or
   * "ignored" (a duplicate serverSeq, another client's rejected action, or a
   * channel no longer tracked; `reason` says which).
   */
  receive(envelope) {
    const world = { channels: this._channels, orphans: this._orphans, released: this._released };
    const result = this._receiveInto(world, envelope, "envelope");
    this._lastSeen = Math.max(this._lastSeen, envelope.serverSeq);
    return result;
  }

  /**
   * Apply the host's answer to `reconnect`: a replay (`{type: "replay", actions,
   * missing}`: the envelopes are received as by `receive`, then every action still
   * pending is dropped) or snapshots (`{type: "snapshot", snapshots}`: every
   * tracked channel restarts from its snapshot, all pending actions dropped).
   * Returns `{kind, received, rejected: [{clientSeq, channel, action, reason}],
   * dropped, removed}`: `dropped` are the pending actions cleared without an
   * answer (the caller may send them again), `removed` the channels no longer
   * tracked.
   */
  applyReconnect(result) {
    if (isObject(result) && result.type === "replay") return this._applyReplay(result);
    if (isObject(result) && result.type === "snapshot") return this._applySnapshots(result);
    throw new ReconcilerError("applyReconnect takes a reconnect result", { remote: true });
  }

  // -- internals ---------------------------------------------------------------------

  _get(channel) {
    const ch = typeof channel === "string" ? this._channels.get(channel) : undefined;
    if (ch === undefined) throw new ReconcilerError(`channel ${channel} is not subscribed`);
    return ch;
  }

  _readClock() {
    const value = this._now();
    if (typeof value !== "number") throw new ReconcilerError("the clock did not return epoch milliseconds");
    return clampMs(value);
  }

  // The clock for one reduction: read at most once, and only if asked.
  _reading() {
    let ms = null;
    return () => {
      if (ms === null) ms = this._readClock();
      return ms;
    };
  }

  _reduce(ch, action) {
    try {
      return reduce(ch.kind, ch.confirmed, action, this._reading());
    } catch (error) {
      if (error instanceof ReconcilerError) throw error;
      throw new ReconcilerError(`cannot apply ${action.type}: ${error}`, { remote: true });
    }
  }

  // Reconcile `envelope` into `world` (channels, orphans, released); checks
  // everything before changing anything.
  _receiveInto(world, envelope, where) {
    checkEnvelope(envelope, where);
    const channel = envelope.channel;
    const ch = world.channels.get(channel);
    if (ch === undefined) {
      if (world.released.has(channel)) {
        return { channel, applied: false, kind: "ignored", reason: "unsubscribed" };
      }
      throw new ReconcilerError(`action envelope for ${channel}, which is not subscribed`, { remote: true });
    }
    const seq = envelope.serverSeq;
    if (seq <= ch.lastSeen) return { channel, applied: false, kind: "ignored", reason: "duplicate" };
    const reason = absent(envelope.rejectionReason) ? null : envelope.rejectionReason;
    const origin = absent(envelope.origin) ? null : envelope.origin;
    if (origin === null || origin.clientId !== this.clientId) {
      if (reason !== null) {
        ch.lastSeen = seq;
        return { channel, applied: false, kind: "ignored", reason: "foreign-rejected" };
      }
      const next = this._reduce(ch, envelope.action);
      if (next !== ch.confirmed) ch.cache = null;
      ch.confirmed = next;
      ch.lastSeen = seq;
      return { channel, applied: true, kind: "foreign" };
    }
    const clientSeq = origin.clientSeq;
    const entry = ch.pending.get(clientSeq);
    if (entry === undefined) {
      const orphan = world.orphans.get(clientSeq);
      if (orphan === undefined || orphan.channel !== channel) {
        throw new ReconcilerError(
          `echo of clientSeq ${clientSeq} on ${channel} matches no pending action`, { remote: true },
        );
      }
      if (reason !== null) {
        world.orphans.delete(clientSeq);
        ch.lastSeen = seq;
        return { channel, applied: false, kind: "rejected", clientSeq, rejectionReason: reason, late: true, action: orphan.action };
      }
      const next = this._reduce(ch, envelope.action);
      world.orphans.delete(clientSeq);
      if (next !== ch.confirmed) ch.cache = null;
      ch.confirmed = next;
      ch.lastSeen = seq;
      return { channel, applied: true, kind: "confirmed", clientSeq, late: true };
    }
    if (reason !== null) {
      ch.pending.delete(clientSeq);
      ch.cache = null;
      ch.lastSeen = seq;
      return { channel, applied: false, kind: "rejected", clientSeq, rejectionReason: reason, action: entry.action };
    }
    const next = this._reduce(ch, envelope.action);
    ch.pending.delete(clientSeq);
    ch.cache = null; // replayed on the next read: the echo was reduced at its own reading
    ch.confirmed = next;
    ch.lastSeen = seq;
    return { channel, applied: true, kind: "confirmed", clientSeq };
  }

  _applyReplay(result) {
    if (!Array.isArray(result.actions)) throw new ReconcilerError("replay.actions: not a list", { remote: true });
    if (!Array.isArray(result.missing)) throw new ReconcilerError("replay.missing: not a list", { remote: true });
    result.missing.forEach((uri, index) => {
      if (typeof uri !== "string") {
        throw new ReconcilerError(`replay.missing[${index}]: not a URI`, { remote: true });
      }
    });
    const missing = new Set(result.missing);
    const removed = this.channels.filter((uri) => missing.has(uri));
    // work on copies: nothing changes unless every envelope is accepted
    const world = {
      channels: new Map(
        [...this._channels].filter(([uri]) => !missing.has(uri)).map(([uri, ch]) => [uri, copyChannel(ch)]),
      ),
      orphans: new Map(this._orphans),
      released: new Set([...this._released, ...missing]),
    };
    let lastSeen = this._lastSeen;
    const received = result.actions.map((envelope, index) => {
      const outcome = this._receiveInto(world, envelope, `replay.actions[${index}]`);
      lastSeen = Math.max(lastSeen, envelope.serverSeq);
      return outcome;
    });
    const dropped = [
      ...allPending(removed.map((uri) => this._channels.get(uri))),
      ...allPending(world.channels.values()),
    ].sort((a, b) => a.clientSeq - b.clientSeq);
    for (const ch of world.channels.values()) {
      ch.pending.clear();
      ch.cache = null;
    }
    rememberOrphans(world.orphans, dropped);
    this._channels = world.channels;
    this._orphans = world.orphans;
    for (const uri of removed) this._released.add(uri);
    this._lastSeen = lastSeen;
    const rejected = received
      .filter((outcome) => outcome.kind === "rejected")
      .map((outcome) => ({
        clientSeq: outcome.clientSeq, channel: outcome.channel, action: outcome.action, reason: outcome.rejectionReason,
      }));
    return { kind: "replay", received, rejected, dropped: dropped.map(publicEntry), removed };
  }

  _applySnapshots(result) {
    if (!Array.isArray(result.snapshots)) {
      throw new ReconcilerError("snapshot.snapshots: not a list", { remote: true });
    }
    const fresh = new Map();
    result.snapshots.forEach((snapshot, index) => {
      const where = `snapshot.snapshots[${index}]`;
      const kind = checkSnapshot(snapshot, where);
      const uri = snapshot.resource;
      if (!this._channels.has(uri)) {
        throw new ReconcilerError(`${where}: ${uri} is not subscribed`, { remote: true });
      }
      if (fresh.has(uri)) throw new ReconcilerError(`${where}: a second snapshot of ${uri}`, { remote: true });
      fresh.set(uri, [kind, snapshot]);
    });
    const removed = this.channels.filter((uri) => !fresh.has(uri));
    const dropped = allPending(this._channels.values()).sort((a, b) => a.clientSeq - b.clientSeq);
    rememberOrphans(this._orphans, dropped);
    this._channels = new Map(
      [...fresh].map(([uri, [kind, snapshot]]) => [
        uri, newChannel(kind, normalizeState(kind, snapshot.state), snapshot.fromSeq),
      ]),
    );
    for (const uri of removed) this._released.add(uri);
    if (fresh.size) {
      // set, not raised: a restarted host may count from a lower serverSeq
      this._lastSeen = Math.max(...[...fresh.values()].map(([, snapshot]) => snapshot.fromSeq));
    }
    return { kind: "snapshot", received: [], rejected: [], dropped: dropped.map(publicEntry), removed };
  }
}
