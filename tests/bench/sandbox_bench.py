#!/usr/bin/env python3
"""Running `true` confined: `luarig sandbox run` (tier A, network off, the
workspace read-write) against bwrap with an equivalent view, against a plain
fork+exec of `true`, and against @anthropic-ai/sandbox-runtime (`srt`, from
npm) when it installs; and `true` through a warm executor inside one luarig
process (tests/bench/sandbox_warm.lua) against rig.process.run of the same
`true` unconfined, and against the goal (2 ms). Wall time per run: each
round takes each method's median of SANDBOX_BENCH_PER_ROUND (20) runs
(hyperfine -N when installed), BENCH_RUNS (5) rounds; the lines quote the
medians of the rounds with min-max."""
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LUARIG = os.environ.get("LUARIG", os.path.join(ROOT, "build", "luarig"))
NPM_DIR = os.path.join(ROOT, "build", "bench", "npm")


bench_line = benchlib.line


def wall(argv, runs=60, warmup=5):
    hf = shutil.which("hyperfine")
    if hf:
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            cmd = " ".join(shlex.quote(a) for a in argv)
            subprocess.run([hf, "-N", "-w", str(warmup), "-r", str(runs), "--export-json",
                            out.name, cmd], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=True)
            with open(out.name) as f:
                return json.load(f)["results"][0]["median"]
    import time
    for _ in range(warmup):
        subprocess.run(argv, check=True)
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True)
        samples.append(time.perf_counter() - t0)
    samples.sort()
    return samples[len(samples) // 2]


def srt_bin():
    exe = os.path.join(NPM_DIR, "node_modules", ".bin", "srt")
    if os.path.exists(exe):
        return exe
    if not shutil.which("npm"):
        return None
    os.makedirs(NPM_DIR, exist_ok=True)
    try:
        subprocess.run(["npm", "install", "--prefix", NPM_DIR, "--no-audit", "--no-fund",
                        "--loglevel=error", "@anthropic-ai/sandbox-runtime"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    except (subprocess.TimeoutExpired, OSError):
        return None
    return exe if os.path.exists(exe) else None


def hf_median(argv, runs):
    """The median of one hyperfine call of `runs` runs (or our own loop)."""
    return wall(argv, runs=runs, warmup=3)


def main():
    ws = tempfile.mkdtemp(prefix="lr-sbx-bench-")
    true = shutil.which("true") or "/bin/true"
    per = int(os.environ.get("SANDBOX_BENCH_PER_ROUND", "20"))
    try:
        ours = [LUARIG, "sandbox", "run", "--profile", "trusted", "--workspace", ws, "--", true]
        if subprocess.run(ours).returncode != 0:
            print("# sandbox bench: luarig sandbox run failed; skipped", flush=True)
            return
        methods = {"luarig_cli": ours, "fork_exec_true": [true]}
        bw = shutil.which("bwrap")
        if bw:
            view = [bw, "--unshare-all", "--die-with-parent", "--new-session"]
            for d in ("/usr", "/bin", "/lib", "/lib64", "/etc"):
                if os.path.exists(d):
                    view += ["--ro-bind", d, d]
            view += ["--bind", ws, ws, "--proc", "/proc", "--dev", "/dev", true]
            if subprocess.run(view).returncode == 0:
                methods["bwrap"] = view
            else:
                print("# sandbox bench: bwrap cannot run here", flush=True)
        srt = srt_bin()
        if srt:
            cmd = [srt, true]
            if subprocess.run(cmd, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode == 0:
                methods["srt"] = cmd
            else:
                print("# sandbox bench: srt installed but cannot run here", flush=True)
        else:
            print("# sandbox bench: @anthropic-ai/sandbox-runtime did not install", flush=True)
        warm = os.path.join(ROOT, "tests", "bench", "sandbox_warm.lua")
        got = {k: [] for k in methods}
        got["warm_executor"], got["warm_process_run"] = [], []
        # Rounds: each method's median of `per` runs, one method after the
        # other, RUNS times; the figures are the medians of the rounds.
        for _ in range(benchlib.RUNS):
            for k, argv in methods.items():
                got[k].append(hf_median(argv, per if k != "srt" else max(5, per // 4)) * 1e3)
            r = subprocess.run([LUARIG, warm, ws, str(per)], capture_output=True, text=True)
            if r.returncode == 0:
                d = json.loads(r.stdout.strip().splitlines()[-1])
                got["warm_executor"].append(benchlib.median(d["confined_ms"]))
                got["warm_process_run"].append(benchlib.median(d["plain_ms"]))
            else:
                print("# sandbox bench: the warm executor failed: " + r.stderr.strip()[-300:],
                      flush=True)
        for peer in ("bwrap", "fork_exec_true", "srt"):
            if got.get(peer):
                bench_line("sandbox_true_tierA", got["luarig_cli"], "ms", peer, got[peer])
        if got["warm_executor"]:
            bench_line("sandbox_true_warm_executor", got["warm_executor"], "ms", "goal", 2)
            bench_line("sandbox_true_warm_executor", got["warm_executor"], "ms",
                       "luarig_process_run_unconfined", got["warm_process_run"])
        for k, v in got.items():
            if v:
                benchlib.record("spawn_method", method=k, ms=benchlib.median(v), min=min(v), max=max(v))
        print(f"# sandbox bench: {benchlib.RUNS} rounds of {per} runs of each method, the "
              "median of each round; the CLI and the peers as whole processes, the warm "
              "executor inside one luarig process", flush=True)
    finally:
        shutil.rmtree(ws, ignore_errors=True)


if __name__ == "__main__":
    main()
