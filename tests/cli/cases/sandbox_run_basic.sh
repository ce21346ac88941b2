mkdir sandbox_run_basic && cd sandbox_run_basic || exit 9
# A confined command: its output, stdin and exit status pass through.
"$LUARIG" sandbox run -- sh -c 'echo out; echo err >&2; exit 7'
echo "status: $?"
echo hello | "$LUARIG" sandbox run --workspace . -- cat
echo "status: $?"
# HOME and TMPDIR are the executor's own, not the caller's.
HOME=/root "$LUARIG" sandbox run -- sh -c 'case "$HOME" in /root) echo real home;; */home) echo isolated home;; esac; test -d "$TMPDIR" && echo tmpdir ok'
# A command ended by a signal: 128+N.
"$LUARIG" sandbox run -- sh -c 'kill -TERM $$'
echo "status: $?"
