-- rig.model.openai: the Chat Completions codec ("openai", "openai-compatible").
local json = require "rig.json"
local codec = require "rig.model.openai"
local U = dofile((os.getenv("LUARIG_ROOT") or ".") .. "/tests/lua/model_codec_util.lua")

local OPENAI = U.model("openai", { name = "gpt-4o" })
local COMPAT = U.model("openai-compatible", { name = "llama3" })

local function chunk(delta, extra)
  local c = { id = "x", object = "chat.completion.chunk", model = "m",
              choices = { { index = 0, delta = delta or {}, finish_reason = json.null } } }
  for k, v in pairs(extra or {}) do c.choices[1][k] = v end
  return c
end

local function finish(reason) return chunk({}, { finish_reason = reason or "stop" }) end

local function decode(list, model) return U.decode(codec, model or OPENAI, U.events(list)) end

local function blocks(r) return r.message.content end

describe("openai chat decoder fixtures", function()
  it("decodes two parallel tool calls (golden)", function()
    local events = U.sse(U.read("tests/fixtures/openai_chat_parallel_tool_calls.sse"))
    expect(#events).to_be(26)
    local r = U.decode(codec, OPENAI, events)
    expect(r.error).to_be_nil()
    expect(r.done).to_be(true)
    expect(r.finish_reason).to_be("tool_use")
    expect(r.model).to_be("gpt-4o-2024-08-06")
    expect(r.usage).to_equal({ input_tokens = 149, output_tokens = 60, reasoning_tokens = 0 })
    local b = blocks(r)
    expect(#b).to_be(2)
    expect(b[1].id).to_be("call_JMW1whyEaYG438VE1OIflxA2")
    expect(b[1].name).to_be("GetWeatherArgs")
    expect(b[1].input).to_equal({ city = "Edinburgh", country = "GB", units = "c" })
    expect(b[1].input_json).to_be('{"city": "Edinburgh", "country": "GB", "units": "c"}')
    expect(b[2].id).to_be("call_DNYTawLBoN8fj3KN6qU9N1Ou")
    expect(b[2].input).to_equal({ ticker = "AAPL", exchange = "NASDAQ" })
    U.golden("openai_chat_parallel_tool_calls", r)
  end)

  it("decodes a length-truncated reply (golden)", function()
    local r = U.decode(codec, OPENAI, U.sse(U.read("tests/fixtures/openai_chat_length_truncated.sse")))
    expect(r.error).to_be_nil()
    expect(r.done).to_be(true)
    expect(r.finish_reason).to_be("length")
    expect(r.usage).to_equal({ input_tokens = 79, output_tokens = 1, reasoning_tokens = 0 })
    expect(r.message).to_equal({ role = "assistant", content = { { type = "text", text = '{"' } } })
    U.golden("openai_chat_length_truncated", r)
  end)

  it("decodes the fixtures the same as openai-compatible", function()
    for _, f in ipairs({ "openai_chat_parallel_tool_calls", "openai_chat_length_truncated" }) do
      local events = U.sse(U.read("tests/fixtures/" .. f .. ".sse"))
      local a, b = U.decode(codec, OPENAI, events), U.decode(codec, COMPAT, events)
      expect(b.message).to_equal(a.message)
      expect(b.usage).to_equal(a.usage)
      expect(b.finish_reason).to_be(a.finish_reason)
    end
  end)

  it("is done after finish_reason even when the body ends before [DONE]", function()
    local events = U.sse(U.read("tests/fixtures/openai_chat_parallel_tool_calls.sse"))
    events[#events] = nil -- [DONE]
    local r = U.decode(codec, OPENAI, events)
    expect(r.done).to_be(true)
    expect(r.usage.input_tokens).to_be(149)
    events[#events] = nil -- and the usage chunk: a server that omits usage
    r = U.decode(codec, COMPAT, events)
    expect(r.done).to_be(true)
    expect(r.usage).to_be_nil()
    expect(r.finish_reason).to_be("tool_use")
  end)

  it("leaves done false for a stream without finish_reason or [DONE]", function()
    local events = U.sse(U.read("tests/fixtures/openai_chat_parallel_tool_calls.sse"))
    for _ = 1, 3 do events[#events] = nil end
    local r = U.decode(codec, OPENAI, events)
    expect(r.error).to_be_nil()
    expect(r.done).to_be(false)
    expect(r.finish_reason).to_be_nil()
    expect(r.usage).to_be_nil()
  end)

  it("survives every fixture cut and corrupted without raising", function()
    local events = U.sse(U.read("tests/fixtures/openai_chat_parallel_tool_calls.sse"))
    local codes = U.corrupt(codec, OPENAI, events, 300)
    expect(codes.protocol).to_be(true)
  end)
end)

describe("openai chat decoder", function()
  it("turns empty arguments into {} and keeps invalid ones with an error", function()
    local r = decode({
      chunk({ tool_calls = { { index = 0, id = "a", type = "function", ["function"] = { name = "noargs", arguments = "" } } } }),
      chunk({ tool_calls = { { index = 1, id = "b", ["function"] = { name = "bad", arguments = "{\"x\":" } } } }),
      chunk({ tool_calls = { { index = 1, ["function"] = { arguments = " tru" } } } }),
      finish("tool_calls"), "[DONE]" })
    local b = blocks(r)
    expect(#b).to_be(2)
    expect(b[1].input).to_equal({})
    expect(b[1].error).to_be_nil()
    expect(b[2].input).to_equal({})
    expect(b[2].input_json).to_be('{"x": tru')
    expect(b[2].error).to_match("not valid JSON")
  end)

  it("explains arguments cut off by the length limit", function()
    local r = decode({
      chunk({ tool_calls = { { index = 0, id = "a", ["function"] = { name = "f", arguments = "{\"pa" } } } }),
      finish("length") })
    expect(r.finish_reason).to_be("length")
    expect(blocks(r)[1].error).to_match("cut off")
  end)

  it("keys tool calls by their index field, not their position", function()
    local r = decode({
      chunk({ tool_calls = { { index = 5, id = "five", ["function"] = { name = "f5", arguments = "{\"a\"" } },
                             { index = 2, id = "two", ["function"] = { name = "f2", arguments = "" } } } }),
      chunk({ tool_calls = { { index = 2, ["function"] = { arguments = "{\"b\":2}" } } } }),
      chunk({ tool_calls = { { index = 5, ["function"] = { arguments = ":1}" } } } }),
      finish("tool_calls") })
    local b = blocks(r)
    expect(#b).to_be(2)
    expect(b[1].id).to_be("five")
    expect(b[1].input).to_equal({ a = 1 })
    expect(b[2].id).to_be("two")
    expect(b[2].input).to_equal({ b = 2 })
    expect(r.chunks[1].index).to_be(5)
  end)

  it("keeps id and name from the first fragment; skips all-empty fragments", function()
    local r = decode({
      chunk({ tool_calls = { { index = 0, id = "call_x", type = "function", ["function"] = { name = "f", arguments = "" } } } }),
      chunk({ tool_calls = { { index = 0, id = "", ["function"] = { name = "", arguments = "{}" } } } }),
      chunk({ tool_calls = { { index = 0, ["function"] = { arguments = "" } } } }),
      chunk({ tool_calls = { { index = 0 } } }),
      finish("tool_calls") })
    expect(#r.chunks).to_be(2)
    expect(r.chunks[2].id).to_be_nil()
    expect(r.chunks[2].name).to_be_nil()
    local b = blocks(r)[1]
    expect(b.id).to_be("call_x")
    expect(b.name).to_be("f")
    expect(b.error).to_be_nil()
  end)

  it("gives calls without index or id their position and a synthetic id", function()
    local r = decode({
      chunk({ tool_calls = { { ["function"] = { name = "a", arguments = "{\"n\":1}" } },
                             { ["function"] = { name = "b", arguments = { n = 2 } } } } }),
      -- a server that sends each whole call in its own chunk, all at position 1
      chunk({ tool_calls = { { ["function"] = { name = "c", arguments = "{}" } } } }),
      finish("tool_calls") }, COMPAT)
    local b = blocks(r)
    expect(#b).to_be(3)
    expect(b[1].id).to_be("call_0")
    expect(b[1].input).to_equal({ n = 1 })
    expect(b[2].id).to_be("call_1")
    expect(b[2].input).to_equal({ n = 2 })
    expect(b[3].id).to_be("call_2")
    expect(b[3].name).to_be("c")
  end)

  it("rejects a tool call index that is not a non-negative integer", function()
    for _, bad in ipairs({ -1, 1.5, "0" }) do
      local r = decode({ chunk({ tool_calls = { { index = bad, id = "a", ["function"] = { name = "f" } } } }) })
      expect(r.error.code).to_be("protocol")
    end
  end)

  it("reads text, refusal and reasoning (reasoning_content or reasoning)", function()
    local r = decode({
      chunk({ role = "assistant", content = json.null, reasoning_content = "Let me " }),
      chunk({ reasoning = "think." }),
      chunk({ content = "Hello" }), chunk({ content = "" }), chunk({ content = ", world" }),
      chunk({ refusal = "I can't" }), chunk({ refusal = " do that." }),
      finish("stop"), "[DONE]" }, COMPAT)
    expect(r.message.content).to_equal({
      { type = "thinking", thinking = "Let me think.", source = "openai-compatible" },
      { type = "text", text = "Hello, world" },
      { type = "refusal", text = "I can't do that." } })
    expect(r.chunks[1]).to_equal({ type = "thinking", index = 0, thinking = "Let me ",
                                   source = "openai-compatible" })
    expect(r.finish_reason).to_be("stop")
  end)

  it("reads only choice 0", function()
    local c = { choices = { { index = 1, delta = { content = "B" } }, { index = 0, delta = { content = "A" } } } }
    local r = decode({ c, { choices = { { index = 1, delta = {}, finish_reason = "stop" } } } })
    expect(r.message.content).to_equal({ { type = "text", text = "A" } })
    expect(r.done).to_be(false)
  end)

  it("maps finish reasons", function()
    for wire, want in pairs({ stop = "stop", length = "length", tool_calls = "tool_use",
                              function_call = "tool_use", content_filter = "content_filter",
                              eos = "stop" }) do
      expect(decode({ finish(wire) }).finish_reason).to_be(want)
    end
  end)

  it("normalizes usage: cached tokens out of input, reasoning part of output", function()
    local r = decode({ { choices = json.array({}), usage = {
      prompt_tokens = 1000, completion_tokens = 300, total_tokens = 1300,
      prompt_tokens_details = { cached_tokens = 600 },
      completion_tokens_details = { reasoning_tokens = 200 } } } })
    expect(r.usage).to_equal({ input_tokens = 400, output_tokens = 300, cache_read_tokens = 600,
                               reasoning_tokens = 200 })
    expect(math.type(r.usage.input_tokens)).to_be("integer")
    -- usage = null on every chunk (some servers) is not a report
    r = decode({ { choices = json.array({}), usage = json.null } })
    expect(r.usage).to_be_nil()
    for _, bad in ipairs({ -1, 1.5, "10" }) do
      r = decode({ { choices = json.array({}), usage = { prompt_tokens = bad, completion_tokens = 1 } } })
      expect(r.error.code).to_be("protocol")
    end
  end)

  it("turns an error chunk into a typed error with the provider code", function()
    local r = decode({ chunk({ content = "Hi" }),
      { error = { message = "Rate limit reached for requests", type = "requests", code = "rate_limit_exceeded" } } })
    expect(r.error.code).to_be("rate_limited")
    expect(r.error.msg).to_be("openai: stream error: Rate limit reached for requests (rate_limit_exceeded)")
    expect(r.error.detail).to_equal({ provider_code = "rate_limit_exceeded", type = "requests" })
    -- vLLM: a numeric code is the HTTP status
    r = decode({ { error = { object = "error", message = "This model's maximum context length is 4096 tokens.",
                             type = "BadRequestError", code = 400 } } }, COMPAT)
    expect(r.error.code).to_be("context_length")
    expect(r.error.detail.provider_code).to_be("400")
    r = decode({ { error = "upstream crashed" } }, COMPAT)
    expect(r.error.code).to_be("server")
    expect(r.error.msg).to_be("openai-compatible: stream error: upstream crashed")
  end)

  it("reports malformed JSON as protocol and ignores unknown events", function()
    for _, bad in ipairs({ "{", "", "[1,2]", "42", '"s"', "data: {}" }) do
      local r = decode({ chunk({ content = "a" }), bad })
      expect(r.error.code).to_be("protocol")
      expect(#r.chunks).to_be(1)
    end
    local r = decode({ { type = "ping" }, { object = "something.else", choices = "nope" },
                       chunk({ content = "ok" }, { unknown_field = { 1, 2 } }), finish() })
    expect(r.error).to_be_nil()
    expect(r.message.content).to_equal({ { type = "text", text = "ok" } })
  end)

  it("accepts a whole message from a server that ignored stream=true", function()
    local r = decode({ { model = "m", choices = { { index = 0, finish_reason = "tool_calls",
      message = { role = "assistant", content = json.null,
                  tool_calls = { { id = "c1", type = "function",
                                   ["function"] = { name = "f", arguments = "{\"a\":1}" } } } } } },
      usage = { prompt_tokens = 5, completion_tokens = 6 } } }, COMPAT)
    expect(r.done).to_be(true)
    expect(blocks(r)[1].input).to_equal({ a = 1 })
    expect(r.usage).to_equal({ input_tokens = 5, output_tokens = 6 })
  end)
end)

describe("openai chat classify", function()
  local cases = {
    { 401, { error = { type = "invalid_request_error", code = "invalid_api_key" } }, "auth", "invalid_api_key" },
    { 403, nil, "auth", nil },
    { 429, { error = { type = "insufficient_quota", code = "insufficient_quota" } }, "rate_limited", "insufficient_quota" },
    { 529, nil, "overloaded", nil },
    { 408, nil, "timeout", nil },
    { 400, { error = { type = "invalid_request_error", code = "context_length_exceeded",
                       message = "This model's maximum context length is 128000 tokens." } },
      "context_length", "context_length_exceeded" },
    { 400, { error = { type = "invalid_request_error", message = "bad tool" } }, "invalid_request", "invalid_request_error" },
    { 404, { error = { code = "model_not_found" } }, "invalid_request", "model_not_found" },
    { 422, nil, "invalid_request", nil },
    { 500, { error = { type = "server_error" } }, "server", "server_error" },
    { 503, nil, "server", nil },
    { 400, { error = { type = "exceed_context_size_error", message = "the request exceeds the available context size" } },
      "context_length", "exceed_context_size_error" },
    { 409, nil, "invalid_request", nil },
  }
  for _, c in ipairs(cases) do
    it("classifies HTTP " .. c[1] .. " " .. tostring(c[4]), function()
      local code, pcode = codec.classify(c[1], c[2], {})
      expect(code).to_be(c[3])
      expect(pcode).to_be(c[4])
    end)
  end
end)

describe("openai chat request", function()
  it("sends the key as a bearer token, and no header without a key", function()
    expect(codec.headers(OPENAI, "sk-test")).to_equal({ authorization = "Bearer sk-test" })
    expect(codec.headers(COMPAT, nil)).to_equal({})
    expect(codec.path).to_be("/chat/completions")
    expect(codec.default_base_url).to_be("https://api.openai.com/v1")
  end)

  it("encodes the golden conversation for openai", function()
    local m = U.model("openai", { name = "gpt-5", max_tokens = 1024, temperature = 0.2,
                                  stop = { "END" }, effort = "high", thinking = true })
    local body = assert(codec.encode(m, U.conversation()))
    local text = json.encode(body)
    expect(text).to_match('"required":%[%]')
    expect(text:find("Two lookups", 1, true)).to_be_nil() -- thinking never sent
    expect(text:find("enc-sig-1", 1, true)).to_be_nil()
    U.golden("request_openai", body)
  end)

  it("encodes the golden conversation for openai-compatible", function()
    local m = U.model("openai-compatible", { name = "llama3", max_tokens = 1024, temperature = 0.2,
                                             stop = { "END" }, effort = "high", thinking = true })
    local body = assert(codec.encode(m, U.conversation()))
    expect(body.max_tokens).to_be(1024)
    expect(body.max_completion_tokens).to_be_nil()
    expect(body.reasoning_effort).to_be_nil()
    U.golden("request_openai-compatible", body)
  end)

  it("maps tool_choice, effort and drops empty assistant turns", function()
    local req = U.conversation()
    for tc, want in pairs({ auto = "auto", required = "required", none = "none" }) do
      req.tool_choice = tc
      expect(codec.encode(OPENAI, req).tool_choice).to_be(want)
    end
    req.tools, req.tool_choice, req.output_schema, req.system = nil, "auto", nil, nil
    req.messages = {
      { role = "user", content = { { type = "text", text = "a" }, { type = "text", text = "b" } } },
      { role = "assistant", content = { { type = "thinking", thinking = "hm", source = "openai" } } },
      { role = "assistant", content = { { type = "refusal", text = "No." } } },
    }
    local body = codec.encode(U.model("openai", { effort = "max" }), req)
    expect(body.tools).to_be_nil()
    expect(body.tool_choice).to_be_nil()
    expect(body.reasoning_effort).to_be("xhigh")
    expect(json.encode(body.messages)).to_be(
      '[{"content":[{"text":"a","type":"text"},{"text":"b","type":"text"}],"role":"user"},'
      .. '{"refusal":"No.","role":"assistant"}]')
    body = codec.encode(COMPAT, req)
    expect(body.messages[2]).to_equal({ role = "assistant", content = "No." })
  end)

  it("refuses blocks it cannot send", function()
    local req = { messages = { { role = "user", content = { { type = "audio", url = "x" } } } } }
    local body, err = codec.encode(OPENAI, req)
    expect(body).to_be_nil()
    expect(err).to_be("openai: unsupported block 'audio' in a user message")
    -- a PDF by URL: chat completions has no way to send it
    body, err = codec.encode(OPENAI, { messages = { { role = "user", content = { { type = "document",
      media_type = "application/pdf", url = "https://example.com/a.pdf" } } } } })
    expect(body).to_be_nil()
    expect(err).to_be("openai: a PDF by URL is not supported: give its bytes")
  end)
end)
