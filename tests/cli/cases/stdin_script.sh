echo 'print("from stdin", rig ~= nil)' | "$LUARIG"
