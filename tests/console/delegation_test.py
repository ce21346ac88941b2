#!/usr/bin/env python3
"""Delegation gates in the web console, in real headless Chromium (issue 16
§7): `luarig serve tests/console/deleg_rig.lua`, whose planner's gate asks
before each start_agent. A gate card names the tool, the summary and the
delegate it needs; Approve starts the agent; the next call asks again;
Approve always saves a rule for that delegate (its button says so) and the
call after it is not asked; another delegate still asks and Deny refuses it
(the model reads the denial, no agent starts). Reuses the Chromium driver of
console_test.py. Prints TAP lines "ok - console delegation: …".
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import console_test as ct  # noqa: E402

failed = 0


def ok(cond, name, detail=""):
    global failed
    if cond:
        print("ok - console delegation: " + name, flush=True)
    else:
        failed += 1
        print("not ok - console delegation: " + name + (": " + detail if detail else ""), flush=True)
    return cond


def start_server(tmp, rules):
    token_file = os.path.join(tmp, "token")
    with open(token_file, "w") as f:
        f.write(ct.TOKEN + "\n")
    log_path = os.path.join(tmp, "serve.log")
    log = open(log_path, "wb")
    env = dict(os.environ, DELEG_RULES=rules)
    proc = subprocess.Popen([ct.LUARIG, "serve", os.path.join(ct.ROOT, "tests/console/deleg_rig.lua"),
                             "--listen", "127.0.0.1:0", "--auth-token-file", token_file],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=ct.ROOT, env=env)
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


def log_has(c, text):
    return "document.getElementById('log').innerText.includes(%s)" % json.dumps(text)


def n_cards(c):
    return c.eval("document.querySelectorAll('.gate').length")


def send(c, text):
    c.type("#input", text)
    c.click("#send")


def run(c, base, rules):
    c.open_page()
    c.call("Page.navigate", {"url": base + "/"})
    c.wait("document.readyState === 'complete' && !document.getElementById('auth').hidden",
           "the token form")
    c.type("#token", ct.TOKEN)
    c.click("#token-save")
    c.wait("document.getElementById('auth').hidden && "
           "document.getElementById('conn').textContent === 'connected'", "the session list")
    c.click("#new-session")  # the first input below starts the session
    c.wait("document.getElementById('view-title').textContent === 'new session'", "the empty view")

    # the first delegation asks; the card names tool, summary and delegate
    send(c, "delegate alpha")
    c.wait("document.querySelector('.gate .actions button.approve')", "the delegation's gate card")
    card = c.eval("document.querySelector('.gate').innerText")
    ok("start_agent" in card and "start agent researcher: alpha" in card and
       "delegate researcher" in card, "a delegation gate card names the tool, the summary and "
       "the delegate", card)
    names = c.eval("[...document.querySelectorAll('.gate button')].map((b) => b.textContent)")
    ok(names == ["Approve", "Approve always", "Deny"], "it offers approve, approve always, deny",
       repr(names))
    title = c.eval("document.querySelector('.gate button.approve-always').title")
    ok(title == "saves allow delegate researcher", "Approve always says the rule it saves",
       repr(title))
    ok(not c.eval(log_has(c, "research on alpha")), "no agent runs before the answer")
    c.screenshot(os.path.join(ct.ARTIFACTS, "console-delegation.png"))
    c.click(".gate .actions button.approve")
    c.wait("document.querySelector('.gate.resolved .outcome')", "the gate resolved")
    ok(c.eval("document.querySelector('.gate.resolved .outcome').textContent") == "approved",
       "a click on Approve answers the delegation gate")
    c.wait(log_has(c, "planner got: research on alpha"), "the approved agent's answer")
    ok(True, "the approved agent runs and the planner gets its answer")

    # the next delegate call asks again: Approve always saves the rule
    send(c, "delegate beta")
    c.wait("document.querySelectorAll('.gate .actions button.approve-always').length === 1",
           "the second gate card")
    ok(n_cards(c) == 2, "the next delegate call asks again (one card per call)", str(n_cards(c)))
    c.click(".gate:not(.resolved) .actions button.approve-always")
    c.wait(log_has(c, "planner got: research on beta"), "the second agent's answer")
    outcomes = c.eval("[...document.querySelectorAll('.gate .outcome')].map((o) => o.textContent)")
    ok(outcomes == ["approved", "approved always"], "Approve always answers it", repr(outcomes))
    with open(rules) as f:
        saved = json.load(f)["rules"]
    ok(saved == [{"effect": "allow", "kind": "delegate", "match": "researcher"}],
       "the saved rule matches that delegate", repr(saved))

    # the saved rule approves the next call to that delegate: no card
    send(c, "delegate gamma")
    c.wait(log_has(c, "planner got: research on gamma"), "the third agent's answer")
    ok(n_cards(c) == 2, "the saved rule allows the delegate without a gate card", str(n_cards(c)))

    # another delegate still asks; Deny refuses it and the model reads it
    send(c, "critic delta")
    c.wait("document.querySelector('.gate:not(.resolved) .actions button.deny')", "the critic's card")
    card = c.eval("document.querySelector('.gate:not(.resolved)').innerText")
    ok("start agent critic: delta" in card and "delegate critic" in card,
       "another delegate still asks", card)
    c.click(".gate:not(.resolved) .actions button.deny")
    c.wait(log_has(c, "planner got: error: permission denied: denied by the user"),
           "the model's reply to the denial")
    ok(c.eval("[...document.querySelectorAll('.gate .outcome')].pop().textContent") == "denied",
       "Deny refuses the delegation and the model reads the error")
    ok(not c.eval(log_has(c, "critique of")), "the denied agent never ran")
    ok(not c.errors, "no script error, console error or CSP violation", repr(c.errors))


def main():
    exe = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        print("not ok - console delegation: chromium not found (tools/deps.sh installs it)")
        return 1
    if not os.access(ct.LUARIG, os.X_OK):
        print("not ok - console delegation: no luarig at " + ct.LUARIG)
        return 1
    tmp = tempfile.mkdtemp(prefix="luarig-console-deleg-")
    os.chmod(tmp, 0o700)
    rules = os.path.join(tmp, "permissions.json")
    server = chrome = None
    try:
        server, base, log_path = start_server(tmp, rules)
        chrome = ct.Chrome(exe, tmp)
        try:
            run(chrome, base, rules)
        except ct.Step as e:
            ok(False, "the delegation flow stopped", str(e))
            try:
                chrome.screenshot(os.path.join(ct.ARTIFACTS, "console-delegation-failure.png"))
            except Exception:
                pass
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
