-- A soak writer: restores the sessions named on the command line, opens
-- new ones up to N, then runs turns on all of them at once until killed.
--   luarig writer.lua SPEC N [ID...]
-- Prints "SESSION <id>" (new), "RESTORED <id>", "RESTOREFAIL <id> <code>
-- <message>", "READY" once every session runs, "EV ..." lines (common.lua),
-- "FAULT <id> <code> <message>" when a session stops taking turns.
local C = dofile(arg[0]:gsub("[^/]*$", "") .. "common.lua")
local spec, n = arg[1], tonumber(arg[2])
local store = C.open(spec)
local r = C.rig(store)
local sessions = {}
for i = 3, #arg do
  local s, msg, code = C.restore(r, arg[i])
  if s then
    C.say("RESTORED %s", s.id)
    sessions[#sessions + 1] = s
  else
    C.say("RESTOREFAIL %s %s %s", arg[i], tostring(code), tostring(msg))
  end
end
while #sessions < n do
  local s = assert(r:session())
  C.say("SESSION %s", s.id)
  sessions[#sessions + 1] = s
end
-- SOAK_ROTATE=M: after M turns a session is shut down and a new one
-- takes its place (a long run keeps its histories short)
local rotate = tonumber(os.getenv("SOAK_ROTATE") or "")
local function run(s)
  local sub = C.watch(s)
  local t = 0
  while true do
    t = t + 1
    if rotate and t > rotate then
      s:shutdown()
      sub:close()
      s = assert(r:session())
      C.say("SESSION %s", s.id)
      sub = C.watch(s)
      t = 1
    end
    s:submit("turn " .. t)
    local ok, msg, code = s:wait_idle(120)
    if not ok then
      C.say("FAULT %s %s %s", s.id, tostring(code), tostring(msg))
      return
    end
  end
end
local tasks = {}
for _, s in ipairs(sessions) do tasks[#tasks + 1] = rig.spawn(run, s) end
C.say("READY")
for _, t in ipairs(tasks) do t:wait() end
C.say("ALLFAULTED")
rig.sleep(3600)
