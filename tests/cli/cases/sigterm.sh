# SIGTERM cancels the tasks and exits 143; a busy Lua loop is interrupted too.
# Either way one line says so (no traceback: the running task ends cancelled).
"$LUARIG" -e 'rig.spawn(function() rig.sleep(60) end) print("started") io.stdout:flush() rig.sleep(60)' &
pid=$!
sleep 0.3
kill -TERM $pid
wait $pid
echo "waiting task: exit $?"
"$LUARIG" -e 'print("busy") io.stdout:flush() while true do end' &
pid=$!
sleep 0.3
kill -INT $pid
wait $pid
echo "busy loop: exit $?"
