#!/usr/bin/env python3
"""An MCP server's question (elicitation) in the web console and over luarig
serve's HTTP routes, in headless Chromium with the driver of harness.py.

The rig (tests/repl/fixtures/elicit_rig.lua) has a loop whose MCP server
(luarig's own conformance fixture over stdio) asks the person during a tool
call. The console draws the question as a card with one field per property,
filled with the schema's defaults; a real click on Accept sends the edited
fields (POST /v1/sessions/ID/inputs/INPUT) and the server's answer reaches the
model. Over HTTP: the status lists the open question, decline is answered 202,
an answer to a closed question is 409 input_not_open, a bad action 400.

Prints TAP lines "ok - console elicit: …" / "not ok - console elicit: …".
"""
import json
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the tree
from harness import LUARIG, ROOT, Step, Suite, api, sign_in  # noqa: E402

S = Suite("console elicit", failure_png="console-elicit-failure.png")
ok = S.ok


def run(c, base):
    sign_in(c, base)
    c.type("#input", "go")
    c.click("#send")
    c.wait("document.querySelector('.gate.question input[name=name]')", "the question card", 30)
    what = c.eval("document.querySelector('.gate.question .what').textContent")
    ok(what == "ev asks: Please review and update the form fields with defaults",
       "the card says which server asks what", repr(what))
    vals = c.eval("""(() => { const o = {}; for (const i of document.querySelectorAll('.gate.question input, .gate.question select'))
      o[i.name] = i.type === 'checkbox' ? i.checked : i.value; return o; })()""")
    ok(vals == {"age": "30", "name": "John Doe", "score": "95.5", "status": "active", "verified": True},
       "one field per property, filled with the defaults (an enum as a list)", repr(vals))
    c.eval("(() => { const i = document.querySelector('.gate.question input[name=name]'); i.value = ''; })()")
    c.type(".gate.question input[name=name]", "Grace")
    c.click(".gate.question .actions button[data-action=accept]")
    try:
        c.wait("document.querySelector('.gate.question .outcome')", "the answered card", 20)
    except Step:
        posts = [(r["request"]["url"], r["request"].get("postData")) for r in c.requests if r["request"]["method"] == "POST"]
        raise Step("no answer drawn; cards " + repr(c.eval("[...document.querySelectorAll('.gate.question')].map((e) => e.className + ':' + e.dataset.input)")) + " posts " + repr(posts) + " page: " + c.eval("document.body.innerText")[-600:])
    ok(c.eval("document.querySelector('.gate.question .outcome').textContent") == "answered",
       "the card says answered")
    c.wait("document.querySelectorAll('.turn-end').length === 1", "the turn's end", 30)
    text = c.eval("document.getElementById('log').innerText")
    ok('action=accept, content={"age":30,"name":"Grace","score":95.5,"status":"active","verified":true}' in text,
       "the edited fields, typed as the schema says, reach the server and its answer the model",
       text[-400:])
    posts = [r for r in c.requests if r["request"]["method"] == "POST" and "/inputs/" in r["request"]["url"]]
    ok(len(posts) == 1 and json.loads(posts[0]["request"].get("postData") or "{}").get("action") == "accept",
       "one POST …/inputs/ID with action accept")
    sid = c.eval("window.luarigConsole.view.id")

    # over HTTP alone
    st, _ = api(base, "POST", "/v1/sessions/" + sid + "/input", {"text": "again"})
    ok(st == 202 or st == 200, "a second input is taken", str(st))
    deadline = time.time() + 30
    inputs = []
    while time.time() < deadline and not inputs:
        st, body = api(base, "GET", "/v1/sessions/" + sid + "/status")
        inputs = body.get("open_inputs") or [] if isinstance(body, dict) else []
        if not inputs:
            time.sleep(0.05)
    ok(len(inputs) == 1 and inputs[0].get("server") == "ev", "the status lists the open question", repr(inputs))
    if not inputs:
        return
    iid = inputs[0]["input_id"]
    st, body = api(base, "POST", "/v1/sessions/" + sid + "/inputs/" + iid, {"action": "maybe"})
    ok(st == 400 and body.get("error", {}).get("code") == "invalid_request", "a bad action is 400", repr(body))
    st, body = api(base, "POST", "/v1/sessions/" + sid + "/inputs/" + iid, {"action": "decline"})
    ok(st == 202, "decline is answered 202", repr((st, body)))
    st, body = api(base, "POST", "/v1/sessions/" + sid + "/inputs/" + iid, {"action": "accept", "content": {}})
    ok(st == 409 and body.get("error", {}).get("code") == "input_not_open",
       "an answer to a closed question is 409 input_not_open", repr((st, body)))
    c.wait("document.querySelectorAll('.turn-end').length === 2", "the second turn's end", 30)
    ok("action=decline" in c.eval("document.getElementById('log').innerText"),
       "the server hears the decline, and the console draws it live")
    ok(c.eval("[...document.querySelectorAll('.gate.question .outcome')].map((e) => e.textContent).join(',')")
       == "answered,declined", "the second card says declined")

    # every enum form of SEP-1330: lists for single choices (titles shown), boxes for many
    c.type("#input", "enums please")
    c.click("#send")
    c.wait("document.querySelector('.gate.question select[name=untitledSingle]')", "the enums card", 30)
    opts = c.eval("""(() => { const o = {}; for (const s of document.querySelectorAll('.gate.question:not(.resolved) select'))
      o[s.name] = [...s.options].map((x) => x.value + '=' + x.textContent); return o; })()""")
    ok(opts == {"legacyEnum": ["opt1=Option One", "opt2=Option Two", "opt3=Option Three"],
                "titledSingle": ["value1=First Option", "value2=Second Option", "value3=Third Option"],
                "untitledSingle": ["option1=option1", "option2=option2", "option3=option3"]},
       "single choices are lists: plain, titled (oneOf) and legacy (enumNames)", repr(opts))
    boxes = c.eval("[...document.querySelectorAll('.gate.question:not(.resolved) input[type=checkbox]')]"
                   ".map((b) => b.dataset.field + ':' + b.value + ':' + b.parentNode.textContent.trim())")
    ok(boxes == ["titledMulti:value1:First Choice", "titledMulti:value2:Second Choice", "titledMulti:value3:Third Choice",
                 "untitledMulti:option1:option1", "untitledMulti:option2:option2", "untitledMulti:option3:option3"],
       "multiple choices are boxes, titled where the schema titles them", repr(boxes))
    c.eval("(() => { document.querySelector('.gate.question:not(.resolved) select[name=titledSingle]').value = 'value2'; })()")
    c.click(".gate.question:not(.resolved) input[data-field=untitledMulti][value=option3]")
    c.click(".gate.question:not(.resolved) input[data-field=titledMulti][value=value1]")
    c.click(".gate.question:not(.resolved) input[data-field=titledMulti][value=value3]")
    c.click(".gate.question:not(.resolved) .actions button[data-action=accept]")
    c.wait("document.querySelectorAll('.turn-end').length === 3", "the third turn's end", 30)
    text = c.eval("document.getElementById('log').innerText").replace("\n", "")
    ok('"titledMulti":["value1","value3"]' in text and '"untitledMulti":["option3"]' in text and
       '"titledSingle":"value2"' in text and '"legacyEnum":"opt1"' in text,
       "the choices reach the server as the schema types them (arrays for the boxes)", text[-500:])


def start(suite):
    # the rig's MCP server is luarig's own fixture, run by the same binary
    base, _ = suite.serve("tests/repl/fixtures/elicit_rig.lua", env={"LUARIG": LUARIG, "LUARIG_ROOT": ROOT},
                          timeout=30)
    return base


if __name__ == "__main__":
    sys.exit(S.run(start, lambda suite, c, base: run(c, base)))
