printf 'local x = \n' > s.lua
"$LUARIG" s.lua
