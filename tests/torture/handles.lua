-- torture: from=loop
-- Handles checked by lr_checkhandle and the scheduler: tasks and their
-- results (lua/sched.c), a condition, a session on a memory store with a
-- subscription (lua/session.c), closing, and use after close. Every
-- result is checked. arg[1] is an empty scratch directory.
local core = require("rig.core")

local t = rig.spawn(function(a, b) return a + b, "sum" end, 1, 2)
local x, what = assert(t:wait())
assert(x == 3 and what == "sum")
local c = rig.cond()
local woke = rig.spawn(function() return c:wait(5) end)
rig.sleep(0)
c:signal()
assert(woke:wait())

local store <close> = assert(core.store_memory())
local s = assert(core.session_open(store))
local sub = s:subscribe{ loops = "all", ephemeral = true }
local ev = '{"v":1,"type":"TurnStarted"}'
assert(s:emit(ev, { type = "TurnStarted", enduring = true }))
local j, seq, code = sub:next(1)
if code == "overflow" then
  -- no room to buffer an enduring event (host/session.c): by design the
  -- subscription ends and names the seq to catch up from in the journal
  assert(seq:find("from seq 2$"), seq)
else
  assert(j == ev and seq == 2, seq)
end
assert(s:tip() == 2)
-- an event table encoded by lua/session.c into the shared encode buffer (emit_event)
local r, m = s:emit_event({ v = 1, type = "StepDone", n = 1.5, t = { "a" } }, "StepDone", nil,
  true, "e3", true)
assert(r == 3, m)
r, m = s:emit_event({ v = 1, type = "TokenDelta" }, "TokenDelta", "x", false, nil, false)
assert(r == true, m)
assert(s:tip() == 3)
sub:close()
assert(not pcall(sub.next, sub))
s:close()
local ok, err = pcall(s.emit, s, "{}", { type = "X" })
assert(not ok and err:find("closed rig.session"), tostring(err))
print("torture: done")
