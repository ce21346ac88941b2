#!/usr/bin/env python3
"""The web console's flow runs in headless Chromium, with the browser helpers
of console_test.py: `luarig serve` on a script that returns a rig and a flow;
a run started over HTTP appears under "Flow runs"; clicking it draws its
graph as SVG with the interrupted vertex marked current; the interrupt is
answered in the page; the graph then has no current vertex and the run is
done, its output shown. Screenshot build/artifacts/console-flow.png.

Prints TAP lines "ok - console flow: …" / "not ok - console flow: …".
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import console_test as ct  # noqa: E402  (the Chrome driver, http, TOKEN)

failed = 0


def ok(cond, name, detail=""):
    global failed
    if cond:
        print("ok - console flow: " + name, flush=True)
    else:
        failed += 1
        print("not ok - console flow: " + name + (": " + detail if detail else ""), flush=True)
    return cond


def start_server(tmp):
    token_file = os.path.join(tmp, "token")
    with open(token_file, "w") as f:
        f.write(ct.TOKEN + "\n")
    log_path = os.path.join(tmp, "serve.log")
    log = open(log_path, "wb")
    env = dict(os.environ, FLOW_STORE=os.path.join(tmp, "state"))
    args = [ct.LUARIG, "serve", os.path.join(ct.ROOT, "tests/console/flow_rig.lua"), "--listen",
            "127.0.0.1:0", "--auth-token-file", token_file]
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=ct.ROOT, env=env)
    deadline = time.time() + 10
    while time.time() < deadline:
        with open(log_path) as f:
            for line in f:
                if line.startswith("luarig: serving on "):
                    return proc, line.split()[3], log_path
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    with open(log_path) as f:
        raise ct.Step("luarig serve did not start: " + f.read()[-500:])


def run(c, base):
    status, _, body = ct.http(base + "/v1/flows/review/runs", ct.TOKEN, "POST",
                              json.dumps({"input": {"draft": "1.0"}}).encode())
    ok(status == 201, "a run starts over HTTP", "%d %s" % (status, body[:200]))
    run_id = json.loads(body)["run_id"]
    deadline = time.time() + 10
    while time.time() < deadline:
        _, _, b = ct.http(base + "/v1/flows/review/runs/" + run_id + "/status", ct.TOKEN)
        if json.loads(b)["status"] == "interrupted":
            break
        time.sleep(0.05)
    c.open_page()
    c.call("Page.navigate", {"url": base + "/"})
    c.wait("document.readyState === 'complete' && !document.getElementById('auth').hidden", "the token form")
    c.type("#token", ct.TOKEN)
    c.click("#token-save")
    c.wait("!document.getElementById('flows').hidden && "
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
    _, _, b = ct.http(base + "/v1/flows/review/runs/" + run_id + "/status", ct.TOKEN)
    st = json.loads(b)
    ok(st["status"] == "done" and st["output"]["verdict"] == "yes", "the server agrees", json.dumps(st)[:300])
    os.makedirs(ct.ARTIFACTS, exist_ok=True)
    c.screenshot(os.path.join(ct.ARTIFACTS, "console-flow.png"))


def main():
    exe = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        print("not ok - console flow: chromium not found (tools/deps.sh installs Debian's chromium)")
        return 1
    tmp = tempfile.mkdtemp(prefix="luarig-console-flow-")
    server = chrome = None
    log_path = None
    try:
        server, base, log_path = start_server(tmp)
        chrome = ct.Chrome(exe, tmp)
        run(chrome, base)
    except ct.Step as e:
        ok(False, "the flow console test stopped", str(e))
        if log_path:
            with open(log_path) as f:
                sys.stderr.write(f.read()[-2000:])
    finally:
        if chrome:
            chrome.close()
        if server:
            server.send_signal(signal.SIGTERM)
            try:
                rc = server.wait(15)
            except subprocess.TimeoutExpired:
                server.kill()
                rc = server.wait()
            ok(rc == 143, "luarig serve shuts down cleanly on SIGTERM (exit 143)", "exit %s" % rc)
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
