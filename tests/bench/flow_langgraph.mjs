// The peer of tests/bench/flow_graphs.lua: the same three graphs in
// LangGraph.js (tests/flow/package.json pins it; make deps installs it into
// build/npm/flow), on its MemorySaver or its SQLite checkpointer.
//
//   node flow_langgraph.mjs GRAPH memory|sqlite DIR
// prints one JSON line: { cpu_s, steps, bytes (checkpoint and write bytes
// stored for the run), peak_rss_kib, wall_s }.
import { readFileSync } from "node:fs";
import { StateGraph, Annotation, START, END, Send, MemorySaver, interrupt, Command } from "@langchain/langgraph";
import { SqliteSaver } from "@langchain/langgraph-checkpoint-sqlite";

const [graph, kind, dir] = process.argv.slice(2);
const append = { reducer: (a, b) => a.concat(b), default: () => [] };

function build() {
  if (graph === "fanout") {
    const S = Annotation.Root({ results: Annotation(append), total: Annotation(), i: Annotation() });
    return new StateGraph(S)
      .addNode("split", () => ({}))
      .addNode("work", (s) => ({ results: [s.i * 2] }))
      .addNode("join", (s) => ({ total: s.results.reduce((a, b) => a + b, 0) }))
      .addEdge(START, "split")
      .addConditionalEdges("split", () => Array.from({ length: 100 }, (_, i) => new Send("work", { i: i + 1 })))
      .addEdge("work", "join")
      .addEdge("join", END);
  }
  if (graph === "loop") {
    const S = Annotation.Root({ items: Annotation(append), n: Annotation({ reducer: (_, b) => b, default: () => 0 }) });
    return new StateGraph(S)
      .addNode("step", (s) => ({ items: ["item " + s.n], n: s.n + 1 }))
      .addEdge(START, "step")
      .addConditionalEdges("step", (s) => (s.n < 1000 ? "step" : END));
  }
  const S = Annotation.Root({ draft: Annotation(), verdict: Annotation() });
  return new StateGraph(S)
    .addNode("write", (s) => ({ draft: "draft of " + String(s.draft) }))
    .addNode("review", (s) => ({ verdict: interrupt({ draft: s.draft }) }))
    .addEdge(START, "write")
    .addEdge("write", "review")
    .addEdge("review", END);
}

function bytesOf(v) {
  if (v == null) return 0;
  if (typeof v === "string") return Buffer.byteLength(v);
  if (ArrayBuffer.isView(v)) return v.byteLength;
  if (typeof v === "object") {
    let n = 0;
    for (const x of Object.values(v)) n += bytesOf(x);
    return n;
  }
  return 0;
}

// Resume after kill -9 (the loop graph on SQLite), as flow_graphs.lua does it:
//   node flow_langgraph.mjs crash sqlite DIR      prints STEP n per superstep
//   node flow_langgraph.mjs resume sqlite DIR     { resume_s }: from before the saver
//     opens to the first superstep finished after resuming from the last checkpoint
if (graph === "crash" || graph === "resume") {
  const t0 = process.hrtime.bigint();
  const saver = SqliteSaver.fromConnString(dir + "/lg.sqlite");
  const S = Annotation.Root({ items: Annotation(append), n: Annotation({ reducer: (_, b) => b, default: () => 0 }) });
  const app = new StateGraph(S)
    .addNode("step", (s) => ({ items: ["item " + s.n], n: s.n + 1 }))
    .addEdge(START, "step")
    .addConditionalEdges("step", (s) => (s.n < 1000 ? "step" : END))
    .compile({ checkpointer: saver });
  const config = { configurable: { thread_id: "t1" }, recursionLimit: 2000 };
  if (graph === "crash") {
    let n = 0;
    for await (const _ of await app.stream({}, { ...config, streamMode: "updates" })) console.log("STEP " + ++n);
  } else {
    for await (const _ of await app.stream(null, { ...config, streamMode: "updates" })) break;
    console.log(JSON.stringify({ resume_s: Number(process.hrtime.bigint() - t0) / 1e9 }));
    process.exit(0);
  }
  process.exit(0);
}

const saver = kind === "sqlite" ? SqliteSaver.fromConnString(dir + "/lg.sqlite") : new MemorySaver();
const app = build().compile({ checkpointer: saver });
const config = { configurable: { thread_id: "t1" }, recursionLimit: 2000 };
const c0 = process.cpuUsage();
const t0 = process.hrtime.bigint();
let out = await app.invoke({}, config);
if (graph === "interrupt") out = await app.invoke(new Command({ resume: "approved" }), config);
const cu = process.cpuUsage(c0);
const wall = Number(process.hrtime.bigint() - t0) / 1e9;
if (graph === "fanout" && out.total !== 10100) throw new Error("fanout: total " + out.total);
if (graph === "loop" && out.items.length !== 1000) throw new Error("loop: " + out.items.length);
if (graph === "interrupt" && out.verdict !== "approved") throw new Error("interrupt: " + out.verdict);
let bytes = 0, checkpoints = 0;
if (kind === "sqlite") {
  const db = saver.db;
  const a = db.prepare("SELECT count(*) AS n, sum(length(checkpoint)) + sum(length(metadata)) AS b FROM checkpoints").get();
  const w = db.prepare("SELECT sum(length(value)) AS b FROM writes").get();
  bytes = (a.b || 0) + (w.b || 0);
  checkpoints = a.n;
} else {
  bytes = bytesOf(saver.storage) + bytesOf(saver.writes);
  for (const t of Object.values(saver.storage)) for (const ns of Object.values(t)) checkpoints += Object.keys(ns).length;
}
const hwm = Number(readFileSync("/proc/self/status", "utf8").match(/VmHWM:\s+(\d+)/)[1]);
// supersteps after the input step, as luarig counts them
const steps = { fanout: 3, loop: 1000, interrupt: 2 }[graph];
console.log(JSON.stringify({ cpu_s: (cu.user + cu.system) / 1e6, wall_s: wall, steps, bytes, checkpoints, peak_rss_kib: hwm }));
