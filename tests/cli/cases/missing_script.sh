"$LUARIG" does-not-exist.lua
