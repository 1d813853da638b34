// A minimal stand-in of the AHP 0.7.0 reducers (the web-js helper ships the full
// port of agenthost_protocol.reducers; this one covers what the page shows:
// root, session and chat actions of turns, tool calls, input requests and
// pending messages). Pure: never mutates its inputs; unknown actions change nothing.

const IDLE = 1, ERROR = 2, IN_PROGRESS = 8, INPUT_NEEDED = 24;
const ACTIVITY = 31, IS_READ = 32;

export function channelKind(uri) {
  if (typeof uri !== "string") return null;
  if (uri === "ahp-root://") return "root";
  const colon = uri.indexOf(":");
  if (colon < 0) return null;
  switch (uri.slice(0, colon)) {
    case "ahp-session": return "session";
    case "ahp-chat": return "chat";
    case "ahp-terminal": return "terminal";
    case "ahp-resource-watch": return "resourceWatch";
    default: return null;
  }
}

function iso(now) {
  return new Date(now).toISOString();
}

function without(object, ...keys) {
  const copy = { ...object };
  for (const key of keys) delete copy[key];
  return copy;
}

function defined(object) {
  const copy = {};
  for (const [key, value] of Object.entries(object)) if (value !== undefined && value !== null) copy[key] = value;
  return copy;
}

export function reduce(kind, state, action, now = Date.now()) {
  if (state === null || typeof state !== "object" || !action || typeof action.type !== "string") return state;
  switch (kind) {
    case "root": return reduceRoot(state, action);
    case "session": return reduceSession(state, action);
    case "chat": return reduceChat(state, action, now);
    default: return state;
  }
}

function reduceRoot(state, action) {
  switch (action.type) {
    case "root/agentsChanged": return { ...state, agents: action.agents };
    case "root/activeSessionsChanged": return { ...state, activeSessions: action.activeSessions };
    case "root/terminalsChanged": return { ...state, terminals: action.terminals };
    case "root/configChanged": {
      if (!state.config) return state;
      const values = action.replace ? { ...action.config } : { ...state.config.values, ...action.config };
      return { ...state, config: { ...state.config, values } };
    }
    default: return state;
  }
}

function withActivity(status, activity) {
  return (status & ~ACTIVITY) | activity;
}

function reduceSession(state, action) {
  switch (action.type) {
    case "session/ready": return { ...state, lifecycle: "ready" };
    case "session/creationFailed": return { ...state, lifecycle: "creationFailed", creationError: action.error };
    case "session/chatAdded": {
      const chats = state.chats.filter((c) => c.resource !== action.summary.resource);
      const index = state.chats.findIndex((c) => c.resource === action.summary.resource);
      if (index >= 0) {
        const copy = state.chats.slice();
        copy[index] = action.summary;
        return { ...state, chats: copy };
      }
      return { ...state, chats: [...chats, action.summary] };
    }
    case "session/chatRemoved": {
      const chats = state.chats.filter((c) => c.resource !== action.chat);
      const next = { ...state, chats };
      if (state.defaultChat === action.chat) delete next.defaultChat;
      return next;
    }
    case "session/chatUpdated": {
      const chats = state.chats.map((c) => (c.resource === action.chat
        ? { ...c, ...without(action.changes, "resource") } : c));
      return { ...state, chats };
    }
    case "session/defaultChatChanged":
      return action.defaultChat ? { ...state, defaultChat: action.defaultChat } : without(state, "defaultChat");
    case "session/titleChanged": return { ...state, title: action.title };
    case "session/isReadChanged":
      return { ...state, status: action.isRead ? state.status | IS_READ : state.status & ~IS_READ };
    case "session/activityChanged":
      return action.activity === undefined ? without(state, "activity") : { ...state, activity: action.activity };
    case "session/activeClientSet": {
      const others = state.activeClients.filter((c) => c.clientId !== action.activeClient.clientId);
      const index = state.activeClients.findIndex((c) => c.clientId === action.activeClient.clientId);
      if (index >= 0) {
        const copy = state.activeClients.slice();
        copy[index] = action.activeClient;
        return { ...state, activeClients: copy };
      }
      return { ...state, activeClients: [...others, action.activeClient] };
    }
    case "session/activeClientRemoved":
      return { ...state, activeClients: state.activeClients.filter((c) => c.clientId !== action.clientId) };
    case "session/inputNeededSet": {
      const needed = (state.inputNeeded || []).filter((r) => r.id !== action.request.id);
      return { ...state, inputNeeded: [...needed, action.request], status: withActivity(state.status, INPUT_NEEDED) };
    }
    case "session/inputNeededRemoved": {
      if (!state.inputNeeded) return state;
      const needed = state.inputNeeded.filter((r) => r.id !== action.id);
      const next = { ...state, inputNeeded: needed };
      if (!needed.length && (state.status & ACTIVITY) === INPUT_NEEDED) next.status = withActivity(state.status, IN_PROGRESS);
      return next;
    }
    default: return state;
  }
}

// ── chat ─────────────────────────────────────────────────────────────────────

function blocking(part) {
  if (part.kind === "toolCall") {
    const status = part.toolCall.status;
    return status === "pending-confirmation" || status === "pending-result-confirmation" || status === "auth-required";
  }
  return part.kind === "inputRequest" && part.response === undefined;
}

function chatStatus(status, turn, error = false) {
  let activity = error ? ERROR : IDLE;
  if (turn) activity = turn.responseParts.some(blocking) ? INPUT_NEEDED : IN_PROGRESS;
  return withActivity(status, activity);
}

function withParts(state, turn, parts, now, stamp = false) {
  const activeTurn = { ...turn, responseParts: parts };
  const next = { ...state, activeTurn, status: chatStatus(state.status, activeTurn) };
  if (stamp) next.modifiedAt = iso(now);
  return next;
}

function base(tc, meta) {
  return defined({
    toolCallId: tc.toolCallId, toolName: tc.toolName, displayName: tc.displayName,
    intention: tc.intention, contributor: tc.contributor, _meta: meta ?? tc._meta,
  });
}

function transition(state, action, now, update) {
  const turn = state.activeTurn;
  if (!turn || turn.id !== action.turnId) return { ...state, status: chatStatus(state.status, turn) };
  const parts = turn.responseParts.map((part) => (part.kind === "toolCall" && part.toolCall.toolCallId === action.toolCallId
    ? { ...part, toolCall: update(part.toolCall) } : part));
  return withParts(state, turn, parts, now);
}

function appendText(state, action, kind) {
  const turn = state.activeTurn;
  if (!turn || turn.id !== action.turnId) return state;
  const parts = turn.responseParts.map((part) => (part.kind === kind && part.id === action.partId
    ? { ...part, content: part.content + action.content } : part));
  return { ...state, activeTurn: { ...turn, responseParts: parts } };
}

function forceCancel(part) {
  if (part.kind !== "toolCall") return part;
  const tc = part.toolCall;
  if (tc.status === "completed" || tc.status === "cancelled") return part;
  return {
    ...part,
    toolCall: defined({
      status: "cancelled", ...base(tc),
      invocationMessage: tc.status === "streaming" ? (tc.invocationMessage ?? "") : tc.invocationMessage,
      toolInput: tc.status === "streaming" ? undefined : tc.toolInput,
      reason: "skipped",
    }),
  };
}

function endTurn(state, action, end, error, now) {
  const turn = state.activeTurn;
  if (!turn || turn.id !== action.turnId) return state;
  const finished = defined({
    id: turn.id, startedAt: turn.startedAt, duration: Math.max(0, action.duration),
    message: turn.message, responseParts: turn.responseParts.map(forceCancel),
    usage: turn.usage, state: end, error,
  });
  const next = without(state, "activeTurn");
  next.turns = [...state.turns, finished];
  next.modifiedAt = iso(now);
  next.status = chatStatus(state.status, null, end === "error");
  return next;
}

function openRequest(turn, requestId) {
  if (!turn) return -1;
  return turn.responseParts.findIndex((p) => p.kind === "inputRequest" && p.request.id === requestId && p.response === undefined);
}

function reduceChat(state, action, now) {
  const turn = state.activeTurn;
  switch (action.type) {
    case "chat/turnStarted": {
      const activeTurn = { id: action.turnId, startedAt: action.startedAt, message: action.message, responseParts: [] };
      const next = { ...state, activeTurn, modifiedAt: iso(now), status: ((state.status & ~ACTIVITY & ~IS_READ) | IN_PROGRESS) };
      const consumed = action.queuedMessageId;
      if (consumed) {
        if (next.steeringMessage && next.steeringMessage.id === consumed) delete next.steeringMessage;
        if (next.queuedMessages) {
          const kept = next.queuedMessages.filter((m) => m.id !== consumed);
          if (kept.length) next.queuedMessages = kept; else delete next.queuedMessages;
        }
      }
      return next;
    }
    case "chat/responsePart":
      if (!turn || turn.id !== action.turnId) return state;
      return withParts(state, turn, [...turn.responseParts, action.part], now);
    case "chat/delta": return appendText(state, action, "markdown");
    case "chat/reasoning": return appendText(state, action, "reasoning");
    case "chat/toolCallStart": {
      if (!turn || turn.id !== action.turnId) return state;
      const toolCall = defined({
        status: "streaming", toolCallId: action.toolCallId, toolName: action.toolName,
        displayName: action.displayName, intention: action.intention, contributor: action.contributor, _meta: action._meta,
      });
      return withParts(state, turn, [...turn.responseParts, { kind: "toolCall", toolCall }], now);
    }
    case "chat/toolCallDelta":
      return transition(state, action, now, (tc) => {
        if (tc.status !== "streaming") return tc;
        const next = { ...tc };
        if (action.content !== undefined) next._partialInput = (tc._partialInput ?? "") + action.content;
        if (action.invocationMessage !== undefined) next.invocationMessage = action.invocationMessage;
        return next;
      });
    case "chat/toolCallReady":
      return transition(state, action, now, (tc) => {
        if (!["streaming", "running", "pending-confirmation"].includes(tc.status)) return tc;
        const toolInput = action.toolInput ?? (tc.status === "streaming" ? undefined : tc.toolInput);
        const common = { ...base({ ...tc, intention: action.intention ?? tc.intention, contributor: action.contributor ?? tc.contributor }, action._meta) };
        if (action.confirmed) {
          return defined({ status: "running", ...common, invocationMessage: action.invocationMessage, toolInput, confirmed: action.confirmed });
        }
        const previous = tc.status === "pending-confirmation" ? tc : {};
        return defined({
          status: "pending-confirmation", ...common, invocationMessage: action.invocationMessage, toolInput,
          confirmationTitle: action.confirmationTitle ?? previous.confirmationTitle,
          riskAssessment: action.riskAssessment ?? previous.riskAssessment,
          edits: action.edits ?? previous.edits, editable: action.editable ?? previous.editable,
          options: action.options ?? previous.options,
        });
      });
    case "chat/toolCallConfirmed":
      return transition(state, action, now, (tc) => {
        if (tc.status !== "pending-confirmation") return tc;
        const selectedOption = (tc.options || []).find((o) => o.id === action.selectedOptionId);
        if (action.approved) {
          const toolInput = action.editedToolInput !== undefined && typeof tc.toolInput === "string" ? action.editedToolInput : tc.toolInput;
          return defined({ status: "running", ...base(tc, action._meta), invocationMessage: tc.invocationMessage, toolInput, confirmed: action.confirmed, selectedOption });
        }
        return defined({
          status: "cancelled", ...base(tc, action._meta), invocationMessage: tc.invocationMessage, toolInput: tc.toolInput,
          reason: action.reason, reasonMessage: action.reasonMessage, userSuggestion: action.userSuggestion, selectedOption,
        });
      });
    case "chat/toolCallComplete":
      return transition(state, action, now, (tc) => {
        let confirmed, selectedOption;
        if (tc.status === "running") ({ confirmed, selectedOption } = tc);
        else if (tc.status === "pending-confirmation") confirmed = "not-needed";
        else return tc;
        const result = action.result;
        return defined({
          status: action.requiresResultConfirmation ? "pending-result-confirmation" : "completed",
          ...base(tc, action._meta), invocationMessage: tc.invocationMessage, toolInput: tc.toolInput,
          confirmed, selectedOption, success: result.success, pastTenseMessage: result.pastTenseMessage,
          content: result.content, structuredContent: result.structuredContent, error: result.error,
        });
      });
    case "chat/toolCallResultConfirmed":
      return transition(state, action, now, (tc) => {
        if (tc.status !== "pending-result-confirmation") return tc;
        if (action.approved) return { ...tc, status: "completed" };
        return defined({ status: "cancelled", ...base(tc), invocationMessage: tc.invocationMessage, toolInput: tc.toolInput, reason: "result-denied" });
      });
    case "chat/turnComplete": return endTurn(state, action, "complete", undefined, now);
    case "chat/turnCancelled": return endTurn(state, action, "cancelled", undefined, now);
    case "chat/error": return endTurn(state, action, "error", action.error, now);
    case "chat/usage":
      if (!turn || turn.id !== action.turnId) return state;
      return { ...state, activeTurn: { ...turn, usage: action.usage } };
    case "chat/pendingMessageSet": {
      const entry = { id: action.id, message: action.message };
      if (action.kind === "steering") return { ...state, steeringMessage: entry };
      const queued = state.queuedMessages || [];
      const index = queued.findIndex((m) => m.id === entry.id);
      const next = queued.slice();
      if (index >= 0) next[index] = entry; else next.push(entry);
      return { ...state, queuedMessages: next };
    }
    case "chat/pendingMessageRemoved": {
      if (action.kind === "steering") {
        return state.steeringMessage && state.steeringMessage.id === action.id ? without(state, "steeringMessage") : state;
      }
      if (!state.queuedMessages) return state;
      const kept = state.queuedMessages.filter((m) => m.id !== action.id);
      return kept.length ? { ...state, queuedMessages: kept } : without(state, "queuedMessages");
    }
    case "chat/inputRequested": {
      if (!turn) return state;
      const index = turn.responseParts.findIndex((p) => p.kind === "inputRequest" && p.request.id === action.request.id && p.response === undefined);
      const parts = turn.responseParts.slice();
      if (index < 0) parts.push({ kind: "inputRequest", request: action.request });
      else {
        const request = action.request.answers === undefined && parts[index].request.answers !== undefined
          ? { ...action.request, answers: parts[index].request.answers } : action.request;
        parts[index] = { kind: "inputRequest", request };
      }
      const next = withParts(state, turn, parts, now, true);
      next.status &= ~IS_READ;
      return next;
    }
    case "chat/inputAnswerChanged": {
      const index = openRequest(turn, action.requestId);
      if (index < 0) return state;
      const part = turn.responseParts[index];
      const answers = { ...(part.request.answers || {}) };
      if (action.answer === undefined) delete answers[action.questionId]; else answers[action.questionId] = action.answer;
      const request = Object.keys(answers).length ? { ...part.request, answers } : without(part.request, "answers");
      const parts = turn.responseParts.slice();
      parts[index] = { ...part, request };
      return { ...state, activeTurn: { ...turn, responseParts: parts }, modifiedAt: iso(now) };
    }
    case "chat/inputCompleted": {
      const index = openRequest(turn, action.requestId);
      if (index < 0) return state;
      const part = turn.responseParts[index];
      const answers = { ...(part.request.answers || {}), ...(action.answers || {}) };
      const request = Object.keys(answers).length ? { ...part.request, answers } : without(part.request, "answers");
      const parts = turn.responseParts.slice();
      parts[index] = { kind: "inputRequest", request, response: action.response };
      return withParts(state, turn, parts, now, true);
    }
    case "chat/draftChanged":
      return action.draft === undefined ? without(state, "draft") : { ...state, draft: action.draft };
    case "chat/activityChanged":
      return action.activity === undefined ? without(state, "activity") : { ...state, activity: action.activity };
    case "chat/turnsLoaded": {
      const present = new Set(state.turns.map((t) => t.id));
      const older = action.turns.filter((t) => !present.has(t.id));
      const next = { ...state, turns: [...older, ...state.turns] };
      if (action.turnsNextCursor) next.turnsNextCursor = action.turnsNextCursor; else delete next.turnsNextCursor;
      return next;
    }
    default: return state;
  }
}
