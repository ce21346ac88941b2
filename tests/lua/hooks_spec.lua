-- Hooks that act (before and after a model call, before and after a tool call,
-- at turn end) and input/output guardrails beside the model call: every
-- decision in the journal, a trip ending the turn with nothing of its step
-- committed, and a restore folding the same history.

local json = rig.json


-- Waits for the session to go idle; a turn that failed or was interrupted is
-- what these cases look at, so only a fault or a timeout is an error.
local function idle(s, t)
  local ok, msg, code = s:wait_idle(t or 10)
  if not ok and code ~= "turn_failed" and code ~= "interrupted" then error(msg, 2) end
  return true
end

local function allow_all()
  return rig.gate{ access = { ["filesystem.read"] = "allow", ["filesystem.write"] = "allow",
    network = "allow", ["command.execute"] = "allow" }, approver = "headless" }
end

local function echo_tool(ran)
  return rig.tool{
    name = "echo", description = "echoes its text",
    schema = { type = "object", properties = { text = { type = "string" } }, required = { "text" } },
    prepare = function(args) return { summary = "echo " .. args.text, requirements = {} } end,
    run = function(req)
      if ran then ran[#ran + 1] = req.summary end
      return "echo: " .. req.summary:sub(6)
    end,
  }
end

local function define(steps, over)
  over = over or {}
  local model = over.model or rig.model.script(steps)
  local def = { name = "assistant", model = model, system = "be brief",
    tools = { echo_tool(over.ran) }, gate = allow_all(), policy_revision = "v1" }
  for k, v in pairs(over.loop or {}) do def[k] = v end
  local store = over.store or rig.store.memory()
  return rig.define{ loops = { rig.loop(def) }, primers = { "assistant" }, store = store },
    model, store
end

-- Runs one turn on input; returns the session, its journaled events (after the
-- session's own start) and the terminal.
local function turn(r, input)
  local s = assert(r:session())
  s:submit(input or "hi")
  idle(s, 10)
  local evs = {}
  for rec in s:journal() do evs[#evs + 1] = rec end
  local terminal
  for _, ev in ipairs(evs) do if ev.ends_turn then terminal = ev end end
  return s, evs, terminal
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

describe("hooks", function()
  it("before_tool denies a call with a message the model reads; the tool never runs", function()
    local ran = {}
    local r, model = define({ { tool_calls = { { name = "echo", input = { text = "rm -rf" } } } },
      { text = "ok" } }, { ran = ran, loop = { hooks = {
        before_tool = function(call)
          if call.input.text:find("rm") then return { action = "deny", message = "no deleting" } end
        end } } })
    local s, evs, term = turn(r)
    expect(term.type).to_be("TurnDone")
    expect(#ran).to_be(0)
    local d = of_type(evs, "HookDecided")
    expect(#d).to_be(1)
    expect(d[1].hook).to_be("before_tool")
    expect(d[1].action).to_be("deny")
    expect(d[1].message).to_be("no deleting")
    expect(d[1].tool).to_be("echo")
    local res = of_type(evs, "StepDone")[1].results.content[1]
    expect(res.is_error).to_be(true)
    expect(res.content).to_match("no deleting")
    -- the model's second call read the refusal
    local seen = model:calls()[2].messages
    expect(seen[#seen].content[1].content).to_match("no deleting")
    s:shutdown()
  end)

  it("before_tool rewrites the arguments (checked again) and allows the rest", function()
    local ran = {}
    local r = define({ { tool_calls = { { name = "echo", input = { text = "loud" } },
      { name = "echo", input = { text = "quiet" } } } }, { text = "ok" } }, { ran = ran, loop = {
        hooks = { before_tool = function(call)
          if call.input.text == "loud" then return { action = "rewrite", input = { text = "LOUD" } } end
          return "allow"
        end } } })
    local s, evs = turn(r)
    table.sort(ran)
    expect(ran).to_equal({ "echo LOUD", "echo quiet" })
    local acts = {}
    for _, d in ipairs(of_type(evs, "HookDecided")) do acts[#acts + 1] = d.action end
    table.sort(acts)
    expect(acts).to_equal({ "allow", "rewrite" })
    for _, d in ipairs(of_type(evs, "HookDecided")) do
      if d.action == "rewrite" then expect(d.input).to_equal({ text = "LOUD" }) end
    end
    s:shutdown()
    -- a rewrite the schema refuses is an error result
    local r2 = define({ { tool_calls = { { name = "echo", input = { text = "x" } } } }, { text = "ok" } },
      { loop = { hooks = { before_tool = function() return { action = "rewrite", input = { text = 3 } } end } } })
    local s2, evs2 = turn(r2)
    local res = of_type(evs2, "StepDone")[1].results.content[1]
    expect(res.is_error).to_be(true)
    expect(res.content).to_match("invalid arguments")
    s2:shutdown()
  end)

  it("after_tool rewrites the result the step commits", function()
    local r, model = define({ { tool_calls = { { name = "echo", input = { text = "secret-123" } } } },
      { text = "ok" } }, { loop = { hooks = { after_tool = function(call, result)
        return { content = (result.content:gsub("secret%-%d+", "[redacted]")) }
      end } } })
    local s, evs = turn(r)
    local res = of_type(evs, "StepDone")[1].results.content[1]
    expect(res.content).to_be("echo: [redacted]")
    expect(of_type(evs, "ToolResultRecorded")[1].result.content).to_be("echo: [redacted]")
    local d = of_type(evs, "HookDecided")
    expect(d[1].hook).to_be("after_tool")
    expect(d[1].action).to_be("rewrite")
    local seen = json.encode(model:calls()[2].messages)
    expect(seen:find("echo: secret", 1, true)).to_be_nil()
    expect(seen:find("echo: [redacted]", 1, true) ~= nil).to_be(true)
    s:shutdown()
  end)

  it("before_model rewrites the request of one call, not the history", function()
    local r, model = define({ { text = "answer" } }, { loop = { hooks = {
      before_model = function(req, ctx)
        req.system = req.system .. " (turn " .. ctx.turn_id .. ")"
        req.messages[#req.messages + 1] = { role = "user", content = { { type = "text", text = "P.S." } } }
        return req
      end } } })
    local s, evs = turn(r)
    local call = model:calls()[1]
    expect(call.system).to_match("^be brief %(turn ")
    expect(#call.messages).to_be(2)
    expect(#s:history()).to_be(2) -- the user's message and the answer
    local d = of_type(evs, "HookDecided")[1]
    expect(d.action).to_be("rewrite")
    expect(json.encode(d.changed)).to_be('["system","messages"]')
    s:shutdown()
    -- nil is "continue", journaled too
    local r2 = define({ { text = "a" } }, { loop = { hooks = { before_model = function() end } } })
    local s2, evs2 = turn(r2)
    expect(of_type(evs2, "HookDecided")[1].action).to_be("continue")
    s2:shutdown()
  end)

  it("after_model rewrites the message the step commits", function()
    local r = define({ { text = "my key is sk-abc" } }, { loop = { hooks = {
      after_model = function(resp)
        return { message = { role = "assistant", content = { { type = "text",
          text = (text(resp.message):gsub("sk%-%w+", "[key]")) } } } }
      end } } })
    local s, evs, term = turn(r)
    expect(text(term.message)).to_be("my key is [key]")
    expect(text(s:history()[2])).to_be("my key is [key]")
    expect(text(of_type(evs, "StepDone")[1].message)).to_be("my key is [key]")
    s:shutdown()
  end)

  it("turn_end continues the turn once with a message", function()
    local n = 0
    local r, model = define({ { text = "draft" }, { text = "final" } }, { loop = { hooks = {
      turn_end = function(outcome)
        n = n + 1
        if text(outcome.message) == "draft" then return { action = "continue", message = "check it" } end
      end } } })
    local s, evs, term = turn(r)
    expect(n).to_be(2)
    expect(#of_type(evs, "TurnDone")).to_be(1)
    expect(text(term.message)).to_be("final")
    local folded = of_type(evs, "TurnFoldedInto")
    expect(#folded).to_be(1)
    expect(folded[1].hook).to_be("turn_end")
    expect(text(model:calls()[2].messages[3])).to_be("check it")
    local acts = {}
    for _, d in ipairs(of_type(evs, "HookDecided")) do acts[#acts + 1] = d.action end
    expect(acts).to_equal({ "continue", "stop" })
    -- a restore folds the same history
    local id = s.id
    local h = json.encode(s:history())
    s:shutdown()
    local s2 = assert(r:restore(id))
    expect(json.encode(s2:history())).to_be(h)
    s2:shutdown()
  end)

  it("a hook that raises fails the turn (hook_failed) with nothing of its step committed", function()
    local r = define({ { text = "x" } }, { loop = { hooks = {
      after_model = function() error("boom") end } } })
    local s, evs, term = turn(r)
    expect(term.type).to_be("TurnFailed")
    expect(term.error.code).to_be("hook_failed")
    expect(term.error.hook).to_be("after_model")
    expect(term.error.message).to_match("boom")
    expect(#of_type(evs, "StepDone")).to_be(0)
    expect(of_type(evs, "HookDecided")[1].action).to_be("error")
    s:shutdown()
  end)
end)

describe("guardrails", function()
  it("an input guardrail trips: the step's tool calls never run, the input leaves the history", function()
    local ran = {}
    local seen
    local r, model, store = define({ { tool_calls = { { name = "echo", input = { text = "x" } } },
      usage = { input_tokens = 100, output_tokens = 10 } } }, { ran = ran, loop = { guardrails = {
        input = { { name = "no_homework", check = function(input, ctx)
          seen = ctx.stage
          if input.text:find("homework") then return { tripped = true, reason = "homework",
            info = { score = 0.9 } } end
        end } } } } })
    local s, evs, term = turn(r, "do my math homework")
    expect(seen).to_be("input")
    expect(term.type).to_be("TurnFailed")
    expect(term.error.code).to_be("guardrail_tripped")
    expect(term.error.guardrail).to_be("no_homework")
    expect(term.error.stage).to_be("input")
    local g = of_type(evs, "GuardrailTripped")
    expect(#g).to_be(1)
    expect(g[1].reason).to_be("homework")
    expect(g[1].info).to_equal({ score = 0.9 })
    expect(g[1].history_len).to_be(0)
    -- ran beside the model call: the call was made, its answer dropped
    expect(#model:calls()).to_be(1)
    expect(#ran).to_be(0)
    expect(#of_type(evs, "StepDone")).to_be(0)
    expect(#of_type(evs, "ToolCallsPlanned")).to_be(0)
    expect(#s:history()).to_be(0)
    -- what the tripped step cost is counted
    expect(s:usage().input_tokens).to_be(100)
    local id = s.id
    s:shutdown()
    local s2 = assert(r:restore(id))
    expect(#s2:history()).to_be(0)
    expect(s2:usage().input_tokens).to_be(100)
    s2:shutdown()
  end)

  it("input guardrails that pass are journaled and the turn goes on", function()
    local r = define({ { text = "fine" } }, { loop = { guardrails = { input = { function() return false end } } } })
    local s, evs, term = turn(r)
    expect(term.type).to_be("TurnDone")
    local c = of_type(evs, "GuardrailChecked")
    expect(#c).to_be(1)
    expect(c[1].stage).to_be("input")
    expect(c[1].guardrails).to_equal({ "input_1" })
    s:shutdown()
  end)

  it("an output guardrail trips: the final step is not committed", function()
    local r = define({ { tool_calls = { { name = "echo", input = { text = "a" } } } },
      { text = "the password is hunter2", usage = { input_tokens = 50, output_tokens = 5 } } },
      { loop = { guardrails = { output = { { name = "leak", check = function(out)
        if out.text:find("password") then return "leaks a password" end
      end } } } } })
    local s, evs, term = turn(r)
    expect(term.type).to_be("TurnFailed")
    expect(term.error.code).to_be("guardrail_tripped")
    expect(term.error.stage).to_be("output")
    expect(term.error.message).to_match("leaks a password")
    -- the first step stands, the tripped one does not
    expect(#of_type(evs, "StepDone")).to_be(1)
    local h = s:history()
    expect(#h).to_be(3)
    expect(h[3].role).to_be("tool")
    expect(of_type(evs, "GuardrailTripped")[1].usage.input_tokens).to_be(50)
    s:shutdown()
  end)

  it("a guard model trips with its reason; its usage counts", function()
    local guard = rig.model.script{ { text = '{"tripped": true, "reason": "off topic"}',
      usage = { input_tokens = 7, output_tokens = 3 } } }
    local r = define({ { text = "x", usage = { input_tokens = 10, output_tokens = 1 } } }, { loop = {
      guardrails = { input = { { name = "topic", model = guard, instructions = "Only cooking." } } } } })
    local s, _, term = turn(r, "tell me about cars")
    expect(term.error.code).to_be("guardrail_tripped")
    expect(term.error.message).to_match("off topic")
    expect(guard:calls()[1].system).to_be("Only cooking.")
    expect(s:usage().input_tokens).to_be(17)
    s:shutdown()
  end)

  it("a guardrail that raises fails closed (guardrail_failed)", function()
    local r = define({ { text = "x" } }, { loop = { guardrails = { input = { function() error("down") end } } } })
    local s, evs, term = turn(r)
    expect(term.error.code).to_be("guardrail_failed")
    expect(term.error.message).to_match("down")
    expect(of_type(evs, "GuardrailTripped")[1].failed).to_be(true)
    s:shutdown()
  end)

  it("a guardrail that trips while the model streams stops the stream", function()
    local r, model = define({ { text = string.rep("word ", 40), chunk = 5, chunk_delay = 0.05 } },
      { loop = { guardrails = { input = { function() return true end } } } })
    local s = assert(r:session())
    local sub = s:subscribe{}
    s:submit("hi")
    local deltas, term = 0, nil
    for ev in sub:events(10) do
      if ev.type == "TokenDelta" then deltas = deltas + 1 end
      if ev.ends_turn then term = ev break end
    end
    expect(term.error.code).to_be("guardrail_tripped")
    -- the step's deltas were held while the guardrail ran, and dropped with the step
    expect(deltas).to_be(0)
    expect(#model:calls()).to_be(1)
    s:shutdown()
  end)

  it("deltas held while input guardrails run all go out, in order, once they pass", function()
    local gate = rig.cond()
    local released = false
    local r = define({ { text = { "one ", "two ", "three" }, chunk_delay = 0.01 } }, { loop = {
      guardrails = { input = { function()
        while not released do gate:wait(5) end
        return false
      end } } } })
    local s = assert(r:session())
    local sub = s:subscribe{}
    s:submit("hi")
    local seen, term = {}, nil
    rig.spawn(function() rig.sleep(0.2) released = true gate:signal() end)
    for ev in sub:events(10) do
      if ev.type == "TokenDelta" then seen[#seen + 1] = ev.delta.text end
      if ev.ends_turn then term = ev break end
    end
    expect(term.type).to_be("TurnDone")
    expect(table.concat(seen)).to_be("one two three")
    s:shutdown()
  end)
end)

describe("guardrail usage", function()
  it("a guard model that passes is counted once, live and after a restore", function()
    local guard = rig.model.script{ { text = '{"tripped": false}', usage = { input_tokens = 7, output_tokens = 2 } },
      { text = '{"tripped": false}', usage = { input_tokens = 7, output_tokens = 2 } } }
    local r = define({ { text = "fine", usage = { input_tokens = 10, output_tokens = 1 } } }, { loop = {
      guardrails = { input = { { name = "topic", model = guard, instructions = "judge" } },
                     output = { { name = "judge", model = guard, instructions = "judge" } } } } })
    local s, evs, term = turn(r)
    expect(term.type).to_be("TurnDone")
    local checked = of_type(evs, "GuardrailChecked")
    expect(#checked).to_be(2)
    expect(checked[1].usage.input_tokens).to_be(7)
    expect(s:usage().input_tokens).to_be(24)
    expect(term.usage.input_tokens).to_be(24)
    local id = s.id
    s:shutdown()
    local s2 = assert(r:restore(id))
    expect(s2:usage().input_tokens).to_be(24)
    s2:shutdown()
  end)
end)
