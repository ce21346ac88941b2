mkdir bundle_unshipped_lua_path && cd bundle_unshipped_lua_path || exit 9
# Nothing on LUA_PATH (or LUA_PATH_5_4) loads into a bundle, and a package.path
# the bundle sets itself reads no file either: no searcher consults it.
# LUA_INIT is not run (luarig never runs it).
mkdir app lib
printf 'print("package.path", ("%%q"):format(package.path))\nprint(pcall(require, "helper"))\npackage.path = "lib/?.lua"\nprint(pcall(require, "helper"))\n' > app/main.lua
"$LUARIG" pack app -o app.rig >/dev/null
printf 'print("PLANTED lib/helper.lua ran") return {}\n' > lib/helper.lua
LUA_PATH="$PWD/lib/?.lua" LUA_PATH_5_4="$PWD/lib/?.lua" LUA_INIT='print("LUA_INIT ran")' \
	LUA_INIT_5_4='print("LUA_INIT_5_4 ran")' "$LUARIG" run app.rig
echo "run: $?"
