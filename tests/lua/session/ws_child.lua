-- A session with a per-session workspace that kills its own process
-- (SIGKILL) in the middle of its second step, after the first step's
-- checkpoint committed:   luarig ws_child.lua STATE_DIR BASE_DIR
-- Prints "SESSION <id>" first.
local dir, base = arg[1], arg[2]

function rig.crash_now()
  io.stdout:flush()
  local f = assert(io.open("/proc/self/stat"))
  local pid = f:read("a"):match("^(%d+)")
  f:close()
  os.execute("kill -9 " .. pid)
  rig.sleep(10)
end

local steps = {
  { text = "", tool_calls = { { name = "put", input = { path = "a", text = "1" } } } },
  { text = "", tool_calls = { { name = "put", input = { path = "a", text = "2" } },
                              { name = "put", input = { path = "b", text = "crash" } } } },
  { text = "never" },
}
local r = dofile(arg[0]:gsub("[^/]*$", "") .. "ws_rig.lua")(rig.store.lmdb{ root = dir }, base, steps)
local s = assert(r:session())
print("SESSION " .. s.id)
io.stdout:flush()
s:submit("write twice")
s:wait_idle()
error("the child was not killed")
