-- The luarig side of the MCP bench: arg[1] the server script, arg[2] calls, arg[3] tools,
-- arg[4] listings. Prints one JSON line: us per tools/call round trip, ms per tools/list of
-- the big server, ms per c:tools() (the list mapped to rig tools).
local server, calls, ntools, lists = arg[1], tonumber(arg[2]), tonumber(arg[3]), tonumber(arg[4])
local c = assert(rig.mcp.stdio{ name = "bench", command = "node", args = { server, "1" }, unconfined = true })
local args = { text = "hello" }
for _ = 1, 200 do assert(c:call("echo", args)) end
local t0 = rig.now()
for _ = 1, calls do assert(c:call("echo", args)) end
local call_us = (rig.now() - t0) / calls * 1e6
c:close()
local big = assert(rig.mcp.stdio{ name = "big", command = "node", args = { server, tostring(ntools) }, unconfined = true })
assert(big:list_tools())
t0 = rig.now()
for _ = 1, lists do big.tool_cache = nil assert(#big:list_tools() == ntools) end
local list_ms = (rig.now() - t0) / lists * 1e3
t0 = rig.now()
for _ = 1, lists do big.tool_cache, big.rig_tools = nil, nil assert(#big:tools() == ntools) end
local tools_ms = (rig.now() - t0) / lists * 1e3
big:close()
print(rig.json.encode({ call_us = call_us, list_ms = list_ms, tools_ms = tools_ms }))
