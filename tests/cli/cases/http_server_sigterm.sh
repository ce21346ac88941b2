# A listening server keeps the process alive after the script ends and
# serves; SIGTERM closes it and the process exits 143 promptly.
"$LUARIG" -e '
local srv = rig.http.server{ listen = "127.0.0.1:0",
  routes = { ["GET /hi"] = function() return { body = "hello\n" } end } }
local f = io.open("url.tmp", "w") f:write(srv.url) f:close()
os.rename("url.tmp", "url")' &
pid=$!
( sleep 10; kill -KILL $pid 2>/dev/null ) &
watchdog=$!
i=0
while [ ! -f url ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
curl -s "$(cat url)/hi"
kill -0 $pid && echo "still serving"
kill -TERM $pid
wait $pid
echo "server: exit $?"
kill $watchdog 2>/dev/null
