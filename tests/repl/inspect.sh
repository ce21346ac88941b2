# The workbench, issue 8 items 5 and 7: budgets in the prompt, inspecting
# (pretty printers and the pager), :compact, :checkpoint, :rewind, :log,
# :gates. Sourced by tests/repl/run.sh (its helpers: T, wait_for, check, …).

INS_STATE="$tmp/ins-state"
INS_WS="$tmp/ins-ws"
mkdir -p "$INS_WS"
# start_ins RIG ROWS: a REPL on a fixture rig in a window ROWS high.
start_ins() {
	T kill-server >/dev/null 2>&1
	n_start=$((n_start + 1))
	T new-session -d -x 100 -y "$2" \
		"TERM=screen NO_COLOR=1 BENCH_STATE='$INS_STATE' BENCH_WS='$INS_WS' XDG_STATE_HOME='$XDG_STATE_HOME' '$LUARIG' repl 'tests/repl/fixtures/$1'; echo \"EXIT=\$?\"; sleep 600"
	wait_for '^> ' 10
}
BUDGET='^[0-9a-f]{8} \[tokens'
check "inspect: repl on a rig with per-turn limits starts" start_ins budget_rig.lua 24
type_line 's = r:session()'
check "budget: the prompt shows the whole per-turn budget before a turn" \
	wait_for "$BUDGET 20k/20k left, \\\$0\\.50/\\\$0\\.50 left\\]> \$"
type_line 's:submit("write first")'
check "budget: after a turn the prompt shows what it left" \
	wait_for "$BUDGET 13k/20k left, \\\$0\\.42/\\\$0\\.50 left\\]> \$"
wait_for '^── snapshot v1:sha256:[0-9a-f]+ \(turn_done\)$' >/dev/null
type_line ':checkpoint'
check ":checkpoint snapshots the workspace" wait_for '^checkpoint v1:sha256:[0-9a-f]{64}$'
type_line 's:submit("write second")'
wait_count '^── snapshot v1:sha256:[0-9a-f]+ \(turn_done\)$' 2 >/dev/null
check ":rewind: the turn changed the workspace file" grep -qx second "$INS_WS/note.txt"
type_line 's:snapshots()'
check "s:snapshots() prints a table" wait_for '^#  seq  event +trigger +consistency$'
check "s:snapshots() lists the manual checkpoint" wait_for '^2  [0-9]+ +snapshot  manual '
type_line ':rewind 2'
check ":rewind N rewinds to the Nth snapshot" wait_for '^rewound to v1:sha256:[0-9a-f]{64}$'
check ":rewind: the file in the workspace is back" grep -qx first "$INS_WS/note.txt"
type_line 's:usage()'
check "s:usage() prints one counter a line" wait_for '^input tokens +12000$'
check "s:usage() prints the cost" wait_for '^cost +\$0\.1600$'
type_line 's:history()'
check "s:history() prints one block per message" wait_for '^\[3\] tool$'
check "s:history() shows a tool call with its input" wait_for '^  → note \{"text":"second"\}$'
check "s:history() shows a tool result" wait_for '^  ← noted$'
type_line ':compact'
check ":compact compacts the attached session" wait_for '^compacted: [0-9]+ messages summarized, [0-9]+ kept$'
type_line ':history'
check ":history shows the summary message" wait_for '^  \[summary of the earlier conversation\]'
check ":history is longer than the window: the pager waits" wait_for '^-- more \([0-9]+ lines\) --$'
T send-keys q

# :log follows the journal: a turn started after it shows its records.
type_line 'rig.spawn(function() rig.sleep(1) s:submit("live_log_marker") end)'
type_line ':log 1'
check ":log follows the journal (a later turn's records appear)" \
	wait_for '^ +[0-9]+ TurnStarted  loop_id=budgeted turn_id=t[0-9.]+ message=user:"live_log_marker"'
check ":log shows the later turn's end" \
	wait_for '^ +[0-9]+ TurnDone  loop_id=budgeted turn_id=t[0-9.]+ message=assistant:"ok: live_log_marker"'
T send-keys C-c
check "Ctrl-C stops :log" wait_for '^(\^C)?interrupted$'
check "budget: the prompt is back with what the last turn left" \
	wait_for "$BUDGET 16\\.5k/20k left, \\\$0\\.46/\\\$0\\.50 left\\]> \$"

# The pager: the journal is longer than the 24-line window (a page: 23 records).
type_line 'last_seq = 0; for rec in s:journal() do last_seq = rec.seq end; print("last=" .. last_seq)'
wait_for '^last=[0-9]+$' >/dev/null
last=$(screen | sed -n 's/^last=\([0-9]*\)$/\1/p' | tail -n 1)
type_line 'io.write("\27[2J\27[H")'
sleep 0.2
T clear-history
type_line 'rig.spawn(function() rig.sleep(1.5) print("tick_while_" .. "paging") end)'
type_line ':journal'
check "pager: a long journal stops at a screenful" wait_for '^-- more \([0-9]+ lines\) --$'
check "pager: the event loop runs while it waits (a task prints)" wait_for '^tick_while_paging$' 4
check "pager: record 24 is not shown yet" not_on_screen '^ +24 [A-Z]'
T send-keys Enter
check "pager: Enter shows one more line" wait_for '^ +24 [A-Z]'
T send-keys q
type_line '"after_pager"'
check "pager: q stops and the prompt takes lines again" wait_for '^"after_pager"$'
check "pager: q stopped before the journal's end" not_on_screen "^ *$last [A-Z]"
type_line 's:journal{ from = 1 }'
wait_for '^-- more \([0-9]+ lines\) --$' >/dev/null
T send-keys ' '
check "pager: s:journal{...} typed alone is paged; space shows the rest" wait_for "^ *$last [A-Z]"
type_line '"after_space"'
check "pager: the prompt is back after the last page" wait_for '^"after_space"$'
type_line 's:shutdown()'
type_line '"after_shutdown"'
check "budget: a shut-down session's budget leaves the prompt" wait_for '^> "after_shutdown"$'
T send-keys C-d
wait_for '^EXIT=' >/dev/null

# A rig without limits keeps the plain prompt; :gates lists another session's gate.
INS_STATE="$tmp/ins-state2"
check "inspect: repl on a rig without limits starts" start_ins bench_rig.lua 40
type_line 'other = r:session(); s = r:session()'
wait_count '^── attached to session' 2 >/dev/null
type_line '"plain_prompt"'
check "budget: without limits the prompt stays '> '" wait_for '^> "plain_prompt"$'
type_line 'other:submit("fetch for gates")'
check ":gates: a gate of an unattached session is announced" wait_for '^── gate g[0-9.]+ open in session '
type_line ':gates'
check ":gates lists the unattached session's gate" wait_for '^ [0-9a-f-]{36} +g[0-9.]+ +fetch +fetch example\.org$'
T send-keys C-d
wait_for '^EXIT=' >/dev/null

# The quickstart's rig in the REPL, on its scripted model: a fix approved with
# one key per gate, then the workspace rewound to a checkpoint from before it.
QS_TMP="$tmp/qs"
mkdir -p "$QS_TMP"
start_qs() {
	T kill-server >/dev/null 2>&1
	n_start=$((n_start + 1))
	T new-session -d -x 100 -y 40 \
		"TERM=screen NO_COLOR=1 TMPDIR='$QS_TMP' XDG_STATE_HOME='$XDG_STATE_HOME' '$LUARIG' repl scripts/quickstart.lua; echo \"EXIT=\$?\"; sleep 600"
	wait_for '^> ' 15
}
check "quickstart: repl scripts/quickstart.lua binds its rig" start_qs
check "quickstart: the rig is described" wait_for '^r = rig.define\(workspace-assistant\) from scripts/quickstart.lua$'
type_line 's = r:session()'
check "quickstart: its per-turn token budget is in the prompt" wait_for "$BUDGET 400k/400k left\\]> \$"
type_line ':checkpoint'
wait_for '^checkpoint v1:sha256:' >/dev/null
type_line 's:submit(quickstart.task)'
check "quickstart: the first command asks" wait_for '^\? allow bash: run `sh test.sh` in \. \(timeout 60 s\)$' 10
T send-keys y
wait_for '^\? allow edit_file: edit greet\.sh' 10 >/dev/null
T send-keys y
wait_count '^\? allow bash: run `sh test.sh`' 2 10 >/dev/null
T send-keys y
check "quickstart: the fix is made and the test passes" wait_for '^    │ ok - greet\.sh greets$' 10
check "quickstart: the file in the workspace is fixed" grep -q 'Hello,' "$QS_TMP/luarig-quickstart/workspace/greet.sh"
wait_for '^── snapshot v1:sha256:[0-9a-f]+ \(turn_done\)$' 10 >/dev/null
type_line ':rewind 1'
check "quickstart: :rewind 1 goes back to the checkpoint" wait_for '^rewound to v1:sha256:'
check "quickstart: the workspace has the bug again" grep -q 'Helo,' "$QS_TMP/luarig-quickstart/workspace/greet.sh"
T send-keys C-d
check "quickstart: the REPL exits cleanly" wait_for '^EXIT=0$' 10
