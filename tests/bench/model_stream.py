#!/usr/bin/env python3
"""Decoding a long model stream: luarig's OpenAI adapter against the official
`openai` npm SDK, both streaming the same bytes from the same local server.

The stream is 10k chat-completion chunks shaped like the recorded fixture
tests/fixtures/openai_chat_length_truncated.sse (content deltas, a finish
chunk, a usage chunk, [DONE]). Each client measures its own CPU time (user +
system) around one whole request — open, every chunk, the final result — and
the figure is the best warm run, per chunk (the machine's noise only ever adds
time, so the minimum is the steadiest estimate); the two clients alternate,
three processes each. The server runs in another
process, so its CPU is not counted. The SDK is installed with npm into
build/bench/npm on first use.
"""
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LUARIG = os.environ.get("LUARIG", os.path.join(ROOT, "build", "luarig"))
NPM_DIR = os.path.join(ROOT, "build", "bench", "npm")
CHUNKS = int(os.environ.get("MODEL_BENCH_CHUNKS", "10000"))
RUNS = 7


def bench_line(name, value, unit, peer, peer_value):
    ratio = value / peer_value if peer_value else float("inf")
    print(f"BENCH name={name} value={value:.6g} unit={unit} peer={peer} "
          f"peer_value={peer_value:.6g} ratio={ratio:.3f}", flush=True)


def make_stream(n):
    with open(os.path.join(ROOT, "tests", "fixtures", "openai_chat_length_truncated.sse")) as f:
        first = json.loads(f.read().split("\n\n")[0][len("data: "):])
    base = {k: v for k, v in first.items() if k != "choices"}
    words = ["The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog", "."]
    out = []

    def chunk(delta, finish=None):
        d = dict(base)
        d["choices"] = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
        out.append("data: " + json.dumps(d, separators=(",", ":")) + "\n\n")

    chunk({"role": "assistant", "content": "", "refusal": None})
    for i in range(n - 3):
        chunk({"content": words[i % len(words)]})
    chunk({}, "stop")
    u = dict(base)
    u["choices"] = []
    u["usage"] = {"prompt_tokens": 79, "completion_tokens": n, "total_tokens": 79 + n,
                  "completion_tokens_details": {"reasoning_tokens": 0}}
    out.append("data: " + json.dumps(u, separators=(",", ":")) + "\n\n")
    out.append("data: [DONE]\n\n")
    return "".join(out).encode()


SERVER = r'''
import http.server, sys
data = open(sys.argv[2], "rb").read()
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
'''

NODE = r'''
const OpenAI = require(process.argv[1]).default || require(process.argv[1]);
const c = new OpenAI({ apiKey: "sk-bench", baseURL: process.argv[2], maxRetries: 0 });
(async () => {
  const out = [];
  for (let r = 0; r < Number(process.argv[3]); r++) {
    const t0 = process.cpuUsage();
    let n = 0, text = "";
    const s = await c.chat.completions.create({ model: "gpt-4o", messages: [{ role: "user", content: "hi" }],
      stream: true, stream_options: { include_usage: true } });
    for await (const ch of s) { n++; const d = ch.choices[0]?.delta; if (d && d.content) text += d.content; }
    const d = process.cpuUsage(t0);
    out.push({ us: d.user + d.system, n, len: text.length });
  }
  console.log(JSON.stringify(out));
})();
'''

LUA = r'''
local base, runs = arg[1], tonumber(arg[2])
local m = rig.model{ provider = "openai", name = "gpt-4o", base_url = base,
                     api_key_env = "LUARIG_BENCH_KEY", retry = { attempts = 1 } }
local out = {}
for r = 1, runs do
  local t0 = os.clock()
  local st = assert(m:stream{ messages = { { role = "user", content = "hi" } } })
  local n = 0
  for c in st:chunks() do n = n + 1 end
  local resp = assert(st:result())
  local us = (os.clock() - t0) * 1e6
  out[#out + 1] = string.format('{"us":%.1f,"n":%d,"len":%d}', us, n, #resp.message.content[1].text)
end
print("[" .. table.concat(out, ",") .. "]")
'''


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def openai_sdk():
    mod = os.path.join(NPM_DIR, "node_modules", "openai")
    if os.path.isdir(mod):
        return mod
    if not shutil.which("npm") or not shutil.which("node"):
        return None
    os.makedirs(NPM_DIR, exist_ok=True)
    r = subprocess.run(["npm", "install", "--prefix", NPM_DIR, "--no-audit", "--no-fund",
                        "--loglevel=error", "openai@latest"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, timeout=300)
    if r.returncode != 0 or not os.path.isdir(mod):
        print("# model bench: npm install openai failed: " + r.stderr.strip()[-300:], flush=True)
        return None
    return mod


def best_per_chunk(samples, chunks):
    warm = [s["us"] for s in samples[1:]]  # the first run warms caches and JITs
    return min(warm) * 1000 / chunks


def main():
    data = make_stream(CHUNKS)
    sdk = openai_sdk()
    if not sdk:
        print("# model bench: skipped (no node/npm or no openai package)", flush=True)
        return
    tmp = os.path.join(ROOT, "build", "bench")
    os.makedirs(tmp, exist_ok=True)
    body = os.path.join(tmp, "model_stream.sse")
    with open(body, "wb") as f:
        f.write(data)
    port = free_port()
    srv = subprocess.Popen([sys.executable, "-c", SERVER, str(port), body])
    try:
        for _ in range(50):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                import time
                time.sleep(0.1)
        base = f"http://127.0.0.1:{port}/v1"
        script = os.path.join(tmp, "model_stream.lua")
        with open(script, "w") as f:
            f.write(LUA)
        env = dict(os.environ, LUARIG_BENCH_KEY="sk-bench")
        mine, peer = [], []
        for _ in range(3):
            node = subprocess.run(["node", "-e", NODE, sdk, base, str(RUNS)], capture_output=True,
                                  text=True, check=True)
            p = json.loads(node.stdout.strip().splitlines()[-1])
            ours = subprocess.run([LUARIG, script, base, str(RUNS)], capture_output=True,
                                  text=True, check=True, env=env)
            m = json.loads(ours.stdout.strip().splitlines()[-1])
            # both must have read the whole stream
            assert m[0]["len"] == p[0]["len"], (m[0], p[0])
            mine.append(best_per_chunk(m, CHUNKS))
            peer.append(best_per_chunk(p, CHUNKS))
        version = json.load(open(os.path.join(sdk, "package.json")))["version"]
        bench_line("model_stream_decode_10k", min(mine), "ns/chunk",
                   f"openai-npm-{version}", min(peer))
    finally:
        srv.kill()
        srv.wait()


if __name__ == "__main__":
    main()
