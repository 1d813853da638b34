// The TypeScript reference side of the corpus workload of `bench_reduce_cli.py`:
// every reducer fixture's actions applied to its initial state, all seven reducers.
//
//   node --expose-gc reduce_corpus.mjs REDUCERS.mjs FIXTURES_DIR REPEAT PASSES
//
// REDUCERS.mjs exports the reference reducers (`chatReducer`, `sessionReducer`,
// ...: the official `types/reducers.ts` bundled with esbuild, not part of this
// repository: see docs/performance.md, "How the TypeScript side was run").
// The fixtures are read and their `null`s turned into `undefined` first (as the
// official fixture test does); only the reducer loop is timed, PASSES passes
// over every fixture per run. Prints one JSON object: the actions of one pass
// and, per action, the best over REPEAT runs of the CPU time of this thread
// (/proc/thread-self/schedstat, else the process's CPU time) and of the wall
// clock, in nanoseconds.
import { readFileSync, readdirSync } from "node:fs";
import { performance } from "node:perf_hooks";

const [reducerPath, dir, repeatArg, passesArg] = process.argv.slice(2);
const R = await import(new URL(reducerPath, `file://${process.cwd()}/`).href);
const repeat = Number(repeatArg ?? 5);
const passes = Number(passesArg ?? 200);
Date.now = () => 9999; // the fixtures' clock, as the Python side's

const REDUCERS = {
  root: R.rootReducer,
  session: R.sessionReducer,
  chat: R.chatReducer,
  terminal: R.terminalReducer,
  changeset: R.changesetReducer,
  annotations: R.annotationsReducer,
  resourceWatch: R.resourceWatchReducer,
};
const absent = (v) =>
  v === null ? undefined
    : Array.isArray(v) ? v.map(absent)
      : typeof v === "object" ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, absent(x)]))
        : v;
const cases = readdirSync(dir).filter((f) => f.endsWith(".json")).sort().map((f) => {
  const fixture = absent(JSON.parse(readFileSync(`${dir}/${f}`, "utf8")));
  return [REDUCERS[fixture.reducer], fixture.initial, fixture.actions];
});
const quiet = () => {}; // `softAssertNever` logs unknown actions: not part of the work timed

function threadCpu() {
  try {
    return Number(readFileSync("/proc/thread-self/schedstat", "utf8").split(" ")[0]) / 1e9;
  } catch {
    const usage = process.cpuUsage();
    return (usage.user + usage.system) / 1e6;
  }
}

function pass() {
  let count = 0;
  for (const [reducer, initial, actions] of cases) {
    let state = initial;
    for (let i = 0; i < actions.length; i++) state = reducer(state, actions[i], quiet);
    count += actions.length;
  }
  return count;
}

const actions = pass();
let cpu = Infinity;
let wall = Infinity;
for (let r = 0; r < repeat; r++) {
  globalThis.gc();
  const cpu0 = threadCpu();
  const wall0 = performance.now();
  for (let p = 0; p < passes; p++) pass();
  wall = Math.min(wall, (performance.now() - wall0) / 1e3);
  cpu = Math.min(cpu, threadCpu() - cpu0);
}
const count = actions * passes;
console.log(JSON.stringify({ actions, cpu_ns: (cpu / count) * 1e9, wall_ns: (wall / count) * 1e9 }));
