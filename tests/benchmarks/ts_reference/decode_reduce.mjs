// The TypeScript reference side of `bench_decode.py`: `JSON.parse` + `chatReducer`
// per `action` notification line, as the Python side does `parse_message` +
// `chat_reducer`.
//
//   node --expose-gc decode_reduce.mjs REDUCER.mjs LINES.jsonl REPEAT TURNS
//
// REDUCER.mjs is the official chat reducer bundled with esbuild (not part of
// this repository: see docs/performance.md, "How the TypeScript side was
// run"); LINES.jsonl holds the lines `bench_decode.py --write-lines` writes.
// Prints one JSON object: the median and best CPU and wall times per action of
// each loop.
import { readFileSync } from "node:fs";
import { performance } from "node:perf_hooks";

const [reducerPath, linesPath, repeatArg, turnsArg] = process.argv.slice(2);
const { chatReducer } = await import(new URL(reducerPath, `file://${process.cwd()}/`).href);
const lines = readFileSync(linesPath, "utf8").split("\n").filter((l) => l.length > 0);
const repeat = Number(repeatArg ?? 5);
const turns = Number(turnsArg ?? 1000);
const CLOCK = 1_750_000_000_000;
Date.now = () => CLOCK; // the Python benchmark passes a fixed clock too

function initialState() {
  return {
    resource: "ahp-chat:/0b9e3c2a-6f1d-4d8e-9a57-3c1f2e4b5a60",
    title: "Benchmark chat",
    status: 1, // SessionStatus.Idle
    modifiedAt: "2025-06-15T12:00:00.000Z",
    turns: [],
  };
}

function checkFinal(state) {
  if (state.activeTurn !== undefined || state.turns.length !== turns || state.status !== 1) {
    throw new Error("unexpected final state");
  }
  const last = state.turns[state.turns.length - 1];
  if (last.responseParts.length !== 10 || last.responseParts[0].content !== "lorem ip".repeat(40)) {
    throw new Error("unexpected last turn");
  }
}

function timed(fn) {
  globalThis.gc?.();
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  fn();
  const wall = (performance.now() - t0) / 1e3;
  const cpu = process.cpuUsage(cpu0);
  return { cpu: (cpu.user + cpu.system) / 1e6, wall };
}

const loops = {
  "JSON.parse + chatReducer": () => {
    let state = initialState();
    for (const line of lines) {
      state = chatReducer(state, JSON.parse(line).params.action);
    }
    checkFinal(state);
  },
  "JSON.parse": () => {
    for (const line of lines) JSON.parse(line);
  },
};
const actions = lines.map((line) => JSON.parse(line).params.action);
loops["chatReducer"] = () => {
  let state = initialState();
  for (const action of actions) state = chatReducer(state, action);
  checkFinal(state);
};

const runs = Object.fromEntries(Object.keys(loops).map((k) => [k, []]));
for (let i = 0; i < repeat; i++) {
  for (const [name, fn] of Object.entries(loops)) runs[name].push(timed(fn));
}
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const out = { node: process.version, lines: lines.length, repeat };
for (const [name, rs] of Object.entries(runs)) {
  out[name] = {
    cpu_median: median(rs.map((r) => r.cpu)) / lines.length,
    cpu_best: Math.min(...rs.map((r) => r.cpu)) / lines.length,
    wall_median: median(rs.map((r) => r.wall)) / lines.length,
    wall_best: Math.min(...rs.map((r) => r.wall)) / lines.length,
  };
}
console.log(JSON.stringify(out));
