-- The luarig client the MCP conformance suite drives (tests/mcp/conformance.sh):
-- `conformance client --command "luarig tests/mcp/conformance_client.lua"` appends the
-- scenario server's URL and sets MCP_CONFORMANCE_SCENARIO. Each scenario gets what a
-- real rig would do: connect (initialize), list tools, call the scenario's tool, close.
local url = assert(arg[1], "usage: conformance_client.lua URL")
local scenario = os.getenv("MCP_CONFORMANCE_SCENARIO") or "initialize"

local opts = { name = "conformance", url = url }
if scenario:find("elicitation") then
  -- a person who accepts without typing anything: the client fills in the schema's defaults
  opts.elicitation = function(req) return { action = "accept", content = {} } end
end
local token = os.getenv("MCP_CONFORMANCE_TOKEN")
if token then opts.headers = { Authorization = "Bearer " .. token } end

local c, err = rig.mcp.http(opts)
if not c then
  io.stderr:write("conformance client: ", tostring(err), "\n")
  os.exit(1)
end
local tools, terr = c:list_tools()
if not tools then
  io.stderr:write("conformance client: ", tostring(terr), "\n")
  c:close()
  os.exit(1)
end
local want = { tools_call = "add_numbers", ["sse-retry"] = "test_reconnection",
               ["elicitation-sep1034-client-defaults"] = "test_client_elicitation_defaults" }
local args = { add_numbers = { a = 5, b = 3 } }
local rc = 0
for _, t in ipairs(tools) do
  if t.name == want[scenario] or (scenario:find("^auth/") and t.name) then
    local r, cerr = c:call(t.name, args[t.name] or {}, { timeout = 20 })
    if not r then
      io.stderr:write("conformance client: ", tostring(cerr), "\n")
      rc = 1
    else
      print(rig.json.encode(r))
    end
    break
  end
end
c:close()
os.exit(rc)
