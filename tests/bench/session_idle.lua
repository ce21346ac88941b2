-- Memory per idle session, for tests/bench/session_bench.py.
--
--   luarig session_idle.lua COUNT memory
--   luarig session_idle.lua COUNT lmdb ROOT
--
-- Defines one rig (a scripted model that is never called), opens 100
-- sessions to warm up (64 tasks open them), measures VmRSS, opens COUNT more and keeps them all
-- open, measures VmRSS again. Both measurements after a full collection.
-- An LMDB session holds its lease's lock file open: COUNT sessions need
-- RLIMIT_NOFILE above COUNT (the harness raises the soft limit).
-- Prints one JSON line: count, rss_before_kib, rss_after_kib, open_s (wall
-- time to open the COUNT sessions), per_session_kib, fds (open in the end).

local count, kind, root = tonumber(arg[1]), arg[2], arg[3]
if not count or (kind ~= "memory" and kind ~= "lmdb") or (kind == "lmdb" and not root) then
  io.stderr:write("usage: session_idle.lua COUNT memory | COUNT lmdb ROOT\n")
  os.exit(2)
end

local function rss_kib()
  collectgarbage("collect")
  collectgarbage("collect")
  local f = assert(io.open("/proc/self/status"))
  local s = f:read("a")
  f:close()
  return tonumber(s:match("VmRSS:%s*(%d+)"))
end

local store = kind == "memory" and rig.store.memory() or rig.store.lmdb{ root = root }
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
local l = rig.loop{ name = "assistant", model = rig.model.script{ steps = {} },
                    system = "You are a benchmark assistant.", tools = { lookup }, gate = g,
                    policy_revision = "bench" }
local r = rig.define{ loops = { l }, primers = { "assistant" }, store = store }

-- Opens (or shuts down) sessions first..last, 64 at a time: an open waits
-- for its first records to be durable, and the store batches concurrent ones.
local open = {}
local function each(first, last, fn)
  local tasks, next_i = {}, first
  for w = 1, 64 do
    tasks[w] = rig.spawn(function()
      while next_i <= last do
        local i = next_i
        next_i = i + 1
        fn(i)
      end
      return true
    end)
  end
  for w = 1, #tasks do assert(tasks[w]:wait()) end
end
each(1, 100, function(i) open[i] = assert(r:session()) end)
local before = rss_kib()
local t0 = rig.now()
each(101, 100 + count, function(i) open[i] = assert(r:session()) end)
local open_s = rig.now() - t0
local after = rss_kib()
local function open_fds()
  local f = assert(io.open("/proc/self/stat"))
  local pid = f:read("a"):match("^(%d+)")
  f:close()
  local p = assert(io.popen("ls /proc/" .. pid .. "/fd | wc -l"))
  local n = tonumber(p:read("a"))
  p:close()
  return n
end
print(string.format('{"count":%d,"rss_before_kib":%d,"rss_after_kib":%d,"open_s":%.3f,"per_session_kib":%.3f,"fds":%d}',
  count, before, after, open_s, (after - before) / count, open_fds()))
each(1, #open, function(i) open[i]:shutdown() end)
