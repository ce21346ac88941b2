# LUARIG_PATH loads the rig library from disk first: an edited module, and a new one.
mkdir -p lib/rig
cp -r "$LUARIG_ROOT"/stdlib/rig/. lib/rig/
printf 'return { hello = function() return "from disk" end }\n' > lib/rig/extra.lua
sed 's/^return json$/json.patched = true\nreturn json/' "$LUARIG_ROOT"/stdlib/rig/json.lua > lib/rig/json.lua
LUARIG_PATH=$PWD/lib "$LUARIG" -e 'print(require("rig.extra").hello(), rig.json.patched)'
"$LUARIG" -e 'print((pcall(require, "rig.extra")), rig.json.patched)'
