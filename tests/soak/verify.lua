-- A soak verifier, a fresh process after a kill:
--   luarig verify.lua SPEC ACKFILE RESTORE(0|1) ID...
-- ACKFILE has one acknowledged event a line, "<session> <seq> <type> <event id>".
-- For each session: the journal is read whole (seqs 1..tip without a gap,
-- every event body decodes), every acknowledged event is at its seq with
-- its id and type; with RESTORE=1 the session is restored and a turn must
-- complete (TurnDone), and it is shut down (its lease released).
-- Prints the EV lines of what it wrote, "BAD <what>" per problem, and
-- "RESULT <checked> <lost> <corrupt> <restore failures>".
local C = dofile(arg[0]:gsub("[^/]*$", "") .. "common.lua")
local spec, ackfile, do_restore = arg[1], arg[2], arg[3] == "1"
local store = C.open(spec)
local acked = {}
for line in io.lines(ackfile) do
  local sid, seq, ty, eid = line:match("^(%S+) (%d+) (%S+) (%S+)$")
  if sid then
    acked[sid] = acked[sid] or {}
    acked[sid][#acked[sid] + 1] = { seq = tonumber(seq), type = ty, event_id = eid }
  end
end
local checked, lost, corrupt, rfail = 0, 0, 0, 0
local function bad(fmt, ...) C.say("BAD " .. fmt, ...) end

local function check(id)
  local recs, tip, code
  -- a cluster electing a leader answers "unavailable" for a while: wait that out
  for _ = 1, 120 do
    recs, tip, code = require("rig.core").journal_read(store, id, 1, 0)
    if recs or code == "corrupt" then break end
    rig.sleep(0.5)
  end
  if not recs then
    if code == "corrupt" then corrupt = corrupt + 1 else rfail = rfail + 1 end
    bad("%s unreadable: %s %s", id, tostring(code), tostring(tip))
    return
  end
  if #recs ~= tip then
    corrupt = corrupt + 1
    bad("%s has %d records for tip %d", id, #recs, tip)
  end
  local at = {}
  for i, rec in ipairs(recs) do
    if rec.seq ~= i then
      corrupt = corrupt + 1
      bad("%s record %d has seq %s", id, i, tostring(rec.seq))
      break
    end
    if rec.kind == "event" then
      local ok, ev = pcall(rig.json.decode, rec.body)
      if not ok or type(ev) ~= "table" or not ev.event_id or not ev.type then
        corrupt = corrupt + 1
        bad("%s record %d does not decode", id, i)
      else
        at[rec.seq] = ev
      end
    end
  end
  for _, a in ipairs(acked[id] or {}) do
    checked = checked + 1
    local ev = at[a.seq]
    if not ev or ev.event_id ~= a.event_id or ev.type ~= a.type then
      lost = lost + 1
      bad("%s acknowledged %s %s at %d is %s", id, a.type, a.event_id, a.seq,
        ev and (ev.type .. " " .. ev.event_id) or "missing")
    end
  end
end

local ids = {}
for i = 4, #arg do ids[#ids + 1] = arg[i] end
for _, id in ipairs(ids) do check(id) end
if do_restore then
  -- every session at once, as a process taking over several would
  local r = C.rig(store)
  local function take_over(id)
    local s, msg, code = C.restore(r, id)
    if not s then
      rfail = rfail + 1
      bad("%s restore failed: %s %s", id, tostring(code), tostring(msg))
      return false
    end
    local sub = C.watch(s)
    local done = s:subscribe{ ephemeral = false }
    s:submit("after the kill")
    local last
    for ev in done:events(60) do
      last = ev
      if ev.ends_turn then break end
    end
    done:close()
    if not last or last.type ~= "TurnDone" then
      rfail = rfail + 1
      bad("%s the turn after restore ended %s", id, last and last.type or "without an event")
    end
    s:shutdown()
    rig.sleep(0.05) -- let the watcher print the last events
    sub:close()
    return true
  end
  local tasks = {}
  for _, id in ipairs(ids) do tasks[id] = rig.spawn(take_over, id) end
  for _, id in ipairs(ids) do
    local ok, msg = tasks[id]:wait()
    if not ok and msg then
      rfail = rfail + 1
      bad("%s the take-over raised: %s", id, tostring(msg))
    end
  end
end
for _, id in ipairs(ids) do
  -- the tip alone: a read from past it returns no record, and the tip
  local _, tip = require("rig.core").journal_read(store, id, math.maxinteger // 2, 1)
  C.say("TIP %s %s", id, tostring(tip))
end
C.say("RESULT %d %d %d %d", checked, lost, corrupt, rfail)
