# The process waits for spawned tasks before exiting.
"$LUARIG" -e 'rig.spawn(function() rig.sleep(0.1) print("late task ran") end) print("main returns")'
