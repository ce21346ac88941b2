# A budget kill ends the REPL: reported once, exit 1, later lines not run.
printf '%s\n' '"before"' 'local t = {} for i = 1, 1e8 do t[i] = i end' '"not reached"' |
	"$LUARIG" --max-memory 20M repl
echo "exit $?"
printf '%s\n' 'while true do end' '"not reached"' | "$LUARIG" --max-instructions 1000000 repl
