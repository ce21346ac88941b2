-- Structured output: a loop's output_schema, natively (a model with
-- structured_output gets request.output_schema and answers in text) and
-- through the runner's reserved final tool (tool_choice "required"); valid
-- answers end in TurnDone{ output }, invalid ones go back to the model with
-- the validation message (output_schema.repair times, default 2) and then end
-- in TurnFailed{ invalid_output }.

local json = rig.json

local SCHEMA = { type = "object", properties = {
  city = { type = "string" }, population = { type = "integer", minimum = 0 },
  tags = { type = "array", items = { type = "string" } } },
  required = { "city", "population" }, additionalProperties = false }

local function allow_all()
  return rig.gate{ access = { ["filesystem.read"] = "allow", ["filesystem.write"] = "allow",
    network = "allow", ["command.execute"] = "allow" }, approver = "headless" }
end

local function echo_tool()
  return rig.tool{ name = "echo", description = "echoes its text",
    schema = { type = "object", properties = { text = { type = "string" } }, required = { "text" } },
    prepare = function(args) return { summary = "echo " .. args.text, requirements = {} } end,
    run = function(req) return "echo: " .. req.summary:sub(6) end }
end

local function define(steps, opts)
  opts = opts or {}
  local model = rig.model.script{ steps = steps, structured_output = opts.native == true }
  local loop = rig.loop{ name = "assistant", model = model, system = "answer in JSON",
    tools = opts.tools or {}, gate = allow_all(), policy_revision = "v1",
    output_schema = { name = "city_info", schema = SCHEMA, description = "a city",
                      repair = opts.repair } }
  local store = opts.store or rig.store.memory()
  return rig.define{ loops = { loop }, primers = { "assistant" }, store = store }, model, store
end

local function turn(s, input)
  local sub = s:subscribe{ ephemeral = false }
  s:submit(input)
  local last
  for ev in sub:events(10) do
    if ev.ends_turn then last = ev break end
  end
  sub:close()
  -- wait_idle reports a failed turn (issue 19 §2)
  local ok, _, code = s:wait_idle(5)
  expect(ok or code).to_be(last.type == "TurnDone" and true or "turn_failed")
  return last
end

local function journaled(s, etype)
  for rec in s:journal() do
    if rec.type == etype then return rec end
  end
end

describe("structured output", function()
  it("takes a native answer: the request carries the schema, TurnDone the decoded value", function()
    local r, model = define({ function(req)
      expect(req.output_schema.name).to_be("city_info")
      expect(req.output_schema.schema.required[1]).to_be("city")
      expect(req.tool_choice).to_be_nil()
      return { text = { '{"city": "Lyon", ', '"population": 522250, "tags": ["rhone"]}' } }
    end }, { native = true })
    local s = assert(r:session())
    local ev = turn(s, "tell me about Lyon")
    expect(ev.type).to_be("TurnDone")
    expect(ev.output.city).to_be("Lyon")
    expect(ev.output.population).to_be(522250)
    expect(ev.output.tags[1]).to_be("rhone")
    -- journaled with the value; no final tool was offered
    local rec = journaled(s, "TurnDone")
    expect(rec.output.city).to_be("Lyon")
    expect(model:calls()[1].tools).to_be_nil()
    s:shutdown()
  end)

  it("fails a native answer that is not valid: bad JSON, a schema violation", function()
    local r = define({ { text = '{"city": "Lyon", "population": -3}' }, { text = "Lyon, I think" },
                       { text = '["Lyon"]' } }, { native = true, repair = 0 })
    local s = assert(r:session())
    local ev = turn(s, "one")
    expect(ev.type).to_be("TurnFailed")
    expect(ev.error.code).to_be("invalid_output")
    expect(ev.error.schema).to_be("city_info")
    expect(ev.error.message).to_match("%$%.population")
    expect(ev.output).to_be_nil()
    ev = turn(s, "two")
    expect(ev.error.code).to_be("invalid_output")
    expect(ev.error.message).to_match("not JSON")
    ev = turn(s, "three")
    expect(ev.error.code).to_be("invalid_output")
    expect(ev.error.message).to_match("not a JSON object")
    -- the step itself was complete: it is committed, so the history stays well formed
    local h = s:history()
    expect(#h).to_be(6)
    expect(h[2].role).to_be("assistant")
    s:shutdown()
  end)

  it("goes through the final tool when the model has no native structured output", function()
    local r, model = define({
      { tool_calls = { { name = "echo", input = { text = "look up" } } } },
      function(req)
        -- the model saw the tool's result, and every step must call a tool
        local last = req.messages[#req.messages]
        expect(last.content[1].content).to_be("echo: look up")
        expect(req.tool_choice).to_be("required")
        expect(req.output_schema).to_be_nil()
        return { tool_calls = { { name = "final_answer",
          input = { city = "Oslo", population = 709037 } } } }
      end,
    }, { tools = { echo_tool() } })
    local s = assert(r:session())
    local ev = turn(s, "tell me about Oslo")
    expect(ev.type).to_be("TurnDone")
    expect(ev.output.city).to_be("Oslo")
    expect(ev.output.population).to_be(709037)
    expect(ev.message.content[1].name).to_be("final_answer")
    local req = model:calls()[1]
    expect(req.tool_choice).to_be("required")
    expect(#req.tools).to_be(2)
    expect(req.tools[2].name).to_be("final_answer")
    expect(req.tools[2].schema.properties.population.type).to_be("integer")
    -- the final call is paired with a result, so the next turn's request is valid
    local h = s:history()
    expect(h[#h].role).to_be("tool")
    expect(h[#h].content[1].is_error).to_be(false)
    s:shutdown()
  end)

  it("fails invalid final tool arguments, and an answer that skips the final tool", function()
    local r = define({
      { tool_calls = { { name = "final_answer", input = { city = "Oslo" } } } },
      { tool_calls = { { name = "final_answer", input_json = '{"city": "Oslo", ' } } },
      { text = "Oslo has 709037 people." },
    }, { repair = 0 })
    local s = assert(r:session())
    local ev = turn(s, "one")
    expect(ev.type).to_be("TurnFailed")
    expect(ev.error.code).to_be("invalid_output")
    expect(ev.error.message).to_match("population")
    local h = s:history()
    expect(h[#h].content[1].is_error).to_be(true)
    ev = turn(s, "two")
    expect(ev.error.code).to_be("invalid_output")
    expect(ev.error.message).to_match("invalid JSON arguments")
    ev = turn(s, "three")
    expect(ev.error.code).to_be("invalid_output")
    expect(ev.error.message).to_match("without calling final_answer")
    s:shutdown()
  end)

  it("refuses the final tool beside other calls and lets the turn go on", function()
    local r = define({
      { tool_calls = { { name = "echo", input = { text = "a" } },
                       { name = "final_answer", input = { city = "X", population = 1 } } } },
      function(req)
        local res = req.messages[#req.messages].content
        expect(res[1].content).to_be("echo: a")
        expect(res[2].is_error).to_be(true)
        expect(res[2].content).to_match("alone")
        return { tool_calls = { { name = "final_answer", input = { city = "Y", population = 2 } } } }
      end,
    }, { tools = { echo_tool() } })
    local s = assert(r:session())
    local ev = turn(s, "go")
    expect(ev.type).to_be("TurnDone")
    expect(ev.output.city).to_be("Y")
    s:shutdown()
  end)

  it("reserves the final tool's name and checks the field", function()
    expect(function()
      rig.tool{ name = "final_answer", description = "mine", run = function() return "" end }
    end).to_fail("reserved")
    local m = rig.model.script{ steps = {} }
    expect(function()
      rig.loop{ name = "a", model = m, output_schema = { name = "x", schema = { type = "array" } } }
    end).to_fail("output_schema.schema.type")
    expect(function()
      rig.loop{ name = "a", model = m, output_schema = { name = "x", schema = SCHEMA, extra = 1 } }
    end).to_fail("unknown field 'output_schema.extra'")
    expect(function()
      rig.loop{ name = "a", model = m, output_schema = { name = "x",
        schema = { type = "object", properties = { a = { type = "strng" } } } } }
    end).to_fail("output_schema.schema.properties.a.type")
    -- the schema and the strategy are part of the revision
    local plain = rig.loop{ name = "a", model = m }
    local with = rig.loop{ name = "a", model = m, output_schema = { name = "x", schema = SCHEMA } }
    local native = rig.loop{ name = "a", model = rig.model.script{ steps = {}, structured_output = true },
      output_schema = { name = "x", schema = SCHEMA } }
    expect(plain:revision() ~= with:revision()).to_be(true)
    expect(with:revision() ~= native:revision()).to_be(true)
    expect(with.output_schema.schema.required[2]).to_be("population")
    -- providers declare native support by default, openai-compatible does not
    expect(rig.model{ provider = "anthropic", name = "x" }.structured_output).to_be(true)
    expect(rig.model{ provider = "openai-compatible", name = "x",
      base_url = "http://127.0.0.1:1" }.structured_output).to_be(false)
  end)

  it("restores a session whose turns ended with structured output", function()
    local store = rig.store.memory()
    local r = define({ { tool_calls = { { name = "final_answer",
      input = { city = "Oslo", population = 1 } } } } }, { store = store })
    local s = assert(r:session())
    turn(s, "one")
    local before = json.encode(s:history())
    local id = s.id
    s:shutdown()
    local r2 = define({}, { store = store })
    local s2 = assert(r2:restore(id))
    expect(json.encode(s2:history())).to_be(before)
    s2:shutdown()
  end)
end)

describe("structured output repair", function()
  it("sends a native answer that fails back with its JSON path, and takes the corrected one", function()
    local r, model = define({ { text = '{"city": "Lyon", "population": -3}', usage = { input_tokens = 10,
      output_tokens = 5 } }, { text = '{"city": "Lyon", "population": 522250}', usage = {
      input_tokens = 30, output_tokens = 6 } } }, { native = true })
    local s = assert(r:session())
    local ev = turn(s, "Lyon?")
    expect(ev.type).to_be("TurnDone")
    expect(ev.output.population).to_be(522250)
    -- the second call read the first answer and the validation message, with the path
    local msgs = model:calls()[2].messages
    expect(#msgs).to_be(3)
    expect(msgs[3].role).to_be("user")
    expect(msgs[3].content[1].text).to_match("^%[output repair 1 of 2%]")
    expect(msgs[3].content[1].text).to_match("%$%.population")
    -- journaled: the failed step with its repair, the feedback folded in
    local folded = journaled(s, "TurnFoldedInto")
    expect(folded.repair.attempt).to_be(1)
    expect(folded.repair.of).to_be(2)
    expect(folded.repair.error).to_match("%$%.population")
    -- usage counts every attempt
    expect(ev.usage.input_tokens).to_be(40)
    expect(ev.usage.output_tokens).to_be(11)
    local id, h = s.id, json.encode(s:history())
    s:shutdown()
    local s2 = assert(r:restore(id))
    expect(json.encode(s2:history())).to_be(h)
    s2:shutdown()
  end)

  it("fails after the configured attempts, counting each one", function()
    local bad = { text = '{"city": 3, "population": 1}', usage = { input_tokens = 10, output_tokens = 1 } }
    local r, model = define({ bad, bad, bad, bad }, { native = true, repair = 1 })
    local s = assert(r:session())
    local ev = turn(s, "x")
    expect(ev.type).to_be("TurnFailed")
    expect(ev.error.code).to_be("invalid_output")
    expect(ev.error.message).to_match("%$%.city")
    expect(#model:calls()).to_be(2)
    expect(ev.usage.input_tokens).to_be(20)
    s:shutdown()
    -- the default is 2: three answers before the turn fails
    local r2, m2 = define({ bad, bad, bad, bad }, { native = true })
    local s2 = assert(r2:session())
    expect(turn(s2, "x").type).to_be("TurnFailed")
    expect(#m2:calls()).to_be(3)
    s2:shutdown()
  end)

  it("repairs final tool arguments through the tool's error result", function()
    local r, model = define({
      { tool_calls = { { name = "final_answer", input = { city = "Oslo" } } } },
      { tool_calls = { { name = "final_answer", input = { city = "Oslo", population = 709037 } } } },
    })
    local s = assert(r:session())
    local ev = turn(s, "Oslo?")
    expect(ev.type).to_be("TurnDone")
    expect(ev.output.population).to_be(709037)
    local msgs = model:calls()[2].messages
    local res = msgs[#msgs].content[1]
    expect(res.is_error).to_be(true)
    expect(res.content).to_match("population")
    local step = journaled(s, "StepDone")
    expect(step.repair.attempt).to_be(1)
    s:shutdown()
  end)

  it("does not repair a refusal, and refuses a bad repair count", function()
    local r, model = define({ { refusal = "I cannot" }, { text = "{}" } }, { native = true })
    local s = assert(r:session())
    local ev = turn(s, "x")
    expect(ev.type).to_be("TurnFailed")
    expect(ev.error.message).to_match("refused")
    expect(#model:calls()).to_be(1)
    s:shutdown()
    expect(function() define({}, { repair = 11 }) end).to_fail("'output_schema.repair' must be an integer from 0 to 10")
  end)
end)
