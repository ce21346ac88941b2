"$LUARIG" --max-memory lots -e 'print(1)'
