mkdir bundle_loadlib && cd bundle_loadlib || exit 9
# package.loadlib in a bundle loads no C library: dlopen alone would run the
# library's constructor (it writes ./PWNED).
command -v cc >/dev/null 2>&1 || exit 77
printf '#include <stdio.h>\n__attribute__((constructor)) static void pwn(void) { FILE *f = fopen("PWNED", "w"); if (f) { fputs("native code ran\\n", f); fclose(f); } }\nint luaopen_evil(void *L) { (void)L; return 0; }\n' > evil.c
cc -shared -fPIC -o evil.so evil.c || exit 9
mkdir app
printf 'print(package.loadlib("./evil.so", "*"))\nprint(package.loadlib("./evil.so", "luaopen_evil"))\nprint(pcall(package.loadlib))\n' > app/main.lua
"$LUARIG" pack app -o app.rig >/dev/null
"$LUARIG" run app.rig
echo "run: $?"
cat PWNED 2>/dev/null || echo "no native code ran"
