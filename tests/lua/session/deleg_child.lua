-- A delegating session that kills its own process (SIGKILL) at one point of a
-- background hand-back:
--   luarig deleg_child.lua STATE_DIR POINT
--   POINT: before_handback (the child answered, the hand-back not journaled),
--          queued (journaled, queued behind the parent's slow turn),
--          child_running (the child's turn is in its model call)
-- Prints "SESSION <id>" first. delegation_spec.lua restores what it leaves.
local dir, point = arg[1], arg[2]

local function crash_now()
  io.stdout:flush()
  local f = assert(io.open("/proc/self/stat"))
  local pid = f:read("a"):match("^(%d+)")
  f:close()
  os.execute("kill -9 " .. pid)
  rig.sleep(10)
end

local n = 0
local roles = {
  plan = function()
    n = n + 1
    if n == 1 then
      return { tool_calls = { { name = "start_agent",
        input = { agent = "researcher", instructions = "find x", wait = false } } } }
    end
    if point == "queued" then return { text = "slow", delay = 30 } end
    return { text = "started" }
  end,
  research = function()
    if point == "child_running" then crash_now() end
    return { text = "x is 9" }
  end,
}
if point == "before_handback" then
  require("rig.delegation").before_handback = crash_now
end
local define = dofile(arg[0]:gsub("[^/]*$", "") .. "deleg_rig.lua")
local r = define(rig.store.lmdb{ root = dir }, roles)
local s = assert(r:session())
print("SESSION " .. s.id)
io.stdout:flush()
local sub = s:subscribe{ ephemeral = false }
s:submit("hello " .. point)
for ev in sub:events() do
  if point == "queued" and ev.type == "TurnDone" and ev.loop_id == "researcher#1" then
    rig.sleep(0.3)
    crash_now()
  end
end
error("the child was not killed")
