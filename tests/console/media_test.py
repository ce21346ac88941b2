#!/usr/bin/env python3
"""The web console attaches a file (issue 21 §1), in headless Chromium with
the browser and server helpers of harness.py: a PNG is set on the
composer's file input over the DevTools protocol (DOM.setFileInputFiles, as
a person's file dialog would), sent with a line of text; the page posts
image blocks with the bytes in base64, the model receives the stored image
(the test rig answers with its type and size), the page draws the user's
message with the attachment named, and the session's journal holds a blob
reference, never the bytes. A file that is not an image the runtime takes
is refused with the server's reason, shown on the page. An input guardrail
that trips is drawn with its reason.

Prints TAP lines "ok - console media: …" / "not ok - console media: …".
"""
import base64
import json
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the tree
from harness import Step, Suite, api, sign_in  # noqa: E402

S = Suite("console media", failure_png="console-media-failure.png")
ok = S.ok
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + b"console-media-test" * 4


def journal(base, sid):
    return api(base, "GET", "/v1/sessions/" + sid + "/journal?limit=1000")[1]["events"]


def set_files(c, paths):
    root = c.call("DOM.getDocument")["root"]["nodeId"]
    node = c.call("DOM.querySelector", {"nodeId": root, "selector": "#attach"})["nodeId"]
    c.call("DOM.setFileInputFiles", {"nodeId": node, "files": paths})


def run(c, base, tmp):
    sign_in(c, base)

    png = os.path.join(tmp, "shot.png")
    with open(png, "wb") as f:
        f.write(PNG)
    set_files(c, [png])
    c.wait("document.getElementById('attached').textContent === 'shot.png'", "the attachment's name")
    ok(True, "the composer names the attached file")
    c.type("#input", "look at this")
    c.click("#send")
    c.wait("[...document.querySelectorAll('.assistant, .text, .turn')].some((e) =>"
           " e.textContent.includes('you sent image shot.png'))", "the model's answer", 15)
    answer = c.eval("document.getElementById('log').innerText")
    ok("you sent image shot.png (image/png, %d bytes)" % len(PNG) in answer,
       "the model received the stored image (type and size)", answer[-400:])
    ok("[image shot.png, image/png]" in answer, "the user's message names the attachment", answer[-400:])
    inputs = [r for r in c.requests if r["request"]["method"] == "POST" and r["request"]["url"].endswith("/input")]
    body = json.loads(inputs[-1]["request"].get("postData") or "{}")
    blocks = body.get("blocks") or []
    ok(len(blocks) == 2 and blocks[0] == {"type": "text", "text": "look at this"} and
       blocks[1].get("type") == "image" and base64.b64decode(blocks[1].get("base64", "")) == PNG and
       blocks[1].get("name") == "shot.png",
       "the page posted a text block and the image's bytes as base64", repr(blocks)[:300])
    # the composer is cleared once the POST that sent it has answered, which
    # may come after the streamed answer is drawn: wait for it (or fail below)
    try:
        c.wait("document.getElementById('attached').textContent === '' &&"
               " document.getElementById('attach').files.length === 0", "the cleared composer", 10)
    except Step:
        pass
    ok(c.eval("document.getElementById('attached').textContent") == "" and
       c.eval("document.getElementById('attach').files.length") == 0, "sending clears the attachment")

    sid = c.eval("window.luarigConsole.view.id")
    evs = journal(base, sid)
    b64 = base64.b64encode(PNG).decode()
    started = [e["event"] for e in evs if e["event"].get("type") == "TurnStarted"]
    img = started[0]["message"]["content"][1] if started else {}
    ok(img.get("blob") and img.get("size") == len(PNG) and not any(b64 in json.dumps(e) for e in evs),
       "the journal holds a blob reference, not the bytes", repr(img))

    # a PDF named .png is refused with the server's reason
    bad = os.path.join(tmp, "fake.png")
    with open(bad, "wb") as f:
        f.write(b"%PDF-1.4\n%not an image\n")
    set_files(c, [bad])
    c.type("#input", "and this")
    c.click("#send")
    c.wait("document.body.innerText.includes('not an image this runtime takes')", "the refusal")
    ok(True, "a file that is no image is refused with the reason shown")
    # an input guardrail's trip is drawn with its reason (issue 21 §3)
    c.eval("document.getElementById('attach').value = ''; document.getElementById('input').value = ''")
    c.type("#input", "forbidden words")
    c.click("#send")
    try:
        c.wait("document.getElementById('log').innerText.includes("
               "'guardrail no_forbidden tripped on the input: a forbidden request')", "the trip")
    except Step:
        raise Step("no trip drawn; the log ends: " + c.eval("document.getElementById('log').innerText")[-600:])
    ok(True, "an input guardrail's trip is drawn with its reason")
    ok(not c.errors, "no script error, console error or CSP violation", repr(c.errors))


def start(suite):
    base, _ = suite.serve("tests/console/rig.lua", env={"CONSOLE_STORE": os.path.join(suite.tmp, "state")})
    return base


if __name__ == "__main__":
    sys.exit(S.run(start, lambda suite, c, base: run(c, base, suite.tmp)))
