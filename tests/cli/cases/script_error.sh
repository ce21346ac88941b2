printf 'local function f() error("it broke") end\nf()\n' > s.lua
"$LUARIG" s.lua

# with --debug the traceback too
"$LUARIG" --debug s.lua
