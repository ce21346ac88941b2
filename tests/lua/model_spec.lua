-- rig.model: validation, the scripted model, and every provider through a local
-- mock provider (recorded streams byte for byte, failures, retries, cancellation,
-- record and replay).
local json = require "rig.json"
local mock = dofile((os.getenv("LUARIG_ROOT") or ".") .. "/tests/lua/mock_provider.lua")

local KEY_ENV = "LUARIG_TEST_API_KEY"
local KEY = os.getenv(KEY_ENV)
local FAST = { attempts = 5, delay = 0.01, max_delay = 0.05 }

local function user(text) return { messages = { { role = "user", content = text } } } end

local function model_for(p, provider, extra)
  local def = { provider = provider, name = "test-model", base_url = p.url .. "/v1",
                api_key_env = KEY_ENV, retry = FAST }
  for k, v in pairs(extra or {}) do def[k] = v end
  return rig.model(def)
end

local function raises(fn, pattern)
  local ok, err = pcall(fn)
  expect(ok).to_be(false)
  expect(tostring(err)).to_match(pattern)
end

describe("rig.model{}", function()
  it("validates every field and names the offending one", function()
    raises(function() rig.model{ provider = "anthropic", name = "x", tiemout = 3 } end,
      "unknown field 'tiemout'")
    raises(function() rig.model{ provider = "bedrock", name = "x" } end, "field 'provider'")
    raises(function() rig.model{ provider = "anthropic" } end, "field 'name'")
    raises(function() rig.model{ provider = "openai", name = "x", base_url = "http://example.com/v1" } end,
      "https://")
    raises(function() rig.model{ provider = "openai", name = "x", base_url = "https://u:p@h.example/v1" } end,
      "credentials")
    raises(function() rig.model{ provider = "openai-compatible", name = "x" } end, "'base_url' is required")
    raises(function() rig.model{ provider = "anthropic", name = "x", temperature = 1.5 } end, "temperature")
    raises(function() rig.model{ provider = "openai", name = "x", top_p = 2 } end, "top_p")
    raises(function() rig.model{ provider = "openai", name = "x", max_tokens = 0 } end, "max_tokens")
    raises(function() rig.model{ provider = "openai", name = "x", max_tokens = 1.5 } end, "integer")
    raises(function() rig.model{ provider = "openai", name = "x", effort = "huge" } end, "effort")
    raises(function() rig.model{ provider = "openai", name = "x", stop = { 1 } } end, "stop%[1%]")
    raises(function() rig.model{ provider = "openai", name = "x", api_key_env = "A B" } end, "api_key_env")
    raises(function() rig.model{ provider = "openai", name = "x", headers = { Authorization = "x" } } end,
      "may not set 'Authorization'")
    raises(function() rig.model{ provider = "openai", name = "x", retry = { tries = 2 } } end,
      "unknown field 'retry.tries'")
    raises(function() rig.model{ provider = "openai", name = "x", prices = { input = -1 } } end,
      "prices.input")
  end)

  it("accepts http:// for loopback only, and freezes the model", function()
    local m = rig.model{ provider = "openai-compatible", name = "llama", base_url = "http://127.0.0.1:8080/v1/" }
    expect(m.base_url).to_be("http://127.0.0.1:8080/v1")
    expect(m.provider).to_be("openai-compatible")
    expect(m.max_tokens).to_be(4096)
    expect(m.tools).to_be(true)
    expect(m.thinking).to_be(false)
    raises(function() m.name = "other" end, "frozen")
    expect(tostring(m)).to_be("rig.model(openai-compatible/llama)")
    rig.model{ provider = "openai-compatible", name = "x", base_url = "http://localhost:1/v1" }
    rig.model{ provider = "openai-compatible", name = "x", base_url = "http://[::1]:1/v1" }
    local a = rig.model{ provider = "anthropic", name = "claude" }
    expect(a.base_url).to_be("https://api.anthropic.com/v1")
    expect(a.api_key_env).to_be("ANTHROPIC_API_KEY")
  end)

  it("checks requests and names the field", function()
    local m = rig.model.script{ { text = "x" } }
    raises(function() m:invoke{ messages = {} } end, "request.messages")
    raises(function() m:invoke{ messages = { { role = "robot", content = "x" } } } end,
      "request.messages%[1%].role")
    raises(function() m:invoke{ messages = { { role = "user", content = { { type = "video" } } } } } end,
      "request.messages%[1%].content%[1%].type: unknown block type 'video'")
    raises(function() m:invoke{ messages = { { role = "user", content = { { type = "image" } } } } } end,
      "request.messages%[1%].content%[1%].media_type: an image block needs media_type image/png")
    raises(function() m:invoke{ messages = { { role = "user", content = { { type = "image",
      media_type = "image/png", data = "x", url = "https://a/b.png" } } } } } end,
      "content%[1%]: needs exactly one of data, blob and url")
    raises(function() m:invoke{ messages = { { role = "assistant", content = { { type = "image",
      media_type = "image/png", data = "x" } } } } } end,
      "an assistant message cannot hold a 'image' block")
    raises(function() m:invoke{ messages = { { role = "user", content = "x" } }, tool_choice = "required" } end,
      "'required' needs at least one tool")
    raises(function() m:invoke{ messages = { { role = "user", content = "x" } },
      tools = { { name = "a b", schema = { type = "object" } } } } end, "request.tools%[1%].name")
    raises(function() m:invoke{ messages = { { role = "user", content = "x" } },
      tools = { { name = "a" } }, tool_choice = { name = "b" } } end, "names no declared tool")
    raises(function() m:invoke{ messages = { { role = "user", content = "x" } }, temperature = 1 } end,
      "unknown field 'temperature'")
    raises(function() m:invoke{ messages = { { role = "tool", content = "x" } } } end, "tool_result")
    raises(function() m:invoke{ messages = { { role = "user", content = "x" } },
      output_schema = { name = "out", schema = { type = "array" } } } end, "output_schema.schema.type")
  end)

  it("reads the key from the environment at call time and never echoes it", function()
    local m = rig.model{ provider = "anthropic", name = "claude", api_key_env = "LUARIG_TEST_UNSET_KEY",
                         base_url = "http://127.0.0.1:9/v1" }
    local r, msg, code = m:invoke(user("hi"))
    expect(r).to_be_nil()
    expect(code).to_be("auth")
    expect(msg).to_match("LUARIG_TEST_UNSET_KEY is not set")
  end)
end)

describe("rig.model.script", function()
  it("streams text, thinking and tool calls in the requested pieces", function()
    local m = rig.model.script{ steps = {
      { thinking = "let me see", signature = "sig-1", text = "héllo wörld", chunk = 3 },
      { tool_calls = { { name = "lookup", input = { q = "x" } }, { name = "now", input_json = "" } } },
    } }
    local st = assert(m:stream(user("hi")))
    local texts = {}
    for c in st:chunks() do
      if c.type == "text" then texts[#texts + 1] = c.text end
    end
    expect(texts).to_equal { "hé", "llo", " wö", "rld" }  -- never a split UTF-8 sequence
    local r = assert(st:result())
    expect(r.message.content[1]).to_equal { type = "thinking", thinking = "let me see", signature = "sig-1" }
    expect(r.message.content[2].text).to_be("héllo wörld")
    expect(r.finish_reason).to_be("stop")
    expect(r.attempts).to_be(1)
    expect(r.usage.input_tokens > 0).to_be(true)

    r = assert(m:invoke(user("again")))
    expect(r.finish_reason).to_be("tool_use")
    expect(r.message.content[1].name).to_be("lookup")
    expect(r.message.content[1].input).to_equal { q = "x" }
    expect(r.message.content[1].id).to_be("call_2_1")
    expect(r.message.content[2].input).to_equal {}
    expect(#m:calls()).to_be(2)
    expect(m:calls()[2].messages[1].content[1].text).to_be("again")
    expect(m:remaining()).to_be(0)
    raises(function() m:invoke(user("more")) end, "no step left for call 3")
  end)

  it("fails with the step's error and code, before or after content", function()
    local m = rig.model.script{
      { error = { message = "busy", code = "overloaded" } },
      { text = "partial", error = "lost" },
      function(req, n) return { text = n .. ":" .. req.messages[1].content[1].text } end,
    }
    local r, msg, code = m:invoke(user("a"))
    expect(r).to_be_nil(); expect(code).to_be("overloaded"); expect(msg).to_match("busy")
    local st = assert(m:stream(user("b")))
    local got = {}
    for c in st:chunks() do got[#got + 1] = c.text end
    expect(got).to_equal { "partial" }
    r, msg, code = st:result()
    expect(r).to_be_nil(); expect(code).to_be("server"); expect(msg).to_match("lost")
    expect(assert(m:invoke(user("c"))).message.content[1].text).to_be("3:c")
  end)

  it("retries a retryable scripted failure when asked to", function()
    local m = rig.model.script{ steps = { { error = { message = "busy", code = "overloaded" } },
                                          { text = "ok" } }, retry = FAST }
    local r = assert(m:invoke(user("a")))
    expect(r.attempts).to_be(2)
    expect(#m:calls()).to_be(1)
  end)

  it("rejects malformed steps naming the field", function()
    raises(function() rig.model.script{ { txt = "x" } } end, "steps%[1%]: unknown field 'txt'")
    raises(function() rig.model.script{ { error = { message = "x", code = "boom" } } } end,
      "unknown failure code 'boom'")
    raises(function() rig.model.script{ { chunk = 0, text = "x" } } end, "chunk")
  end)

  it("rejects a tool call's unknown keys instead of calling with {}", function()
    raises(function() rig.model.script{ { tool_calls = { { name = "t", args = { q = 1 } } } } } end,
      "steps%[1%]%.tool_calls%[1%]: unknown field 'args'")
    raises(function() rig.model.script{ { tool_calls = { { name = "t", arguments = {} } } } } end,
      "unknown field 'arguments'")
    raises(function() rig.model.script{ { tool_calls = { { name = "t", input = {}, input_json = "{}" } } } } end,
      "both input and input_json")
    local m = rig.model.script{ { tool_calls = { { name = "t", id = "c1", input = { q = 1 } } } } }
    expect(assert(m:invoke(user("x"))).message.content[1].input.q).to_be(1)
  end)

  it("waits for a delayed step without blocking other tasks", function()
    local m = rig.model.script{ { text = "late", delay = 0.2 } }
    local ticks = 0
    local t = rig.spawn(function() for _ = 1, 5 do rig.sleep(0.01); ticks = ticks + 1 end end)
    local r = assert(m:invoke(user("x")))
    expect(r.message.content[1].text).to_be("late")
    expect(ticks).to_be(5)
    t:wait()
  end)
end)

-- ---- providers through the mock ----

local fixtures = {
  { file = "openai_chat_parallel_tool_calls.sse", provider = "openai" },
  { file = "openai_chat_length_truncated.sse", provider = "openai" },
  { file = "anthropic_tool_use.sse", provider = "anthropic" },
  { file = "anthropic_thinking_signature.jsonl", provider = "anthropic" },
  { file = "openai_responses_function_call.jsonl", provider = "openai-responses" },
  { file = "gemini_function_call.sse", provider = "gemini" },
  { file = "gemini_thinking.sse", provider = "gemini" },
}

local function golden(name, value)
  local path = mock.root .. "/tests/model/golden/" .. name
  local text = assert(json.encode(value, { indent = 2 })) .. "\n"
  if os.getenv("UPDATE") then
    local f = assert(io.open(path, "w")); f:write(text); f:close()
  end
  local f = io.open(path, "r")
  local want = f and f:read("a")
  if f then f:close() end
  if want ~= text then
    error("golden " .. name .. " differs; got:\n" .. text, 2)
  end
end

local function run_stream(m, req)
  local st, msg, code = m:stream(req)
  if not st then return { error = { msg, code } } end
  local chunks = {}
  for c in st:chunks() do chunks[#chunks + 1] = c end
  local r, emsg, ecode = st:result()
  return { chunks = chunks, result = r, error = emsg and { emsg, ecode } }
end

describe("recorded provider streams through the mock", function()
  for _, fx in ipairs(fixtures) do
    it(fx.file .. " decodes the same whole, byte by byte and in random splits", function()
      local p = mock.start()
      local body = mock.fixture(fx.file)
      local m = model_for(p, fx.provider)
      local outs = {}
      for i, split in ipairs { "whole", "bytes", "random" } do
        p:push{ body = body, split = split, seed = 7 * i }
        outs[i] = run_stream(m, user("weather?"))
      end
      p:close()
      expect(outs[1].error).to_be_nil()
      local a = json.encode(outs[1])
      expect(json.encode(outs[2])).to_be(a)
      expect(json.encode(outs[3])).to_be(a)
      golden("e2e_" .. fx.file:gsub("%.%w+$", "") .. ".json", outs[1])
    end)
  end

  it("sends the key only in the provider's header", function()
    local p = mock.start()
    for _, provider in ipairs { "openai", "anthropic", "openai-responses", "gemini" } do
      p:push{ body = mock.reply(provider, "hi") }
      assert(model_for(p, provider):invoke(user("x")))
    end
    p:close()
    local h1, h2, h3, h4 = p.requests[1].headers, p.requests[2].headers, p.requests[3].headers,
      p.requests[4].headers
    expect(h1.authorization).to_be("Bearer " .. KEY)
    expect(h2["x-api-key"]).to_be(KEY)
    expect(h2["anthropic-version"]).to_be("2023-06-01")
    expect(h3.authorization).to_be("Bearer " .. KEY)
    expect(h4["x-goog-api-key"]).to_be(KEY)
    expect(h4.authorization).to_be_nil()
    expect(p.requests[1].path).to_be("/v1/chat/completions")
    expect(p.requests[2].path).to_be("/v1/messages")
    expect(p.requests[3].path).to_be("/v1/responses")
    expect(p.requests[4].path).to_be("/v1/models/test-model:streamGenerateContent")
    for _, r in ipairs(p.requests) do expect(r.body:find(KEY, 1, true)).to_be_nil() end
  end)
end)

describe("failures and retries", function()
  local function err_body(t, m) return json.encode { type = "error", error = { type = t, message = m } } end

  it("honors Retry-After on 429", function()
    local p = mock.start()
    p:push{ status = 429, headers = { ["retry-after"] = "1" }, body = err_body("rate_limit_error", "slow down") }
    p:push{ body = mock.reply("anthropic", "ok") }
    local t0 = rig.now()
    local r = assert(model_for(p, "anthropic"):invoke(user("x")))
    expect(rig.now() - t0).at_least(0.9)
    expect(r.attempts).to_be(2)
    expect(r.message.content[1].text).to_be("ok")
    p:close()
  end)

  it("retries 529 overloaded, then succeeds", function()
    local p = mock.start()
    p:push{ status = 529, body = err_body("overloaded_error", "Overloaded") }
    p:push{ body = mock.reply("anthropic", "ok") }
    local r = assert(model_for(p, "anthropic"):invoke(user("x")))
    expect(r.attempts).to_be(2)
    p:close()
  end)

  it("retries 500 three times, then succeeds", function()
    local p = mock.start()
    for _ = 1, 3 do p:push{ status = 500, body = '{"error":{"message":"oops","type":"server_error"}}' } end
    p:push{ body = mock.reply("openai", "fine") }
    local r = assert(model_for(p, "openai"):invoke(user("x")))
    expect(r.attempts).to_be(4)
    expect(#p.requests).to_be(4)
    p:close()
  end)

  it("gives up after the configured attempts with the last failure", function()
    local p = mock.start()
    for _ = 1, 3 do p:push{ status = 503, body = '{"error":{"message":"down"}}' } end
    local m = model_for(p, "openai", { retry = { attempts = 3, delay = 0.01 } })
    local r, msg, code, detail = m:invoke(user("x"))
    expect(r).to_be_nil(); expect(code).to_be("server"); expect(detail.status).to_be(503)
    expect(msg).to_match("HTTP 503")
    expect(#p.requests).to_be(3)
    p:close()
  end)

  it("does not retry 401 and reports auth without the key", function()
    local p = mock.start()
    -- providers quote the key they rejected; it must not reach the message
    p:push{ status = 401, body = err_body("authentication_error", "Incorrect API key provided: " .. KEY) }
    local r, msg, code = model_for(p, "anthropic"):invoke(user("x"))
    expect(r).to_be_nil(); expect(code).to_be("auth")
    expect(#p.requests).to_be(1)
    expect(msg).to_match("Incorrect API key provided: %[redacted%]")
    expect(msg:find(KEY, 1, true)).to_be_nil()
    expect(msg:find(KEY:sub(1, 12), 1, true)).to_be_nil()
    p:close()
  end)

  it("classifies a context overflow", function()
    local p = mock.start()
    p:push{ status = 400, body = '{"error":{"message":"This model\'s maximum context length is 128000 tokens","type":"invalid_request_error","code":"context_length_exceeded"}}' }
    local _, _, code = model_for(p, "openai"):invoke(user("x"))
    expect(code).to_be("context_length")
    p:close()
  end)

  it("never retries a stream that already delivered content", function()
    local p = mock.start()
    local body = mock.reply("openai", "some text that arrives")
    p:push{ body = body, drop_after = #body - 20 }
    local st = assert(model_for(p, "openai"):stream(user("x")))
    local n = 0
    for _ in st:chunks() do n = n + 1 end
    local r, _, code = st:result()
    expect(n > 0).to_be(true)
    expect(r).to_be_nil(); expect(code).to_be("network")
    expect(#p.requests).to_be(1)
    p:close()
  end)

  it("retries a stream that broke before any content", function()
    local p = mock.start()
    p:push{ body = mock.reply("anthropic", "x"), drop_after = 10 }
    p:push{ body = mock.reply("anthropic", "second") }
    local r = assert(model_for(p, "anthropic"):invoke(user("x")))
    expect(r.attempts).to_be(2)
    expect(r.message.content[1].text).to_be("second")
    p:close()
  end)

  it("reports a stream that ends without its final event as truncated", function()
    local p = mock.start()
    local body = mock.reply("anthropic", "cut short")
    body = body:sub(1, body:find("event: message_delta", 1, true) - 1)
    p:push{ body = body }
    local r, msg, code = model_for(p, "anthropic", { retry = { attempts = 1 } }):invoke(user("x"))
    expect(r).to_be_nil(); expect(code).to_be("truncated"); expect(msg).to_match("final event")
    p:close()
  end)

  it("times out a server that stalls between bytes", function()
    local p = mock.start()
    local body = mock.reply("openai", "slow")
    p:push{ body = body, stall_after = #body - 30 }
    local m = model_for(p, "openai", { timeouts = { idle = 0.3 } })
    local t0 = rig.now()
    local r, _, code = m:invoke(user("x"))
    expect(r).to_be_nil(); expect(code).to_be("timeout")
    expect(rig.now() - t0).at_most(5)
    expect(#p.requests).to_be(1)
    p:close()
  end)

  it("types an error inside a 200 stream with the provider's code", function()
    local p = mock.start()
    local ev = mock.sse({ { type = "message_start", message = { id = "m", model = "c", role = "assistant",
      type = "message", content = json.array {}, usage = { input_tokens = 1, output_tokens = 0 } } },
      { type = "error", error = { type = "invalid_request_error", message = "bad thing" } } }, true)
    p:push{ body = ev }
    local r, msg, code, detail = model_for(p, "anthropic"):invoke(user("x"))
    expect(r).to_be_nil(); expect(code).to_be("invalid_request")
    expect(detail.provider_code).to_be("invalid_request_error")
    expect(msg).to_match("bad thing")
    p:close()
  end)

  it("stops at once when the task is cancelled", function()
    local p = mock.start()
    local body = mock.reply("openai", "never finishes")
    p:push{ body = body, stall_after = 40 }
    local t = rig.spawn(function() return model_for(p, "openai"):invoke(user("x")) end)
    while p.stalled == 0 do p.changed:wait() end -- the stream went quiet midway
    local t0 = rig.now()
    t:cancel()
    local _, _, code = t:wait()
    expect(code).to_be("cancelled")
    expect(rig.now() - t0).at_most(1)
    p:close()
  end)

  it("cancels a backoff wait too", function()
    local p = mock.start()
    p:push{ status = 429, headers = { ["retry-after"] = "30" }, body = "{}" }
    local m = model_for(p, "openai", { retry = { attempts = 3, delay = 0.01, retry_after_max = 60 } })
    local t = rig.spawn(function() return m:invoke(user("x")) end)
    rig.sleep(0.2)
    local t0 = rig.now()
    t:cancel()
    expect(select(3, t:wait())).to_be("cancelled")
    expect(rig.now() - t0).at_most(1)
    p:close()
  end)
end)

describe("the same rig code against each provider", function()
  -- A two-step tool loop: the model asks for a tool, gets its result, answers.
  local function agent(m)
    local tools = { { name = "get_weather", description = "Weather for a city",
      schema = { type = "object", properties = { city = { type = "string" } }, required = { "city" } } } }
    local req = { system = "Be brief.", messages = { { role = "user", content = "Weather in Paris?" } },
                  tools = tools }
    local r = assert(m:invoke(req))
    assert(r.finish_reason == "tool_use", r.finish_reason)
    local call = r.message.content[#r.message.content]
    assert(call.type == "tool_use" and call.name == "get_weather" and call.input.city == "Paris")
    req.messages[#req.messages + 1] = r.message
    req.messages[#req.messages + 1] = { role = "tool", content = {
      { type = "tool_result", tool_use_id = call.id, content = "18°C and sunny" } } }
    local r2 = assert(m:invoke(req))
    return r2.message.content[1].text, r2.usage
  end

  for _, provider in ipairs { "openai", "openai-compatible", "anthropic", "openai-responses", "gemini" } do
    it("runs a tool loop on " .. provider, function()
      local p = mock.start()
      local wire = provider == "openai-compatible" and "openai" or provider
      p:push{ body = mock.reply(wire, nil, { { id = "call_1", name = "get_weather", args = '{"city":"Paris"}' } }) }
      p:push{ body = mock.reply(wire, "18°C and sunny in Paris.") }
      local text, usage = agent(model_for(p, provider))
      expect(text).to_be("18°C and sunny in Paris.")
      expect(usage.output_tokens).to_be(7)
      -- the second request carried the tool call and its result back
      local second = json.decode(p.requests[2].body)
      -- (Gemini's calls have no ids: the result goes back by the call's name)
      local echo = provider == "gemini" and '"functionResponse":{"name":"get_weather"' or "call_1"
      expect(p.requests[2].body:find(echo, 1, true) ~= nil).to_be(true)
      expect(p.requests[2].body:find("18°C and sunny", 1, true) ~= nil).to_be(true)
      expect(type(second)).to_be("table")
      p:close()
    end)
  end
end)

describe("record and replay", function()
  it("records a conversation and serves it back offline, retries included", function()
    local dir = os.tmpname(); os.remove(dir)
    local file = dir .. ".jsonl"
    local p = mock.start()
    p:push{ status = 529, body = '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}' }
    p:push{ body = mock.reply("anthropic", "first answer") }
    p:push{ body = mock.reply("anthropic", "second answer") }
    local live = model_for(p, "anthropic")
    local rec = rig.model.record(live, file)
    local a = assert(rec:invoke(user("one")))
    local b = assert(rec:invoke(user("two")))
    p:close()
    expect(a.attempts).to_be(2)

    local f = assert(io.open(file)); local text = f:read("a"); f:close()
    expect(text:find(KEY, 1, true)).to_be_nil()

    local rp = rig.model.replay(file)
    local a2 = assert(rp:invoke(user("one")))
    local b2 = assert(rp:invoke(user("two")))
    expect(json.encode(a2)).to_be(json.encode(a))
    expect(json.encode(b2)).to_be(json.encode(b))

    local rp2 = rig.model.replay(file)
    local r, msg, code = rp2:invoke(user("something else"))
    expect(r).to_be_nil(); expect(code).to_be("invalid_request")
    expect(msg).to_match("request 1 does not match")
    expect(msg).to_match("%$%.messages%[1%]%.content")
    os.remove(file)
  end)

  it("refuses a file that is not a cassette", function()
    local file = os.tmpname()
    local f = assert(io.open(file, "w")); f:write("hello\n"); f:close()
    raises(function() rig.model.replay(file) end, "not JSON")
    os.remove(file)
  end)
end)
