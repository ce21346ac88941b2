-- rig.store.nats: options, and sessions shared by luarig processes through
-- one nats-server this spec starts on a free loopback port (and stops).
-- The processes use a 1 s lease TTL so takeovers happen quickly.

local core = require "rig.core" -- the stdlib's private binding: what the public API does not show

local luarig = os.getenv("LUARIG") or "build/luarig"
local here = (os.getenv("LUARIG_ROOT") or ".") .. "/tests/lua/session/"
local define = dofile(here .. "rig.lua")

local have_server = os.execute("command -v nats-server >/dev/null 2>&1")

local function tmpdir()
  local p = os.tmpname()
  os.remove(p)
  assert(os.execute("mkdir -p '" .. p .. "'"))
  return p
end

-- nats-server -js on 127.0.0.1, a port it picks (read from its ports file)
-- or the given one (a restart: the same port, the same store in dir/js).
local function start_nats(dir, port)
  local conf = dir .. "/server.conf"
  local f = assert(io.open(conf, "w"))
  f:write('listen: "127.0.0.1:' .. (port or "-1") .. '"\nmax_payload: 8MB\n' ..
    'jetstream { store_dir: "' .. dir .. '/js" }\n')
  f:close()
  local p = assert(rig.process.spawn{ argv = { "nats-server", "-c", conf, "-js",
    "--ports_file_dir", dir }, stdout = "null", stderr = "null" })
  local ports = dir .. "/nats-server_" .. p.pid .. ".ports"
  for _ = 1, 200 do
    local pf = io.open(ports)
    if pf then
      local u = pf:read("a"):match("(nats://127%.0%.0%.1:%d+)")
      pf:close()
      if u then return p, u end
    end
    rig.sleep(0.05)
  end
  p:kill("SIGKILL")
  error("nats-server did not start")
end

local function kill_nats(p)
  p:kill("SIGTERM")
  p:wait(10)
  p:close()
end

local function stop_nats(p, dir)
  kill_nats(p)
  os.execute("rm -rf '" .. dir .. "'")
end

-- Runs f(url) against a fresh server; the server is stopped even when f fails.
local function with_nats(f)
  local dir = tmpdir()
  local server, url = start_nats(dir)
  local ok, err = pcall(f, url)
  stop_nats(server, dir)
  if not ok then error(err, 0) end
end

-- A luarig process holding a session on the NATS store; prints "SESSION <id>".
local function holder(url, extra)
  return assert(rig.process.spawn{ argv = { luarig, "-e", [[
    local store = rig.store.nats{ url = "]] .. url .. [[", lease_ttl = 1 }
    local r = dofile("]] .. here .. [[rig.lua")(store, { { text = "late" } })
    local s = assert(r:session())
    print("SESSION " .. s.id); io.stdout:flush()
    ]] .. (extra or "rig.sleep(30)") }, stdin = "pipe", stdout = "pipe" })
end

-- The session child of the fault tests (tests/lua/session/nats_child.lua)
-- and what it printed: seen = the enduring events its subscriber got, each
-- { seq, type, event_id } (delivered only once the append was acknowledged).
local function child(url, ns, ttl, timeout, nsteps, delay)
  local p = assert(rig.process.spawn{ argv = { luarig, here .. "nats_child.lua", url, ns,
    tostring(ttl), tostring(timeout), tostring(nsteps), tostring(delay) },
    stdin = "pipe", stdout = "pipe" })
  local it = p:lines("stdout")
  local c = { p = p, seen = {} }
  -- reads lines until pred(line) holds; returns that line (nil at the end)
  function c.upto(pred)
    for line in it do
      local seq, ty, eid = line:match("^EV (%d+) (%S+) (%S+)$")
      if seq then c.seen[#c.seen + 1] = { seq = tonumber(seq), type = ty, event_id = eid } end
      if pred(line) then return line end
    end
  end
  c.id = c.upto(function(l) return l:match("^SESSION ") end):match("^SESSION (%S+)")
  return c
end

local function stepdones(n)
  local k = 0
  return function(l)
    if l:match("^EV %d+ StepDone ") then k = k + 1 end
    return k >= n
  end
end

-- The journal as the store has it: seqs 1..tip without a gap, no record
-- twice (kind, id and body bytes), every event id once, and every event
-- the child saw acknowledged is there at its seq. Returns the records.
local function check_journal(store, id, seen)
  local recs, tip = assert(core.journal_read(store, id, 1, 0))
  expect(#recs).to_be(tip)
  local bytes, at = {}, {}
  for i, r in ipairs(recs) do
    expect(r.seq).to_be(i)
    local key = r.kind .. "\0" .. r.id .. "\0" .. (r.body or tostring(r.epoch))
    if bytes[key] then error("record " .. i .. " duplicates record " .. bytes[key], 0) end
    bytes[key] = i
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

-- Restores id on store, retrying while the old holder's lease lives.
local function restore_when_free(store, id)
  local rg = define(store, { { text = "x" }, { text = "y" } })
  local s, msg, code
  for _ = 1, 200 do
    s, msg, code = rg:restore(id)
    if s or code ~= "held" then break end
    rig.sleep(0.1)
  end
  return s, msg, code
end

-- A TCP proxy between one process and the server (tests/lua/session/tcp_proxy.py).
local function proxy(url)
  local host, port = url:match("^nats://([^:]+):(%d+)$")
  local p = assert(rig.process.spawn{ argv = { "python3", here .. "tcp_proxy.py", host, port },
    stdin = "pipe", stdout = "pipe" })
  local it = p:lines("stdout")
  local x = { p = p }
  x.url = "nats://127.0.0.1:" .. it():match("^PORT (%d+)$")
  function x.say(cmd)
    p:write(cmd .. "\n")
    for line in it do if line == "OK " .. cmd:match("^%S+") then return end end
  end
  function x.upto(want) for line in it do if line == want then return line end end end
  function x.close() p:kill("SIGKILL") p:wait(5) p:close() end
  return x
end

describe("rig.store.nats", function()
  if not have_server then
    it("skip: nats-server is not installed", function() end)
    return
  end

  it("checks its options", function()
    expect(function() rig.store.nats{ url = "nats://127.0.0.1:1", tiemout = 1 } end)
      .to_fail("unknown option 'tiemout'")
    expect(function() rig.store.nats{ url = "nats://x:1", embedded_dir = "/tmp/x" } end)
      .to_fail("exactly one")
    expect(function() rig.store.nats{} end).to_fail("exactly one")
    expect(function() rig.store.nats{ embedded_dir = "rel" } end).to_fail("absolute")
    expect(function() rig.store.nats{ url = "nats://x:1", lease_ttl = "1" } end)
      .to_fail("'lease_ttl' must be a number")
    expect(function() rig.store.nats{ url = "nats://x:1", nkey = "U" } end)
      .to_fail("go together")
    -- a refused connection: an expected failure, and the password is not in it
    local s, msg, code = rig.store.nats{ url = "nats://bob:hunter2@127.0.0.1:1", timeout = 0.5 }
    expect(s).to_be_nil()
    expect(code).to_be("network")
    expect(msg:find("hunter2", 1, true)).to_be_nil()
  end)

  it("embedded mode: snapshots round-trip, a second owner is refused", function()
    local dir = tmpdir()
    local ws = tmpdir()
    local f = assert(io.open(ws .. "/a.txt", "w"))
    f:write("hello nats")
    f:close()
    local store = assert(rig.store.nats{ embedded_dir = dir .. "/nats" })
    expect(store:kind()).to_be("nats")
    local ref = assert(store:snapshot(ws))
    local s2, msg = rig.store.nats{ embedded_dir = dir .. "/nats" }
    expect(s2).to_be_nil()
    expect(msg).to_match("owned by another process")
    store:close()
    local again <close> = assert(rig.store.nats{ embedded_dir = dir .. "/nats" })
    assert(again:restore(ref, dir .. "/out"))
    local g = assert(io.open(dir .. "/out/a.txt"))
    expect(g:read("a")).to_be("hello nats")
    g:close()
    os.execute("rm -rf '" .. dir .. "' '" .. ws .. "'")
  end, { timeout = 60 })

  it("a second process gets 'held', then takes over after SIGKILL and the TTL", function()
    with_nats(function(url)
    local p = holder(url)
    local id
    for line in p:lines("stdout") do id = line:match("^SESSION (%S+)") if id then break end end
    expect(id).to_be_truthy()
    local store <close> = assert(rig.store.nats{ url = url, lease_ttl = 1 })
    local rg = define(store, { { text = "x" } })
    local s, _, code = rg:restore(id)
    expect(s).to_be_nil()
    expect(code).to_be("held")
    p:kill("SIGKILL")
    p:wait(5)
    p:close()
    local s2
    for _ = 1, 100 do
      s2, _, code = rg:restore(id)
      if s2 or code ~= "held" then break end
      rig.sleep(0.1)
    end
    assert(s2, code)
    s2:shutdown()
    end)
  end, { timeout = 60 })

  it("fences a stale writer revived past its TTL: it can no longer append", function()
    with_nats(function(url)
    local p = holder(url, [[
      io.stdin:read("l")
      s:submit("from the stale writer")
      local ok, msg, code = s:wait_idle(10)
      print("RESULT " .. tostring(code) .. " " .. tostring(msg)); io.stdout:flush()
    ]])
    local lines = p:lines("stdout")
    local id = lines():match("^SESSION (%S+)")
    p:kill("SIGSTOP")
    local store <close> = assert(rig.store.nats{ url = url, lease_ttl = 1 })
    local rg = define(store, { { text = "x" } })
    local s, code
    for _ = 1, 100 do
      s, _, code = rg:restore(id)
      if s or code ~= "held" then break end
      rig.sleep(0.1)
    end
    assert(s)
    local tip = select(2, core.journal_read(store, id, 1, 0))
    p:kill("SIGCONT")
    p:write("go\n")
    local result = lines()
    expect(result).to_match("^RESULT faulted")
    p:wait(10)
    p:close()
    local tip2 = select(2, core.journal_read(store, id, 1, 0))
    expect(tip2).to_be(tip)
    s:shutdown()
    end)
  end, { timeout = 60 })

  -- The server stopped (SIGTERM) after the third step and a new one started on
  -- the same port and store `down` seconds later; the child's requests time
  -- out after `timeout`. Returns the child's RESULT line.
  local function restart_mid_turn(ns, down, timeout)
    local dir = tmpdir()
    local server, url = start_nats(dir)
    local ok, res = pcall(function()
      local c = child(url, ns, 10, timeout, 12, 0.25)
      c.p:write("go\n")
      c.upto(stepdones(3))
      local port = url:match(":(%d+)$")
      kill_nats(server)
      server = nil
      rig.sleep(down)
      server = start_nats(dir, port)
      local result = c.upto(function(l) return l:match("^RESULT") end)
      expect(result).to_be_truthy()
      c.upto(function(l) return l == "DONE" end)
      c.p:wait(10)
      c.p:close()
      -- continued after reconnect, or faulted cleanly: nothing else
      expect(result == "RESULT ok" or result:match("^RESULT faulted ") ~= nil).to_be(true)
      local store <close> = assert(rig.store.nats{ url = url, namespace = ns })
      check_journal(store, c.id, c.seen)
      if result == "RESULT ok" then
        expect(c.seen[#c.seen].type).to_be("SessionStopped")
      end
      -- either way another process restores it, and the journal is still whole
      local s = assert(restore_when_free(store, c.id))
      s:shutdown()
      check_journal(store, c.id, c.seen)
      return result
    end)
    if server then kill_nats(server) end
    os.execute("rm -rf '" .. dir .. "'")
    if not ok then error(res, 0) end
    return res
  end

  it("nats-server restarted mid-turn: the turn goes on; acknowledged records once", function()
    local result = restart_mid_turn("restart", 0.3, 3)
    -- down 0.3 s, requests wait 3 s: the session rides the reconnect
    expect(result).to_be("RESULT ok")
  end, { timeout = 90 })

  it("nats-server down longer than requests wait: the session faults, nothing lost", function()
    local result = restart_mid_turn("down", 3, 1)
    expect(result).to_match("^RESULT faulted ")
  end, { timeout = 90 })

  it("a publish whose ack comes late is resolved by re-reading: the turn goes on", function()
    with_nats(function(url)
      local x = proxy(url)
      local ok, err = pcall(function()
        -- the ack of the turn's first append is held 3 s; the client waits 2 s (ambiguous),
        -- then re-reads the ledger and finds its own bytes at the tip
        local c = child(x.url, "late", 10, 2, 2, 0.05)
        x.say("withhold 3 lr.late.ledger.")
        c.p:write("go\n")
        x.upto("WITHHELD")
        local result = c.upto(function(l) return l:match("^RESULT") end)
        expect(result).to_be("RESULT ok")
        c.upto(function(l) return l == "DONE" end)
        c.p:wait(10)
        c.p:close()
        local store <close> = assert(rig.store.nats{ url = url, namespace = "late" })
        check_journal(store, c.id, c.seen)
        expect(c.seen[#c.seen].type).to_be("SessionStopped")
      end)
      x.close()
      if not ok then error(err, 0) end
    end)
  end, { timeout = 60 })

  it("a partitioned process fences itself, another takes over, its late publish is refused",
    function()
    with_nats(function(url)
      local x = proxy(url)
      local ok, err = pcall(function()
        local c = child(x.url, "part", 2, 1, 40, 0.25)
        c.p:write("go\n")
        c.upto(stepdones(2))
        -- the partition starts as the child publishes its next record: that
        -- message waits in the proxy and reaches the server after the takeover
        x.say("freeze_at lr.part.ledger.")
        x.upto("FROZEN")
        -- the child faults on its own while its connection is frozen
        local result = c.upto(function(l) return l:match("^RESULT") end)
        expect(result).to_match("^RESULT faulted ")
        -- another process takes over once the lease expired
        local store <close> = assert(rig.store.nats{ url = url, namespace = "part", lease_ttl = 2 })
        local s = assert(restore_when_free(store, c.id))
        local epoch = s.epoch
        local _, tip = assert(core.journal_read(store, c.id, 1, 0))
        -- the partition heals: whatever the child had sent arrives now
        x.say("thaw")
        c.upto(function(l) return l == "DONE" end)
        c.p:wait(10)
        c.p:close()
        rig.sleep(0.5)
        local recs = check_journal(store, c.id, c.seen)
        expect(#recs).to_be(tip)
        -- after the new holder's fence only its own records
        local fence
        for i, r in ipairs(recs) do
          if r.kind == "fence" and r.epoch == epoch then fence = i end
        end
        expect(fence).to_be_truthy()
        for i = fence + 1, #recs do
          expect(recs[i].id:match("^[a-z](%d+)%.")).to_be(tostring(epoch))
        end
        s:shutdown()
      end)
      x.close()
      if not ok then error(err, 0) end
    end)
  end, { timeout = 60 })
end)
