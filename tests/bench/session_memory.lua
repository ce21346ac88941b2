-- Where the memory of live sessions goes: runs tests/bench/session_workload.lua
-- (scripted model, memory store) and, once the work is done and before it
-- reads the journals back, takes the Lua heap apart.
--
--   luarig tests/bench/session_memory.lua scripted N TURNS
--   luarig tests/bench/session_memory.lua mock BASE_URL N TURNS
--     the workload's own arguments (memory store only); mock is the bench's
--     session_live_memory workload (tests/bench/mock_openai.py at BASE_URL)
--
-- Prints one JSON line, every figure in KiB per session:
--   rss_growth     (VmRSS after the work - VmRSS before any session) / N
--   hwm_growth     (VmHWM - VmRSS before any session) / N: the bench's
--                  session_live_memory figure
--   lua_peak       the largest Lua heap seen (collectgarbage("count"), read
--                  every 2 ms by a task of its own) over the one before any
--                  session: the collector's garbage included
--   lua_live       the Lua heap after two full collections, same base
--   freed.<what>   what a full collection gives back once <what> is dropped
--                  from every session, in this order (each after the ones
--                  before it): the normalized request cache, the
--                  observations, the history, the loop instances' other
--                  fields, the shutdown of the session (its task, its C
--                  session and subscriptions), the session table itself
--   journal_json   the session's journal records as JSON (what the memory
--                  store keeps in C, outside the Lua heap), and records
-- Destructive (it takes the sessions apart), so it exits without the
-- workload's verification; a profiling aid, not a bench line.

local wargs = { table.unpack(arg, 1, #arg) }
local mode = arg[1]
local n, turns
if mode == "scripted" then
  n, turns = tonumber(arg[2]), tonumber(arg[3])
elseif mode == "mock" then
  n, turns = tonumber(arg[3]), tonumber(arg[4])
end
if not n or not turns or #arg ~= (mode == "mock" and 4 or 3) then
  io.stderr:write("usage: session_memory.lua scripted N TURNS | mock BASE_URL N TURNS\n")
  os.exit(2)
end

local function status_kib(field)
  local f = assert(io.open("/proc/self/status"))
  local s = f:read("a")
  f:close()
  return tonumber(s:match(field .. ":%s*(%d+)"))
end

collectgarbage("collect")
local heap_base, rss_base = collectgarbage("count"), status_kib("VmRSS")
local peak, sampling = heap_base, true
local sampler = rig.spawn(function()
  while sampling do
    local c = collectgarbage("count")
    if c > peak then peak = c end
    rig.sleep(0.002)
  end
  return true
end)

local function live()
  collectgarbage("collect")
  collectgarbage("collect")
  return collectgarbage("count")
end

function workload_done(sessions) -- luacheck: ignore (the hook of session_workload.lua)
  sampling = false
  assert(sampler:wait())
  local out = {}
  local rss, hwm = status_kib("VmRSS"), status_kib("VmHWM")
  local json_bytes, records = 0, 0
  for i = 1, n do
    for rec in sessions[i]:journal{ from = 1 } do
      json_bytes = json_bytes + #rig.json.encode(rec)
      records = records + 1
    end
  end
  local l0 = live()
  out.rss_growth = (rss - rss_base) / n
  out.hwm_growth = (hwm - rss_base) / n
  out.lua_peak = (peak - heap_base) / n
  out.lua_live = (l0 - heap_base) / n
  out.journal_json = json_bytes / 1024 / n
  out.records = records / n
  local freed, order = {}, {}
  local before = l0
  local function drop(what, fn)
    for i = 1, n do fn(sessions[i]) end
    local now = live()
    freed[#freed + 1] = string.format('"%s":%.2f', what, (before - now) / n)
    order[#order + 1] = what
    before = now
  end
  local function each_inst(S, fn)
    for _, inst in pairs(S.loops) do fn(inst) end
  end
  drop("req_cache", function(S) each_inst(S, function(inst) inst.req_cache = nil end) end)
  drop("observations", function(S) each_inst(S, function(inst) inst.observations = nil end) end)
  drop("history", function(S) each_inst(S, function(inst) inst.history = nil end) end)
  drop("instance_rest", function(S)
    each_inst(S, function(inst)
      for k in pairs(inst) do
        if k ~= "driver" and k ~= "def" and k ~= "model" and k ~= "gate" and k ~= "id"
           and k ~= "name" then
          inst[k] = nil
        end
      end
    end)
  end)
  local ts = {}
  for i = 1, n do ts[i] = rig.spawn(function() return sessions[i]:shutdown() end) end
  for i = 1, n do ts[i]:wait() end
  drop("shutdown", function() end)
  drop("session_table", function(S) for k in pairs(S) do S[k] = nil end end)
  local rest = before
  print(string.format('{"mode":"%s","n":%d,"turns":%d,"rss_growth":%.2f,"hwm_growth":%.2f,"lua_peak":%.2f,'
    .. '"lua_live":%.2f,"journal_json":%.2f,"records":%.1f,"freed":{%s},"lua_left":%.2f}',
    mode, n, turns, out.rss_growth, out.hwm_growth, out.lua_peak, out.lua_live, out.journal_json,
    out.records, table.concat(freed, ","), (rest - heap_base) / n))
  io.stdout:flush()
  os.exit(0)
end

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
arg = wargs
arg[0] = here .. "session_workload.lua"
dofile(here .. "session_workload.lua")
