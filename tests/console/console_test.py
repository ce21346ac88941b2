#!/usr/bin/env python3
"""The web console in a real browser: headless Chromium driven over the
DevTools protocol on --remote-debugging-pipe (fds 3 and 4, NUL-terminated
JSON; nothing downloaded, no websocket library).

Starts `luarig serve tests/console/rig.lua` with a bearer token, opens the
console, gives it the token, starts a session with its first input and
watches the text stream in, approves a gate with a mouse click, sees the tool result
and the turn end, cuts the event stream and checks the page resumes with
Last-Event-ID and shows nothing twice, reloads the page (the view replays
the journal), interrupts a turn; then kills the server (SIGKILL) with a gate
open, starts another on the same store, restores the session, approves the
restored gate and clicks Resume: the approved call runs. Keeps screenshots in build/artifacts/:
console.png (the gate card open), console-final.png (after the reload).

Then a page of another origin attacks a second server (no token, as `luarig
serve` runs by default): served from 127.0.0.2 it sends a no-cors POST that
would create a session with its prompt; served as attacker.example (which
the browser resolves to 127.0.0.2, where a relay passes everything but the
page itself on to luarig, byte for byte: what DNS rebinding does) it reads
the sessions and journals as same-origin and answers an open gate. Both
must fail at the server.
Prints TAP lines "ok - console: …" / "not ok - console: …".
"""
import base64
import fcntl
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

ROOT = os.environ.get("LUARIG_ROOT") or os.getcwd()
BUILD = os.environ.get("BUILD", "build")
LUARIG = os.environ.get("LUARIG") or os.path.join(ROOT, BUILD, "luarig")
ARTIFACTS = os.path.join(ROOT, "build", "artifacts")
TOKEN = "console-test-token-0123456789"

failed = 0


def ok(cond, name, detail=""):
    global failed
    if cond:
        print("ok - console: " + name, flush=True)
    else:
        failed += 1
        print("not ok - console: " + name + (": " + detail if detail else ""), flush=True)
    return cond


class Step(Exception):
    pass


class Chrome:
    """A headless Chromium and one page, spoken to over the pipe."""

    def __init__(self, exe, tmp):
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()

        def fds():
            a = fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        args = [exe, "--headless=new", "--remote-debugging-pipe",
                "--user-data-dir=" + os.path.join(tmp, "profile"),
                "--no-first-run", "--no-default-browser-check", "--disable-gpu",
                "--disable-extensions", "--disable-background-networking", "--disable-sync",
                "--disable-component-update", "--disable-default-apps", "--mute-audio",
                "--disable-dev-shm-usage",
                # the attack page's name: a relay on 127.0.0.2 (see Relay)
                "--host-resolver-rules=MAP attacker.example 127.0.0.2",
                "--hide-scrollbars", "--window-size=1280,820", "about:blank"]
        if os.geteuid() == 0:
            args.insert(1, "--no-sandbox")
        self.log = open(os.path.join(tmp, "chromium.log"), "wb")
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=self.log, preexec_fn=fds, close_fds=False)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.next_id = 0
        self.replies = {}
        self.cv = threading.Condition()
        self.events = queue.Queue()
        self.requests = []  # Network.requestWillBeSent params, in order
        self.errors = []    # exceptions, console errors, CSP violations
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.session = None

    def _read(self):
        buf = b""
        while True:
            try:
                chunk = os.read(self.from_chrome, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                with self.cv:
                    self.replies["eof"] = True
                    self.cv.notify_all()
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                if "id" in msg:
                    with self.cv:
                        self.replies[msg["id"]] = msg
                        self.cv.notify_all()
                else:
                    m, p = msg.get("method"), msg.get("params", {})
                    if m == "Network.requestWillBeSent":
                        self.requests.append(p)
                    elif m == "Runtime.exceptionThrown":
                        self.errors.append(json.dumps(p.get("exceptionDetails"))[:300])
                    elif m == "Runtime.consoleAPICalled" and p.get("type") == "error":
                        self.errors.append(json.dumps(p.get("args"))[:300])
                    elif m == "Log.entryAdded" and p["entry"].get("source") in ("security",
                                                                                "javascript"):
                        self.errors.append(p["entry"].get("text", "")[:300])
                    self.events.put(msg)

    def call(self, method, params=None, session=True, timeout=15):
        self.next_id += 1
        mid = self.next_id
        msg = {"id": mid, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self.to_chrome, json.dumps(msg).encode() + b"\0")
        deadline = time.time() + timeout
        with self.cv:
            while mid not in self.replies:
                if self.replies.get("eof"):
                    raise Step("chromium closed the pipe (see chromium.log)")
                left = deadline - time.time()
                if left <= 0:
                    raise Step("no answer to " + method)
                self.cv.wait(left)
            reply = self.replies.pop(mid)
        if "error" in reply:
            raise Step(method + ": " + json.dumps(reply["error"]))
        return reply.get("result", {})

    def open_page(self):
        target = self.call("Target.createTarget", {"url": "about:blank"}, session=False)
        att = self.call("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True},
                        session=False)
        self.session = att["sessionId"]
        for domain in ("Page", "Runtime", "Network", "Log"):
            self.call(domain + ".enable")
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": 1280, "height": 820, "deviceScaleFactor": 1, "mobile": False})

    def eval(self, expr):
        r = self.call("Runtime.evaluate", {"expression": expr, "returnByValue": True,
                                           "awaitPromise": True})
        if "exceptionDetails" in r:
            raise Step("page error in `" + expr[:80] + "`: " +
                       json.dumps(r["exceptionDetails"].get("exception", {}).get("description")
                                  or r["exceptionDetails"].get("text")))
        return r["result"].get("value")

    def wait(self, expr, what, timeout=10):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.eval("!!(" + expr + ")"):
                return True
            time.sleep(0.05)
        raise Step("timed out waiting for " + what)

    def click(self, selector):
        """A real mouse click at the centre of the element."""
        pos = self.eval("(() => { const e = document.querySelector(%s); if (!e) return null;"
                        " e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
                        " return [r.x + r.width / 2, r.y + r.height / 2]; })()" % json.dumps(selector))
        if not pos:
            raise Step("nothing to click at " + selector)
        x, y = pos
        self.call("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})
        for t in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", {"type": t, "x": x, "y": y, "button": "left",
                                                   "clickCount": 1})

    def type(self, selector, text):
        self.click(selector)
        self.call("Input.insertText", {"text": text})

    def screenshot(self, path):
        data = self.call("Page.captureScreenshot", {"format": "png"})["data"]
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self):
        try:
            self.call("Browser.close", session=False, timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self.to_chrome, self.from_chrome):
            try:
                os.close(fd)
            except OSError:
                pass
        self.log.close()


def start_server(tmp, name="serve", token=True, store="state"):
    args = [LUARIG, "serve", os.path.join(ROOT, "tests/console/rig.lua"), "--listen", "127.0.0.1:0"]
    if token:
        token_file = os.path.join(tmp, "token")
        with open(token_file, "w") as f:
            f.write(TOKEN + "\n")
        args += ["--auth-token-file", token_file]
    log_path = os.path.join(tmp, name + ".log")
    log = open(log_path, "wb")
    env = dict(os.environ, CONSOLE_STORE=os.path.join(tmp, store))
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=ROOT, env=env)
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
        raise Step("luarig serve did not start: " + f.read()[-500:])


def http(url, token=None, method="GET", body=None):
    req = urllib.request.Request(url, method=method, data=body)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    if method == "POST":
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


TEXT_COUNT = """(() => { const t = document.getElementById('log').innerText;
  return %s.map((s) => t.split(s).length - 1); })()"""


def counts(c, texts):
    return c.eval(TEXT_COUNT % json.dumps(texts))


def run(c, base):
    # the page loads without the token (it holds no data); the API does not
    status, headers, body = http(base + "/")
    csp = headers.get("content-security-policy", headers.get("Content-Security-Policy", ""))
    ok(status == 200 and b"/console.js" in body and "default-src 'none'" in csp,
       "GET / serves the page without the token, with a strict CSP", "%d %s" % (status, csp))
    status, _, _ = http(base + "/v1/sessions")
    ok(status == 401, "the API still wants the token", str(status))

    c.open_page()
    c.call("Page.navigate", {"url": base + "/"})
    c.wait("document.readyState === 'complete' && !document.getElementById('auth').hidden",
           "the token form")
    ok(True, "the page asks for the token")
    c.type("#token", TOKEN)
    c.click("#token-save")
    c.wait("document.getElementById('auth').hidden && "
           "document.getElementById('conn').textContent === 'connected'", "the session list")
    ok(True, "with the token the page reads the session list")

    # New session clears the view; the first input creates the session
    # (tests/console/edges_test.py checks that the click alone creates none)
    c.click("#new-session")
    c.wait("document.getElementById('view-title').textContent === 'new session'", "the empty view")
    full = "Streaming, two bytes at a time, from the scripted model."
    c.type("#input", "stream")
    c.click("#send")
    c.wait("window.luarigConsole.view && window.luarigConsole.view.conn === 'live'",
           "a new session's stream")
    sid = c.eval("window.luarigConsole.view.id")
    c.wait("document.querySelector('#sessions li.current') !== null", "the session in the list")
    ok(True, "New session and a first input create a session, list it and open its stream")

    # streamed text: the page shows it growing before the step ends
    seen = set()
    deadline = time.time() + 10
    while time.time() < deadline:
        n = c.eval("(() => { const e = document.querySelector('.text.streaming');"
                   " return e ? e.textContent.length : -1; })()")
        if n > 0:
            seen.add(n)
        if c.eval("document.querySelectorAll('.turn-end').length") >= 1:
            break
        time.sleep(0.02)
    partial = [n for n in seen if 0 < n < len(full)]
    ok(len(partial) >= 3, "text appears as it streams (%d partial lengths seen)" % len(partial),
       repr(sorted(seen)))
    c.wait("document.querySelectorAll('.turn-end').length === 1", "the first turn's end")
    ok(counts(c, [full]) == [1], "the streamed text is shown once when the step ends",
       repr(counts(c, [full])))
    end1 = c.eval("document.querySelector('.turn-end').textContent")
    ok("120 in / 14 out tokens" in end1 and "$0.0013" in end1, "the turn's end shows usage and cost",
       end1)

    # a gated tool call: thinking, the call, the gate card; approve with a click
    c.type("#input", "gate me")
    c.click("#send")
    c.wait("document.querySelector('.gate .actions button.approve')", "the gate card")
    names = c.eval("[...document.querySelectorAll('.gate button')].map((b) => b.textContent)")
    ok(names == ["Approve", "Approve always", "Deny"], "the gate card offers approve, approve "
       "always, deny", repr(names))
    card = c.eval("document.querySelector('.gate').innerText")
    ok("fetch_page" in card and "GET https://example.org/" in card and "example.org:443" in card,
       "the gate card names the tool, the summary and the unmet requirement", card)
    ok(c.eval("(() => { const t = document.querySelector('.thinking'); return t &&"
              " t.textContent.includes('needs the network') &&"
              " getComputedStyle(t).fontStyle === 'italic'; })()"),
       "thinking streams in, dimmed")
    tool = c.eval("(() => { const t = document.querySelector('.tool'); return t && t.innerText; })()")
    ok(tool and "fetch_page" in tool and "example.org" in tool,
       "the tool call shows its name and arguments", repr(tool))
    c.screenshot(os.path.join(ARTIFACTS, "console.png"))
    c.click(".gate .actions button.approve")
    c.wait("document.querySelector('.gate.resolved .outcome')", "the gate resolved")
    outcome = c.eval("document.querySelector('.gate.resolved .outcome').textContent")
    ok(outcome == "approved", "a click on Approve answers the gate", outcome)
    c.wait("document.querySelectorAll('.turn-end').length === 2", "the second turn's end")
    result = c.eval("document.querySelector('.tool .result').textContent")
    ok(result == "Example Domain (1256 bytes)", "the tool result is shown", repr(result))
    answer = "The page says: Example Domain (1256 bytes)."
    ok(counts(c, [answer]) == [1], "the answer after the tool is shown once")

    # cut the stream: the page reconnects with Last-Event-ID, nothing twice
    view = "window.luarigConsole.view"
    last = c.eval(view + ".lastSeq")
    before = len([r for r in c.requests if "/events" in r["request"]["url"]])
    c.eval("window.luarigConsole.dropStream()")
    c.wait(view + ".connects === 2 && " + view + ".conn === 'live'", "the stream to come back")
    evs = [r for r in c.requests if "/events" in r["request"]["url"]]
    again = evs[before] if len(evs) > before else None
    hdrs = {k.lower(): v for k, v in (again["request"]["headers"] if again else {}).items()}
    ok(again is not None and hdrs.get("last-event-id") == str(last) and "from=" not in
       again["request"]["url"], "after a dropped stream the page resumes with Last-Event-ID: %s"
       % last, repr(again and again["request"]))
    ok(hdrs.get("authorization") == "Bearer " + TOKEN and
       {k.lower(): v for k, v in evs[0]["request"]["headers"].items()}.get("last-event-id") is None
       and "from=0" in evs[0]["request"]["url"],
       "the stream sends the token; the first one replays from=0")
    c.type("#input", "hello again")
    c.click("#send")
    c.wait("document.querySelectorAll('.turn-end').length === 3", "the third turn's end")
    texts = [full, answer, "you said: hello again", "The user wants the page"]
    ok(counts(c, texts) == [1, 1, 1, 1], "after the resume every text is shown once",
       repr(counts(c, texts)))

    # a reload replays the journal (?from=0) into the same view
    c.call("Page.reload")
    c.wait("document.readyState === 'complete' && window.luarigConsole && "
           + view + " && " + view + ".id === %s && document.querySelectorAll('.turn-end').length"
           " === 3" % json.dumps(sid), "the view after a reload")
    ok(counts(c, texts) == [1, 1, 1, 1], "a reload restores the session view from the journal, "
       "each text once", repr(counts(c, texts)))
    ok(c.eval("document.querySelector('.gate.resolved .outcome').textContent") == "approved" and
       c.eval("document.querySelector('.tool .result').textContent") == "Example Domain (1256 bytes)",
       "the replayed view has the answered gate and the tool result")
    c.wait("document.querySelector('#sessions li.current .cost') && document.querySelector("
           "'#sessions li.current .cost').textContent !== '$0.0000'", "the session's cost")
    cost = c.eval("document.querySelector('#sessions li.current').innerText")
    ok("$0.0051" in cost and "idle" in cost, "the session list shows state and cost", repr(cost))
    c.screenshot(os.path.join(ARTIFACTS, "console-final.png"))

    # interrupt a slow turn
    c.type("#input", "stream")
    c.click("#send")
    c.wait("document.querySelector('.text.streaming') && !document.getElementById('interrupt').disabled",
           "the slow turn to start")
    c.click("#interrupt")
    c.wait("[...document.querySelectorAll('.note')].some((n) => n.textContent === 'turn interrupted')",
           "the interrupted turn")
    ok(True, "the Interrupt button ends a running turn")

    outside = [r["request"]["url"] for r in c.requests
               if not r["request"]["url"].startswith(base + "/")
               and not r["request"]["url"].startswith("data:")]
    ok(not outside, "the page made no request outside the server", repr(outside))
    ok(not c.errors, "no script error, console error or CSP violation", repr(c.errors))


def run_resume(c, tmp, server, base):
    """A crash with a gate open; another server; Restore, Approve, Resume. Returns the new
    server and its log."""
    status, _, body = http(base + "/v1/sessions", TOKEN, method="POST", body=b'{"text":"gate me"}')
    ok(status == 201, "a session for the crash", "%d %r" % (status, body))
    sid = json.loads(body)["session_id"]
    deadline = time.time() + 10
    while time.time() < deadline:
        _, _, body = http(base + "/v1/sessions/" + sid + "/journal?limit=1000", TOKEN)
        if any(e["event"]["type"] == "GateOpened" for e in json.loads(body)["events"]):
            break
        time.sleep(0.05)
    else:
        raise Step("the gate did not open before the crash")
    server.kill()
    server.wait()
    server, base2, log_path = start_server(tmp, "serve2")
    c.call("Page.navigate", {"url": base2 + "/#" + sid})
    c.wait("document.readyState === 'complete' && !document.getElementById('auth').hidden",
           "the token form of the second server")
    c.type("#token", TOKEN)
    c.click("#token-save")
    c.wait("!document.getElementById('restore').hidden", "the Restore button")
    ok(c.eval("document.getElementById('resume').hidden"),
       "a session that is not live shows Restore, not Resume")
    c.click("#restore")
    c.wait("window.luarigConsole.view && window.luarigConsole.view.conn === 'live' && "
           "!document.getElementById('resume').hidden", "the Resume button after the restore")
    ok(True, "after a crash, Restore brings the session back and offers Resume")
    c.wait("document.querySelector('.gate:not(.resolved) .actions button.approve')",
           "the restored gate card")
    c.click(".gate:not(.resolved) .actions button.approve")
    c.wait("document.querySelector('.gate.resolved .outcome')", "the restored gate answered")
    answer = "The page says: Example Domain (1256 bytes)."
    _, _, body = http(base2 + "/v1/sessions/" + sid + "/status", TOKEN)
    st = json.loads(body)
    ok(st.get("resumable") == ["assistant"] and counts(c, [answer]) == [0] and
       not c.eval("document.getElementById('resume').hidden"),
       "approving the restored gate alone runs nothing; Resume is still offered", repr(st))
    c.click("#resume")
    c.wait("document.querySelectorAll('.turn-end').length === 1", "the resumed turn's end")
    ok(counts(c, [answer, "turn resumed"]) == [1, 1],
       "Resume runs the approved call and the turn ends with its answer, once",
       repr(counts(c, [answer, "turn resumed"])))
    ok(c.eval("document.getElementById('resume').hidden"), "once resumed, Resume is gone")
    ok(not c.errors, "no script error, console error or CSP violation after the crash",
       repr(c.errors))
    return server, log_path


ATTACK_PAGE = """<!doctype html><meta charset="utf-8"><title>not luarig</title>
<script>
window.attack = { done: false };
(async () => {
  const r = window.attack;
  const mode = new URLSearchParams(location.search).get('mode');
  try {
    if (mode === 'post') {
      // a simple cross-origin request: no preflight; the answer is opaque but the request goes
      await fetch(%(victim)s + '/v1/sessions', { method: 'POST', mode: 'no-cors',
        body: JSON.stringify({ text: %(prompt)s }) });
      r.post = 'sent';
    } else {
      // after rebinding this origin reaches the server: read it as same-origin
      const list = await fetch('/v1/sessions');
      r.list_status = list.status;
      r.journal = '';
      r.gate_status = [];
      if (list.ok) {
        for (const s of (await list.json()).sessions) {
          const j = await fetch('/v1/sessions/' + s.id + '/journal?limit=1000');
          if (j.ok) r.journal += await j.text();
          const st = await fetch('/v1/sessions/' + s.id + '/status');
          for (const g of (st.ok ? (await st.json()).open_gates : [])) {
            const a = await fetch('/v1/sessions/' + s.id + '/gates/' + g.gate_id, { method: 'POST',
              headers: { 'Content-Type': 'application/json' },
              body: JSON.stringify({ action: 'approve_always' }) });
            r.gate_status.push(a.status);
          }
        }
      }
      // the stream too
      const ev = await fetch('/v1/sessions/' + %(sid)s + '/events?from=0');
      r.events_status = ev.status;
      if (ev.ok) ev.body.cancel();
    }
  } catch (e) {
    r.error = String(e);
  }
  r.done = true;
})();
</script>
"""


class Relay:
    """Listens on 127.0.0.2 at the victim's port number: serves the attack
    page on /attack.html and passes every other connection on to luarig on
    127.0.0.1, unchanged (Host: attacker.example:PORT included), as a
    rebound DNS name would."""

    def __init__(self, port, page):
        self.port, self.page = port, page.encode()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.2", port))
        self.sock.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    @staticmethod
    def _pump(a, b):
        try:
            while True:
                d = a.recv(65536)
                if not d:
                    break
                b.sendall(d)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _serve(self, conn):
        head = b""
        while b"\r\n\r\n" not in head:
            d = conn.recv(65536)
            if not d:
                conn.close()
                return
            head += d
        if head.split(b" ", 2)[1].startswith(b"/attack.html"):
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nCache-Control: no-store\r\n"
                         b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(self.page) + self.page)
            conn.close()
            return
        up = socket.create_connection(("127.0.0.1", self.port))
        up.sendall(head)
        threading.Thread(target=self._pump, args=(up, conn), daemon=True).start()
        self._pump(conn, up)

    def close(self):
        self.sock.close()


def attack(c, tmp):
    server, base, log_path = start_server(tmp, name="serve-open", token=False, store="state-open")
    relay = None
    try:
        port = int(base.rsplit(":", 1)[1])
        prompt = "the page's prompt: rm -rf ~"
        # a session waiting at a gate, as a user would leave it
        status, _, body = http(base + "/v1/sessions", method="POST",
                               body=json.dumps({"text": "gate me"}).encode())
        if status != 201:
            raise Step("cannot create the victim session: %d %s" % (status, body[:200]))
        sid = json.loads(body)["session_id"]
        deadline = time.time() + 10
        while time.time() < deadline:
            st = json.loads(http(base + "/v1/sessions/" + sid + "/status")[2])
            if st.get("open_gates"):
                break
            time.sleep(0.05)
        else:
            raise Step("the victim session's gate did not open")
        gid = st["open_gates"][0]["gate_id"]
        relay = Relay(port, ATTACK_PAGE % {"victim": json.dumps(base), "prompt": json.dumps(prompt),
                                           "sid": json.dumps(sid)})

        c.open_page()
        for origin, mode in (("http://127.0.0.2:%d" % port, "post"),
                             ("http://attacker.example:%d" % port, "rebind")):
            c.call("Page.navigate", {"url": origin + "/attack.html?mode=" + mode})
            c.wait("window.attack && window.attack.done", "the attack page (%s)" % mode, timeout=15)
            result = c.eval("window.attack")
            if mode == "post":
                # the request went (the page cannot tell how it ended); the server must have refused it
                listed = json.loads(http(base + "/v1/sessions")[2])["sessions"]
                made = [s for s in listed if s.get("title") == prompt or s["id"] != sid]
                ok(result.get("post") == "sent" and not made,
                   "a no-cors POST from another origin (127.0.0.2) creates no session",
                   repr((result, made)))
            else:
                ok(result.get("list_status") == 403 and "gate me" not in result.get("journal", "x")
                   and result.get("events_status") == 403,
                   "a rebound name (Host: attacker.example) reads no session, journal or stream",
                   repr(result)[:600])
                st = json.loads(http(base + "/v1/sessions/" + sid + "/status")[2])
                ok(not result.get("gate_status") and [g["gate_id"] for g in st["open_gates"]] == [gid],
                   "a rebound name answers no gate: it is still open", repr((result, st))[:600])
        metrics = http(base + "/metrics")[2].decode()
        counts = {code: int(n) for code, n in
                  __import__("re").findall(r'luarig_http_refusals_total\{code="(\w+)"\} (\d+)', metrics)}
        ok(counts.get("origin_not_allowed", 0) >= 1 and counts.get("host_not_allowed", 0) >= 3,
           "the refusals are counted in /metrics", repr(counts))
    finally:
        if relay:
            relay.close()
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def main():
    exe = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        print("not ok - console: chromium not found (tools/deps.sh installs Debian's chromium)")
        return 1
    if not os.access(LUARIG, os.X_OK):
        print("not ok - console: no luarig at " + LUARIG)
        return 1
    for old in ("console.png", "console-final.png", "console-failure.png"):
        try:
            os.remove(os.path.join(ARTIFACTS, old))
        except FileNotFoundError:
            pass
    tmp = tempfile.mkdtemp(prefix="luarig-console-")
    server = chrome = None
    try:
        server, base, log_path = start_server(tmp)
        chrome = Chrome(exe, tmp)
        try:
            run(chrome, base)
            server, log_path = run_resume(chrome, tmp, server, base)
            attack(chrome, tmp)
        except Step as e:
            ok(False, "the console flow stopped", str(e))
            try:
                chrome.screenshot(os.path.join(ARTIFACTS, "console-failure.png"))
            except Exception:
                pass
            with open(log_path) as f:
                sys.stderr.write(f.read()[-2000:])
    except Step as e:
        ok(False, "setting up", str(e))
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
            clean = rc == 143
            if not clean:
                with open(log_path, errors="replace") as f:
                    sys.stderr.write(f.read()[-3000:])
            ok(clean, "luarig serve shuts down cleanly on SIGTERM (exit 143)", "exit %s" % rc)
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
