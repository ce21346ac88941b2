# Delegation through the planner's gate on a real terminal (issue 16 §7):
# each start_agent asks once with one key, y approves, a saves a rule for
# that delegate (the next call to it is not asked), another delegate still
# asks and n denies it (the model reads the denial). Sourced by
# tests/repl/run.sh (its helpers: T, wait_for, wait_count, check, …).

DG_STATE="$tmp/deleg-state"
start_dg() {
	T kill-server >/dev/null 2>&1
	n_start=$((n_start + 1))
	T new-session -d -x 100 -y 40 \
		"TERM=screen NO_COLOR=1 BENCH_STATE='$DG_STATE' XDG_STATE_HOME='$XDG_STATE_HOME' '$LUARIG' repl tests/repl/fixtures/deleg_rig.lua; echo \"EXIT=\$?\"; sleep 600"
	wait_for '^> ' 10
}
check "delegation: repl on a rig whose planner delegates starts" start_dg
type_line 's = r:session()'
wait_for '^── attached to session ' >/dev/null
type_line 's:submit("delegate alpha")'
check "delegation: start_agent opens a gate" wait_for '^\? allow start_agent: start agent researcher: alpha$'
check "delegation: the gate names the delegate it needs" wait_for '^  needs: delegate researcher$'
check "delegation: 'always' would save a rule for that delegate" \
	wait_for '^  \[y\] approve · \[a\] always \(saves allow delegate researcher\) · \[n\] deny · \[\?\] details$'
check "delegation: no agent starts before the answer" not_on_screen '^── agent researcher#1 started'
T send-keys y
check "delegation: y approves the delegation" wait_for '^  ✓ approved$'
check "delegation: the approved agent starts and answers" wait_for '^  planner got: research on alpha$'
wait_count '^── done' 2 >/dev/null

type_line 's:submit("delegate beta")'
check "delegation: the next delegate call asks again" wait_count '^\? allow start_agent: start agent researcher' 2
T send-keys a
check "delegation: a approves always" wait_for '^  ✓ approved always$'
check "delegation: ... and the call ran" wait_for '^  planner got: research on beta$'
saved_rule() { grep -q '"kind": "delegate"' "$DG_STATE.rules.json" && grep -q '"match": "researcher"' "$DG_STATE.rules.json"; }
check "delegation: the saved rule matches the delegate" saved_rule
wait_count '^── done' 4 >/dev/null

type_line 's:submit("delegate gamma")'
check "delegation: the saved rule allows that delegate without a question" \
	wait_for '^  ✓ start_agent allowed by a saved rule$'
check "delegation: ... and the agent ran" wait_for '^  planner got: research on gamma$'
check "delegation: no question for the third call" test "$(screen | grep -c '^? allow start_agent')" -eq 2
wait_count '^── done' 6 >/dev/null

type_line 's:submit("critic delta")'
check "delegation: another delegate still asks" wait_for '^\? allow start_agent: start agent critic: delta$'
T send-keys n
check "delegation: n denies the delegation" wait_for '^  ✗ denied$'
check "delegation: the model sees the denial" \
	wait_for '^  planner got: error: permission denied: denied by the user$'
check "delegation: the denied agent never started" not_on_screen '^── agent critic#'
type_line 's:shutdown()'
T send-keys C-d
wait_for '^EXIT=' >/dev/null
