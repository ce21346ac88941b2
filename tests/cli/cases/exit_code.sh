"$LUARIG" -e 'os.exit(7)'
