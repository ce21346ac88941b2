mkdir sandbox_run_usage && cd sandbox_run_usage || exit 9
# luarig's own failures are 125; a command not in the view is 127.
"$LUARIG" sandbox run
echo "status: $?"
"$LUARIG" sandbox run --profile nosuch -- true
echo "status: $?"
"$LUARIG" sandbox run --profile unconfined -- true
echo "status: $?"
"$LUARIG" sandbox run --profile readonly --allow-net example.com:443 -- true
echo "status: $?"
"$LUARIG" sandbox run --allow-net example.com -- true
echo "status: $?"
"$LUARIG" sandbox run --timeout -1 -- true
echo "status: $?"
"$LUARIG" sandbox run --frobnicate -- true
echo "status: $?"
"$LUARIG" sandbox run --workspace /nonexistent -- true
echo "status: $?"
"$LUARIG" sandbox run -- no-such-command-xyz
echo "status: $?"
"$LUARIG" sandbox run -- true
echo "status: $?"
