#!/usr/bin/env python3
"""The benchmark report: Markdown with SVG charts drawn by gnuplot, from the
JSON lines tests/bench/benchlib.py appended during `make bench`.

  report.py RESULTS.jsonl OUT_DIR

Writes OUT_DIR/README.md and OUT_DIR/*.svg: the machine, the issue's goals
with the lines that measure them (met or not, by the median, with
min-max), every line against its peer, the session scaling curves (CPU per
session-turn and peak RSS at N = 1, 10, 100, 1000, luarig with each store
and @openai/agents), snapshot times by tree size against git, and confined
spawn by method. Without gnuplot the report is written without charts
(and says so). BENCH_NOTE, when set, is printed under the machine.
"""
import collections
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys

# The table: (figure, line name, peer, "ratio" | "value", goal).
GOALS = [
    ("per-step overhead, zero-latency scripted model (wall)", "session_step_overhead", "goal",
     "value", 50, "us"),
    ("per-step overhead, zero-latency scripted model (CPU)", "session_step_overhead_cpu", "goal",
     "value", 50, "us"),
    ("CPU per session-turn, N=1000 vs N=100 (memory store)",
     "session_turn_cpu_scaling_memory_n1000_vs_n100", None, "ratio", 1.0, ""),
    ("same, LMDB store", "session_turn_cpu_scaling_lmdb_n1000_vs_n100", None, "ratio", 1.0, ""),
    ("LMDB (durable) vs memory store, same workload (N=100)",
     "session_turn_cpu_lmdb_vs_memory_n100", None, "ratio", 1.3, ""),
    ("peak RSS, N=100, vs @openai/agents", "session_turn_rss_n100", None, "ratio", 0.07, ""),
    ("memory per live session at N=1000", "session_live_memory_n1000", "goal", "value", 64,
     "KiB"),
    ("shutdown of 1,000 LMDB sessions (after the work)", "session_shutdown_lmdb_n1000", "goal",
     "value", 0.5, "s"),
    ("confined `true`, CLI, vs bwrap", "sandbox_true_tierA", "bwrap", "ratio", 1.0, ""),
    ("confined `true`, warm in-process executor", "sandbox_true_warm_executor", "goal", "value",
     2, "ms"),
    ("durable 1 KiB append, one writer, vs SQLite WAL FULL", "durable_append_1k_1sessions", None,
     "ratio", 1.0, ""),
    ("unchanged re-capture vs `git status`, 10k files / 200 MiB", "snapshot_capture_unchanged",
     None, "ratio", 1.0, ""),
    ("unchanged re-capture vs `git status`, 10k small files in 100 dirs",
     "snapshot_capture_unchanged_small10k", None, "ratio", 1.0, ""),
    ("SSE client, 100 MB stream, per event vs `curl -N`", "sse_per_event", None, "ratio", 1.5, ""),
    ("serve SSE p99 at 1,000 subscribers", "serve_sse_latency_p99_1000", "goal", "value", 10,
     "ms"),
]


def load(path):
    rows = []
    with open(path) as f:
        for ln in f:
            ln = ln.strip()
            if ln:
                try:
                    rows.append(json.loads(ln))
                except ValueError:
                    pass
    return rows


def g(x):
    if x is None:
        return ""
    if abs(x) >= 100:
        return f"{x:.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    if abs(x) >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


def machine():
    out = {}
    try:
        with open("/proc/cpuinfo") as f:
            for ln in f:
                if ln.startswith("model name"):
                    out["cpu"] = ln.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    out["cpus"] = os.cpu_count()
    try:
        with open("/proc/meminfo") as f:
            kib = int(f.readline().split()[1])
            out["memory"] = f"{kib / 1024 / 1024:.1f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    out["kernel"] = platform.release()
    try:
        with open("/etc/debian_version") as f:
            out["os"] = "Debian " + f.read().strip()
    except OSError:
        out["os"] = platform.platform()
    return out


def gnuplot(script, out_svg):
    gp = shutil.which("gnuplot")
    if not gp:
        return False
    r = subprocess.run([gp], input=f"set terminal svg size 860,{script[0]} dynamic noenhanced "
                       f"font 'sans,12' background rgb 'white'\nset output '{out_svg}'\n"
                       + script[1], text=True, capture_output=True)
    if r.returncode != 0:
        sys.stderr.write(f"report: gnuplot failed for {out_svg}: {r.stderr[-400:]}\n")
        return False
    return True


def ratio_chart(lines, out_dir, fname, title):
    """Horizontal bars: each line's median ratio, min-max error bars, log scale."""
    if not lines:
        return None
    dat = os.path.join(out_dir, fname + ".dat")
    pos = [x for b in lines for x in (b["ratio"], b["ratio_min"]) if x > 0]
    lo = min(min(pos or [0.5]), 0.5)
    hi = max(max(b["ratio_max"] for b in lines), 2)
    with open(dat, "w") as f:
        for i, b in enumerate(lines):
            label = f"{b['name']} vs {b['peer']}"
            r, rl, rh = (max(x, lo) for x in (b["ratio"], b["ratio_min"], b["ratio_max"]))
            f.write(f"{i} {r:.6g} {rl:.6g} {rh:.6g} \"{label}\"\n")
    h = 120 + 26 * len(lines)
    script = f"""
set title "{title} (luarig / peer; below 1: luarig cheaper)"
set logscale x
set xrange [{lo / 1.5:.6g}:{hi * 1.5:.6g}]
set yrange [-0.7:{len(lines) - 0.3}]
set ytics scale 0 font ',10'
set grid xtics
set key off
set arrow from 1, graph 0 to 1, graph 1 nohead lc rgb '#888888' dt 2
set style fill solid 0.6
unset colorbox
plot '{dat}' using 2:1:3:4:ytic(5) with xerrorbars lc rgb '#1f77b4' lw 1.5, \
     '' using 2:1 with points pt 7 ps 0.9 lc rgb '#1f77b4'
"""
    svg = os.path.join(out_dir, fname + ".svg")
    ok = gnuplot((h, script), svg)
    os.unlink(dat)
    return os.path.basename(svg) if ok else None


def scaling_charts(rows, out_dir):
    pts = collections.defaultdict(list)
    for r in rows:
        if r.get("kind") == "session_curve":
            pts[(r["client"], r["n"])].append(r)
    if not pts:
        return []
    labels = {"memory": "luarig (memory store)", "lmdb": "luarig (LMDB store)",
              "peer": "@openai/agents"}
    out = []
    for key, ylabel, fname, conv in (
            ("cpu_ms_per_turn", "CPU per session-turn (ms)", "scaling_cpu", lambda v: v),
            ("maxrss_kib", "peak RSS (MiB)", "scaling_rss", lambda v: v / 1024)):
        plots, dats = [], []
        for client in ("memory", "lmdb", "peer"):
            ns = sorted(n for c, n in pts if c == client)
            if not ns:
                continue
            dat = os.path.join(out_dir, f"{fname}_{client}.dat")
            with open(dat, "w") as f:
                for n in ns:
                    v = [conv(r[key]) for r in pts[(client, n)]]
                    f.write(f"{n} {statistics.median(v):.6g} {min(v):.6g} {max(v):.6g}\n")
            dats.append(dat)
            plots.append(f"'{dat}' using 1:2:3:4 with yerrorlines lw 2 pt 7 title '{labels[client]}'")
        script = f"""
set title "{ylabel} against the number of concurrent sessions N (10 turns each; median, min-max)"
set logscale x
set logscale y
set xlabel "sessions N"
set ylabel "{ylabel}"
set xtics (1, 10, 100, 1000)
set grid
set key outside right
plot {', '.join(plots)}
"""
        svg = os.path.join(out_dir, fname + ".svg")
        if gnuplot((420, script), svg):
            out.append(os.path.basename(svg))
        for d in dats:
            os.unlink(d)
    return out


def snapshot_chart(rows, out_dir):
    pts = {}
    for r in rows:
        if r.get("kind") == "snapshot_curve":
            name = r["figure"]
            for kind in ("first", "unchanged"):
                pre = f"snapshot_capture_{kind}_small"
                if name.startswith(pre):
                    tag = name[len(pre):]
                    n = int(tag[:-1]) * 1000 if tag.endswith("k") else int(tag)
                    pts[(kind, n)] = (r["luarig_s"], r["git_s"])
    if not pts:
        return None
    dat = os.path.join(out_dir, "snapshot.dat")
    with open(dat, "w") as f:
        for kind in ("first", "unchanged"):
            for n in sorted(n for k, n in pts if k == kind):
                o, p = pts[(kind, n)]
                f.write(f"{n} {o:.6g} {p:.6g}\n")
            f.write("\n\n")
    script = f"""
set title "Snapshot capture by tree size (small files, 100 a directory; medians)"
set logscale xy
set xlabel "files"
set ylabel "seconds (whole process)"
set grid
set key outside right
plot '{dat}' index 0 using 1:2 with linespoints lw 2 pt 7 title 'luarig capture (first)', \\
     '{dat}' index 0 using 1:3 with linespoints lw 2 pt 6 title 'git add -A + write-tree', \\
     '{dat}' index 1 using 1:2 with linespoints lw 2 pt 5 title 'luarig capture (unchanged)', \\
     '{dat}' index 1 using 1:3 with linespoints lw 2 pt 4 title 'git status (unchanged)'
"""
    svg = os.path.join(out_dir, "snapshot.svg")
    ok = gnuplot((420, script), svg)
    os.unlink(dat)
    return os.path.basename(svg) if ok else None


def spawn_chart(rows, out_dir):
    ms = [r for r in rows if r.get("kind") == "spawn_method"]
    if not ms:
        return None
    names = {"luarig_cli": "luarig sandbox run (CLI)", "bwrap": "bwrap",
             "fork_exec_true": "fork+exec (hyperfine)", "srt": "srt (npm)",
             "warm_executor": "luarig warm executor", "warm_process_run": "rig.process.run"}
    dat = os.path.join(out_dir, "spawn.dat")
    with open(dat, "w") as f:
        for i, r in enumerate(ms):
            f.write(f"{i} {r['ms']:.6g} {r['min']:.6g} {r['max']:.6g} \"{names.get(r['method'], r['method'])}\"\n")
    script = f"""
set title "Running /bin/true by method (ms per run; median of rounds, min-max)"
set logscale y
set style data histogram
set style fill solid 0.6
set boxwidth 0.6
set grid ytics
set key off
set xtics rotate by -25 left font ',10'
set bmargin 7
set yrange [0.1:*]
plot '{dat}' using 1:2:xtic(5) with boxes lc rgb '#1f77b4', '' using 1:2:3:4 with yerrorbars lc rgb 'black' pt 0
"""
    svg = os.path.join(out_dir, "spawn.svg")
    ok = gnuplot((400, script), svg)
    os.unlink(dat)
    return os.path.basename(svg) if ok else None


AREAS = [
    ("Sessions", ("session_",)),
    ("Serve and SSE", ("serve_", "sse_")),
    ("Sandbox", ("sandbox_",)),
    ("Storage", ("durable_", "journal_", "nats_", "restore_", "blob_")),
    ("Snapshots", ("snapshot_",)),
    ("Start-up, models, MCP, JSON", ("startup", "peak_rss", "model_", "cache_", "mcp_", "json_")),
]


def main():
    if len(sys.argv) != 3:
        sys.stderr.write("usage: report.py RESULTS.jsonl OUT_DIR\n")
        sys.exit(2)
    rows = load(sys.argv[1])
    out_dir = sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    benches = [r for r in rows if r.get("kind") == "bench"]
    meta = next((r for r in rows if r.get("kind") == "meta"), {})
    md = ["# luarig benchmark report", ""]
    m = machine()
    md += [f"Written by `make bench` (tests/bench/report.py) on "
           f"{meta.get('date', datetime.datetime.utcnow().strftime('%Y-%m-%d %H:%M UTC'))}"
           f", luarig at commit `{meta.get('commit', '?')}`. The method: "
           "[tests/bench/README.md](../../tests/bench/README.md).", "",
           "## The machine", "",
           f"- CPU: {m.get('cpu', '?')}, {m.get('cpus', '?')} logical processors",
           f"- memory: {m.get('memory', '?')}; {m.get('os', '?')}, Linux {m.get('kernel', '?')}",
           f"- load average (1, 5, 15 min) at the start: {meta.get('load_start', '?')}, "
           f"at the end: {meta.get('load_end', '?')}",
           f"- wall time of the whole run: {meta.get('wall_min', '?')} min"]
    note = os.environ.get("BENCH_NOTE") or meta.get("note")
    if note:
        md += ["", note]
    md += ["", "Every figure is a cost (time or bytes): the median of the runs, with the "
           "least and the most (min–max). A ratio is luarig over a peer measured in the "
           "same run, interleaved; below 1 luarig is cheaper. A peer named `goal` is the "
           "issue's absolute goal.", ""]
    # goals
    md += ["## The goals", "", "| figure | line | median | min–max | goal | met |",
           "|---|---|---|---|---|---|"]
    for label, name, peer, what, goal, unit in GOALS:
        cands = [b for b in benches if b["name"] == name and (peer is None or b["peer"] == peer)]
        if peer is None:
            cands = [b for b in cands if b["peer"] != "goal"] or cands
        if not cands:
            md.append(f"| {label} | `{name}` | not measured | | ≤ {g(goal)}{'×' if what == 'ratio' else ' ' + unit} | — |")
            continue
        b = cands[0]
        if what == "ratio":
            val, lo, hi = b["ratio"], b["ratio_min"], b["ratio_max"]
            shown = f"{g(val)}× {b['peer']}"
            rng = f"{g(lo)}–{g(hi)}×"
            goal_s = f"≤ {g(goal)}×"
        else:
            val, lo, hi = b["value"], b["min"], b["max"]
            shown = f"{g(val)} {b['unit']}"
            rng = f"{g(lo)}–{g(hi)}"
            goal_s = f"≤ {g(goal)} {unit}"
        met = "yes" if val <= goal else "no"
        if met == "yes" and hi > goal:
            met = "yes (median; not every run)"
        md.append(f"| {label} | `{name}` | {shown} | {rng} | {goal_s} | {met} |")
    md.append("")
    # charts
    md += ["## Each figure against its peer", ""]
    for area, prefixes in AREAS:
        lines = [b for b in benches if b["name"].startswith(prefixes)]
        if not lines:
            continue
        fname = "ratios_" + area.split()[0].lower().strip(",")
        svg = ratio_chart(lines, out_dir, fname, area)
        md += [f"### {area}", ""]
        if svg:
            md += [f"![{area}: ratios against the peers]({svg})", ""]
        md += ["| line | unit | luarig median (min–max) | peer | peer median (min–max) | ratio (min–max) | runs |",
               "|---|---|---|---|---|---|---|"]
        for b in lines:
            peer_rng = (f" ({g(b['peer_min'])}–{g(b['peer_max'])})"
                        if b["peer_min"] != b["peer_max"] else "")
            md.append(f"| `{b['name']}` | {b['unit']} | {g(b['value'])} ({g(b['min'])}–{g(b['max'])}) "
                      f"| {b['peer']} | {g(b['peer_value'])}{peer_rng} | "
                      f"{b['ratio']:.3f} ({b['ratio_min']:.3f}–{b['ratio_max']:.3f}) | {b['runs']} |")
        md.append("")
    md += ["## Scaling with the number of sessions", ""]
    sc = scaling_charts(rows, out_dir)
    md += [f"![scaling]({s})" for s in sc] or ["(no session curves in this run)"]
    md += ["", "## Snapshots by tree size", ""]
    s = snapshot_chart(rows, out_dir)
    md += [f"![snapshot capture by tree size]({s})" if s else "(no snapshot curve in this run)", ""]
    md += ["## Confined spawn by method", ""]
    s = spawn_chart(rows, out_dir)
    md += [f"![confined spawn by method]({s})" if s else "(no spawn figures in this run)", ""]
    if not shutil.which("gnuplot"):
        md += ["", "gnuplot is not installed (tools/deps.sh installs gnuplot-nox): no charts."]
    with open(os.path.join(out_dir, "README.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print(f"# report: {os.path.join(out_dir, 'README.md')}", flush=True)


if __name__ == "__main__":
    main()
