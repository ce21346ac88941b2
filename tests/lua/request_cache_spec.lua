-- The request cache of a session's loop (issue 22): the history's messages go
-- into each request as they are when already in normal form (no second copy),
-- a list grown at its end is checked and its media prepared only from where
-- the last request ended, and none of it shows: a request with a cache is the
-- request without one, errors keep their paths, the history s:history() hands
-- out cannot change what the model is sent, and a list cut back (an input
-- guardrail's trip) is checked anew.

local json = rig.json
local core = require "rig.core"
local request = require "rig.model.request"
local mock = dofile((os.getenv("LUARIG_ROOT") or ".") .. "/tests/lua/mock_provider.lua")

local KEY_ENV = "LUARIG_TEST_API_KEY"
local PNG = "\137PNG\r\n\26\n" .. "\0\0\0\rIHDR-a-small-test-image"
local HEX = string.rep("ab", 32)
local MODEL = { tools = true, name = "test-model" }

local function idle(s, t)
  local ok, msg, code = s:wait_idle(t or 10)
  if not ok and code ~= "turn_failed" and code ~= "interrupted" then error(msg, 2) end
  return true
end

local function new_cache() return { messages = setmetatable({}, { __mode = "k" }) } end

-- Messages in every form the runner, a restore and a caller give: normal ones
-- (the runner's own) and ones normalize must copy (string content, a tool
-- call that failed to parse, a result's details, a missing is_error, cache = false).
local function conversation()
  return {
    { role = "user", content = json.array { { type = "text", text = "look at this", cache = true },
      { type = "image", media_type = "image/png", blob = HEX, size = 10, name = "a.png" } } },
    { role = "assistant", content = { { type = "thinking", thinking = "hm", signature = "sig" },
      { type = "text", text = "calling" },
      { type = "tool_use", id = "c1", name = "lookup", input = { q = "x", n = { 1, 2 } },
        input_json = '{"q":"x","n":[1,2]}' },
      { type = "tool_use", id = "c2", name = "lookup", input = {}, input_json = "[1]",
        error = "the tool arguments are not a JSON object" } } },
    { role = "tool", content = json.array {
      { type = "tool_result", tool_use_id = "c1", content = "found", is_error = false,
        details = { rows = 3 } },
      { type = "tool_result", tool_use_id = "c2", content = json.array {
        { type = "text", text = "bad" },
        { type = "image", media_type = "image/png", data = PNG } }, is_error = true } } },
    { role = "assistant", content = { { type = "text", text = "done" } } },
    { role = "user", content = "plain string" },
    { role = "assistant", content = { { type = "tool_use", id = "c3", name = "lookup",
      input = json.array {} } } },
    { role = "tool", content = { { type = "tool_result", tool_use_id = "c3", content = "ok" } } },
    { role = "user", content = { { type = "text", text = "thanks", cache = false } } },
  }
end

describe("the request cache", function()
  it("gives the same request as no cache, growing, and copies only what is not normal", function()
    local all = conversation()
    local cache = new_cache()
    local list = {}
    for i, m in ipairs(all) do
      list[i] = m
      local req = { system = "s", messages = list }
      local with = request.normalize(req, MODEL, nil, cache)
      local without = request.normalize(req, MODEL)
      expect(json.encode(with.messages)).to_be(json.encode(without.messages))
      expect(cache.reused).to_be(i - 1)
    end
    local out = request.normalize({ messages = list }, MODEL, nil, cache)
    -- normal messages go in as they are; the others are copies
    local kept = {}
    for i = 1, #list do kept[i] = out.messages[i] == list[i] and "same" or "copy" end
    expect(table.concat(kept, " ")).to_be("same copy copy same copy same copy copy")
    -- the history's tables are not changed by being sent
    expect(list[3].content[1].details.rows).to_be(3)
    expect(list[5].content).to_be("plain string")
  end)

  it("sends the same bytes to every provider with and without a cache", function()
    for _, p in ipairs { "anthropic", "openai", "openai-responses", "gemini" } do
      local m = rig.model{ provider = p, name = "test-model", base_url = "http://127.0.0.1:9/v1",
                           api_key_env = KEY_ENV }
      local list = conversation()
      list[1].content[2] = { type = "image", media_type = "image/png", data = PNG }
      local req = { system = "s", messages = list, tools = { { name = "lookup",
        schema = { type = "object", properties = { q = { type = "string" } } } } } }
      local cache = new_cache()
      -- normalize with the cache twice (the second time all of it comes over)
      request.normalize(req, MODEL, nil, cache)
      local with = request.normalize(req, MODEL, nil, cache)
      expect(cache.reused).to_be(#list)
      local codec = require(({ anthropic = "rig.model.anthropic", openai = "rig.model.openai",
        ["openai-responses"] = "rig.model.responses", gemini = "rig.model.gemini" })[p])
      assert(require("rig.model.media").prepare(with))
      local body = json.encode(assert(codec.encode(m._m, with)))
      expect(body).to_be(m:encode(req))
    end
  end)

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

  it("checks a list cut back and grown again anew", function()
    local cache = new_cache()
    local list = { { role = "user", content = { { type = "text", text = "bad" } } } }
    request.normalize({ messages = list }, MODEL, nil, cache)
    list[1] = { role = "user", content = { { type = "text", text = "good" } } }
    local out = request.normalize({ messages = list }, MODEL, nil, cache)
    expect(out.messages[1].content[1].text).to_be("good")
    expect(cache.reused).to_be(0)
  end)

  it("takes a cache table without its messages map, call after call", function()
    local m = rig.model.script{ { text = "a" }, { text = "b" } }
    local cache = {}
    local list = { { role = "user", content = "hi" } }
    for _, want in ipairs { "a", "b" } do
      local st = assert(m:stream({ messages = list }, { cache = cache }))
      expect(assert(st:result()).message.content[1].text).to_be(want)
      st:close()
    end
  end)

  it("prepares a blob a failed call could not read when the next call can", function()
    local srv = mock.start()
    srv:push{ body = mock.sse({
      { id = "c", object = "chat.completion.chunk", model = "g", choices = json.array {
        { index = 0, delta = { content = "seen" }, finish_reason = "stop" } } }, "[DONE]" }) }
    local m = rig.model{ provider = "openai", name = "test-model", base_url = srv.url .. "/v1",
                         api_key_env = KEY_ENV, retry = { attempts = 1 } }
    local hex = core.sha256_hex(PNG)
    local readable = false
    local list = { { role = "user", content = { { type = "text", text = "one" } } },
                   { role = "assistant", content = { { type = "text", text = "ok" } } },
                   { role = "user", content = { { type = "text", text = "see" },
                     { type = "image", media_type = "image/png", blob = hex } } } }
    local req = { messages = list, blobs = function(h)
      if readable and h == hex then return PNG end
      return nil, "not yet"
    end }
    local cache = new_cache()
    local st, msg, code = m:stream(req, { cache = cache })
    expect(st).to_be_nil()
    expect(code).to_be("invalid_request")
    expect(msg).to_match("cannot be read: not yet")
    readable = true
    st = assert(m:stream(req, { cache = cache }))
    assert(st:result())
    st:close()
    srv:close()
    expect(srv.requests[1].body:find(core.base64_encode(PNG), 1, true) ~= nil).to_be(true)
  end)
end)

local function text_reply(text)
  local evs = {
    { type = "message_start", message = { id = "m1", type = "message", role = "assistant", content = {},
      model = "test-model", usage = { input_tokens = 10, output_tokens = 1 } } },
    { type = "content_block_start", index = 0, content_block = { type = "text", text = "" } },
    { type = "content_block_delta", index = 0, delta = { type = "text_delta", text = text } },
    { type = "content_block_stop", index = 0 },
    { type = "message_delta", delta = { stop_reason = "end_turn" }, usage = { output_tokens = 3 } },
    { type = "message_stop" },
  }
  local out = {}
  for _, e in ipairs(evs) do
    out[#out + 1] = "event: " .. e.type .. "\ndata: " .. json.encode(e) .. "\n\n"
  end
  return table.concat(out)
end

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

  it("after an input guardrail's trip carry the next input, not the tripped one", function()
    local model = rig.model.script{ { text = "never shown" }, { text = "fine" } }
    local r = rig.define{ loops = { rig.loop{ name = "assistant", model = model,
      guardrails = { input = { function(input) return input.text == "bad" and "no" or nil end } } } },
      primers = { "assistant" }, store = rig.store.memory() }
    local s = assert(r:session())
    s:submit("bad")
    idle(s)
    expect(#s:history()).to_be(0)
    s:submit("good")
    idle(s)
    local msgs = model:calls()[2].messages
    expect(#msgs).to_be(1)
    expect(msgs[1].content[1].text).to_be("good")
    s:shutdown()
  end)

  it("prepare media in a late message", function()
    local srv = mock.start()
    for _, t in ipairs { "a", "b", "c" } do srv:push{ body = text_reply(t) } end
    local m = rig.model{ provider = "anthropic", name = "test-model", base_url = srv.url .. "/v1",
                         api_key_env = KEY_ENV, retry = { attempts = 1 } }
    local r = rig.define{ loops = { rig.loop{ name = "assistant", model = m } },
      primers = { "assistant" }, store = rig.store.memory() }
    local s = assert(r:session())
    s:submit("one")
    idle(s)
    s:submit("two")
    idle(s)
    s:submit{ { type = "text", text = "three" }, { type = "image", data = PNG } }
    idle(s)
    srv:close()
    local b64 = core.base64_encode(PNG)
    expect(srv.requests[2].body:find(b64, 1, true)).to_be_nil()
    local b3 = json.decode(srv.requests[3].body)
    expect(#b3.messages).to_be(5)
    expect(b3.messages[5].content[2].source.data).to_be(b64)
    s:shutdown()
  end)
end)
