# Without a terminal, `luarig repl` reads standard input line by line: no
# prompt, values printed, multi-line statements, errors reported, exit 0.
printf '%s\n' '1+1' 'function f(a)' '  return a * 2' 'end' 'f(21)' \
	'{ "a\tb", n = 1.5, [10] = true }' 'error("boom")' 'x = ' '"after"' 'x' \
	'rig.spawn(function() rig.sleep(0.05) print("task output") end)' 'rig.sleep(0.2)' \
	'print("printed", 1, nil)' 'return 1, "two"' 'for i = 1, 2 do' | "$LUARIG" repl
echo "exit $?"
# A script runs first; its globals are there afterwards.
printf 'greeting = "hi from script"\n' >script.lua
echo 'greeting' | "$LUARIG" repl script.lua
