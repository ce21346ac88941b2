mkdir bundle_luarig_path && cd bundle_luarig_path || exit 9
# LUARIG_PATH (the library from disk, for developing luarig) is ignored while
# a bundle runs, with a notice: a bundle runs the library built into luarig,
# modules and the web console's files alike.
mkdir -p lib/rig app
cp -r "$LUARIG_ROOT"/stdlib/rig/. lib/rig/
printf 'print("PLANTED rig.extra ran") return {}\n' > lib/rig/extra.lua
sed 's/^return json$/json.patched = true\nreturn json/' "$LUARIG_ROOT"/stdlib/rig/json.lua > lib/rig/json.lua
sed 's/^local rig = {$/local rig = { from_disk = true,/' "$LUARIG_ROOT"/stdlib/rig/init.lua > lib/rig/init.lua
printf 'PLANTED console page\n' > lib/rig/console/index.html
printf 'print("init", rig.from_disk)\nprint("patched", rig.json.patched)\nprint("extra", (pcall(require, "rig.extra")))\nprint("console", require("rig.core").asset("rig/console/index.html"):find("PLANTED"))\n' > app/main.lua
"$LUARIG" pack app -o app.rig >/dev/null
LUARIG_PATH=$PWD/lib "$LUARIG" run app.rig
echo "run: $?"
LUARIG_PATH= "$LUARIG" run app.rig
echo "run: $?"
