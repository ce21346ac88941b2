# :quit ends the REPL as the end of input does (exit 0): what follows is not run.
printf '%s\n' '"before"' ':quit' '"after"' | "$LUARIG" repl
echo "status $?"
printf '%s\n' ':help' | "$LUARIG" repl | grep -E '^:(quit|chat)'
