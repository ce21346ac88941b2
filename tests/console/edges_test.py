#!/usr/bin/env python3
"""The web console's first-hour edges in headless Chromium (issue 19 §6),
with the browser and server helpers of harness.py:

- "New session" creates nothing: the first input starts the session;
- a new session is titled by its first input (header and sidebar), not its id;
- the sidebar's state follows the open session (waiting_on_gate with the
  header, idle again after the turn), not the last three-second poll;
- a gated tool call is drawn call, gate, result — live and on a replay;
- at 420 px wide the page fits: no sideways scrolling, the list above the
  view, a gate answered with a real click; screenshot
  build/artifacts/console-420.png.

Prints TAP lines "ok - console edges: …" / "not ok - console edges: …".
"""
import json
import os
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the tree
from harness import ARTIFACTS, Step, Suite, api, sign_in  # noqa: E402

S = Suite("console edges", failure_png="console-edges-failure.png")
ok = S.ok


def api_sessions(base):
    return api(base, "GET", "/v1/sessions?limit=200")[1]["sessions"]


def ct_uuid(text):
    return re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", text or "") is not None


def posts_to_sessions(c, base):
    return [r for r in c.requests if r["request"]["method"] == "POST" and
            r["request"]["url"] == base + "/v1/sessions"]


# the gate card and the tool result, in document order: "gate<result" or "result<gate"
ORDER = """(() => { const g = document.querySelector('.gate');
  const r = [...document.querySelectorAll('.tool .result')].find((x) => x.textContent.includes('Example Domain'));
  if (!g || !r) return 'missing';
  return (g.compareDocumentPosition(r) & Node.DOCUMENT_POSITION_FOLLOWING) ? 'gate<result' : 'result<gate'; })()"""

BADGES = """(() => { const li = document.querySelector('#sessions li.current');
  const b = li && li.querySelector('.badge');
  return [document.getElementById('view-state').textContent, b ? b.textContent : null]; })()"""


def run(c, base):
    sign_in(c, base)

    # every text the header shows, from here on
    c.eval("""(() => { const t = document.getElementById('view-title'); window.titles = [];
      new MutationObserver(() => window.titles.push(t.textContent))
        .observe(t, { childList: true, characterData: true, subtree: true }); })()""")

    # New session creates nothing
    c.click("#new-session")
    try:
        c.wait("document.getElementById('view-title').textContent === 'new session'", "the empty view", 3)
    except Step:
        pass  # (reported just below)
    ok(not posts_to_sessions(c, base) and api_sessions(base) == [],
       "a click on New session creates no session", repr(api_sessions(base)))
    ok("first message" in c.eval("document.getElementById('log').innerText"),
       "the empty view says the first message starts the session")

    # the first input starts it, titled by that input
    c.type("#input", "gate me")
    c.click("#send")
    c.wait("window.luarigConsole.view && document.querySelector('.user')", "the new session's first turn")
    head = c.eval("document.getElementById('view-title').textContent")
    # the sidebar is redrawn from the session list, fetched after the session
    # exists: wait for its row (a wrong title still fails below)
    side_js = ("(() => { const t = document.querySelector('#sessions li.current .title');"
               " return t && t.textContent; })()")
    try:
        c.wait(side_js + " !== null", "the sidebar's row of the new session", 10)
    except Step:
        pass  # (reported just below)
    side = c.eval(side_js)
    titles = c.eval("window.titles")
    ok(head == "gate me" and not [t for t in titles if ct_uuid(t)],
       "the header names the new session by its first input, never its id", repr(titles))
    ok(side == "gate me", "so does the sidebar", repr(side))
    posts = posts_to_sessions(c, base)
    inputs = [r for r in c.requests if r["request"]["method"] == "POST" and r["request"]["url"].endswith("/input")]
    ok(len(posts) == 1 and len(inputs) == 1 and
       json.loads(inputs[0]["request"].get("postData") or "{}").get("text") == "gate me",
       "Send made the session (one POST /v1/sessions) and gave it the first input",
       repr([p["request"].get("postData") for p in posts + inputs]))
    ok(len(api_sessions(base)) == 1, "one session in the store")

    # the sidebar's state follows the open session
    c.wait("document.querySelector('.gate .actions button.approve')", "the gate card")
    badges = c.eval(BADGES)
    ok(badges == ["waiting_on_gate", "waiting_on_gate"],
       "when a gate opens the sidebar says waiting_on_gate with the header", repr(badges))
    ok(c.eval(ORDER) in ("missing", "gate<result"), "while the gate waits no result is drawn above it")
    c.click(".gate .actions button.approve")
    c.wait("document.querySelectorAll('.turn-end').length === 1", "the turn's end")
    c.wait("document.getElementById('view-state').textContent === 'idle'", "the idle header")
    badges = c.eval(BADGES)
    ok(badges == ["idle", "idle"], "after the turn the sidebar says idle with the header", repr(badges))
    ok(c.eval(ORDER) == "gate<result", "live: the tool's result is drawn below the gate that allowed it",
       c.eval(ORDER))

    # a replay (reload) draws call, gate, result in the same order
    c.call("Page.reload")
    c.wait("document.readyState === 'complete' && window.luarigConsole && window.luarigConsole.view &&"
           " document.querySelectorAll('.turn-end').length === 1", "the replayed view")
    ok(c.eval(ORDER) == "gate<result", "replay: the tool's result is drawn below the gate that allowed it",
       c.eval(ORDER))
    inside = c.eval("(() => { const g = document.querySelector('.gate'); return !!(g && g.closest('.tool')); })()")
    ok(inside, "the gate is drawn in the card of the call it gates")
    ok(c.eval("document.getElementById('view-title').textContent") == "gate me",
       "after a reload the header keeps the title")

    # 420 px wide
    c.call("Emulation.setDeviceMetricsOverride",
           {"width": 420, "height": 820, "deviceScaleFactor": 1, "mobile": False})
    c.type("#input", "gate me")
    c.click("#send")
    c.wait("document.querySelector('.gate .actions button.approve')", "a gate at 420 px")
    fit = c.eval("""(() => {
      const W = window.innerWidth, d = document.documentElement;
      const r = (s) => document.querySelector(s).getBoundingClientRect();
      const inside = (s) => { const b = r(s); return b.left >= 0 && b.right <= W && b.width > 0; };
      const log = r('#log'), aside = r('aside'), view = r('#view');
      return { W, scroll: d.scrollWidth, log: Math.round(log.width),
               listAbove: aside.bottom <= view.top + 1,
               buttons: [...document.querySelectorAll('.gate:not(.resolved) .actions button')].every((b) => {
                 const x = b.getBoundingClientRect(); return x.left >= log.left && x.right <= log.right; }),
               input: inside('#input'), send: inside('#send'), interrupt: inside('#interrupt'),
               newSession: inside('#new-session'),
               logScroll: document.getElementById('log').scrollWidth <= document.getElementById('log').clientWidth };
    })()""")
    ok(fit["W"] == 420 and fit["scroll"] <= 420, "at 420 px nothing scrolls sideways", repr(fit))
    ok(fit["listAbove"] and fit["log"] >= 380, "the session list sits above a full-width view", repr(fit))
    ok(fit["buttons"] and fit["logScroll"], "the gate card and its buttons fit the view", repr(fit))
    ok(fit["input"] and fit["send"] and fit["interrupt"] and fit["newSession"],
       "the composer, Send, Interrupt and New session are on screen", repr(fit))
    c.screenshot(os.path.join(ARTIFACTS, "console-420.png"))
    c.click(".gate:not(.resolved) .actions button.approve")
    c.wait("document.querySelectorAll('.turn-end').length === 2", "the second turn's end at 420 px")
    ok(True, "at 420 px a click on Approve answers the gate and the turn ends")

    outside = [r["request"]["url"] for r in c.requests
               if not r["request"]["url"].startswith(base + "/") and not r["request"]["url"].startswith("data:")]
    ok(not outside, "the page made no request outside the server", repr(outside))
    ok(not c.errors, "no script error, console error or CSP violation", repr(c.errors))


def start(suite):
    try:
        os.remove(os.path.join(ARTIFACTS, "console-420.png"))
    except FileNotFoundError:
        pass
    base, _ = suite.serve("tests/console/rig.lua", env={"CONSOLE_STORE": os.path.join(suite.tmp, "state")})
    return base


if __name__ == "__main__":
    sys.exit(S.run(start, lambda suite, c, base: run(c, base)))
