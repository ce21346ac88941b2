-- Restoring a session of ~10k journal records, end to end (r:restore: the
-- lease, the journal opened and read, every event folded back into the
-- loops' state), from NATS (embedded mode: its own nats-server) against
-- LMDB, both stores under DIR. One BENCH line (bench.py nats runs it).
--   luarig tests/bench/nats_restore.lua DIR [RECORDS]

local core = require "rig.core" -- the stdlib's private binding: what the public API does not show
local dir = assert(arg[1], "usage: nats_restore.lua DIR [RECORDS]")
local want = tonumber(arg[2] or "10000")
if not os.execute("command -v nats-server >/dev/null 2>&1") then
  io.stderr:write("nats_restore: nats-server is not installed: skipped\n")
  return
end

local function define(store)
  local steps = {}
  for i = 1, 4000 do steps[i] = { text = "reply " .. i .. " " .. string.rep("text ", 40) } end
  local loop = rig.loop{ name = "assistant", model = rig.model.script(steps), system = "bench" }
  return rig.define{ loops = { loop }, primers = { "assistant" }, store = store }
end

-- Fills a session with turns until its journal has `want` records; returns its id.
local function fill(store)
  local r = define(store)
  local s = assert(r:session())
  local id, tip, turns = s.id, 0, 0
  while tip < want do
    s:submit("question " .. turns)
    assert(s:wait_idle(60))
    turns = turns + 1
    if turns % 50 == 0 or tip > want - 200 then
      tip = select(2, assert(core.journal_read(store, id, 1, 1)))
    end
  end
  s:shutdown()
  return id, tip
end

local function restore_ms(store, id)
  local best = math.huge
  for _ = 1, 3 do
    local r = define(store)
    local t0 = rig.now()
    local s = assert(r:restore(id))
    local ms = (rig.now() - t0) * 1e3
    s:shutdown()
    if ms < best then best = ms end
  end
  return best
end

local nats = assert(rig.store.nats{ embedded_dir = dir .. "/nats" })
local lmdb = assert(rig.store.lmdb{ root = dir .. "/lmdb" })
local t0 = rig.now()
local nid, ntip = fill(nats)
local t1 = rig.now()
local lid = fill(lmdb)
local t2 = rig.now()
local n, l = restore_ms(nats, nid), restore_ms(lmdb, lid)
io.stderr:write(("nats_restore: %d records; filled in %.1f s (nats), %.1f s (lmdb)\n")
  :format(ntip, t1 - t0, t2 - t1))
io.write(("BENCH name=nats_session_restore_%dk value=%.6g unit=ms peer=lmdb peer_value=%.6g "
  .. "ratio=%.3f\n"):format(want // 1000, n, l, n / l))
io.stdout:flush()
nats:close()
lmdb:close()
