mkdir bundle_unshipped_cwd && cd bundle_unshipped_cwd || exit 9
# A module the bundle does not ship is never loaded from the current directory:
# not a planted ./config.lua, ./plugins/extra/init.lua, nor a ./rig/extra.lua.
mkdir app
printf 'for _, m in ipairs{ "config", "plugins.extra", "rig.extra" } do\n  local ok, err = pcall(require, m)\n  print(m, ok, err)\nend\n' > app/main.lua
"$LUARIG" pack app -o app.rig >/dev/null
mkdir -p plugins/extra rig
printf 'print("PLANTED ./config.lua ran") return {}\n' > config.lua
printf 'print("PLANTED ./plugins/extra/init.lua ran") return {}\n' > plugins/extra/init.lua
printf 'print("PLANTED ./rig/extra.lua ran") return {}\n' > rig/extra.lua
"$LUARIG" run app.rig
echo "run: $?"
