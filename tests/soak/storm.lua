-- make soak: the kill storms (docs/soak.md).
--   luarig tests/soak/storm.lua STORM COUNT
-- STORM: lmdb | nats | server | long | cluster | partition.
-- Prints progress to stderr and, at the end, one summary line on stdout:
--   soak <storm>: kills N, acknowledged N, checked N, lost N, corrupt N,
--   restore failures N, ...
-- and exits 1 when anything was lost or corrupt or a restore failed.
local here = arg[0]:gsub("[^/]*$", "")
local C = dofile(here .. "common.lua")
local luarig = os.getenv("LUARIG") or "build/luarig"
local storm, count = arg[1], tonumber(arg[2] or "1000")
local seed = tonumber(os.getenv("SOAK_SEED") or "") or math.floor(rig.time() * 1000) % 1000000007
math.randomseed(seed)
local NSESS, RETIRE = 4, 150
local work = os.getenv("SOAK_DIR") or ("/tmp/luarig-soak-" .. storm .. "-" .. seed)
os.execute("rm -rf '" .. work .. "' && mkdir -p '" .. work .. "'")
local log = assert(io.open(work .. "/storm.log", "w"))
local function note(fmt, ...)
  local s = fmt:format(...)
  log:write(s, "\n")
  log:flush()
end
local function progress(fmt, ...) io.stderr:write(("[%s] " .. fmt .. "\n"):format(storm, ...)) end

-- SOAK_DEADLINE (unix seconds): no new round starts after it; the summary
-- then says how many of the count ran
local deadline = tonumber(os.getenv("SOAK_DEADLINE") or "")
local stopped_at
local function more(k)
  if deadline and rig.time() > deadline then
    stopped_at = stopped_at or (k - 1)
    return false
  end
  return true
end

-- ---- the tally ----
local acked, nacked = {}, 0      -- acked[sid][seq] = "type event_id"
local T = { kills = 0, checked = 0, lost = 0, corrupt = 0, rfail = 0, restores = 0,
            faults = 0, carried = 0 }
local function ack(sid, seq, ty, eid)
  local a = acked[sid]
  if not a then a = {} acked[sid] = a end
  local v = ty .. " " .. eid
  local was = a[seq]
  if was == nil then
    a[seq] = v
    nacked = nacked + 1
  elseif was ~= v then
    -- the same seq acknowledged twice with different events: one was lost
    T.lost = T.lost + 1
    note("BAD %s seq %d acknowledged as %s and as %s", sid, seq, was, v)
  end
end
local function count_of(sid)
  local n = 0
  for _ in pairs(acked[sid] or {}) do n = n + 1 end
  return n
end

-- ---- processes whose stdout lines are handled as they come ----
local function start(argv, on_line, env)
  local p = assert(rig.process.spawn{ argv = argv, stdout = "pipe", stderr = "pipe", env = env })
  local h = { p = p, done = false, lines = 0 }
  h.reader = rig.spawn(function()
    local ok, err = pcall(function()
      for line in p:lines("stdout") do
        h.lines = h.lines + 1
        local sid, seq, ty, eid = line:match("^EV (%S+) (%d+) (%S+) (%S+)$")
        if sid then ack(sid, tonumber(seq), ty, eid) end
        on_line(line, h)
      end
    end)
    if not ok then note("reader: %s", tostring(err)) end
    h.done = true
  end)
  h.errs = rig.spawn(function()
    local t = {}
    for line in p:lines("stderr") do t[#t + 1] = line end
    h.stderr = table.concat(t, "\n")
  end)
  return h
end
local function finish(h, timeout)
  local r = h.p:wait(timeout or 30)
  if not r then
    h.p:kill("SIGKILL")
    r = h.p:wait(10)
  end
  h.reader:wait(10)
  h.errs:wait(10)
  h.p:close()
  return r
end
-- waits until pred() holds (true) or `timeout` seconds pass (false)
local function upto(pred, timeout)
  local deadline = rig.now() + timeout
  while not pred() do
    if rig.now() > deadline then return false end
    rig.sleep(0.01)
  end
  return true
end

-- ---- sessions ----
-- A lane: one store (a cluster) with its writer's sessions. The cluster
-- storm runs SOAK_LANES lanes side by side; the others run one.
local function lane(name)
  return { name = name, current = {}, all = {}, file = work .. "/acked" .. name .. ".txt" }
end
local L0 = lane("")
local current, all = L0.current, L0.all   -- ids the writer restores; every id ever
local function writer(spec, L)
  L = L or L0
  local argv = { luarig, here .. "writer.lua", spec, tostring(NSESS) }
  for _, id in ipairs(L.current) do argv[#argv + 1] = id end
  local w = { ready = false, faults = 0, new = {} }
  w.h = start(argv, function(line)
    local id = line:match("^SESSION (%S+)")
    if id then w.new[#w.new + 1] = id end
    if line == "READY" then w.ready = true end
    if line:match("^FAULT ") then w.faults = w.faults + 1 note("%s", line) end
    if line:match("^RESTOREFAIL ") then note("%s", line) end
  end)
  return w
end
-- the new sessions a writer announced join the current ones
local function adopt(w, L)
  L = L or L0
  for _, id in ipairs(w.new) do
    L.current[#L.current + 1] = id
    L.all[#L.all + 1] = id
  end
end

-- A fresh process checks ids (all current ones by default) and, with
-- restore, restores each and completes a turn.
local function verify(spec, ids, restore, L)
  L = L or L0
  local file = L.file
  local f = assert(io.open(file, "w"))
  for _, id in ipairs(ids) do
    for seq, v in pairs(acked[id] or {}) do f:write(id, " ", seq, " ", v, "\n") end
  end
  f:close()
  local argv = { luarig, here .. "verify.lua", spec, file, restore and "1" or "0" }
  for _, id in ipairs(ids) do argv[#argv + 1] = id end
  local res, tips = nil, {}
  local h = start(argv, function(line)
    if line:match("^BAD ") then note("%s", line) end
    local tid, tn = line:match("^TIP (%S+) (%d+)$")
    if tid then tips[tid] = tonumber(tn) end
    local a, b, c, d = line:match("^RESULT (%d+) (%d+) (%d+) (%d+)$")
    if a then res = { tonumber(a), tonumber(b), tonumber(c), tonumber(d) } end
  end)
  local r = finish(h, 600)
  if not res then
    note("verifier ended %s without a result: %s", tostring(r and (r.signal or r.code)), h.stderr or "")
    T.rfail = T.rfail + #ids
    return tips
  end
  T.checked = T.checked + res[1]
  T.lost = T.lost + res[2]
  T.corrupt = T.corrupt + res[3]
  T.rfail = T.rfail + res[4]
  if restore then T.restores = T.restores + #ids - res[4] end
  -- sessions long enough retire: they were just verified; new ones replace them
  local keep = {}
  for _, id in ipairs(L.current) do
    if count_of(id) < RETIRE then keep[#keep + 1] = id end
  end
  for i = #L.current, 1, -1 do L.current[i] = nil end
  for i, id in ipairs(keep) do L.current[i] = id end
  return tips, res[1]
end

-- ---- nats-server, one or a cluster, on loopback ports of its own ----
local cluster = dofile(here .. "../lua/session/nats_cluster.lua")
local netns = dofile(here .. "../lua/session/netns.lua")
local function servers(dir, n, host)
  local S = cluster.start(dir, n, { host = host })
  S.up_node, S.kill_node = S.up, S.kill
  return S
end

local function final_check(spec, L)
  L = L or L0
  -- every session ever, every event ever acknowledged, once more
  -- (this verifier's own count: the cluster's other lanes may be checking meanwhile)
  local _, n = verify(spec, L.all, false, L)
  note("final check%s: %d acknowledged events in %d sessions", L.name, n or 0, #L.all)
end

-- ---- the storms ----
local storms = {}

-- SIGKILL of a writer at a random moment, a fresh verifier after each.
local function writer_storm(spec, ttl_wait)
  for k = 1, count do
    if not more(k) then break end
    local w = writer(spec)
    if math.random() < 0.15 then
      rig.sleep(math.random() * 0.4)            -- during start-up and restore
    else
      upto(function() return w.ready or w.h.done end, 60)
      rig.sleep(math.random() * 1.2)            -- mid-turn, anywhere
    end
    w.h.p:kill("SIGKILL")
    local r = finish(w.h)
    if r and r.signal == "SIGKILL" then T.kills = T.kills + 1 else
      note("writer %d ended %s: %s", k, tostring(r and (r.signal or r.code)), w.h.stderr or "")
    end
    T.faults = T.faults + w.faults
    adopt(w)
    verify(spec, current, true)
    if k % 50 == 0 then
      progress("%d kills, %d acknowledged, %d lost, %d corrupt, %d restore failures",
        T.kills, nacked, T.lost, T.corrupt, T.rfail)
    end
  end
end

function storms.lmdb()
  writer_storm("lmdb:" .. work .. "/store")
end

function storms.nats()
  local S = servers(work .. "/nats", 1)
  local spec = "nats:" .. S.url .. "|soak|1|3"
  local ok, err = pcall(function() writer_storm(spec) final_check(spec) end)
  S:stop()
  assert(ok, err)
end

-- kill -9 of nats-server mid-turn, restarted after a random outage; the
-- writer carries on (or faults); then it is stopped and verified.
function storms.server()
  local S = servers(work .. "/nats", 1)
  local spec = "nats:" .. S.url .. "|soak|3|2"
  local ok, err = pcall(function()
    for k = 1, count do
      if not more(k) then break end
      local w = writer(spec)
      upto(function() return w.ready or w.h.done end, 60)
      rig.sleep(math.random() * 1.0)
      S:kill(1)
      T.kills = T.kills + 1
      rig.sleep(math.random() * 1.0)
      S:up(1)
      local before = w.h.lines
      -- carried on: a new acknowledged event after the restart
      if upto(function() return w.h.lines > before + 2 or w.faults >= NSESS or w.h.done end, 15)
        and w.faults < NSESS then T.carried = T.carried + 1 end
      w.h.p:kill("SIGTERM")
      finish(w.h, 15)
      T.faults = T.faults + w.faults
      adopt(w)
      verify(spec, current, true)
      if k % 50 == 0 then
        progress("%d server kills, %d acknowledged, %d lost, %d corrupt, %d restore failures",
          T.kills, nacked, T.lost, T.corrupt, T.rfail)
      end
    end
    final_check(spec)
  end)
  S:stop()
  assert(ok, err)
end

-- One writer for `count` turns, sessions rotating every 25 turns; its
-- anonymous memory (RssAnon: the heaps), RSS and open fds sampled every
-- 2 s; at the end all is verified. RSS alone would not show a leak: the
-- LMDB map's pages that a process has touched count in it (RssFile), and
-- they grow with the store.
local long = { rss = {}, fds = {}, turns = 0, rss_max = 0 }
function storms.long()
  local spec = "lmdb:" .. work .. "/store"
  local argv = { luarig, here .. "writer.lua", spec, tostring(NSESS) }
  local w = { new = {}, faults = 0 }
  w.h = start(argv, function(line)
    local id = line:match("^SESSION (%S+)")
    if id then all[#all + 1] = id current[#current + 1] = id end
    if line:match("^EV %S+ %d+ TurnDone ") then long.turns = long.turns + 1 end
    if line:match("^FAULT ") then w.faults = w.faults + 1 note("%s", line) end
  end, { SOAK_ROTATE = "25" })
  local pid = w.h.p.pid
  local function sample()
    local f = io.open("/proc/" .. pid .. "/status")
    if not f then return end
    local st = f:read("a")
    f:close()
    local rss = tonumber(st:match("RssAnon:%s*(%d+)"))
    long.rss_max = math.max(long.rss_max, tonumber(st:match("VmRSS:%s*(%d+)")) or 0)
    local r = rig.process.run{ argv = { "sh", "-c", "ls /proc/" .. pid .. "/fd | wc -l" } }
    -- from a tenth of the way in (after warm-up) to the end
    if long.turns < count // 10 and #long.rss > 0 then long.rss, long.fds = {}, {} end
    long.rss[#long.rss + 1] = rss
    long.fds[#long.fds + 1] = tonumber(r.stdout:match("%d+"))
  end
  upto(function() return w.h.lines > 0 or w.h.done end, 60)
  local next_note = 0
  while long.turns < count and not w.h.done and w.faults == 0 do
    sample()
    if long.turns >= next_note then
      note("turns %d anon %s KiB fds %s", long.turns, long.rss[#long.rss], long.fds[#long.fds])
      next_note = next_note + 500
    end
    rig.sleep(2)
  end
  sample()
  w.h.p:kill("SIGKILL")
  finish(w.h)
  T.faults = w.faults
  if w.faults > 0 then T.rfail = T.rfail + w.faults end
  -- the sessions open at the kill: restored, and a turn each
  local open = {}
  for i = math.max(1, #all - NSESS + 1), #all do open[#open + 1] = all[i] end
  for i = #current, 1, -1 do current[i] = nil end
  for i, id in ipairs(open) do current[i] = id end
  verify(spec, open, true)
end


-- kill -9 of one node of a 3-node cluster mid-turn (the ledger stream's
-- leader every other time, else any node), restarted once the writer
-- carried on or faulted; then the writer stops and a fresh process verifies.
-- One failure at a time, which is what 3 replicas tolerate: a round kills
-- only once every node answers healthy (the one restarted last rejoined and
-- caught up), else two nodes would be behind at once.
-- A round waits mostly for the cluster's elections (every node leads some
-- stream, and nats-server's election timeout is 4-9 s), so SOAK_LANES
-- (default 3) clusters, each with its own writer, run side by side, and
-- their kills count together towards COUNT.
function storms.cluster()
  local ns = "soak"
  local lanes = math.max(1, tonumber(os.getenv("SOAK_LANES") or "3") // 1)
  local next_k, shown = 0, 0
  local function run_lane(i)
    local L = lane(lanes > 1 and tostring(i) or "")
    local S = servers(work .. "/cluster" .. L.name, 3)
    -- requests wait 10 s (a new leader is elected within that), leases live 30 s
    local spec = "nats:" .. S.url .. "|" .. ns .. "|30|10|3"
    local ok, err = pcall(function()
      C.open(spec):close()
      while true do
        next_k = next_k + 1
        local k = next_k
        if k > count or not more(k) then break end
        if not S:healthy(60) then note("round %d: a node not healthy after 60 s", k) end
        local w = writer(spec, L)
        upto(function() return w.ready or w.h.done end, 60)
        rig.sleep(math.random() * 1.0)
        local victim = math.random(1, 3)
        if k % 2 == 1 then victim = S:leader("LR_" .. ns .. "_LEDGERS") or victim end
        S:kill(victim)
        T.kills = T.kills + 1
        local before = w.h.lines
        if upto(function() return w.h.lines > before + 8 or w.faults >= NSESS or w.h.done end, 30)
          and w.faults < NSESS then T.carried = T.carried + 1 end
        S:up(victim)
        w.h.p:kill("SIGTERM")
        finish(w.h, 30)
        T.faults = T.faults + w.faults
        adopt(w, L)
        verify(spec, L.current, true, L)
        if T.kills % 10 == 0 and T.kills ~= shown then
          shown = T.kills
          progress("%d node kills, %d acknowledged, %d lost, %d corrupt, %d restore failures, %d carried on",
            T.kills, nacked, T.lost, T.corrupt, T.rfail, T.carried)
        end
      end
      final_check(spec, L)
    end)
    S:stop()
    if not ok then note("lane %s: %s", L.name, tostring(err)) end
    return ok, err
  end
  local tasks = {}
  for i = 1, lanes do tasks[i] = rig.spawn(run_lane, i) end
  for i = 1, lanes do
    local ok, err = tasks[i]:wait()
    assert(ok, err)
  end
end

-- A writer in a network namespace of its own, its link cut past its lease
-- TTL: its sessions fault; a fresh process takes them over (restore and a
-- turn each); the link comes back and what the writer still had to send
-- drains; then its journals must not have moved ("stale writes").
function storms.partition()
  local n, why = netns.new()
  if not n then
    print(("soak partition: skipped: %s"):format(why))
    os.exit(0)
  end
  local S = servers(work .. "/cluster", 3, "0.0.0.0")
  local ns = "part"
  local spec = "nats:" .. S.url .. "|" .. ns .. "|2|1|3"
  local inside = "nats:" .. S:url_via(n.host) .. "|" .. ns .. "|2|1|3"
  T.stale = 0
  local ok, err = pcall(function()
    C.open(spec):close()
    for k = 1, count do
      if not more(k) then break end
      local argv = {}
      for _, a in ipairs(n.prefix) do argv[#argv + 1] = a end
      local w = { ready = false, faults = 0, new = {} }
      for _, a in ipairs{ luarig, here .. "writer.lua", inside, tostring(NSESS) } do argv[#argv + 1] = a end
      for _, id in ipairs(current) do argv[#argv + 1] = id end
      w.h = start(argv, function(line)
        local id = line:match("^SESSION (%S+)")
        if id then w.new[#w.new + 1] = id end
        if line == "READY" then w.ready = true end
        if line:match("^FAULT ") then w.faults = w.faults + 1 end
        if line:match("^RESTOREFAIL ") then note("%s", line) end
      end)
      upto(function() return w.ready or w.h.done end, 60)
      rig.sleep(math.random() * 1.0)
      n:cut()
      T.kills = T.kills + 1
      -- every session faults on its own (its lease cannot be renewed)
      if not upto(function() return w.faults >= NSESS or w.h.done end, 30) then
        note("partition %d: %d of %d sessions faulted within 30 s", k, w.faults, NSESS)
      end
      T.faults = T.faults + w.faults
      adopt(w)
      -- another process takes them over while the link is still cut
      local ids = { table.unpack(current) }
      local taken = verify(spec, ids, true)
      n:heal()
      upto(function() return n:unsent() == 0 end, 30)
      w.h.p:kill("SIGKILL")
      finish(w.h)
      upto(function() return n:sockets() == 0 end, 30)
      -- nothing more from the cut-off writer: every journal where the takeover left it
      local after = verify(spec, ids, false)
      for id, tip in pairs(taken) do
        if after[id] ~= tip then
          T.stale = T.stale + 1
          note("BAD %s moved from %d to %s after the takeover", id, tip, tostring(after[id]))
        end
      end
      if k % 10 == 0 then
        progress("%d partitions, %d acknowledged, %d lost, %d corrupt, %d restore failures, %d stale writes",
          T.kills, nacked, T.lost, T.corrupt, T.rfail, T.stale)
      end
    end
    final_check(spec)
  end)
  S:stop()
  n:close()
  assert(ok, err)
end

local t0 = rig.now()
local fn = storms[storm] or error("unknown storm '" .. tostring(storm) .. "'")
progress("seed %d, count %d, work in %s", seed, count, work)
fn()
if storm == "lmdb" or storm == "long" then final_check("lmdb:" .. work .. "/store") end
local extra = ""
if storm == "long" then
  -- the lowest sample of each half after warm-up (the heap saws up and down
  -- with the collector: a leak raises the troughs), the highest overall
  local function stats(t)
    local h = math.max(1, #t // 2)
    local lo1, lo2, mx = math.huge, math.huge, 0
    for i, v in ipairs(t) do
      if i <= h then lo1 = math.min(lo1, v) else lo2 = math.min(lo2, v) end
      mx = math.max(mx, v)
    end
    if lo2 == math.huge then lo2 = lo1 end
    return lo1 == math.huge and 0 or lo1, lo2 == math.huge and 0 or lo2, mx
  end
  local r1, r2, rm = stats(long.rss)
  local f1, f2, fm = stats(long.fds)
  extra = (", turns %d, anon KiB low %d -> %d (max %d), rss max %d KiB, fds %d -> %d (max %d)")
    :format(long.turns, r1, r2, rm, long.rss_max, f1, f2, fm)
  -- a leak: fds that grow, or troughs that rise by half again (and 8 MiB) after warm-up
  if f2 > f1 + 4 or r2 > r1 * 3 // 2 + 8192 then
    T.rfail = T.rfail + 1
    note("growth: %s", extra)
  end
end
if storm == "server" or storm == "cluster" then
  extra = (", carried on %d, faulted sessions %d"):format(T.carried, T.faults)
end
if storm == "partition" then
  extra = (", sessions faulted %d, stale writes %d"):format(T.faults, T.stale)
  T.lost = T.lost + T.stale
end
if stopped_at then
  -- (the cluster's lanes finish the rounds they were in)
  extra = extra .. (", stopped at SOAK_DEADLINE after %d of %d")
    :format(storm == "cluster" and T.kills or stopped_at, count)
end
print(("soak %s: kills %d, acknowledged %d, checked %d, lost %d, corrupt %d, restore failures %d, restores %d%s (%.0f s, seed %d)")
  :format(storm, T.kills, nacked, T.checked, T.lost, T.corrupt, T.rfail, T.restores, extra,
    rig.now() - t0, seed))
io.stdout:flush()
os.exit((T.lost + T.corrupt + T.rfail) == 0 and 0 or 1)
