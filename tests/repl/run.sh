#!/bin/sh
# The REPL on a real terminal: luarig runs inside a private tmux server
# (fixed window size, TERM set inside), keys go in with send-keys and the
# screen comes back with capture-pane. Every wait polls with a deadline.
# Prints TAP lines "ok - repl ..." / "not ok - repl ...".
cd "$(dirname "$0")/../.." || exit 1
LUARIG=${LUARIG:-$PWD/build/luarig}
if ! command -v tmux >/dev/null 2>&1; then
	echo "not ok - repl tmux is not installed"
	exit 1
fi
tmp=$(mktemp -d)
sock="luarig-test-$$"
n_start=0
export XDG_STATE_HOME="$tmp/state"
T() { tmux -L "$sock-$n_start" -f /dev/null "$@"; }
trap 'T kill-server >/dev/null 2>&1; rm -rf "$tmp"' EXIT

TAP_PREFIX=repl
. tests/repl/lib.sh

not_on_screen() { ! screen | grep -qE -- "$1"; }
type_text() { T send-keys -l -- "$1"; }

# start [ARGS]: a fresh REPL in a fresh window; waits for the first prompt.
start() {
	T kill-server >/dev/null 2>&1
	n_start=$((n_start + 1)) # a new server each time: no race with the old one going away
	T new-session -d -x 100 -y 40 \
		"env TERM=screen XDG_STATE_HOME='$XDG_STATE_HOME' '$LUARIG' repl $*; echo \"EXIT=\$?\"; sleep 600"
	wait_for '^> ' 10
}

luarig_pid() {
	shell=$(T display-message -p '#{pane_pid}')
	pgrep -P "$shell" -f luarig | head -n 1
}

# The printer, compiling and completion, without a terminal.
"$LUARIG" tests/lua/runner.lua tests/repl/repl_spec.lua | sed -n 's/^\(not \)\{0,1\}ok - /&repl /p'

# --- one session for most cases ---
check "starts and shows a prompt" start

type_line '1+1'
check "an expression prints its value" wait_for '^2$'

type_line 'function twice(a)'
wait_for '^>> ' >/dev/null
type_line '  return a * 2'
type_line 'end'
type_line 'twice(21)'
check "an incomplete statement continues with a '>> ' prompt" wait_for '^>>   return a \* 2$'
check "the function defined across lines can be called" wait_for '^42$'

type_line 't = { name = "n", list = { 1, 2 }, deep = { a = { b = { c = { d = {} } } } } }; t.self = t'
type_line 't'
check "a table prints with sorted keys and nested tables" \
	wait_for '^  list = \{ 1, 2 \},$'
check "a table prints with a depth cap" wait_for '^  deep = \{ a = \{ b = \{ c = \{ … \} \} \} \},$'
check "a table prints with a cycle mark" wait_for '^  self = <cycle: table: 0x[0-9a-f]+>$'
type_line '{ "x", "y", z = true }'
check "a short table prints on one line" wait_for '^\{ "x", "y", z = true \}$'

type_line 'error("boom_marker")'
check "an error prints 'error:' with the message" wait_for '^error: stdin:1: boom_marker$'
type_line '"after_error"'
check "the prompt returns after an error" wait_for '^"after_error"$'

type_text 'string.fo'
T send-keys Tab
check "tab completes a field after '.'" wait_for '^> string\.format$'
type_line '("%d", 7)'
check "the completed line runs" wait_for '^"7"$'

type_text 'twi'
T send-keys Tab
check "tab completes a global" wait_for '^> twice$'
T send-keys C-u
type_line 's = "abc"'
type_text 's:up'
T send-keys Tab
check "tab completes a method after ':' (through the metatable)" wait_for '^> s:upper$'
type_line '()'
check "the completed method call runs" wait_for '^"ABC"$'
type_text 'rig.sle'
T send-keys Tab
check "tab completes a field of rig" wait_for '^> rig\.sleep$'
T send-keys C-u

type_text 'garbage_text_here'
T send-keys C-c
type_line '"fresh_line"'
check "Ctrl-C at the prompt clears the line" wait_for '^"fresh_line"$'

type_line 'rig.spawn(function() rig.sleep(0.6) print("bg_marker") end)'
wait_for '^task [0-9]+ ' >/dev/null
type_text 'partial_line = 5'
check "a background task prints while the prompt waits" wait_for '^bg_marker$'
check "the partly typed line is drawn again below the output" wait_for '^> partial_line = 5$'
T send-keys Enter
type_line 'partial_line + 1'
check "the partly typed line stayed intact" wait_for '^6$'

# Ctrl-C during a waiting chunk, which also started a task of its own.
type_line 'rig.spawn(function() rig.sleep(1.5) print("child_" .. "survived") end); rig.sleep(60)'
sleep 0.3
t0=$(now_ms)
T send-keys C-c
if wait_count '^(\^C)?interrupted$' 1 5; then
	dt=$(($(now_ms) - t0))
	if [ "$dt" -le 1500 ]; then pass "Ctrl-C cancels rig.sleep(60) in ${dt} ms"; else fail "Ctrl-C cancels rig.sleep(60) in ${dt} ms (over 1.5 s)"; fi
else
	fail "Ctrl-C cancels rig.sleep(60)"
fi
type_line '"alive_after_sleep"'
check "the prompt works after cancelling a waiting chunk" wait_for '^"alive_after_sleep"$'

# A busy loop never returns to the loop: the signal hook interrupts it.
type_line 'while true do end'
sleep 0.3
t0=$(now_ms)
T send-keys C-c
if wait_count '^(\^C)?interrupted$' 2 5; then
	dt=$(($(now_ms) - t0))
	if [ "$dt" -le 1500 ]; then pass "Ctrl-C interrupts 'while true do end' in ${dt} ms"; else fail "Ctrl-C interrupts 'while true do end' in ${dt} ms (over 1.5 s)"; fi
else
	fail "Ctrl-C interrupts 'while true do end'"
fi
type_line '"alive_after_busy"'
check "the prompt works after interrupting a busy loop" wait_for '^"alive_after_busy"$'
sleep 1.5
check "Ctrl-C cancelled the task the chunk had started" not_on_screen "^child_survived$"

type_line 'x_marker = 42'
type_line '"before_exit"'
wait_for '^"before_exit"$' >/dev/null
T send-keys C-d
check "Ctrl-D on an empty line exits with status 0" wait_for '^EXIT=0$'

# --- history across runs ---
check "the history file exists" test -s "$XDG_STATE_HOME/luarig/history"
check "the history directory is private (0700)" \
	test "$(stat -c %a "$XDG_STATE_HOME/luarig")" = 700
start
T send-keys Up
T send-keys Up
check "history is kept across runs (Up recalls an earlier line)" wait_for '^> x_marker = 42$'
T send-keys C-u
T send-keys C-d
wait_for '^EXIT=' >/dev/null

# --- SIGTERM ---
start
pid=$(luarig_pid)
if [ -n "$pid" ]; then kill -TERM "$pid"; fi
check "SIGTERM ends the REPL (exit 143)" wait_for '^EXIT=143$'

# --- a script first, then the prompt with its globals ---
cat >"$tmp/script.lua" <<'EOF'
from_script = "yes"
print("script ran")
EOF
start "'$tmp/script.lua'"
check "repl SCRIPT runs the script first" wait_for '^script ran$'
type_line 'from_script'
check "the script's globals are available at the prompt" wait_for '^"yes"$'
T send-keys C-d
check "exit after a script session is 0" wait_for '^EXIT=0$'

# --- the workbench: a rig file, a live session, gates, Ctrl-C, attach, reload ---
"$LUARIG" tests/lua/runner.lua tests/repl/render_spec.lua | sed -n 's/^\(not \)\{0,1\}ok - /&repl /p'
. tests/repl/inspect.sh # budgets, inspecting, paging, :compact :checkpoint :rewind :log :gates
. tests/repl/delegation.sh # delegation through the gate: y, a and its saved rule, n
. tests/repl/chat.sh # Tab on s and r, ':' commands, :quit, chat mode, :fork with no checkpoint
export BENCH_STATE="$tmp/bench-state"
cp tests/repl/fixtures/bench_rig.lua "$tmp/bench_rig.lua"
start_bench() {
	T kill-server >/dev/null 2>&1
	n_start=$((n_start + 1))
	T new-session -d -x 100 -y 40 \
		"TERM=screen NO_COLOR=1 BENCH_STATE='$BENCH_STATE' XDG_STATE_HOME='$XDG_STATE_HOME' '$LUARIG' repl '$tmp/bench_rig.lua'; echo \"EXIT=\$?\"; sleep 600"
	wait_for '^> ' 10
}
check "workbench: repl FILE starts" start_bench
check "workbench: the returned rig is bound to r and described" wait_for '^r = rig.define\(assistant\) from '
check "workbench: the rig's loops are listed" wait_for '^  loops +assistant \([0-9a-f]{12}\)$'
check "workbench: the store is named" wait_for "^  store +lmdb $BENCH_STATE\$"

type_line 's = r:session()'
check "workbench: r:session() attaches the session" wait_for '^── attached to session [0-9a-f-]+ \(1 loop: assistant\)$'
type_line 's:submit("hello bench")'
check "workbench: thinking renders" wait_for '^  ┊ pondering$'
check "workbench: streamed text renders line by line" wait_for '^  stream_line_two hello bench$'
check "workbench: the turn's end shows tokens" wait_for '^── done · [0-9]+ in / [0-9]+ out tokens$'

type_line 's:submit("echo it")'
check "workbench: a tool call renders with name and summary" wait_for '^  → echo echo bench_echo$'
check "workbench: the tool result renders as a preview" wait_for '^    │ echoed: bench_echo$'
wait_count '^── done' 2 >/dev/null

type_line 's:submit("fetch one")'
check "workbench: a gate shows the request" wait_for '^\? allow fetch: fetch example.org$'
check "workbench: a gate shows the rule 'always' would save" \
	wait_for '^  \[y\] approve · \[a\] always \(saves allow network tcp://example.org:443\) · \[n\] deny · \[\?\] details$'
T send-keys '?'
check "workbench: ? shows the gate's details" wait_for '^  gate g[0-9.]+ · loop assistant · turn t[0-9.]+$'
T send-keys y
check "workbench: y approves the gate" wait_for '^  ✓ approved$'
check "workbench: the approved call ran" wait_for '^    │ fetched example.org$'
wait_count '^── done' 3 >/dev/null

type_line 's:submit("fetch two")'
wait_count '^\? allow fetch: fetch example.org$' 3 >/dev/null  # the ? details drew one too
T send-keys a
check "workbench: a approves always" wait_for '^  ✓ approved always$'
wait_count '^── done' 4 >/dev/null
check "workbench: the rule was saved" grep -q 'tcp://example.org:443' "$BENCH_STATE.rules.json"
type_line 's:submit("fetch three")'
check "workbench: the saved rule allows the call without a prompt" wait_for '^  ✓ fetch allowed by a saved rule$'
wait_count '^── done' 5 >/dev/null
check "workbench: no question for the third call" test "$(screen | grep -c '^? allow fetch')" -eq 3

# a deny, with another gate on a rules-free host
type_line 's:submit("fetch")'
sed -i 's/example.org/example.net/; s/bench-v1/bench-v2/' "$tmp/bench_rig.lua"
wait_count '^── done' 6 >/dev/null
type_line ':reload'
check "workbench: :reload reports the loop's revision changed" wait_for '^  ~ assistant: revision [0-9a-f]{12} -> [0-9a-f]{12}$'
type_line 's2 = r:session()'
wait_count '^── attached to session' 2 >/dev/null
type_line 's2:submit("fetch four")'
check "workbench: the reloaded rig's sessions use the new definition" wait_for '^\? allow fetch: fetch example.net$'
T send-keys n
check "workbench: n denies the gate" wait_for '^  ✗ denied$'
check "workbench: the model sees the denial" wait_for 'tool said: error: permission denied: denied by the user'
wait_count '^── done' 7 >/dev/null

type_line 's2:submit("slow please")'
# this input's turn, not an earlier one still in the scrollback
wait_after 's2:submit[(]"slow please"[)]' '^── turn t[0-9.]+ · assistant$' 20
T send-keys C-c
check "workbench: Ctrl-C interrupts the running turn" wait_for '^── interrupted \(interrupted\)$'
type_line '"alive_after_turn_interrupt"'
check "workbench: the REPL stays after interrupting a turn" wait_for '^"alive_after_turn_interrupt"$'
sleep 1.1 # more than a second after the last Ctrl-C: the next one is a first one again
type_line 's2:submit("slow again"); rig.sleep(30)'
wait_after 's2:submit[(]"slow again"[)]' '^── turn t[0-9.]+ · assistant$' 20
T send-keys C-c
check "workbench: with a chunk waiting, the first Ctrl-C interrupts the turn" wait_count '^── interrupted \(interrupted\)$' 2
check "workbench: ... and leaves the chunk running" not_on_screen '^interrupted$'
T send-keys C-c
check "workbench: a second Ctrl-C within 1 s cancels the waiting chunk" wait_for '^(\^C)?interrupted$'
type_line ':sessions'
check "workbench: :sessions lists the catalog" wait_for '^ id +title +state +last active +tokens in/out +cost$'
check "workbench: :sessions shows a title" wait_for ' hello bench +(idle|running|stopped) '
type_line 'old_id = s.id; s:shutdown(); s2:shutdown()'
T send-keys C-d
wait_for '^EXIT=' >/dev/null

# a session made by another process, then attached here
cat >"$tmp/other.lua" <<'LUA'
local r = dofile(arg[1])
local s = assert(r:session())
s:submit("from another process")
s:wait_idle(10)
io.write(s.id)
s:shutdown()
LUA
other=$("$LUARIG" "$tmp/other.lua" "$tmp/bench_rig.lua" 2>&1)
start_bench
type_line ":attach $other"
check "workbench: :attach restores a session another process made" wait_for "^── attached to session $other"
type_line 's:history()[1].content[1].text'
check "workbench: the attached session's history is there" wait_for '^"from another process"$'
type_line 's:submit("hello again")'
check "workbench: the attached session runs turns here" wait_for '^  stream_line_two hello again$'
T send-keys C-d
wait_for '^EXIT=' >/dev/null
