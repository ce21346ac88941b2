# The commands written in Lua (serve, mcp serve, flow) parse their command
# line one way (stdlib/rig/cli_args.lua): "--opt VALUE" and "--opt=VALUE",
# the same usage errors with the command's name, exit status 2.
# Both serve commands load their rig script one way too.
printf 'secret-token-0123456789\n' > token
"$LUARIG" serve rig.lua --listen; echo "serve, no value: $?"
"$LUARIG" serve rig.lua --bogus; echo "serve, unknown: $?"
"$LUARIG" serve a.lua b.lua; echo "serve, two scripts: $?"
"$LUARIG" serve --allow-host=a.example:80 rig.lua; echo "serve, a port: $?"
"$LUARIG" serve --listen=127.0.0.1:0 --auth-token-file=token; echo "serve, no script: $?"
"$LUARIG" mcp serve rig.lua --http; echo "mcp serve, no value: $?"
"$LUARIG" mcp serve rig.lua --insecure-public-bind=1; echo "mcp serve, a switch with a value: $?"
"$LUARIG" mcp serve rig.lua a.lua; echo "mcp serve, two scripts: $?"
"$LUARIG" mcp serve --auth-token-file token rig.lua; echo "mcp serve, a token without --http: $?"
"$LUARIG" flow show --run 2>&1 | head -n 1; echo "flow, no value"
"$LUARIG" flow show a b 2>&1 | head -n 1; echo "flow, two ids"
"$LUARIG" flow runs --state=s --store=nats://127.0.0.1:1 2>&1 | head -n 1; echo "flow, both stores"
printf 'return 42\n' > notarig.lua
printf 'local l = rig.loop{ name = "a", modle = 1 }\n' > typo.lua
"$LUARIG" mcp serve notarig.lua; echo "mcp serve, not a rig: $?"
"$LUARIG" mcp serve typo.lua; echo "mcp serve, a definition error: $?"
