#!/usr/bin/env python3
"""Workspace snapshots against git, same tree, same disk, same run.

A generated workspace (10k files, 200 MiB, mixed sizes, nested, content
deterministic) is timed through the luarig CLI (`luarig snapshot --state S
...`, so each figure includes process start and opening the LMDB store,
as git's does) against:

  capture_first      `git add -A && git write-tree` in a fresh repository
  capture_unchanged  `git status` (index warm)
  capture_one_changed  `git add -A && git write-tree` after one file changed
  restore            `git checkout <tree> -- .` into an empty work tree

Then trees of small files (100 B - 8 KiB) in directories of 100 files
each, of SNAP_BENCH_SMALL (1000,10000,30000) files: capture_first and
capture_unchanged again, named snapshot_capture_{first,unchanged}_small<N>
(the 10k tree is "10k small files in 100 dirs").

Each figure is the median of RUNS (BENCH_RUNS, 5), luarig and git
alternating, with min-max (tests/bench/benchlib.py). The tree is aged past
the 2 s "racy" window before timing, as both tools distrust fresher stat
data.
"""
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LUARIG = os.environ.get("LUARIG", os.path.join(ROOT, "build", "luarig"))
FILES = int(os.environ.get("SNAP_BENCH_FILES", "10000"))
TOTAL = int(os.environ.get("SNAP_BENCH_BYTES", str(200 << 20)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

RUNS = int(os.environ.get("SNAP_BENCH_RUNS", str(benchlib.RUNS)))
SMALL = [int(x) for x in os.environ.get("SNAP_BENCH_SMALL", "1000,10000,30000").split(",") if x]


def bench_line(name, ours, unit, peer, theirs):
    benchlib.line(name, ours, unit, peer, theirs)
    if name.startswith("snapshot_capture_"):
        benchlib.record("snapshot_curve", figure=name, luarig_s=benchlib.median(ours),
                        git_s=benchlib.median(theirs))


def generate_small(w, n):
    """n files of 100 B - 8 KiB, 100 to a directory."""
    rnd = random.Random(7)
    block = rnd.randbytes(8192)
    for i in range(n):
        d = os.path.join(w, f"d{i // 100:04d}")
        if i % 100 == 0:
            os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i:06d}.txt"), "wb") as f:
            f.write(i.to_bytes(4, "little") + block[:rnd.randint(100, 8000)])


def small_trees(base, genv):
    for n in SMALL:
        w = os.path.join(base, f"small{n}")
        generate_small(w, n)
        subprocess.run(["sync"])
        time.sleep(2.2)
        tag = f"small{n // 1000}k" if n % 1000 == 0 else f"small{n}"
        ours, peer = [], []
        for k in range(RUNS):
            st = os.path.join(base, f"sstate{n}-{k}")
            ours.append(timed([LUARIG, "snapshot", "--state", st, "capture", w])[0])
            gd = os.path.join(base, f"sgit{n}-{k}")
            subprocess.run(["git", "init", "-q", "--bare", gd], check=True)
            t = time.perf_counter()
            subprocess.run(git(gd, w, "add", "-A"), check=True, env=genv)
            subprocess.run(git(gd, w, "write-tree"), check=True, env=genv, stdout=subprocess.DEVNULL)
            peer.append(time.perf_counter() - t)
        bench_line(f"snapshot_capture_first_{tag}", ours, "s", "git_add_write_tree", peer)
        st, gd = os.path.join(base, f"sstate{n}-0"), os.path.join(base, f"sgit{n}-0")
        timed([LUARIG, "snapshot", "--state", st, "capture", w])
        subprocess.run(git(gd, w, "status", "--porcelain"), check=True, stdout=subprocess.DEVNULL)
        ours, peer = [], []
        for _ in range(RUNS):
            ours.append(timed([LUARIG, "snapshot", "--state", st, "capture", w])[0])
            peer.append(timed(git(gd, w, "status", "--porcelain"))[0])
        bench_line(f"snapshot_capture_unchanged_{tag}", ours, "s", "git_status", peer)
        for k in range(RUNS):
            shutil.rmtree(os.path.join(base, f"sstate{n}-{k}"), ignore_errors=True)
            shutil.rmtree(os.path.join(base, f"sgit{n}-{k}"), ignore_errors=True)
        shutil.rmtree(w, ignore_errors=True)


def generate(w):
    """Mixed sizes: mostly small source-like files, some medium, a few large."""
    rnd = random.Random(42)
    sizes = []
    for i in range(FILES):
        r = rnd.random()
        sizes.append(rnd.randint(100, 8000) if r < 0.9 else
                     rnd.randint(8000, 200000) if r < 0.995 else 0)
    big = [i for i, s in enumerate(sizes) if s == 0]
    rest = TOTAL - sum(sizes)
    for i in big:
        sizes[i] = max(1, rest // len(big))
    block = rnd.randbytes(1 << 20)
    for i, size in enumerate(sizes):
        d = os.path.join(w, f"d{i % 20:02d}", f"s{(i // 20) % 25:02d}", f"t{(i // 500) % 4}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i:05d}.dat"), "wb") as f:
            off = (i * 7919) % (len(block) - 1)
            f.write(i.to_bytes(4, "little"))
            left = size - 4
            while left > 0:
                n = min(left, len(block) - off)
                f.write(block[off:off + n])
                left -= n
                off = 0
    return sizes


def timed(argv, env=None, cwd=None):
    t = time.perf_counter()
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd)
    dt = time.perf_counter() - t
    if r.returncode != 0:
        raise RuntimeError(f"{argv[0]} {argv[1:3]} failed: {r.stderr.decode()[-400:]}")
    return dt, r.stdout.decode()


def git(gd, w, *args, env=None):
    return ["git", "--git-dir", gd, "--work-tree", w, *args]


def main():
    if not shutil.which("git"):
        print("snapshot bench: git not found (make deps installs it)", file=sys.stderr)
        return
    base = tempfile.mkdtemp(prefix="snap-bench-", dir=os.environ.get("BENCH_DIR"))
    try:
        w = os.path.join(base, "w")
        generate(w)
        subprocess.run(["sync"])
        time.sleep(2.2)
        genv = dict(os.environ, GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@b",
                    GIT_COMMITTER_NAME="b", GIT_COMMITTER_EMAIL="b@b")

        # First capture: a fresh state root / a fresh repository each run.
        ours, peer = [], []
        for k in range(RUNS):
            st = os.path.join(base, f"state{k}")
            dt, out = timed([LUARIG, "snapshot", "--state", st, "capture", w])
            ours.append(dt)
            ref = out.strip().splitlines()[-1]
            gd = os.path.join(base, f"git{k}")
            subprocess.run(["git", "init", "-q", "--bare", gd], check=True)
            t = time.perf_counter()
            subprocess.run(git(gd, w, "add", "-A"), check=True, env=genv)
            r = subprocess.run(git(gd, w, "write-tree"), check=True, env=genv,
                               stdout=subprocess.PIPE)
            peer.append(time.perf_counter() - t)
            tree = r.stdout.decode().strip()
        bench_line("snapshot_capture_first", ours, "s", "git_add_write_tree", peer)
        st, gd = os.path.join(base, "state0"), os.path.join(base, "git0")

        # Unchanged re-capture (stat cache warm) against git status (index warm).
        subprocess.run(git(gd, w, "status", "--porcelain"), check=True, stdout=subprocess.DEVNULL)
        ours, peer = [], []
        for _ in range(RUNS):
            ours.append(timed([LUARIG, "snapshot", "--state", st, "capture", w])[0])
            peer.append(timed(git(gd, w, "status", "--porcelain"))[0])
        bench_line("snapshot_capture_unchanged", ours, "s", "git_status", peer)

        # One file changed (a new version each run) against the same git step.
        victim = os.path.join(w, "d03", "s04", "t0", "f00083.dat")
        ours, peer = [], []
        for k in range(RUNS):
            with open(victim, "r+b") as f:
                f.write(f"change {k:04d}".encode())
            ours.append(timed([LUARIG, "snapshot", "--state", st, "capture", w])[0])
            with open(victim, "r+b") as f:
                f.write(f"CHANGE {k:04d}".encode())
            t = time.perf_counter()
            subprocess.run(git(gd, w, "add", "-A"), check=True)
            subprocess.run(git(gd, w, "write-tree"), check=True, stdout=subprocess.DEVNULL)
            peer.append(time.perf_counter() - t)
        bench_line("snapshot_capture_one_changed", ours, "s", "git_add_write_tree", peer)

        # Restore into an empty directory against git checkout of the same tree.
        ours, peer = [], []
        for k in range(RUNS):
            out = os.path.join(base, f"out{k}")
            ours.append(timed([LUARIG, "snapshot", "--state", st, "restore", ref, out])[0])
            gout = os.path.join(base, f"gout{k}")
            os.mkdir(gout)
            env = dict(os.environ, GIT_INDEX_FILE=os.path.join(base, f"index{k}"))
            peer.append(timed(git(gd, gout, "checkout", tree, "--", "."), env=env)[0])
            if k == 0:
                same = subprocess.run(["diff", "-r", "-q", out, gout], stdout=subprocess.DEVNULL)
                if same.returncode != 0:
                    print("snapshot bench: restored trees differ", file=sys.stderr)
            shutil.rmtree(out)
            shutil.rmtree(gout)
        bench_line("snapshot_restore", ours, "s", "git_checkout", peer)
        small_trees(base, genv)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
