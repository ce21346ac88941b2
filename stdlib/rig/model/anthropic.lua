-- rig.model.anthropic: the codec for provider "anthropic" (the Messages API).
--
-- encode turns the normalized request (see stdlib/rig/model.lua) into the body
-- of POST {base}/messages; decoder turns the stream's SSE events into the
-- normalized chunks of stdlib/rig/model/accum.lua; classify types a non-2xx
-- answer. The event type is read from the JSON, never from the `event:` line.

local json = require "rig.json"
local cache = require "rig.model.cache"
local media = require "rig.model.media"

local codec = {}

codec.default_base_url = "https://api.anthropic.com/v1"
codec.path = "/messages"

local API_VERSION = "2023-06-01"
local MIN_BUDGET = 1024          -- the smallest thinking budget the API accepts
local MAX_MESSAGE = 300          -- bytes of a provider's error text kept in a message

-- Share of max_tokens given to thinking, per effort.
local BUDGET_SHARE = {
  minimal = 0.10, low = 0.25, medium = 0.50, high = 0.75, xhigh = 0.85, max = 0.90,
}

function codec.headers(model, key)
  local h = {
    ["anthropic-version"] = API_VERSION,
    ["content-type"] = "application/json",
  }
  if key ~= nil then h["x-api-key"] = key end
  for name, value in pairs(model.headers or {}) do
    h[string.lower(name)] = value
  end
  return h
end

-- Request encoding ----------------------------------------------------------

local function array(t) return json.array(t or {}) end

-- A tool call's input: the raw argument text when it is a JSON object (kept
-- byte for byte), else the decoded table; never an array, so {} not [].
local tool_input = require("rig.model.request").tool_input

local function text_block(text)
  if type(text) ~= "string" or text == "" then return nil end  -- the API rejects empty text
  return { type = "text", text = text }
end

-- One assistant block on the wire, or nil when it is not sent to Anthropic.
local function assistant_block(b)
  local t = b.type
  if t == "text" or t == "refusal" then
    -- Anthropic has no refusal block; the words the model said stay in the history.
    return text_block(b.text)
  elseif t == "tool_use" then
    return { type = "tool_use", id = b.id, name = b.name, input = tool_input(b) }
  elseif t == "thinking" then
    -- Signed and redacted thinking is only valid for the provider that issued it;
    -- thinking without a signature is rejected, so it is dropped too.
    if b.source ~= nil and b.source ~= "anthropic" then return nil end
    if type(b.redacted) == "string" and b.redacted ~= "" then
      return { type = "redacted_thinking", data = b.redacted }
    end
    if type(b.signature) ~= "string" or b.signature == "" then return nil end
    return { type = "thinking", thinking = b.thinking or "", signature = b.signature }
  end
  return nil
end

-- An image or document block: base64 (or text) source, or a URL.
local function media_block(b)
  local src
  if b.url then
    src = { type = "url", url = b.url }
  elseif b.media_type == "text/plain" then
    src = { type = "text", media_type = "text/plain", data = media.text(b) }
  else
    src = { type = "base64", media_type = b.media_type, data = media.b64(b) }
  end
  local out = { type = b.type, source = src }
  if b.type == "document" and b.name then out.title = b.name end
  return out
end

local function tool_result_block(b)
  local content = b.content
  if type(content) == "table" then
    local list = {}
    for _, c in ipairs(content) do
      local tb
      if media.is_media(c.type) then tb = media_block(c) else tb = text_block(c.text) end
      if tb then list[#list + 1] = tb end
    end
    content = array(list)
  elseif content == nil then
    content = ""
  end
  local out = { type = "tool_result", tool_use_id = b.tool_use_id, content = content }
  if b.is_error then out.is_error = true end
  return out
end

-- Converts one normalized message into (wire role, results, other blocks);
-- the wire blocks of text blocks hinted `cache = true` go on `hinted`.
local function wire_blocks(m, hinted)
  local results, others = {}, {}
  if m.role == "assistant" then
    for _, b in ipairs(m.content) do
      local wb = assistant_block(b)
      if wb then
        others[#others + 1] = wb
        if b.cache then hinted[#hinted + 1] = wb end
      end
    end
    return "assistant", results, others
  end
  for _, b in ipairs(m.content) do
    if b.type == "tool_result" then
      results[#results + 1] = tool_result_block(b)
    else
      local wb
      if media.is_media(b.type) then wb = media_block(b) else wb = text_block(b.text) end
      if wb then
        others[#others + 1] = wb
        if b.cache then hinted[#hinted + 1] = wb end
      end
    end
  end
  return "user", results, others
end

-- Consecutive messages of one wire role become one turn ("tool" messages are
-- user turns); in a user turn every tool_result comes before any text, as
-- the API requires. Messages left empty (say, only another provider's
-- thinking) are dropped before merging.
local function encode_messages(messages, hinted)
  local turns = {}
  local cur
  for _, m in ipairs(messages) do
    local role, results, others = wire_blocks(m, hinted)
    if #results == 0 and #others == 0 then goto continue end    -- nothing left to send
    if cur == nil or cur.role ~= role then
      cur = { role = role, results = {}, others = {} }
      turns[#turns + 1] = cur
    end
    table.move(results, 1, #results, #cur.results + 1, cur.results)
    table.move(others, 1, #others, #cur.others + 1, cur.others)
    ::continue::
  end
  local out = {}
  for i, t in ipairs(turns) do
    local content = t.results
    table.move(t.others, 1, #t.others, #content + 1, content)
    out[i] = { role = t.role, content = array(content) }
  end
  return array(out)
end

local function encode_tool_choice(choice)
  if choice == "auto" then return { type = "auto" } end
  if choice == "required" then return { type = "any" } end
  if choice == "none" then return { type = "none" } end
  return { type = "tool", name = choice.name }
end

-- The thinking budget for the model's effort (medium when unset).
local function thinking_budget(model, max_tokens)
  local share = BUDGET_SHARE[model.effort or "medium"]
  if share == nil then
    return nil, "anthropic: unknown effort '" .. tostring(model.effort) .. "'"
  end
  local budget = math.max(MIN_BUDGET, math.floor(max_tokens * share))
  if budget >= max_tokens then
    return nil, "anthropic: thinking needs 'max_tokens' above " .. budget
      .. " (it is " .. max_tokens .. ")"
  end
  return budget
end

function codec.encode(model, req)
  local max_tokens = model.max_tokens or 4096
  local hinted = {}
  local body = {
    model = model.name,
    max_tokens = max_tokens,
    messages = encode_messages(req.messages, hinted),
    stream = true,
  }
  if req.system ~= nil and req.system ~= "" then body.system = req.system end
  if model.thinking then
    -- The API rejects thinking with forced tool use; say so before sending.
    local choice = req.tool_choice
    if choice == "required" or type(choice) == "table" then
      return nil, "anthropic: thinking cannot be combined with a forced tool_choice"
        .. " ('required' or a named tool)"
    end
    local budget, err = thinking_budget(model, max_tokens)
    if budget == nil then return nil, err end
    body.thinking = { type = "enabled", budget_tokens = budget }
  else
    body.temperature = model.temperature
    body.top_p = model.top_p
  end
  if model.stop ~= nil then
    local stop = {}
    for i, s in ipairs(model.stop) do stop[i] = s end
    if #stop > 0 then body.stop_sequences = array(stop) end
  end
  if req.tools ~= nil and #req.tools > 0 then
    local tools = {}
    for i, t in ipairs(req.tools) do
      tools[i] = { name = t.name, description = t.description, input_schema = t.schema }
    end
    body.tools = array(tools)
  end
  -- The API accepts tool_choice only next to tools; without tools "auto" and
  -- "none" mean the same as nothing.
  if req.tool_choice ~= nil and body.tools then
    body.tool_choice = encode_tool_choice(req.tool_choice)
  end
  if req.output_schema ~= nil then
    body.output_config = { format = { type = "json_schema", schema = req.output_schema.schema } }
  end
  -- prompt caching: breakpoints by the model's policy (rig.model.cache)
  local ok, err = cache.anthropic(model.cache, body, hinted)
  if not ok then return nil, err end
  return body
end

-- Errors --------------------------------------------------------------------

local TYPE_CODES = {
  authentication_error = "auth",
  permission_error = "auth",
  rate_limit_error = "rate_limited",
  overloaded_error = "overloaded",
  api_error = "server",
  server_error = "server",
  timeout_error = "timeout",
  invalid_request_error = "invalid_request",
  not_found_error = "invalid_request",
  request_too_large = "invalid_request",
}

local function too_long(message)
  return type(message) == "string" and message:lower():find("prompt is too long", 1, true) ~= nil
end

-- Returns the error object of an Anthropic error body, or nil.
local function error_of(body)
  if type(body) ~= "table" then return nil end
  local e = body.error
  if type(e) ~= "table" then return nil end
  return e
end

local function classify(status, e)
  local ptype = e and type(e.type) == "string" and e.type or nil
  local message = e and e.message
  if ptype == "context_length_exceeded" or too_long(message) then
    return "context_length", ptype
  end
  local code = ptype and TYPE_CODES[ptype]
  if code then return code, ptype end
  if status == 401 or status == 403 then return "auth", ptype end
  if status == 429 then return "rate_limited", ptype end
  if status == 529 then return "overloaded", ptype end
  if status == 408 then return "timeout", ptype end
  if status and status >= 500 then return "server", ptype end
  if status and status >= 400 then return "invalid_request", ptype end
  return "server", ptype
end

function codec.classify(status, body, headers) -- luacheck: ignore headers
  return classify(status, error_of(body))
end

-- Stream decoding -----------------------------------------------------------

local FINISH = {
  end_turn = "stop", stop_sequence = "stop", pause_turn = "stop",
  max_tokens = "length", model_context_window_exceeded = "length",
  tool_use = "tool_use", refusal = "refusal",
}

local USAGE_FIELDS = {
  input_tokens = "input_tokens",
  output_tokens = "output_tokens",
  cache_read_input_tokens = "cache_read_tokens",
  cache_creation_input_tokens = "cache_creation_tokens",
}

-- Which chunk type a block's deltas become, by content_block.type; false for
-- blocks that are not passed on (server tools, their results).
local BLOCK_CHUNK = {
  text = "text", thinking = "thinking", redacted_thinking = "thinking", tool_use = "tool_use",
}

local decoder = {}
decoder.__index = decoder

local function protocol(what)
  return nil, "anthropic: malformed stream event: " .. what, "protocol"
end

local function short(s)
  if type(s) ~= "string" then return nil end
  if #s > MAX_MESSAGE then s = s:sub(1, MAX_MESSAGE) .. "..." end
  return s
end

-- Folds a usage object into dec.usage: counts are cumulative, so the last
-- non-null value wins; null means "not reported".
local function merge_usage(self, u)
  if u == nil or u == json.null then return true end
  if type(u) ~= "table" then return protocol("usage is not an object") end
  for wire, name in pairs(USAGE_FIELDS) do
    local v = u[wire]
    if v ~= nil and v ~= json.null then
      local n = type(v) == "number" and math.tointeger(v)
      if not n or n < 0 then return protocol("usage '" .. wire .. "' is not a count") end
      self.usage = self.usage or {}
      self.usage[name] = n
    end
  end
  return true
end

local function index_of(ev)
  local i = ev.index
  if type(i) ~= "number" then return nil end
  return math.tointeger(i) or i
end

local function opt_string(v)
  return v == nil or v == json.null or type(v) == "string"
end

local function nonempty(s) return type(s) == "string" and s ~= "" end

function decoder:block_start(ev)
  local i = index_of(ev)
  local cb = ev.content_block
  if i == nil then return protocol("content_block_start without an index") end
  if type(cb) ~= "table" then return protocol("content_block_start without a block") end
  local t = cb.type
  local kind = BLOCK_CHUNK[t] or false
  self.blocks[i] = kind
  if t == "text" then
    if not opt_string(cb.text) then return protocol("text block text is not a string") end
    if nonempty(cb.text) then self.emit({ type = "text", index = i, text = cb.text }) end
  elseif t == "thinking" then
    if not (opt_string(cb.thinking) and opt_string(cb.signature)) then
      return protocol("thinking block is malformed")
    end
    if nonempty(cb.thinking) or nonempty(cb.signature) then
      self.emit({ type = "thinking", index = i, source = "anthropic",
                  thinking = nonempty(cb.thinking) and cb.thinking or nil,
                  signature = nonempty(cb.signature) and cb.signature or nil })
    end
  elseif t == "redacted_thinking" then
    if not nonempty(cb.data) then return protocol("redacted_thinking block without data") end
    self.emit({ type = "thinking", index = i, redacted = cb.data, source = "anthropic" })
  elseif t == "tool_use" then
    if not (nonempty(cb.id) and nonempty(cb.name)) then
      return protocol("tool_use block without an id or name")
    end
    local c = { type = "tool_use", index = i, id = cb.id, name = cb.name }
    local input = cb.input
    if type(input) == "table" and next(input) ~= nil then
      local s = json.encode(input)
      if s == nil then return protocol("tool_use input cannot be encoded") end
      c.input_json = s
    end
    self.emit(c)
  end
  return true
end

-- Delta type -> chunk type and the field it fills.
local DELTAS = {
  text_delta = { "text", "text", "text" },
  thinking_delta = { "thinking", "thinking", "thinking" },
  signature_delta = { "thinking", "signature", "signature" },
  input_json_delta = { "tool_use", "partial_json", "input_json" },
}

function decoder:block_delta(ev)
  local i = index_of(ev)
  local d = ev.delta
  if i == nil then return protocol("content_block_delta without an index") end
  if type(d) ~= "table" then return protocol("content_block_delta without a delta") end
  local spec = DELTAS[d.type]
  if spec == nil then return true end            -- citations_delta and the unknown
  local kind = self.blocks[i]
  if kind == false then return true end          -- a block that is not passed on
  local v = d[spec[2]]
  if not opt_string(v) then return protocol(d.type .. " is not a string") end
  if not nonempty(v) then return true end
  local c = { type = spec[1], index = i, [spec[3]] = v }
  if spec[1] == "thinking" then c.source = "anthropic" end
  self.emit(c)
  return true
end

function decoder:message_start(ev)
  local m = ev.message
  if type(m) ~= "table" then return protocol("message_start without a message") end
  if nonempty(m.model) then self.model = m.model end
  return merge_usage(self, m.usage)
end

function decoder:message_delta(ev)
  local d = ev.delta
  if d ~= nil and type(d) ~= "table" then return protocol("message_delta delta is not an object") end
  local reason = d and d.stop_reason
  if reason ~= nil and reason ~= json.null then
    if type(reason) ~= "string" then return protocol("stop_reason is not a string") end
    self.finish_reason = FINISH[reason] or "stop"
  end
  return merge_usage(self, ev.usage)
end

function decoder:stream_error(ev)
  local e = type(ev.error) == "table" and ev.error or nil
  local code, ptype = classify(nil, e)
  local text = e and short(e.message)
  local msg = "anthropic: " .. (text or "error in the stream")
  if ptype then msg = msg .. " (" .. ptype .. ")" end
  return nil, msg, code, { provider_code = ptype, type = ptype }
end

-- Feeds one SSE event. Returns true, or nil, message, code [, detail].
-- The type inside the JSON decides; the `event:` name only stands in when the
-- JSON has none.
function decoder:feed(data, event)
  local ev, err = json.decode(data)
  if ev == nil then
    return nil, "anthropic: malformed stream event: " .. tostring(err):gsub("^json: ", ""), "protocol"
  end
  -- decoded arrays carry the array metatable; objects carry none
  if type(ev) ~= "table" or getmetatable(ev) ~= nil then return protocol("not an object") end
  local t = ev.type
  if t == nil then t = event end
  if t == "content_block_delta" then return self:block_delta(ev)
  elseif t == "content_block_start" then return self:block_start(ev)
  elseif t == "message_start" then return self:message_start(ev)
  elseif t == "message_delta" then return self:message_delta(ev)
  elseif t == "message_stop" then self.done = true; return true
  elseif t == "error" then return self:stream_error(ev)
  end
  return true                                    -- ping, content_block_stop, unknown
end

function codec.decoder(model, emit) -- luacheck: ignore model
  return setmetatable({ emit = emit, blocks = {}, done = false }, decoder)
end

return codec
