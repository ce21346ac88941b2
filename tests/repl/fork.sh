#!/bin/sh
# The REPL's :fork on a real terminal (tmux, 80 columns, as tests/repl/run.sh):
# load a rig with a per_session workspace, run two turns, :fork at the
# first turn's end, see the message and the family tree in :sessions, check
# both histories and both workspaces, and that they diverge. Then the
# quickstart's rig (an exclusive workspace root, 100 columns): a fix approved,
# the workspace rewound, :fork at the fix's turn end hands the root to the
# fork (the fix is back in it), :sessions shows the stopped origin and the
# fork, and :attach ORIGIN hands it back (the rewound tree, the whole history).
# Prints TAP lines "ok - repl fork ..." / "not ok - repl fork ...".
cd "$(dirname "$0")/../.." || exit 1
LUARIG=${LUARIG:-$PWD/build/luarig}
if ! command -v tmux >/dev/null 2>&1; then
	echo "not ok - repl fork tmux is not installed"
	exit 1
fi
tmp=$(mktemp -d)
sock="luarig-fork-test-$$"
T() { tmux -L "$sock" -f /dev/null "$@"; }
trap 'T kill-server >/dev/null 2>&1; rm -rf "$tmp"' EXIT

TAP_PREFIX="repl fork"
. tests/repl/lib.sh

# fits80 PATTERN: every screen line matching PATTERN is at most 80 characters
# (the multibyte characters the table uses count as one).
fits80() {
	screen | grep -E -- "$1" | sed 's/…/./g; s/└/+/g' |
		awk '{ n++; if (length($0) > 80) bad = 1 } END { exit bad || n == 0 }'
}

export FORK_STATE="$tmp/fork"
mkdir -p "$FORK_STATE"
T new-session -d -x 80 -y 50 \
	"TERM=screen NO_COLOR=1 FORK_STATE='$FORK_STATE' XDG_STATE_HOME='$tmp/xdg' '$LUARIG' repl tests/repl/fixtures/fork_rig.lua; echo \"EXIT=\$?\"; sleep 600"
check "repl FILE starts" wait_for '^> ' 10
check "the rig's per_session workspace is named" wait_for '^  workspace +rig\.workspace\.per_session\('

type_line 'o = r:session()'
wait_for '^── attached to session' >/dev/null
type_line 'o:submit("write alpha")'
wait_count '^── done' 1 >/dev/null
type_line 'o:submit("write beta")'
check "two turns ran" wait_count '^── done' 2
type_line 'for rec in o:journal() do if rec.type == "TurnDone" or rec.type == "TurnStarted" then print(rec.type:upper() .. " " .. rec.seq) end end'
wait_count '^TURNDONE [0-9]+$' 2 >/dev/null
seq=$(screen | sed -n 's/^TURNDONE \([0-9]*\)$/\1/p' | head -n 1)
started=$(screen | sed -n 's/^TURNSTARTED \([0-9]*\)$/\1/p' | head -n 1)

type_line ":fork $seq"
check ":fork SEQ says what it forked" \
	wait_for "^forked [0-9a-f-]{36} at $seq -> [0-9a-f-]{36}\$"
check ":fork SEQ attaches the fork" wait_count '^── attached to session' 2
type_line 's.forked_from.session == o.id and s.id ~= o.id'
check "s is the fork, and it names its origin" wait_for '^true$'
type_line '#s:history() .. " fork / origin " .. #o:history()'
check "the fork's history is the origin's first turn" wait_for '^"4 fork / origin 8"$'
type_line 's:history()[4].content[1].text'
check "the fork's history ends with the first turn's answer" wait_for '^"written"$'
type_line 'function files(x) local t = {} for _, n in ipairs { "alpha", "beta", "gamma" } do local f = io.open(x.workspace .. "/" .. n .. ".txt") if f then f:close() t[#t + 1] = n end end return table.concat(t, "+") end'
type_line '"fork has " .. files(s)'
check "the fork's workspace is the checkpoint after the first turn" wait_for '^"fork has alpha"$'
type_line '"origin has " .. files(o)'
check "the origin keeps its later files" wait_for '^"origin has alpha\+beta"$'

type_line ':sessions'
check ":sessions shows the origin first" wait_for "^ [0-9a-f]{8}-[0-9a-f]{4}… +write alpha +idle "
check ":sessions shows the fork under its origin" \
	wait_for "^\\*└ [0-9a-f]{8}-[0-9a-f]{4}… @$seq +write alpha +idle "
check ":sessions puts the fork right after its origin" sh -c "screen() { tmux -L '$sock' -f /dev/null capture-pane -p -J -S -300; }; screen | grep -A1 -E '^ [0-9a-f]{8}-[0-9a-f]{4}… +write alpha' | tail -n 1 | grep -qE '^\\*└ '"
check ":sessions fits in 80 columns" fits80 '(^ id +title|└ )'

type_line 's:submit("write gamma")'
wait_count '^── done' 3 >/dev/null
type_line '"fork has " .. files(s) .. "; origin has " .. files(o)'
check "a turn on the fork diverges from the origin" wait_for '^"fork has alpha\+gamma; origin has alpha\+beta"$'
type_line '#s:history() .. " fork / origin " .. #o:history()'
check "the origin's history is untouched by the fork's turn" wait_for '^"8 fork / origin 8"$'

type_line ':fork'
check ":fork with no SEQ forks at the tip" wait_count "^forked [0-9a-f-]{36} at [0-9]+ -> " 2
type_line ':sessions'
check ":sessions shows a fork of a fork indented twice" \
	wait_for "^\\*  └ [0-9a-f]{8}-[0-9a-f]{4}… @[0-9]+ +write alpha"

type_line "o:fork{ at = $started }"
check "a seq that ends no step is refused, naming it" \
	wait_for "seq $started is a TurnStarted record, not the end of a step or turn"
type_line ":fork 100000"
check ":fork past the tip says so" wait_for "at seq 100000: it is beyond the journal's tip"
type_line ':fork x'
check "a command's refusal is its message alone, no traceback" \
	wait_for '^error: usage: :fork \[SEQ\]'
if screen | grep -q 'stack traceback'; then
	echo "not ok - repl fork a refused command printed a stack traceback"
else
	pass "a refused command prints no stack traceback"
fi

T send-keys C-d
check "exits with status 0" wait_for '^EXIT=0$' 10
T kill-server >/dev/null 2>&1
# a server of its own for the second part: kill-server returns before the old
# server is gone, and a new session on the same socket then meets it dying
# ("server exited unexpectedly": under load the whole second half failed)
sock="$sock-qs"

QS_TMP="$tmp/qs"
mkdir -p "$QS_TMP"
GREET="$QS_TMP/luarig-quickstart/workspace/greet.sh"
T new-session -d -x 100 -y 60 \
	"TERM=screen NO_COLOR=1 TMPDIR='$QS_TMP' XDG_STATE_HOME='$tmp/xdg' '$LUARIG' repl scripts/quickstart.lua; echo \"EXIT=\$?\"; sleep 600"
check "quickstart: repl scripts/quickstart.lua starts" wait_for '^r = rig.define\(workspace-assistant\)' 15
check "quickstart: its workspace is exclusive" wait_for '^  workspace +rig\.workspace\.exclusive\('
type_line 'o = r:session()'
wait_for '^── attached to session' >/dev/null
type_line ':checkpoint'
wait_for '^checkpoint v1:sha256:' >/dev/null
type_line 'o:submit(quickstart.task)'
wait_for '^\? allow bash: run `sh test.sh`' 10 >/dev/null
T send-keys y
wait_for '^\? allow edit_file: edit greet\.sh' 10 >/dev/null
T send-keys y
wait_count '^\? allow bash: run `sh test.sh`' 2 10 >/dev/null
T send-keys y
wait_for '^── snapshot v1:sha256:[0-9a-f]+ \(turn_done\)$' 10 >/dev/null
type_line ':rewind 1'
wait_for '^rewound to v1:sha256:' >/dev/null
check "quickstart: the rewound root has the bug again" grep -q 'Helo,' "$GREET"
type_line 'for rec in o:journal() do if rec.type == "TurnDone" then print("QSDONE " .. rec.seq) end end; print("QSLEN " .. #o:history())'
wait_for '^QSLEN [0-9]+$' >/dev/null
qseq=$(screen | sed -n 's/^QSDONE \([0-9]*\)$/\1/p' | head -n 1)
qlen=$(screen | sed -n 's/^QSLEN \([0-9]*\)$/\1/p' | head -n 1)
oid=$(screen | sed -n 's/^── attached to session \([0-9a-f-]*\) .*/\1/p' | tail -n 1)
short=$(echo "$oid" | cut -c1-8)

type_line ":fork $qseq"
check "quickstart: :fork SEQ forks the session" wait_for "^forked $oid at $qseq -> [0-9a-f-]{36}\$"
check "quickstart: :fork says the origin was checkpointed and shut down, and how to get it back" \
	wait_for "^exclusive workspace root: $short was checkpointed and shut down; :attach $short restores it\$"
check "quickstart: the origin's handover checkpoint is shown" wait_for '^── snapshot v1:sha256:[0-9a-f]+ \(handover\)$'
check "quickstart: the root holds the checkpoint at the cut (the fix)" grep -q 'Hello,' "$GREET"
type_line '"QS " .. tostring(o.closed) .. " " .. tostring(s.forked_from.session == o.id) .. " " .. #s:history()'
check "quickstart: the origin is shut down, s is the fork with the whole first turn" \
	wait_for "^\"QS true true $qlen\"\$"
type_line ':sessions'
check "quickstart: :sessions shows the stopped origin" wait_for "^ $short-[0-9a-f]{4}… +The test in this .* stopped "
check "quickstart: :sessions shows the fork under it" wait_for "^\\*└ [0-9a-f]{8}-[0-9a-f]{4}… @$qseq +The test .* idle "
fid=$(screen | sed -n 's/^forked [0-9a-f-]* at [0-9]* -> \([0-9a-f-]*\)$/\1/p' | tail -n 1)
fshort=$(echo "$fid" | cut -c1-8)

type_line ":attach $short"
check "quickstart: :attach ORIGIN hands the root back from the fork" \
	wait_for "^exclusive workspace root: $fshort was checkpointed and shut down; :attach $fshort restores it\$"
check "quickstart: :attach ORIGIN restores and attaches it" wait_count "^── attached to session $oid " 2
check "quickstart: the origin's tree is back (rewound, the bug)" grep -q 'Helo,' "$GREET"
type_line '"QS2 " .. tostring(s.id == o.id) .. " " .. #s:history()'
check "quickstart: the restored origin has its whole history" wait_for "^\"QS2 true $qlen\"\$"
type_line ':attach '"$fshort"
check "quickstart: :attach FORK brings the fix back" wait_count "^── attached to session $fid " 2
check "quickstart: the fork's tree is back" grep -q 'Hello,' "$GREET"
T send-keys C-d
check "quickstart: exits with status 0" wait_for '^EXIT=0$' 10
