#!/usr/bin/env python3
"""Sessions (issue 6, Performance): luarig against @openai/agents (npm).

1. session_turn_{cpu,rss}_n{10,100}: N sessions x 10 turns, the sessions
   running concurrently, each turn one tool call ("lookup", a local function
   returning a fixed string) and a final answer, against a local mock
   OpenAI-compatible chat-completions server (tests/bench/mock_openai.py,
   streaming SSE with a usage chunk, its own process so its CPU is counted
   for neither). luarig runs tests/bench/session_workload.lua; the peer runs
   tests/bench/session_agents.js (agent runs streamed through
   OpenAIChatCompletionsModel, tracing disabled, history carried across the
   10 runs of a session). Each process reports its own CPU seconds (all
   threads, around the workload, after start-up) and peak RSS (whole
   process). Figures per session-turn: CPU in ms, peak RSS in KiB. The mock
   counts the requests and the messages they carried; both clients must
   send the same conversations, else the figures are not printed. Two
   processes per client and N, alternating; the least of each figure.
2. session_step_overhead: the same workload with a zero-latency scripted
   model in-process (rig.model.script with function steps; the SDK's own
   ScriptedModel with responder steps for the peer), wall time per model
   step, the best of three processes each. Also printed against the
   absolute goal (peer=goal, 50 us).
3. session_idle_memory_{memory,lmdb}: RSS growth per idle session with
   10,000 sessions open in one process (tests/bench/session_idle.lua),
   against the absolute goal (peer=goal, 64 KiB). An LMDB session keeps its
   lease's lock file open, so the soft RLIMIT_NOFILE of the child is raised
   to the hard limit; with a hard limit too low the count is lowered and
   said so.

Until the session API works, the luarig figures are skipped with a
"# session bench: ..." line (the peer's figures are still printed as
comments), so `make bench` never breaks. Environment: SESSION_BENCH_NS
(default "10,100"), SESSION_BENCH_TURNS (10), SESSION_BENCH_IDLE (10000),
SESSION_BENCH_RUNS (2).
"""
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join(ROOT, "tests", "bench")
BUILD = os.path.join(ROOT, os.environ.get("BUILD") or "build")
LUARIG = os.environ.get("LUARIG", os.path.join(BUILD, "luarig"))
NPM_DIR = os.path.join(ROOT, "build", "bench", "npm")
AGENTS_VERSION = "0.20.0"
NS = [int(x) for x in os.environ.get("SESSION_BENCH_NS", "10,100").split(",") if x]
TURNS = int(os.environ.get("SESSION_BENCH_TURNS", "10"))
IDLE = int(os.environ.get("SESSION_BENCH_IDLE", "10000"))
STEP_N = 100  # sessions in the step-overhead run (x TURNS turns x 2 steps)
STEP_RUNS = 3
RUNS = int(os.environ.get("SESSION_BENCH_RUNS", "2"))  # processes per client and N


def bench_line(name, value, unit, peer, peer_value):
    ratio = value / peer_value if peer_value else float("inf")
    print(f"BENCH name={name} value={value:.6g} unit={unit} peer={peer} "
          f"peer_value={peer_value:.6g} ratio={ratio:.3f}", flush=True)


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


def best(a, b):
    """The least CPU, RSS and wall of two results of one client."""
    if a is None:
        return dict(b)
    out = dict(a)
    for k in ("cpu_s", "maxrss_kib", "wall_s"):
        out[k] = min(a[k], b[k])
    return out


def workload(mock, version):
    peer = f"openai-agents-{version}"
    agents_js = os.path.join(HERE, "session_agents.js")
    lua = os.path.join(HERE, "session_workload.lua")
    for n in NS:
        # RUNS processes per client, alternating; each figure is the least
        # (the other core's noise only ever adds), CPU and RSS separately.
        theirs = ours = None
        tstats = ostats = None
        for _ in range(RUNS):
            p = run(["node", agents_js, "mock", mock.base, str(n), str(TURNS)], env=node_env())
            t = last_json(p, f"@openai/agents at N={n}")
            tstats = mock.stats()
            if t and conversation_ok("@openai/agents", t, tstats, n):
                theirs = best(theirs, t)
            p = run([LUARIG, lua, "mock", mock.base, str(n), str(TURNS)])
            o = last_json(p, f"luarig at N={n}")
            ostats = mock.stats()
            if not (o and conversation_ok("luarig", o, ostats, n)):
                ours = None
                break
            ours = best(ours, o)
        if ours and theirs and ostats["messages"] != tstats["messages"]:
            # Not fatal: the two may frame the history differently (a system
            # message, an empty assistant text); say it next to the figures.
            say(f"N={n}: luarig sent {ostats['messages']} messages in all, "
                f"@openai/agents {tstats['messages']}")
        turns = n * TURNS
        if theirs and not ours:
            say(f"N={n}: luarig figures skipped; @openai/agents: "
                f"{theirs['cpu_s'] * 1e3 / turns:.3f} ms CPU and "
                f"{theirs['maxrss_kib'] / turns:.1f} KiB peak RSS per session-turn "
                f"({theirs['cpu_s']:.2f} s, {theirs['maxrss_kib'] / 1024:.0f} MiB, "
                f"{theirs['wall_s']:.1f} s wall)")
        if ours and theirs:
            bench_line(f"session_turn_cpu_n{n}", ours["cpu_s"] * 1e3 / turns, "ms/session-turn",
                       peer, theirs["cpu_s"] * 1e3 / turns)
            bench_line(f"session_turn_rss_n{n}", ours["maxrss_kib"] / turns, "KiB/session-turn",
                       peer, theirs["maxrss_kib"] / turns)
            print(f"# N={n}: luarig {ours['cpu_s']:.3f} s CPU, {ours['maxrss_kib'] / 1024:.1f} MiB "
                  f"peak, {ours['wall_s']:.2f} s wall; @openai/agents {theirs['cpu_s']:.3f} s CPU, "
                  f"{theirs['maxrss_kib'] / 1024:.1f} MiB peak, {theirs['wall_s']:.2f} s wall",
                  flush=True)


def step_overhead(version):
    """Best (least) wall time of STEP_RUNS processes each: the other core's
    noise only ever adds time."""
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
                f"{min(theirs):.1f} us/step")
        return
    if theirs:
        bench_line("session_step_overhead", min(mine), "us/step",
                   f"openai-agents-{version}-ScriptedModel", min(theirs))
    bench_line("session_step_overhead", min(mine), "us/step", "goal", 50)
    print(f"# step overhead: {STEP_N} sessions x {TURNS} turns x 2 steps, zero-latency "
          f"scripted model, best of {len(mine)}; luarig {min(cpu):.1f} us CPU/step", flush=True)


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
