#!/usr/bin/env python3
"""Prompt caching: the input a long session is billed for, with luarig's
automatic cache breakpoints (cache = "auto") against none (cache = "off").

A 30-step scripted session (tests/bench/cache_session.lua: one turn, a long
system prompt, the model reads 29 manual pages through a tool, one a step,
then answers) runs against a local mock of Anthropic's Messages API that
answers with the script and bills each request the way the real one does
(docs/caching.md, "How the bench bills"):

  * the prompt is the sequence of blocks tools, system, then every message's
    content blocks; a block costs ceil(bytes of its JSON / 4) tokens (its
    cache_control left out);
  * a block with cache_control is a breakpoint; the prefix up to it is
    written to the cache (when it is at least 1024 tokens, the minimum for
    Claude Sonnet) and lives 5 minutes (1 hour with ttl "1h") from its last use;
  * a request reads the longest cached prefix that ends at a breakpoint or at
    one of the 20 blocks before one (the API's lookback), billed at 0.1 x;
    the tokens from there to its last breakpoint are written, at 1.25 x
    (2 x for 1 hour); everything after the last breakpoint is plain input.

The figure is the session's billed input in input-token equivalents
(input + 0.1 read + 1.25 write). The session's own usage (what luarig
decoded from the mock's usage fields) must add up to the mock's bill: the
bench checks that too, so the usage mapping is measured end to end. Five
runs of each; the figures are deterministic, so min = median = max unless
something is wrong.

  BENCH name=prompt_cache_billed_input value=<auto> unit=tokens peer=cache_off
        peer_value=<off> ratio=<auto/off>
"""
import hashlib
import http.server
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LUARIG = os.environ.get("LUARIG", os.path.join(ROOT, "build", "luarig"))
STEPS = int(os.environ.get("CACHE_BENCH_STEPS", "30"))
RUNS = int(os.environ.get("CACHE_BENCH_RUNS", "5"))
MIN_CACHEABLE = 1024
LOOKBACK = 20
READ, WRITE_5M, WRITE_1H = 0.1, 1.25, 2.0


def bench_line(name, value, unit, peer, peer_value):
    ratio = value / peer_value if peer_value else float("inf")
    print(f"BENCH name={name} value={value:.6g} unit={unit} peer={peer} "
          f"peer_value={peer_value:.6g} ratio={ratio:.3f}", flush=True)


def canon(block):
    b = {k: v for k, v in block.items() if k != "cache_control"}
    return json.dumps(b, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def tokens_of(text):
    return math.ceil(len(text.encode()) / 4)


class Biller:
    """Anthropic's prompt cache, as the module docstring describes it."""

    def __init__(self):
        self.cache = {}  # prefix digest -> [tokens, ttl seconds, expires at]
        self.totals = {"input": 0, "read": 0, "write": 0, "write_1h": 0, "requests": 0}

    def bill(self, body, now):
        blocks = list(body.get("tools", []))
        system = body.get("system")
        if isinstance(system, str):
            blocks.append({"type": "text", "text": system})
        elif isinstance(system, list):
            blocks.extend(system)
        for m in body["messages"]:
            content = m["content"]
            if isinstance(content, str):
                content = [{"type": "text", "text": content}]
            for i, b in enumerate(content):
                # where a message starts and whose it is are part of the prefix
                blocks.append(dict(b, _role=m["role"], _first=(i == 0)))
        h = hashlib.sha256(body["model"].encode())
        digests, cum, total, marks = [], [], 0, []
        for i, b in enumerate(blocks):
            text = canon(b)
            h.update(text.encode())
            digests.append(h.copy().hexdigest())
            total += tokens_of(text)
            cum.append(total)
            cc = b.get("cache_control")
            if cc:
                marks.append((i, 3600 if cc.get("ttl") == "1h" else 300))
        # the read: the longest live prefix at a breakpoint or in the 20 blocks before one
        read_at = -1
        for b, _ in marks:
            for p in range(b, max(b - LOOKBACK, -1), -1):
                e = self.cache.get(digests[p])
                if e and e[2] > now:
                    read_at = max(read_at, p)
                    break
        read = cum[read_at] if read_at >= 0 else 0
        if read_at >= 0:
            e = self.cache[digests[read_at]]
            e[2] = now + e[1]  # a read refreshes the entry
        # the writes: every breakpoint's prefix; billed from the read to the last one
        last, last_ttl = -1, 300
        for b, ttl in marks:
            if cum[b] >= MIN_CACHEABLE:
                self.cache[digests[b]] = [cum[b], ttl, now + ttl]
                if b > last:
                    last, last_ttl = b, ttl
        write = cum[last] - read if last > read_at else 0
        uncached = total - read - write
        t = self.totals
        t["input"] += uncached
        t["read"] += read
        t["write"] += write
        if last_ttl == 3600:
            t["write_1h"] += write
        t["requests"] += 1
        return {"input_tokens": uncached, "cache_read_input_tokens": read,
                "cache_creation_input_tokens": write}

    def billed(self):
        t = self.totals
        return (t["input"] + READ * t["read"] + WRITE_5M * (t["write"] - t["write_1h"])
                + WRITE_1H * t["write_1h"])


def sse(events):
    out = []
    for e in events:
        out.append(f"event: {e['type']}\ndata: {json.dumps(e, separators=(',', ':'))}\n\n")
    return "".join(out).encode()


def reply(body, usage):
    """The script: read the next page until STEPS - 1 were read, then answer."""
    read = sum(1 for m in body["messages"] if m["role"] == "user" for b in m["content"]
               if isinstance(b, dict) and b.get("type") == "tool_result")
    ev = [{"type": "message_start", "message": {"id": f"msg_{read}", "type": "message",
           "role": "assistant", "model": body["model"], "content": [],
           "usage": dict(usage, output_tokens=1)}}]
    if read < STEPS - 1:
        ev += [{"type": "content_block_start", "index": 0, "content_block": {
                   "type": "tool_use", "id": f"toolu_{read + 1:03d}", "name": "read_page",
                   "input": {}}},
               {"type": "content_block_delta", "index": 0, "delta": {
                   "type": "input_json_delta", "partial_json": json.dumps({"page": read + 1})}},
               {"type": "content_block_stop", "index": 0},
               {"type": "message_delta", "delta": {"stop_reason": "tool_use"},
                "usage": {"output_tokens": 24}}]
    else:
        ev += [{"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
               {"type": "content_block_delta", "index": 0, "delta": {
                   "type": "text_delta", "text": f"I read {read} pages."}},
               {"type": "content_block_stop", "index": 0},
               {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 12}}]
    ev.append({"type": "message_stop"})
    return sse(ev)


def serve(biller):
    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_POST(self):
            n = int(self.headers.get("content-length", "0"))
            body = json.loads(self.rfile.read(n))
            usage = biller.bill(body, time.monotonic())
            data = reply(body, usage)
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def run(mode):
    biller = Biller()
    srv = serve(biller)
    try:
        base = f"http://127.0.0.1:{srv.server_address[1]}/v1"
        out = subprocess.run([LUARIG, os.path.join(ROOT, "tests", "bench", "cache_session.lua"),
                              base, mode, str(STEPS)], capture_output=True, text=True,
                             env=dict(os.environ, CACHE_BENCH_KEY="bench-key"), timeout=300)
    finally:
        srv.shutdown()
        srv.server_close()
    if out.returncode != 0:
        raise SystemExit(f"cache bench: luarig failed ({out.returncode}): {out.stderr.strip()}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    u = res["usage"]
    t = biller.totals
    if res["ended"] != "TurnDone" or t["requests"] != STEPS:
        raise SystemExit(f"cache bench: the session ended {res['ended']} after {t['requests']} requests")
    # what luarig decoded must be what the mock billed
    got = (u.get("input_tokens", 0), u.get("cache_read_tokens", 0), u.get("cache_creation_tokens", 0))
    want = (t["input"], t["read"], t["write"])
    if got != want:
        raise SystemExit(f"cache bench: session usage {got} differs from the bill {want}")
    return biller.billed(), u.get("cost", 0.0), t


def main():
    auto, off = [], []
    for _ in range(RUNS):
        auto.append(run("auto"))
        off.append(run("off"))
    a = [r[0] for r in auto]
    o = [r[0] for r in off]
    ta, to = auto[0][2], off[0][2]
    print(f"# cache: {STEPS} steps; auto: input {ta['input']}, read {ta['read']}, "
          f"written {ta['write']}; off: input {to['input']}; billed (median, min-max of {RUNS}): "
          f"auto {statistics.median(a):.0f} ({min(a):.0f}-{max(a):.0f}), "
          f"off {statistics.median(o):.0f} ({min(o):.0f}-{max(o):.0f}); cost at the catalog's "
          f"claude-sonnet-4-5 prices: auto ${statistics.median([r[1] for r in auto]):.4f}, "
          f"off ${statistics.median([r[1] for r in off]):.4f}", flush=True)
    bench_line("prompt_cache_billed_input", statistics.median(a), "tokens", "cache_off",
               statistics.median(o))


if __name__ == "__main__":
    sys.exit(main())
