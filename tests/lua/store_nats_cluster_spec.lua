-- rig.store.nats on a 3-node nats-server cluster on loopback (JetStream,
-- every stream at 3 replicas), started and stopped by this spec:
--   * kill -9 of the ledger stream's leader, then of a follower, mid-turn:
--     no acknowledged event is lost and the session carries on;
--   * a partition: a luarig process in a network namespace of its own
--     (made here, a veth pair to this one) whose link is cut for longer
--     than its lease TTL faults without writing, another process takes the
--     session over, and once the link is back the first writes nothing more.
-- make soak runs both as storms (tests/soak/storm.lua: cluster, partition).

local luarig = os.getenv("LUARIG") or "build/luarig"
local here = (os.getenv("LUARIG_ROOT") or ".") .. "/tests/lua/session/"
local define = dofile(here .. "rig.lua")
local cluster = dofile(here .. "nats_cluster.lua")
local netns = dofile(here .. "netns.lua")

local have_server = os.execute("command -v nats-server >/dev/null 2>&1")

local function tmpdir()
  local p = os.tmpname()
  os.remove(p)
  assert(os.execute("mkdir -p '" .. p .. "'"))
  return p
end

-- A store on the cluster, retried while it elects its leaders.
local function open(url, ns, extra)
  local opts = { url = url, namespace = ns, replicas = 3, timeout = 5 }
  for k, v in pairs(extra or {}) do opts[k] = v end
  local s, msg, code
  for _ = 1, 150 do
    s, msg, code = rig.store.nats(opts)
    if s then return s end
    rig.sleep(0.1)
  end
  error("cannot open the cluster: " .. tostring(code) .. " " .. tostring(msg), 0)
end

-- The session child (tests/lua/session/nats_child.lua), optionally run
-- through a command prefix (ip netns exec …); seen = its acknowledged events.
local function child(url, ns, ttl, timeout, nsteps, delay, prefix)
  local argv = {}
  for _, a in ipairs(prefix or {}) do argv[#argv + 1] = a end
  for _, a in ipairs{ luarig, here .. "nats_child.lua", url, ns, tostring(ttl), tostring(timeout),
      tostring(nsteps), tostring(delay), "3" } do argv[#argv + 1] = a end
  local p = assert(rig.process.spawn{ argv = argv, stdin = "pipe", stdout = "pipe", stderr = "pipe" })
  local it = p:lines("stdout")
  local c = { p = p, seen = {} }
  function c.upto(pred)
    for line in it do
      local seq, ty, eid = line:match("^EV (%d+) (%S+) (%S+)$")
      if seq then c.seen[#c.seen + 1] = { seq = tonumber(seq), type = ty, event_id = eid } end
      if pred(line) then return line end
    end
  end
  local first = c.upto(function(l) return l:match("^SESSION ") end)
  if not first then error("the child did not start: " .. tostring(p:read("stderr")), 0) end
  c.id = first:match("^SESSION (%S+)")
  return c
end

local function stepdones(n)
  local k = 0
  return function(l)
    if l:match("^EV %d+ StepDone ") then k = k + 1 end
    return k >= n
  end
end

-- seqs 1..tip without a gap, every event once, every acknowledged event at its seq
local function check_journal(store, id, seen)
  local recs, tip = assert(require("rig.core").journal_read(store, id, 1, 0))
  expect(#recs).to_be(tip)
  local at = {}
  for i, r in ipairs(recs) do
    expect(r.seq).to_be(i)
    if r.kind == "event" then
      local ev = rig.json.decode(r.body)
      if at[ev.event_id] then error("event " .. ev.event_id .. " twice", 0) end
      at[ev.event_id] = { seq = r.seq, type = ev.type }
    end
  end
  for _, ev in ipairs(seen) do
    local got = at[ev.event_id]
    if not got or got.seq ~= ev.seq or got.type ~= ev.type then
      error(("acknowledged %s %s at %d is %s"):format(ev.type, ev.event_id, ev.seq,
        got and ("at " .. got.seq) or "missing"), 0)
    end
  end
  return recs
end

local function restore_when_free(store, id)
  local rg = define(store, { { text = "after" } })
  local s, msg, code
  for _ = 1, 300 do
    s, msg, code = rg:restore(id)
    if s or code ~= "held" then break end
    rig.sleep(0.1)
  end
  return s, msg, code
end

local function completes_a_turn(s)
  local sub = s:subscribe{ ephemeral = false }
  s:submit("carry on")
  local last
  for ev in sub:events(30) do
    last = ev
    if ev.ends_turn then break end
  end
  sub:close()
  expect(last and last.type).to_be("TurnDone")
end

describe("rig.store.nats on a 3-node cluster", function()
  if not have_server then
    it("skip: nats-server is not installed", function() skip("nats-server is not installed") end)
    return
  end

  local dir = tmpdir()
  -- client ports on every address: the partitioned process reaches them from its namespace
  local c = cluster.start(dir, 3, { host = "0.0.0.0" })

  -- kill -9 of node `which(stream)` after the turn's third step; the child's
  -- requests wait 20 s (a stream elects a new leader within about 10), its lease lives 40 s
  local function kill_mid_turn(ns, which)
    local st = open(c.url, ns)
    st:close()
    local ch = child(c.url, ns, 40, 20, 10, 0.1)
    ch.p:write("go\n")
    ch.upto(stepdones(3))
    local victim = which("LR_" .. ns .. "_LEDGERS")
    c:kill(victim)
    local result = ch.upto(function(l) return l:match("^RESULT") end)
    ch.upto(function(l) return l == "DONE" end)
    ch.p:wait(10)
    ch.p:close()
    c:up(victim)
    expect(result).to_be("RESULT ok")
    expect(ch.seen[#ch.seen].type).to_be("SessionStopped")
    local store <close> = open(c.url, ns)
    check_journal(store, ch.id, ch.seen)
    local s = assert(restore_when_free(store, ch.id))
    completes_a_turn(s)
    s:shutdown()
    check_journal(store, ch.id, ch.seen)
  end

  it("kill -9 of the stream leader mid-turn: nothing acknowledged is lost, the turn goes on",
    function()
      kill_mid_turn("kleader", function(stream)
        return assert(c:leader(stream), "no leader of " .. stream .. " in the logs")
      end)
    end, { timeout = 120 })

  it("kill -9 of a follower mid-turn: nothing acknowledged is lost, the turn goes on", function()
    kill_mid_turn("kfollower", function(stream)
      local l = assert(c:leader(stream))
      return l % 3 + 1
    end)
  end, { timeout = 120 })

  it("a partition longer than the lease TTL: the cut-off process faults without writing, "
    .. "another takes over, and after the link is back the first wrote nothing more", function()
    local n, why = netns.new()
    if not n then skip(why) end
    local ok, err = pcall(function()
      local st = open(c.url, "part")
      st:close()
      -- lease TTL 2 s, requests wait 1 s; a model step every 0.25 s
      local ch = child(c:url_via(n.host), "part", 2, 1, 40, 0.25, n.prefix)
      ch.p:write("go\n")
      ch.upto(stepdones(2))
      n:cut()
      -- it faults on its own: it cannot renew its lease
      local result = ch.upto(function(l) return l:match("^RESULT") end)
      expect(result).to_match("^RESULT faulted ")
      -- another process takes the session over once the lease expired
      local store <close> = open(c.url, "part", { lease_ttl = 2 })
      local s = assert(restore_when_free(store, ch.id))
      local epoch = s.epoch
      local _, tip = assert(require("rig.core").journal_read(store, ch.id, 1, 0))
      -- the cut was silent (no reset): its connection is still open, its data held
      expect(n:sockets() > 0).to_be(true)
      -- the link is back: whatever the first process still had to send arrives now
      n:heal()
      ch.upto(function(l) return l == "DONE" end)
      ch.p:wait(30)
      ch.p:close()
      for _ = 1, 600 do
        if n:sockets() == 0 then break end
        rig.sleep(0.05)
      end
      expect(n:sockets()).to_be(0)
      local recs = check_journal(store, ch.id, ch.seen)
      expect(#recs).to_be(tip)
      -- after the new holder's fence, only its own records
      local fence
      for i, r in ipairs(recs) do
        if r.kind == "fence" and r.epoch == epoch then fence = i end
      end
      expect(fence).to_be_truthy()
      for i = fence + 1, #recs do
        expect(recs[i].id:match("^[a-z](%d+)%.")).to_be(tostring(epoch))
      end
      -- and the session carries on with its new holder
      completes_a_turn(s)
      s:shutdown()
    end)
    n:close()
    if not ok then error(err, 0) end
  end, { timeout = 120 })

  it("stops the cluster", function()
    c:stop()
    os.execute("rm -rf '" .. dir .. "'")
  end)
end)
