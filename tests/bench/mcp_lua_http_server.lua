-- The luarig HTTP server of the MCP server bench: rig.mcp.server serving `echo {text}`
-- over Streamable HTTP (tests/bench/mcp_lua_server.lua is the stdio one). Prints its URL.
local srv = rig.mcp.server{
  name = "bench", version = "1",
  tools = { { name = "echo", description = "echoes",
              input_schema = { type = "object", properties = { text = { type = "string" } },
                               required = rig.json.array{ "text" } },
              run = function(a) return a.text end } },
}
local h = assert(srv:serve_http{ listen = "127.0.0.1:0" })
print(h.url)
io.stdout:flush()
rig.await_shutdown_signal()
h:close()
