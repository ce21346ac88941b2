"$LUARIG" -e 'print(arg[0], ...); print(#arg, arg[2])' one two
