// The peer of tests/bench/serve_bench.py: a minimal Node.js `http` server
// answering the routes the serve bench drives, from memory, with the same
// JSON shapes as `luarig serve` — the ceiling for a single-threaded
// event-loop HTTP server doing no session work.
//
//   node serve_peer.js [EVENTS_PER_INPUT]
//
// POST /v1/sessions -> 201 {session_id, command_id}
// POST /v1/sessions/{id}/input ({text} or {blocks}) -> {command_id}; then
//   sends EVENTS_PER_INPUT enduring events and one ephemeral event (bodies
//   shaped and sized like luarig's) to every SSE subscriber of the session
// GET  /v1/sessions/{id}/status -> the status object of a live idle session
// GET  /v1/sessions/{id}/events -> server-sent events, live only
// Prints "serving on http://127.0.0.1:PORT" on stderr, as luarig does.
"use strict";
const http = require("http");
const { performance } = require("perf_hooks");

const perInput = Number(process.argv[2] || 6);
const TYPES = ["SessionActive", "TurnStarted", "StepDone", "TurnDone", "LoopIdle", "SessionIdle"];
const sessions = new Map();
let nextSession = 0;

function wall() {
  return (performance.timeOrigin + performance.now()) / 1000;
}

function json(res, status, value) {
  const body = JSON.stringify(value);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
  res.end(body);
}

function error(res, status, code, message) {
  json(res, status, { error: { code, message, retryable: false } });
}

function newSession() {
  nextSession++;
  const id = `00000000-0000-4000-8000-${String(nextSession).padStart(12, "0")}`;
  const s = { id, seq: 0, counter: 0, created_at: wall(), last_active_at: wall(), subs: new Set(),
              usage: { input_tokens: 0, output_tokens: 0, cache_read_tokens: 0,
                       cache_creation_tokens: 0, reasoning_tokens: 0 } };
  sessions.set(id, s);
  return s;
}

function broadcast(s, text) {
  for (let i = 0; i < perInput; i++) {
    s.seq++;
    s.counter++;
    const ev = { cause: { command_id: `c1.${s.counter}` }, created_at: wall(),
                 event_id: `e1.${s.counter}`, loop_id: "assistant", session_id: s.id,
                 turn_id: `t1.${s.counter}`, type: TYPES[i % TYPES.length], v: 1,
                 message: { content: [{ text: "ok: " + text, type: "text" }], role: "assistant" } };
    const frame = `event: enduring\nid: ${s.seq}\ndata: ${JSON.stringify(ev)}\n\n`;
    for (const res of s.subs) res.write(frame);
  }
  const delta = `event: ephemeral\ndata: ${JSON.stringify({ type: "TokenDelta", text: "ok: " + text,
    session_id: s.id, created_at: wall(), v: 1 })}\n\n`;
  for (const res of s.subs) res.write(delta);
}

function readBody(req, cb) {
  const parts = [];
  let size = 0;
  req.on("data", (c) => { size += c.length; if (size <= 1 << 20) parts.push(c); });
  req.on("end", () => cb(size > 1 << 20 ? null : Buffer.concat(parts).toString("utf8")));
}

const server = http.createServer((req, res) => {
  const m = req.url.match(/^\/v1\/sessions(?:\/([^/?]+)\/(input|status|events))?(?:\?.*)?$/);
  if (!m) return error(res, 404, "not_found", "no such route");
  if (!m[1]) {
    if (req.method !== "POST") return error(res, 404, "not_found", "no such route");
    return readBody(req, () => {
      const s = newSession();
      s.counter++;
      json(res, 201, { session_id: s.id, command_id: `c1.${s.counter}` });
    });
  }
  const s = sessions.get(decodeURIComponent(m[1]));
  if (!s) return error(res, 404, "session_not_found", "no session");
  if (m[2] === "input" && req.method === "POST") {
    return readBody(req, (body) => {
      let v;
      try { v = JSON.parse(body); } catch (e) { return error(res, 400, "invalid_json", "invalid JSON"); }
      if (!v || (typeof v.text !== "string" && !Array.isArray(v.blocks))) {
        return error(res, 400, "invalid_request", "want {text} or {blocks}");
      }
      s.counter++;
      s.last_active_at = wall();
      json(res, 200, { command_id: `c1.${s.counter}` });
      if (s.subs.size) broadcast(s, v.text || "");
    });
  }
  if (m[2] === "status" && req.method === "GET") {
    return json(res, 200, { session_id: s.id, live: true, title: "", created_at: s.created_at,
      last_active_at: s.last_active_at, state: "idle", status: "active", loop_count: 1, cost: 0,
      busy: false, faulted: false, open_gates: [], usage: s.usage, last_seq: s.seq });
  }
  if (m[2] === "events" && req.method === "GET") {
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-store",
                         "x-accel-buffering": "no" });
    res.flushHeaders();
    s.subs.add(res);
    res.on("close", () => s.subs.delete(res));
    return;
  }
  return error(res, 404, "not_found", "no such route");
});
server.maxConnections = 4096;
server.keepAliveTimeout = 60000;
server.listen(0, "127.0.0.1", () => {
  process.stderr.write(`serving on http://127.0.0.1:${server.address().port}\n`);
});
