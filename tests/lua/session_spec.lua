-- rig sessions: turns and steps on a scripted model, the queue and folding,
-- interrupt, parallel tools, limits, every gate path, subscriptions and the
-- journal, a storage failure faulting the session.

local core = require "rig.core" -- the stdlib's private binding: what the public API does not show

local json = rig.json

local function tmpdir()
  local p = os.tmpname()
  os.remove(p)
  assert(os.execute("mkdir -p '" .. p .. "'"))
  return p
end

local function allow_all()
  return rig.gate{ access = { ["filesystem.read"] = "allow", ["filesystem.write"] = "allow",
    network = "allow", ["command.execute"] = "allow" }, approver = "headless" }
end

local function echo_tool(opts)
  opts = opts or {}
  return rig.tool{
    name = opts.name or "echo", description = "echoes its text",
    schema = { type = "object", properties = { text = { type = "string" } },
               required = { "text" } },
    sequential = opts.sequential,
    prepare = function(args)
      return { summary = "echo " .. args.text, requirements = opts.requirements or {} }
    end,
    run = opts.run or function(req, ctx) return "echo: " .. req.summary:sub(6) end,
  }
end

local function define(steps, opts)
  opts = opts or {}
  if type(steps) == "function" then
    local fn = steps
    steps = {}
    for i = 1, 200 do steps[i] = fn end
  end
  local model = rig.model.script(steps)
  local loop = rig.loop{ name = "assistant", model = model, system = "be brief",
    tools = opts.tools or { echo_tool() }, gate = opts.gate == nil and allow_all() or opts.gate or nil,
    policy_revision = "v1", limits = opts.limits }
  local store = opts.store or rig.store.memory()
  return rig.define{ loops = { loop }, primers = { "assistant" }, store = store }, model, store
end

-- Reads events until a terminal one; returns the list.
local function until_terminal(sub, n)
  n = n or 1
  local out = {}
  for ev in sub:events(10) do
    out[#out + 1] = ev
    if ev.ends_turn then
      n = n - 1
      if n == 0 then break end
    end
  end
  return out
end

local function types(evs, enduring_only)
  local t = {}
  for _, e in ipairs(evs) do
    if not enduring_only or e.seq then t[#t + 1] = e.type end
  end
  return table.concat(t, " ")
end

local function journal_types(s, from)
  local t = {}
  for rec in s:journal{ from = from or 1 } do
    if rec.type ~= "Fence" and not rec.kind then t[#t + 1] = rec.type end
  end
  return table.concat(t, " ")
end

describe("rig sessions", function()
  it("runs a turn with a tool call and commits each step", function()
    local r, model = define({
      { text = "Let me echo.", tool_calls = { { name = "echo", input = { text = "hi" } } } },
      { text = "Done: hi." },
    })
    local s = assert(r:session())
    expect(s.id).to_match("^%x+%-%x+%-%x+%-%x+%-%x+$")
    local sub = s:subscribe{ loops = "all", ephemeral = true }
    local cid = s:submit("please echo hi")
    expect(cid).to_be_truthy()
    local evs = until_terminal(sub)
    local t = types(evs, true)
    expect(t).to_be("SessionActive TurnStarted ToolCallsPlanned PermissionDecided ToolResultRecorded StepDone StepDone TurnDone")
    local last = evs[#evs]
    expect(last.type).to_be("TurnDone")
    expect(last.message.content[1].text).to_be("Done: hi.")
    expect(last.cause.command_id).to_be(cid)
    expect(last.usage.output_tokens > 0).to_be(true)
    -- the model saw the tool result in the second call
    local calls = model:calls()
    local second = calls[2].messages
    expect(second[#second].role).to_be("tool")
    expect(second[#second].content[1].content).to_be("echo: hi")
    -- ephemeral deltas arrived, carrying no seq
    local deltas = 0
    for _, e in ipairs(evs) do if e.type == "TokenDelta" then deltas = deltas + 1; expect(e.seq).to_be_nil() end end
    expect(deltas > 0).to_be(true)
    expect(s:wait_idle(5)).to_be(true)
    local h = s:history()
    expect(#h).to_be(4)
    expect(h[1].role).to_be("user")
    expect(h[3].role).to_be("tool")
    s:shutdown()
  end)

  it("finishes a turn whose submitting task is cancelled mid-turn", function()
    -- the tool holds the turn until the submitter is gone; before the driver
    -- belonged to the session, cancelling the submitter took the turn with
    -- it: no terminal event, and the session busy for good
    local entered, release = rig.cond(), rig.cond()
    local r = define({
      { tool_calls = { { name = "echo", input = { text = "held" } } } },
      { text = "finished" },
    }, { tools = { echo_tool{ run = function(req)
      entered:signal()
      release:wait(10)
      return "echo: " .. req.summary:sub(6)
    end } } })
    local s = assert(r:session())
    local sub = s:subscribe{ loops = "all" }
    local submitter = rig.spawn(function()
      s:submit("echo held")
      rig.sleep(60) -- a handler that goes on waiting until its client leaves
    end)
    expect(entered:wait(10)).to_be(true)
    submitter:cancel()
    release:signal()
    local evs = until_terminal(sub)
    expect(evs[#evs].type).to_be("TurnDone")
    expect(evs[#evs].message.content[1].text).to_be("finished")
    expect(s:wait_idle(5)).to_be(true)
    expect(journal_types(s)).to_match("TurnDone")
    s:shutdown()
  end)

  it("delivers enduring events only after they are in the journal", function()
    local store = rig.store.memory()
    local r = define({ { text = "a" }, { text = "b" } }, { store = store })
    local s = assert(r:session())
    local sub = s:subscribe{ ephemeral = false }
    s:submit("one")
    s:submit("two")
    local seen = 0
    for ev in sub:events(10) do
      expect(ev.seq).to_be_truthy()
      -- the record is readable from the store at the moment we see it
      local recs = core.journal_read(store, s.id, ev.seq, 1)
      expect(#recs).to_be(1)
      expect(json.decode(recs[1].body).event_id).to_be(ev.event_id)
      seen = seen + 1
      if ev.type == "SessionIdle" then break end
    end
    expect(seen > 5).to_be(true)
    s:shutdown()
  end)

  it("queues input while busy and folds it in at the next tool result", function()
    local gate_open = rig.cond()
    local release = false
    local slow = echo_tool{ run = function(req)
      gate_open:signal()
      while not release do rig.sleep(0.01) end
      return "slow done"
    end }
    local r, model = define({
      { text = "working", tool_calls = { { name = "echo", input = { text = "x" } } } },
      { text = "saw both" },
    }, { tools = { slow } })
    local s = assert(r:session())
    local sub = s:subscribe{ ephemeral = true }
    s:submit("first")
    gate_open:wait(5)
    local c2 = s:submit("second, while busy")
    release = true
    local evs = until_terminal(sub)
    local t = types(evs, false)
    expect(t).to_match("InputQueued")
    expect(types(evs, true)).to_be("SessionActive TurnStarted ToolCallsPlanned PermissionDecided ToolResultRecorded StepDone TurnFoldedInto StepDone TurnDone")
    for _, e in ipairs(evs) do
      if e.type == "TurnFoldedInto" then expect(e.cause.command_id).to_be(c2) end
    end
    local msgs = model:calls()[2].messages
    expect(msgs[#msgs].role).to_be("user")
    expect(msgs[#msgs].content[1].text).to_be("second, while busy")
    s:shutdown()
  end)

  it("starts a queued input as the next turn when the turn ends without a tool", function()
    local r = define({ { text = "one", delay = 0.2 }, { text = "two" } })
    local s = assert(r:session())
    local sub = s:subscribe{ ephemeral = false }
    s:submit("a")
    rig.sleep(0.05)
    s:submit("b")
    local evs = until_terminal(sub, 2)
    expect(types(evs, true)).to_be("SessionActive TurnStarted StepDone TurnDone TurnStarted StepDone TurnDone")
    s:shutdown()
  end)

  it("rejects input past a full queue", function()
    local r = define(function() return { text = "slow", delay = 0.5 } end)
    local s = assert(r:session())
    local sub = s:subscribe{ ephemeral = false }
    s:submit("first")
    for i = 1, 64 do s:submit("q" .. i) end
    local c = s:submit("one too many")
    local rejected
    for ev in sub:events(5) do
      if ev.type == "TurnRejected" then rejected = ev break end
    end
    expect(rejected.reason).to_be("queue_full")
    expect(rejected.cause.command_id).to_be(c)
    s:interrupt()
    s:shutdown()
  end)

  it("interrupts a turn during the stream and keeps committed steps", function()
    local r = define({
      { text = "step one", tool_calls = { { name = "echo", input = { text = "1" } } } },
      { text = string.rep("slow ", 200), chunk = 5, chunk_delay = 0.02 },
      { text = "after" },
    })
    local s = assert(r:session())
    local sub = s:subscribe{ ephemeral = true }
    s:submit("go")
    -- wait for a delta of the second step
    local steps = 0
    for ev in sub:events(5) do
      if ev.type == "StepDone" then steps = steps + 1 end
      if steps == 1 and ev.type == "TokenDelta" then break end
    end
    expect(s:interrupt()).to_be(true)
    local evs = until_terminal(sub)
    expect(evs[#evs].type).to_be("TurnInterrupted")
    expect(select(3, s:wait_idle(5))).to_be("interrupted")
    expect(s:interrupt()).to_be(false)
    -- the committed step stays; the interrupted one is gone
    local h = s:history()
    expect(#h).to_be(3)
    expect(h[2].content[1].text).to_be("step one")
    -- the session takes the next turn
    s:submit("again")
    local evs2 = until_terminal(sub)
    expect(evs2[#evs2].type).to_be("TurnDone")
    s:shutdown()
  end)

  it("interrupts a turn during a tool run and kills its process", function()
    local pidfile = tmpdir() .. "/pid"
    local sleeper = echo_tool{ run = function()
      local p = rig.process.spawn{ argv = { "/bin/sh", "-c", "echo $$ > " .. pidfile .. "; exec sleep 30" } }
      p:wait()
      return "never"
    end }
    local r = define({ { text = "run", tool_calls = { { name = "echo", input = { text = "z" } } } },
                       { text = "x" } }, { tools = { sleeper } })
    local s = assert(r:session())
    local sub = s:subscribe{ ephemeral = true }
    s:submit("go")
    for ev in sub:events(5) do if ev.type == "ToolCallStarted" then break end end
    -- the file exists before the shell has written its pid into it: wait for the number
    local pid
    for _ = 1, 500 do
      local f = io.open(pidfile)
      if f then pid = f:read("n") f:close() end
      if pid then break end
      rig.sleep(0.02)
    end
    expect(pid ~= nil).to_be(true)
    expect(s:interrupt()).to_be(true)
    local evs = until_terminal(sub)
    expect(evs[#evs].type).to_be("TurnInterrupted")
    -- the step the tool was part of is discarded, in memory and in the journal
    expect(#s:history()).to_be(1)
    for rec in s:journal{ from = 1 } do expect(rec.type ~= "StepDone").to_be(true) end
    -- gone, or a zombie its handle has not reaped yet: not running (the kill is
    -- sent by the interrupt; wait for it to take effect)
    local state
    for _ = 1, 500 do
      local st = io.open("/proc/" .. pid .. "/stat")
      state = st and st:read("a"):match("^%d+ %b() (%a)")
      if st then st:close() end
      if state == nil or state == "Z" then break end
      rig.sleep(0.02)
    end
    expect(state == nil or state == "Z").to_be(true)
    s:shutdown()
  end)

  it("runs tools in parallel and pairs results in call order", function()
    local order = {}
    local t = echo_tool{ run = function(req)
      local n = tonumber(req.summary:match("%d+"))
      rig.sleep((4 - n) * 0.05)
      order[#order + 1] = n
      return "r" .. n
    end }
    local seq = echo_tool{ name = "seq", sequential = true, run = function() order[#order + 1] = "s" return "s" end }
    local r, model = define({
      { text = "", tool_calls = {
        { name = "echo", input = { text = "1" } }, { name = "echo", input = { text = "2" } },
        { name = "echo", input = { text = "3" } }, { name = "seq", input = { text = "x" } } } },
      { text = "ok" },
    }, { tools = { t, seq } })
    local s = assert(r:session())
    local sub = s:subscribe{ ephemeral = false }
    local t0 = rig.now()
    s:submit("go")
    until_terminal(sub)
    -- the three ran together (finishing in reverse), the sequential one after them
    expect(table.concat(order, ",")).to_be("3,2,1,s")
    local results = model:calls()[2].messages
    local tm = results[#results]
    expect(tm.content[1].content).to_be("r1")
    expect(tm.content[2].content).to_be("r2")
    expect(tm.content[3].content).to_be("r3")
    expect(tm.content[4].content).to_be("s")
    expect(rig.now() - t0 < 0.5).to_be(true)
    s:shutdown()
  end)

  it("turns unknown tools, bad arguments and failed preparation into results", function()
    local bad = rig.tool{ name = "bad", description = "fails to prepare",
      schema = { type = "object", properties = {} },
      prepare = function() return nil, "no such file" end, run = function() return "x" end }
    local noprep = rig.tool{ name = "noprep", description = "no prepare",
      schema = { type = "object", properties = {} }, run = function() return "x" end }
    local r, model = define({
      { text = "", tool_calls = {
        { name = "missing", input = {} },
        { name = "echo", input = { text = 5 } },
        { name = "bad", input = {} },
        { name = "noprep", input = {} },
        { name = "echo", input_json = "{not json" } } },
      { text = "ok" },
    }, { tools = { echo_tool(), bad, noprep } })
    local s = assert(r:session())
    local sub = s:subscribe{ ephemeral = false }
    s:submit("go")
    local evs = until_terminal(sub)
    expect(evs[#evs].type).to_be("TurnDone")
    local res = model:calls()[2].messages
    local c = res[#res].content
    expect(c[1].content).to_be("error: unknown tool 'missing'")
    expect(c[2].content).to_match("^error: invalid arguments: ")
    expect(c[3].content).to_be("error: preparation failed: no such file")
    expect(c[4].content).to_be("x") -- no prepare: declares no access, the gate allows it
    expect(c[4].is_error ~= true).to_be(true)
    expect(c[5].content).to_match("^error: invalid arguments: ")
    for _, i in ipairs { 1, 2, 3, 5 } do expect(c[i].is_error).to_be(true) end
    s:shutdown()
  end)

  it("caps a long tool result as head and tail with a marker", function()
    local big = echo_tool{ run = function() return string.rep("a", 5000) .. string.rep("z", 5000) end }
    local r, model = define({
      { text = "", tool_calls = { { name = "echo", input = { text = "x" } } } },
      { text = "ok" },
    }, { tools = { big }, limits = { result_bytes = 1000 } })
    local s = assert(r:session())
    local sub = s:subscribe{ ephemeral = false }
    s:submit("go")
    until_terminal(sub)
    local res = model:calls()[2].messages
    local out = res[#res].content[1].content
    expect(#out <= 1000).to_be(true)
    expect(out:sub(1, 1)).to_be("a")
    expect(out:sub(-1)).to_be("z")
    expect(out).to_match("%[tool output truncated: omitted %d+ of 10000 bytes%]")
    s:shutdown()
  end)

  describe("limits", function()
    local function loop_forever()
      return function() return { text = "", tool_calls = { { name = "echo", input = { text = "x" } } } } end
    end
    local cases = {
      { "iterations", { iterations = 3 } },
      { "calls", { calls = 2 } },
      { "max_tokens", { max_tokens = 10 } },
      { "max_cost", { max_cost = 0.0001 } },
    }
    for _, c in ipairs(cases) do
      it("ends the turn at its " .. c[1] .. " limit", function()
        local steps = loop_forever()
        if c[1] == "max_cost" then
          steps = function() return { text = "", usage = { input_tokens = 100, output_tokens = 100, cost = 0.001 },
            tool_calls = { { name = "echo", input = { text = "x" } } } } end
        end
        local r = define(steps, { limits = c[2] })
        local s = assert(r:session())
        local sub = s:subscribe{ ephemeral = false }
        s:submit("go")
        local evs = until_terminal(sub)
        local last = evs[#evs]
        expect(last.type).to_be("TurnFailed")
        expect(last.error.code).to_be("limit")
        expect(last.error.limit).to_be(c[1])
        s:shutdown()
      end)
    end

    it("reports a model failure with its code", function()
      local r = define({ { error = { message = "overloaded now", code = "overloaded" } } })
      local s = assert(r:session())
      local sub = s:subscribe{ ephemeral = false }
      s:submit("go")
      local evs = until_terminal(sub)
      expect(evs[#evs].type).to_be("TurnFailed")
      expect(evs[#evs].error.code).to_be("overloaded")
      s:shutdown()
    end)
  end)

  describe("gates", function()
    local function gated_rig(steps, perm_path, approver)
      local gate = rig.gate{ access = { ["filesystem.read"] = "allow", ["filesystem.write"] = "deny",
        network = "gated", ["command.execute"] = "gated" },
        rules = perm_path and rig.permissions.file(perm_path) or nil, approver = approver or "interactive" }
      local net = echo_tool{ requirements = { { kind = "network", match = "tcp://example.org:443" } } }
      return define(steps, { gate = gate, tools = { net } })
    end
    local function one_call() return { text = "", tool_calls = { { name = "echo", input = { text = "n" } } } } end

    it("opens a gate and runs the tool once approved", function()
      local r, model = gated_rig({ one_call(), { text = "ok" } })
      local s = assert(r:session())
      local sub = s:subscribe{ ephemeral = false }
      s:submit("go")
      local opened
      for ev in sub:events(5) do if ev.type == "GateOpened" then opened = ev break end end
      expect(#s:gates()).to_be(1)
      expect(s:gates()[1].unmet[1].kind).to_be("network")
      expect(s:respond_gate(opened.gate_id, "approve")).to_be(true)
      local evs = until_terminal(sub)
      expect(evs[#evs].type).to_be("TurnDone")
      local res = model:calls()[2].messages
      expect(res[#res].content[1].content).to_be("echo: n")
      expect(types(evs, true)).to_match("^GateResolved")
      local _, msg, code = s:respond_gate(opened.gate_id, "approve")
      expect(code).to_be("not_found")
      s:shutdown()
    end)

    it("denies when the person says no", function()
      local r, model = gated_rig({ one_call(), { text = "ok" } })
      local s = assert(r:session())
      local sub = s:subscribe{ ephemeral = false }
      s:submit("go")
      for ev in sub:events(5) do
        if ev.type == "GateOpened" then s:respond_gate(ev.gate_id, "deny") end
        if ev.ends_turn then break end
      end
      local res = model:calls()[2].messages
      expect(res[#res].content[1].content).to_match("^error: permission denied")
      s:shutdown()
    end)

    it("approve_always saves the rule and does not ask the next time", function()
      local perm = tmpdir() .. "/permissions.json"
      local r, model = gated_rig({ one_call(), { text = "ok" }, one_call(), { text = "ok2" } }, perm)
      local s = assert(r:session())
      local sub = s:subscribe{ ephemeral = false }
      s:submit("go")
      local gates = 0
      for ev in sub:events(5) do
        if ev.type == "GateOpened" then gates = gates + 1; s:respond_gate(ev.gate_id, "approve_always") end
        if ev.ends_turn then break end
      end
      expect(gates).to_be(1)
      local f = assert(io.open(perm))
      expect(f:read("a")).to_match("example.org")
      f:close()
      s:submit("again")
      local evs = until_terminal(sub)
      expect(types(evs, true):find("GateOpened")).to_be_nil()
      expect(evs[#evs].type).to_be("TurnDone")
      s:shutdown()
    end)

    it("headless: gated means denied with approval required", function()
      local r, model = gated_rig({ one_call(), { text = "ok" } }, nil, "headless")
      local s = assert(r:session())
      local sub = s:subscribe{ ephemeral = false }
      s:submit("go")
      until_terminal(sub)
      local res = model:calls()[2].messages
      expect(res[#res].content[1].content).to_match("approval required")
      s:shutdown()
    end)

    it("a loop with tools and no gate is refused at definition, with the fix", function()
      -- it used to define, then deny every call mid-turn while the turn succeeded
      local model = rig.model.script({ one_call(), { text = "ok" } })
      expect(function() rig.loop{ name = "assistant", model = model, tools = { echo_tool() } } end)
        .to_fail("session_spec%.lua:%d+: rig%.loop 'assistant': a loop with tools needs a gate "
          .. "%(without one every call is denied%): add gate = rig%.gate%.default%(%), "
          .. 'policy_revision = "v1"')
    end)
  end)

  it("ends an overflowing subscription with a catch-up error", function()
    local r = define({ { text = "a" }, { text = "b" }, { text = "c" } })
    local s = assert(r:session())
    local sub = s:subscribe{ ephemeral = false, buffer = 2 }
    s:submit("1"); s:submit("2"); s:submit("3")
    expect(s:wait_idle(5)).to_be(true)
    local n = 0
    for _ in sub:events(1) do n = n + 1 end
    expect(n <= 2).to_be(true)
    expect(sub.code).to_be("overflow")
    expect(sub.error).to_match("journal")
    s:shutdown()
  end)

  it("faults the session when the journal cannot be written", function()
    local store = rig.store.memory()
    local r = define({ { text = "", tool_calls = { { name = "echo", input = { text = "x" } } } },
                       { text = "never" } }, { store = store })
    local s = assert(r:session())
    local sub = s:subscribe{ ephemeral = false }
    core.store_inject_failure(store, "append", 3)
    s:submit("go")
    local ok, msg, code = s:wait_idle(5)
    expect(ok).to_be_nil()
    expect(code).to_be("faulted")
    expect(s:faulted()).to_match("injected")
    local _, m2, c2 = s:submit("more")
    expect(c2).to_be("faulted")
    core.store_inject_failure(store, "append", -1)
    s:shutdown()
  end)

  -- The last StepDone and the terminal are not waited for (one SSE fan-out
  -- with LoopIdle and SessionIdle): a failed append of any of a turn's
  -- records still faults the session, wait_idle says so, subscribers see
  -- nothing from the failed record on, and the catalog says "failed".
  it("faults the session when any append of a turn fails, waited or not", function()
    local seen_done = false
    for after = 0, 8 do
      local store = rig.store.memory()
      local r = define({ { text = "fine" } }, { store = store })
      local s = assert(r:session())
      local sub = s:subscribe{ ephemeral = false }
      core.store_inject_failure(store, "append", after)
      s:submit("go")
      local ok, _, code = s:wait_idle(5)
      core.store_inject_failure(store, "append", -1)
      local types = {}
      for ev in sub:events(0.2) do types[#types + 1] = ev.type end
      local list = r:sessions()
      if ok then
        -- every append of the turn went through
        expect(types[#types]).to_be("SessionIdle")
        expect(list[1].state).to_be("idle")
        seen_done = true
      else
        expect(code).to_be("faulted")
        expect(s:faulted()).to_match("injected")
        expect(#types <= after).to_be(true)
        expect(types[#types] ~= "SessionIdle").to_be(true)
        expect(list[1].state).to_be("failed")
      end
      s:shutdown()
    end
    expect(seen_done).to_be(true)
  end)

  it("restores a session: history, a new turn, the catalog", function()
    local store = rig.store.memory()
    local steps = { { text = "first answer" }, { text = "second answer" } }
    local r = define(steps, { store = store })
    local s = assert(r:session())
    s:submit("hello there")
    expect(s:wait_idle(5)).to_be(true)
    local id = s.id
    s:shutdown()
    local r2, model2 = define({ { text = "after restore" } }, { store = store })
    local s2 = assert(r2:restore(id))
    local h = s2:history()
    expect(#h).to_be(2)
    expect(h[2].content[1].text).to_be("first answer")
    local sub = s2:subscribe{ ephemeral = false }
    s2:submit("and now?")
    local evs = until_terminal(sub)
    expect(evs[#evs].type).to_be("TurnDone")
    expect(#model2:calls()[1].messages).to_be(3)
    local list = r2:sessions()
    expect(#list).to_be(1)
    expect(list[1].id).to_be(id)
    expect(list[1].title).to_be("hello there")
    s2:shutdown()
    -- a changed policy is refused unless accepted
    local m3 = rig.model.script({ { text = "x" } })
    local l3 = rig.loop{ name = "assistant", model = m3, system = "something else", gate = allow_all(),
      policy_revision = "v2", tools = {} }
    local r3 = rig.define{ loops = { l3 }, primers = { "assistant" }, store = store }
    local _, msg, code = r3:restore(id)
    expect(code).to_be("drift")
    expect(msg).to_match("assistant")
    local s3 = assert(r3:restore(id, { accept_drift = true }))
    s3:shutdown()
  end)
end)
