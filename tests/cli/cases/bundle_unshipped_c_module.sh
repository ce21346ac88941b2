mkdir bundle_unshipped_c_module && cd bundle_unshipped_c_module || exit 9
# No C module on LUA_CPATH (or LUA_CPATH_5_4) loads into a bundle: its
# constructor would run native code no hash covers (it writes ./PWNED).
command -v cc >/dev/null 2>&1 || exit 77
printf '#include <stdio.h>\n__attribute__((constructor)) static void pwn(void) { FILE *f = fopen("PWNED", "w"); if (f) { fputs("native code ran\\n", f); fclose(f); } }\nint luaopen_evil(void *L) { (void)L; return 0; }\nint luaopen_evil_sub(void *L) { (void)L; return 0; }\n' > evil.c
cc -shared -fPIC -o evil.so evil.c || exit 9
mkdir app
printf 'print("package.cpath", ("%%q"):format(package.cpath))\nfor _, m in ipairs{ "evil", "evil.sub" } do\n  local ok, err = pcall(require, m)\n  print(m, ok, err)\nend\n' > app/main.lua
"$LUARIG" pack app -o app.rig >/dev/null
LUA_CPATH="$PWD/?.so" LUA_CPATH_5_4="$PWD/?.so" "$LUARIG" run app.rig
echo "run: $?"
cat PWNED 2>/dev/null || echo "no native code ran"
