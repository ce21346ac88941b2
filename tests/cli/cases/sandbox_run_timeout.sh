mkdir sandbox_run_timeout && cd sandbox_run_timeout || exit 9
# --timeout kills the whole tree (a background child included) and says so: 124.
t0=$(date +%s)
"$LUARIG" sandbox run --timeout 0.5 -- sh -c 'sleep 60 & sleep 61'
echo "status: $?"
el=$(($(date +%s) - t0))
[ $el -lt 10 ] && echo "returned promptly" || echo "took ${el}s"
