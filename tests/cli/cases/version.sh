"$LUARIG" version | sed 's/luarig [0-9.]*/luarig X/'
