-- A session that hands its conversation from triage to billing and kills its
-- own process (SIGKILL) after the handoff is journaled (ActiveLoopChanged,
-- HandoffInput) and before billing's turn starts (tests/lua/handoff_spec.lua):
--   luarig handoff_child.lua DIR      prints "SESSION <id>" first; the store is DIR/state
local dir = arg[1]
local here = arg[0]:gsub("[^/]*$", "")
local define = dofile(here .. "handoff_rig.lua")
assert(os.execute("mkdir -p '" .. dir .. "/state'"))
local r = define({ { tool_calls = { { name = "transfer_to_billing", input = { message = "refund" } } } } },
  { { text = "never", delay = 30 } }, { store = rig.store.lmdb{ root = dir .. "/state" } })
require("rig.handoff").before_input = function()
  io.stdout:flush()
  local f = assert(io.open("/proc/self/stat"))
  local pid = f:read("a"):match("^(%d+)")
  f:close()
  os.execute("kill -9 " .. pid)
  rig.sleep(10)
end
local s = assert(r:session())
print("SESSION " .. s.id)
io.stdout:flush()
s:submit("refund order 7")
s:wait_idle(30)
io.stderr:write("the child was not killed\n")
os.exit(1)
