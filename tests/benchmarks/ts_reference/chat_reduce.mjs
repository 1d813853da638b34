// The TypeScript reference side of `bench_deltas.py` (a) and `bench_stream.py` (b):
// the same actions, built first, then only `state = chatReducer(state, action)` timed.
//
//   node --expose-gc chat_reduce.mjs REDUCER.mjs deltas REPEAT [SIZES]
//   node --expose-gc chat_reduce.mjs REDUCER.mjs stream REPEAT [TURNS]
//
// REDUCER.mjs exports the reference `chatReducer` (not part of this repository:
// see docs/performance.md, "How the TypeScript side was run"). SIZES is a
// comma-separated list of delta counts (default 10000,100000,400000), TURNS the
// stream's turns (default 1000). Prints one JSON object: per delta (or action),
// the best over REPEAT runs of the CPU time of this thread (V8's garbage
// collector and compiler threads, which run beside it, left out; read from
// /proc/thread-self/schedstat, else the process's CPU time) and of the wall
// clock, in nanoseconds.
import { readFileSync } from "node:fs";
import { performance } from "node:perf_hooks";

const [reducerPath, mode, repeatArg, sizeArg] = process.argv.slice(2);
const { chatReducer } = await import(new URL(reducerPath, `file://${process.cwd()}/`).href);
const repeat = Number(repeatArg ?? 5);
Date.now = () => 1_750_000_000_000; // the Python benchmarks pass a fixed clock too

function threadCpu() {
  try {
    return Number(readFileSync("/proc/thread-self/schedstat", "utf8").split(" ")[0]) / 1e9;
  } catch {
    const usage = process.cpuUsage();
    return (usage.user + usage.system) / 1e6;
  }
}

function timeRun(initial, actions, check) {
  let state = initial();
  globalThis.gc();
  const cpu0 = threadCpu();
  const wall0 = performance.now();
  for (let i = 0; i < actions.length; i++) state = chatReducer(state, actions[i]);
  const wall = (performance.now() - wall0) / 1e3;
  const cpu = threadCpu() - cpu0;
  check(state);
  return { cpu, wall };
}

function best(runs) {
  return { cpu: Math.min(...runs.map((r) => r.cpu)), wall: Math.min(...runs.map((r) => r.wall)) };
}

function perItem(time, count) {
  return { cpu_ns: (time.cpu / count) * 1e9, wall_ns: (time.wall / count) * 1e9 };
}

if (mode === "deltas") {
  // bench_deltas.py: 8-character deltas, one string each, into one markdown part.
  const initial = () => ({
    resource: "ahp-chat:/bench",
    title: "Benchmark",
    status: 8, // SessionStatus.InProgress
    modifiedAt: "1970-01-01T00:00:00.000Z",
    turns: [],
    activeTurn: {
      id: "turn-1",
      startedAt: "1970-01-01T00:00:00.000Z",
      message: { text: "Hello", origin: { kind: "user" } },
      responseParts: [{ kind: "markdown", id: "md-1", content: "" }],
    },
  });
  const sizes = (sizeArg ?? "10000,100000,400000").split(",").map(Number);
  const streams = new Map();
  for (const count of sizes) {
    const actions = new Array(count);
    for (let i = 0; i < count; i++) {
      const content = String(i % 1e8).padStart(8, "0");
      actions[i] = { type: "chat/delta", turnId: "turn-1", partId: "md-1", content };
    }
    streams.set(count, actions);
  }
  const runs = new Map(sizes.map((count) => [count, []]));
  for (let r = 0; r < repeat; r++) {
    for (const count of sizes) {
      const actions = streams.get(count);
      const last = actions[count - 1].content;
      runs.get(count).push(
        timeRun(initial, actions, (state) => {
          const text = state.activeTurn.responseParts[0].content;
          if (text.length !== count * 8 || !text.endsWith(last)) throw new Error("wrong text");
        }),
      );
    }
  }
  const out = {};
  for (const count of sizes) out[count] = perItem(best(runs.get(count)), count);
  console.log(JSON.stringify(out));
} else if (mode === "stream") {
  // bench_stream.py (tests/benchmarks/_stream.py): 227 actions a turn.
  const turns = Number(sizeArg ?? 1000);
  const DELTA = "lorem ip";
  const initial = () => ({
    resource: "ahp-chat:/0b9e3c2a-6f1d-4d8e-9a57-3c1f2e4b5a60",
    title: "Benchmark chat",
    status: 1, // SessionStatus.Idle
    modifiedAt: "2025-06-15T12:00:00.000Z",
    turns: [],
  });
  const actions = [];
  for (let t = 0; t < turns; t++) {
    const turnId = `turn-${t}`;
    const message = { text: `Question ${t}`, origin: { kind: "user" } };
    actions.push({ type: "chat/turnStarted", turnId, startedAt: "2025-06-15T12:00:00.000Z", message });
    for (let s = 0; s < 5; s++) {
      const partId = `md-${t}-${s}`;
      const toolCallId = `tc-${t}-${s}`;
      const part = { kind: "markdown", id: partId, content: "" };
      actions.push({ type: "chat/responsePart", turnId, part });
      for (let d = 0; d < 40; d++) {
        // A distinct string object per delta, as a decoder would give them.
        actions.push({ type: "chat/delta", turnId, partId, content: DELTA.slice(0, 4) + DELTA.slice(4) });
      }
      const input = '{"pattern": "TODO"}';
      actions.push({ type: "chat/toolCallStart", turnId, toolCallId, toolName: "grep", displayName: "Search" });
      actions.push({ type: "chat/toolCallDelta", turnId, toolCallId, content: input });
      actions.push({
        type: "chat/toolCallReady",
        turnId,
        toolCallId,
        invocationMessage: "Searching for TODO",
        toolInput: input,
        confirmed: "not-needed",
      });
      const content = [{ type: "text", text: "src/app.py:12: # TODO" }];
      const result = { success: true, pastTenseMessage: "Searched for TODO", content };
      actions.push({ type: "chat/toolCallComplete", turnId, toolCallId, result });
    }
    actions.push({ type: "chat/turnComplete", turnId, duration: 4200 });
  }
  const rest = actions.filter((action) => action.type !== "chat/delta");
  const check = (withDeltas) => (state) => {
    if (state.activeTurn !== undefined || state.turns.length !== turns || state.status !== 1) {
      throw new Error("unexpected final state");
    }
    const last = state.turns[turns - 1];
    if (last.responseParts.length !== 10 || last.responseParts[1].toolCall.status !== "completed") {
      throw new Error("unexpected last turn");
    }
    if (last.responseParts[0].content !== (withDeltas ? DELTA.repeat(40) : "")) {
      throw new Error("unexpected text");
    }
  };
  const full = [];
  const others = [];
  for (let r = 0; r < repeat; r++) {
    full.push(timeRun(initial, actions, check(true)));
    others.push(timeRun(initial, rest, check(false)));
  }
  const all = best(full);
  const other = best(others);
  const deltas = actions.length - rest.length;
  const delta = { cpu: all.cpu - other.cpu, wall: all.wall - other.wall };
  console.log(
    JSON.stringify({
      actions: actions.length,
      all: perItem(all, actions.length),
      other: perItem(other, rest.length),
      delta: perItem(delta, deltas),
    }),
  );
} else {
  throw new Error(`unknown mode ${mode}: deltas or stream`);
}
