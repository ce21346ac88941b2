printf 'print(arg[0], ...)\nreturn 0\n' > s.lua
"$LUARIG" s.lua a b
"$LUARIG" run s.lua c
