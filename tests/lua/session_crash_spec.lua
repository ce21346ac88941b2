-- Crash tests: a child process runs a session on an LMDB store and is
-- killed with SIGKILL at one point of a turn; this process restores the
-- session, checks the journal has no gap, the history and open gates are
-- right, the cut turn is resumable (session_resume_spec.lua resumes such
-- turns), and completes a new turn. Then a stale writer across processes.

local core = require "rig.core" -- the stdlib's private binding: what the public API does not show

local luarig = os.getenv("LUARIG") or "build/luarig"
local here = (os.getenv("LUARIG_ROOT") or ".") .. "/tests/lua/session/"
local define = dofile(here .. "rig.lua")
local json = rig.json

local function tmpdir()
  local p = os.tmpname()
  os.remove(p)
  assert(os.execute("mkdir -p '" .. p .. "'"))
  return p
end

local function run_child(dir, point)
  local p = assert(rig.process.spawn{ argv = { luarig, here .. "child.lua", dir, point },
    stdout = "pipe", stderr = "pipe" })
  local id
  for line in p:lines("stdout") do
    id = id or line:match("^SESSION (%S+)")
  end
  local r = p:wait(20)
  local err = p:read("stderr")
  p:close()
  return id, r, err
end

local function check_journal(store, id)
  local recs, tip = assert(core.journal_read(store, id, 1, 0))
  expect(#recs).to_be(tip)
  for i, r in ipairs(recs) do expect(r.seq).to_be(i) end
  local types = {}
  for _, r in ipairs(recs) do
    if r.kind == "event" then types[#types + 1] = json.decode(r.body).type end
  end
  return table.concat(types, " ")
end

local function new_turn(s)
  local sub = s:subscribe{ ephemeral = false }
  s:submit("after the crash")
  local last
  for ev in sub:events(10) do
    last = ev
    if ev.ends_turn then break end
  end
  sub:close()
  return last
end

describe("sessions after SIGKILL", function()
  local points = {
    { "stream", 1, 0 },   -- history after restore: the user message only
    { "tool", 1, 0 },
    { "gate", 1, 1 },     -- one gate left open
    { "between", 3, 0 },  -- user, the committed step (assistant + tool results)
    { "shutdown", 1, 0 },
  }
  for _, pt in ipairs(points) do
    local point, hist, gates = pt[1], pt[2], pt[3]
    it("restores a session killed " .. (point == "between" and "between steps" or "at " .. point), function()
      local dir = tmpdir()
      local id, r = run_child(dir, point)
      expect(id).to_be_truthy()
      expect(r.signal).to_be("SIGKILL")
      local store <close> = rig.store.lmdb{ root = dir }
      local before = check_journal(store, id)
      expect(before).to_match("^SessionStarted")
      local rg = define(store, { { text = "fine" } })
      local s = assert(rg:restore(id))
      local after = check_journal(store, id)
      expect(after).to_match("RestoreStarted")
      expect(after).to_match("RestoreDone$")
      -- an open turn was closed by the restore (unless shutdown already closed it)
      local interrupted = select(2, after:gsub("TurnInterrupted", ""))
      expect(interrupted).to_be(1)
      -- and s:resume() could continue it (tests/lua/session_resume_spec.lua does)
      expect(#s:resumable()).to_be(1)
      expect(s:resumable()[1].reason).to_be(point == "shutdown" and "shutdown" or "restored")
      expect(#s:history()).to_be(hist)
      expect(#s:gates()).to_be(gates)
      if gates > 0 then
        local g = s:gates()[1]
        expect(g.tool).to_be("fetchy")
        expect(s:respond_gate(g.gate_id, "deny")).to_be(true)
        expect(#s:gates()).to_be(0)
      end
      local last = new_turn(s)
      expect(last.type).to_be("TurnDone")
      expect(last.message.content[1].text).to_be("fine")
      s:shutdown()
      os.execute("rm -rf '" .. dir .. "'")
    end, { timeout = 60 })
  end

  it("refuses to restore a session a live process holds", function()
    local dir = tmpdir()
    local p = assert(rig.process.spawn{ argv = { luarig, "-e", [[
      local r = dofile("]] .. here .. [[rig.lua")(rig.store.lmdb{ root = "]] .. dir .. [[" }, { { text = "x" } })
      local s = assert(r:session())
      print("SESSION " .. s.id); io.stdout:flush()
      rig.sleep(30)
    ]] }, stdout = "pipe" })
    local id
    for line in p:lines("stdout") do id = line:match("^SESSION (%S+)") if id then break end end
    local store <close> = rig.store.lmdb{ root = dir }
    local rg = define(store, { { text = "x" } })
    local s, msg, code = rg:restore(id)
    expect(s).to_be_nil()
    expect(code).to_be("held")
    p:kill("SIGKILL")
    p:wait(5)
    p:close()
    local s2 = assert(rg:restore(id))
    s2:shutdown()
  end, { timeout = 60 })

  it("fences a stale writer: the old process can no longer append", function()
    local dir = tmpdir()
    -- A opens the session, is stopped; its lease is lost (the lock files
    -- removed, as an operator might); B restores; A resumes and must fault.
    local p = assert(rig.process.spawn{ argv = { luarig, "-e", [[
      local r = dofile("]] .. here .. [[rig.lua")(rig.store.lmdb{ root = "]] .. dir .. [[" }, { { text = "late" } })
      local s = assert(r:session())
      print("SESSION " .. s.id); io.stdout:flush()
      io.stdin:read("l")
      local sub = s:subscribe{ ephemeral = false }
      s:submit("from the stale writer")
      local ok, msg, code = s:wait_idle(10)
      print("RESULT " .. tostring(code) .. " " .. tostring(msg)); io.stdout:flush()
    ]] }, stdin = "pipe", stdout = "pipe" })
    local lines = p:lines("stdout")
    local id = lines():match("^SESSION (%S+)")
    assert(os.execute("rm -f '" .. dir .. "'/leases/*.lock"))
    local store <close> = rig.store.lmdb{ root = dir }
    local rg = define(store, { { text = "x" } })
    local s = assert(rg:restore(id))
    local tip = select(2, core.journal_read(store, id, 1, 0))
    p:write("go\n")
    local result = lines()
    expect(result).to_match("^RESULT faulted")
    p:wait(10)
    p:close()
    local tip2 = select(2, core.journal_read(store, id, 1, 0))
    expect(tip2).to_be(tip)
    s:shutdown()
  end, { timeout = 60 })
end)
