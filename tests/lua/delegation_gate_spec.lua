-- Delegation passes the parent's gate (issue 16 §7): start_agent and
-- message_agent require { kind = "delegate", match = the delegate's name }.
-- With no saved rule each call asks once (an interactive approver answers),
-- headless means denied, a saved allow rule approves without asking, a saved
-- deny rule refuses outright (the model reads the error), a profile's
-- `delegate` capability decides like any other access, and list_agents /
-- stop_agent require nothing. The rule kind and the access key are checked
-- in rig.permissions and rig.gate. On main every delegate call was allowed
-- (PermissionDecided allow, source "default"): each case below that expects
-- a gate, a denial or source "rule"/"access" failed there.

local core = require "rig.core" -- the stdlib's private binding: what the public API does not show

local json = rig.json
local here = (os.getenv("LUARIG_ROOT") or ".") .. "/tests/lua/session/"
local define = dofile(here .. "deleg_rig.lua")

local function tmpdir()
  local p = os.tmpname()
  os.remove(p)
  assert(os.execute("mkdir -p '" .. p .. "' && chmod 700 '" .. p .. "'"))
  return p
end

local function rules_file(rules)
  local path = tmpdir() .. "/permissions.json"
  if rules then
    local f = assert(io.open(path, "w"))
    f:write(assert(json.encode({ version = 1, rules = json.array(rules) })))
    f:close()
    assert(os.execute("chmod 600 '" .. path .. "'"))
  end
  return path
end

local function read(path)
  local f = assert(io.open(path))
  local s = f:read("a")
  f:close()
  return s
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

local function text_of(m)
  local out = {}
  for _, b in ipairs(m.content) do
    if b.type == "text" then out[#out + 1] = b.text end
    if b.type == "tool_result" then out[#out + 1] = tostring(b.content) end
  end
  return table.concat(out, "\n")
end
local function last(req) return req.messages[#req.messages] end

local function records(store, id)
  local recs = assert(core.journal_read(store, id, 1, 0))
  local out = {}
  for _, r in ipairs(recs) do
    if r.kind ~= "fence" then
      local t = json.decode(r.body)
      t.kind = r.kind
      out[#out + 1] = t
    end
  end
  return out
end

local function of_type(recs, t, tool)
  local out = {}
  for _, r in ipairs(recs) do
    if r.type == t and (tool == nil or r.tool == tool) then out[#out + 1] = r end
  end
  return out
end

local function gate(access, opts)
  opts = opts or {}
  return rig.gate{ access = access, approver = opts.approver or "interactive",
                   rules = opts.rules and rig.permissions.file(opts.rules) or nil }
end

-- Runs one input to idle, answering every gate it opens with `answer`
-- (nil: a gate fails the case). Returns the GateOpened events.
local function run(s, text, answer)
  local sub = s:subscribe{ ephemeral = false }
  s:submit(text)
  local opened = {}
  for ev in sub:events(10) do
    if ev.type == "GateOpened" then
      opened[#opened + 1] = ev
      if not answer then error("unexpected gate for " .. tostring(ev.tool)) end
      -- nothing ran before the answer: no child yet for a start_agent
      if ev.tool == "start_agent" then
        ev.child_before = s.loops["researcher#1"] ~= nil and #opened == 1
      end
      assert(s:respond_gate(ev.gate_id, type(answer) == "function" and answer(ev) or answer))
    end
    if ev.type == "SessionIdle" then break end
  end
  sub:close()
  return opened
end

local function start(instr) return call("start_agent", { agent = "researcher", instructions = instr }) end

describe("delegation through the gate", function()
  it("asks once per delegate call when no saved rule matches", function()
    local store = rig.store.memory()
    local seen = {}
    local r = define(store, {
      plan = script {
        start("one"),
        function(req) seen[1] = text_of(last(req))
          return call("message_agent", { agent_id = "researcher#1", message = "two" }) end,
        function(req) seen[2] = text_of(last(req)) return start("three") end,
        function(req) seen[3] = text_of(last(req)) return call("list_agents", {}) end,
        function() return call("stop_agent", { agent_id = "researcher#1" }) end,
        { text = "done" },
      },
      research = script { { text = "a1" }, { text = "a2" }, { text = "a3" } },
    }, { gate = gate({ delegate = "gated" }) })
    local s = assert(r:session())
    local opened = run(s, "go", "approve")
    -- three delegate calls, three approvals; list and stop asked nothing
    expect(#opened).to_be(3)
    expect(opened[1].tool).to_be("start_agent")
    expect(opened[1].child_before).to_be(false)
    expect(opened[2].tool).to_be("message_agent")
    expect(opened[3].tool).to_be("start_agent")
    expect(seen[1]).to_be("a1")
    expect(seen[2]).to_be("a2")
    expect(seen[3]).to_be("a3")
    local recs = records(store, s.id)
    local pr = of_type(recs, "PermissionRequested")
    expect(#pr).to_be(3)
    for _, p in ipairs(pr) do
      expect(#p.unmet).to_be(1)
      expect(p.unmet[1].kind).to_be("delegate")
      expect(p.unmet[1].match).to_be("researcher")
      expect(p.candidates[1].kind).to_be("delegate")
      expect(p.candidates[1].match).to_be("researcher")
    end
    expect(pr[2].unmet[1].match).to_be("researcher") -- the child's delegate, not its id
    local pd = of_type(recs, "PermissionDecided")
    expect(#pd).to_be(2)
    expect(pd[1].tool).to_be("list_agents")
    expect(pd[1].source).to_be("default")
    expect(pd[2].tool).to_be("stop_agent")
    expect(pd[2].verdict).to_be("allow")
    s:shutdown()
  end)

  it("a person's deny refuses the call and the model reads it; no child starts", function()
    local store = rig.store.memory()
    local seen
    local r = define(store, {
      plan = script { start("x"), function(req) seen = text_of(last(req)) return { text = "ok" } end },
    }, { gate = gate({ delegate = "gated" }) })
    local s = assert(r:session())
    expect(#run(s, "go", "deny")).to_be(1)
    expect(seen).to_be("error: permission denied: denied by the user")
    expect(s.loops["researcher#1"]).to_be_nil()
    expect(#of_type(records(store, s.id), "LoopStarted")).to_be(1)
    s:shutdown()
  end)

  it("headless: a gated delegation is denied with approval required", function()
    local store = rig.store.memory()
    local seen
    local r = define(store, {
      plan = script { start("x"), function(req) seen = text_of(last(req)) return { text = "ok" } end },
    }, { gate = gate({ delegate = "gated" }, { approver = "headless" }) })
    local s = assert(r:session())
    run(s, "go")
    expect(seen).to_be("error: permission denied: approval required")
    expect(s.loops["researcher#1"]).to_be_nil()
    local pd = of_type(records(store, s.id), "PermissionDecided", "start_agent")
    expect(pd[1].verdict).to_be("deny")
    expect(pd[1].source).to_be("access")
    s:shutdown()
  end)

  it("a saved allow rule approves known delegates without asking, and only those", function()
    for _, match in ipairs { "researcher", "*" } do
      local store = rig.store.memory()
      local seen = {}
      local path = rules_file { { effect = "allow", kind = "delegate", match = match } }
      local r = define(store, {
        plan = script {
          start("x"),
          function(req) seen[1] = text_of(last(req))
            return call("message_agent", { agent_id = "researcher#1", message = "y" }) end,
          function(req) seen[2] = text_of(last(req)) return { text = "ok" } end,
        },
        research = script { { text = "x done" }, { text = "y done" } },
      }, { gate = gate({ delegate = "gated" }, { rules = path, approver = "headless" }) })
      local s = assert(r:session())
      run(s, "go") -- a gate would raise
      expect(seen[1]).to_be("x done")
      expect(seen[2]).to_be("y done")
      local pd = of_type(records(store, s.id), "PermissionDecided")
      expect(#pd).to_be(2)
      for _, d in ipairs(pd) do
        expect(d.verdict).to_be("allow")
        expect(d.source).to_be("rule")
      end
      s:shutdown()
    end
    -- a rule for another delegate settles nothing: the call still asks
    local path = rules_file { { effect = "allow", kind = "delegate", match = "helper" } }
    local r = define(rig.store.memory(), {
      plan = script { start("x"), { text = "ok" } },
      research = script { { text = "x done" } },
    }, { gate = gate({ delegate = "gated" }, { rules = path }) })
    local s = assert(r:session())
    expect(#run(s, "go", "approve")).to_be(1)
    s:shutdown()
  end)

  it("approve always saves a rule for that delegate; the next call is not asked", function()
    local store = rig.store.memory()
    local path = rules_file()
    local seen = {}
    local r = define(store, {
      plan = script {
        start("one"),
        function(req) seen[1] = text_of(last(req)) return start("two") end,
        function(req) seen[2] = text_of(last(req)) return { text = "ok" } end,
      },
      research = script { { text = "a1" }, { text = "a2" } },
    }, { gate = gate({ delegate = "gated" }, { rules = path }) })
    local s = assert(r:session())
    expect(#run(s, "go", "approve_always")).to_be(1)
    expect(seen[1]).to_be("a1")
    expect(seen[2]).to_be("a2")
    local saved = json.decode(read(path))
    expect(#saved.rules).to_be(1)
    expect(saved.rules[1].effect).to_be("allow")
    expect(saved.rules[1].kind).to_be("delegate")
    expect(saved.rules[1].match).to_be("researcher")
    local pd = of_type(records(store, s.id), "PermissionDecided", "start_agent")
    expect(#pd).to_be(1)
    expect(pd[1].source).to_be("rule")
    s:shutdown()
  end)

  it("a saved deny rule refuses delegation outright, even where access allows it", function()
    for _, match in ipairs { "researcher", "*" } do
      local store = rig.store.memory()
      local seen
      local path = rules_file {
        { effect = "allow", kind = "delegate", match = "researcher" },
        { effect = "deny", kind = "delegate", match = match },
      }
      local r = define(store, {
        plan = script { start("x"), function(req) seen = text_of(last(req)) return { text = "ok" } end },
      }, { gate = gate({ delegate = "allow" }, { rules = path }) })
      local s = assert(r:session())
      run(s, "go") -- never asks
      expect(seen).to_be("error: permission denied: a saved rule denies delegate 'researcher' ("
        .. match .. ")")
      expect(s.loops["researcher#1"]).to_be_nil()
      local pd = of_type(records(store, s.id), "PermissionDecided", "start_agent")
      expect(pd[1].verdict).to_be("deny")
      expect(pd[1].source).to_be("rule")
      s:shutdown()
    end
  end)

  it("a profile's delegate capability decides: deny, allow, and gated by default", function()
    local ws = tmpdir()
    -- a profile that denies delegation outright: refused at definition (no call could pass)
    for _, p in ipairs {
      rig.sandbox.profile{ workspace_root = ws, delegate = "deny" },
      rig.sandbox.restrict(rig.sandbox.profile{ workspace_root = ws, delegate = "allow" },
        rig.sandbox.profile{ workspace_root = ws, delegate = "deny" }),
    } do
      expect(function() define(rig.store.memory(), { plan = script {} }, { gate = gate(p) }) end)
        .to_fail("the gate can never allow delegate 'researcher' %(access denies delegate "
          .. "'researcher'%)")
    end
    local cases = {
      { rig.sandbox.profile{ workspace_root = ws, delegate = "allow" }, nil, "x done", "access" },
      { rig.sandbox.profile{ workspace_root = ws }, "approve", "x done" },
    }
    for i, c in ipairs(cases) do
      local store = rig.store.memory()
      local seen
      local r = define(store, {
        plan = script { start("x"), function(req) seen = text_of(last(req)) return { text = "ok" } end },
        research = script { { text = "x done" } },
      }, { gate = gate(c[1]) })
      local s = assert(r:session())
      local opened = run(s, "go", c[2])
      if seen ~= c[3] then error("case " .. i .. ": " .. tostring(seen)) end
      expect(#opened).to_be(c[2] and 1 or 0)
      if c[4] then
        expect(of_type(records(store, s.id), "PermissionDecided", "start_agent")[1].source)
          .to_be(c[4])
      end
      s:shutdown()
    end
  end)

  it("an access table that leaves delegate out is refused at definition, with the fix", function()
    expect(function()
      define(rig.store.memory(), { plan = script {} },
        { gate = gate({ network = "allow" }, { approver = "headless" }) })
    end).to_fail("the gate can never allow delegate 'researcher' %(no access is configured for "
      .. "'delegate'%): give the gate's access delegate = \"allow\"")
  end)

  it("message_agent to an id that is no child is refused before any gate", function()
    local seen
    local r = define(rig.store.memory(), {
      plan = script {
        call("message_agent", { agent_id = "researcher#1", message = "hi" }),
        function(req) seen = text_of(last(req)) return { text = "ok" } end,
      },
    }, { gate = gate({ delegate = "gated" }) })
    local s = assert(r:session())
    run(s, "go") -- a gate would raise
    expect(seen).to_be("error: refused: no agent 'researcher#1' among this loop's agents (none started)")
    s:shutdown()
  end)

  it("each loop's own gate decides its delegations", function()
    local store = rig.store.memory()
    local seen
    -- the planner may delegate; the researcher's gate (deleg_rig: access delegate
    -- allow) is replaced by one that denies, through a rules file it reads
    local r = define(store, {
      plan = script { start("x"), function(req) seen = text_of(last(req)) return { text = "ok" } end },
      research = script {
        call("start_agent", { agent = "helper", instructions = "h" }),
        function(req) return { text = "researcher saw: " .. text_of(last(req)) } end,
      },
    }, { gate = gate({ delegate = "allow" }),
         child_gate = gate({ delegate = "gated" }, { approver = "headless" }) })
    local s = assert(r:session())
    run(s, "go")
    expect(seen).to_be("researcher saw: error: permission denied: approval required")
    expect(s.loops["helper#2"]).to_be_nil()
    s:shutdown()
  end)
end)

describe("delegate rules and access", function()
  local perms = rig.permissions
  local function req(name) return { kind = "delegate", scope = name, match = name } end

  it("rig.permissions checks and matches delegate rules", function()
    local path = rules_file {
      { effect = "allow", kind = "delegate", match = "researcher" },
      { effect = "allow", kind = "delegate", match = "re*" },
      { effect = "allow", kind = "delegate", match = "" },
      { effect = "allow", kind = "delegate", match = "a b" },
      { effect = "deny", kind = "delegate", match = "helper" },
    }
    local p = perms.file(path)
    local diags = p:diagnostics()
    expect(#diags).to_be(3)
    expect(diags[1]).to_be("rule 2: match must be a loop name or \"*\" (got \"re*\")")
    expect(diags[2]).to_be("rule 3: match must be a non-empty string")
    expect(diags[3]).to_be("rule 4: match must be a loop name or \"*\" (got \"a b\")")
    expect(p:match(req("researcher"))).to_be("allow")
    expect(p:match(req("researcher2"))).to_be_nil()
    expect(p:match(req("helper"))).to_be("deny")
    -- a delegate rule never matches another kind with the same text
    expect(p:match({ kind = "command.execute", match = "researcher" })).to_be_nil()
    expect(perms.check_rule{ effect = "allow", kind = "delegate", match = "*" }).to_be_truthy()
    expect(perms.rule_matches(assert(perms.check_rule{ effect = "allow", kind = "delegate",
      match = "*" }), req("anything"))).to_be(true)
    expect(function() p:add{ { effect = "allow", kind = "delegate", match = "x/y" } } end)
      .to_fail("match must be a loop name")
  end)

  it("rig.gate accepts delegate in an access table and rig.tool in a request", function()
    local g = rig.gate{ access = { delegate = "gated" }, approver = "interactive" }
    local d = g:evaluate{ summary = "start", requirements = { req("researcher") } }
    expect(d.verdict).to_be("gated")
    expect(d.candidates[1].kind).to_be("delegate")
    expect(d.candidates[1].match).to_be("researcher")
    expect(function() rig.gate{ access = { delegation = "allow" }, approver = "headless" } end)
      .to_fail("unknown kind 'delegation' %(filesystem.read, filesystem.write, network, "
        .. "command.execute, delegate, mcp, tool%)")
    expect(function() rig.gate{ access = { delegate = "yes" }, approver = "headless" } end)
      .to_fail("field 'access.delegate' must be")
    local n = rig.tool.check_request{ summary = "s", requirements = { { kind = "delegate", match = "r" } } }
    expect(n.requirements[1].scope).to_be("r")
  end)
end)
