#!/bin/sh
# The quickstart and the guide scripts, run as a user runs them, on their
# scripted models (no API key reaches them). Checks exit codes and key lines,
# never ids or timestamps. Prints TAP lines "ok - examples ..." / "not ok - ...".
#
# scripts/guide/NAME.lua runs with a fresh directory as its argument and must
# exit 0; each line of tests/examples/NAME.expect must appear in its output
# (grep -F).
cd "$(dirname "$0")/../.." || exit 1
LUARIG=${LUARIG:-$PWD/build/luarig}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# no key may pick a real model here
unset ANTHROPIC_API_KEY OPENAI_API_KEY OPENAI_BASE_URL GEMINI_API_KEY GOOGLE_API_KEY
esc=$(printf '\033')

pass() { echo "ok - examples $1"; }
fail() {
	echo "not ok - examples $1"
	[ -n "$2" ] && sed 's/^/#   /' "$2" | tail -n 60
}
# has FILE LINE...: every LINE occurs in FILE
has() {
	f=$1
	shift
	for l in "$@"; do
		grep -qF -- "$l" "$f" || { echo "missing: $l" >>"$f"; return 1; }
	done
}

# -- the quickstart, approving automatically (what `make demo` runs)
q="$tmp/q1"
"$LUARIG" scripts/quickstart.lua --yes --dir "$q" </dev/null >"$tmp/q1.out" 2>&1
rc=$?
id=$(sed -n 's/^Session \([0-9a-f-]*\) .*/\1/p' "$tmp/q1.out")
if [ $rc -eq 0 ] && [ -n "$id" ] && has "$tmp/q1.out" \
	"model      a scripted model (no API key set)" \
	"approvals  automatic (--yes): every gated call is approved" \
	"→ glob ** in . (glob)" "│ test.sh" \
	"? allow run \`sh test.sh\` in . (timeout 60 s) (bash) — approved (--yes)" \
	"not ok - greet.sh greets: expected 'Hello, rig!', got 'Helo, rig!'" \
	"→ read greet.sh (read_file)" \
	"? allow edit greet.sh (one match" \
	"│ +echo \"Hello, \${1:-world}!\"" \
	"│ ok - greet.sh greets" "── turn 1 done · " "── snapshot v1:sha256:" "(turn_done, quiescent)" \
	"luarig sessions --state $q/state" "luarig log --state $q/state $id" &&
	! grep -q "$esc" "$tmp/q1.out" && grep -q 'Hello, ${1:-world}!' "$q/workspace/greet.sh"; then
	pass "quickstart --yes fixes the demo project through the tools"
else
	fail "quickstart --yes fixes the demo project through the tools (exit $rc)" "$tmp/q1.out"
fi

# -- what it prints to do next works: the catalog lists it, the journal replays it
"$LUARIG" sessions --state "$q/state" >"$tmp/q1.sessions" 2>&1
"$LUARIG" log --state "$q/state" "$id" >"$tmp/q1.log" 2>&1
if grep -qF "$id" "$tmp/q1.sessions" && grep -q '"type":"TurnDone"' "$tmp/q1.log" &&
	grep -q '"type":"WorkspaceCheckpointed"' "$tmp/q1.log" &&
	[ "$(grep -c '"type":"GateResolved"' "$tmp/q1.log")" = 3 ]; then
	pass "quickstart session is listed and its journal replays"
else
	cat "$tmp/q1.sessions" "$tmp/q1.log" >"$tmp/q1.both"
	fail "quickstart session is listed and its journal replays" "$tmp/q1.both"
fi

# -- no terminal, no --yes: gated calls are denied, saying why; nothing changes
"$LUARIG" scripts/quickstart.lua --dir "$tmp/q2" </dev/null >"$tmp/q2.out" 2>&1
rc=$?
if [ $rc -eq 0 ] && has "$tmp/q2.out" \
	"approvals  denied: no terminal to ask on (pass --yes to approve)" \
	"(bash) — denied (no terminal to ask on; pass --yes)" \
	"I could not go on: permission denied" "── turn 1 done" &&
	grep -q 'Helo, ' "$tmp/q2/workspace/greet.sh"; then
	pass "quickstart without a terminal denies approvals"
else
	fail "quickstart without a terminal denies approvals (exit $rc)" "$tmp/q2.out"
fi

# -- a usage error
"$LUARIG" scripts/quickstart.lua --bogus >"$tmp/q3.out" 2>&1
rc=$?
if [ $rc -eq 1 ] && has "$tmp/q3.out" "luarig: unknown option '--bogus' (--yes, --dir DIR)"; then
	pass "quickstart refuses an unknown option"
else
	fail "quickstart refuses an unknown option (exit $rc)" "$tmp/q3.out"
fi

# -- on a terminal: y, a (saved as a rule), y; NO_COLOR honored (tmux)
if command -v tmux >/dev/null 2>&1; then
	sock="luarig-examples-$$"
	T() { tmux -L "$sock" -f /dev/null "$@"; }
	screen() { T capture-pane -p -e -J -S -300 2>/dev/null; }
	wait_count() { # PATTERN N: at least N screen lines match within 20 s
		i=0
		while [ "$(screen | grep -cF -- "$1")" -lt "$2" ]; do
			i=$((i + 1))
			[ $i -ge 400 ] && return 1
			sleep 0.05
		done
	}
	T new-session -d -x 200 -y 60 "NO_COLOR=1 '$LUARIG' scripts/quickstart.lua --dir '$tmp/q4'; echo EXIT=\$?; sleep 60"
	ok=1
	wait_count "[y]es / [a]lways / [n]o:" 1 && T send-keys -l y && T send-keys Enter || ok=0
	wait_count "[y]es / [a]lways / [n]o:" 2 && T send-keys -l a && T send-keys Enter || ok=0
	wait_count "[y]es / [a]lways / [n]o:" 3 && T send-keys -l y && T send-keys Enter || ok=0
	wait_count "EXIT=" 1 || ok=0
	screen >"$tmp/q4.out"
	T kill-server >/dev/null 2>&1
	if [ $ok = 1 ] && has "$tmp/q4.out" "approvals  asked here: y = once, a = always, n = no" \
		"approved always" "│ ok - greet.sh greets" "EXIT=0" &&
		[ "$(grep -c '^    approved$' "$tmp/q4.out")" = 2 ] &&
		! grep -q "$esc" "$tmp/q4.out" &&
		grep -qF "\"match\": \"$tmp/q4/workspace/greet.sh\"" "$tmp/q4/permissions.json"; then
		pass "quickstart asks on a terminal (y, a, y) and saves the 'always' rule"
	else
		fail "quickstart asks on a terminal (y, a, y) and saves the 'always' rule" "$tmp/q4.out"
	fi
else
	echo "not ok - examples tmux is not installed (the interactive quickstart case)"
fi

# -- a real provider path: OPENAI_BASE_URL picks an openai-compatible model; the
#    local mock (tests/bench/mock_openai.py) answers with a tool call the
#    quickstart does not have, then text: the request, the error result and the
#    answer go over real HTTP and SSE
if command -v python3 >/dev/null 2>&1; then
	python3 tests/bench/mock_openai.py 0 >"$tmp/mock.out" 2>&1 &
	mock=$!
	port=""
	for _ in $(seq 50); do
		port=$(sed -n 's/^ready \([0-9]*\)$/\1/p' "$tmp/mock.out")
		[ -n "$port" ] && break
		sleep 0.1
	done
	OPENAI_BASE_URL="http://127.0.0.1:$port/v1" "$LUARIG" scripts/quickstart.lua --yes \
		--dir "$tmp/q4" "say hi" </dev/null >"$tmp/q4.out" 2>&1
	rc=$?
	stats=$(python3 -c "import json,urllib.request; print(json.load(urllib.request.urlopen('http://127.0.0.1:$port/stats'))['requests'])" 2>/dev/null)
	kill $mock 2>/dev/null
	wait $mock 2>/dev/null
	if [ $rc -eq 0 ] && [ "$stats" = 2 ] && has "$tmp/q4.out" "at http://127.0.0.1:$port/v1" \
		"── turn 1 done · "; then
		pass "quickstart with OPENAI_BASE_URL talks to that server"
	else
		echo "mock requests: $stats" >>"$tmp/q4.out"
		fail "quickstart with OPENAI_BASE_URL talks to that server (exit $rc)" "$tmp/q4.out"
	fi
fi

# -- the guide scripts
for g in scripts/guide/*.lua; do
	name=$(basename "$g" .lua)
	exp="tests/examples/$name.expect"
	"$LUARIG" "$g" "$tmp/guide-$name" </dev/null >"$tmp/$name.out" 2>&1
	rc=$?
	missing=0
	if [ -f "$exp" ]; then
		while IFS= read -r l; do
			[ -z "$l" ] && continue
			grep -qF -- "$l" "$tmp/$name.out" || { echo "missing: $l" >>"$tmp/$name.out"; missing=1; }
		done <"$exp"
	fi # without one (a script another branch added), its exit code alone is checked
	if [ $rc -eq 0 ] && [ $missing = 0 ]; then
		pass "guide $name"
	else
		fail "guide $name (exit $rc)" "$tmp/$name.out"
	fi
done
