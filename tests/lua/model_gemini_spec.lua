-- rig.model.gemini: request bodies, stream decoding, error typing, and the
-- driver against a Gemini-shaped server on loopback (real HTTP).
-- Golden files: tests/model/golden/; UPDATE=1 rewrites them (then READ them).
local json = require "rig.json"
local codec = require "rig.model.gemini"
local U = dofile((os.getenv("LUARIG_ROOT") or ".") .. "/tests/lua/model_codec_util.lua")
local mock = dofile(U.root .. "/tests/lua/mock_provider.lua")

local KEY_ENV = "LUARIG_TEST_API_KEY"
local KEY = os.getenv(KEY_ENV)
local FAST = { attempts = 5, delay = 0.01, max_delay = 0.05 }

local FLASH = U.model("gemini", { name = "gemini-2.5-flash" })

local function fixture(name) return U.sse(U.read("tests/fixtures/" .. name)) end
local function decode(list) return U.decode(codec, FLASH, U.events(list)) end

local function ev(parts, finish, extra)
  local c = { content = { role = "model", parts = json.array(parts) }, index = 0, finishReason = finish }
  local e = { candidates = json.array { c }, modelVersion = "gemini-2.5-flash", responseId = "r1" }
  for k, v in pairs(extra or {}) do e[k] = v end
  return e
end

describe("gemini decoder fixtures", function()
  it("decodes a streamed text answer (golden)", function()
    local r = U.decode(codec, FLASH, fixture("gemini_text_stream.sse"))
    expect(r.error).to_be_nil()
    expect(r.done).to_be(true)
    expect(r.finish_reason).to_be("stop")
    expect(r.model).to_be("gemini-2.5-flash")
    -- thinking tokens were spent (and billed as output) though none were shown
    expect(r.usage).to_equal({ input_tokens = 9, output_tokens = 27 + 412, reasoning_tokens = 412 })
    local b = r.message.content
    expect(#b).to_be(2)
    expect(b[1].type).to_be("thinking")
    expect(b[1].thinking).to_be("")
    expect(b[1].signature).to_match("^CiQB")
    expect(b[2].text).to_be("The sky looks blue because air molecules scatter short (blue) wavelengths"
      .. " of sunlight far more than long (red) ones — Rayleigh scattering.")
    U.golden("gemini_text_stream", r)
  end)

  it("decodes parallel function calls with made-up ids (golden)", function()
    local r = U.decode(codec, FLASH, fixture("gemini_function_call.sse"))
    expect(r.error).to_be_nil()
    expect(r.finish_reason).to_be("tool_use")
    local b = r.message.content
    expect(#b).to_be(3)
    expect(b[1].type).to_be("thinking")
    expect(b[2].name).to_be("get_weather")
    expect(b[2].input).to_equal({ city = "Paris", unit = "celsius" })
    expect(b[3].input).to_equal({ city = "Lyon", unit = "celsius" })
    expect(b[2].id).to_be("call_bdbAaOWSHMGmz7IPn-uB2Ak_0")
    expect(b[3].id).to_be("call_bdbAaOWSHMGmz7IPn-uB2Ak_1")
    expect(b[2].error).to_be_nil()
    U.golden("gemini_function_call", r)
  end)

  it("decodes thought summaries and the signed answer (golden)", function()
    local r = U.decode(codec, FLASH, fixture("gemini_thinking.sse"))
    expect(r.error).to_be_nil()
    local b = r.message.content
    expect(#b).to_be(3)
    expect(b[1].type).to_be("thinking")
    expect(b[1].thinking).to_match("^%*%*Adding the series%*%*")
    expect(b[1].thinking).to_match("Gauß")
    expect(b[1].signature).to_be_nil()
    expect(b[2].signature).to_match("^EpsC")
    expect(b[3].text).to_match("5050")
    expect(r.usage).to_equal({ input_tokens = 17, output_tokens = 26 + 246, reasoning_tokens = 246 })
    U.golden("gemini_thinking", r)
  end)

  it("reports an implicit cache hit as cache reads, outside input", function()
    local r = U.decode(codec, FLASH, fixture("gemini_cached_usage.sse"))
    expect(r.error).to_be_nil()
    expect(r.usage).to_equal({ input_tokens = 5203 - 4096, cache_read_tokens = 4096,
                               output_tokens = 17 + 88, reasoning_tokens = 88 })
    U.golden("gemini_cached_usage", r)
  end)

  it("reports MAX_TOKENS as length", function()
    local r = U.decode(codec, FLASH, fixture("gemini_max_tokens.sse"))
    expect(r.finish_reason).to_be("length")
    expect(r.done).to_be(true)
    expect(r.message.content[1].text).to_match("shorter wavelengths are$")
  end)

  it("keeps a signature that arrives last, on an empty text part", function()
    local r = U.decode(codec, FLASH, fixture("gemini3_signature_last.sse"))
    expect(r.error).to_be_nil()
    local b = r.message.content
    expect(#b).to_be(2)
    expect(b[1].text).to_be("Paris is the capital of France.")
    expect(b[2].type).to_be("thinking")
    expect(b[2].signature).to_match("^CiQB")
    expect(r.model).to_be("gemini-3-pro-preview")
  end)
end)

describe("gemini decoder streams", function()
  it("turns missing args into {} and keeps an id the wire gave", function()
    local r = decode({ ev({ { functionCall = { name = "now" } },
                           { functionCall = { name = "f", id = "fc-7", args = {} } } }, "STOP") })
    expect(r.error).to_be_nil()
    expect(r.message.content[1].input_json).to_be("{}")
    expect(r.message.content[1].id).to_be("call_r1_0")
    expect(r.message.content[2].id).to_be("fc-7")
    expect(r.finish_reason).to_be("tool_use")
  end)

  it("continues text across events and starts a new block after a call", function()
    local r = decode({ ev({ { text = "a" } }), ev({ { text = "b" } }),
                       ev({ { functionCall = { name = "f", args = { x = 1 } } } }),
                       ev({ { text = "c" } }, "STOP") })
    local b = r.message.content
    expect(#b).to_be(3)
    expect(b[1].text).to_be("ab")
    expect(b[2].type).to_be("tool_use")
    expect(b[3].text).to_be("c")
  end)

  it("leaves done false without a finishReason", function()
    local r = decode({ ev({ { text = "partial" } }) })
    expect(r.done).to_be(false)
    expect(r.finish_reason).to_be_nil()
  end)

  it("maps finish reasons", function()
    local want = { STOP = "stop", MAX_TOKENS = "length", SAFETY = "content_filter",
                   RECITATION = "content_filter", PROHIBITED_CONTENT = "content_filter",
                   MALFORMED_FUNCTION_CALL = "stop", OTHER = "stop", SOMETHING_NEW = "stop" }
    for reason, fr in pairs(want) do
      local r = decode({ ev({ { text = "x" } }, reason) })
      expect(r.finish_reason).to_be(fr)
      expect(r.done).to_be(true)
    end
  end)

  it("ends a blocked prompt as content_filter", function()
    local r = decode({ { promptFeedback = { blockReason = "SAFETY" },
                         usageMetadata = { promptTokenCount = 5, totalTokenCount = 5 } } })
    expect(r.error).to_be_nil()
    expect(r.done).to_be(true)
    expect(r.finish_reason).to_be("content_filter")
    expect(r.usage).to_equal({ input_tokens = 5 })
  end)

  it("ignores parts and candidates it does not pass on", function()
    local r = decode({ { candidates = json.array {
        { index = 1, content = { parts = json.array { { text = "other candidate" } } } },
        { index = 0, content = { parts = json.array {
          { inlineData = { mimeType = "image/png", data = "iVBOR" } },
          { executableCode = { language = "PYTHON", code = "print(1)" } },
          { text = "kept" } } }, finishReason = "STOP" } } } })
    expect(r.error).to_be_nil()
    expect(#r.message.content).to_be(1)
    expect(r.message.content[1].text).to_be("kept")
  end)

  it("counts tool-use prompts as input and takes the last usage", function()
    local r = decode({ ev({ { text = "a" } }, nil, { usageMetadata = { promptTokenCount = 100,
                         candidatesTokenCount = 1, totalTokenCount = 101 } }),
                       ev({ { text = "b" } }, "STOP", { usageMetadata = { promptTokenCount = 100,
                         toolUsePromptTokenCount = 50, cachedContentTokenCount = 30,
                         candidatesTokenCount = 9, thoughtsTokenCount = 3 } }) })
    expect(r.usage).to_equal({ input_tokens = 120, cache_read_tokens = 30, output_tokens = 12,
                               reasoning_tokens = 3 })
    expect(math.type(r.usage.input_tokens)).to_be("integer")
  end)

  it("types an error event, with its retry delay", function()
    local r = decode({ ev({ { text = "so far" } }), { error = { code = 429,
      message = "Resource has been exhausted (e.g. check quota).", status = "RESOURCE_EXHAUSTED",
      details = json.array { { ["@type"] = "type.googleapis.com/google.rpc.RetryInfo", retryDelay = "7s" } } } } })
    expect(r.error.code).to_be("rate_limited")
    expect(r.error.msg).to_be("gemini: stream error: Resource has been exhausted (e.g. check quota)."
      .. " (RESOURCE_EXHAUSTED)")
    expect(r.error.detail.retry_after).to_be(7)
    expect(r.error.detail.provider_code).to_be("RESOURCE_EXHAUSTED")
    r = decode({ { error = { code = 500, message = "Internal error encountered.", status = "INTERNAL" } } })
    expect(r.error.code).to_be("server")
    r = decode({ { error = "boom" } })
    expect(r.error.code).to_be("server")
  end)

  it("fails malformed events with 'protocol'", function()
    local bad = {
      '{"candidates": [{"content": {"parts": [{"text": "a"}]}}]', "", "[1,2]", '"text"',
      '{"candidates": {"a": 1}}',
      '{"candidates": [{"content": {"parts": {"text": "a"}}}]}',
      '{"candidates": [{"content": {"parts": [{"text": 5}]}}]}',
      '{"candidates": [{"content": {"parts": [7]}}]}',
      '{"candidates": [{"content": {"parts": [{"functionCall": {"args": {}}}]}}]}',
      '{"candidates": [{"content": {"parts": [{"functionCall": {"name": "f", "args": [1]}}]}}]}',
      '{"candidates": [{"content": {"parts": [{"text": "a", "thoughtSignature": 3}]}}]}',
      '{"candidates": [{"finishReason": 3}]}',
      '{"usageMetadata": {"promptTokenCount": -1}}',
      '{"usageMetadata": {"candidatesTokenCount": 1.5}}',
      '{"usageMetadata": "x"}',
    }
    for _, s in ipairs(bad) do
      local r = U.decode(codec, FLASH, { { data = s, event = "message" } })
      expect(r.error and r.error.code).to_be("protocol")
      expect(r.error.msg).to_match("^gemini: malformed stream event")
    end
  end)

  it("answers corrupted fixtures with chunks or a typed failure, never a raise", function()
    for _, f in ipairs { "gemini_function_call.sse", "gemini_thinking.sse", "gemini_text_stream.sse" } do
      local codes = U.corrupt(codec, FLASH, fixture(f), 200)
      for code in pairs(codes) do expect(code).to_be("protocol") end
    end
  end)
end)

-- ---- requests ----

local function rig_model(over)
  local def = { provider = "gemini", name = "gemini-2.5-flash", max_tokens = 8192,
                temperature = 0.2, top_p = 0.9, stop = { "END" }, effort = "high", thinking = true }
  for k, v in pairs(over or {}) do
    if v == json.null then def[k] = nil else def[k] = v end
  end
  return rig.model(def)
end

local function body_of(m, req)
  req.stream = nil -- U.conversation() is the normalized form
  return json.decode(m:encode(req))
end

describe("gemini encoder", function()
  it("matches the golden request body (thinking, a named tool, structured output)", function()
    local req = U.conversation()
    req.stream = nil
    U.golden_text("request_gemini", rig_model():encode(req, { indent = 2 }))
  end)

  it("matches the golden request body (sampling, auto tools, no thinking)", function()
    local req = U.conversation()
    req.tool_choice, req.output_schema, req.stream = "auto", nil, nil
    U.golden_text("request_gemini_sampling",
      rig_model({ thinking = false, effort = json.null }):encode(req, { indent = 2 }))
  end)

  it("sends tools as functionDeclarations with the JSON Schema as given", function()
    local req = U.conversation()
    req.stream = nil
    local s = rig_model():encode(req)
    expect(s).to_match('"parametersJsonSchema":{"properties":{"ticker":{"type":"string"}},"required":%[%],')
    expect(s).to_match('"responseJsonSchema":{"additionalProperties":false,')
    expect(s).to_match('"responseMimeType":"application/json"')
    expect(s).to_match('"toolConfig":{"functionCallingConfig":{"allowedFunctionNames":%["get_weather"%],"mode":"ANY"}}')
  end)

  it("maps tool_choice", function()
    local function choice(c)
      local req = U.conversation()
      req.tool_choice = c
      return json.encode(body_of(rig_model(), req).toolConfig)
    end
    expect(choice("auto")).to_be('{"functionCallingConfig":{"mode":"AUTO"}}')
    expect(choice("required")).to_be('{"functionCallingConfig":{"mode":"ANY"}}')
    expect(choice("none")).to_be('{"functionCallingConfig":{"mode":"NONE"}}')
    local req = U.conversation()
    req.tool_choice = nil
    expect(body_of(rig_model(), req).toolConfig).to_be_nil()
  end)

  it("budgets thinking by effort, leaves the default without either", function()
    local function cfg(over)
      local body = assert(codec.encode(U.model("gemini", over), { messages = {
        { role = "user", content = { { type = "text", text = "x" } } } } }))
      return body.generationConfig.thinkingConfig
    end
    local want = { minimal = 1000, low = 2500, medium = 5000, high = 7500, xhigh = 8500, max = 9000 }
    for effort, budget in pairs(want) do
      local c = cfg({ name = "gemini-2.5-flash", max_tokens = 10000, effort = effort, thinking = true })
      expect(c.thinkingBudget).to_be(budget)
      expect(c.includeThoughts).to_be(true)
    end
    expect(cfg({ name = "gemini-2.5-flash", max_tokens = 65536, effort = "max" }).thinkingBudget).to_be(24576)
    expect(cfg({ name = "gemini-2.5-flash", max_tokens = 2000, effort = "low" }).thinkingBudget).to_be(512)
    local c = cfg({ name = "gemini-2.5-flash", effort = "low" })
    expect(c.includeThoughts).to_be_nil()
    expect(c.thinkingBudget).to_be(1024)
    expect(cfg({ name = "gemini-2.5-pro", thinking = true }).thinkingBudget).to_be(-1)
    expect(cfg({ name = "gemini-2.5-flash" })).to_be_nil()
    -- Gemini 3 takes a level
    expect(json.encode(cfg({ name = "gemini-3-pro-preview", effort = "low", thinking = true })))
      .to_be('{"includeThoughts":true,"thinkingLevel":"low"}')
    expect(cfg({ name = "gemini-3-pro-preview", effort = "high" }).thinkingLevel).to_be("high")
    local body, err = codec.encode(U.model("gemini", { name = "gemini-2.5-flash", max_tokens = 512,
      effort = "low" }), { messages = { { role = "user", content = { { type = "text", text = "x" } } } } })
    expect(body).to_be_nil()
    expect(err).to_match("max_tokens")
  end)

  it("sends a decoded reply back with each signature on its own part", function()
    local req = { messages = { { role = "user", content = { { type = "text", text = "Weather?" } } } } }
    for _, f in ipairs { "gemini_function_call.sse", "gemini_thinking.sse", "gemini3_signature_last.sse" } do
      local r = U.decode(codec, FLASH, fixture(f))
      req.messages[#req.messages + 1] = r.message
      if f == "gemini_function_call.sse" then
        req.messages[#req.messages + 1] = { role = "tool", content = {
          { type = "tool_result", tool_use_id = r.message.content[2].id, content = "18C" },
          { type = "tool_result", tool_use_id = r.message.content[3].id,
            content = { { type = "text", text = "no data" } }, is_error = true } } }
      else
        req.messages[#req.messages + 1] = { role = "user", content = { { type = "text", text = "and?" } } }
      end
    end
    local body = assert(codec.encode(FLASH, req))
    local c = body.contents
    expect(#c).to_be(7)
    -- the calls: the signature on the first, no ids sent
    expect(json.encode(c[2])).to_be('{"parts":[{"functionCall":{"args":{"city":"Paris","unit":"celsius"},'
      .. '"name":"get_weather"},"thoughtSignature":"' .. fixture("gemini_function_call.sse")[1].data
      :match('"thoughtSignature": "([^"]+)"') .. '"},{"functionCall":{"args":{"city":"Lyon",'
      .. '"unit":"celsius"},"name":"get_weather"}}],"role":"model"}')
    -- results go back by name, the error as {error}
    expect(json.encode(c[3])).to_be('{"parts":[{"functionResponse":{"name":"get_weather","response":'
      .. '{"output":"18C"}}},{"functionResponse":{"name":"get_weather","response":{"error":"no data"}}}],'
      .. '"role":"user"}')
    -- an unsigned summary stays home; the signature rides on the answer's part
    expect(#c[4].parts).to_be(1)
    expect(c[4].parts[1].thought).to_be_nil()
    expect(c[4].parts[1].text).to_match("^The sum is")
    expect(c[4].parts[1].thoughtSignature).to_match("^EpsC")
    -- a signature that came last goes back last, on an empty part
    expect(#c[6].parts).to_be(2)
    expect(c[6].parts[2].text).to_be("")
    expect(c[6].parts[2].thoughtSignature).to_match("^CiQB")
  end)

  it("drops other providers' thinking and sends signed summaries back", function()
    local req = { messages = {
      { role = "user", content = { { type = "text", text = "q" } } },
      { role = "assistant", content = {
        { type = "thinking", thinking = "theirs", signature = "s1", source = "anthropic" },
        { type = "thinking", thinking = "mine", signature = "s2", source = "gemini" },
        { type = "thinking", thinking = "unsigned", source = "gemini" },
        { type = "refusal", text = "No." },
        { type = "text", text = "" },
      } } } }
    local body = assert(codec.encode(FLASH, req))
    expect(json.encode(body.contents[2])).to_be('{"parts":[{"text":"mine","thought":true,'
      .. '"thoughtSignature":"s2"},{"text":"No."}],"role":"model"}')
  end)

  it("merges same-role messages, results first, and drops empty ones", function()
    local req = { messages = {
      { role = "user", content = { { type = "text", text = "a" } } },
      { role = "user", content = { { type = "text", text = "b" } } },
      { role = "assistant", content = { { type = "tool_use", id = "t1", name = "f", input = {} } } },
      { role = "user", content = { { type = "text", text = "c" } } },
      { role = "tool", content = { { type = "tool_result", tool_use_id = "t1", content = "r" } } },
      { role = "assistant", content = { { type = "thinking", thinking = "x", source = "openai" } } },
      { role = "user", content = { { type = "text", text = "d" } } },
    } }
    local body = assert(codec.encode(FLASH, req))
    expect(json.encode(body.contents)).to_be('[{"parts":[{"text":"a"},{"text":"b"}],"role":"user"},'
      .. '{"parts":[{"functionCall":{"args":{},"name":"f"}}],"role":"model"},'
      .. '{"parts":[{"functionResponse":{"name":"f","response":{"output":"r"}}},{"text":"c"},'
      .. '{"text":"d"}],"role":"user"}]')
  end)

  it("refuses a tool result that answers no call", function()
    local body, err = codec.encode(FLASH, { messages = { { role = "tool", content = {
      { type = "tool_result", tool_use_id = "nope", content = "r" } } } } })
    expect(body).to_be_nil()
    expect(err).to_be("gemini: tool result 'nope' answers no tool call in the request")
  end)

  it("builds the URL from the model name and checks it", function()
    expect(codec.url_path({ name = "gemini-2.5-flash" })).to_be("/models/gemini-2.5-flash:streamGenerateContent?alt=sse")
    expect(codec.url_path({ name = "tunedModels/my-tune-1" })).to_be("/tunedModels/my-tune-1:streamGenerateContent?alt=sse")
    local m = rig.model{ provider = "gemini", name = "models/gemini-2.0-flash" }
    expect(m.base_url).to_be("https://generativelanguage.googleapis.com/v1beta")
    expect(m.api_key_env).to_be("GEMINI_API_KEY")
    for _, bad in ipairs { "gemini-2.5-flash?key=x", "a/b/c", "../x", "x:generateContent", "files/x" } do
      local ok, e = pcall(rig.model, { provider = "gemini", name = bad })
      expect(ok).to_be(false)
      expect(tostring(e)).to_match("field 'name' must be a Gemini model")
    end
    expect(function() rig.model{ provider = "gemini", name = "x", headers = { ["X-Goog-Api-Key"] = "k" } } end)
      .to_fail("may not set")
    expect(codec.headers(FLASH, "k")["x-goog-api-key"]).to_be("k")
    expect(next(codec.headers(FLASH, nil))).to_be_nil()
  end)
end)

describe("gemini errors", function()
  local function body(code, status, message, details)
    return { error = { code = code, status = status, message = message, details = details } }
  end
  local retry = json.array { { ["@type"] = "type.googleapis.com/google.rpc.QuotaFailure",
                               violations = json.array { { quotaMetric = "x" } } },
                             { ["@type"] = "type.googleapis.com/google.rpc.RetryInfo", retryDelay = "27.5s" } }
  local bad_key = json.array { { ["@type"] = "type.googleapis.com/google.rpc.ErrorInfo",
                                 reason = "API_KEY_INVALID", domain = "googleapis.com" } }
  it("classifies error bodies", function()
    local cases = {
      { 429, body(429, "RESOURCE_EXHAUSTED", "You exceeded your current quota", retry), "rate_limited",
        "RESOURCE_EXHAUSTED", 28 },
      { 400, body(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.", bad_key),
        "auth", "INVALID_ARGUMENT" },
      { 403, body(403, "PERMISSION_DENIED", "Method doesn't allow unregistered callers"), "auth" },
      { 400, body(400, "INVALID_ARGUMENT", "The input token count (1200000) exceeds the maximum number"
        .. " of tokens allowed (1048576)."), "context_length" },
      { 400, body(400, "INVALID_ARGUMENT", "Invalid JSON payload received."), "invalid_request" },
      { 400, body(400, "FAILED_PRECONDITION", "User location is not supported for the API use."),
        "invalid_request" },
      { 404, body(404, "NOT_FOUND", "models/x is not found for API version v1beta"), "invalid_request" },
      { 500, body(500, "INTERNAL", "An internal error has occurred."), "server" },
      { 503, body(503, "UNAVAILABLE", "The model is overloaded. Please try again later."), "overloaded" },
      { 504, body(504, "DEADLINE_EXCEEDED", "Deadline expired before operation could complete."), "timeout" },
      { 429, nil, "rate_limited" }, { 502, nil, "server" }, { 401, nil, "auth" }, { 418, nil, "invalid_request" },
      -- the streaming endpoint without alt=sse answers with a JSON array
      { 429, json.array { body(429, "RESOURCE_EXHAUSTED", "quota", retry) }, "rate_limited",
        "RESOURCE_EXHAUSTED", 28 },
    }
    for _, c in ipairs(cases) do
      local code, pcode, info = codec.classify(c[1], c[2], {})
      expect(code).to_be(c[3])
      if c[4] then expect(pcode).to_be(c[4]) end
      expect(info.retry_after).to_be(c[5])
    end
  end)

  it("retries 429 after its RetryInfo delay, through the driver", function()
    local p = mock.start()
    p:push{ status = 429, body = json.encode(body(429, "RESOURCE_EXHAUSTED", "quota",
      json.array { { ["@type"] = "type.googleapis.com/google.rpc.RetryInfo", retryDelay = "1s" } })) }
    p:push{ body = mock.reply("gemini", "ok") }
    local m = rig.model{ provider = "gemini", name = "gemini-2.5-flash", base_url = p.url .. "/v1beta",
                         api_key_env = KEY_ENV, retry = FAST }
    local t0 = rig.now()
    local r = assert(m:invoke{ messages = { { role = "user", content = "x" } } })
    expect(rig.now() - t0).at_least(0.9)
    expect(r.attempts).to_be(2)
    expect(r.message.content[1].text).to_be("ok")
    expect(p.requests[1].raw_path).to_be("/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse")
    p:close()
  end)

  it("reports a final failure with the provider's message and status", function()
    local p = mock.start()
    p:push{ status = 400, body = json.encode(json.array { body(400, "INVALID_ARGUMENT",
      "API key not valid. Please pass a valid API key. (AIzaSyD3xAmPl3K3yT0T4llyM4d3Up012345)", bad_key) }) }
    local m = rig.model{ provider = "gemini", name = "gemini-2.5-flash", base_url = p.url .. "/v1beta",
                         api_key_env = KEY_ENV, retry = FAST }
    local r, msg, code, detail = m:invoke{ messages = { { role = "user", content = "x" } } }
    expect(r).to_be_nil()
    expect(code).to_be("auth")
    expect(detail.status).to_be(400)
    expect(detail.provider_code).to_be("INVALID_ARGUMENT")
    expect(msg).to_be("gemini: HTTP 400 (INVALID_ARGUMENT): API key not valid. Please pass a valid API"
      .. " key. ([redacted])")
    expect(#p.requests).to_be(1)
    p:close()
  end)

  it("reads GEMINI_API_KEY, else GOOGLE_API_KEY", function()
    local m = rig.model{ provider = "gemini", name = "gemini-2.5-flash", base_url = "http://127.0.0.1:9/v1beta" }
    if os.getenv("GEMINI_API_KEY") or os.getenv("GOOGLE_API_KEY") then
      return skip("a real Gemini key is set in this environment")
    end
    local r, msg, code = m:invoke{ messages = { { role = "user", content = "x" } } }
    expect(r).to_be_nil()
    expect(code).to_be("auth")
    expect(msg).to_be("gemini: the environment variable GEMINI_API_KEY is not set (nor GOOGLE_API_KEY)")
    -- the fallback, in a child process whose environment has only GOOGLE_API_KEY
    local p = mock.start()
    p:push{ body = mock.reply("gemini", "from google") }
    p:push{ body = mock.reply("gemini", "from gemini") }
    local script = "local m = rig.model{ provider = 'gemini', name = 'gemini-2.5-flash', base_url = '"
      .. p.url .. "/v1beta' } print(assert(m:invoke{ messages = { { role = 'user', content = 'x' } } })"
      .. ".message.content[1].text)"
    local out = assert(rig.process.run{ argv = { os.getenv("LUARIG"), "-e", script },
                                        env = { GOOGLE_API_KEY = "AIza-google", GEMINI_API_KEY = false } })
    expect(out.stdout).to_be("from google\n")
    out = assert(rig.process.run{ argv = { os.getenv("LUARIG"), "-e", script },
                                  env = { GOOGLE_API_KEY = "AIza-google", GEMINI_API_KEY = "AIza-gemini" } })
    expect(out.stdout).to_be("from gemini\n")
    p:close()
    expect(p.requests[1].headers["x-goog-api-key"]).to_be("AIza-google")
    expect(p.requests[2].headers["x-goog-api-key"]).to_be("AIza-gemini")
  end)
end)

describe("gemini record and replay", function()
  it("records a tool loop and serves it back offline", function()
    local file = os.tmpname()
    local p = mock.start()
    p:push{ status = 503, body = json.encode{ error = { code = 503, status = "UNAVAILABLE",
      message = "The model is overloaded. Please try again later." } } }
    p:push{ body = mock.fixture("gemini_function_call.sse") }
    p:push{ body = mock.fixture("gemini_text_stream.sse") }
    local live = rig.model{ provider = "gemini", name = "gemini-2.5-flash", base_url = p.url .. "/v1beta",
                            api_key_env = KEY_ENV, retry = FAST }
    local rec = rig.model.record(live, file)
    local req = { messages = { { role = "user", content = "Weather in Paris and Lyon?" } },
                  tools = { { name = "get_weather", schema = { type = "object",
                    properties = { city = { type = "string" }, unit = { type = "string" } } } } } }
    local a = assert(rec:invoke(req))
    expect(a.attempts).to_be(2)
    req.messages[2] = a.message
    req.messages[3] = { role = "tool", content = {
      { type = "tool_result", tool_use_id = a.message.content[2].id, content = "18C" },
      { type = "tool_result", tool_use_id = a.message.content[3].id, content = "16C" } } }
    local b = assert(rec:invoke(req))
    p:close()
    local f = assert(io.open(file)); local text = f:read("a"); f:close()
    expect(text:find(KEY, 1, true)).to_be_nil()
    expect(text).to_match('"path":"/models/gemini%-2%.5%-flash:streamGenerateContent%?alt=sse"')
    -- the second request carried the signature back on the first call
    expect(p.requests[3].body).to_match('"thoughtSignature":"CikB')

    local rp = rig.model.replay(file)
    expect(rp.provider).to_be("gemini")
    local a2 = assert(rp:invoke{ messages = { req.messages[1] }, tools = req.tools })
    expect(json.encode(a2.message)).to_be(json.encode(a.message))
    local b2 = assert(rp:invoke(req))
    expect(json.encode(b2)).to_be(json.encode(b))
    expect(rp.remaining()).to_be(0)
    os.remove(file)
  end)
end)
