#!/usr/bin/env python3
"""Running `true` confined: `luarig sandbox run` (tier A, network off, the
workspace read-write) against bwrap with an equivalent view, against a plain
fork+exec of `true`, and against @anthropic-ai/sandbox-runtime (`srt`, from
npm) when it installs. Wall time per run, median of many (hyperfine when
installed)."""
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LUARIG = os.environ.get("LUARIG", os.path.join(ROOT, "build", "luarig"))
NPM_DIR = os.path.join(ROOT, "build", "bench", "npm")


def bench_line(name, value, unit, peer, peer_value):
    ratio = value / peer_value if peer_value else float("inf")
    print(f"BENCH name={name} value={value:.6g} unit={unit} peer={peer} "
          f"peer_value={peer_value:.6g} ratio={ratio:.3f}", flush=True)


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


def main():
    ws = tempfile.mkdtemp(prefix="lr-sbx-bench-")
    true = shutil.which("true") or "/bin/true"
    try:
        ours = [LUARIG, "sandbox", "run", "--profile", "trusted", "--workspace", ws, "--", true]
        if subprocess.run(ours).returncode != 0:
            print("# sandbox bench: luarig sandbox run failed; skipped", flush=True)
            return
        mine = wall(ours)
        bw = shutil.which("bwrap")
        if bw:
            view = [bw, "--unshare-all", "--die-with-parent", "--new-session"]
            for d in ("/usr", "/bin", "/lib", "/lib64", "/etc"):
                if os.path.exists(d):
                    view += ["--ro-bind", d, d]
            view += ["--bind", ws, ws, "--proc", "/proc", "--dev", "/dev", true]
            if subprocess.run(view).returncode == 0:
                bench_line("sandbox_true_tierA", mine * 1e3, "ms", "bwrap", wall(view) * 1e3)
            else:
                print("# sandbox bench: bwrap cannot run here", flush=True)
        bench_line("sandbox_true_tierA", mine * 1e3, "ms", "fork_exec_true", wall([true]) * 1e3)
        srt = srt_bin()
        if srt:
            cmd = [srt, true]
            if subprocess.run(cmd, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode == 0:
                bench_line("sandbox_true_tierA", mine * 1e3, "ms", "srt", wall(cmd, runs=20) * 1e3)
            else:
                print("# sandbox bench: srt installed but cannot run here", flush=True)
        else:
            print("# sandbox bench: @anthropic-ai/sandbox-runtime did not install", flush=True)
    finally:
        shutil.rmtree(ws, ignore_errors=True)


if __name__ == "__main__":
    main()
