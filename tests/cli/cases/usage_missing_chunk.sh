"$LUARIG" -e
