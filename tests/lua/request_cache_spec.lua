-- rig.model.request's errors keep their paths (the path of a copied value is
-- built only when the copy fails).

local json = rig.json
local request = require "rig.model.request"

local MODEL = { tools = true, name = "test-model" }

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
