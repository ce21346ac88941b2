-- No stuck states (issue 17 §3), the parts that are not compaction or the
-- workspace (compaction_spec, workspace_spec): a faulted session says why
-- once, and the scripted model keeps a bounded number of requests.

local core = require "rig.core" -- the stdlib's private binding: what the public API does not show

local function define(steps, store)
  local model = rig.model.script(steps)
  local echo = rig.tool{ name = "echo", description = "echoes",
    schema = { type = "object", properties = {} },
    prepare = function() return { summary = "echo", requirements = {} } end,
    run = function() return "echo" end }
  local gate = rig.gate{ access = {}, approver = "headless" }
  local loop = rig.loop{ name = "assistant", model = model, tools = { echo }, gate = gate,
    policy_revision = "v1" }
  return rig.define{ loops = { loop }, primers = { "assistant" }, store = store }, model
end

local function count(s, pat)
  local _, n = s:gsub(pat, "")
  return n
end

describe("a faulted session", function()
  it("says 'session ID is faulted:' once in every refusal", function()
    local store = rig.store.memory()
    local r = define({ { text = "", tool_calls = { { name = "echo", input = {} } } },
                       { text = "never" } }, store)
    local s = assert(r:session())
    core.store_inject_failure(store, "append", 3)
    s:submit("go")
    local head = "session " .. s.id:gsub("%-", "%%-") .. " is faulted: "
    local msgs = {}
    local ok, msg, code = s:wait_idle(5)
    expect(ok).to_be_nil(); expect(code).to_be("faulted")
    msgs[#msgs + 1] = msg
    local _, m2, c2 = s:submit("more")
    expect(c2).to_be("faulted")
    msgs[#msgs + 1] = m2
    local _, m3, c3 = s:compact()
    expect(c3).to_be("faulted")
    msgs[#msgs + 1] = m3
    msgs[#msgs + 1] = s:faulted()
    for _, m in ipairs(msgs) do
      expect(m).to_match("^" .. head .. "storage: append to 'sessions/")
      expect(m).to_match("injected failure")
      expect(count(m, "is faulted")).to_be(1)
    end
    core.store_inject_failure(store, "append", -1)
    s:shutdown()
  end)
end)

describe("rig.model.script", function()
  local function user(text) return { messages = { { role = "user", content = text } } } end

  it("keeps the last keep_calls requests: calls()[n], #calls(), pairs", function()
    local steps = {}
    for i = 1, 10 do steps[i] = { text = "r" .. i } end
    local m = rig.model.script{ steps = steps, keep_calls = 3 }
    for i = 1, 10 do assert(m:invoke(user("q" .. i))) end
    local calls = m:calls()
    expect(#calls).to_be(10)
    expect(calls[7]).to_be_nil()
    expect(calls[8].messages[1].content[1].text).to_be("q8")
    expect(calls[10].messages[1].content[1].text).to_be("q10")
    local seen = {}
    for n, req in pairs(calls) do seen[#seen + 1] = n .. "=" .. req.messages[1].content[1].text end
    expect(table.concat(seen, " ")).to_be("8=q8 9=q9 10=q10")
    expect(function() calls[11] = {} end).to_fail("read%-only")
    expect(function() rig.model.script{ steps = {}, keep_calls = -1 } end).to_fail("keep_calls")
    -- the default keeps 64
    local d = rig.model.script{ function() return { text = "x" } end }
    expect(#d:calls()).to_be(0)
  end)

  it("holds a bounded number of requests over thousands of calls", function()
    local N = 2000
    local steps = {}
    local function step() return { text = "ok" } end
    for i = 1, N do steps[i] = step end
    local m = rig.model.script(steps)
    local first = setmetatable({}, { __mode = "v" })
    local big = string.rep("x", 8 << 10)
    for i = 1, N do
      assert(m:invoke(user(big .. i)))
      if i == 1 then first[1] = m:calls()[1] end
    end
    collectgarbage(); collectgarbage()
    expect(first[1]).to_be_nil()            -- the first request is gone
    expect(#m:calls()).to_be(N)
    expect(m:calls()[N].messages[1].content[1].text).to_be(big .. N)
    -- 2000 requests of 8 KiB would be 16 MiB; 64 of them are half a MiB
    expect(collectgarbage("count")).at_most(8 * 1024)
  end)
end)
