-- Delegation: the injected agent tools (start, message, list, stop), foreground
-- and background delivery, depth and quota refusals, the parent's gate, restore
-- of children with the quota recounted, and exactly-once hand-backs across a
-- SIGKILL (a child process: tests/lua/session/deleg_child.lua).

local core = require "rig.core" -- the stdlib's private binding: what the public API does not show

local json = rig.json
local luarig = os.getenv("LUARIG") or "build/luarig"
local here = (os.getenv("LUARIG_ROOT") or ".") .. "/tests/lua/session/"
local define = dofile(here .. "deleg_rig.lua")

local function tmpdir()
  local p = os.tmpname()
  os.remove(p)
  assert(os.execute("mkdir -p '" .. p .. "'"))
  return p
end

-- A role playing the given steps in order (a function entry is called with
-- the request).
local function script(list)
  local i = 0
  return function(req)
    i = i + 1
    local s = list[i]
    if s == nil then error("the role ran out of steps at " .. i) end
    if type(s) == "function" then return s(req) end
    return s
  end
end

local function call(name, input) return { tool_calls = { { name = name, input = input } } } end

-- The text of a message: text blocks, or tool results' contents.
local function text_of(m)
  local out = {}
  for _, b in ipairs(m.content) do
    if b.type == "text" then out[#out + 1] = b.text end
    if b.type == "tool_result" then
      local c = b.content
      if type(c) == "table" then
        for _, x in ipairs(c) do out[#out + 1] = x.text end
      else
        out[#out + 1] = tostring(c)
      end
    end
  end
  return table.concat(out, "\n")
end
local function last(req) return req.messages[#req.messages] end
-- The last tool results (a hand-back may have been folded in after them).
local function last_result(req)
  for i = #req.messages, 1, -1 do
    if req.messages[i].role == "tool" then return req.messages[i] end
  end
end

local function records(store, id)
  local recs = assert(core.journal_read(store, id, 1, 0))
  local out = {}
  for _, r in ipairs(recs) do
    if r.kind ~= "fence" then
      local t = json.decode(r.body)
      t.kind, t.seq = r.kind, r.seq
      out[#out + 1] = t
    end
  end
  return out
end

local function of_type(recs, t)
  local out = {}
  for _, r in ipairs(recs) do if r.type == t then out[#out + 1] = r end end
  return out
end

-- Every SubagentResult with the events its command id caused (TurnStarted,
-- TurnFoldedInto): exactly-once means one consumer each.
local function consumers(recs)
  local by = {}
  for _, r in ipairs(recs) do
    if r.kind == "event" and (r.type == "TurnStarted" or r.type == "TurnFoldedInto")
       and r.cause and r.cause.command_id then
      by[r.cause.command_id] = (by[r.cause.command_id] or 0) + 1
    end
  end
  local out = {}
  for _, r in ipairs(of_type(recs, "SubagentResult")) do
    out[#out + 1] = { rec = r, n = by[r.command_id] or 0 }
  end
  return out
end

local function count_text(history, needle)
  local n = 0
  for _, m in ipairs(history) do
    if text_of(m):find(needle, 1, true) then n = n + 1 end
  end
  return n
end

describe("delegation", function()
  it("waits for a child's final answer as the tool result (foreground)", function()
    local store = rig.store.memory()
    local seen
    local r = define(store, {
      plan = script {
        call("start_agent", { agent = "researcher", instructions = "find x", name = "R" }),
        function(req) seen = text_of(last(req)) return { text = "x is " .. seen } end,
      },
      research = script { { text = "42" } },
    })
    local s = assert(r:session())
    s:submit("what is x?")
    assert(s:wait_idle(10))
    expect(seen).to_be("42")
    local recs = records(store, s.id)
    local ls = of_type(recs, "LoopStarted")
    expect(#ls).to_be(2)
    expect(ls[2].loop_id).to_be("researcher#1")
    expect(ls[2].loop).to_be("researcher")
    expect(ls[2].parent_loop_id).to_be("planner")
    expect(ls[2].depth).to_be(1)
    expect(ls[2].name).to_be("R")
    local call_id = of_type(recs, "StepDone")[2].message.content[1].id
    expect(ls[2].parent_call_id).to_be(call_id)
    local ui = of_type(recs, "UserInput")[2]
    expect(ui.loop_id).to_be("researcher#1")
    expect(ui.delegate.parent_loop_id).to_be("planner")
    expect(ui.delegate.wait).to_be(true)
    -- the child's history is its own; the parent's holds only the result
    local ch = s:history("researcher#1")
    expect(#ch).to_be(2)
    expect(text_of(ch[1])).to_be("find x")
    expect(#s:history()).to_be(4)
    expect(#of_type(recs, "SubagentResult")).to_be(0)
    -- the model saw the injected tools, and the delegate list in start_agent's text
    local names = {}
    for _, t in ipairs(r:loop("planner").tools) do names[#names + 1] = t.name end
    expect(#names).to_be(0) -- never in the definition
    s:shutdown()
  end)

  it("lists the injected tools only for a loop with delegates", function()
    local reqs = {}
    local r = define(rig.store.memory(), {
      plan = script { function(req) reqs.plan = req return { text = "ok" } end },
    })
    local s = assert(r:session())
    s:submit("hi")
    assert(s:wait_idle(10))
    local names = {}
    for _, t in ipairs(reqs.plan.tools) do names[#names + 1] = t.name end
    expect(table.concat(names, " ")).to_be("start_agent message_agent list_agents stop_agent")
    expect(reqs.plan.tools[1].description).to_match("researcher: researches one focused question")
    s:shutdown()
    for _, n in ipairs { "start_agent", "message_agent", "list_agents", "stop_agent" } do
      expect(function() rig.tool{ name = n, description = "x", run = function() end } end)
        .to_fail("reserved")
    end
  end)

  it("returns the id at once and hands the answer back exactly once (background)", function()
    local store = rig.store.memory()
    local started, handed
    local r = define(store, {
      plan = script {
        call("start_agent", { agent = "researcher", instructions = "slow x", wait = false }),
        function(req) started = json.decode(text_of(last(req))) return { text = "started" } end,
        function(req) handed = text_of(last(req)) return { text = "thanks" } end,
      },
      research = script { { text = "x is 7", delay = 0.3 } },
    })
    local s = assert(r:session())
    local sub = s:subscribe{ ephemeral = false }
    s:submit("go")
    -- the session stays active from the child's end to the hand-back
    local idles, types = 0, {}
    for ev in sub:events(10) do
      types[#types + 1] = ev.type .. (ev.loop_id and ("@" .. ev.loop_id) or "")
      if ev.type == "SessionIdle" then idles = idles + 1 break end
    end
    expect(idles).to_be(1)
    expect(started.agent_id).to_be("researcher#1")
    expect(started.status).to_be("running")
    expect(handed).to_be("[agent researcher#1 answered]\n\nx is 7")
    local tl = table.concat(types, " ")
    expect(tl).to_match("TurnDone@planner .*TurnDone@researcher#1 .*TurnStarted@planner .*"
      .. "TurnDone@planner LoopIdle@planner SessionIdle$")
    local recs = records(store, s.id)
    local c = consumers(recs)
    expect(#c).to_be(1)
    expect(c[1].n).to_be(1)
    expect(c[1].rec.loop_id).to_be("planner")
    expect(c[1].rec.child_loop_id).to_be("researcher#1")
    expect(c[1].rec.status).to_be("answered")
    expect(count_text(s:history(), "[agent researcher#1 answered]")).to_be(1)
    s:shutdown()
  end)

  it("messages, stops and lists its agents; a stopped agent persists", function()
    local store = rig.store.memory()
    local child_started = false
    local got = {}
    local r = define(store, {
      plan = script {
        call("start_agent", { agent = "researcher", instructions = "slow task", wait = false,
          name = "R1" }),
        function()
          while not child_started do rig.sleep(0.01) end
          return call("stop_agent", { agent_id = "researcher#1" })
        end,
        function(req)
          got.stop = json.decode(text_of(last_result(req)))
          return call("message_agent", { agent_id = "researcher#1", message = "quick?" })
        end,
        function(req)
          got.message = text_of(last_result(req))
          return call("message_agent", { agent_id = "planner", message = "hi" })
        end,
        function(req)
          got.not_child = text_of(last_result(req))
          return call("list_agents", {})
        end,
        function(req)
          got.list = json.decode(text_of(last_result(req)))
          got.history = req.messages
          return { text = "all done" }
        end,
      },
      research = script {
        function() child_started = true return { text = "never", delay = 20 } end,
        { text = "quick answer" },
      },
    })
    local s = assert(r:session())
    s:submit("go")
    assert(s:wait_idle(15))
    expect(got.stop.agent_id).to_be("researcher#1")
    expect(got.stop.stopped).to_be(true)
    expect(got.message).to_be("quick answer")
    expect(got.not_child).to_match("^error: refused: no agent 'planner' among this loop's agents")
    local a = got.list.agents
    expect(#a).to_be(1)
    expect(a[1].agent_id).to_be("researcher#1")
    expect(a[1].agent).to_be("researcher")
    expect(a[1].name).to_be("R1")
    expect(a[1].status).to_be("idle")
    expect(a[1].last_answer).to_be("quick answer")
    local recs = records(store, s.id)
    local ti = of_type(recs, "TurnInterrupted")
    expect(#ti).to_be(1)
    expect(ti[1].loop_id).to_be("researcher#1")
    expect(ti[1].reason).to_be("stopped")
    -- the stopped background request came back once (folded into the running turn)
    local c = consumers(recs)
    expect(#c).to_be(1)
    expect(c[1].rec.status).to_be("interrupted")
    expect(c[1].n).to_be(1)
    expect(count_text(s:history(), "[agent researcher#1 was interrupted]")).to_be(1)
    -- the child persists with both turns
    local ch = s:history("researcher#1")
    expect(text_of(ch[1])).to_be("slow task")
    expect(text_of(ch[#ch])).to_be("quick answer")
    s:shutdown()
  end)

  it("interrupts a parent waiting on a child: both turns end, the session goes idle", function()
    local started = false
    local r = define(rig.store.memory(), {
      plan = script { call("start_agent", { agent = "researcher", instructions = "slow" }) },
      research = script {
        function() started = true return { text = "never", delay = 20 } end,
        { text = "again" },
      },
    })
    local s = assert(r:session())
    s:submit("go")
    while not started do rig.sleep(0.01) end
    expect(s:interrupt()).to_be(true)
    expect(select(3, s:wait_idle(5))).to_be("interrupted") -- reported (issue 19 §2)
    local ti = of_type(records(r.store, s.id), "TurnInterrupted")
    expect(#ti).to_be(2)
    -- the child is idle and answers a direct submit
    s:submit("again?", { loop = "researcher#1" })
    assert(s:wait_idle(5))
    local h = s:history("researcher#1")
    expect(text_of(h[#h])).to_be("again")
    s:shutdown()
  end)

  it("refuses a child deeper than the depth limit, and allows it within", function()
    for _, depth in ipairs { 1, 2 } do
      local seen
      local r = define(rig.store.memory(), {
        plan = script {
          call("start_agent", { agent = "researcher", instructions = "go deeper" }),
          function(req) seen = text_of(last(req)) return { text = "done" } end,
        },
        research = script {
          call("start_agent", { agent = "helper", instructions = "help" }),
          function(req) return { text = "research: " .. text_of(last(req)) } end,
        },
        help = script { { text = "helped" } },
      }, { limits = { depth = depth, quota = 8 } })
      local s = assert(r:session())
      s:submit("go")
      assert(s:wait_idle(10))
      if depth == 1 then
        expect(seen).to_be("research: error: refused: the delegation depth limit (1) is "
          .. "reached: loop 'researcher#1' is at depth 1")
        expect(s.loops["helper#2"]).to_be_nil()
      else
        expect(seen).to_be("research: helped")
        local recs = records(r.store, s.id)
        local ls = of_type(recs, "LoopStarted")
        expect(ls[3].loop_id).to_be("helper#2")
        expect(ls[3].parent_loop_id).to_be("researcher#1")
        expect(ls[3].depth).to_be(2)
      end
      s:shutdown()
    end
  end)

  it("refuses children over the quota, recounted on restore, and restores children", function()
    local store = rig.store.memory()
    local seen = {}
    local function starts(n)
      local calls = {}
      for i = 1, n do
        calls[i] = { name = "start_agent", input = { agent = "researcher",
          instructions = "task " .. i } }
      end
      return { tool_calls = calls }
    end
    local roles = {
      plan = script {
        starts(3),
        function(req) seen[1] = req.messages[#req.messages] return { text = "ok" } end,
      },
      research = function(req) return { text = "answer to " .. text_of(req.messages[1]) } end,
    }
    local r = define(store, roles, { limits = { depth = 3, quota = 2 } })
    local s = assert(r:session())
    s:submit("go")
    assert(s:wait_idle(10))
    local res = seen[1].content
    expect(res[1].content).to_be("answer to task 1")
    expect(res[2].content).to_be("answer to task 2")
    expect(res[3].is_error).to_be(true)
    expect(res[3].content).to_be("error: refused: the session's delegation quota (2 agents) "
      .. "is used up")
    local h1 = s:history("researcher#1")
    s:shutdown()

    -- restore: the children come back idle with their histories; the quota
    -- still counts them
    local got = {}
    roles.plan = script {
      call("list_agents", {}),
      function(req)
        got.list = json.decode(text_of(last(req)))
        return call("start_agent", { agent = "researcher", instructions = "one more" })
      end,
      function(req)
        got.refused = text_of(last(req))
        return call("message_agent", { agent_id = "researcher#2", message = "again" })
      end,
      function(req) got.again = text_of(last(req)) return { text = "fine" } end,
    }
    roles.research = function(req)
      return { text = "answer to " .. text_of(last(req)) .. " after " .. (#req.messages - 1) }
    end
    local r2 = define(store, roles, { limits = { depth = 3, quota = 2 } })
    local s2 = assert(r2:restore(s.id))
    local h1b = s2:history("researcher#1")
    expect(#h1b).to_be(#h1)
    expect(text_of(h1b[2])).to_be("answer to task 1")
    expect(s2.loops["researcher#2"].parent_id).to_be("planner")
    s2:submit("and now?")
    assert(s2:wait_idle(10))
    expect(#got.list.agents).to_be(2)
    expect(got.list.agents[2].agent_id).to_be("researcher#2")
    expect(got.list.agents[2].last_answer).to_be("answer to task 2")
    expect(got.refused).to_match("quota %(2 agents%) is used up")
    expect(got.again).to_be("answer to again after 2")
    s2:shutdown()
  end)

  it("passes every delegate call through the parent's gate", function()
    -- a loop with delegates and no gate: refused at definition (every call would be denied)
    expect(function() define(rig.store.memory(), { plan = script {} }, { gate = false }) end)
      .to_fail("rig%.loop 'planner': a loop with delegates needs a gate")
    local r, s
    -- a gate whose access allows delegation: decided "allow" by access (the
    -- gated, ruled and denied paths: delegation_gate_spec.lua)
    r = define(rig.store.memory(), {
      plan = script { call("start_agent", { agent = "researcher", instructions = "x" }),
                      { text = "ok" } },
      research = script { { text = "y" } },
    })
    s = assert(r:session())
    s:submit("go")
    assert(s:wait_idle(10))
    pd = of_type(records(r.store, s.id), "PermissionDecided")
    expect(pd[1].tool).to_be("start_agent")
    expect(pd[1].verdict).to_be("allow")
    expect(pd[1].source).to_be("access")
    s:shutdown()
  end)

  it("refuses bad arguments before the gate", function()
    local seen = {}
    local r = define(rig.store.memory(), {
      plan = script {
        call("start_agent", { agent = "helper", instructions = "x" }),
        function(req) seen[1] = text_of(last(req))
          return call("start_agent", { agent = "researcher", instructions = "  " }) end,
        function(req) seen[2] = text_of(last(req))
          return call("start_agent", { agent = "researcher", instructions = "x", timeout = 0 }) end,
        function(req) seen[3] = text_of(last(req)) return { text = "ok" } end,
      },
    })
    local s = assert(r:session())
    s:submit("go")
    assert(s:wait_idle(10))
    expect(seen[1]).to_match("^error: invalid arguments: %$%.agent")
    expect(seen[2]).to_be("error: preparation failed: instructions is empty")
    expect(seen[3]).to_match("^error: preparation failed: timeout must be more than 0")
    s:shutdown()
  end)

  it("turns a foreground wait that times out into a background hand-back", function()
    local store = rig.store.memory()
    local got = {}
    local r = define(store, {
      plan = script {
        call("start_agent", { agent = "researcher", instructions = "slow", timeout = 0.1 }),
        function(req) got.result = json.decode(text_of(last(req))) return { text = "later" } end,
        function(req) got.handed = text_of(last(req)) return { text = "got it" } end,
      },
      research = script { { text = "slow answer", delay = 0.5 } },
    })
    local s = assert(r:session())
    s:submit("go")
    assert(s:wait_idle(10))
    expect(got.result.status).to_be("running")
    expect(got.handed).to_be("[agent researcher#1 answered]\n\nslow answer")
    local recs = records(store, s.id)
    expect(#of_type(recs, "DelegateBackgrounded")).to_be(1)
    expect(consumers(recs)[1].n).to_be(1)
    s:shutdown()
  end)
end)

-- ---- exactly once across a crash ----

local function run_child(dir, point)
  local p = assert(rig.process.spawn{ argv = { luarig, here .. "deleg_child.lua", dir, point },
    stdout = "pipe", stderr = "pipe" })
  local id
  for line in p:lines("stdout") do id = id or line:match("^SESSION (%S+)") end
  local r = p:wait(20)
  local err = p:read("stderr")
  p:close()
  return id, r, err
end

describe("delegation after SIGKILL", function()
  local points = {
    -- the child answered; the hand-back was never journaled
    { "before_handback", "[agent researcher#1 answered]\n\nx is 9", 0 },
    -- journaled and queued behind the parent's slow turn, never consumed
    { "queued", "[agent researcher#1 answered]\n\nx is 9", 1 },
    -- the child was still working: its cut turn is handed back
    { "child_running", "[agent researcher#1 was interrupted]\n\nrestored", 0 },
  }
  for _, pt in ipairs(points) do
    local point, expected, results_before = pt[1], pt[2], pt[3]
    it("delivers once and never twice (killed " .. point .. ")", function()
      local dir = tmpdir()
      local id, res, err = run_child(dir, point)
      expect(id).to_be_truthy()
      expect(res.signal).to_be("SIGKILL")
      local store <close> = rig.store.lmdb{ root = dir }
      local before = records(store, id)
      expect(#of_type(before, "SubagentResult")).to_be(results_before)
      local handed = {}
      local roles = {
        plan = function(req)
          local t = text_of(last(req))
          if t:find("^%[agent ") then handed[#handed + 1] = t end
          return { text = "noted" }
        end,
        research = function() return { text = "late" } end,
      }
      local r = define(store, roles)
      local s = assert(r:restore(id))
      assert(s:wait_idle(10))
      expect(#handed).to_be(1)
      expect(handed[1]).to_be(expected)
      local recs = records(store, id)
      local c = consumers(recs)
      expect(#c).to_be(1)
      expect(c[1].n).to_be(1)
      expect(count_text(s:history(), "[agent researcher#1")).to_be(1)
      expect(#s:history("researcher#1")).to_be(point == "child_running" and 1 or 2)
      s:shutdown()
      -- a second restore finds nothing to deliver
      local tip = #records(store, id)
      local s2 = assert(define(store, roles):restore(id))
      assert(s2:wait_idle(10))
      expect(#handed).to_be(1)
      local after = records(store, id)
      expect(#of_type(after, "SubagentResult")).to_be(1)
      expect(#of_type(after, "TurnStarted")).to_be(#of_type(recs, "TurnStarted"))
      expect(#after > tip).to_be(true) -- the restore's own events only
      s2:shutdown()
      os.execute("rm -rf '" .. dir .. "'")
    end, { timeout = 60 })
  end
end)
