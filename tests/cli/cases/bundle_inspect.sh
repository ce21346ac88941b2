mkdir bundle_inspect && cd bundle_inspect || exit 9
# inspect prints the manifest and the verification.
mkdir -p app/lib
printf '{ "name": "demo", "version": "1.2.0", "entry": "app.cli", "description": "a demo rig" }\n' > app/rig.json
mkdir -p app/app/cli
printf 'print("cli", ...)\n' > app/app/cli/init.lua
printf 'return {}\n' > app/lib/util.lua
printf 'notes\n' > app/README
"$LUARIG" pack app -o out.rig
"$LUARIG" inspect out.rig
echo "inspect: $?"
"$LUARIG" run out.rig x
"$LUARIG" inspect
echo "usage: $?"
"$LUARIG" inspect nothere.rig
