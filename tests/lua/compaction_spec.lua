-- Compaction: s:compact() on an idle loop and automatic compaction between
-- steps (compaction.at of the model's context_window); the summary replaces
-- the older history, tool calls stay paired with their results,
-- CompactionCommitted is journaled and a restore rebuilds [summary, retained…].

local json = rig.json

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

-- opts: compaction, context_window, store, summarizer (a second script model)
local function define(steps, opts)
  opts = opts or {}
  local model = rig.model.script{ steps = steps, context_window = opts.context_window }
  local loop = rig.loop{ name = "assistant", model = model, system = "be brief",
    tools = { echo_tool() }, gate = allow_all(), policy_revision = "v1",
    compaction = opts.compaction }
  local store = opts.store or rig.store.memory()
  return rig.define{ loops = { loop }, primers = { "assistant" }, store = store }, model, store
end

local function call(text) return { tool_calls = { { name = "echo", input = { text = text } } } } end

local function turn(s, input)
  local sub = s:subscribe{ ephemeral = false }
  s:submit(input)
  local evs = {}
  for ev in sub:events(10) do
    evs[#evs + 1] = ev
    if ev.ends_turn then break end
  end
  sub:close()
  expect(s:wait_idle(5)).to_be(true)
  return evs[#evs], evs
end

local function journaled(s, etype)
  local out = {}
  for rec in s:journal() do
    if rec.type == etype then out[#out + 1] = rec end
  end
  return out
end

local function roles(h)
  local t = {}
  for i, m in ipairs(h) do t[i] = m.role end
  return table.concat(t, " ")
end

local function is_summary(m)
  return m.role == "user" and m.content[1].text:find("[summary of the earlier conversation]", 1,
    true) == 1
end

describe("compaction", function()
  it("compacts an idle loop by hand, then restores the same history", function()
    local store = rig.store.memory()
    local r, model = define({
      call("one"), { text = "did one" },
      call("two"), { text = "did two" },
      { text = "SUMMARY: the user asked for one and two; both echoed." },
      function(req)
        -- the next turn starts from the summary
        expect(is_summary(req.messages[1])).to_be(true)
        expect(req.messages[1].content[1].text).to_match("SUMMARY: the user asked")
        return { text = "three" }
      end,
    }, { store = store })
    local s = assert(r:session())
    turn(s, "do one")
    turn(s, "do two")
    local h0 = s:history()
    expect(roles(h0)).to_be("user assistant tool assistant user assistant tool assistant")
    local res, msg, code = s:compact()
    expect(msg).to_be_nil()
    expect(res.replaced).to_be(4)
    expect(res.retained).to_be(4)
    -- the summarizer got the older part as a transcript, with no tools
    local sreq = model:calls()[5]
    expect(sreq.tools).to_be_nil()
    expect(sreq.system).to_match("summarize")
    expect(#sreq.messages).to_be(1)
    local text = sreq.messages[1].content[1].text
    expect(text).to_match("%[user%]\ndo one")
    expect(text).to_match("%[assistant calls tool echo")
    expect(text).to_match("%[tool result for call_1_1%]\necho: one")
    expect(text:find("do two", 1, true)).to_be_nil()
    local h = s:history()
    expect(roles(h)).to_be("user user assistant tool assistant")
    expect(is_summary(h[1])).to_be(true)
    expect(json.encode(h[2])).to_be(json.encode(h0[5])) -- s:history() hands out copies
    local ev = journaled(s, "CompactionCommitted")
    expect(#ev).to_be(1)
    expect(ev[1].trigger).to_be("manual")
    expect(ev[1].replaced).to_be(4)
    expect(ev[1].retained).to_be(4)
    expect(ev[1].summary.content[1].text).to_match("SUMMARY")
    expect(ev[1].usage.output_tokens > 0).to_be(true)
    local before = json.encode(s:history())
    local id = s.id
    s:shutdown()
    local r2, model2 = define({ { text = "after" } }, { store = store })
    local s2 = assert(r2:restore(id))
    expect(json.encode(s2:history())).to_be(before)
    -- and the model sees the compacted history
    turn(s2, "and now")
    local m = model2:calls()[1].messages
    expect(#m).to_be(6)
    expect(is_summary(m[1])).to_be(true)
    s2:shutdown()
  end)

  it("keeps a tool call with its results when the cut would fall between them", function()
    local r, model = define({
      call("a"), { text = "done a" },
      call("b"), call("c"), { text = "done c" },
      { text = "summary one" },
      { text = "done third" },
      { text = "summary two" },
    }, { compaction = { at = false, keep = 2 } })
    local s = assert(r:session())
    turn(s, "first")
    turn(s, "second")
    -- keep = 2 would start the tail at a tool message: it starts at its assistant message
    local h0 = s:history()
    expect(roles(h0)).to_be("user assistant tool assistant user assistant tool assistant tool "
      .. "assistant")
    local res = assert(s:compact())
    expect(res.retained).to_be(3)
    local h = s:history()
    expect(roles(h)).to_be("user assistant tool assistant")
    expect(h[2].content[1].type).to_be("tool_use")
    expect(h[3].content[1].tool_use_id).to_be(h[2].content[1].id)
    -- only a summary is older than the tail: nothing to do
    local none, msg, code = s:compact()
    expect(code).to_be("nothing_to_compact")
    -- a second compaction summarizes the first summary too
    turn(s, "third")
    res = assert(s:compact())
    expect(res.replaced).to_be(4)
    local text = model:calls()[8].messages[1].content[1].text
    expect(text).to_match("summary one")
    expect(roles(s:history())).to_be("user user assistant")
    none, msg, code = s:compact()
    expect(none).to_be_nil()
    expect(code).to_be("nothing_to_compact")
    expect(msg).to_match("nothing to compact")
    s:shutdown()
  end)

  it("compacts automatically between steps once the context reaches its share", function()
    local store = rig.store.memory()
    local summarizer = rig.model.script{ { text = "SUMMARY of the first turn" } }
    local steps = {
      { text = "small", usage = { input_tokens = 100, output_tokens = 5 } },
      { tool_calls = { { name = "echo", input = { text = "big" } } },
        usage = { input_tokens = 700, output_tokens = 20, cache_read_tokens = 100 } },
      function(req)
        expect(is_summary(req.messages[1])).to_be(true)
        return { text = "after compaction", usage = { input_tokens = 50, output_tokens = 5 } }
      end,
    }
    local model = rig.model.script{ steps = steps, context_window = 1000 }
    local loop = rig.loop{ name = "assistant", model = model, tools = { echo_tool() },
      gate = allow_all(), policy_revision = "v1",
      compaction = { at = 0.8, model = summarizer, keep = 2 } }
    local r = rig.define{ loops = { loop }, primers = { "assistant" }, store = store }
    local s = assert(r:session())
    local ev = turn(s, "first")
    expect(ev.type).to_be("TurnDone")
    expect(#journaled(s, "CompactionCommitted")).to_be(0)
    local _, evs = turn(s, "second")
    expect(evs[#evs].type).to_be("TurnDone")
    local seen = {}
    for _, e in ipairs(evs) do seen[#seen + 1] = e.type end
    expect(table.concat(seen, " ")).to_match("StepDone CompactionCommitted StepDone TurnDone")
    local c = journaled(s, "CompactionCommitted")
    expect(#c).to_be(1)
    expect(c[1].trigger).to_be("automatic")
    expect(c[1].turn_id).to_be(evs[#evs].turn_id)
    expect(c[1].context_tokens).to_be(820)
    expect(summarizer:remaining()).to_be(0)
    -- the summary's usage counts in the session's
    expect(s:usage().output_tokens >= 5 + 20 + 5).to_be(true)
    local h = s:history()
    expect(roles(h)).to_be("user assistant tool assistant")
    local before = json.encode(h)
    local id = s.id
    s:shutdown()
    local model2 = rig.model.script{ steps = {}, context_window = 1000 }
    local loop2 = rig.loop{ name = "assistant", model = model2, tools = { echo_tool() },
      gate = allow_all(), policy_revision = "v1",
      compaction = { at = 0.8, model = summarizer, keep = 2 } }
    local r2 = rig.define{ loops = { loop2 }, primers = { "assistant" }, store = store }
    local s2 = assert(r2:restore(id))
    expect(json.encode(s2:history())).to_be(before)
    s2:shutdown()
  end)

  it("falls back to dropping the oldest messages when an automatic summary fails", function()
    -- the summarizer always fails: every turn still runs, restore rebuilds the same history
    local store = rig.store.memory()
    local summarizer = rig.model.script{ steps = (function()
      local t = {}
      for i = 1, 10 do t[i] = { error = { message = "down", code = "overloaded" } } end
      return t
    end)() }
    -- the tool runs until the case lets it go: the turn is busy in its step meanwhile
    local running, release, go = false, false, rig.cond()
    local big = { input_tokens = 990, output_tokens = 5 }
    local model = rig.model.script{ steps = {
      { tool_calls = { { name = "echo", input = { text = "x" } } }, usage = big },
      { text = "went on", usage = big },
      { text = "second turn", usage = big },
    }, context_window = 1000 }
    local slow = rig.tool{ name = "echo", description = "slow echo",
      schema = { type = "object", properties = { text = { type = "string" } } },
      prepare = function() return { summary = "echo", requirements = {} } end,
      run = function()
        running = true
        go:signal()
        while not release do go:wait() end
        return "ok"
      end }
    local function rig_of(m)
      local loop = rig.loop{ name = "assistant", model = m, tools = { slow },
        gate = allow_all(), policy_revision = "v1",
        compaction = { at = 0.9, model = summarizer, keep = 1 } }
      return rig.define{ loops = { loop }, primers = { "assistant" }, store = store }
    end
    local s = assert(rig_of(model):session())
    local sub = s:subscribe{ ephemeral = false }
    s:submit("go")
    while not running do go:wait() end
    local none, _, code = s:compact()
    expect(none).to_be_nil()
    expect(code).to_be("busy")
    release = true
    go:signal()
    local seen, last = {}, nil
    for ev in sub:events(10) do
      seen[#seen + 1] = ev.type
      if ev.ends_turn then last = ev break end
    end
    expect(last.type).to_be("TurnDone")
    expect(table.concat(seen, " ")).to_match("StepDone CompactionCommitted StepDone TurnDone")
    local c = journaled(s, "CompactionCommitted")
    expect(#c).to_be(1)
    expect(c[1].fallback).to_be("truncated")
    expect(c[1].error.code).to_be("compaction_failed")
    expect(c[1].error.cause_code).to_be("overloaded")
    expect(c[1].error.message).to_match("down")
    expect(c[1].replaced).to_be(1)
    local h = s:history()
    expect(roles(h)).to_be("user assistant tool assistant")
    expect(h[1].content[1].text).to_be("[earlier conversation omitted]\n\n1 earlier message of "
      .. "this conversation was dropped because the summary failed; its content is no longer "
      .. "available.")
    -- the next turn too (the summary still fails; nothing is left to drop but the marker)
    expect(s:wait_idle(5)).to_be(true)
    local ev2 = turn(s, "again")
    expect(ev2.type).to_be("TurnDone")
    expect(model:remaining()).to_be(0)
    local before = json.encode(s:history())
    local id = s.id
    s:shutdown()
    local s2 = assert(rig_of(rig.model.script{ steps = {}, context_window = 1000 }):restore(id))
    expect(json.encode(s2:history())).to_be(before)
    s2:shutdown()
  end)

  it("refuses a failed manual summary with a way out, and truncates when asked", function()
    local summarizer = rig.model.script{ { text = "   " }, { error = "down" } }
    local model = rig.model.script{ steps = { { text = "a" }, { text = "b" } } }
    local loop = rig.loop{ name = "assistant", model = model, tools = { echo_tool() },
      gate = allow_all(), policy_revision = "v1",
      compaction = { at = false, model = summarizer, keep = 1 } }
    local r = rig.define{ loops = { loop }, primers = { "assistant" }, store = rig.store.memory() }
    local s = assert(r:session())
    turn(s, "one")
    turn(s, "two")
    local none, msg, code = s:compact()
    expect(none).to_be_nil()
    expect(code).to_be("empty_summary")
    expect(msg).to_match('fallback = "truncate"')
    expect(#journaled(s, "CompactionCommitted")).to_be(0)
    local res = assert(s:compact(nil, { fallback = "truncate" }))
    expect(res.fallback).to_be("truncated")
    expect(res.replaced).to_be(3)
    expect(res.error.cause_code).to_be("server")
    expect(roles(s:history())).to_be("user assistant")
    expect(function() s:compact(nil, { fallback = "yes" }) end).to_fail("option 'fallback'")
    expect(function() s:compact(nil, { truncate = true }) end).to_fail("unknown option 'truncate'")
    s:shutdown()
  end)

  it("queues input submitted during a manual compaction and runs it after", function()
    -- the summary waits until "three" is submitted, which waits until the summary started
    local compacting, submitted, step = false, false, rig.cond()
    local r, model = define({
      { text = "a" }, { text = "b" },
      function()
        compacting = true
        step:signal()
        while not submitted do step:wait() end
        return { text = "the summary" }
      end,
      function(req)
        expect(is_summary(req.messages[1])).to_be(true)
        return { text = "c" }
      end,
    }, { compaction = { at = false, keep = 1 } })
    local s = assert(r:session())
    turn(s, "one")
    turn(s, "two")
    local sub = s:subscribe{ ephemeral = false }
    local t = rig.spawn(function()
      while not compacting do step:wait() end
      local cid = s:submit("three")
      submitted = true
      step:signal()
      return cid
    end)
    local res = assert(s:compact())
    expect(res.replaced).to_be(3)
    expect(t:wait()).to_be_truthy()
    local seen = {}
    for ev in sub:events(10) do
      seen[#seen + 1] = ev.type
      if ev.ends_turn then break end
    end
    expect(table.concat(seen, " ")).to_match("CompactionCommitted.*TurnStarted.*TurnDone")
    expect(s:wait_idle(5)).to_be(true)
    expect(roles(s:history())).to_be("user assistant user assistant")
    s:shutdown()
  end)

  it("checks the compaction field and puts it in the revision", function()
    local m = rig.model.script{ steps = {}, context_window = 1000 }
    expect(function()
      rig.loop{ name = "a", model = rig.model.script{ steps = {} }, compaction = { at = 0.5 } }
    end).to_fail("context_window")
    expect(function() rig.loop{ name = "a", model = m, compaction = { at = 1.5 } } end)
      .to_fail("compaction.at")
    expect(function() rig.loop{ name = "a", model = m, compaction = { keep = 0 } } end)
      .to_fail("compaction.keep")
    expect(function() rig.loop{ name = "a", model = m, compaction = { every = 1 } } end)
      .to_fail("unknown field 'compaction.every'")
    expect(function() rig.loop{ name = "a", model = m, compaction = { model = "x" } } end)
      .to_fail("compaction.model")
    expect(function() rig.model.script{ steps = {}, context_window = 0 } end).to_fail("context_window")
    local a = rig.loop{ name = "a", model = m }
    local b = rig.loop{ name = "a", model = m, compaction = { at = 0.8 } }
    local c = rig.loop{ name = "a", model = m, compaction = { at = 0.7 } }
    expect(a:revision() ~= b:revision()).to_be(true)
    expect(b:revision() ~= c:revision()).to_be(true)
    expect(b.compaction.keep).to_be(4)
    expect(b.compaction.at).to_be(0.8)
  end)
end)
