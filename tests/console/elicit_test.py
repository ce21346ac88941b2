#!/usr/bin/env python3
"""An MCP server's question (elicitation) in the web console and over luarig
serve's HTTP routes, in headless Chromium with the driver of console_test.py.

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
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import console_test as ct  # noqa: E402

failed = 0


def ok(cond, name, detail=""):
    global failed
    if cond:
        print("ok - console elicit: " + name, flush=True)
    else:
        failed += 1
        print("not ok - console elicit: " + name + (": " + detail if detail else ""), flush=True)
    return cond


def start(tmp):
    token_file = os.path.join(tmp, "token")
    with open(token_file, "w") as f:
        f.write(ct.TOKEN + "\n")
    log_path = os.path.join(tmp, "serve.log")
    log = open(log_path, "wb")
    env = dict(os.environ, LUARIG=ct.LUARIG, LUARIG_ROOT=ct.ROOT)
    proc = subprocess.Popen([ct.LUARIG, "serve", os.path.join(ct.ROOT, "tests/repl/fixtures/elicit_rig.lua"),
                             "--listen", "127.0.0.1:0", "--auth-token-file", token_file],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=ct.ROOT, env=env)
    deadline = time.time() + 30
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


def api(base, method, path, body=None):
    status, _, data = ct.http(base + path, ct.TOKEN, method, json.dumps(body).encode() if body is not None else None)
    try:
        return status, json.loads(data or b"{}")
    except ValueError:
        return status, data


def run(c, base):
    c.open_page()
    c.call("Page.navigate", {"url": base + "/"})
    c.wait("document.readyState === 'complete' && !document.getElementById('auth').hidden", "the token form")
    c.type("#token", ct.TOKEN)
    c.click("#token-save")
    c.wait("document.getElementById('conn').textContent === 'connected'", "the session list")
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
    except ct.Step:
        posts = [(r["request"]["url"], r["request"].get("postData")) for r in c.requests if r["request"]["method"] == "POST"]
        raise ct.Step("no answer drawn; cards " + repr(c.eval("[...document.querySelectorAll('.gate.question')].map((e) => e.className + ':' + e.dataset.input)")) + " posts " + repr(posts) + " page: " + c.eval("document.body.innerText")[-600:])
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


def main():
    exe = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        print("not ok - console elicit: chromium not found (tools/deps.sh installs Debian's chromium)")
        return 1
    tmp = tempfile.mkdtemp(prefix="luarig-console-elicit-")
    server = chrome = None
    try:
        server, base, log_path = start(tmp)
        chrome = ct.Chrome(exe, tmp)
        try:
            run(chrome, base)
        except ct.Step as e:
            ok(False, "the flow stopped", str(e))
            with open(log_path) as f:
                sys.stderr.write(f.read()[-2000:])
    except ct.Step as e:
        ok(False, "setting up", str(e))
    finally:
        if chrome:
            chrome.close()
        if server:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(15)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
