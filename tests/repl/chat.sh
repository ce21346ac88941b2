# The REPL's first hour (issue 19 §5): Tab on a session and a rig
# (s:<Tab> used to raise "bad argument #1 to 'rawget'"), ':' commands and
# their arguments, :quit, chat mode (lines are input, the turn streams, a
# gate takes its key), and :fork refusing a cut with no checkpoint on an
# exclusive root. Sourced by tests/repl/run.sh (its helpers: T, wait_for,
# check, …).

CH_STATE="$tmp/chat-state"
# start_ch RIG [ENV]: a REPL on a fixture rig.
start_ch() {
	T kill-server >/dev/null 2>&1
	n_start=$((n_start + 1))
	T new-session -d -x 100 -y 40 \
		"TERM=screen NO_COLOR=1 BENCH_STATE='$CH_STATE' $2 XDG_STATE_HOME='$XDG_STATE_HOME' '$LUARIG' repl 'tests/repl/fixtures/$1'; echo \"EXIT=\$?\"; sleep 600"
	wait_for '^> ' 10
}
# the prompt line as it is now (the last one on the screen)
prompt_is() { [ "$(T capture-pane -p | grep -v '^$' | tail -n 1)" = "$1" ]; }

check "first hour: repl on the bench rig starts" start_ch bench_rig.lua
type_line 's = r:session()'
wait_for '^── attached to session ' >/dev/null
type_text 's:'
T send-keys Tab Tab
# the list is laid out in columns whose count depends on how many methods there are:
# wait for its first row, then look for methods anywhere in it
check "Tab after 's:' lists the session's methods" wait_for '^s:checkpoint +s:[a-z_]+ '
listed() { for m in fork submit wait_idle history; do wait_for "(^| )s:$m( |\$)" || return 1; done; }
check "the list holds s:fork, s:submit, s:wait_idle and s:history" listed
check "Tab after 's:' raises nothing" not_on_screen "bad argument|rawget|^error:"
check "methods of the session's metatable only, no metamethods" not_on_screen 's:__index|s:__tostring'
T send-keys C-u
type_text 'r:resto'
T send-keys Tab
check "Tab completes a rig's method (its __index is a function)" wait_for '^> r:restore *$'
T send-keys C-u
type_text 'rig.ser'
T send-keys Tab
check "Tab completes a rig module not loaded yet" wait_for '^> rig\.serve *$'
T send-keys C-u
type_text ':he'
T send-keys Tab
check "Tab completes a ':' command" wait_for '^> :help *$'
T send-keys Enter
check ":help says Ctrl-D leaves as :quit does" wait_for '^:quit +leave the REPL \(Ctrl-D on an empty line does the same\)$'
check ":help lists chat mode" wait_for '^:chat \[TEXT\] +chat mode'
type_line ':sessions'
wait_for '^ id +title' >/dev/null
sid=$(T capture-pane -p -J -S -300 | sed -n 's/^── attached to session \([0-9a-f-]*\) .*/\1/p' | tail -n 1)
type_text ":attach $(echo "$sid" | cut -c1-6)"
T send-keys Tab
check "Tab completes a session id after :attach" wait_for "^> :attach $sid\$"
T send-keys C-u

# chat mode
type_line ':chat'
check ":chat enters chat mode" wait_for '^── chat with session [0-9a-f]{8}: each line is its input \(:chat again for Lua\)$'
check "the prompt says chat" wait_for '^chat> $'
type_line 'hello chat'
check "a chat line is the session's input, its turn streams" wait_for '^  stream_line_two hello chat$'
check "the turn ends" wait_for '^── done · [0-9]+ in / [0-9]+ out tokens$'
check "the chat prompt comes back after the turn" wait_count '^chat> ' 2
type_line 'fetch in chat'
check "a gate opens in chat mode" wait_for '^\? allow fetch: fetch example.org$'
T send-keys y
check "y answers it" wait_for '^  ✓ approved$'
check "the approved call ran" wait_for '^    │ fetched example.org$'
check "the chat turn ends after the tool" wait_count '^── done' 2
type_line 's:history()[1].content[1].text'
check "Lua is not run in chat mode (the line was input)" wait_for '^  stream_line_two s:history\(\)\[1\]\.content\[1\]\.text$'
wait_count '^── done' 3 >/dev/null
type_line ':chat'
check ":chat again goes back to Lua" wait_for '^── Lua again \(:chat talks to the session\)$'
type_line 's:history()[1].content[1].text'
check "Lua runs again" wait_for '^"hello chat"$'
type_line ':chat one more'
check ":chat TEXT sends one line" wait_for '^  stream_line_two one more$'
type_line '"still_lua"'
check "... and stays in Lua" wait_for '^"still_lua"$'
# :file: an image for the next chat line, checked by its bytes (issue 21 §1)
printf '\211PNG\r\n\032\n\0\0\0\rIHDR0123456789abcdef0' >"$tmp/shot.png"
printf 'not an image' >"$tmp/fake.png"
type_line ":file $tmp/fake.png"
check ":file refuses a file that is no image or document, saying why" wait_for '^error: file: .*fake\.png: not a document this runtime takes'
type_line ":file $tmp/shot.png"
check ":file takes a PNG for the next line" wait_for '^── image shot\.png \(image/png, 33 bytes\) goes with the next chat line$'
type_line ':chat what is this'
check "... which goes with that line" wait_for '^  stream_line_two what is this$'
type_line 'h = s:history(); b = h[#h - 1].content[2]; print(b.type, b.media_type, b.size, #b.blob)'
check "the session holds the image as a stored reference" wait_for '^image[[:space:]]+image/png[[:space:]]+33[[:space:]]+64$'
type_line ':quit'
check ":quit leaves the REPL with status 0" wait_for '^EXIT=0$'

# :fork on an exclusive root before any checkpoint: refused, with the way out
export FORK_STATE_X="$tmp/fork-x"
mkdir -p "$FORK_STATE_X"
check "fork: repl on an exclusive root starts" start_ch fork_rig.lua "FORK_EXCLUSIVE=1 FORK_STATE='$FORK_STATE_X'"
type_line 'o = r:session()'
wait_for '^── attached to session ' >/dev/null
type_line 'o:submit("write alpha")'
wait_for '^── snapshot v1:sha256:[0-9a-f]+ \(idle\)$' >/dev/null
type_line 'for rec in o:journal() do if rec.type == "StepDone" then print("STEPDONE " .. rec.seq) end end'
wait_count '^STEPDONE [0-9]+$' 2 >/dev/null
first=$(T capture-pane -p -J -S -300 | sed -n 's/^STEPDONE \([0-9]*\)$/\1/p' | head -n 1)
second=$(T capture-pane -p -J -S -300 | sed -n 's/^STEPDONE \([0-9]*\)$/\1/p' | sed -n 2p)
type_line ":fork $first"
check ":fork before any checkpoint is refused, naming a later seq and :checkpoint" \
	wait_for "^error: fork: cannot fork at seq $first: no workspace checkpoint is in force there, so the fork would start with an empty root while its history says the work was done; fork at seq $second \\(the next step end with one\\), or :checkpoint now and :fork at the last step\$"
type_line 's == o'
check "the refused fork left the session attached" wait_for '^true$'
check "... and its files in the root" test -f "$FORK_STATE_X/root/alpha.txt"
type_line "s:fork{ at = $first }"
check "s:fork in the REPL is refused the same way" wait_for "^nil[[:space:]]+\"cannot fork at seq $first: no workspace checkpoint"
type_line ":fork $second"
check ":fork at the seq it named works" wait_for "^forked [0-9a-f-]{36} at $second -> [0-9a-f-]{36}\$"
type_line 'io.open(s.workspace .. "/alpha.txt") ~= nil'
check "the fork's root has the file" wait_for '^true$'
T send-keys C-d
wait_for '^EXIT=' >/dev/null

# the same cut on a per_session workspace forks (the origin keeps its tree) and warns
export FORK_STATE_P="$tmp/fork-p"
mkdir -p "$FORK_STATE_P"
check "fork: repl on a per_session workspace starts" start_ch fork_rig.lua "FORK_STATE='$FORK_STATE_P'"
type_line 'o = r:session()'
wait_for '^── attached to session ' >/dev/null
type_line 'o:submit("write alpha")'
wait_for '^── snapshot v1:sha256:[0-9a-f]+ \(turn_done\)$' >/dev/null
type_line 'for rec in o:journal() do if rec.type == "StepDone" then print("STEPDONE " .. rec.seq) end end'
wait_count '^STEPDONE [0-9]+$' 2 >/dev/null
first=$(T capture-pane -p -J -S -300 | sed -n 's/^STEPDONE \([0-9]*\)$/\1/p' | head -n 1)
type_line ":fork $first"
check ":fork with no checkpoint at the cut forks a per_session workspace" wait_for "^forked [0-9a-f-]{36} at $first -> "
check "... and warns that the fork's workspace is empty, with the way out" \
	wait_for "^── the fork's workspace is empty: no checkpoint was in force at seq $first \\(its history says the work was done\\); for its files fork at seq [0-9]+ \\(the next step end with one\\), or :checkpoint now and :fork at the last step\$"
type_line 'io.open(s.workspace .. "/alpha.txt") == nil and io.open(o.workspace .. "/alpha.txt") ~= nil'
check "the fork's directory is empty, the origin's is not" wait_for '^true$'
T send-keys C-d
wait_for '^EXIT=' >/dev/null
