# pcall cannot swallow the memory cap
"$LUARIG" --max-memory 8M -e '
local t = {}
local ok = pcall(function() for i = 1, 1e9 do t[i] = ("x"):rep(64) .. i end end)
print("still running after pcall", ok)'
