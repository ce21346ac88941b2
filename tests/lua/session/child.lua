-- A session that kills its own process (SIGKILL) at one point of a turn:
--   luarig child.lua STATE_DIR POINT   (POINT: stream, tool, gate, between, shutdown)
-- Prints "SESSION <id>" first. The crash tests restore what it leaves.
local dir, point = arg[1], arg[2]

function rig.crash_now()
  io.stdout:flush()
  local f = assert(io.open("/proc/self/stat"))
  local pid = f:read("a"):match("^(%d+)")
  f:close()
  os.execute("kill -9 " .. pid)
  rig.sleep(10)
end
rig.crash_at = point
local steps = {
  stream = { { text = string.rep("streaming ", 100), chunk = 4, chunk_delay = 0.01 } },
  tool = { { text = "", tool_calls = { { name = "echo", input = { text = "x" } } } }, { text = "no" } },
  gate = { { text = "", tool_calls = { { name = "fetchy", input = {} } } }, { text = "no" } },
  between = { { text = "step one", tool_calls = { { name = "echo", input = { text = "x" } } } },
              { text = "slow", delay = 30 } },
  shutdown = { { text = string.rep("slow ", 100), chunk = 4, chunk_delay = 0.05 } },
}
local r = dofile(arg[0]:gsub("[^/]*$", "") .. "rig.lua")(rig.store.lmdb{ root = dir }, steps[point])
local s = assert(r:session())
print("SESSION " .. s.id)
io.stdout:flush()
local sub = s:subscribe{ ephemeral = true }
s:submit("hello " .. point)
for ev in sub:events() do
  if point == "stream" and ev.type == "TokenDelta" then rig.crash_now() end
  if point == "gate" and ev.type == "GateOpened" then rig.crash_now() end
  if point == "between" and ev.type == "StepDone" then rig.sleep(0.1) rig.crash_now() end
  if point == "shutdown" and ev.type == "TokenDelta" then
    rig.spawn(function() s:shutdown() end)
  end
  if point == "shutdown" and ev.type == "TurnInterrupted" then rig.crash_now() end
end
error("the child was not killed")
