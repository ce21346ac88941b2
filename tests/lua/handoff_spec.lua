-- Handoffs: a loop hands the conversation to another loop of the rig through
-- the gate (ActiveLoopChanged); the next input goes to the new active loop; a
-- restore, a crash between the handoff and the target's turn, and a fork all
-- keep it.

local json = rig.json
local luarig = os.getenv("LUARIG") or "build/luarig"
local here = (os.getenv("LUARIG_ROOT") or ".") .. "/tests/lua/session/"


-- Waits for the session to go idle; a turn that failed or was interrupted is
-- what these cases look at, so only a fault or a timeout is an error.
local function idle(s, t)
  local ok, msg, code = s:wait_idle(t or 10)
  if not ok and code ~= "turn_failed" and code ~= "interrupted" then error(msg, 2) end
  return true
end

local function tmpdir()
  local p = os.tmpname()
  os.remove(p)
  assert(os.execute("mkdir -p '" .. p .. "'"))
  return p
end

local define = dofile(here .. "handoff_rig.lua")

local function events(s)
  local out = {}
  for rec in s:journal() do out[#out + 1] = rec end
  return out
end

local function of_type(evs, t)
  local out = {}
  for _, ev in ipairs(evs) do if ev.type == t then out[#out + 1] = ev end end
  return out
end

local function text(msg)
  local p = {}
  for _, b in ipairs(msg.content) do if b.type == "text" then p[#p + 1] = b.text end end
  return table.concat(p)
end

local TRANSFER = { tool_calls = { { name = "transfer_to_billing", input = { message = "wants a refund" } } } }

describe("handoffs", function()
  it("moves the conversation to the target loop, which answers; later input goes there", function()
    local r, tm, bm = define({ { tool_calls = { { name = "lookup", input = { id = "7" } } } }, TRANSFER },
      { { text = "refund issued" }, { text = "anything else?" } })
    local s = assert(r:session())
    expect(s.active).to_be("triage")
    s:submit("refund order 7")
    idle(s, 10)
    local evs = events(s)
    local done = of_type(evs, "TurnDone")
    expect(#done).to_be(2)
    expect(done[1].loop_id).to_be("triage")
    expect(done[1].handoff).to_equal({ to = "billing", call_id = done[1].handoff.call_id })
    expect(done[2].loop_id).to_be("billing")
    expect(text(done[2].message)).to_be("refund issued")
    local ch = of_type(evs, "ActiveLoopChanged")
    expect(#ch).to_be(1)
    expect(ch[1].from).to_be("triage")
    expect(ch[1].to).to_be("billing")
    expect(ch[1].reason).to_be("handoff")
    -- billing started on the handoff, and before its turn
    local order = {}
    for _, ev in ipairs(evs) do
      if (ev.type == "LoopStarted" and ev.loop_id == "billing") or ev.type == "ActiveLoopChanged"
         or (ev.type == "TurnStarted" and ev.loop_id == "billing") then
        order[#order + 1] = ev.type
      end
    end
    expect(order).to_equal({ "LoopStarted", "ActiveLoopChanged", "TurnStarted" })
    -- the gate saw the delegate requirement
    local pd = of_type(evs, "PermissionDecided")
    expect(pd[#pd].tool).to_be("transfer_to_billing")
    expect(pd[#pd].verdict).to_be("allow")
    -- billing read the conversation (lookup and its result) but not the transfer call
    local seen = bm:calls()[1].messages
    local all = json.encode(seen)
    expect(all:find("refund order 7", 1, true) ~= nil).to_be(true)
    expect(all:find("order 7: shipped", 1, true) ~= nil).to_be(true)
    expect(all:find("transfer_to_billing", 1, true)).to_be_nil()
    expect(text(seen[#seen])).to_match("^%[conversation handed over from loop 'triage'%]")
    expect(text(seen[#seen])).to_match("wants a refund")
    expect(s.active).to_be("billing")
    -- the next submit without a loop goes to billing
    s:submit("thanks")
    idle(s, 10)
    expect(#bm:calls()).to_be(2)
    expect(#tm:calls()).to_be(2)
    s:shutdown()
  end)

  it("goes through the gate: denied, the conversation stays", function()
    local r, _, bm = define({ TRANSFER, { text = "I cannot transfer you" } }, { { text = "never" } },
      { gate = rig.gate{ access = { network = "allow" }, approver = "headless" } })
    local s = assert(r:session())
    s:submit("refund")
    idle(s, 10)
    local evs = events(s)
    expect(#of_type(evs, "ActiveLoopChanged")).to_be(0)
    expect(#bm:calls()).to_be(0)
    expect(s.active).to_be("triage")
    local res = of_type(evs, "StepDone")[1].results.content[1]
    expect(res.is_error).to_be(true)
    expect(res.content).to_match("permission denied")
    s:shutdown()
  end)

  it("filters the history as asked", function()
    local function seen(filter)
      local r, _, bm = define({ { tool_calls = { { name = "lookup", input = { id = "7" } } } }, TRANSFER },
        { { text = "ok" } }, { filter = filter })
      local s = assert(r:session())
      s:submit("refund order 7")
      idle(s, 10)
      s:shutdown()
      return bm:calls()[1].messages
    end
    local nt = seen("no_tools")
    for _, m in ipairs(nt) do
      for _, b in ipairs(m.content) do expect(b.type).to_be("text") end
    end
    local lu = seen("last_user")
    expect(#lu).to_be(2) -- the user's last message, then the handover note
    expect(text(lu[1])).to_be("refund order 7")
    local fn = seen(function(h) return { h[1] } end)
    expect(#fn).to_be(2)
  end)

  it("a restore keeps the active loop and the target's history", function()
    local r, _, _, store = define({ TRANSFER }, { { text = "refund issued" } })
    local s = assert(r:session())
    s:submit("refund")
    idle(s, 10)
    local id = s.id
    local h = json.encode(s:history("billing"))
    s:shutdown()
    local r2, _, bm2 = define({}, { { text = "after restore" } }, { store = store })
    local s2 = assert(r2:restore(id))
    expect(s2.active).to_be("billing")
    expect(json.encode(s2:history("billing"))).to_be(h)
    expect(json.encode(s2:history())).to_be(h) -- the default loop is the active one
    s2:submit("more")
    idle(s2, 10)
    expect(#bm2:calls()).to_be(1)
    s2:shutdown()
  end)

  it("a fork keeps the active loop of its cut", function()
    local r = define({ TRANSFER }, { { text = "refund issued" }, { text = "forked answer" } })
    local s = assert(r:session())
    s:submit("refund")
    idle(s, 10)
    local f = assert(s:fork())
    expect(f.active).to_be("billing")
    local fevs = events(f)
    local ch = of_type(fevs, "ActiveLoopChanged")
    expect(#ch).to_be(1)
    expect(ch[1].to).to_be("billing")
    expect(ch[1].reason).to_be("fork")
    s:shutdown()
    f:shutdown()
  end)

  it("a crash between the handoff and the target's turn: the restore starts that turn", function()
    local dir = tmpdir()
    local p = assert(rig.process.spawn{ argv = { luarig, here .. "handoff_child.lua", dir },
      stdout = "pipe", stderr = "pipe" })
    local id
    for line in p:lines("stdout") do id = id or line:match("^SESSION (%S+)") end
    local res = p:wait(30)
    local err = p:read("stderr")
    p:close()
    if res.signal ~= "SIGKILL" then error("the child was not killed: " .. tostring(err)) end
    local store = assert(rig.store.lmdb{ root = dir .. "/state" })
    local r, _, bm = define({}, { { text = "refund issued after the crash" } }, { store = store })
    local s = assert(r:restore(id))
    idle(s, 10)
    expect(s.active).to_be("billing")
    expect(#bm:calls()).to_be(1)
    local evs = events(s)
    local bt = 0
    for _, ev in ipairs(evs) do
      if ev.type == "TurnStarted" and ev.loop_id == "billing" then bt = bt + 1 end
    end
    expect(bt).to_be(1)
    s:shutdown()
  end)
end)

describe("handoffs to a busy loop", function()
  it("a target busy with a turn of its own refuses the call; the conversation stays", function()
    local tm = rig.model.script{ function()
      return { tool_calls = { { name = "transfer_to_billing", input = {} } } } end,
      { text = "billing is busy, I stay" } }
    local release = rig.cond()
    local released = false
    local bm = rig.model.script{ function()
      while not released do release:wait(5) end
      return { text = "billing's own answer" }
    end }
    local triage = rig.loop{ name = "triage", model = tm, gate = rig.gate{ access = { delegate = "allow" },
      approver = "headless" }, policy_revision = "v1", handoffs = { "billing" } }
    local billing = rig.loop{ name = "billing", model = bm }
    local r = rig.define{ loops = { triage, billing }, primers = { "triage", "billing" },
      active_primer = "triage", store = rig.store.memory() }
    local s = assert(r:session())
    s:submit("an invoice question", { loop = "billing" })
    s:submit("refund please")
    local deadline = rig.now() + 10
    local refused
    while rig.now() < deadline and not refused do
      for ev in s:journal() do
        if ev.type == "StepDone" and ev.loop_id == "triage" and ev.results then
          refused = ev.results.content[1]
        end
      end
      if not refused then rig.sleep(0.02) end
    end
    released = true
    release:signal()
    idle(s)
    expect(refused.is_error).to_be(true)
    expect(refused.content).to_match("refused: loop 'billing' is busy")
    expect(s.active).to_be("triage")
    for ev in s:journal() do expect(ev.type ~= "ActiveLoopChanged").to_be(true) end
    s:shutdown()
  end)
end)
