// A minimal stand-in of the write-ahead reconciler (the web-js helper ships the full
// one, modelled on agenthost_protocol/reconciler.py's ClientReconciler). No I/O: the
// caller sends what dispatch() returns and feeds every action envelope to receive().
import { channelKind, reduce } from "./reducers.js";

export class Reconciler {
  constructor(clientId, now = () => Date.now()) {
    this.clientId = clientId;
    this.now = now;
    this.lastSeenServerSeq = 0;
    this._nextSeq = 1;
    this._channels = new Map(); // uri -> {kind, confirmed, optimistic, fromSeq, pending: []}
  }

  get channels() {
    return [...this._channels.keys()];
  }

  subscribe(snapshot) {
    const kind = channelKind(snapshot.resource);
    const old = this._channels.get(snapshot.resource);
    const entry = { kind, confirmed: snapshot.state, optimistic: snapshot.state, fromSeq: snapshot.fromSeq, pending: old ? old.pending : [] };
    this._channels.set(snapshot.resource, entry);
    this._reapply(entry);
    if (snapshot.fromSeq > this.lastSeenServerSeq) this.lastSeenServerSeq = snapshot.fromSeq;
  }

  unsubscribe(channel) {
    this._channels.delete(channel);
  }

  confirmed(channel) {
    const entry = this._channels.get(channel);
    return entry ? entry.confirmed : undefined;
  }

  optimistic(channel) {
    const entry = this._channels.get(channel);
    return entry ? entry.optimistic : undefined;
  }

  pending(channel) {
    const entry = this._channels.get(channel);
    return entry ? entry.pending.slice() : [];
  }

  dispatch(channel, action) {
    const entry = this._channels.get(channel);
    const clientSeq = this._nextSeq++;
    if (entry) {
      entry.pending.push({ clientSeq, channel, action, dispatchedAt: this.now() });
      entry.optimistic = reduce(entry.kind, entry.optimistic, action, this.now());
    }
    return { channel, clientSeq, action };
  }

  receive(envelope) {
    const channel = envelope.channel;
    if (typeof envelope.serverSeq === "number" && envelope.serverSeq > this.lastSeenServerSeq) {
      this.lastSeenServerSeq = envelope.serverSeq;
    }
    const entry = this._channels.get(channel);
    if (!entry || envelope.serverSeq <= entry.fromSeq) return { channel, applied: false, kind: "ignored" };
    const origin = envelope.origin;
    const mine = origin && origin.clientId === this.clientId;
    if (mine) {
      const index = entry.pending.findIndex((p) => p.clientSeq === origin.clientSeq);
      if (index >= 0) entry.pending.splice(index, 1);
      if (envelope.rejectionReason !== undefined) {
        this._reapply(entry);
        return { channel, applied: false, kind: "rejected", clientSeq: origin.clientSeq, rejectionReason: envelope.rejectionReason };
      }
      entry.confirmed = reduce(entry.kind, entry.confirmed, envelope.action, this.now());
      this._reapply(entry);
      return { channel, applied: true, kind: "confirmed", clientSeq: origin.clientSeq };
    }
    if (envelope.rejectionReason !== undefined) return { channel, applied: false, kind: "ignored" };
    entry.confirmed = reduce(entry.kind, entry.confirmed, envelope.action, this.now());
    this._reapply(entry);
    return { channel, applied: true, kind: "foreign" };
  }

  reconnectParams() {
    return { clientId: this.clientId, lastSeenServerSeq: this.lastSeenServerSeq, subscriptions: this.channels };
  }

  applyReconnect(result) {
    const rejected = [];
    for (const uri of result.missing || []) this._channels.delete(uri);
    if (result.type === "replay") {
      for (const envelope of result.actions || []) this.receive(envelope);
    } else {
      for (const snapshot of result.snapshots || []) {
        const entry = this._channels.get(snapshot.resource);
        const pending = entry ? entry.pending : [];
        this._channels.set(snapshot.resource, { kind: channelKind(snapshot.resource), confirmed: snapshot.state, optimistic: snapshot.state, fromSeq: snapshot.fromSeq, pending });
        if (snapshot.fromSeq > this.lastSeenServerSeq) this.lastSeenServerSeq = snapshot.fromSeq;
      }
    }
    // what the host has not echoed by now never reached it
    for (const entry of this._channels.values()) {
      for (const p of entry.pending) rejected.push({ ...p, reason: "lost with the connection" });
      entry.pending = [];
      entry.optimistic = entry.confirmed;
    }
    return { rejected };
  }

  _reapply(entry) {
    let state = entry.confirmed;
    for (const p of entry.pending) state = reduce(entry.kind, state, p.action, this.now());
    entry.optimistic = state;
  }
}
