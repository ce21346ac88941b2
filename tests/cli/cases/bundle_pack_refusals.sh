mkdir bundle_pack_refusals && cd bundle_pack_refusals || exit 9
# pack refuses what a bundle cannot hold, naming the path.
mkdir -p a && printf 'print(1)\n' > a/main.lua
ln -s main.lua a/link.lua
"$LUARIG" pack a -o a.rig; echo "symlink: $?"
rm a/link.lua && mkfifo a/pipe
"$LUARIG" pack a -o a.rig; echo "fifo: $?"
rm a/pipe && printf '\033LuaT\000junk' > a/compiled.lua
"$LUARIG" pack a -o a.rig; echo "bytecode: $?"
rm a/compiled.lua && mv a/main.lua a/start.lua
"$LUARIG" pack a -o a.rig; echo "no entry: $?"
printf '{ "entry": "start", "nmae": "x" }' > a/rig.json
"$LUARIG" pack a -o a.rig; echo "unknown field: $?"
printf '{ "entry": "start", "version": "one" }' > a/rig.json
"$LUARIG" pack a -o a.rig; echo "bad version: $?"
printf '{ "entry": "start", "name": "a b" }' > a/rig.json
"$LUARIG" pack a -o a.rig; echo "bad name: $?"
printf '{ "entry": "start" ' > a/rig.json
"$LUARIG" pack a -o a.rig; echo "bad json: $?"
printf '{ "entry": "start" }' > a/rig.json
"$LUARIG" pack a -o a.rig; echo "ok: $?"
"$LUARIG" pack nothere; echo "no dir: $?"
"$LUARIG" pack; echo "usage: $?"
ls
