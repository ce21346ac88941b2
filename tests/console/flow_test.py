#!/usr/bin/env python3
"""The web console's flow runs in headless Chromium, with the browser helpers
of harness.py: `luarig serve` on a script that returns a rig and a flow;
a run started over HTTP appears under "Flow runs"; clicking it draws its
graph as SVG with the interrupted vertex marked current; the interrupt is
answered in the page; the graph then has no current vertex and the run is
done, its output shown. Screenshot build/artifacts/console-flow.png.

Prints TAP lines "ok - console flow: …" / "not ok - console flow: …".
"""
import json
import os
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the tree
from harness import ARTIFACTS, TOKEN, Suite, http, sign_in  # noqa: E402

S = Suite("console flow", failure_png="console-flow-failure.png")
ok = S.ok


def run(c, base):
    status, _, body = http(base + "/v1/flows/review/runs", TOKEN, "POST",
                              json.dumps({"input": {"draft": "1.0"}}).encode())
    ok(status == 201, "a run starts over HTTP", "%d %s" % (status, body[:200]))
    run_id = json.loads(body)["run_id"]
    deadline = time.time() + 10
    while time.time() < deadline:
        _, _, b = http(base + "/v1/flows/review/runs/" + run_id + "/status", TOKEN)
        if json.loads(b)["status"] == "interrupted":
            break
        time.sleep(0.05)
    sign_in(c, base, "!document.getElementById('flows').hidden && "
            "document.querySelector('#flows li[data-id=\"%s\"]') !== null" % run_id, "the flow run in the sidebar")
    badge = c.eval("document.querySelector('#flows li[data-id=\"%s\"] .badge').textContent" % run_id)
    ok(badge == "interrupted", "the sidebar lists the run with its status", str(badge))
    c.click('#flows li[data-id="%s"]' % run_id)
    c.wait("document.querySelector('.flow-graph svg') !== null", "the run's graph")
    names = c.eval("Array.from(document.querySelectorAll('.flow-graph g.vertex')).map((g) => g.dataset.vertex).sort()")
    ok(names == ["approve", "end", "publish", "start", "write"], "the graph draws every vertex, start and end",
       json.dumps(names))
    cur = c.eval("Array.from(document.querySelectorAll('.flow-graph g.current')).map((g) => g.dataset.vertex)")
    ok(cur == ["approve"], "the interrupted vertex is the current one", json.dumps(cur))
    dashed = c.eval("document.querySelectorAll('.flow-graph .conditional').length")
    back = c.eval("document.querySelectorAll('.flow-graph path.back').length")
    ok(dashed == 2 and back == 1, "the router's edges are dashed, the one back to write a curve",
       "%s %s" % (dashed, back))
    what = c.eval("document.querySelector('.gate.question .what').textContent")
    ok("interrupt at approve" in what and "notes for 1.0" in what, "the interrupt and its value are shown", what)
    c.type(".gate.question input.answer", '"yes"')
    c.click(".gate.question button.approve")
    c.wait("document.getElementById('view-state').textContent === 'done'", "the run done", timeout=15)
    ok(True, "the answer given in the page finishes the run")
    badge = c.eval("document.querySelector('#flows li[data-id=\"%s\"] .badge').textContent" % run_id)
    ok(badge == "done", "the sidebar follows the open run", str(badge))
    cur = c.eval("document.querySelectorAll('.flow-graph g.current').length")
    ok(cur == 0, "a finished run has no current vertex", str(cur))
    out = c.eval("document.querySelector('.turn-end').textContent")
    ok('published: yes' in out, "the output is shown", out)
    _, _, b = http(base + "/v1/flows/review/runs/" + run_id + "/status", TOKEN)
    st = json.loads(b)
    ok(st["status"] == "done" and st["output"]["verdict"] == "yes", "the server agrees", json.dumps(st)[:300])
    os.makedirs(ARTIFACTS, exist_ok=True)
    c.screenshot(os.path.join(ARTIFACTS, "console-flow.png"))


def start(suite):
    base, _ = suite.serve("tests/console/flow_rig.lua", env={"FLOW_STORE": os.path.join(suite.tmp, "state")})
    return base


if __name__ == "__main__":
    sys.exit(S.run(start, lambda suite, c, base: run(c, base)))
