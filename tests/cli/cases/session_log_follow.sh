# luarig log --follow on a session another process is writing, and SIGTERM.
cat > live.lua <<'LUA'
local core = require "rig.core"
local store = assert(core.store_lmdb{ root = os.getenv("PWD") .. "/state" })
local s = assert(core.session_open(store))
local f = assert(io.open("sid", "w")); f:write(s.id); f:close()
while not io.open("go") do rig.sleep(0.02) end
for i = 1, 3 do
  s:emit('{"type":"Tick","n":' .. i .. '}', { type = "Tick", enduring = true })
  rig.sleep(0.15)
end
s:emit('{"type":"SessionStopped"}', { type = "SessionStopped", enduring = true })
s:close()
LUA
"$LUARIG" live.lua & writer=$!
while [ ! -s sid ]; do sleep 0.02; done
id=$(cat sid)
touch go
timeout -k 5 10 "$LUARIG" log --state state "$id" --follow; echo "follow status $?"
wait $writer; echo "writer status $?"
# No SessionStopped after seq 1: --follow waits until SIGTERM, then exits 0.
timeout -k 5 10 "$LUARIG" log --state state "$id" --follow --from 6 > tail.out & f=$!
sleep 0.3
kill -TERM $f; wait $f; echo "sigterm status $?"
cat tail.out
