"$LUARIG" help | head -3
