-- The Anthropic Messages codec: request bodies, stream decoding, error typing.
-- Golden files: tests/model/golden/; UPDATE_GOLDEN=1 rewrites them (then READ them).
local json = require "rig.json"
local accum = require "rig.model.accum"
local codec = require "rig.model.anthropic"

local GOLDEN = "tests/model/golden/"

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

-- Compares text with a golden file, naming the first line that differs.
local function golden(name, text)
  local path = GOLDEN .. name
  if os.getenv("UPDATE_GOLDEN") then
    local f = assert(io.open(path, "wb"))
    f:write(text)
    f:close()
  end
  local want = read(path)
  if want == text then return end
  local ln = 1
  local a, b = want .. "\n", text .. "\n"
  local pa, pb = a:gmatch("([^\n]*)\n"), b:gmatch("([^\n]*)\n")
  while true do
    local x, y = pa(), pb()
    if x ~= y then
      error(string.format("%s differs at line %d:\n  want %s\n  got  %s", path, ln,
                          tostring(x), tostring(y)), 2)
    end
    ln = ln + 1
  end
end

-- A small SSE splitter: "event:" and "data:" fields (one optional space
-- after the colon), data lines joined by "\n", a blank line dispatches, the
-- last event is dispatched even without a trailing blank line.
local function sse_events(text)
  local events, data, event = {}, nil, nil
  local function dispatch()
    if data then events[#events + 1] = { data = table.concat(data, "\n"), event = event or "message" } end
    data, event = nil, nil
  end
  for line in (text:gsub("\r\n", "\n") .. "\n"):gmatch("([^\n]*)\n") do
    if line == "" then
      dispatch()
    elseif line:sub(1, 1) ~= ":" then
      local field, value = line:match("^([^:]*):? ?(.*)$")
      if field == "data" then
        data = data or {}
        data[#data + 1] = value
      elseif field == "event" then
        event = value
      end
    end
  end
  dispatch()
  return events
end

local function jsonl_events(text)
  local events = {}
  for line in text:gmatch("[^\n]+") do events[#events + 1] = { data = line, event = "message" } end
  return events
end

-- Feeds events to a fresh decoder; returns the chunks, the decoder, the
-- accumulator and the first failure (nil, msg, code, detail) if any.
local function decode(events)
  local chunks, acc = {}, accum.new()
  local dec = codec.decoder({ provider = "anthropic", name = "claude" }, function(c)
    chunks[#chunks + 1] = c
    acc:add(c)
  end)
  for _, e in ipairs(events) do
    local ok, msg, code, detail = dec:feed(e.data, e.event)
    if not ok then return chunks, dec, acc, { msg = msg, code = code, detail = detail } end
  end
  return chunks, dec, acc
end

local function lines(...)
  local events = {}
  for i, s in ipairs({ ... }) do events[i] = { data = s, event = "message" } end
  return events
end

local function result_of(chunks, dec, acc)
  return json.encode({
    chunks = json.array(chunks),
    message = acc:message(dec.finish_reason == "length"),
    usage = dec.usage,
    finish_reason = dec.finish_reason,
    model = dec.model,
    done = dec.done,
  }, { indent = 2 }) .. "\n"
end

describe("anthropic decoder fixtures", function()
  it("decodes anthropic_tool_use.sse", function()
    local events = sse_events(read("tests/fixtures/anthropic_tool_use.sse"))
    expect(#events).to_be(15)
    expect(events[15].event).to_be("message_stop")
    local chunks, dec, acc, err = decode(events)
    expect(err).to_be_nil()
    expect(dec.done).to_be(true)
    golden("anthropic_tool_use.json", result_of(chunks, dec, acc))
  end)

  it("decodes anthropic_thinking_signature.jsonl", function()
    local events = jsonl_events(read("tests/fixtures/anthropic_thinking_signature.jsonl"))
    local chunks, dec, acc, err = decode(events)
    expect(err).to_be_nil()
    expect(dec.done).to_be(true)
    golden("anthropic_thinking_signature.json", result_of(chunks, dec, acc))
  end)
end)

local START = '{"type":"message_start","message":{"model":"claude-x","usage":{"input_tokens":10,'
  .. '"output_tokens":1,"cache_read_input_tokens":5,"cache_creation_input_tokens":null}}}'
local STOP = '{"type":"message_stop"}'

local function tool_start(i, id, name)
  return string.format('{"type":"content_block_start","index":%d,"content_block":'
    .. '{"type":"tool_use","id":"%s","name":"%s","input":{}}}', i, id, name)
end
local function args(i, s)
  return json.encode({ type = "content_block_delta", index = i,
                       delta = { type = "input_json_delta", partial_json = s } })
end
local function text_start(i)
  return string.format('{"type":"content_block_start","index":%d,"content_block":{"type":"text","text":""}}', i)
end
local function text(i, s)
  return json.encode({ type = "content_block_delta", index = i, delta = { type = "text_delta", text = s } })
end
local function finish(reason)
  return '{"type":"message_delta","delta":{"stop_reason":"' .. reason .. '"},"usage":{"output_tokens":7}}'
end

describe("anthropic decoder streams", function()
  it("turns empty tool arguments into {}", function()
    local chunks, dec, acc, err = decode(lines(START, tool_start(0, "toolu_a", "now"), args(0, ""),
      '{"type":"content_block_stop","index":0}', finish("tool_use"), STOP))
    expect(err).to_be_nil()
    expect(#chunks).to_be(1)
    local m = acc:message()
    expect(m.content[1].input_json).to_be("{}")
    expect(json.encode(m.content[1].input)).to_be("{}")
    expect(m.content[1].error).to_be_nil()
    expect(dec.finish_reason).to_be("tool_use")
  end)

  it("keeps a tool call with invalid arguments and an error on it", function()
    local _, _, acc, err = decode(lines(START, tool_start(0, "toolu_a", "f"), args(0, '{"a":'),
      args(0, "tru"), finish("tool_use"), STOP))
    expect(err).to_be_nil()
    local b = acc:message().content[1]
    expect(b.id).to_be("toolu_a")
    expect(b.name).to_be("f")
    expect(b.input_json).to_be('{"a":tru')
    expect(b.error).to_match("not valid JSON")
  end)

  it("cut-off arguments at max_tokens say so", function()
    local _, dec, acc = decode(lines(START, tool_start(3, "toolu_a", "f"), args(3, '{"a": "xy'),
      finish("max_tokens"), STOP))
    expect(dec.finish_reason).to_be("length")
    expect(acc:message(true).content[1].error).to_match("cut off")
  end)

  it("keys blocks by index with gaps and interleaving", function()
    local chunks, _, acc, err = decode(lines(START,
      text_start(5), tool_start(2, "toolu_b", "g"), args(2, '{"x":'), text(5, "hi "),
      tool_start(9, "toolu_c", "h"), args(9, "{}"), args(2, "1}"), text(5, "there"),
      finish("tool_use"), STOP))
    expect(err).to_be_nil()
    local m = acc:message()
    expect(#m.content).to_be(3)
    expect(m.content[1].type).to_be("tool_use")
    expect(m.content[1].id).to_be("toolu_b")
    expect(m.content[1].input.x).to_be(1)
    expect(m.content[2].type).to_be("text")
    expect(m.content[2].text).to_be("hi there")
    expect(m.content[3].id).to_be("toolu_c")
    expect(m.content[3].input_json).to_be("{}")
    -- id and name come once, with the block start; fragments carry only the index
    for _, c in ipairs(chunks) do
      if c.input_json then
        expect(c.id).to_be_nil()
        expect(c.name).to_be_nil()
      end
    end
  end)

  it("ignores unknown events, unknown deltas and blocks it does not pass on", function()
    local chunks, dec, acc, err = decode(lines(START,
      '{"type":"ping"}', '{"type":"future_event","x":[1,2]}', '{}',
      '{"type":"content_block_start","index":0,"content_block":{"type":"server_tool_use",'
        .. '"id":"srvtoolu_1","name":"web_search","input":{}}}',
      args(0, '{"query":"x"}'),
      '{"type":"content_block_start","index":1,"content_block":{"type":"web_search_tool_result"}}',
      text_start(2), text(2, "ok"),
      '{"type":"content_block_delta","index":2,"delta":{"type":"citations_delta","citation":{}}}',
      '{"type":"content_block_delta","index":2,"delta":{"type":"future_delta","v":1}}',
      finish("end_turn"), STOP))
    expect(err).to_be_nil()
    expect(#chunks).to_be(1)
    expect(#acc:message().content).to_be(1)
    expect(dec.done).to_be(true)
  end)

  it("emits redacted thinking with its data and source", function()
    local chunks, _, acc = decode(lines(START,
      '{"type":"content_block_start","index":0,"content_block":{"type":"redacted_thinking","data":"EmwKAhgBEgy"}}',
      '{"type":"content_block_stop","index":0}', finish("end_turn"), STOP))
    expect(chunks[1].redacted).to_be("EmwKAhgBEgy")
    expect(chunks[1].source).to_be("anthropic")
    local b = acc:message().content[1]
    expect(b.type).to_be("thinking")
    expect(b.redacted).to_be("EmwKAhgBEgy")
  end)

  it("leaves done false without message_stop", function()
    local _, dec, _, err = decode(lines(START, text_start(0), text(0, "partial")))
    expect(err).to_be_nil()
    expect(dec.done).to_be(false)
    expect(dec.finish_reason).to_be_nil()
  end)

  it("keeps usage cumulative: the last reported value wins, never summed", function()
    local _, dec = decode(lines(START,
      '{"type":"message_delta","delta":{"stop_reason":null},"usage":{"output_tokens":20,"input_tokens":null}}',
      '{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":30,'
        .. '"cache_creation_input_tokens":4}}', STOP))
    expect(dec.usage).to_equal({ input_tokens = 10, output_tokens = 30, cache_read_tokens = 5,
                                 cache_creation_tokens = 4 })
    expect(math.type(dec.usage.output_tokens)).to_be("integer")
    expect(dec.model).to_be("claude-x")
  end)

  it("has no usage until one is reported", function()
    local _, dec = decode(lines('{"type":"message_start","message":{"model":"m"}}'))
    expect(dec.usage).to_be_nil()
  end)

  it("maps every stop reason", function()
    local want = { end_turn = "stop", stop_sequence = "stop", pause_turn = "stop",
                   max_tokens = "length", tool_use = "tool_use", refusal = "refusal",
                   model_context_window_exceeded = "length", something_new = "stop" }
    for reason, fr in pairs(want) do
      local _, dec = decode(lines(finish(reason)))
      expect(dec.finish_reason).to_be(fr)
    end
  end)

  it("types in-stream error events with the provider's code", function()
    local cases = {
      { "overloaded_error", "Overloaded", "overloaded" },
      { "api_error", "Internal server error", "server" },
      { "rate_limit_error", "slow down", "rate_limited" },
      { "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum", "context_length" },
      { "authentication_error", "invalid x-api-key", "auth" },
    }
    for _, c in ipairs(cases) do
      local chunks, dec, _, err = decode(lines(START, text_start(0), text(0, "so far"),
        json.encode({ type = "error", error = { type = c[1], message = c[2] } })))
      expect(#chunks).to_be(1)
      expect(dec.done).to_be(false)
      expect(err.code).to_be(c[3])
      expect(err.msg).to_be("anthropic: " .. c[2] .. " (" .. c[1] .. ")")
      expect(err.detail.provider_code).to_be(c[1])
    end
    local _, _, _, err = decode({ { data = '{"error":{"type":"overloaded_error","message":"x"}}',
                                    event = "error" } })
    expect(err.code).to_be("overloaded")
    _, _, _, err = decode(lines('{"type":"error"}'))
    expect(err.code).to_be("server")
    expect(err.msg).to_be("anthropic: error in the stream")
    _, _, _, err = decode(lines(json.encode({ type = "error",
      error = { type = "api_error", message = string.rep("x", 1000) } })))
    expect(#err.msg).at_most(340)
  end)

  it("fails malformed events with 'protocol'", function()
    local bad = {
      '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}',
      "", "[1,2]", '"text"',
      '{"type":"content_block_start","content_block":{"type":"text","text":""}}',
      '{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","name":"f"}}',
      '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":5}}',
      '{"type":"message_start","message":{"usage":{"input_tokens":-1}}}',
      '{"type":"message_delta","delta":{},"usage":{"output_tokens":1.5}}',
      '{"type":"message_delta","delta":{},"usage":{"output_tokens":"7"}}',
    }
    for _, s in ipairs(bad) do
      local _, _, _, err = decode(lines(START, s, STOP))
      expect(err and err.code).to_be("protocol")
      expect(err.msg).to_match("^anthropic: malformed")
    end
  end)
end)

-- The normalized request of the golden conversation.
local function conversation()
  return {
    system = "You are a weather assistant. Answer briefly.",
    messages = {
      { role = "user", content = { { type = "text", text = "Weather in Paris and Lyon?" } } },
      { role = "assistant", content = {
        { type = "thinking", thinking = "Two cities: call the tool twice.", signature = "EqQBCkYIBxgC",
          source = "anthropic" },
        { type = "thinking", thinking = "from another provider", signature = "opaque",
          source = "openai-responses" },
        { type = "text", text = "Checking both." },
        { type = "tool_use", id = "toolu_01", name = "get_weather", input = { city = "Paris" },
          input_json = '{"city": "Paris"}' },
        { type = "tool_use", id = "toolu_02", name = "get_weather", input = { city = "Lyon" } },
      } },
      { role = "tool", content = {
        { type = "tool_result", tool_use_id = "toolu_01", content = "18°C, sunny", is_error = false } } },
      { role = "tool", content = {
        { type = "tool_result", tool_use_id = "toolu_02",
          content = { { type = "text", text = "station offline" } }, is_error = true } } },
      { role = "user", content = { { type = "text", text = "Reply as JSON." } } },
    },
    tools = {
      { name = "get_weather", description = "Current weather for a city.",
        schema = { type = "object", properties = { city = { type = "string" } },
                   required = { "city" } } },
      { name = "list_cities", schema = { type = "object", properties = {}, required = {} } },
    },
    tool_choice = "auto",
    output_schema = { name = "report", strict = true,
                      schema = { type = "object", properties = { summary = { type = "string" } },
                                 required = { "summary" }, additionalProperties = false } },
  }
end

-- The model table model.lua would pass; `over` replaces fields (json.null: unset).
local function model(over)
  local m = { provider = "anthropic", name = "claude-sonnet-4-5", base_url = codec.default_base_url,
              max_tokens = 8192, temperature = 0.2, top_p = 0.9, stop = { "END" },
              effort = "high", thinking = true, tools = true, headers = {} }
  for k, v in pairs(over or {}) do
    if v == json.null then m[k] = nil else m[k] = v end
  end
  return m
end

-- The same model through rig.model: validation and the request normalizer too.
local function rig_model(over)
  local def = { provider = "anthropic", name = "claude-sonnet-4-5", max_tokens = 8192,
                temperature = 0.2, top_p = 0.9, stop = { "END" }, effort = "high", thinking = true }
  for k, v in pairs(over or {}) do
    if v == json.null then def[k] = nil else def[k] = v end
  end
  return rig.model(def)
end

local function encoded(m, req)
  local body, err = codec.encode(m, req)
  assert(body, err)
  return assert(json.encode(body))
end

describe("anthropic encoder", function()
  it("matches the golden request body (thinking)", function()
    golden("request_anthropic.json", rig_model():encode(conversation(), { indent = 2 }) .. "\n")
  end)

  it("matches the golden request body (sampling, a named tool)", function()
    local req = conversation()
    req.tool_choice = { name = "get_weather" }
    local m = rig_model({ thinking = false, effort = json.null })
    golden("request_anthropic_sampling.json", m:encode(req, { indent = 2 }) .. "\n")
  end)

  it("refuses thinking with a forced tool choice", function()
    for _, choice in ipairs({ "required", { name = "get_weather" } }) do
      local req = conversation()
      req.tool_choice = choice
      local body, err = codec.encode(model(), req)
      expect(body).to_be_nil()
      expect(err).to_match("forced tool_choice")
    end
    local req = conversation()
    req.tool_choice = "required"
    expect(function() rig_model():encode(req) end).to_fail("rig.model: anthropic: thinking cannot")
  end)

  it("encodes an empty required as []", function()
    local s = rig_model():encode(conversation())
    expect(s).to_match('"properties":{},"required":%[%]')
    expect(s).to_match('"required":%["city"%]')
  end)

  it("merges same-role messages with tool results first", function()
    local req = { messages = {
      { role = "user", content = { { type = "text", text = "a" } } },
      { role = "user", content = { { type = "text", text = "b" } } },
      { role = "assistant", content = { { type = "tool_use", id = "t1", name = "f", input = {} } } },
      { role = "assistant", content = { { type = "text", text = "c" } } },
      { role = "user", content = { { type = "text", text = "d" } } },
      { role = "tool", content = { { type = "tool_result", tool_use_id = "t1", content = "r" } } },
      { role = "assistant", content = { { type = "thinking", thinking = "x", signature = "s",
                                          source = "openai-responses" } } },
      { role = "user", content = { { type = "text", text = "e" } } },
    } }
    local body = assert(codec.encode(model({ thinking = false }), req))
    expect(#body.messages).to_be(3)
    expect(json.encode(body.messages)).to_be('[{"content":[{"text":"a","type":"text"},'
      .. '{"text":"b","type":"text"}],"role":"user"},'
      .. '{"content":[{"id":"t1","input":{},"name":"f","type":"tool_use"},'
      .. '{"text":"c","type":"text"}],"role":"assistant"},'
      .. '{"content":[{"content":"r","tool_use_id":"t1","type":"tool_result"},'
      .. '{"text":"d","type":"text"},{"text":"e","type":"text"}],"role":"user"}]')
  end)

  it("replays tool input: raw object text verbatim, else the table, never []", function()
    local function input_of(b)
      local req = { messages = { { role = "assistant", content = { b } } } }
      return encoded(model(), req):match('"input":(.-),"name"')
    end
    expect(input_of({ type = "tool_use", id = "t", name = "f", input = { a = 1 },
                      input_json = '{ "a" : 1 }' })).to_be('{ "a" : 1 }')
    expect(input_of({ type = "tool_use", id = "t", name = "f", input = { a = 1 },
                      input_json = '{"a":' })).to_be('{"a":1}')
    expect(input_of({ type = "tool_use", id = "t", name = "f", input = { a = 1 },
                      input_json = '[1]' })).to_be('{"a":1}')
    expect(input_of({ type = "tool_use", id = "t", name = "f", input = {} })).to_be("{}")
    expect(input_of({ type = "tool_use", id = "t", name = "f", input = json.array({}) })).to_be("{}")
    expect(input_of({ type = "tool_use", id = "t", name = "f", input = { 1, 2 } })).to_be("{}")
  end)

  it("replays thinking only to its own provider", function()
    local req = { messages = { { role = "assistant", content = {
      { type = "thinking", thinking = "mine", signature = "sig1" },
      { type = "thinking", thinking = "", redacted = "opaque-data", source = "anthropic" },
      { type = "thinking", thinking = "other", signature = "sig2", source = "openai-responses" },
      { type = "thinking", thinking = "unsigned" },
      { type = "refusal", text = "I can't help with that." },
      { type = "text", text = "" },
    } } } }
    expect(json.encode(assert(codec.encode(model(), req)).messages)).to_be(
      '[{"content":[{"signature":"sig1","thinking":"mine","type":"thinking"},'
      .. '{"data":"opaque-data","type":"redacted_thinking"},'
      .. '{"text":"I can\'t help with that.","type":"text"}],"role":"assistant"}]')
  end)

  it("maps tool_choice", function()
    local function choice(c)
      local req = conversation()
      req.tool_choice = c
      return json.encode(assert(codec.encode(model({ thinking = false }), req)).tool_choice)
    end
    expect(choice("auto")).to_be('{"type":"auto"}')
    expect(choice("required")).to_be('{"type":"any"}')
    expect(choice("none")).to_be('{"type":"none"}')
    expect(choice({ name = "list_cities" })).to_be('{"name":"list_cities","type":"tool"}')
    local req = conversation()
    req.tool_choice = nil
    expect(assert(codec.encode(model(), req)).tool_choice).to_be_nil()
    req.tool_choice, req.tools = "none", nil
    local body = assert(codec.encode(model(), req))
    expect(body.tool_choice).to_be_nil()
    expect(body.tools).to_be_nil()
  end)

  it("budgets thinking by effort and drops sampling while thinking", function()
    local want = { minimal = 1024, low = 2500, medium = 5000, high = 7500, xhigh = 8500, max = 9000 }
    for effort, budget in pairs(want) do
      local body = assert(codec.encode(model({ max_tokens = 10000, effort = effort }), conversation()))
      expect(body.thinking.type).to_be("enabled")
      expect(body.thinking.budget_tokens).to_be(budget)
      expect(body.temperature).to_be_nil()
      expect(body.top_p).to_be_nil()
    end
    local body = assert(codec.encode(model({ max_tokens = 10000, effort = json.null }), conversation()))
    expect(body.thinking.budget_tokens).to_be(5000)
    body = assert(codec.encode(model({ max_tokens = 4096, effort = "low" }), conversation()))
    expect(body.thinking.budget_tokens).to_be(1024)
    local none, err = codec.encode(model({ max_tokens = 1024 }), conversation())
    expect(none).to_be_nil()
    expect(err).to_match("max_tokens")
  end)

  it("sends sampling, stop and max_tokens without thinking", function()
    local body = assert(codec.encode(model({ thinking = false, max_tokens = json.null }), conversation()))
    expect(body.thinking).to_be_nil()
    expect(body.temperature).to_be(0.2)
    expect(body.top_p).to_be(0.9)
    expect(body.max_tokens).to_be(4096)
    expect(body.stream).to_be(true)
    expect(json.encode(body.stop_sequences)).to_be('["END"]')
    local req = conversation()
    req.system, req.tools, req.tool_choice, req.output_schema = nil, nil, nil, nil
    body = assert(codec.encode(model({ thinking = false, stop = json.null, temperature = json.null,
                                             top_p = json.null }), req))
    local keys = {}
    for k in pairs(body) do keys[#keys + 1] = k end
    table.sort(keys)
    expect(table.concat(keys, " ")).to_be("max_tokens messages model stream")
  end)
end)

describe("anthropic headers and errors", function()
  it("sends the key, the version and the model's headers", function()
    local h = codec.headers(model({ headers = { ["Anthropic-Beta"] = "x-2025" } }), "sk-test")
    expect(h["x-api-key"]).to_be("sk-test")
    expect(h["anthropic-version"]).to_be("2023-06-01")
    expect(h["content-type"]).to_be("application/json")
    expect(h["anthropic-beta"]).to_be("x-2025")
    expect(codec.headers(model(), nil)["x-api-key"]).to_be_nil()
    expect(codec.path).to_be("/messages")
    expect(codec.default_base_url).to_be("https://api.anthropic.com/v1")
  end)

  it("classifies error responses", function()
    local function body(t, m) return { type = "error", error = { type = t, message = m } } end
    local cases = {
      { 401, body("authentication_error", "invalid x-api-key"), "auth", "authentication_error" },
      { 403, body("permission_error", "no"), "auth" },
      { 429, body("rate_limit_error", "slow"), "rate_limited" },
      { 529, body("overloaded_error", "Overloaded"), "overloaded" },
      { 529, nil, "overloaded" },
      { 500, body("api_error", "oops"), "server" },
      { 502, nil, "server" },
      { 408, nil, "timeout" },
      { 400, body("invalid_request_error", "messages: field required"), "invalid_request" },
      { 400, body("invalid_request_error", "prompt is too long: 201000 tokens > 200000 maximum"),
        "context_length" },
      { 404, body("not_found_error", "model: x"), "invalid_request" },
      { 413, body("request_too_large", "too big"), "invalid_request" },
      { 422, nil, "invalid_request" },
      { 401, nil, "auth" },
    }
    for _, c in ipairs(cases) do
      local code, pcode = codec.classify(c[1], c[2], {})
      expect(code).to_be(c[3])
      if c[4] then expect(pcode).to_be(c[4]) end
      if c[2] == nil then expect(pcode).to_be_nil() end
    end
  end)
end)
