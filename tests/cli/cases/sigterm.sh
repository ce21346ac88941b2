# SIGTERM cancels the tasks and exits 143; a busy Lua loop is interrupted too.
# Either way one line says so (no traceback: the running task ends cancelled).
# Each signal is sent once the script has printed its first line, not after a
# fixed time (under load a signal sent earlier killed luarig before it ran).
wait_for() { # FILE MARKER
	n=0
	while ! grep -q "$2" "$1" 2>/dev/null && [ $n -lt 600 ]; do
		sleep 0.05
		n=$((n + 1))
	done
}
"$LUARIG" -e 'rig.spawn(function() rig.sleep(60) end) print("started") io.stdout:flush() rig.sleep(60)' >out1 2>err1 &
pid=$!
wait_for out1 started
kill -TERM $pid
wait $pid
rc=$?
cat out1 err1
echo "waiting task: exit $rc"
"$LUARIG" -e 'print("busy") io.stdout:flush() while true do end' >out2 2>err2 &
pid=$!
wait_for out2 busy
kill -INT $pid
wait $pid
rc=$?
cat out2 err2
echo "busy loop: exit $rc"
