-- Helpers for the codec specs: a tiny SSE splitter, fixture loading, feeding
-- events through a decoder into rig.model.accum, and golden files.
--   local U = dofile((os.getenv("LUARIG_ROOT") or ".") .. "/tests/lua/model_codec_util.lua")
-- UPDATE=1 rewrites the golden files (then read them and check them by hand).
local json = require "rig.json"
local accum = require "rig.model.accum"

local U = {}
U.root = os.getenv("LUARIG_ROOT") or "."

function U.read(path)
  local f = assert(io.open(U.root .. "/" .. path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

-- text/event-stream body -> { {data, event}, ... }: data lines joined by "\n",
-- one leading space stripped, comments and unknown fields ignored, a blank line
-- dispatches, the last event is dispatched even without a blank line.
function U.sse(body)
  local events, data, event = {}, nil, nil
  local function dispatch()
    if data then events[#events + 1] = { data = table.concat(data, "\n"), event = event or "message" } end
    data, event = nil, nil
  end
  for line in (body:gsub("\r\n", "\n"):gsub("\r", "\n") .. "\n"):gmatch("(.-)\n") do
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

-- One SSE data payload per line (the .jsonl fixtures).
function U.jsonl(body)
  local events = {}
  for line in body:gmatch("[^\n]+") do events[#events + 1] = { data = line, event = "message" } end
  return events
end

-- Events from plain Lua values: each a table (encoded) or a string (as is).
function U.events(list)
  local out = {}
  for i, v in ipairs(list) do
    out[i] = { data = type(v) == "string" and v or assert(json.encode(v)), event = "message" }
  end
  return out
end

-- Feeds events to a fresh decoder; stops at the first failure.
-- Returns { chunks, message, usage, finish_reason, model, done, error = {msg, code, detail} }.
function U.decode(codec, model, events)
  local chunks, acc = json.array({}), accum.new()
  local dec = codec.decoder(model, function(c)
    chunks[#chunks + 1] = c
    acc:add(c)
  end)
  local r = { chunks = chunks }
  for _, e in ipairs(events) do
    local ok, msg, code, detail = dec:feed(e.data, e.event)
    if not ok then
      r.error = { msg = msg, code = code, detail = detail }
      break
    end
  end
  r.message = acc:message(dec.finish_reason == "length")
  r.usage, r.finish_reason, r.model, r.done = dec.usage, dec.finish_reason, dec.model, dec.done
  return r
end

-- Feeds `rounds` corrupted copies of `events` (a byte replaced, a payload cut
-- short) through the decoder; it must fail only by returning a code, never raise.
function U.corrupt(codec, model, events, rounds)
  local seed = 7
  local function rand(n)
    seed = (seed * 1103515245 + 12345) % 2147483648
    return seed % n + 1
  end
  local codes = {}
  for _ = 1, rounds do
    local list = {}
    for i, e in ipairs(events) do
      local d = e.data
      if #d > 0 and rand(4) == 1 then
        local p = rand(#d)
        d = d:sub(1, p - 1) .. string.char(rand(256) - 1) .. d:sub(p + 1)
      elseif #d > 0 and rand(8) == 1 then
        d = d:sub(1, rand(#d))
      end
      list[i] = { data = d, event = e.event }
    end
    local r = U.decode(codec, model, list)
    if r.error then
      assert(type(r.error.msg) == "string" and type(r.error.code) == "string", "error without message or code")
      codes[r.error.code] = true
    end
  end
  return codes
end

-- Compares json.encode(v, {indent = 2}) byte for byte with tests/model/golden/NAME.json.
function U.golden(name, v)
  local text = assert(json.encode(v, { indent = 2 })) .. "\n"
  local path = U.root .. "/tests/model/golden/" .. name .. ".json"
  if os.getenv("UPDATE") == "1" then
    local f = assert(io.open(path, "wb"))
    f:write(text)
    f:close()
    return
  end
  local f = io.open(path, "rb")
  local want = f and f:read("a")
  if f then f:close() end
  if want ~= text then
    error("golden " .. name .. ".json differs; got:\n" .. text, 2)
  end
end

-- Compares text (a request body as the codec sends it, from m:encode(req,
-- { indent = 2 })) byte for byte with tests/model/golden/NAME.json.
function U.golden_text(name, text)
  text = text .. "\n"
  local path = U.root .. "/tests/model/golden/" .. name .. ".json"
  if os.getenv("UPDATE") == "1" then
    local f = assert(io.open(path, "wb"))
    f:write(text)
    f:close()
    return
  end
  local f = io.open(path, "rb")
  local want = f and f:read("a")
  if f then f:close() end
  if want ~= text then
    error("golden " .. name .. ".json differs; got:\n" .. text, 2)
  end
end

-- A model table as rig.model hands it to a codec.
function U.model(provider, over)
  local m = { provider = provider, name = "test-model", base_url = "http://127.0.0.1:1",
              max_tokens = 4096, thinking = false, tools = true, headers = {} }
  for k, v in pairs(over or {}) do m[k] = v end
  return m
end

-- The golden-request conversation, normalized as rig.model.request leaves it:
-- system, user text, assistant text + thinking (signed) + two tool calls, tool
-- results (one an error), tools (one with an empty `required`), a named
-- tool_choice and an output schema.
function U.conversation()
  return {
    system = "You are terse.",
    messages = {
      { role = "user", content = { { type = "text", text = "Weather in Paris and the AAPL price?" } } },
      { role = "assistant", content = {
          { type = "thinking", thinking = "Two lookups.", signature = "enc-sig-1", id = "rs_1",
            source = "openai-responses" },
          { type = "text", text = "Checking both." },
          { type = "tool_use", id = "call_1", name = "get_weather", input = { city = "Paris" },
            input_json = '{"city": "Paris"}' },
          { type = "tool_use", id = "call_2", name = "get_stock", input = { ticker = "AAPL" } },
      } },
      { role = "tool", content = {
          { type = "tool_result", tool_use_id = "call_1", content = "18C, cloudy", is_error = false },
          { type = "tool_result", tool_use_id = "call_2",
            content = { { type = "text", text = "market closed" } }, is_error = true },
      } },
      { role = "user", content = { { type = "text", text = "Summarize." } } },
    },
    tools = {
      { name = "get_weather", description = "Weather for a city.",
        schema = { type = "object", properties = { city = { type = "string" } },
                   required = json.array({ "city" }) } },
      { name = "get_stock",
        schema = { type = "object", properties = { ticker = { type = "string" } },
                   required = json.array({}) } },
    },
    tool_choice = { name = "get_weather" },
    output_schema = { name = "summary", strict = true,
                      schema = { type = "object", properties = { text = { type = "string" } },
                                 required = json.array({ "text" }), additionalProperties = false } },
    stream = true,
  }
end

return U
