#!/usr/bin/env python3
"""Delegation gates in the web console, in real headless Chromium (issue 16
§7): `luarig serve tests/repl/fixtures/deleg_rig.lua` (the REPL's rig too),
whose planner's gate asks before each start_agent. A gate card names the
tool, the summary and the delegate it needs; Approve starts the agent; the
next call asks again; Approve always saves a rule for that delegate (its
button says so) and the call after it is not asked; another delegate still
asks and Deny refuses it (the model reads the denial, no agent starts).
With the driver of harness.py. Prints TAP lines "ok - console delegation: …".
"""
import json
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the tree
from harness import ARTIFACTS, Suite, sign_in  # noqa: E402

S = Suite("console delegation", failure_png="console-delegation-failure.png")
ok = S.ok


def log_has(c, text):
    return "document.getElementById('log').innerText.includes(%s)" % json.dumps(text)


def n_cards(c):
    return c.eval("document.querySelectorAll('.gate').length")


def send(c, text):
    c.type("#input", text)
    c.click("#send")


def run(c, base, rules):
    sign_in(c, base, "document.getElementById('auth').hidden && "
            "document.getElementById('conn').textContent === 'connected'")
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
    c.screenshot(os.path.join(ARTIFACTS, "console-delegation.png"))
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


def start(suite):
    # the rig keeps its store at BENCH_STATE and its rules file beside it
    state = os.path.join(suite.tmp, "state")
    start.rules = state + ".rules.json"
    base, _ = suite.serve("tests/repl/fixtures/deleg_rig.lua", env={"BENCH_STATE": state})
    return base


if __name__ == "__main__":
    sys.exit(S.run(start, lambda suite, c, base: run(c, base, start.rules)))
