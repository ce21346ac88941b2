-- rig.model.responses: the OpenAI Responses API codec (provider
-- "openai-responses"), POST {base_url}/responses.
--
-- Requests are stateless: store = false, the whole conversation as input items
-- (messages, function_call, function_call_output, reasoning). With thinking or
-- an effort the request asks for reasoning summaries and the encrypted
-- reasoning content; a reasoning item comes back as a thinking block whose id
-- is the item id and whose signature is its encrypted_content, and is replayed
-- (only to this provider) as the same reasoning item.
--
-- The decoder keys every block by output_index. Terminal events:
-- response.completed and response.incomplete; response.failed and error are
-- typed errors (the error may sit at the top level or under `error`).
--
-- Chunk shapes: see rig.model.accum. Interface: docs/models.md, docs/design/models.md.

local json = require "rig.json"
local shared = require("rig.model.openai").shared
local cache = require "rig.model.cache"
local media = require "rig.model.media"

local array = json.array
local tointeger = math.tointeger

local PROVIDER = "openai-responses"

local codec = {
  default_base_url = "https://api.openai.com/v1",
  path = "/responses",
}

local INCOMPLETE = { max_output_tokens = "length", content_filter = "content_filter" }

local function str(v)
  if type(v) == "string" and v ~= "" then return v end
  return nil
end

local function fail(what) return nil, PROVIDER .. ": " .. what end

---------------------------------------------------------------------------
-- Request

function codec.headers(model, key)
  return shared.headers(model, key)
end

-- Thinking blocks this provider issued (or of unknown origin) that carry the
-- item id and the encrypted content; anything else cannot be replayed with
-- store = false and is dropped.
local function reasoning_item(b)
  if b.source ~= nil and b.source ~= PROVIDER then return nil end
  if not str(b.id) or not str(b.signature) then return nil end
  local summary = array({})
  if str(b.thinking) then summary[1] = { type = "summary_text", text = b.thinking } end
  return { type = "reasoning", id = b.id, encrypted_content = b.signature, summary = summary }
end

-- An image or document as an input part: input_image (a data: URL or the
-- image's URL), a PDF as input_file (file_data as a data: URL, or file_url),
-- plain text as input_text.
local function media_part(b)
  if b.type == "image" then
    return { type = "input_image", image_url = media.data_url(b), detail = "auto" }
  end
  if b.media_type == "text/plain" then
    local text = media.text(b)
    if not text then return fail("a text document by URL is not supported: give its text") end
    return { type = "input_text", text = "[" .. media.filename(b) .. "]\n" .. text }
  end
  if b.url then return { type = "input_file", file_url = b.url } end
  return { type = "input_file", filename = media.filename(b), file_data = media.data_url(b) }
end

-- A function_call_output's output: its text, or a list of input parts when the
-- result holds images or documents.
local function call_output(b)
  local c = b.content
  local has = false
  if type(c) == "table" then
    for _, x in ipairs(c) do if media.is_media(x.type) then has = true break end end
  end
  if not has then return shared.tool_result_text(b) end
  local parts = array({})
  if b.is_error then parts[1] = { type = "input_text", text = "Error:" } end
  for _, x in ipairs(c) do
    if media.is_media(x.type) then
      local p, err = media_part(x)
      if not p then return nil, err end
      parts[#parts + 1] = p
    else
      parts[#parts + 1] = { type = "input_text", text = x.text }
    end
  end
  return parts
end

-- Appends the input items of one message to `items`.
local function add_items(items, m)
  local role = m.role
  if role == "user" then
    local parts = array({})
    for _, b in ipairs(m.content) do
      if media.is_media(b.type) then
        local p, err = media_part(b)
        if not p then return nil, err end
        parts[#parts + 1] = p
      elseif b.type ~= "text" then
        return fail("unsupported block '" .. tostring(b.type) .. "' in a user message")
      else
        parts[#parts + 1] = { type = "input_text", text = b.text }
      end
    end
    items[#items + 1] = { role = "user", content = parts }
  elseif role == "assistant" then
    local parts -- the open assistant message, until a non-text item closes it
    for _, b in ipairs(m.content) do
      local t = b.type
      if t == "text" or t == "refusal" then
        if not parts then
          parts = array({})
          items[#items + 1] = { role = "assistant", content = parts }
        end
        parts[#parts + 1] = { type = "output_text", text = b.text }
      elseif t == "tool_use" then
        local args, err = shared.arguments(b)
        if not args then return fail("tool call '" .. tostring(b.name) .. "': " .. tostring(err)) end
        items[#items + 1] = { type = "function_call", call_id = b.id, name = b.name, arguments = args }
        parts = nil
      elseif t == "thinking" then
        local r = reasoning_item(b)
        if r then
          items[#items + 1] = r
          parts = nil
        end
      else
        return fail("unsupported block '" .. tostring(t) .. "' in an assistant message")
      end
    end
  elseif role == "tool" then
    for _, b in ipairs(m.content) do
      if b.type ~= "tool_result" then return fail("unsupported block '" .. tostring(b.type) .. "' in a tool message") end
      local out, err = call_output(b)
      if out == nil then return nil, err end
      items[#items + 1] = { type = "function_call_output", call_id = b.tool_use_id, output = out }
    end
  else
    return fail("unsupported role '" .. tostring(role) .. "'")
  end
  return true
end

function codec.encode(model, req)
  if model.stop and #model.stop > 0 then
    return fail("the Responses API has no stop sequences (model.stop)")
  end
  local items = array({})
  for _, m in ipairs(req.messages or {}) do
    local ok, err = add_items(items, m)
    if not ok then return nil, err end
  end
  local body = { model = model.name, input = items, stream = true, store = false,
                 max_output_tokens = model.max_tokens,
                 temperature = model.temperature, top_p = model.top_p }
  if req.system ~= nil and req.system ~= "" then body.instructions = req.system end
  if model.thinking or model.effort then
    body.reasoning = { effort = shared.effort(model.effort), summary = "auto" }
    body.include = array({ "reasoning.encrypted_content" })
  end
  if req.tools and #req.tools > 0 then
    local tools = array({})
    for i, t in ipairs(req.tools) do
      -- strict defaults to true here, which rejects most hand-written schemas
      tools[i] = { type = "function", name = t.name, description = t.description,
                   parameters = t.schema or { type = "object", properties = {} },
                   strict = false }
    end
    body.tools = tools
    local tc = req.tool_choice
    if type(tc) == "table" then tc = { type = "function", name = tc.name } end
    body.tool_choice = tc
  end
  local out = req.output_schema
  if out then
    body.text = { format = { type = "json_schema", name = out.name,
                             description = out.description, schema = out.schema,
                             strict = out.strict ~= false } }
  end
  cache.openai(model.cache, body, req)
  return body
end

---------------------------------------------------------------------------
-- Response

function codec.classify(status, body) return shared.classify_body(status, body) end

local function usage_of(u)
  return shared.usage(u, "input_tokens", "output_tokens", "input_tokens_details",
                      "output_tokens_details")
end

local function protocol(what)
  return nil, PROVIDER .. ": " .. what, "protocol"
end

function codec.decoder(model, emit)
  local dec = { done = false }
  local calls = {}    -- output_index -> true for function_call items
  local args = {}     -- output_index -> true once argument deltas arrived
  local summary = {}  -- output_index -> true once summary text arrived
  local any_call = false

  local function index_of(obj)
    local i = obj.output_index
    i = type(i) == "number" and tointeger(i)
    if not i or i < 0 then return nil end
    return i
  end

  local function take_response(self, r)
    if type(r) ~= "table" then return true end
    if str(r.model) then self.model = r.model end
    if type(r.usage) == "table" then
      local u, err = usage_of(r.usage)
      if u == nil then return protocol(err) end
      if u then self.usage = u end
    end
    return true
  end

  local function item_added(i, item)
    if item.type == "function_call" then
      calls[i], any_call = true, true
      emit({ type = "tool_use", index = i, id = str(item.call_id), name = str(item.name) })
    elseif item.type == "reasoning" then
      emit({ type = "thinking", index = i, id = str(item.id), source = PROVIDER,
             signature = str(item.encrypted_content) })
    end
  end

  local function item_done(i, item)
    if item.type == "function_call" then
      any_call = true
      local a = not args[i] and str(item.arguments) or nil
      if not calls[i] or a then
        calls[i] = true
        emit({ type = "tool_use", index = i, id = str(item.call_id), name = str(item.name), input_json = a })
      end
    elseif item.type == "reasoning" then
      local text
      if not summary[i] and type(item.summary) == "table" then
        local parts = {}
        for _, s in ipairs(item.summary) do
          if type(s) == "table" and str(s.text) then parts[#parts + 1] = s.text end
        end
        text = str(table.concat(parts, "\n\n"))
      end
      emit({ type = "thinking", index = i, id = str(item.id), source = PROVIDER,
             signature = str(item.encrypted_content), thinking = text })
    end
  end

  local DELTA = {
    ["response.output_text.delta"] = "text",
    ["response.refusal.delta"] = "refusal",
    ["response.reasoning_summary_text.delta"] = "thinking",
    ["response.function_call_arguments.delta"] = "tool_use",
  }

  function dec:feed(data, event)
    local obj = json.decode(data)
    -- decoded arrays carry the array metatable; objects carry none
    if type(obj) ~= "table" or getmetatable(obj) ~= nil then
      return protocol("malformed stream event (not a JSON object)")
    end
    local t = str(obj.type) or event
    local kind = DELTA[t]
    if kind then
      local i = index_of(obj)
      if not i then return protocol(t .. " without a valid output_index") end
      local d = str(obj.delta)
      if d then
        if kind == "thinking" then
          summary[i] = true
          emit({ type = "thinking", index = i, thinking = d, source = PROVIDER })
        elseif kind == "tool_use" then
          args[i] = true
          emit({ type = "tool_use", index = i, input_json = d })
        else
          emit({ type = kind, index = i, text = d })
        end
      end
    elseif t == "response.output_item.added" or t == "response.output_item.done" then
      local i = index_of(obj)
      if not i then return protocol(t .. " without a valid output_index") end
      local item = obj.item
      if type(item) ~= "table" then return protocol(t .. " without an item") end
      if t == "response.output_item.added" then item_added(i, item) else item_done(i, item) end
    elseif t == "response.reasoning_summary_part.added" then
      -- parts of one summary are paragraphs
      local i = index_of(obj)
      local si = type(obj.summary_index) == "number" and obj.summary_index or 0
      if i and si > 0 and summary[i] then
        emit({ type = "thinking", index = i, thinking = "\n\n", source = PROVIDER })
      end
    elseif t == "response.created" or t == "response.in_progress" then
      return take_response(self, obj.response)
    elseif t == "response.completed" or t == "response.incomplete" then
      local ok, err, code = take_response(self, obj.response)
      if not ok then return ok, err, code end
      if t == "response.completed" then
        self.finish_reason = any_call and "tool_use" or "stop"
      else
        local r = type(obj.response) == "table" and obj.response or {}
        local d = type(r.incomplete_details) == "table" and r.incomplete_details or {}
        self.finish_reason = INCOMPLETE[d.reason] or "length"
      end
      self.done = true
    elseif t == "response.failed" then
      local r = type(obj.response) == "table" and obj.response or {}
      local e = r.error
      if type(e) ~= "table" then e = { message = "the response failed" } end
      return shared.stream_error(PROVIDER, { error = e })
    elseif t == "error" then
      return shared.stream_error(PROVIDER, obj)
    end
    return true
  end

  return dec
end

return codec
