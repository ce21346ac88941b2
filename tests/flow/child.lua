-- A flow run that kills its own process (SIGKILL) at one point:
--   luarig child.lua STATE_DIR EFFECTS POINT [K]
-- POINT: vertex (inside count at step K), commit (right after step K is
-- durable), work (inside the second of three parallel work tasks),
-- interrupt (once the interrupt is journaled), answered (once the answer is
-- journaled), none (runs until the parent kills it; prints STEP n).
-- Prints "RUN <id>" first.
local dir, effects, point, k = arg[1], arg[2], arg[3], tonumber(arg[4] or "0")

local function crash_now()
  io.stdout:flush()
  local f = assert(io.open("/proc/self/stat"))
  local pid = f:read("a"):match("^(%d+)")
  f:close()
  os.execute("kill -9 " .. pid)
  rig.sleep(10)
end

local function crash(where, ctx)
  if where == point and where == "vertex" and ctx.step == k then crash_now() end
  if where == point and where == "work" and ctx.message == 2 then
    rig.sleep(0.05) -- the other two tasks of the superstep finish first
    crash_now()
  end
  if point == "none" then rig.sleep(0.02) end
end

local flow = dofile(arg[0]:gsub("[^/]*$", "") .. "graph.lua")(effects, crash)
-- FLOW_NATS_URL: the run lives on that nats-server (a 1 s lease), not in DIR's LMDB
local nats_url = os.getenv("FLOW_NATS_URL")
local store = nats_url and rig.store.nats{ url = nats_url, lease_ttl = 1 } or rig.store.lmdb{ root = dir }
local run = assert(flow:start({}, { store = store }))
print("RUN " .. run.id)
io.stdout:flush()
local sub = run:subscribe()
for ev in sub:events() do
  if ev.type == "FlowStep" then
    print("STEP " .. ev.step)
    io.stdout:flush()
    if point == "commit" and ev.step == k then crash_now() end
  end
  if ev.type == "FlowInterrupt" then
    if point == "interrupt" then crash_now() end
    if point == "answered" then rig.spawn(function() assert(run:resume("from the child")) end) end
  end
  if ev.type == "FlowAnswer" and point == "answered" then crash_now() end
end
error("the child was not killed")
