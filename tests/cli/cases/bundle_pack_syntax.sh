mkdir bundle_pack_syntax && cd bundle_pack_syntax || exit 9
# pack compiles every .lua file and refuses a syntax error with file:line;
# nothing is written (an older bundle at the output stays as it was), and
# files that are not .lua are not compiled.
mkdir -p app/lib
printf 'print(require("lib.ok").v)\n' > app/main.lua
printf 'return { v = "ok" }\n' > app/lib/ok.lua
printf 'this is data, not Lua\n' > app/notes.txt
"$LUARIG" pack app -o app.rig
cp app.rig before.rig
printf 'local t = {\n  a = 1,\n  b = = 2,\n}\nreturn t\n' > app/lib/bad.lua
printf 'print("unfinished"\n' > app/worse.lua
"$LUARIG" pack app -o app.rig
echo "pack: $?"
cmp -s app.rig before.rig && echo "app.rig unchanged"
rm app/worse.lua
"$LUARIG" pack app -o other.rig
echo "pack: $?"
ls
rm app/lib/bad.lua
"$LUARIG" pack app -o app.rig
echo "pack: $?"
"$LUARIG" run app.rig
