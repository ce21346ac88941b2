# a --max-memory stop while store operations are in flight on the worker pool leaks nothing
d=$(mktemp -d)
mkdir -p "$d/ws" && for i in 1 2 3 4 5 6 7 8; do head -c 200000 /dev/urandom > "$d/ws/f$i"; done
"$LUARIG" --max-memory 16M -e '
local core = require("rig.core")
local dir = ...
local db = assert(core.store_lmdb({ root = dir .. "/db" }))
for i = 1, 4 do rig.spawn(function() db:snapshot(dir .. "/ws") end) end
rig.spawn(function() db:blob_put("k", ("x"):rep(1000)) end)
rig.sleep(0)
local t = {}
for i = 1, 1e9 do t[i] = ("y"):rep(64) .. i end' "$d"
rc=$?
rm -rf "$d"
exit $rc
