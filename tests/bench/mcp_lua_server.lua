-- The luarig server of the MCP server bench (tests/bench/mcp_bench.py): rig.mcp.server
-- serving `echo {text}` over stdio, as tests/bench/mcp_sdk_server.mjs does with the SDK.
rig.mcp.server{
  name = "bench", version = "1",
  tools = { { name = "echo", description = "echoes",
              input_schema = { type = "object", properties = { text = { type = "string" } },
                               required = rig.json.array{ "text" } },
              run = function(a) return a.text end } },
}:serve_stdio()
