-- A sampling profile of the Lua side of a bench script, by VM instructions.
--
--   luarig tests/bench/luaprof.lua OUT PERIOD SCRIPT [ARG ...]
--     runs SCRIPT with ARG as its arg table under a count hook that fires
--     every PERIOD Lua VM instructions (100 is fine grained; coroutines
--     created afterwards inherit the hook). Each firing is one sample: the
--     running Lua function gets a self sample, every distinct function on
--     the stack an inclusive one. C functions are invisible to a count hook
--     (it counts bytecodes), so their time is not in these figures: this
--     attributes luaV_execute's share, not the whole process. The script
--     may call luaprof_stop() (a global, present only under this wrapper)
--     to end the sampled window, e.g. before its own verification. OUT gets
--     one line per function: self, inclusive, "source:line name".
--   The hook replaces luarig's own (instruction caps and interrupts do not
--   work under it): a profiling aid only, never in a test.

local out, period, script = arg[1], tonumber(arg[2]), arg[3]
if not out or not period or not script then
  io.stderr:write("usage: luaprof.lua OUT PERIOD SCRIPT [ARG ...]\n")
  os.exit(2)
end
local args = {}
for i = 4, #arg do args[#args + 1] = arg[i] end
args[0] = script

local getinfo = debug.getinfo
local self_n, incl_n, names = {}, {}, {}
local samples = 0

local function key_of(info)
  local k = info.short_src .. ":" .. info.linedefined
  if not names[k] then names[k] = info.name or "?" end
  return k
end

local stopped = false
local seen = {}
local function hook()
  if stopped then debug.sethook() return end
  if select(3, debug.gethook()) ~= period then debug.sethook(hook, "", period) end
  samples = samples + 1
  local info = getinfo(2, "Sn")
  if not info then return end
  local k = key_of(info)
  self_n[k] = (self_n[k] or 0) + 1
  for s in pairs(seen) do seen[s] = nil end
  local level = 2
  while true do
    info = getinfo(level, "Sn")
    if not info then break end
    if info.what ~= "C" then
      k = key_of(info)
      if not seen[k] then
        seen[k] = true
        incl_n[k] = (incl_n[k] or 0) + 1
      end
    end
    level = level + 1
  end
end

function luaprof_stop() -- luacheck: ignore (a global on purpose: see above)
  if stopped then return end
  stopped = true
  debug.sethook()
end

local chunk = assert(loadfile(script))
arg = args
-- A hook is per thread and a new thread does not get its creator's, so
-- every task is started through a wrapper that sets it first: rig.spawn and
-- rig.core's spawn and spawn_detached (the stdlib calls them through the
-- module table).
local core = require "rig.core"
local function hooked(spawn)
  return function(f, ...)
    return spawn(function(...)
      -- the first sample at a random offset: tasks are short and alike, and
      -- a fixed one would land on the same instruction of every task
      if not stopped then debug.sethook(hook, "", math.random(1, period)) end
      return f(...)
    end, ...)
  end
end
core.spawn, core.spawn_detached = hooked(core.spawn), hooked(core.spawn_detached)
if rig.spawn ~= core.spawn then rig.spawn = hooked(rig.spawn) end
debug.sethook(hook, "", period)
chunk(table.unpack(args))
luaprof_stop()

local keys = {}
for k in pairs(incl_n) do keys[#keys + 1] = k end
table.sort(keys, function(a, b) return (self_n[a] or 0) > (self_n[b] or 0) end)
local f = assert(io.open(out, "w"))
f:write(string.format("# %d samples, one per %d VM instructions; self incl function\n",
  samples, period))
for _, k in ipairs(keys) do
  f:write(string.format("%d %d %s %s\n", self_n[k] or 0, incl_n[k], k, names[k]))
end
f:close()
