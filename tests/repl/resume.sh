#!/bin/sh
# The REPL's :resume on a real terminal (tmux, 100 columns, as tests/repl/run.sh):
# a child process runs a turn of two tool calls and is killed (SIGKILL) with the
# first call's result journaled and the second's gate open; the REPL attaches
# the session (a restore), says the turn was cut and how to go on, asks the
# restored gate; y answers it, :resume runs the approved call (the recorded one
# is not run again), the turn ends with both results, and :resume again says
# there is nothing left. Prints TAP lines "ok - repl resume ..." / "not ok - ...".
cd "$(dirname "$0")/../.." || exit 1
LUARIG=${LUARIG:-$PWD/build/luarig}
export LUARIG_ROOT=${LUARIG_ROOT:-$PWD}
if ! command -v tmux >/dev/null 2>&1; then
	echo "not ok - repl resume tmux is not installed"
	exit 1
fi
tmp=$(mktemp -d)
sock="luarig-resume-test-$$"
T() { tmux -L "$sock" -f /dev/null "$@"; }
trap 'T kill-server >/dev/null 2>&1; rm -rf "$tmp"' EXIT

TAP_PREFIX="repl resume"
. tests/repl/lib.sh

export RESUME_STATE="$tmp/state"
mkdir -p "$RESUME_STATE"
"$LUARIG" tests/lua/session/resume_child.lua "$RESUME_STATE" partial >"$tmp/child.out" 2>"$tmp/child.err"
rc=$?
id=$(sed -n 's/^SESSION //p' "$tmp/child.out")
check "a child is killed with a turn cut at a gate" test "$rc" -eq 137 -a -n "$id"

T new-session -d -x 100 -y 50 \
	"TERM=screen NO_COLOR=1 RESUME_STATE='$RESUME_STATE' LUARIG_ROOT='$LUARIG_ROOT' XDG_STATE_HOME='$tmp/xdg' '$LUARIG' repl tests/repl/fixtures/resume_rig.lua; echo \"EXIT=\$?\"; sleep 600"
check "repl FILE starts" wait_for '^> ' 10
type_line ":attach $(echo "$id" | cut -c1-8)"
check ":attach restores the session" wait_for "^── attached to session $id"
check "the cut turn is named, with what its step did and how to go on" \
	wait_for '^── turn t[0-9.]+ of assistant was cut by a crash at a step with 2 tool calls \(1 done\): :resume continues it$'
check "the restored gate asks" wait_for '^\? allow fetchy: fetch example\.org$'
T send-keys y
check "y answers the restored gate" wait_for '^  ✓ approved$'
type_line 's:wait_idle(5) and #s:resumable()'
check "answering alone resumes nothing: the turn is still waiting" wait_for '^1$'
check "answering alone runs nothing" sh -c "! grep -q fetchy '$RESUME_STATE/runs.log'"
type_line ':resume'
check ":resume starts the resumed turn, saying what it keeps and runs" \
	wait_for '^── turn t[0-9.]+ · assistant resumes t[0-9.]+ · 1 call to run, 1 result kept$'
check "the turn ends with both results" wait_for '^  all done: echoed echo x \+ fetched$'
check "the turn ends" wait_for '^── done'
check "the approved call ran once, here, and the recorded one not again" \
	test "$(cat "$RESUME_STATE/runs.log" | cut -d' ' -f1,3 | tr '\n' ',')" = "echo fresh,fetchy resumed,"
type_line ':resume'
check ":resume again: nothing left, the message alone" wait_for '^error: resume: nothing to resume in session '
if screen | grep -q 'stack traceback'; then
	echo "not ok - repl resume a refused command printed a stack traceback"
else
	pass "a refused :resume prints no stack traceback"
fi
type_line ':resume nope'
check ":resume LOOP names a loop that is not there" wait_for "^error: no loop 'nope' in this session$"
type_line ':help'
check ":help lists :resume" wait_for '^:resume \[LOOP\] +continue the turns a crash or a shutdown cut'

T send-keys C-d
check "exits with status 0" wait_for '^EXIT=0$' 10
