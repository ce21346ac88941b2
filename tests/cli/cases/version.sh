# luarig version, --version and -V print the same line
"$LUARIG" version | sed 's/luarig [0-9.]*/luarig X/'
"$LUARIG" --version | sed 's/luarig [0-9.]*/luarig X/'
"$LUARIG" -V | sed 's/luarig [0-9.]*/luarig X/'
