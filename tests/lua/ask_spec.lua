-- A custom tool that just works, and one call to ask an agent (issue 19 §1, §2):
-- run receives the validated arguments, prepare is optional, needs_approval asks
-- a person without hand-written requirements, s:ask / rig.run return the answer
-- (or the structured output) and usage, nil, message, code on failure, and
-- s:wait_idle reports a failed or interrupted turn. Before this change a
-- README-shaped tool (run reading args.q) failed with "attempt to concatenate a
-- nil value" as a tool error while the turn succeeded, and a tool without
-- prepare was denied every call.

local json = rig.json

local function lookup(over)
  local def = { name = "lookup", description = "Looks a word up.",
    schema = { type = "object", properties = { q = { type = "string" } }, required = { "q" } },
    run = function(a) return "definition of " .. a.q end }
  for k, v in pairs(over or {}) do def[k] = v end
  return rig.tool(def)
end

local function call(name, input) return { tool_calls = { { name = name, input = input } } } end

-- the tool results the model read at its n-th call
local function results(model, n)
  local msgs = model:calls()[n].messages
  local out = {}
  for _, b in ipairs(msgs[#msgs].content) do
    if b.type == "tool_result" then out[#out + 1] = b end
  end
  return out
end

local function loop_of(model, tools, over)
  local def = { name = "assistant", model = model, tools = tools, gate = rig.gate.default(),
                policy_revision = "v1" }
  for k, v in pairs(over or {}) do def[k] = v end
  return rig.loop(def)
end

local function rig_of(loop)
  return rig.define{ loops = { loop }, primers = { loop.name }, store = rig.store.memory() }
end

describe("a tool of one's own", function()
  it("runs with the validated arguments, without prepare, through rig.gate.default()", function()
    local seen
    local t = lookup{ run = function(a, ctx)
      seen = { args = a, ctx_args = ctx.args, summary = ctx.request.summary, reqs = #ctx.request.requirements }
      return "definition of " .. a.q
    end }
    local m = rig.model.script{ call("lookup", { q = "rig" }), { text = "A rig is a setup." } }
    local answer, usage = rig.run(loop_of(m, { t }), "What is a rig?")
    expect(answer).to_be("A rig is a setup.")
    expect(usage.output_tokens > 0).to_be(true)
    local res = results(m, 2)
    expect(res[1].content).to_be("definition of rig")
    expect(res[1].is_error ~= true).to_be(true)
    expect(seen.args.q).to_be("rig")
    expect(seen.ctx_args.q).to_be("rig")
    expect(seen.summary).to_be('lookup {"q":"rig"}')
    expect(seen.reqs).to_be(0)
  end)

  it("gives run a copy: what run changes is not what the journal holds", function()
    local t = lookup{ run = function(a) a.q = "changed" return "ok" end }
    local m = rig.model.script{ call("lookup", { q = "rig" }), { text = "done" } }
    local r = rig_of(loop_of(m, { t }))
    local s = assert(r:session())
    assert(s:ask("go"))
    local h = s:history()
    local use
    for _, msg in ipairs(h) do
      for _, b in ipairs(msg.content) do if b.type == "tool_use" then use = b end end
    end
    expect(use.input.q).to_be("rig")
    s:shutdown()
  end)

  it("with prepare: run still gets the arguments, ctx.request and ctx.prepared", function()
    local got
    local t = lookup{
      prepare = function(a) return { summary = "look up " .. a.q }, { upper = a.q:upper() } end,
      run = function(a, ctx)
        got = { q = a.q, prepared = ctx.prepared.upper, summary = ctx.request.summary,
                legacy = a.summary }
        return "ok"
      end }
    local m = rig.model.script{ call("lookup", { q = "rig" }), { text = "done" } }
    assert(rig.run(loop_of(m, { t }), "go"))
    expect(got.q).to_be("rig")
    expect(got.prepared).to_be("RIG")
    expect(got.summary).to_be("look up rig")
    -- a run written for the old shape (the request first) still finds the request's fields
    expect(got.legacy).to_be("look up rig")
  end)

  it("an argument named like a request field wins over the request's", function()
    local got
    local t = rig.tool{ name = "note", description = "n",
      schema = { type = "object", properties = { summary = { type = "string" } } },
      prepare = function() return { summary = "the request's" } end,
      run = function(a) got = a.summary return "ok" end }
    local m = rig.model.script{ call("note", { summary = "the model's" }), { text = "done" } }
    assert(rig.run(loop_of(m, { t }), "go"))
    expect(got).to_be("the model's")
  end)

  it("needs_approval = true asks the approver; approve runs it, deny refuses it", function()
    for _, answer in ipairs { "approve", "deny" } do
      local ran = false
      local t = lookup{ needs_approval = true, run = function() ran = true return "sent" end }
      local m = rig.model.script{ call("lookup", { q = "x" }), { text = "done" } }
      local gates = {}
      local out = rig.run(loop_of(m, { t }), "go", { on_gate = function(g)
        gates[#gates + 1] = g
        return answer
      end })
      expect(out).to_be("done")
      expect(#gates).to_be(1)
      expect(gates[1].tool).to_be("lookup")
      expect(gates[1].unmet[1].kind).to_be("tool")
      expect(gates[1].unmet[1].match).to_be("lookup")
      expect(ran).to_be(answer == "approve")
      expect(results(m, 2)[1].content).to_be(answer == "approve" and "sent"
        or "error: permission denied: denied by the user")
    end
  end)

  it("needs_approval as a function of the arguments; a headless gate denies", function()
    local t = lookup{ needs_approval = function(a) return a.q == "risky" end }
    local m = rig.model.script{ { tool_calls = { { name = "lookup", input = { q = "safe" } },
                                                 { name = "lookup", input = { q = "risky" } } } },
                                { text = "done" } }
    local asked = 0
    assert(rig.run(loop_of(m, { t }), "go", { on_gate = function() asked = asked + 1 return true end }))
    expect(asked).to_be(1)
    local m2 = rig.model.script{ call("lookup", { q = "risky" }), { text = "done" } }
    assert(rig.run(loop_of(m2, { t }, { gate = rig.gate.default{ approver = "headless" } }), "go"))
    expect(results(m2, 2)[1].content).to_be("error: permission denied: approval required")
    expect(function() lookup{ needs_approval = "yes" } end).to_fail("field 'needs_approval'")
  end)

  it("approve_always saves a tool rule: the next call is not asked", function()
    local dir = os.tmpname(); os.remove(dir)
    assert(os.execute("mkdir -m 700 '" .. dir .. "'"))
    local g = rig.gate.default{ rules = rig.permissions.file(dir .. "/p.json") }
    local t = lookup{ needs_approval = true }
    local m = rig.model.script{ call("lookup", { q = "a" }), call("lookup", { q = "b" }), { text = "done" } }
    local asked = 0
    assert(rig.run(loop_of(m, { t }, { gate = g }), "go",
      { on_gate = function() asked = asked + 1 return "approve_always" end }))
    expect(asked).to_be(1)
    expect(results(m, 3)[1].content).to_be("definition of b")
    os.execute("rm -rf '" .. dir .. "'")
  end)
end)

describe("s:ask and rig.run", function()
  it("returns the structured output, decoded", function()
    local m = rig.model.script{ call("final_answer", { word = "rig", ok = true }) }
    local l = rig.loop{ name = "a", model = m, output_schema = { name = "out", schema = {
      type = "object", properties = { word = { type = "string" }, ok = { type = "boolean" } },
      required = { "word", "ok" } } } }
    local out = assert(rig.run(l, "go"))
    expect(out.word).to_be("rig")
    expect(out.ok).to_be(true)
  end)

  it("returns nil, message, code for a failed turn and an interrupted one", function()
    local m = rig.model.script{ { error = { message = "down", code = "server" } },
                                { text = "late", delay = 30 } }
    local s = assert(rig_of(rig.loop{ name = "a", model = m }):session())
    local a, msg, code, ev = s:ask("one")
    expect(a).to_be_nil()
    expect(msg).to_match("^turn t[%d.]+ failed: script: down %(server%)$")
    expect(code).to_be("turn_failed")
    expect(ev.type).to_be("TurnFailed")
    local t = rig.spawn(function() return s:ask("two") end)
    rig.sleep(0.05)
    expect(s:interrupt()).to_be(true)
    local a2, msg2, code2 = t:wait(10)
    expect(a2).to_be_nil()
    expect(code2).to_be("interrupted")
    expect(msg2).to_match("was interrupted")
    s:shutdown()
  end)

  it("a timeout stops waiting, the turn goes on", function()
    local m = rig.model.script{ { text = "late", delay = 0.5 } }
    local s = assert(rig_of(rig.loop{ name = "a", model = m }):session())
    expect(select(3, s:ask("x", { timeout = 0.05 }))).to_be("timeout")
    expect(s:wait_idle(10)).to_be(true)
    expect(s:history()[2].content[1].text).to_be("late")
    s:shutdown()
  end)

  it("rig.run finds delegates given as loop objects and answers their gates too", function()
    local model = rig.model.script{ steps = (function()
      local f = function(req)
        if req.system == "research" then return { text = "42" } end
        local last = req.messages[#req.messages]
        if last.role == "user" then return call("start_agent", { agent = "researcher", instructions = "q" }) end
        return { text = "answer: " .. last.content[1].content }
      end
      return { f, f, f }
    end)() }
    local researcher = rig.loop{ name = "researcher", model = model, system = "research" }
    local planner = rig.loop{ name = "planner", model = model, system = "plan",
      delegates = { researcher }, gate = rig.gate.default(), policy_revision = "v1" }
    expect(rig.run(planner, "go")).to_be("answer: 42")
  end)

  it("uses the session's own on_gate when the call names none", function()
    local t = lookup{ needs_approval = true }
    local m = rig.model.script{ call("lookup", { q = "a" }), { text = "done" } }
    local asked = 0
    local s = assert(rig_of(loop_of(m, { t })):session{ on_gate = function() asked = asked + 1 return true end })
    expect(s:ask("go")).to_be("done")
    expect(asked).to_be(1)
    expect(results(m, 2)[1].content).to_be("definition of a")
    s:shutdown()
    expect(function() rig_of(loop_of(m, { t })):session{ on_gate = 1 } end).to_fail("option 'on_gate'")
    -- a restored session takes one too
    local store = rig.store.memory()
    local m2 = rig.model.script{ call("lookup", { q = "b" }), { text = "again" } }
    local r2 = rig.define{ loops = { loop_of(m2, { t }) }, primers = { "assistant" }, store = store }
    local s2 = assert(r2:session())
    local id = s2.id
    s2:shutdown()
    local s3 = assert(r2:restore(id, { on_gate = "approve" }))
    expect(s3:ask("go")).to_be("again")
    expect(results(m2, 2)[1].content).to_be("definition of b")
    s3:shutdown()
    expect(function() r2:restore(id, { on_gate = 1 }) end).to_fail("option 'on_gate'")
  end)

  it("print shows a note on_gate gives, a denial, and a gate answered elsewhere", function()
    local path = os.tmpname()
    local f = assert(io.open(path, "w"))
    local t = lookup{ needs_approval = true }
    local m = rig.model.script{ call("lookup", { q = "a" }), call("lookup", { q = "b" }), { text = "ok" } }
    local p = rig.ask.printer{ out = f, color = false }
    local n = 0
    assert(rig.run(loop_of(m, { t }), "go", { print = p, on_gate = function()
      n = n + 1
      if n == 1 then return "approve", "by the test" end
      return false
    end }))
    -- answered by another task: the question, then the answer on its own line
    local m2 = rig.model.script{ call("lookup", { q = "c" }), { text = "ok" } }
    local s = assert(rig_of(loop_of(m2, { t })):session())
    local helper = rig.spawn(function()
      while #s:gates() == 0 do rig.sleep(0.01) end
      s:respond_gate(s:gates()[1].gate_id, "approve")
    end)
    assert(s:ask("go", { print = p }))
    helper:wait(10)
    s:shutdown()
    f:close()
    local text = assert(io.open(path)):read("a")
    os.remove(path)
    expect(text).to_match('%? allow lookup {"q":"a"} %(lookup%) — approved %(by the test%)\n')
    expect(text).to_match('%? allow lookup {"q":"b"} %(lookup%) — denied\n  ok\n')
    expect(text).to_match('%? allow lookup {"q":"c"} %(lookup%)\n    approved\n')
    expect(text).to_match("── turn 1 done")
    expect(text).to_match("── turn 2 done") -- the printer numbers turns across asks
  end)

  it("refuses unknown options and a bad on_gate", function()
    local l = rig.loop{ name = "a", model = rig.model.script{} }
    expect(function() rig.run(l, "x", { on_gat = "approve" }) end).to_fail("unknown option 'on_gat'")
    expect(function() rig.run(l, "x", { on_gate = "yes" }) end).to_fail("option 'on_gate'")
    expect(function() rig.run({}, "x") end).to_fail("expects a rig.loop or a rig")
  end)

  it("print draws the turn as it streams", function()
    local path = os.tmpname()
    local f = assert(io.open(path, "w"))
    local t = lookup{ needs_approval = true }
    local m = rig.model.script{ { text = "Looking it up.", tool_calls = { { name = "lookup", input = { q = "rig" } } } },
                                { text = "Done.", chunk = 2 } }
    assert(rig.run(loop_of(m, { t }), "go", { on_gate = "approve", print = { out = f, color = false } }))
    f:close()
    local text = assert(io.open(path)):read("a")
    os.remove(path)
    expect(text).to_match('^  Looking it up%.\n  %? allow lookup {"q":"rig"} %(lookup%) — approved\n'
      .. "    │ definition of rig\n  Done%.\n\n  ── turn 1 done · %d+ in / %d+ out tokens\n$")
  end)
end)

describe("s:wait_idle", function()
  it("reports a failed turn once, then true again", function()
    local m = rig.model.script{ { error = { message = "down", code = "server" } }, { text = "ok" } }
    local s = assert(rig_of(rig.loop{ name = "a", model = m }):session())
    s:submit("one")
    local ok, msg, code = s:wait_idle(10)
    expect(ok).to_be_nil()
    expect(code).to_be("turn_failed")
    expect(msg).to_match("^turn t[%d.]+ of a failed: script: down %(server%)$")
    expect(s:wait_idle(10)).to_be(true)
    s:submit("two")
    expect(s:wait_idle(10)).to_be(true)
    s:shutdown()
  end)

  it("reports an interrupted turn", function()
    local m = rig.model.script{ { text = "late", delay = 30 } }
    local s = assert(rig_of(rig.loop{ name = "a", model = m }):session())
    s:submit("one")
    rig.sleep(0.05)
    s:interrupt()
    local ok, msg, code = s:wait_idle(10)
    expect(ok).to_be_nil()
    expect(code).to_be("interrupted")
    expect(msg).to_match("was interrupted")
    s:shutdown()
  end)
end)
