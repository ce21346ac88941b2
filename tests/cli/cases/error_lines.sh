# A user's mistake prints one line: an error in the script, a definition the
# library refuses, a background task's failure. --debug or LUARIG_DEBUG=1
# adds the traceback; an error inside the rig library (a bug in luarig) keeps
# its traceback without either.
mkdir error_lines && cd error_lines || exit 9
printf 'local function f() error("it broke") end\nf()\n' > s.lua
printf 'local l = rig.loop{ name = "a", modle = 1 }\n' > def.lua
tb() { sed -e "s/^\t.*$/\t(frame)/" -e "s/\.lua:[0-9]*: /.lua:N: /" | uniq; }
echo "== script error"; "$LUARIG" s.lua; echo "status $?"
echo "== definition error"; "$LUARIG" def.lua; echo "status $?"
echo "== chunk"; "$LUARIG" -e 'rig.tool{}'; echo "status $?"
echo "== background task"; "$LUARIG" -e 'rig.spawn(function() error("in the background") end) rig.sleep(0.05)'; echo "status $?"
echo "== --debug"; "$LUARIG" --debug def.lua 2>&1 | tb
echo "== LUARIG_DEBUG=1"; LUARIG_DEBUG=1 "$LUARIG" s.lua 2>&1 | tb
echo "== LUARIG_DEBUG=0 is off"; LUARIG_DEBUG=0 "$LUARIG" s.lua
echo "== a bug inside the library keeps its traceback"
"$LUARIG" -e 'require("rig.repl_render").new{}:history_lines({ 5 })' 2>&1 | tb
mkdir -p lib/rig
printf 'local M = {}\nfunction M.f() local t = nil; return t.x end\nreturn M\n' > lib/rig/buggy.lua
LUARIG_PATH="$PWD/lib" "$LUARIG" -e 'require("rig.buggy").f()' 2>&1 | sed "s|$PWD|PWD|" | tb
echo "== the REPL: one line, and the traceback with --debug"
printf 'error("boom")\n' | "$LUARIG" repl
printf 'error("boom")\n' | "$LUARIG" --debug repl | tb
