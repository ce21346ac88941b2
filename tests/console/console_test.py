#!/usr/bin/env python3
"""The web console in a real browser: headless Chromium driven over the
DevTools protocol by the driver in harness.py, which every console suite
shares.

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
import json
import os
import re
import socket
import sys
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the tree
from harness import ARTIFACTS, TOKEN, Step, Suite, http, sign_in  # noqa: E402

S = Suite("console", failure_png="console-failure.png")
ok = S.ok


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

    sign_in(c, base, "document.getElementById('auth').hidden && "
            "document.getElementById('conn').textContent === 'connected'")
    ok(True, "the page asks for the token; with it the page reads the session list")

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


def run_resume(c, server, base):
    """A crash with a gate open; another server on the same store; Restore, Approve, Resume."""
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
    S.crash(server)
    base2, _ = S.serve(RIG, "serve2", env=store("state"))
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


def attack(c):
    base, server = S.serve(RIG, "serve-open", token=False, env=store("state-open"))
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
                  re.findall(r'luarig_http_refusals_total\{code="(\w+)"\} (\d+)', metrics)}
        ok(counts.get("origin_not_allowed", 0) >= 1 and counts.get("host_not_allowed", 0) >= 3,
           "the refusals are counted in /metrics", repr(counts))
    finally:
        if relay:
            relay.close()
        S.stop(server)


RIG = "tests/console/rig.lua"


def store(name):
    return {"CONSOLE_STORE": os.path.join(S.tmp, name)}


def start(suite):
    for old in ("console.png", "console-final.png", "console-failure.png"):
        try:
            os.remove(os.path.join(ARTIFACTS, old))
        except FileNotFoundError:
            pass
    base, start.server = suite.serve(RIG, env=store("state"))
    return base


def body(suite, c, base):
    run(c, base)
    run_resume(c, start.server, base)
    attack(c)


if __name__ == "__main__":
    sys.exit(S.run(start, body))
