# luarig serve's refusals speak the command line's words: a public bind
# names --auth-token-file and --insecure-public-bind (not the Lua option),
# and a rig file's definition error is one line, with no line of luarig's.
mkdir serve_cli_errors && cd serve_cli_errors || exit 9
cat > rig.lua <<'LUA'
return rig.define{ loops = { rig.loop{ name = "a", model = rig.model.script{ { text = "hi" } } } },
                   primers = { "a" }, store = rig.store.memory() }
LUA
"$LUARIG" serve rig.lua --listen 0.0.0.0:0; echo "public bind: $?"
cat > nostore.lua <<'LUA'
return rig.define{ loops = { rig.loop{ name = "a", model = rig.model.script{ { text = "hi" } } } },
                   primers = { "a" } }
LUA
"$LUARIG" serve nostore.lua; echo "definition error: $?"
printf 'local l = rig.loop{ name = "a", modle = 1 }\n' > typo.lua
"$LUARIG" serve typo.lua; echo "field typo: $?"
printf 'return 42\n' > notarig.lua
"$LUARIG" serve notarig.lua; echo "not a rig: $?"
"$LUARIG" serve rig.lua --auth-token-file missing-token; echo "token file: $?"
