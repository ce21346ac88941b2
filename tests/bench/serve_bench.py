#!/usr/bin/env python3
"""`luarig serve` (issue 9, Performance), against a minimal Node.js `http`
server (tests/bench/serve_peer.js: the same routes and JSON shapes answered
from memory, no session work) measured in the same run.

1. serve_sse_latency_{p50,p99}_{1,1000}: from an event's journal append to
   its arrival at each of N subscribers of one session (N = 1 and 1,000).
   `luarig serve tests/bench/serve_rig.lua` (a scripted model answering at
   once, a memory store); tests/bench/sse_subscribers.c holds the N streams
   in one process and takes, for every enduring event and subscriber,
   arrival minus the event's created_at. created_at is the server's
   CLOCK_REALTIME stamped as the event is queued for its journal append
   (the memory store's append completes at once, so it is counted);
   arrival is the kernel's receive timestamp of the socket read that
   completed the event (SO_TIMESTAMPNS), so the client's own pace does not
   count (when one read completes several events they all get the later
   timestamp: the figure errs high). TURNS inputs are posted INTERVAL s
   apart; a turn from idle is 6 enduring events (and a text delta). Every
   subscriber must see the same events, else no figure. Printed against
   the goal (peer=goal, p99 10 ms at 1,000) and against the node peer
   fanning the same number of events of the same size to its subscribers.
2. serve_rss_1000_subscribers: the server's VmHWM (/proc) after serving
   1,000 subscribers through the run above, and the growth per subscriber
   (VmHWM minus VmRSS before they connected, over 1,000), against the node
   peer doing the same.
3. serve_input_status: wrk (-t1, CONNS connections, SECONDS s) with
   tests/bench/serve_wrk.lua alternating POST /v1/sessions/{id}/input and
   GET /v1/sessions/{id}/status over 16 sessions, as the cost of one
   request (us/request = 1e6 / requests per second; the rates are printed
   as comments). luarig runs every input's turn in the same process while
   it answers; the peer only stores it. serve_status: GET status alone.

Each SSE and RSS figure is the median, with min-max, of SERVE_BENCH_RUNS
(BENCH_RUNS, 5) rounds, each a fresh luarig server then a fresh node
server (tests/bench/benchlib.py).

Environment: SERVE_BENCH_RUNS (5), SERVE_BENCH_TURNS (20), SERVE_BENCH_INTERVAL (0.15),
SERVE_BENCH_SECONDS (5), SERVE_BENCH_CONNS (32), SERVE_BENCH_SUBS (1000),
SERVE_BENCH_PEER (1; 0: no node peer, luarig's figures against the goal
only: for A/B runs of two luarig builds, at half the time).
"""
import json
import os
import re
import resource
import select
import shutil
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join(ROOT, "tests", "bench")
BUILD = os.path.join(ROOT, os.environ.get("BUILD") or "build")
LUARIG = os.environ.get("LUARIG", os.path.join(BUILD, "luarig"))
SUBS_EXE = os.path.join(BUILD, "tests", "bench", "sse_subscribers")
TURNS = int(os.environ.get("SERVE_BENCH_TURNS", "20"))
INTERVAL = float(os.environ.get("SERVE_BENCH_INTERVAL", "0.15"))
SECONDS = int(os.environ.get("SERVE_BENCH_SECONDS", "5"))
CONNS = int(os.environ.get("SERVE_BENCH_CONNS", "32"))
MANY = int(os.environ.get("SERVE_BENCH_SUBS", "1000"))
RUNS = int(os.environ.get("SERVE_BENCH_RUNS", str(benchlib.RUNS)))  # SSE rounds, a fresh server each
PEER = os.environ.get("SERVE_BENCH_PEER", "1") != "0"


def node_exe():
    """The node peer's executable, or None (none installed, or SERVE_BENCH_PEER=0)."""
    return shutil.which("node") if PEER else None
WRK_SESSIONS = 16
NODE_PEER = "node-http"


bench_line = benchlib.line


def say(msg):
    print("# serve bench: " + msg, flush=True)


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Server:
    """`luarig serve` or the node peer, on a free loopback port."""

    def __init__(self, kind, steps=2000, events_per_input=6):
        self.kind = kind
        if kind == "luarig":
            argv = [LUARIG, "serve", os.path.join(HERE, "serve_rig.lua"), "--listen", "127.0.0.1:0"]
        else:
            argv = [shutil.which("node"), os.path.join(HERE, "serve_peer.js"), str(events_per_input)]
        env = dict(os.environ, SERVE_BENCH_STEPS=str(steps))
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, env=env,
                                     preexec_fn=raise_nofile)
        line = self.proc.stderr.readline()
        m = re.search(r"serving on (http://127\.0\.0\.1:(\d+))", line)
        if not m:
            self.close()
            raise RuntimeError(f"{kind} did not start: {line.strip()}")
        self.url, self.port = m.group(1), int(m.group(2))
        self.errors = []
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.proc.stderr:
            if len(self.errors) < 5:
                self.errors.append(line.strip())

    def call(self, method, path, body=None):
        req = urllib.request.Request(self.url + path, method=method,
                                     data=body.encode() if body is not None else None,
                                     headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def session(self):
        return self.call("POST", "/v1/sessions", "")["session_id"]

    def proc_status(self, field):
        with open(f"/proc/{self.proc.pid}/status") as f:
            m = re.search(field + r":\s*(\d+) kB", f.read())
        return int(m.group(1))

    def cpu_seconds(self):
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def close(self):
        self.proc.kill()
        self.proc.wait()


def sse_run(srv, n):
    """n subscribers of one new session, TURNS inputs; the client's summary
    plus the server's VmRSS before they connected and its VmHWM after."""
    sid = srv.session()
    time.sleep(0.2)
    rss0 = srv.proc_status("VmRSS")
    client = subprocess.Popen([SUBS_EXE, "127.0.0.1", str(srv.port), f"/v1/sessions/{sid}/events",
                               str(n)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              preexec_fn=raise_nofile)
    try:
        r, _, _ = select.select([client.stdout], [], [], 60)
        if not r or client.stdout.readline().strip() != "ready":
            say(f"{srv.kind}: the {n} subscribers did not all connect")
            return None
        cpu0 = srv.cpu_seconds()
        for i in range(TURNS):
            srv.call("POST", f"/v1/sessions/{sid}/input", json.dumps({"text": f"turn {i}"}))
            time.sleep(INTERVAL)
        time.sleep(max(0.5, INTERVAL * 2))
        cpu = srv.cpu_seconds() - cpu0
        hwm = srv.proc_status("VmHWM")
        out, _ = client.communicate("stop\n", timeout=60)
        res = json.loads(out.strip().splitlines()[-1])
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    res["rss0_kib"], res["hwm_kib"] = rss0, hwm
    res["server_cpu_s"] = round(cpu, 3)
    if res["samples"] == 0 or res["events_min"] != res["events_max"] or \
            res["samples"] != res["events_max"] * n:
        say(f"{srv.kind} at {n}: subscribers saw different events: {res}")
        return None
    return res


def better(a, b):
    """The less disturbed of two runs: the lower p99 (the machine is shared)."""
    if not a:
        return b
    if not b:
        return a
    return a if a["p99_ms"] <= b["p99_ms"] else b


def sse_bench():
    if not os.path.exists(SUBS_EXE):
        say(f"{SUBS_EXE} not built (make bench builds it)")
        return
    runs = {"luarig": {}, "node": {}}  # kind -> n -> [results], round by round
    hwm = {"luarig": [], "node": []}
    per_input = None
    for run in range(RUNS):
        for kind in ("luarig", "node"):
            if kind == "node" and (not node_exe() or not per_input):
                continue
            srv = Server(kind, events_per_input=per_input or 6)
            try:
                for n in (1, MANY):
                    res = sse_run(srv, n)
                    if not res:
                        continue
                    say(f"{kind} {n} subscribers: {json.dumps(res)}")
                    runs[kind].setdefault(n, []).append(res)
                    if kind == "luarig" and n == 1:
                        per_input = per_input or max(1, round(res["events_max"] / TURNS))
                    if n == MANY:
                        hwm[kind].append((res["hwm_kib"], (res["hwm_kib"] - res["rss0_kib"]) / MANY))
            finally:
                srv.close()
            if srv.errors:
                say(f"{kind} said: " + " | ".join(srv.errors))
    ours, peer = runs["luarig"], runs["node"]
    for n in (1, MANY):
        if not ours.get(n):
            continue
        for q in ("p50", "p99"):
            v = [r[q + "_ms"] for r in ours[n]]
            bench_line(f"serve_sse_latency_{q}_{n}", v, "ms", "goal", 10)
            if peer.get(n):
                pv = [r[q + "_ms"] for r in peer[n]]
                k = min(len(v), len(pv))
                bench_line(f"serve_sse_latency_{q}_{n}", v[:k], "ms", NODE_PEER, pv[:k])
    if hwm["luarig"] and hwm["node"]:
        k = min(len(hwm["luarig"]), len(hwm["node"]))
        o, p = hwm["luarig"][:k], hwm["node"][:k]
        bench_line(f"serve_rss_{MANY}_subscribers", [x[0] for x in o], "KiB", NODE_PEER,
                   [x[0] for x in p])
        bench_line(f"serve_rss_per_subscriber_{MANY}", [x[1] for x in o],
                   "KiB/subscriber", NODE_PEER, [x[1] for x in p])
    elif hwm["luarig"]:
        o = min(hwm["luarig"])
        say(f"luarig VmHWM with {MANY} subscribers: {o[0]} KiB ({o[1]:.2f} KiB each)")


def wrk_run(srv, mode):
    ids = [srv.session() for _ in range(WRK_SESSIONS)]
    env = dict(os.environ, SERVE_BENCH_IDS=",".join(ids), SERVE_BENCH_MODE=mode)
    cpu0 = srv.cpu_seconds()
    out = subprocess.run(["wrk", "-t1", f"-c{CONNS}", f"-d{SECONDS}s",
                          "-s", os.path.join(HERE, "serve_wrk.lua"), srv.url],
                         capture_output=True, text=True, env=env, timeout=SECONDS + 60)
    m = re.search(r"Requests/sec:\s*([\d.]+)", out.stdout)
    if out.returncode != 0 or not m:
        say(f"wrk against {srv.kind} failed: {(out.stderr or out.stdout).strip()[-300:]}")
        return None
    bad = re.search(r"Non-2xx or 3xx responses:\s*(\d+)", out.stdout)
    errs = re.search(r"Socket errors:[^\n]*", out.stdout)
    if bad or errs:
        say(f"wrk against {srv.kind} ({mode}): {bad.group(0) if bad else ''} "
            f"{errs.group(0) if errs else ''}")
    rate = float(m.group(1))
    # the server's CPU over the run (luarig's includes the turns still queued when wrk stops)
    srv.cpu_us = (srv.cpu_seconds() - cpu0) * 1e6 / (rate * SECONDS)
    return rate


def wrk_bench():
    if not shutil.which("wrk"):
        say("wrk is not installed (tools/deps.sh)")
        return
    node = node_exe()
    for mode, name in (("mixed", "serve_input_status"), ("status", "serve_status")):
        rates, cpu = {}, {}
        for kind in ("luarig", "node"):
            if kind == "node" and not node:
                continue
            srv = Server(kind, steps=400000)
            try:
                rates[kind] = wrk_run(srv, mode)
                cpu[kind] = getattr(srv, "cpu_us", None)
            finally:
                srv.close()
            if srv.errors:
                say(f"{kind} said: " + " | ".join(srv.errors))
        say(f"{name}: " + ", ".join(f"{k} {v:.0f} req/s ({cpu[k]:.0f} us CPU/request)"
                                    for k, v in rates.items() if v))
        if rates.get("luarig") and rates.get("node"):
            bench_line(name, 1e6 / rates["luarig"], "us/request", NODE_PEER, 1e6 / rates["node"])


def main():
    which = set(sys.argv[1:]) or {"sse", "wrk"}
    if "sse" in which:
        sse_bench()
    if "wrk" in which:
        wrk_bench()


if __name__ == "__main__":
    main()
