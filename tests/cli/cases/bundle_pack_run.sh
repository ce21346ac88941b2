mkdir bundle_pack_run && cd bundle_pack_run || exit 9
# Pack a small multi-module app and run it from the archive with arguments.
mkdir -p app/lib app/.git
printf '{ "name": "demo", "version": "1.2.0", "description": "a demo rig" }\n' > app/rig.json
printf 'local util = require "lib.util"\nprint(util.greet(...))\nprint("arg", arg[0], arg[1], #arg)\nprint("searcher", (package.searchpath and "ok"))\nreturn 0\n' > app/main.lua
printf 'return { greet = function(...) return "hello " .. table.concat({...}, "+") end }\n' > app/lib/util.lua
echo 'ref: refs/heads/main' > app/.git/HEAD
"$LUARIG" pack app
echo "pack: $?"
rm -rf app
"$LUARIG" run demo-1.2.0.rig one two
echo "run: $?"
"$LUARIG" run ./demo-1.2.0.rig
