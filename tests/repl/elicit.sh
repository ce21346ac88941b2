#!/bin/sh
# The REPL on a real terminal (tmux, 100 columns): a loop's MCP server (luarig's own
# conformance fixture over stdio) asks the person through a tool call (elicitation);
# the REPL shows the question with its fields and defaults, y accepts (the client
# fills the defaults in), and the tool's answer reaches the model; :answer fills fields
# by hand; n declines. :mcp lists the server with its tools, :mcp ev its tools as loops
# see them. Prints TAP lines "ok - repl elicit ..." / "not ok - ...".
cd "$(dirname "$0")/../.." || exit 1
LUARIG=${LUARIG:-$PWD/build/luarig}
export LUARIG_ROOT=${LUARIG_ROOT:-$PWD}
if ! command -v tmux >/dev/null 2>&1; then
	echo "not ok - repl elicit tmux is not installed"
	exit 1
fi
tmp=$(mktemp -d)
sock="luarig-elicit-test-$$"
T() { tmux -L "$sock" -f /dev/null "$@"; }
trap 'T kill-server >/dev/null 2>&1; rm -rf "$tmp"' EXIT

TAP_PREFIX="repl elicit"
. tests/repl/lib.sh

T new-session -d -x 100 -y 50 \
	"TERM=screen NO_COLOR=1 LUARIG='$LUARIG' LUARIG_ROOT='$LUARIG_ROOT' XDG_STATE_HOME='$tmp/xdg' '$LUARIG' repl tests/repl/fixtures/elicit_rig.lua; echo \"EXIT=\$?\"; sleep 600"
check "repl FILE starts" wait_for '^> ' 20
type_line ':mcp'
check ":mcp lists the server: transport, state, protocol" wait_for '^ev +stdio +ready +2025-11-25 '
type_line ':mcp ev'
check ":mcp NAME lists its tools as loops see them" wait_for '^ev__test_simple_text: Returns simple text$'
type_line ':mcp'
check ":mcp counts the tools once listed" wait_for '^ev +stdio +ready +2025-11-25 +[0-9]+ tools$'
type_line ':chat go'
check "the server's question is shown" wait_for '^\? ev asks: Please review and update the form fields with defaults$' 20
check "with its fields and defaults" wait_for '^  name \(string\) = "John Doe": User name$'
check "and the keys" wait_for '^  \[y\] accept \(the defaults\) · \[n\] decline · \[c\] cancel'
T send-keys y
check "y answers it" wait_for '^  ✓ answered$'
check "the defaults reach the server, its answer the model" \
	wait_for 'the server said: Elicitation completed: action=accept, content=\{"age":30,"name":"John' 20
check "the turn ends" wait_for '^── done'
type_line ':chat again'
wait_count '^\? ev asks: Please review' 2 20 || fail "a second question is shown"
T send-keys n
check "n declines" wait_for '^  ✗ declined$'
check "the server hears the decline" wait_for 'the server said: Elicitation completed: action=decline' 20
wait_count '^── done' 2 20 || fail "the second turn ends"
# from Lua (`:chat TEXT` sent one line each; the mode is off), the prompt stays while a
# turn runs, so a question can be answered by hand
type_line 's:submit("by hand")'
wait_count '^\? ev asks: Please review' 3 20 || fail "a third question is shown"
# another key leaves the key mode and says how to answer
T send-keys x
check "another key says how to answer" wait_for '^  y, n or c \(answering i[0-9.]+\); :answer i[0-9.]+ accept FIELD=VALUE'
id=$(screen | sed -n 's/^  y, n or c (answering \(i[0-9.]*\)).*/\1/p' | tail -n 1)
type_line ":answer $id accept name=Ada age=36"
check ":answer fills the fields, the defaults the rest" \
	wait_for '^  content=\{"age":36,"name":"Ada","score":95.5,"status":"active","verified":true\}$' 20
# the enum forms of SEP-1330: the choices are shown; :answer takes VALUE,VALUE for many
type_line 's:submit("enums")'
check "single choices are listed" wait_for '^  titledSingle \(string: value1 "First Option" \| value2 "Second Option" \| value3 "Third Option"\)$' 20
check "multiple choices are listed" wait_for '^  untitledMulti \(array of option1 \| option2 \| option3\)$'
T send-keys x
wait_count '^  y, n or c \(answering' 2 10 || fail "the key mode is left for :answer"
id=$(screen | sed -n 's/^  y, n or c (answering \(i[0-9.]*\)).*/\1/p' | tail -n 1)
type_line ":answer $id accept untitledSingle=option2 untitledMulti=option1,option3 titledMulti=value2"
check ":answer types a multiple choice as a list" \
	wait_for '"titledMulti":\["value2"\],"untitledMulti":\["option1","option3"\],"untitledSingle":"option2"' 20
type_line ':answer nope accept'
check ":answer of no open question is one line" wait_for "^error: answer: "
T send-keys C-d
check "exits with status 0" wait_for '^EXIT=0$' 10
