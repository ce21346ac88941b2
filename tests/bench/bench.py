#!/usr/bin/env python3
"""luarig benchmarks: every figure is measured against a named peer in the
same run and printed as one line

  BENCH name=<n> value=<v> unit=<u> peer=<p> peer_value=<pv> ratio=<value/peer_value>

Values are costs (time or bytes): a ratio below 1 means luarig is better.
Nothing here passes or fails; the goals live in the issue and the notes.
"""
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

LUARIG = os.environ.get("LUARIG", "build/luarig")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


bench_line = benchlib.line


def run_quiet(argv, **kw):  # noqa: D103
    return subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)


def startup_seconds(argv, runs=300, warmup=30, env=None):
    """Median wall time of a whole process start and exit. hyperfine (-N,
    no shell) when installed: spawning from Python adds ~1 ms of noise."""
    hf = shutil.which("hyperfine")
    if hf:
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            cmd = " ".join(shlex.quote(a) for a in argv)
            subprocess.run([hf, "-N", "-w", str(warmup), "-r", str(runs), "--export-json",
                            out.name, cmd], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=True, env=env)
            with open(out.name) as f:
                return json.load(f)["results"][0]["median"]
    for _ in range(warmup):
        run_quiet(argv, env=env)
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        run_quiet(argv, env=env)
        samples.append(time.perf_counter() - t0)
    samples.sort()
    # the median is robust against the other core's noise
    return samples[len(samples) // 2]


# The process reports its own high-water mark just before exiting: rusage
# from the parent would count the forked launcher's pages before exec.
HWM_CHUNK = ('local f = io.open("/proc/self/status") local s = f:read("a") f:close() '
             'io.write(s:match("VmHWM:%s*(%d+)"))')


def peak_rss_bytes(interp):
    out = subprocess.run([interp, "-e", HWM_CHUNK], capture_output=True, text=True, check=True)
    return int(out.stdout) * 1024


def bench_dir():
    """A scratch folder on the same disk as the state: /tmp when it is a
    real disk, else under the build folder (tmpfs would fake fsync)."""
    tmp = tempfile.gettempdir()
    fs = subprocess.run(["stat", "-f", "-c", "%T", tmp], capture_output=True, text=True).stdout
    if "tmpfs" in fs or "ramfs" in fs:
        tmp = os.path.join(ROOT, os.environ.get("BUILD", "build"))
    return tempfile.mkdtemp(prefix="store-bench-", dir=tmp)


def store_bench():
    """Durable 1 KiB appends, 1/16/256 sessions, LMDB vs SQLite (WAL, FULL)."""
    exe = os.path.join(ROOT, os.environ.get("BUILD", "build"), "tests", "bench", "store_bench")
    if not os.path.exists(exe):
        print(f"store bench: {exe} not built (make bench builds it)", file=sys.stderr)
        return
    # BENCH_RUNS processes, each LMDB then SQLite per session count; the
    # lines are the medians of the processes, pair by pair.
    got = {}
    for _ in range(benchlib.RUNS):
        d = bench_dir()
        try:
            r = subprocess.run([exe, d], check=False, capture_output=True, text=True)
        finally:
            shutil.rmtree(d, ignore_errors=True)
        sys.stderr.write(r.stderr)
        for b in benchlib.parse(r.stdout):
            got.setdefault((b["name"], b["unit"], b["peer"]), []).append((b["value"], b["peer_value"]))
    for (name, unit, peer), pairs in got.items():
        bench_line(name, [a for a, _ in pairs], unit, peer, [b for _, b in pairs])


def nats_bench():
    """The NATS backend (its own nats-server -js) against LMDB and SQLite:
    durable appends at 1 and 256 sessions, restore of a 10k-record session
    (the journal part in C, then r:restore end to end in luarig), a 200 MiB
    blob put and get."""
    exe = os.path.join(ROOT, os.environ.get("BUILD", "build"), "tests", "bench", "nats_bench")
    if not os.path.exists(exe):
        print(f"nats bench: {exe} not built (make bench builds it)", file=sys.stderr)
        return
    d = bench_dir()
    try:
        subprocess.run([exe, d], check=False)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    # The same restore end to end (r:restore folds every event), in luarig.
    d = bench_dir()
    try:
        subprocess.run([LUARIG, os.path.join(ROOT, "tests", "bench", "nats_restore.lua"), d],
                       check=False)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def main():
    t0, load0 = time.time(), loadavg()
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip() or "?"
    try:
        run_all()
    finally:
        benchlib.record("meta", date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t0)),
                        commit=commit, load_start=load0, load_end=loadavg(),
                        wall_min=round((time.time() - t0) / 60, 1))


def run_all():
    which = set(sys.argv[1:]) or {"startup", "rss", "sse", "json", "model", "cache", "store",
                                  "journal", "snapshot", "sandbox", "session", "serve", "nats",
                                  "mcp", "flow"}
    lua = shutil.which("lua5.4")
    node = shutil.which("node")
    if "startup" in which:
        # Rounds of each: luarig, lua5.4, node, BENCH_RUNS times; each figure
        # is one round's median, the lines the medians of the rounds. node
        # runs without NODE_EXTRA_CA_CERTS: loading extra CA certificates (set
        # in some environments) triples its start-up and is no part of it.
        node_env = {k: v for k, v in os.environ.items() if k != "NODE_EXTRA_CA_CERTS"}
        got = {"luarig": [], "lua5.4": [], "node": []}
        for _ in range(benchlib.RUNS):
            got["luarig"].append(startup_seconds([LUARIG, "-e", ""], runs=60, warmup=5) * 1e3)
            if lua:
                got["lua5.4"].append(startup_seconds([lua, "-e", ""], runs=60, warmup=5) * 1e3)
            if node:
                got["node"].append(startup_seconds([node, "-e", ""], runs=10, warmup=2,
                                                   env=node_env) * 1e3)
        for peer in ("lua5.4", "node"):
            if got[peer]:
                bench_line("startup", got["luarig"], "ms",
                           peer + ("-without-NODE_EXTRA_CA_CERTS" if peer == "node" else ""),
                           got[peer])
    if "rss" in which and lua:
        ours, peer = [], []
        for _ in range(benchlib.RUNS):
            ours.append(peak_rss_bytes(LUARIG) / 1024)
            peer.append(peak_rss_bytes(lua) / 1024)
        bench_line("peak_rss", ours, "KiB", "lua5.4", peer)
    if "sse" in which:
        sse = os.path.join(ROOT, "tests", "bench", "sse.py")
        if os.path.exists(sse):
            subprocess.run([sys.executable, sse], check=False)
    if "model" in which:
        # Decoding a 10k-chunk OpenAI stream against the openai npm SDK (CPU per chunk).
        subprocess.run([sys.executable, os.path.join(ROOT, "tests", "bench", "model_stream.py")],
                       env=dict(os.environ, LUARIG=LUARIG), check=False)
    if "cache" in which:
        # A 30-step session's billed input against a mock that bills like Anthropic:
        # automatic cache breakpoints against none.
        subprocess.run([sys.executable, os.path.join(ROOT, "tests", "bench", "cache_bench.py")],
                       env=dict(os.environ, LUARIG=LUARIG), check=False)
    if "session" in which:
        # N sessions x 10 turns against a mock OpenAI server, @openai/agents the peer;
        # step overhead (scripted model) and memory per idle session.
        subprocess.run([sys.executable, os.path.join(ROOT, "tests", "bench", "session_bench.py")],
                       env=dict(os.environ, LUARIG=LUARIG), check=False)
    if "serve" in which:
        # luarig serve: SSE latency at 1 and 1,000 subscribers, peak RSS with 1,000,
        # wrk on POST input + GET status; a node http server the peer.
        subprocess.run([sys.executable, os.path.join(ROOT, "tests", "bench", "serve_bench.py")],
                       env=dict(os.environ, LUARIG=LUARIG), check=False)
    if "sandbox" in which:
        # `true` confined against bwrap, a plain fork+exec and srt (npm).
        subprocess.run([sys.executable, os.path.join(ROOT, "tests", "bench", "sandbox_bench.py")],
                       env=dict(os.environ, LUARIG=LUARIG), check=False)
    if "mcp" in which:
        # rig.mcp over stdio: a tools/call round trip and listing 1,000 tools, against the
        # official TypeScript SDK client calling the same server.
        subprocess.run([sys.executable, os.path.join(ROOT, "tests", "bench", "mcp_bench.py")],
                       env=dict(os.environ, LUARIG=LUARIG), check=False)
    if "flow" in which:
        # rig.flow against LangGraph.js (build/npm/flow): the same three graphs, CPU and
        # bytes checkpointed per superstep, peak RSS; LMDB against its SQLite saver.
        subprocess.run([sys.executable, os.path.join(ROOT, "tests", "bench", "flow_bench.py")],
                       env=dict(os.environ, LUARIG=LUARIG), check=False)
    if "store" in which:
        store_bench()
    if "nats" in which:
        nats_bench()
    if "journal" in which:
        # Replay of a 100k-record journal against SQLite SELECTing the same rows.
        jb = os.path.join(ROOT, os.environ.get("BUILD") or "build", "tests", "bench", "journal_bench")
        if os.path.exists(jb):
            subprocess.run([jb], check=False)
    if "snapshot" in which:
        d = bench_dir()
        try:
            subprocess.run([sys.executable, os.path.join(ROOT, "tests", "bench", "snapshot_bench.py")],
                           env=dict(os.environ, LUARIG=LUARIG, BENCH_DIR=d), check=False)
        finally:
            shutil.rmtree(d, ignore_errors=True)
    if "json" in which:
        # rig.json.decode/encode against lua-cjson in the same process.
        subprocess.run([LUARIG, os.path.join(ROOT, "tests", "bench", "json_bench.lua")],
                       env=dict(os.environ, LUARIG_ROOT=ROOT), check=False)


if __name__ == "__main__":
    main()
