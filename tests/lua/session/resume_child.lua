-- A session that kills its own process (SIGKILL) at one point of a turn,
-- for the resume tests (tests/lua/session_resume_spec.lua):
--   luarig resume_child.lua STATE_DIR POINT [SESSION_ID]
-- With SESSION_ID the child restores that session and resumes it first (a
-- crash during a resumed turn). Prints "SESSION <id>" first. POINTs:
--   stream     a TokenDelta of the first model call
--   tool       inside echo's run (after it logged its run)
--   gate       fetchy's gate is open
--   approved   fetchy's gate approved (here), inside its run
--   between    two steps (echo) committed, the third model call waits
--   limits     the same with limits.iterations = 2 and one step committed
--   partial    two calls: echo's result recorded, fetchy's gate open
--   final      the answer's StepDone is durable, its TurnDone not yet journaled
--   delegate   the boss waits in start_agent; the worker's fetchy gate is open
local dir, point, resume_id = arg[1], arg[2], arg[3]
local here = arg[0]:gsub("[^/]*$", "")

function rig.crash_now()
  io.stdout:flush()
  local f = assert(io.open("/proc/self/stat"))
  local pid = f:read("a"):match("^(%d+)")
  f:close()
  os.execute("kill -9 " .. pid)
  rig.sleep(10)
end
rig.crash_at = point

local plans = {
  stream = { { text = string.rep("streaming ", 100), chunk = 4, chunk_delay = 0.01 } },
  tool = { { text = "", tool_calls = { { name = "echo", input = { text = "x" } } } } },
  gate = { { text = "", tool_calls = { { name = "fetchy", input = {} } } } },
  approved = { { text = "", tool_calls = { { name = "fetchy", input = {} } } } },
  between = { { text = "step one", tool_calls = { { name = "echo", input = { text = "x" } } } },
              { text = "step two", tool_calls = { { name = "echo", input = { text = "y" } } } },
              { text = "slow", delay = 30 } },
  limits = { { text = "step one", tool_calls = { { name = "echo", input = { text = "x" } } } },
             { text = "slow", delay = 30 } },
  partial = { { text = "two calls", tool_calls = { { name = "echo", input = { text = "x" } },
                                                   { name = "fetchy", input = {} } } } },
  final = { { text = "the answer" } },
}
local boss_n = 0
local function brain(req, n)
  if req.system == "boss" then
    boss_n = boss_n + 1
    return { tool_calls = { { name = "start_agent",
      input = { agent = "worker", instructions = "fetch it" } } } }
  end
  if req.system == "worker" then
    return { tool_calls = { { name = "fetchy", input = {} } } }
  end
  return plans[point][n] or { text = "unexpected model call", delay = 30 }
end
local define = dofile(here .. "resume_rig.lua")
local r = define(rig.store.lmdb{ root = dir }, brain, { log = dir .. "/runs.log",
  limits = point == "limits" and { iterations = 2 } or nil })

local s
if resume_id then
  s = assert(r:restore(resume_id))
else
  s = assert(r:session())
end
print("SESSION " .. s.id)
io.stdout:flush()

if point == "final" then
  -- crash as the TurnDone is handed to the journal, once the StepDone before it is durable
  local real = s.core
  local function before(etype)
    if etype == "TurnDone" then
      local deadline = rig.now() + 10
      while rig.now() < deadline do
        local recs = require("rig.core").journal_read(r.store, s.id, 1, 0)
        local last = recs[#recs]
        if last and last.body:find('"StepDone"', 1, true) then rig.crash_now() end
        rig.sleep(0.01)
      end
      error("the StepDone was not journaled")
    end
  end
  -- events go through emit_event (options as arguments), commands through emit
  s.core = setmetatable({ emit = function(_, text, o)
    before(o.type)
    return real:emit(text, o)
  end, emit_event = function(_, text, etype, ...)
    before(etype)
    return real:emit_event(text, etype, ...)
  end }, { __index = function(_, k)
    local v = real[k]
    if type(v) == "function" then return function(_, ...) return v(real, ...) end end
    return v
  end })
end

local sub = s:subscribe{ ephemeral = true }
if resume_id then
  assert(s:resume())
else
  s:submit("hello " .. point, { loop = point == "delegate" and "boss" or "assistant" })
end
local recorded, gated, steps = false, false, 0
for ev in sub:events() do
  if point == "stream" and ev.type == "TokenDelta" then rig.crash_now() end
  if point == "gate" and ev.type == "GateOpened" then rig.crash_now() end
  if point == "approved" and ev.type == "GateOpened" then s:respond_gate(ev.gate_id, "approve") end
  if point == "delegate" and ev.type == "GateOpened" and ev.loop_id == "worker#1" then
    rig.crash_now()
  end
  if (point == "between" or point == "limits") and ev.type == "StepDone" then steps = steps + 1 end
  if point == "between" and steps == 2 or point == "limits" and steps == 1 then rig.crash_now() end
  if point == "partial" then
    if ev.type == "ToolResultRecorded" and ev.tool == "echo" then recorded = true end
    if ev.type == "GateOpened" then gated = true end
    if recorded and gated then rig.crash_now() end
  end
end
error("the child was not killed")
