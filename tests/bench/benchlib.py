"""The one way every benchmark here prints a figure (tests/bench/README.md).

  BENCH name=N value=V unit=U peer=P peer_value=PV ratio=R runs=K
        min=.. max=.. peer_min=.. peer_max=.. ratio_min=.. ratio_max=..

value and peer_value are the medians of K runs of luarig and of the peer,
measured in the same run of `make bench`, interleaved (ours, peer, ours,
peer, ...) so a drift of the machine's speed touches both alike. ratio is
the median of the K pair-by-pair ratios (run i of luarig over run i of the
peer) when both sides have K runs, else the ratio of the medians; min and
max are the extremes of each side and of the pairwise ratios. A peer named
"goal" is the issue's absolute goal, one constant. Values are costs: a
ratio below 1 means luarig is cheaper.

With BENCH_JSON set, each line is also appended to that file as one JSON
object (the report, tests/bench/report.py, draws from it), and
record(kind, **fields) appends other series (curves) there.
"""
import json
import os
import statistics

RUNS = int(os.environ.get("BENCH_RUNS", "5"))


def median(xs):
    return statistics.median(xs)


def _g(x):
    return f"{x:.6g}"


def _emit(obj):
    path = os.environ.get("BENCH_JSON")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(obj) + "\n")


def record(kind, **fields):
    """A series point for the report (not printed)."""
    fields["kind"] = kind
    _emit(fields)


def line(name, ours, unit, peer, theirs, note=None):
    """ours, theirs: one number or a list of samples (costs)."""
    ours = list(ours) if isinstance(ours, (list, tuple)) else [ours]
    theirs = list(theirs) if isinstance(theirs, (list, tuple)) else [theirs]
    if not ours or not theirs:
        return
    v, pv = median(ours), median(theirs)
    if len(ours) == len(theirs) and len(ours) > 1 and all(theirs):
        ratios = [a / b for a, b in zip(ours, theirs)]
        r = median(ratios)
    else:
        ratios = [x / pv if pv else float("inf") for x in ours]
        r = v / pv if pv else float("inf")
    rmin, rmax = min(ratios), max(ratios)
    text = (f"BENCH name={name} value={_g(v)} unit={unit} peer={peer} peer_value={_g(pv)} "
            f"ratio={r:.3f} runs={len(ours)} min={_g(min(ours))} max={_g(max(ours))}")
    if len(theirs) > 1:
        text += f" peer_min={_g(min(theirs))} peer_max={_g(max(theirs))}"
    text += f" ratio_min={rmin:.3f} ratio_max={rmax:.3f}"
    print(text, flush=True)
    _emit({"kind": "bench", "name": name, "unit": unit, "peer": peer, "value": v,
           "peer_value": pv, "ratio": r, "runs": len(ours), "min": min(ours),
           "max": max(ours), "peer_min": min(theirs), "peer_max": max(theirs),
           "ratio_min": rmin, "ratio_max": rmax, "samples": ours, "peer_samples": theirs,
           "note": note})


def parse(text):
    """The BENCH lines of a program's output, as dicts (numbers as floats)."""
    out = []
    for ln in text.splitlines():
        if not ln.startswith("BENCH "):
            continue
        d = {}
        for kv in ln[6:].split():
            k, _, val = kv.partition("=")
            try:
                d[k] = float(val)
            except ValueError:
                d[k] = val
        out.append(d)
    return out
