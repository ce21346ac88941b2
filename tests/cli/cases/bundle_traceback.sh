mkdir bundle_traceback && cd bundle_traceback || exit 9
# Errors inside bundle modules name the file inside the bundle.
mkdir -p app/lib
printf 'local util = require "lib.util"\nutil.fail()\n' > app/main.lua
printf 'local M = {}\nfunction M.fail()\n  error("broken inside")\nend\nreturn M\n' > app/lib/util.lua
"$LUARIG" pack app -o app.rig >/dev/null
"$LUARIG" run app.rig
echo "run: $?"
mkdir -p app2
printf 'local ok, err = pcall(require, "nothere")\nprint(ok, (err:match("no module .nothere. in bundle .app2.rig.")))\nprint(pcall(require, "rig.nothere"))\n' > app2/main.lua
"$LUARIG" pack app2 -o app2.rig >/dev/null
"$LUARIG" run app2.rig 2>&1 | head -3
