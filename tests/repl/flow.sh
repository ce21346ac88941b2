#!/bin/sh
# The REPL's flow commands on a real terminal (tmux, 80 columns): a run
# started in the REPL is attached and its interrupt drawn; :flows, :flow
# steps, :flow answer, :flow graph and :flow fork. Then a second REPL on the
# same LMDB store attaches the fork (no process holds it any more) with
# :flow ID and answers it. Prints TAP lines "ok - repl flow ...".
cd "$(dirname "$0")/../.." || exit 1
LUARIG=${LUARIG:-$PWD/build/luarig}
if ! command -v tmux >/dev/null 2>&1; then
	echo "not ok - repl flow tmux is not installed"
	exit 1
fi
tmp=$(mktemp -d)
sock="luarig-flow-test-$$"
T() { tmux -L "$sock" -f /dev/null "$@"; }
trap 'T kill-server >/dev/null 2>&1; rm -rf "$tmp"' EXIT

TAP_PREFIX="repl flow"
. tests/repl/lib.sh

mkdir -p "$tmp/st"
DEF="f = dofile('tests/flow/graph.lua')('/dev/null', nil, rig.store.lmdb{ root = '$tmp/st' })"

T new-session -d -x 80 -y 50 \
	"TERM=screen NO_COLOR=1 XDG_STATE_HOME='$tmp/xdg' '$LUARIG' repl; echo \"EXIT=\$?\"; sleep 600"
check "the REPL starts" wait_for '^> ' 10
type_line "$DEF"
type_line 'r1 = f:start({})'
check "a run started in the REPL is attached" wait_for '^── attached to flow run [0-9a-f-]{36} \(crashy, running, step 0\)$'
check "its steps are drawn" wait_for '^── flow step 7: next work, work, work$'
check "its interrupt is drawn" wait_for '^── flow interrupt at ask: \{"items":9\} \(:flow answer VALUE\)$'
type_line ':flows'
check ":flows lists the run, attached" wait_for '^\*[0-9a-f-]{13}  crashy +interrupted step 8$'
type_line ':flow steps'
check ":flow steps lists the checkpoints" wait_for '^step 8 +seq [0-9]+ +next ask +changed items$'
type_line ':flow graph'
check ":flow graph marks the current vertex" wait_for '^  class ask current$'
type_line ':flow answer "yes"'
check ":flow answer resumes the run to its end" wait_for '^── flow done: .*"verdict":"yes"'
type_line ':flow fork 7'
check ":flow fork says what it forked" wait_for '^forked [0-9a-f-]{36} at step 7 -> [0-9a-f-]{36}$'
check "the fork is attached and reaches the interrupt" wait_count '^── flow interrupt at ask' 2
fork=$(screen | sed -n 's/^forked [0-9a-f-]* at step 7 -> \([0-9a-f-]*\)$/\1/p' | tail -n 1)
type_line ':flow bogus-id'
check "an unknown run is one clear line" wait_for "^error: no flow run 'bogus-id' \(:flows lists them\)$"
type_line 'os.exit(0)'
check "the first REPL exits" wait_for '^EXIT=0$' 10

T kill-server >/dev/null 2>&1
# the second half on a tmux server of its own (a new session on the socket
# of a server still dying fails under load)
sock="luarig-flow-test2-$$"
trap 'T kill-server >/dev/null 2>&1; rm -rf "$tmp"' EXIT
T new-session -d -x 80 -y 50 \
	"TERM=screen NO_COLOR=1 XDG_STATE_HOME='$tmp/xdg' '$LUARIG' repl; echo \"EXIT=\$?\"; sleep 600"
check "a second REPL starts" wait_for '^> ' 10
type_line "$DEF"
type_line ':flows'
check "it lists both runs from the store" wait_for "^ $(echo "$fork" | cut -c1-13)  crashy +interrupted step 8$"
type_line ":flow $(echo "$fork" | cut -c1-8)"
check ":flow ID attaches the run from the store" wait_for "^── attached to flow run $fork \(crashy, running, step 8\)$"
check "the attached run's interrupt is drawn again" wait_for '^── flow interrupt at ask'
type_line ':flow answer 42'
check "another process answers it" wait_for '^── flow done: .*"verdict":42'
type_line ':flow'
check ":flow shows the status" wait_for "^flow run $fork \(crashy\): done, step 9$"
