-- The luarig side of tests/bench/session_bench.py.
--
--   luarig session_workload.lua mock BASE_URL N TURNS [memory | lmdb ROOT]
--     N sessions of one rig run concurrently (one task each); each submits
--     TURNS messages in a row, waiting for the session to be idle after
--     each. Every turn: the model (openai-compatible, the mock server at
--     BASE_URL) calls the tool "lookup" once, then answers with text.
--   luarig session_workload.lua scripted N TURNS
--     the same with a zero-latency rig.model.script (one function step per
--     model call, same rule as the mock): the runtime's cost per step.
--   The last arguments choose the store: rig.store.memory() (the default)
--   or rig.store.lmdb{ root = ROOT } (durable: every record fsynced).
--
-- Prints one JSON line: cpu_s (os.clock: every thread of the process),
-- wall_s, maxrss_kib (VmHWM), base_rss_kib (VmRSS after the rig is
-- defined, before any session), turns, steps, texts (turns that ended with
-- TurnDone, counted from the journals after the clock stopped), failed,
-- and the shutdown of every session after the work (counted apart):
-- shutdown_wall_s, shutdown_sys_s, shutdown_cpu_s. With SESSION_WORKLOAD_NOGC=1
-- the collector is stopped through the work and alloc_kib is what the Lua
-- heap grew by meanwhile (everything the work allocated; the difference of
-- two TURNS counts is the allocation per step). SESSION_WORKLOAD_WORK_ONLY=1
-- ends the process once the work is done (cpu_s, wall_s, maxrss_kib,
-- base_rss_kib and turns only): a profile of the work, not a bench line.

local mode = arg[1]
local base, n, turns, kind, root
if mode == "mock" then
  base, n, turns, kind, root = arg[2], tonumber(arg[3]), tonumber(arg[4]), arg[5], arg[6]
elseif mode == "scripted" then
  n, turns, kind, root = tonumber(arg[2]), tonumber(arg[3]), arg[4], arg[5]
end
kind = kind or "memory"
if not n or not turns or (kind ~= "memory" and kind ~= "lmdb") or (kind == "lmdb" and not root) then
  io.stderr:write("usage: session_workload.lua mock BASE_URL N TURNS [memory | lmdb ROOT] | "
                  .. "scripted N TURNS [memory | lmdb ROOT]\n")
  os.exit(2)
end

local function status_kib(field)
  local f = assert(io.open("/proc/self/status"))
  local s = f:read("a")
  f:close()
  return tonumber(s:match(field .. ":%s*(%d+)"))
end

-- System CPU seconds of this process (every thread), from /proc/self/stat.
local function sys_s()
  local f = assert(io.open("/proc/self/stat"))
  local s = f:read("a")
  f:close()
  local rest = s:match("%) (.*)$")
  local fields = {}
  for x in rest:gmatch("%S+") do fields[#fields + 1] = x end
  return tonumber(fields[13]) / 100 -- stime, in clock ticks (USER_HZ = 100)
end

local model
if mode == "mock" then
  model = rig.model{ provider = "openai-compatible", base_url = base, name = "mock",
                     retry = { attempts = 1 } }
else
  -- The mock server's rule: a tool call after the user, a text after a tool result.
  -- Each step gives its usage, as the SDK's ScriptedModel responses do (zero):
  -- without it rig.model.script estimates tokens by JSON-encoding the whole
  -- request every step (a quarter of the step's CPU, the test double's and
  -- not the runtime's).
  local k = 0
  local usage = { input_tokens = 10, output_tokens = 5 }
  local function step(req)
    local last = req.messages[#req.messages]
    if last.role == "tool" then return { text = "The answer is 42.", usage = usage } end
    k = k + 1
    return { tool_calls = { { name = "lookup", input = { q = "question" }, id = "call_" .. k } },
             usage = usage }
  end
  local steps = {}
  for i = 1, n * turns * 2 do steps[i] = step end
  model = rig.model.script{ steps = steps }
end

local lookup = rig.tool{
  name = "lookup", description = "Look a question up.",
  schema = { type = "object", properties = { q = { type = "string" } }, required = { "q" } },
  prepare = function(args) return { summary = "lookup " .. args.q, requirements = {} } end,
  run = function() return "lookup result: 42" end,
}
local g = rig.gate{
  access = { ["filesystem.read"] = "allow", ["filesystem.write"] = "allow",
             network = "allow", ["command.execute"] = "allow" },
  approver = "headless",
}
local l = rig.loop{ name = "assistant", model = model,
                    system = "You are a benchmark assistant. Use lookup once, then answer.",
                    tools = { lookup }, gate = g, policy_revision = "bench" }
local store = kind == "memory" and rig.store.memory() or rig.store.lmdb{ root = root }
local r = rig.define{ loops = { l }, primers = { "assistant" }, store = store }
collectgarbage("collect")
local base_rss = status_kib("VmRSS")

local sessions = {}
local nogc = os.getenv("SESSION_WORKLOAD_NOGC") == "1"
if nogc then collectgarbage("stop") end
local heap0 = collectgarbage("count")
local c0, w0 = os.clock(), rig.now()
local tasks = {}
for i = 1, n do
  tasks[i] = rig.spawn(function()
    local s = assert(r:session())
    sessions[i] = s
    for t = 1, turns do
      assert(s:submit(string.format("session %d question %d", i, t)))
      assert(s:wait_idle())
    end
    return true
  end)
end
for i = 1, n do assert(tasks[i]:wait()) end
local cpu, wall = os.clock() - c0, rig.now() - w0
local hwm = status_kib("VmHWM")
local alloc_kib = collectgarbage("count") - heap0
if nogc then collectgarbage("restart") end
-- Profiling wrappers (tests/bench/luaprof.lua, session_memory.lua) hook in
-- here: the sampled window ends with the work; the live sessions are handed
-- over before the verification below reads their journals.
if rawget(_G, "luaprof_stop") then luaprof_stop() end
if rawget(_G, "workload_done") then workload_done(sessions, r, store) end
-- SESSION_WORKLOAD_WORK_ONLY=1: stop here, for a profile of the work alone
-- (perf record, strace -c): no verification, no shutdown.
if os.getenv("SESSION_WORKLOAD_WORK_ONLY") == "1" then
  print(string.format('{"cpu_s":%.6f,"wall_s":%.6f,"maxrss_kib":%d,"base_rss_kib":%d,"turns":%d}',
    cpu, wall, hwm, base_rss, n * turns))
  os.exit(0)
end

-- Check the work was done: every turn ended with TurnDone after two steps.
local texts, steps, failed = 0, 0, {}
for i = 1, n do
  for rec in sessions[i]:journal{ from = 1 } do
    if rec.type == "TurnDone" then
      texts = texts + 1
    elseif rec.type == "StepDone" then
      steps = steps + 1
    elseif rec.type == "TurnFailed" or rec.type == "TurnInterrupted" or rec.type == "TurnRejected" then
      if #failed < 3 then
        failed[#failed + 1] = rec.type .. ": " .. tostring(rec.error or rec.reason or rec.message or "")
      end
    end
  end
end

-- The shutdown tail: every session shut down, concurrently (as a host
-- shutting down does), timed apart from the work.
local sc0, ss0, sw0 = os.clock(), sys_s(), rig.now()
for i = 1, n do
  tasks[i] = rig.spawn(function() sessions[i]:shutdown() return true end)
end
for i = 1, n do assert(tasks[i]:wait()) end
local shut_wall, shut_sys, shut_cpu = rig.now() - sw0, sys_s() - ss0, os.clock() - sc0

print(string.format('{"cpu_s":%.6f,"wall_s":%.6f,"maxrss_kib":%d,"base_rss_kib":%d,"turns":%d,'
  .. '"steps":%d,"texts":%d,"failed":%s,"shutdown_wall_s":%.6f,"shutdown_sys_s":%.6f,'
  .. '"shutdown_cpu_s":%.6f%s}',
  cpu, wall, hwm, base_rss, n * turns, steps, texts,
  failed[1] and rig.json.encode(failed) or "[]", shut_wall, shut_sys, shut_cpu,
  nogc and string.format(',"alloc_kib":%.1f', alloc_kib) or ""))
