-- rig.model.responses: the OpenAI Responses API codec ("openai-responses").
local json = require "rig.json"
local codec = require "rig.model.responses"
local U = dofile((os.getenv("LUARIG_ROOT") or ".") .. "/tests/lua/model_codec_util.lua")

local MODEL = U.model("openai-responses", { name = "gpt-5.1" })

local function decode(list) return U.decode(codec, MODEL, U.events(list)) end

local function completed(usage, extra)
  local r = { id = "resp_1", model = "gpt-5.1", status = "completed", usage = usage or json.null }
  for k, v in pairs(extra or {}) do r[k] = v end
  return { type = "response.completed", response = r }
end

describe("openai-responses decoder fixture", function()
  it("decodes a function call (golden)", function()
    local events = U.jsonl(U.read("tests/fixtures/openai_responses_function_call.jsonl"))
    expect(#events).to_be(12)
    local r = U.decode(codec, MODEL, events)
    expect(r.error).to_be_nil()
    expect(r.done).to_be(true)
    expect(r.finish_reason).to_be("tool_use")
    expect(r.model).to_be("gpt-5.1")
    expect(r.usage).to_equal({ input_tokens = 45, output_tokens = 24, cache_read_tokens = 0,
                               reasoning_tokens = 0 })
    expect(r.message).to_equal({ role = "assistant", content = { {
      type = "tool_use", id = "call_H5DxLSFnsGhiROnUiDHmgyc8", name = "weather",
      input = { location = "San Francisco" }, input_json = '{"location":"San Francisco"}' } } })
    U.golden("openai_responses_function_call", r)
  end)

  it("leaves done false without response.completed", function()
    local events = U.jsonl(U.read("tests/fixtures/openai_responses_function_call.jsonl"))
    events[#events] = nil
    local r = U.decode(codec, MODEL, events)
    expect(r.error).to_be_nil()
    expect(r.done).to_be(false)
    expect(r.finish_reason).to_be_nil()
    expect(r.usage).to_be_nil()
  end)

  it("survives the fixture corrupted without raising", function()
    local events = U.jsonl(U.read("tests/fixtures/openai_responses_function_call.jsonl"))
    expect(U.corrupt(codec, MODEL, events, 300).protocol).to_be(true)
  end)
end)

describe("openai-responses decoder", function()
  it("reads reasoning summaries, encrypted content, text and refusals", function()
    local r = decode({
      { type = "response.created", response = { model = "gpt-5.1", status = "in_progress" } },
      { type = "response.output_item.added", output_index = 0,
        item = { type = "reasoning", id = "rs_9", summary = json.array({}) } },
      { type = "response.reasoning_summary_part.added", output_index = 0, summary_index = 0 },
      { type = "response.reasoning_summary_text.delta", output_index = 0, summary_index = 0, delta = "First" },
      { type = "response.reasoning_summary_part.added", output_index = 0, summary_index = 1 },
      { type = "response.reasoning_summary_text.delta", output_index = 0, summary_index = 1, delta = "Second" },
      { type = "response.output_item.done", output_index = 0,
        item = { type = "reasoning", id = "rs_9", encrypted_content = "gAAAA-enc",
                 summary = { { type = "summary_text", text = "First" }, { type = "summary_text", text = "Second" } } } },
      { type = "response.output_item.added", output_index = 1, item = { type = "message", id = "msg_1", role = "assistant" } },
      { type = "response.output_text.delta", output_index = 1, content_index = 0, delta = "Hel" },
      { type = "response.output_text.delta", output_index = 1, content_index = 0, delta = "lo" },
      { type = "response.refusal.delta", output_index = 1, content_index = 1, delta = "No." },
      { type = "response.output_text.done", output_index = 1, content_index = 0, text = "Hello" },
      completed({ input_tokens = 100, input_tokens_details = { cached_tokens = 40 },
                  output_tokens = 50, output_tokens_details = { reasoning_tokens = 30 } }) })
    expect(r.error).to_be_nil()
    expect(r.message.content).to_equal({
      { type = "thinking", thinking = "First\n\nSecond", id = "rs_9", signature = "gAAAA-enc",
        source = "openai-responses" },
      { type = "text", text = "Hello" },
      { type = "refusal", text = "No." } })
    expect(r.finish_reason).to_be("stop")
    expect(r.usage).to_equal({ input_tokens = 60, output_tokens = 50, cache_read_tokens = 40,
                               reasoning_tokens = 30 })
  end)

  it("takes the summary from output_item.done when no deltas came", function()
    local r = decode({
      { type = "response.output_item.done", output_index = 0,
        item = { type = "reasoning", id = "rs_1", encrypted_content = "e",
                 summary = { { type = "summary_text", text = "Only here" } } } },
      completed() })
    expect(r.message.content[1].thinking).to_be("Only here")
    expect(r.usage).to_be_nil()
  end)

  it("maps incomplete reasons", function()
    for reason, want in pairs({ max_output_tokens = "length", content_filter = "content_filter" }) do
      local r = decode({ { type = "response.incomplete", response = {
        status = "incomplete", incomplete_details = { reason = reason },
        usage = { input_tokens = 1, output_tokens = 2 } } } })
      expect(r.done).to_be(true)
      expect(r.finish_reason).to_be(want)
      expect(r.usage).to_equal({ input_tokens = 1, output_tokens = 2 })
    end
  end)

  it("keys calls by output_index: gaps, interleaving, arguments only on done, empty arguments", function()
    local r = decode({
      { type = "response.output_item.added", output_index = 7,
        item = { type = "function_call", call_id = "c7", name = "seven", arguments = "" } },
      { type = "response.output_item.added", output_index = 3,
        item = { type = "function_call", call_id = "c3", name = "three", arguments = "" } },
      { type = "response.function_call_arguments.delta", output_index = 3, delta = "{\"x\"" },
      { type = "response.function_call_arguments.delta", output_index = 7, delta = "{\"y\":2}" },
      { type = "response.function_call_arguments.delta", output_index = 3, delta = ":1}" },
      { type = "response.output_item.done", output_index = 3,
        item = { type = "function_call", call_id = "c3", name = "three", arguments = "{\"x\":1}" } },
      -- a call whose arguments only arrive with output_item.done
      { type = "response.output_item.added", output_index = 9,
        item = { type = "function_call", call_id = "c9", name = "nine", arguments = "" } },
      { type = "response.output_item.done", output_index = 9,
        item = { type = "function_call", call_id = "c9", name = "nine", arguments = "{\"z\":3}" } },
      { type = "response.output_item.added", output_index = 10,
        item = { type = "function_call", call_id = "c10", name = "noargs", arguments = "" } },
      { type = "response.output_item.done", output_index = 10,
        item = { type = "function_call", call_id = "c10", name = "noargs", arguments = "" } },
      completed() })
    local b = r.message.content
    expect(#b).to_be(4)
    expect({ b[1].id, b[2].id, b[3].id, b[4].id }).to_equal({ "c7", "c3", "c9", "c10" })
    expect(b[1].input).to_equal({ y = 2 })
    expect(b[2].input).to_equal({ x = 1 })
    expect(b[3].input).to_equal({ z = 3 })
    expect(b[4].input).to_equal({})
    expect(b[4].error).to_be_nil()
    expect(r.finish_reason).to_be("tool_use")
  end)

  it("keeps invalid arguments with an error on the block", function()
    local r = decode({
      { type = "response.output_item.added", output_index = 0,
        item = { type = "function_call", call_id = "c", name = "f" } },
      { type = "response.function_call_arguments.delta", output_index = 0, delta = "{nope" },
      completed() })
    expect(r.message.content[1].error).to_match("not valid JSON")
  end)

  it("turns error events into typed errors (top-level and nested)", function()
    local r = decode({ { type = "error", code = "rate_limit_exceeded", message = "Slow down.", param = json.null } })
    expect(r.error.code).to_be("rate_limited")
    expect(r.error.msg).to_be("openai-responses: stream error: Slow down. (rate_limit_exceeded)")
    expect(r.error.detail).to_equal({ provider_code = "rate_limit_exceeded" })
    r = decode({ { type = "error", sequence_number = 2, error = { type = "invalid_request_error",
      code = "context_length_exceeded", message = "Your input exceeds the context window of this model." } } })
    expect(r.error.code).to_be("context_length")
    expect(r.error.detail).to_equal({ provider_code = "context_length_exceeded", type = "invalid_request_error" })
    r = decode({ { type = "response.output_text.delta", output_index = 0, delta = "partial" },
                 { type = "response.failed", response = { status = "failed",
                   error = { code = "server_error", message = "The server had an error." } } } })
    expect(r.error.code).to_be("server")
    expect(r.error.msg).to_be("openai-responses: stream error: The server had an error. (server_error)")
    expect(#r.chunks).to_be(1)
    r = decode({ { type = "response.failed", response = { status = "failed", error = json.null } } })
    expect(r.error.code).to_be("server")
  end)

  it("reports malformed JSON and bad indexes as protocol; ignores unknown events", function()
    for _, bad in ipairs({ "{", "[]", "null", "" }) do
      expect(decode({ bad }).error.code).to_be("protocol")
    end
    expect(decode({ { type = "response.output_text.delta", delta = "x" } }).error.code).to_be("protocol")
    expect(decode({ { type = "response.output_text.delta", output_index = -2, delta = "x" } }).error.code).to_be("protocol")
    expect(decode({ { type = "response.output_item.added", output_index = 0 } }).error.code).to_be("protocol")
    local r = decode({ { type = "response.web_search_call.searching", output_index = 0 },
                       { type = "response.something_new", foo = { 1 } }, { no_type = true },
                       { type = "response.output_text.delta", output_index = 0, delta = "ok" }, completed() })
    expect(r.error).to_be_nil()
    expect(r.message.content).to_equal({ { type = "text", text = "ok" } })
  end)

  it("uses the event name when the JSON has no type", function()
    local dec = codec.decoder(MODEL, function() end)
    expect(dec:feed('{"response":{"status":"completed"}}', "response.completed")).to_be(true)
    expect(dec.done).to_be(true)
  end)

  it("classifies HTTP errors", function()
    expect(codec.classify(401, { error = { code = "invalid_api_key" } }, {})).to_be("auth")
    expect(codec.classify(429, nil, {})).to_be("rate_limited")
    expect(codec.classify(400, { error = { code = "context_length_exceeded" } }, {})).to_be("context_length")
    expect(codec.classify(500, nil, {})).to_be("server")
  end)
end)

describe("openai-responses request", function()
  it("encodes the golden conversation", function()
    local m = U.model("openai-responses", { name = "gpt-5.1", max_tokens = 1024, temperature = 0.2,
                                            effort = "high", thinking = true })
    local body = assert(codec.encode(m, U.conversation()))
    expect(json.encode(body)).to_match('"required":%[%]')
    expect(body.store).to_be(false)
    U.golden("request_openai-responses", body)
  end)

  it("replays reasoning only to its own provider and only with id and encrypted content", function()
    local req = { messages = { { role = "assistant", content = {
      { type = "thinking", thinking = "a", signature = "sig", source = "anthropic" },
      { type = "thinking", thinking = "b", signature = "enc", id = "rs_2" },  -- no source: ours
      { type = "thinking", thinking = "c", id = "rs_3", source = "openai-responses" }, -- no content
      { type = "thinking", thinking = "", signature = "enc4", id = "rs_4", source = "openai-responses" },
      { type = "text", text = "t" } } } } }
    local body = assert(codec.encode(MODEL, req))
    expect(json.encode(body.input)).to_be(
      '[{"encrypted_content":"enc","id":"rs_2","summary":[{"text":"b","type":"summary_text"}],"type":"reasoning"},'
      .. '{"encrypted_content":"enc4","id":"rs_4","summary":[],"type":"reasoning"},'
      .. '{"content":[{"text":"t","type":"output_text"}],"role":"assistant"}]')
    expect(body.reasoning).to_be_nil()
    expect(body.include).to_be_nil()
  end)

  it("asks for reasoning when thinking is on without an effort; tool_choice strings", function()
    local req = U.conversation()
    req.tool_choice = "required"
    local body = codec.encode(U.model("openai-responses", { thinking = true }), req)
    expect(body.reasoning).to_equal({ summary = "auto" })
    expect(json.encode(body.include)).to_be('["reasoning.encrypted_content"]')
    expect(body.tool_choice).to_be("required")
  end)

  it("refuses stop sequences, which the Responses API does not have", function()
    local body, err = codec.encode(U.model("openai-responses", { stop = { "END" } }), U.conversation())
    expect(body).to_be_nil()
    expect(err).to_match("no stop sequences")
    expect(codec.path).to_be("/responses")
    expect(codec.headers(MODEL, "k")).to_equal({ authorization = "Bearer k" })
  end)
end)
