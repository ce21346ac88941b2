"$LUARIG" --frobnicate
