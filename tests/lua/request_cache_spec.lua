-- rig.model.request's errors keep their paths (the path of a copied value is
-- built only when the copy fails); the history s:history() hands out cannot
-- change what the model is sent.

local json = rig.json
local request = require "rig.model.request"

local MODEL = { tools = true, name = "test-model" }

local function idle(s, t)
  local ok, msg, code = s:wait_idle(t or 10)
  if not ok and code ~= "turn_failed" and code ~= "interrupted" then error(msg, 2) end
  return true
end

local function new_cache() return { messages = setmetatable({}, { __mode = "k" }) } end

describe("the request cache", function()
  it("keeps the errors and their paths", function()
    local function err(req, cache)
      local ok, msg = pcall(request.normalize, req, MODEL, nil, cache)
      expect(ok).to_be(false)
      return msg
    end
    local bad = { { role = "user", content = "hi" },
      { role = "assistant", content = { { type = "tool_use", id = "c", name = "t",
        input = { a = { b = { print } } } } } } }
    local want = "rig.model: request.messages[2].content[1].input.a.b.1: cannot hold a function"
    expect(err({ messages = bad })).to_be(want)
    local cache = new_cache()
    request.normalize({ messages = { bad[1] } }, MODEL, nil, cache)
    local list = { bad[1], bad[2] }
    expect(err({ messages = list }, cache)).to_be(want)
    local deep = {}
    local t = deep
    for _ = 1, 70 do t.x = {} t = t.x end
    expect(err({ messages = { { role = "assistant", content = { { type = "tool_use", id = "c",
      name = "t", input = deep } } } } }, new_cache())).to_match(
      "^rig.model: request.messages%[1%].content%[1%].input" .. string.rep("%.x", 65)
      .. ": is nested too deeply$")
    expect(err({ messages = { { role = "user", content = { { type = "text", text = "a",
      cache = "yes" } } } } }, new_cache())).to_be(
      "rig.model: request.messages[1].content[1].cache: must be a boolean")
    expect(err({ messages = { { role = "tool", content = { { type = "tool_result",
      tool_use_id = "c", content = { { type = "text", text = 1 } } } } } } }, new_cache())).to_be(
      "rig.model: request.messages[1].content[1].content[1].text: must be a string")
  end)

end)

describe("a session's requests", function()
  it("are not changed by what a caller does to s:history()", function()
    local model = rig.model.script{ { text = "one" }, { text = "two" } }
    local r = rig.define{ loops = { rig.loop{ name = "assistant", model = model } },
      primers = { "assistant" }, store = rig.store.memory() }
    local s = assert(r:session())
    s:submit("first")
    idle(s)
    local h = s:history()
    h[1].content[1].text = "tampered"
    h[2].content[1] = { type = "text", text = "rewritten" }
    h[#h + 1] = { role = "user", content = { { type = "text", text = "injected" } } }
    s:submit("second")
    idle(s)
    local seen = json.encode(model:calls()[2].messages)
    expect(seen:find("tampered", 1, true)).to_be_nil()
    expect(seen:find("rewritten", 1, true)).to_be_nil()
    expect(seen:find("injected", 1, true)).to_be_nil()
    expect(#model:calls()[2].messages).to_be(3)
    local h2 = s:history()
    expect(#h2).to_be(4)
    expect(h2[1].content[1].text).to_be("first")
    expect(h2[2].content[1].text).to_be("one")
    -- the copies keep the history's shape, arrays marked as arrays
    expect(json.encode(h2)).to_be(json.encode(s:history()))
    expect(json.encode(h2[1].content)).to_match("^%[")
    s:shutdown()
  end)

end)
