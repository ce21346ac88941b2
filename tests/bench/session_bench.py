#!/usr/bin/env python3
"""Sessions: luarig against @openai/agents (npm). Every figure is the median
of RUNS rounds with min-max (tests/bench/benchlib.py, tests/bench/README.md).

1. N sessions x 10 turns (N = 1, 10, 100, 1000), the sessions running
   concurrently, each turn one tool call ("lookup", a local function
   returning a fixed string) and a final answer, against a local mock
   OpenAI-compatible chat-completions server (tests/bench/mock_openai.py,
   streaming SSE with a usage chunk, its own process so its CPU is counted
   for neither). luarig runs tests/bench/session_workload.lua, once with the
   memory store and once with the LMDB store (durable: every record
   fsynced before it is acknowledged); the peer runs
   tests/bench/session_agents.js (agent runs streamed through
   OpenAIChatCompletionsModel, tracing disabled, history carried across the
   10 runs of a session, nothing durable). Each round runs the three one
   after the other. Each process reports its own CPU seconds (all threads,
   around the workload, after start-up) and peak RSS (whole process). The
   mock counts the requests and the messages they carried; every client
   must send the conversations of the workload, else its figures are not
   printed. Lines:
     session_turn_cpu_n{N}, session_turn_rss_n{N}    memory store vs the SDK
     session_turn_cpu_lmdb_n{N}                      LMDB store vs the SDK
     session_turn_cpu_lmdb_vs_memory_n{N}            LMDB vs memory, luarig
     session_turn_cpu_scaling_{memory,lmdb,peer}_n1000_vs_n100
                                  CPU per session-turn at N=1000 over N=100
     session_live_memory_n1000    (peak RSS - RSS before any session) / N
     session_shutdown_lmdb_n1000  wall (and _sys_: system CPU) seconds to
                                  shut down the 1,000 LMDB sessions after
                                  the work, vs the goal and the memory store
2. session_step_overhead: the same workload with a zero-latency scripted
   model in-process (rig.model.script with function steps; the SDK's own
   ScriptedModel with responder steps for the peer), wall time per model
   step, alternating processes. Also printed against the absolute goal
   (peer=goal, 50 us).
3. session_idle_memory_{memory,lmdb}: RSS growth per idle session with
   10,000 sessions open in one process (tests/bench/session_idle.lua),
   against the absolute goal (peer=goal, 64 KiB). An LMDB session keeps its
   lease's lock file open, so the soft RLIMIT_NOFILE of the child is raised
   to the hard limit; with a hard limit too low the count is lowered and
   said so.

Environment: SESSION_BENCH_NS (default "1,10,100,1000"), SESSION_BENCH_PEER_MAX_N
(the largest N the peer runs at; default: every N), SESSION_BENCH_STORES
("memory,lmdb"; memory must be in it), SESSION_BENCH_TURNS (10),
SESSION_BENCH_IDLE (10000), SESSION_BENCH_RUNS (BENCH_RUNS, 5).
"""
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join(ROOT, "tests", "bench")
BUILD = os.path.join(ROOT, os.environ.get("BUILD") or "build")
LUARIG = os.environ.get("LUARIG", os.path.join(BUILD, "luarig"))
NPM_DIR = os.path.join(ROOT, "build", "bench", "npm")
AGENTS_VERSION = "0.20.0"
NS = [int(x) for x in os.environ.get("SESSION_BENCH_NS", "1,10,100,1000").split(",") if x]
# The peer runs at every N up to this one (default: all of them); above it
# only luarig runs, its lines against the goals and against itself at N=100.
PEER_MAX_N = int(os.environ.get("SESSION_BENCH_PEER_MAX_N", "0")) or None
STORES = [x for x in os.environ.get("SESSION_BENCH_STORES", "memory,lmdb").split(",") if x]
TURNS = int(os.environ.get("SESSION_BENCH_TURNS", "10"))
IDLE = int(os.environ.get("SESSION_BENCH_IDLE", "10000"))
STEP_N = 100  # sessions in the step-overhead run (x TURNS turns x 2 steps)
STEP_RUNS = benchlib.RUNS
RUNS = int(os.environ.get("SESSION_BENCH_RUNS", str(benchlib.RUNS)))  # rounds per N


bench_line = benchlib.line
median = benchlib.median


def say(msg):
    print("# session bench: " + msg, flush=True)


def agents_sdk():
    """build/bench/npm with @openai/agents and zod@4, installed on first use."""
    mod = os.path.join(NPM_DIR, "node_modules", "@openai", "agents")
    zod = os.path.join(NPM_DIR, "node_modules", "zod")
    if os.path.isdir(mod) and os.path.isdir(zod):
        return json.load(open(os.path.join(mod, "package.json")))["version"]
    if not shutil.which("npm") or not shutil.which("node"):
        return None
    os.makedirs(NPM_DIR, exist_ok=True)
    r = subprocess.run(["npm", "install", "--prefix", NPM_DIR, "--no-audit", "--no-fund",
                        "--loglevel=error", f"@openai/agents@{AGENTS_VERSION}", "zod@4"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=600)
    if r.returncode != 0 or not os.path.isdir(mod):
        say("npm install @openai/agents failed: " + r.stderr.strip()[-300:])
        return None
    return json.load(open(os.path.join(mod, "package.json")))["version"]


def last_json(proc, who):
    """The JSON object a client printed last, or None (with a comment)."""
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-3:]
        say(f"{who} failed (exit {proc.returncode}): " + " | ".join(tail)[-400:])
        return None
    for line in reversed(proc.stdout.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                break
    say(f"{who} printed no result: {proc.stdout.strip()[-200:]}")
    return None


def run(argv, env=None, timeout=900, limits=None):
    try:
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout,
                              preexec_fn=limits)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, "", f"timed out after {timeout} s")


class Mock:
    """The mock server in its own process."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "mock_openai.py"), "0"],
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().split()
        if len(line) != 2 or line[0] != "ready":
            self.close()
            raise RuntimeError("the mock server did not start")
        self.port = int(line[1])
        self.base = f"http://127.0.0.1:{self.port}/v1"

    def stats(self):
        import urllib.request
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/stats", timeout=10) as r:
            return json.loads(r.read())

    def close(self):
        self.proc.kill()
        self.proc.wait()


def node_env():
    return dict(os.environ, NODE_PATH=os.path.join(NPM_DIR, "node_modules"),
                OPENAI_AGENTS_DISABLE_TRACING="1", OPENAI_API_KEY="sk-bench")


def conversation_ok(who, got, stats, n):
    """Every turn ended in text after two model calls, as the mock saw it."""
    turns = n * TURNS
    if stats["bad"] or stats["requests"] != 2 * turns or stats["texts"] != turns:
        say(f"{who} at N={n}: the mock saw {stats} for {turns} turns")
        return False
    if got.get("texts") != turns:
        say(f"{who} at N={n}: {got.get('texts')} of {turns} turns ended in text "
            f"{got.get('failed') or ''}")
        return False
    return True


def lmdb_root():
    """A fresh state root on a real disk (tmpfs would fake fsync)."""
    tmp = tempfile.gettempdir()
    fs = subprocess.run(["stat", "-f", "-c", "%T", tmp], capture_output=True, text=True).stdout
    if "tmpfs" in fs or "ramfs" in fs:
        tmp = BUILD
    return tempfile.mkdtemp(prefix="session-bench-", dir=tmp)


def nofile_limits(want):
    target, hard = raise_nofile(want)

    def limits(t=target, h=hard):
        resource.setrlimit(resource.RLIMIT_NOFILE, (t, h))
    return limits


def run_ours(mock, n, kind):
    """One luarig process of the workload; its result or None."""
    argv = [LUARIG, os.path.join(HERE, "session_workload.lua"), "mock", mock.base, str(n),
            str(TURNS)]
    root = None
    if kind == "lmdb":
        root = lmdb_root()
        argv += ["lmdb", root]
    try:
        o = last_json(run(argv, limits=nofile_limits(n + 256)), f"luarig ({kind}) at N={n}")
    finally:
        if root:
            shutil.rmtree(root, ignore_errors=True)
    stats = mock.stats()
    if not (o and conversation_ok(f"luarig ({kind})", o, stats, n)):
        return None, stats
    return o, stats


def workload(mock, version):
    """RUNS rounds per N; each round runs @openai/agents, luarig with the
    memory store and luarig with the LMDB store, one after the other, so the
    three see the same machine. Every figure is the median of the rounds."""
    peer = f"openai-agents-{version}"
    agents_js = os.path.join(HERE, "session_agents.js")
    res = {}  # n -> {"peer": [...], "memory": [...], "lmdb": [...]}
    for n in NS:
        turns = n * TURNS
        got = {"peer": [], "memory": [], "lmdb": []}
        msgs = {}
        with_peer = PEER_MAX_N is None or n <= PEER_MAX_N
        if not with_peer:
            say(f"N={n}: @openai/agents not run (SESSION_BENCH_PEER_MAX_N={PEER_MAX_N})")
        for _ in range(RUNS):
            t = None
            if with_peer:
                p = run(["node", agents_js, "mock", mock.base, str(n), str(TURNS)],
                        env=node_env())
                t = last_json(p, f"@openai/agents at N={n}")
                tstats = mock.stats()
                if not (t and conversation_ok("@openai/agents", t, tstats, n)):
                    break
                msgs["peer"] = tstats["messages"]
            for kind in STORES:
                o, ostats = run_ours(mock, n, kind)
                if not o:
                    break
                msgs[kind] = ostats["messages"]
                got[kind].append(o)
            else:
                if t:
                    got["peer"].append(t)
                continue
            break
        k = min(len(got[x]) for x in STORES + (["peer"] if with_peer else []))
        if k == 0:
            say(f"N={n}: figures skipped (a client failed, above)")
            continue
        for key in got:
            got[key] = got[key][:k]
        res[n] = got
        if with_peer and msgs.get("memory") != msgs.get("peer"):
            # Not fatal: the two may frame the history differently (a system
            # message, an empty assistant text); say it next to the figures.
            say(f"N={n}: luarig sent {msgs.get('memory')} messages in all, "
                f"@openai/agents {msgs.get('peer')}")
        cpu = {x: [r["cpu_s"] * 1e3 / turns for r in got[x]] for x in got}
        rss = {x: [r["maxrss_kib"] / turns for r in got[x]] for x in got}
        if with_peer:
            bench_line(f"session_turn_cpu_n{n}", cpu["memory"], "ms/session-turn", peer,
                       cpu["peer"])
            bench_line(f"session_turn_rss_n{n}", rss["memory"], "KiB/session-turn", peer,
                       rss["peer"])
        if "lmdb" in STORES and with_peer:
            bench_line(f"session_turn_cpu_lmdb_n{n}", cpu["lmdb"], "ms/session-turn", peer,
                       cpu["peer"])
        if "lmdb" in STORES:
            bench_line(f"session_turn_cpu_lmdb_vs_memory_n{n}", cpu["lmdb"], "ms/session-turn",
                       "luarig-memory-store", cpu["memory"])
        for x in got:
            for r in got[x]:
                benchlib.record("session_curve", client=x, n=n, cpu_ms_per_turn=r["cpu_s"] * 1e3 / turns,
                                maxrss_kib=r["maxrss_kib"], wall_s=r["wall_s"])
        print(f"# N={n}, medians of {k}: luarig (memory) {median([r['cpu_s'] for r in got['memory']]):.3f} s "
              f"CPU, {median([r['maxrss_kib'] for r in got['memory']]) / 1024:.1f} MiB peak; "
              + (f"luarig (lmdb) {median([r['cpu_s'] for r in got['lmdb']]):.3f} s CPU, "
                 f"{median([r['maxrss_kib'] for r in got['lmdb']]) / 1024:.1f} MiB peak; "
                 if "lmdb" in STORES else "")
              + (f"@openai/agents {median([r['cpu_s'] for r in got['peer']]):.3f} s CPU, "
                 f"{median([r['maxrss_kib'] for r in got['peer']]) / 1024:.1f} MiB peak"
                 if got["peer"] else "@openai/agents not run"),
              flush=True)
        # Memory per live session: the peak RSS over the RSS before any session, per session.
        live = [(r["maxrss_kib"] - r["base_rss_kib"]) / n for r in got["memory"]]
        if n == max(NS):
            bench_line(f"session_live_memory_n{n}", live, "KiB/session", "goal", 64)
        if "lmdb" in STORES and n == max(NS):
            sw = [r["shutdown_wall_s"] for r in got["lmdb"]]
            bench_line(f"session_shutdown_lmdb_n{n}", sw, "s", "goal", 0.5)
            bench_line(f"session_shutdown_lmdb_n{n}", sw, "s", "luarig-memory-store",
                       [r["shutdown_wall_s"] for r in got["memory"]])
            bench_line(f"session_shutdown_lmdb_sys_n{n}", [r["shutdown_sys_s"] for r in got["lmdb"]],
                       "s", "goal", 0.5)
    # Scaling: CPU per session-turn at the largest N against N=100, each store
    # and the peer, round by round.
    if 100 in res and max(NS) > 100:
        big = max(NS)
        for x, label in (("memory", "memory"), ("lmdb", "lmdb"), ("peer", "peer")):
            if not res[big].get(x) or not res[100].get(x):
                continue
            a = [r["cpu_s"] * 1e3 / (big * TURNS) for r in res[big][x]]
            b = [r["cpu_s"] * 1e3 / (100 * TURNS) for r in res[100][x]]
            k = min(len(a), len(b))
            who = f"openai-agents-{version}" if x == "peer" else f"luarig-{label}"
            bench_line(f"session_turn_cpu_scaling_{label}_n{big}_vs_n100", a[:k], "ms/session-turn",
                       f"{who}-n100", b[:k])


def step_overhead(version):
    """STEP_RUNS processes of each, alternating; the medians."""
    turns = STEP_N * TURNS
    steps = 2 * turns
    mine, theirs, cpu = [], [], []
    for _ in range(STEP_RUNS):
        if version:
            p = run(["node", os.path.join(HERE, "session_agents.js"), "scripted", str(STEP_N),
                     str(TURNS)], env=node_env())
            t = last_json(p, "@openai/agents (scripted)")
            if t and t.get("texts") != turns:
                say(f"@openai/agents (scripted): {t.get('texts')} of {turns} turns ended in text")
                t = None
            if t:
                theirs.append(t["wall_s"] * 1e6 / steps)
        p = run([LUARIG, os.path.join(HERE, "session_workload.lua"), "scripted", str(STEP_N),
                 str(TURNS)])
        o = last_json(p, "luarig (scripted)")
        if o and o.get("texts") != turns:
            say(f"luarig (scripted): {o.get('texts')} of {turns} turns ended in text "
                f"{o.get('failed') or ''}")
            o = None
        if not o:
            break
        mine.append(o["wall_s"] * 1e6 / steps)
        cpu.append(o["cpu_s"] * 1e6 / steps)
    if not mine:
        if theirs:
            say(f"step overhead skipped for luarig; @openai/agents ScriptedModel: "
                f"{median(theirs):.1f} us/step")
        return
    if theirs:
        k = min(len(mine), len(theirs))
        bench_line("session_step_overhead", mine[:k], "us/step",
                   f"openai-agents-{version}-ScriptedModel", theirs[:k])
    bench_line("session_step_overhead", mine, "us/step", "goal", 50)
    bench_line("session_step_overhead_cpu", cpu, "us/step", "goal", 50)
    print(f"# step overhead: {STEP_N} sessions x {TURNS} turns x 2 steps, zero-latency "
          f"scripted model, wall per step, median of {len(mine)}", flush=True)


def raise_nofile(want):
    """The soft RLIMIT_NOFILE for a child that keeps `want` files open."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = soft
    if soft != resource.RLIM_INFINITY and soft < want:
        target = hard if hard == resource.RLIM_INFINITY or hard >= want else hard
    return target, hard


def idle_memory():
    for kind in ("memory", "lmdb"):
        count = IDLE
        limits = None
        root = None
        if kind == "lmdb":
            want = count + 100 + 256  # + the warm-up sessions + the process's own files
            target, hard = raise_nofile(want)
            if target != resource.RLIM_INFINITY and target < want:
                count = max(100, target - 100 - 256)
                say(f"lmdb: RLIMIT_NOFILE hard limit {hard} allows {count} sessions, "
                    f"not {IDLE} (raise it: ulimit -Hn)")

            def limits(t=target, h=hard):
                resource.setrlimit(resource.RLIMIT_NOFILE, (t, h))
            tmp = tempfile.gettempdir()
            fs = subprocess.run(["stat", "-f", "-c", "%T", tmp], capture_output=True,
                                text=True).stdout
            if "tmpfs" in fs or "ramfs" in fs:
                tmp = BUILD
            root = tempfile.mkdtemp(prefix="session-idle-", dir=tmp)
        try:
            argv = [LUARIG, os.path.join(HERE, "session_idle.lua"), str(count), kind]
            if root:
                argv.append(root)
            ours = last_json(run(argv, limits=limits), f"luarig idle sessions ({kind})")
        finally:
            if root:
                shutil.rmtree(root, ignore_errors=True)
        if not ours:
            continue
        bench_line(f"session_idle_memory_{kind}", ours["per_session_kib"], "KiB/session", "goal", 64)
        print(f"# idle sessions ({kind}): {ours['count']} opened in {ours['open_s']:.2f} s, RSS "
              f"{ours['rss_before_kib'] / 1024:.1f} -> {ours['rss_after_kib'] / 1024:.1f} MiB, "
              f"{ours['fds']} fds open",
              flush=True)


def luarig_has_sessions():
    """Whether this build has the session API at all (else one clear line)."""
    chunk = ('local ok = pcall(require, "rig.session") '
             'io.write(ok and rig.tool ~= nil and rig.define ~= nil '
             'and "yes" or "no")')
    p = run([LUARIG, "-e", chunk], timeout=30)
    return p.returncode == 0 and p.stdout.strip() == "yes"


def main():
    which = set(sys.argv[1:]) or {"workload", "step", "idle"}
    if not os.path.exists(LUARIG):
        say(f"{LUARIG} not built")
        return
    have = luarig_has_sessions()
    if not have:
        say("luarig has no session API yet (rig.tool, rig.define, rig.session): "
            "luarig figures skipped")
    version = agents_sdk() if shutil.which("node") else None
    if not version:
        say("no node/npm or no @openai/agents: peer figures skipped")
    if "workload" in which and version:
        mock = Mock()
        try:
            if have:
                workload(mock, version)
            else:
                # The peer alone at the smallest N, so a broken peer shows early.
                workload_peer_only(mock, NS[:1])
        finally:
            mock.close()
    if "step" in which and have:
        step_overhead(version)
    if "idle" in which and have:
        idle_memory()


def workload_peer_only(mock, ns):
    for n in ns:
        p = run(["node", os.path.join(HERE, "session_agents.js"), "mock", mock.base, str(n),
                 str(TURNS)], env=node_env())
        theirs = last_json(p, f"@openai/agents at N={n}")
        if theirs and conversation_ok("@openai/agents", theirs, mock.stats(), n):
            turns = n * TURNS
            say(f"peer only, N={n}: @openai/agents {theirs['cpu_s'] * 1e3 / turns:.3f} ms CPU and "
                f"{theirs['maxrss_kib'] / turns:.1f} KiB peak RSS per session-turn")


if __name__ == "__main__":
    main()
