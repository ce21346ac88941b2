local json = require "rig.json"

local function tool(name, over)
  local def = { name = name or "lookup", description = "look",
    schema = { type = "object", properties = { q = { type = "string" } } },
    prepare = function() return { summary = "s" } end, run = function() return "r" end }
  for k, v in pairs(over or {}) do def[k] = v end
  return rig.tool(def)
end

local model = rig.model.script{ { text = "hi" } }
local gate = rig.gate{ access = { network = "gated" }, approver = "headless" }

local base_gate = rig.gate{ access = { network = "gated", delegate = "allow" }, approver = "headless" }
local NONE = {} -- an override that removes the field
local function loop(over)
  local def = { name = "assistant", model = model, system = "be brief", tools = { tool() },
                gate = base_gate, policy_revision = "p0" }
  for k, v in pairs(over or {}) do
    if v == NONE then v = nil end
    def[k] = v
  end
  return rig.loop(def)
end

local function raises(f, ...)
  local ok, err = pcall(f, ...)
  expect(ok).to_be(false)
  return tostring(err)
end

describe("rig.loop", function()
  it("fills defaults and exposes read-only fields", function()
    local l = loop()
    expect(l.name).to_be("assistant")
    expect(l.system).to_be("be brief")
    expect(l.model).to_be(model)
    expect(#l.tools).to_be(1)
    expect(l:tool("lookup").name).to_be("lookup")
    expect(l:tool("nope")).to_be_nil()
    expect(l.limits).to_equal({ iterations = 25, calls = 100, parallel = 8, result_bytes = 32768 })
    expect(l.limits.max_tokens).to_be_nil()
    expect(#l.delegates).to_be(0)
    expect(l.gate).to_be(base_gate)
    expect(l.policy_revision).to_be("p0")
    local bare = loop{ tools = NONE, gate = NONE, policy_revision = NONE }
    expect(bare.gate).to_be_nil()
    expect(bare.policy_revision).to_be_nil()
  end)

  it("refuses at definition what would deny every call mid-turn, with the fix", function()
    expect(raises(loop, { gate = NONE, policy_revision = NONE }))
      .to_match('a loop with tools needs a gate %(without one every call is denied%): add gate = '
        .. 'rig%.gate%.default%(%), policy_revision = "v1"')
    expect(raises(loop, { tools = NONE, gate = NONE, delegates = { "b" } }))
      .to_match("a loop with delegates needs a gate")
    expect(raises(loop, { policy_revision = NONE }))
      .to_match('policy_revision.*: add policy_revision = "v1"')
    -- an access table that leaves delegate out denies every start_agent: refused
    local no_deleg = rig.gate{ access = { network = "gated" }, approver = "interactive" }
    expect(raises(loop, { gate = no_deleg, delegates = { "b" } }))
      .to_match("field 'delegates%[1%]': the gate can never allow delegate 'b'.*delegate = \"allow\"")
    -- gated (a person decides) and a headless gate with saved rules are ways to decide
    loop{ gate = rig.gate{ access = { delegate = "gated" }, approver = "interactive" }, delegates = { "b" } }
    loop{ gate = rig.gate{ access = { delegate = "gated" }, approver = "headless" }, delegates = { "b" } }
    -- the newcomer's gate: one expression, and delegation runs through it
    local l = loop{ gate = rig.gate.default(), delegates = { "b" } }
    expect(l.gate:evaluate{ summary = "x", requirements = {} }.verdict).to_be("allow")
  end)

  it("raises at the caller's line naming the field", function()
    local ok, err = pcall(function() rig.loop{ name = "a", model = 1 } end)
    expect(ok).to_be(false)
    expect(err).to_match("loop_define_spec%.lua:%d+: rig%.loop 'a': field 'model' must be a rig%.model")
    expect(raises(rig.loop, { name = "a#1", model = model })).to_match("field 'name'")
    expect(raises(loop, { sytem = "x" })).to_match("unknown field 'sytem'")
    expect(raises(loop, { system = 1 })).to_match("field 'system' must be a string")
    expect(raises(loop, { tools = { 1 } })).to_match("field 'tools%[1%]' must be a rig.tool")
    expect(raises(loop, { tools = { tool(), tool() } })).to_match("duplicate tool name 'lookup'")
    expect(raises(loop, { gate = {} })).to_match("field 'gate' must be a rig.gate")
    expect(raises(loop, { gate = gate, policy_revision = NONE })).to_match("field 'policy_revision' is required with a gate")
    expect(raises(loop, { limits = { iteration = 3 } })).to_match("unknown field 'limits.iteration'")
    expect(raises(loop, { limits = { calls = 0 } })).to_match("field 'limits.calls' must be at least 1")
    expect(raises(loop, { limits = { parallel = 1.5 } })).to_match("field 'limits.parallel' must be an integer")
    expect(raises(loop, { limits = { result_bytes = 100 } })).to_match("0 %(no cap%) or at least 256")
    expect(raises(loop, { limits = { max_cost = -1 } })).to_match("limits.max_cost")
    expect(raises(loop, { delegates = { "x", "x" } })).to_match("lists 'x' twice")
    expect(raises(loop, { delegates = "x" })).to_match("field 'delegates' must be a list")
  end)

  it("is frozen and independent of its source table", function()
    local tools = { tool() }
    local limits = { iterations = 3 }
    local l = loop{ tools = tools, limits = limits, delegates = { "b" } }
    local rev = l:revision()
    tools[2] = tool("other")
    limits.iterations = 99
    expect(#l.tools).to_be(1)
    expect(l.limits.iterations).to_be(3)
    local got = l.limits
    got.iterations = 1000
    expect(l.limits.iterations).to_be(3)
    local ts = l.tools
    ts[1] = nil
    expect(#l.tools).to_be(1)
    expect(function() l.name = "x" end).to_fail("frozen")
    expect(l:revision()).to_be(rev)
  end)

  it("hashes a canonical projection into its revision", function()
    local a = loop{ delegates = { "b", "a" } }
    local b = loop{ delegates = { "a", "b" } }
    expect(a:revision()).to_match("^%x+$")
    expect(#a:revision()).to_be(64)
    expect(a:revision()).to_be(b:revision())      -- delegates sorted
    expect(a:revision()).to_be(require("rig.core").sha256_hex(a:canonical()))
    local revs = {
      loop():revision(),
      loop{ system = "other" }:revision(),
      loop{ name = "other" }:revision(),
      loop{ tools = { tool("lookup", { description = "different" }) } }:revision(),
      loop{ tools = { tool("lookup", { sequential = true }) } }:revision(),
      loop{ tools = { tool("lookup", { schema = { type = "object" } }) } }:revision(),
      loop{ limits = { calls = 5 } }:revision(),
      loop{ gate = gate, policy_revision = "v1" }:revision(),
      loop{ gate = gate, policy_revision = "v2" }:revision(),
      loop{ model = rig.model.script{ name = "other", steps = { { text = "x" } } } }:revision(),
    }
    local seen = {}
    for i, r in ipairs(revs) do
      if seen[r] then error("revision " .. i .. " equals revision " .. seen[r]) end
      seen[r] = i
    end
    -- the run/prepare functions and the description are not part of it
    expect(loop{ tools = { tool("lookup", { run = function() return "x" end }) } }:revision())
      .to_be(loop():revision())
    expect(loop{ description = "d" }:revision()).to_be(loop():revision())
  end)

  it("keeps secrets out of the revision", function()
    local m = rig.model{ provider = "openai", name = "gpt-x", headers = { ["x-team"] = "secret-team" } }
    local c = loop{ model = m }:canonical()
    expect(c:find("secret-team", 1, true)).to_be_nil()
    expect(c).to_match('"provider":"openai"')
  end)
end)

describe("rig.define", function()
  local store = rig.store.memory()

  local function define(over)
    local def = { loops = { loop() }, primers = { "assistant" }, store = store }
    for k, v in pairs(over or {}) do def[k] = v end
    return rig.define(def)
  end

  it("builds a rig with read-only fields", function()
    local a = loop{ delegates = { "helper" } }
    local h = loop{ name = "helper" }
    local r = define{ loops = { a, h }, delegation_limits = { depth = 2 } }
    expect(#r.loops).to_be(2)
    expect(r:loop("helper")).to_be(h)
    expect(r:loop("none")).to_be_nil()
    expect(r.primers).to_equal({ "assistant" })
    expect(r.active_primer).to_be("assistant")
    expect(r.store).to_be(store)
    expect(r.delegation_limits).to_equal({ depth = 2, quota = 64 })
    expect(function() r.store = nil end).to_fail("frozen")
    expect(#r:fingerprint()).to_be(64)
  end)

  it("refuses what the reference refuses, naming the field", function()
    local a = loop{ delegates = { "helper" } }
    local h = loop{ name = "helper" }
    local x = loop{ name = "orphan" }
    local ok, err = pcall(function() rig.define{ loops = {}, primers = {}, store = store } end)
    expect(err).to_match("loop_define_spec%.lua:%d+: rig%.define: field 'loops' must hold at least one")
    expect(raises(define, { loops = false })).to_match("field 'loops' must be a list")
    expect(raises(rig.define, { primers = { "a" }, store = store })).to_match("field 'loops' is required")
    expect(raises(define, { loops = { loop(), loop() } })).to_match("duplicate loop name 'assistant'")
    expect(raises(define, { primers = {} })).to_match("field 'primers' must name at least one")
    expect(raises(define, { primers = { "ghost" } })).to_match("unknown loop 'ghost'")
    expect(raises(define, { loops = { a } })).to_match("'delegates%[1%]' names no loop of this rig %('helper'%)")
    expect(raises(define, { loops = { a, h, x } })).to_match("loop 'orphan' is unreachable")
    expect(raises(define, { store = false })).to_match("field 'store' must be a rig.store")
    expect(raises(rig.define, { loops = { loop() }, primers = { "assistant" } })).to_match("field 'store' is required")
    expect(raises(define, { loops = { loop(), x }, primers = { "assistant", "orphan" } }))
      .to_match("field 'active_primer' is required with more than one primer")
    expect(raises(define, { active_primer = "helper" })).to_match("must be one of the primers")
    expect(raises(define, { workspace = {} })).to_match("field 'workspace' must be a rig.workspace placement")
    expect(raises(define, { workspaces = {} })).to_match("unknown field 'workspaces'")
    expect(raises(define, { delegation_limits = { depth = 0 } })).to_match("delegation_limits.depth' must be a positive integer")
    expect(raises(define, { delegation_limits = { deep = 1 } })).to_match("unknown field 'delegation_limits.deep'")
  end)

  it("adds delegates given as loop objects, transitively, and refuses a name clash", function()
    local helper = loop{ name = "helper", tools = NONE, gate = NONE, policy_revision = NONE }
    local researcher = loop{ name = "researcher", delegates = { helper } }
    local planner = loop{ name = "planner", delegates = { researcher, "helper" } }
    expect(planner.delegates).to_equal({ "researcher", "helper" })
    expect(planner:revision()).to_be(loop{ name = "planner", delegates = { "researcher", "helper" } }:revision())
    local r = define{ loops = { planner }, primers = { "planner" } }
    expect(#r.loops).to_be(3)
    expect(r:loop("researcher")).to_be(researcher)
    expect(r:loop("helper")).to_be(helper)
    local other = loop{ name = "helper", tools = NONE, gate = NONE, policy_revision = NONE }
    expect(raises(define, { loops = { planner, other }, primers = { "planner" } }))
      .to_match("delegates to a loop named 'helper' that is not the rig's loop of that name")
  end)

  it("takes an explicit active primer among several", function()
    local x = loop{ name = "second" }
    local r = define{ loops = { loop(), x }, primers = { "assistant", "second" }, active_primer = "second" }
    expect(r.active_primer).to_be("second")
  end)

  it("fingerprints loops' revisions, primers and limits", function()
    local a, b = loop(), loop{ name = "b" }
    local base = define{ loops = { a, b }, primers = { "assistant", "b" }, active_primer = "assistant" }
    local same = define{ loops = { b, a }, primers = { "assistant", "b" }, active_primer = "assistant" }
    expect(same:fingerprint()).to_be(base:fingerprint())
    local others = {
      define{ loops = { a, b }, primers = { "b", "assistant" }, active_primer = "assistant" },
      define{ loops = { a, b }, primers = { "assistant", "b" }, active_primer = "b" },
      define{ loops = { a, b }, primers = { "assistant", "b" }, active_primer = "assistant",
              delegation_limits = { quota = 1 } },
      define{ loops = { loop{ system = "x" }, b }, primers = { "assistant", "b" }, active_primer = "assistant" },
    }
    for i, r in ipairs(others) do
      if r:fingerprint() == base:fingerprint() then error("fingerprint " .. i .. " did not change") end
    end
  end)

  it("looks session methods up in rig.session lazily", function()
    local r = define()
    local called
    package.loaded["rig.session"] = nil
    package.preload["rig.session"] = function()
      return { rig_methods = {
        session = function(self, ...) called = { self, ... }; return "a session" end,
        sessions = function() return {} end,
      } }
    end
    expect(r:session("x")).to_be("a session")
    expect(called[1]).to_be(r)
    expect(called[2]).to_be("x")
    expect(type(r.sessions)).to_be("function")
    expect(r.restore).to_be_nil()
    expect(r[1]).to_be_nil()
  end)
end)

describe("rig.loop hooks, guardrails and handoffs", function()
  it("keeps hooks and names their points in the revision", function()
    local plain = loop()
    local f = function() end
    local l = loop{ hooks = { before_tool = f, turn_end = f } }
    expect(l.hooks.before_tool).to_be(f)
    expect(l:revision() ~= plain:revision()).to_be(true)
    expect(l:canonical()).to_match('"hooks":%["before_tool","turn_end"%]')
    -- the same points, other functions: the same revision (functions are not hashed)
    expect(loop{ hooks = { before_tool = print, turn_end = print } }:revision()).to_be(l:revision())
    expect(plain:canonical():find("hooks", 1, true)).to_be_nil()
  end)

  it("refuses unknown hook points and non-functions", function()
    expect(raises(loop, { hooks = { before_everything = print } }))
      .to_match("unknown field 'hooks.before_everything'")
    expect(raises(loop, { hooks = { after_tool = "x" } }))
      .to_match("field 'hooks.after_tool' must be a function")
    expect(raises(loop, { hooks = 3 })).to_match("field 'hooks' must be a table")
  end)

  it("takes guardrails as functions, checks and guard models", function()
    local guard = rig.model.script{ { text = '{"tripped":false}' } }
    local l = loop{ guardrails = { input = { print, { name = "pii", check = print } },
      output = { { name = "judge", model = guard, instructions = "judge it" } } } }
    local g = l.guardrails
    expect(g.input[1].name).to_be("input_1")
    expect(g.input[2].name).to_be("pii")
    expect(g.output[1].model).to_be(guard)
    expect(l:canonical()).to_match('"guardrails"')
    expect(l:canonical()).to_match('"judge it"')
  end)

  it("refuses malformed guardrails, naming the field", function()
    expect(raises(loop, { guardrails = { middle = {} } })).to_match("unknown field 'guardrails.middle'")
    expect(raises(loop, { guardrails = { input = { 3 } } }))
      .to_match("field 'guardrails.input%[1%]' must be a function or a table")
    expect(raises(loop, { guardrails = { input = { { name = "a" } } } }))
      .to_match("needs exactly one of 'check'")
    expect(raises(loop, { guardrails = { input = { { name = "a", model = model } } } }))
      .to_match("instructions' is required with a guard model")
    expect(raises(loop, { guardrails = { input = { { name = "a", check = print },
      { name = "a", check = print } } } })).to_match("duplicate guardrail name 'a'")
    expect(raises(loop, { guardrails = { output = { { name = "a", check = print, bogus = 1 } } } }))
      .to_match("unknown field 'guardrails.output%[1%].bogus'")
  end)

  it("takes handoffs by name or table, and rig.define resolves them", function()
    local a = loop{ name = "triage", handoffs = { "billing", { loop = "refunds", filter = "no_tools",
      description = "money back" } } }
    expect(#a.handoffs).to_be(2)
    expect(a.handoffs[1].filter).to_be("all")
    expect(a.handoffs[2].filter).to_be("no_tools")
    expect(a:canonical()).to_match('"handoffs"')
    local b = loop{ name = "billing" }
    local c = loop{ name = "refunds" }
    local r = rig.define{ loops = { a, b, c }, primers = { "triage" }, store = rig.store.memory() }
    expect(r:loop("refunds")).to_be(c)
    -- a handoff target that is no loop of the rig
    expect(raises(rig.define, { loops = { a, b }, primers = { "triage" }, store = rig.store.memory() }))
      .to_match("field 'handoffs%[2%]' names no loop of this rig %('refunds'%)")
    -- without the handoff edge, billing is unreachable
    expect(raises(rig.define, { loops = { loop{ name = "triage" }, b }, primers = { "triage" },
      store = rig.store.memory() })).to_match("unreachable %(no primer reaches it through delegates or handoffs%)")
  end)

  it("refuses bad handoffs", function()
    expect(raises(loop, { handoffs = { "assistant" } })).to_match("names the loop itself")
    expect(raises(loop, { handoffs = { "a", "a" } })).to_match("lists 'a' twice")
    expect(raises(loop, { handoffs = { { loop = "a", filter = "some" } } }))
      .to_match("field 'handoffs%[1%].filter' must be")
    expect(raises(loop, { handoffs = { "a b" } })).to_match("field 'handoffs%[1%].loop' must be a loop name")
    expect(raises(loop, { handoffs = { "x" }, tools = { tool("transfer_to_x") } }))
      .to_match("tool 'transfer_to_x' is the handoff's own")
  end)
end)

describe("rig.define budget", function()
  it("takes a session budget and fingerprints it", function()
    local l = loop()
    local store = rig.store.memory()
    local plain = rig.define{ loops = { l }, primers = { "assistant" }, store = store }
    local r = rig.define{ loops = { l }, primers = { "assistant" }, store = store,
      budget = { max_tokens = 1000, max_cost = 0.5 } }
    expect(r.budget).to_equal({ max_tokens = 1000, max_cost = 0.5 })
    expect(plain.budget).to_be_nil()
    expect(r:fingerprint() ~= plain:fingerprint()).to_be(true)
  end)

  it("refuses a malformed budget", function()
    local l = loop()
    local function def(b)
      return rig.define{ loops = { l }, primers = { "assistant" }, store = rig.store.memory(), budget = b }
    end
    expect(raises(def, { max_tokens = 0 })).to_match("'budget.max_tokens' must be a positive integer")
    expect(raises(def, { max_cost = -1 })).to_match("'budget.max_cost' must be a positive number")
    expect(raises(def, { tokens = 3 })).to_match("unknown field 'budget.tokens'")
  end)
end)
