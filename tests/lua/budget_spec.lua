-- Budgets that hold: per turn (limits.max_tokens, limits.max_cost) and per
-- session (rig.define{ budget }), checked before each step against its
-- estimate, so a limit is passed by at most the last step's overrun, which
-- the terminal event states.


-- Waits for the session to go idle; a turn that failed or was interrupted is
-- what these cases look at, so only a fault or a timeout is an error.
local function idle(s, t)
  local ok, msg, code = s:wait_idle(t or 10)
  if not ok and code ~= "turn_failed" and code ~= "interrupted" then error(msg, 2) end
  return true
end

local function allow_all()
  return rig.gate{ access = { ["filesystem.read"] = "allow", network = "allow" }, approver = "headless" }
end

local function echo_tool()
  return rig.tool{ name = "echo", description = "echoes",
    schema = { type = "object", properties = { text = { type = "string" } }, required = { "text" } },
    prepare = function(a) return { summary = "echo " .. a.text, requirements = {} } end,
    run = function(req) return req.summary end }
end

-- Every step: 10000 input tokens, 100 output, at $3 / $15 per million: $0.0315 a step.
local PRICES = { input = 3, output = 15 }
local function step(n)
  return { tool_calls = { { name = "echo", input = { text = tostring(n) } } },
           usage = { input_tokens = 10000, output_tokens = 100 } }
end

local function define(steps, limits, budget)
  local model = rig.model.script{ steps = steps, prices = PRICES }
  local l = rig.loop{ name = "assistant", model = model, tools = { echo_tool() }, gate = allow_all(),
    policy_revision = "v1", limits = limits }
  return rig.define{ loops = { l }, primers = { "assistant" }, store = rig.store.memory(), budget = budget },
    model
end

local function run(r, n)
  local s = assert(r:session())
  local terms = {}
  for i = 1, n or 1 do
    s:submit("go " .. i)
    idle(s, 10)
  end
  local evs = {}
  for rec in s:journal() do
    evs[#evs + 1] = rec
    if rec.ends_turn then terms[#terms + 1] = rec end
  end
  return s, terms, evs
end

local many = {}
for i = 1, 20 do many[i] = step(i) end

describe("budgets", function()
  it("a turn's cost budget stops before the step that would pass it", function()
    -- $0.1: three steps ($0.0945) fit, a fourth would reach $0.126
    local r, model = define(many, { max_cost = 0.1 })
    local s, terms = run(r)
    local e = terms[1].error
    expect(terms[1].type).to_be("TurnFailed")
    expect(e.code).to_be("limit")
    expect(e.limit).to_be("max_cost")
    expect(e.scope).to_be("turn")
    expect(e.checked).to_be("before_step")
    expect(#model:calls()).to_be(3)
    expect(e.spent).to_be(0.0945)
    expect(e.estimate > 0.0315).to_be(true)
    -- never past the limit
    expect(s:usage().cost <= 0.1).to_be(true)
    s:shutdown()
  end)

  it("a step the estimate missed ends the turn after it, stating the overrun", function()
    -- the estimate of the first step is small (a short request, 1024 output at most);
    -- the step bills 200k output tokens: $3
    local r = define({ { tool_calls = { { name = "echo", input = { text = "x" } } },
      usage = { input_tokens = 10, output_tokens = 200000 } }, step(2) }, { max_cost = 0.5 })
    local s, terms = run(r)
    local e = terms[1].error
    expect(e.checked).to_be("after_step")
    expect(e.overrun).to_be(2.50003)
    expect(e.message).to_match("over")
    s:shutdown()
  end)

  it("a session budget holds across turns: the next turn is refused before its model call", function()
    local steps = {}
    for i = 1, 20 do
      steps[#steps + 1] = i % 2 == 1 and step(i) or { text = "done", usage = { input_tokens = 10000,
        output_tokens = 100 } }
    end
    local r, model = define(steps, nil, { max_cost = 0.14 })
    local s, terms = run(r, 3)
    -- turn 1: two steps ($0.063); turn 2: two ($0.126); turn 3's first would pass $0.14
    expect(terms[1].type).to_be("TurnDone")
    expect(terms[2].type).to_be("TurnDone")
    expect(terms[3].type).to_be("TurnFailed")
    expect(terms[3].error.scope).to_be("session")
    expect(terms[3].error.checked).to_be("before_step")
    expect(#model:calls()).to_be(4)
    s:shutdown()
  end)

  it("a token budget counts every token and is checked before the step", function()
    local r, model = define(many, { max_tokens = 25000 })
    local s, terms = run(r)
    expect(terms[1].error.limit).to_be("max_tokens")
    expect(terms[1].error.checked).to_be("before_step")
    -- 10100 tokens a step: two fit, the third is refused by its estimate
    expect(#model:calls()).to_be(2)
    expect(terms[1].error.spent).to_be(20200)
    s:shutdown()
  end)

  it("steps carry the estimate they were checked against", function()
    local r = define(many, { max_cost = 0.07 })
    local s, _, evs = run(r)
    local n = 0
    for _, ev in ipairs(evs) do
      if ev.type == "StepDone" then
        n = n + 1
        expect(type(ev.estimate.tokens)).to_be("number")
        expect(type(ev.estimate.cost)).to_be("number")
      end
    end
    expect(n).to_be(2)
    s:shutdown()
  end)
end)
