"""rig.flow against LangGraph.js on the same three graphs (tests/bench/flow_graphs.lua,
tests/bench/flow_langgraph.mjs): a 100-vertex fan-out/fan-in, a 1,000-superstep loop
carrying a growing list, and a graph with an interrupt resumed.

Durable pairs: luarig on LMDB against LangGraph's SQLite checkpointer; in-memory
pairs: luarig's memory store against MemorySaver. Each run is a fresh process
(ours, peer, ours, peer, ...); CPU is the process's CPU time over the run (graph
built before, not counted), per superstep; bytes are what the run checkpointed
(luarig: its journal's record bodies; LangGraph: checkpoint, metadata and write
blobs), per superstep; peak RSS is the process's VmHWM. One run per process means
V8 has not warmed LangGraph's code (that weighs most on the three-superstep fan-out;
the 1,000-superstep loop amortizes it). Resume after kill: the loop killed with
SIGKILL after superstep 300, then a new process's time from opening the store to the
first superstep it finishes. LangGraph.js comes from build/npm/flow (make bench installs it):
without it there is no line.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
LUARIG = os.environ.get("LUARIG") or os.path.join(ROOT, "build", "luarig")
NPM = os.path.join(ROOT, os.environ.get("BUILD", "build"), "npm", "flow")


def once(argv, env=None):
    d = tempfile.mkdtemp(prefix="flow-bench-")
    try:
        r = subprocess.run(argv + [d], capture_output=True, text=True, env=env, timeout=600)
        if r.returncode != 0:
            raise RuntimeError(" ".join(argv) + ": " + r.stderr[-2000:])
        return json.loads(r.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main():
    node = shutil.which("node")
    if not node or not os.path.isdir(os.path.join(NPM, "node_modules", "@langchain", "langgraph")):
        print("flow bench: LangGraph.js is not installed in build/npm/flow (make bench installs it): no line",
              file=sys.stderr)
        return
    env = dict(os.environ, NODE_PATH=os.path.join(NPM, "node_modules"))
    env.pop("NODE_EXTRA_CA_CERTS", None)
    mjs = os.path.join(ROOT, "tests", "bench", "flow_langgraph.mjs")
    # node resolves bare imports from the script's directory: run a copy inside build/npm/flow
    peer_script = os.path.join(NPM, "flow_langgraph.mjs")
    shutil.copyfile(mjs, peer_script)
    lua = os.path.join(ROOT, "tests", "bench", "flow_graphs.lua")
    graphs = sys.argv[1:] or ["fanout", "loop", "interrupt", "resume"]
    if "resume" in graphs:
        graphs.remove("resume")
        resume_bench(node, peer_script, lua, env)
    pairs = [("lmdb", "sqlite", "langgraph.js-sqlite"), ("memory", "memory", "langgraph.js-memorysaver")]
    for g in graphs:
        for ours_kind, peer_kind, peer in pairs:
            ours, theirs = [], []
            for _ in range(benchlib.RUNS):
                ours.append(once([LUARIG, lua, g, ours_kind]))
                theirs.append(once([node, peer_script, g, peer_kind], env=env))
            store = "lmdb" if ours_kind == "lmdb" else "memory"
            benchlib.line(f"flow_{g}_cpu_per_step_{store}",
                          [o["cpu_s"] / o["steps"] * 1e6 for o in ours], "us", peer,
                          [t["cpu_s"] / t["steps"] * 1e6 for t in theirs])
            if ours_kind == "lmdb":
                benchlib.line(f"flow_{g}_bytes_per_step", [o["bytes"] / o["steps"] for o in ours],
                              "B", peer, [t["bytes"] / t["steps"] for t in theirs])
                benchlib.line(f"flow_{g}_peak_rss", [o["peak_rss_kib"] for o in ours], "KiB", peer,
                              [t["peak_rss_kib"] for t in theirs])
                benchlib.line(f"flow_{g}_wall_{store}", [o["wall_s"] * 1e3 for o in ours], "ms", peer,
                              [t["wall_s"] * 1e3 for t in theirs])


def resume_once(crash_argv, resume_argv, env=None, at=300):
    """Runs crash_argv until it printed STEP at, kills it (SIGKILL), then times resume_argv."""
    d = tempfile.mkdtemp(prefix="flow-bench-")
    try:
        p = subprocess.Popen(crash_argv + [d], stdout=subprocess.PIPE, text=True, env=env)
        run_id = None
        for ln in p.stdout:
            if ln.startswith("RUN "):
                run_id = ln.split()[1]
            if ln.startswith("STEP ") and int(ln.split()[1]) >= at:
                break
        p.kill()
        p.wait()
        argv = resume_argv + [d] + ([run_id] if run_id else [])
        r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(" ".join(argv) + ": " + r.stderr[-2000:])
        return json.loads(r.stdout.strip().splitlines()[-1])["resume_s"]
    finally:
        shutil.rmtree(d, ignore_errors=True)


def resume_bench(node, peer_script, lua, env):
    ours, theirs = [], []
    for _ in range(benchlib.RUNS):
        ours.append(resume_once([LUARIG, lua, "crash", "lmdb"], [LUARIG, lua, "resume", "lmdb"]) * 1e3)
        theirs.append(resume_once([node, peer_script, "crash", "sqlite"],
                                  [node, peer_script, "resume", "sqlite"], env=env) * 1e3)
    benchlib.line("flow_loop_resume_after_kill", ours, "ms", "langgraph.js-sqlite", theirs,
                  note="killed after superstep 300 of 1,000; to the first superstep after the resume")


if __name__ == "__main__":
    main()
