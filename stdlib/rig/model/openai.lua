-- rig.model.openai: the OpenAI Chat Completions codec.
--
-- Serves two providers with one wire format:
--   "openai"             POST https://api.openai.com/v1/chat/completions
--   "openai-compatible"  the same at any base_url (Ollama, vLLM, llama.cpp):
--                        no key required, no default base_url, max_tokens
--                        instead of max_completion_tokens, no reasoning_effort,
--                        refusals sent back as text.
-- One codec table for both; behaviour follows model.provider (rig.model knows
-- that openai-compatible needs a base_url and no key).
--
-- The decoder reads only choice 0 and is tolerant of what compatible servers
-- do: usage missing, tool calls without index (the position in the delta list)
-- or id (a synthetic "call_<index>"), reasoning in `reasoning_content` or
-- `reasoning`, arguments sent as an object instead of a string.
--
-- Chunk shapes: see rig.model.accum. Interface: docs/models.md, docs/design/models.md.

local json = require "rig.json"
local cache = require "rig.model.cache"
local media = require "rig.model.media"

local array, null = json.array, json.null
local tointeger = math.tointeger

local codec = {
  default_base_url = "https://api.openai.com/v1",
  path = "/chat/completions",
}

-- OpenAI's reasoning_effort values; "max" is ours, the highest OpenAI has is xhigh.
local EFFORT = { minimal = "minimal", low = "low", medium = "medium", high = "high",
                 xhigh = "xhigh", max = "xhigh" }

local FINISH = { stop = "stop", length = "length", tool_calls = "tool_use",
                 function_call = "tool_use", content_filter = "content_filter" }

local MAX_MESSAGE = 300

-- Top-level fields of a chunk the decoder never reads: json.decode checks them
-- but builds nothing for them (a third of a typical chunk's decoding).
local UNREAD = { id = true, object = true, created = true, system_fingerprint = true,
                 service_tier = true, obfuscation = true }

---------------------------------------------------------------------------
-- Shared with rig.model.responses (same company, same error and usage style).

local shared = {}
codec.shared = shared

-- A token count from the wire: a non-negative integer, nil when absent or
-- null, false when it is something else.
function shared.count(v)
  if v == nil or v == null then return nil end
  if type(v) ~= "number" then return false end
  local n = tointeger(v)
  if n == nil or n < 0 then return false end
  return n
end

-- The provider's own message, short and on one line, or nil.
function shared.short(s)
  if type(s) ~= "string" or s == "" then return nil end
  s = s:gsub("%c+", " ")
  if #s > MAX_MESSAGE then s = s:sub(1, MAX_MESSAGE) .. "..." end
  return s
end

local function str(v)
  if type(v) == "string" and v ~= "" then return v end
  return nil
end

local function has(s, pat) return s:find(pat, 1, true) ~= nil end

-- Maps an HTTP status (or nil for an in-stream error) and the provider's code,
-- type and message to the model's error codes.
function shared.classify(status, pcode, ptype, message)
  local c = ((pcode or "") .. " " .. (ptype or "")):lower()
  local m = (message or ""):lower()
  local ctx = has(c, "context_length") or has(c, "exceed_context")
    or has(m, "context length") or has(m, "context window") or has(m, "context size")
    or has(m, "maximum context") or has(m, "prompt is too long")
  if status then
    if status == 401 or status == 403 then return "auth" end
    if status == 429 then return "rate_limited" end
    if status == 529 then return "overloaded" end
    if status == 408 then return "timeout" end
    if status == 400 or status == 404 or status == 413 or status == 422 then
      return ctx and "context_length" or "invalid_request"
    end
    if status >= 500 and status <= 599 then return "server" end
  end
  if has(c, "authentication") or has(c, "permission") or has(c, "invalid_api_key") then return "auth" end
  if has(c, "rate_limit") or has(c, "insufficient_quota") then return "rate_limited" end
  if has(c, "overloaded") then return "overloaded" end
  if ctx then return "context_length" end
  if has(c, "invalid") or has(c, "not_found") then return "invalid_request" end
  if has(c, "timeout") then return "timeout" end
  if status and status >= 400 and status <= 499 then return "invalid_request" end
  return "server"
end

-- The error object of a body or stream event: {error = {...}}, {error = "..."}
-- or the fields at the top level. Returns code, type, message, numeric status.
function shared.error_fields(obj)
  if type(obj) ~= "table" then return nil end
  local e = obj.error
  if type(e) == "string" then return nil, nil, e end
  if type(e) ~= "table" then e = obj end
  local code, status = e.code, nil
  if type(code) == "number" then status, code = tointeger(code), nil end
  local ptype = str(e.type)
  if ptype == "error" then ptype = nil end -- the Responses event type, not a kind
  return str(code), ptype, str(e.message), status
end

-- An in-stream error as the decoder returns it.
function shared.stream_error(provider, obj)
  local pcode, ptype, message, status = shared.error_fields(obj)
  local code = shared.classify(status, pcode, ptype, message)
  local msg = provider .. ": stream error: " .. (shared.short(message) or "no message")
  local tag = pcode or ptype
  if tag then msg = msg .. " (" .. tag .. ")" end
  return nil, msg, code, { provider_code = pcode or (status and tostring(status)), type = ptype }
end

-- rig.model adds content-type, accept and the model's own headers.
function shared.headers(model, key)
  local h = {}
  if key ~= nil and key ~= "" then h.authorization = "Bearer " .. key end
  return h
end

-- A tool_result's content as one string; is_error results say so first.
function shared.tool_result_text(b)
  local c = b.content
  local text
  if type(c) == "string" then
    text = c
  else
    local parts = {}
    for _, p in ipairs(c or {}) do
      if p.type == "text" then
        parts[#parts + 1] = p.text
      elseif p.type == "image" or p.type == "document" then
        parts[#parts + 1] = "[" .. p.type .. " " .. (p.name or p.media_type) .. " attached]"
      end
    end
    text = table.concat(parts, "\n")
  end
  if b.is_error then text = "Error: " .. text end
  return text
end

-- A tool call's arguments as a JSON string: the raw bytes the model sent
-- (replayed verbatim; rig.model.request keeps them only when they are a JSON
-- object), else the encoded input.
function shared.arguments(b)
  local raw = b.input_json
  if type(raw) == "string" and raw ~= "" then return raw end
  local s, err = json.encode(b.input or {})
  if s == nil then return nil, err end
  return s
end

function shared.effort(e) return e and EFFORT[e] end

local function copy_array(t)
  local out = array({})
  for i, v in ipairs(t) do out[i] = v end
  return out
end
shared.copy_array = copy_array

---------------------------------------------------------------------------
-- Request

function codec.headers(model, key)
  return shared.headers(model, key)
end

local function fail(model, what)
  return nil, model.provider .. ": " .. what
end

-- An image or document as a content part: image_url (a data: URL or the
-- image's URL), a PDF as a file part (its bytes as a data: URL; chat
-- completions fetches no document by URL), plain text as a text part.
local function media_part(model, b)
  if b.type == "image" then
    return { type = "image_url", image_url = { url = media.data_url(b) } }
  end
  if b.media_type == "text/plain" then
    local text = media.text(b)
    if not text then return fail(model, "a text document by URL is not supported: give its text") end
    return { type = "text", text = "[" .. media.filename(b) .. "]\n" .. text }
  end
  if b.url then return fail(model, "a PDF by URL is not supported: give its bytes") end
  return { type = "file", file = { filename = media.filename(b), file_data = media.data_url(b) } }
end

local function user_message(model, m)
  local parts = array({})
  local plain = true
  for _, b in ipairs(m.content) do
    if media.is_media(b.type) then
      local part, err = media_part(model, b)
      if not part then return nil, err end
      parts[#parts + 1] = part
      plain = false
    elseif b.type ~= "text" then
      return fail(model, "unsupported block '" .. tostring(b.type) .. "' in a user message")
    else
      parts[#parts + 1] = { type = "text", text = b.text }
    end
  end
  if #parts == 1 and plain then return { role = "user", content = parts[1].text } end
  return { role = "user", content = parts }
end

-- One assistant message: text concatenated, tool calls with their arguments as
-- a JSON string; thinking is never sent to chat completions. Nil when nothing
-- is left.
local function assistant_message(model, m)
  local compat = model.provider == "openai-compatible"
  local texts, refusals, calls = {}, {}, array({})
  for _, b in ipairs(m.content) do
    local t = b.type
    if t == "text" then
      texts[#texts + 1] = b.text
    elseif t == "refusal" then
      if compat then texts[#texts + 1] = b.text else refusals[#refusals + 1] = b.text end
    elseif t == "tool_use" then
      local args, err = shared.arguments(b)
      if not args then return fail(model, "tool call '" .. tostring(b.name) .. "': " .. tostring(err)) end
      calls[#calls + 1] = { id = b.id, type = "function",
                            ["function"] = { name = b.name, arguments = args } }
    elseif t ~= "thinking" then
      return fail(model, "unsupported block '" .. tostring(t) .. "' in an assistant message")
    end
  end
  local out = { role = "assistant" }
  if #texts > 0 then out.content = table.concat(texts) end
  if #refusals > 0 then out.refusal = table.concat(refusals) end
  if #calls > 0 then
    out.tool_calls = calls
    if out.content == nil then out.content = null end
  end
  if out.content == nil and out.refusal == nil then return false end
  return out
end

local function tool_choice(tc)
  if type(tc) == "table" then return { type = "function", ["function"] = { name = tc.name } } end
  return tc
end

function codec.encode(model, req)
  local compat = model.provider == "openai-compatible"
  local messages = array({})
  if req.system ~= nil and req.system ~= "" then
    messages[1] = { role = "system", content = req.system }
  end
  for _, m in ipairs(req.messages or {}) do
    if m.role == "user" then
      local msg, err = user_message(model, m)
      if not msg then return nil, err end
      messages[#messages + 1] = msg
    elseif m.role == "assistant" then
      local msg, err = assistant_message(model, m)
      if msg == nil then return nil, err end
      if msg then messages[#messages + 1] = msg end
    elseif m.role == "tool" then
      -- a tool message carries text only: a result's images and documents
      -- follow the tool messages as one user message that names the call
      local extra = array({})
      for _, b in ipairs(m.content) do
        if b.type ~= "tool_result" then
          return fail(model, "unsupported block '" .. tostring(b.type) .. "' in a tool message")
        end
        messages[#messages + 1] = { role = "tool", tool_call_id = b.tool_use_id,
                                    content = shared.tool_result_text(b) }
        if type(b.content) == "table" then
          local head = false
          for _, c in ipairs(b.content) do
            if media.is_media(c.type) then
              if not head then
                extra[#extra + 1] = { type = "text", text = "[the result of tool call "
                  .. tostring(b.tool_use_id) .. " holds:]" }
                head = true
              end
              local part, err = media_part(model, c)
              if not part then return nil, err end
              extra[#extra + 1] = part
            end
          end
        end
      end
      if #extra > 0 then messages[#messages + 1] = { role = "user", content = extra } end
    else
      return fail(model, "unsupported role '" .. tostring(m.role) .. "'")
    end
  end

  local body = { model = model.name, messages = messages, stream = true,
                 stream_options = { include_usage = true },
                 temperature = model.temperature, top_p = model.top_p }
  if compat then body.max_tokens = model.max_tokens else body.max_completion_tokens = model.max_tokens end
  if model.stop and #model.stop > 0 then body.stop = copy_array(model.stop) end
  if not compat and model.effort then body.reasoning_effort = shared.effort(model.effort) end

  if req.tools and #req.tools > 0 then
    local tools = array({})
    for i, t in ipairs(req.tools) do
      tools[i] = { type = "function", ["function"] = {
        name = t.name, description = t.description,
        parameters = t.schema or { type = "object", properties = {} } } }
    end
    body.tools = tools
    if req.tool_choice ~= nil then body.tool_choice = tool_choice(req.tool_choice) end
  end

  local out = req.output_schema
  if out then
    body.response_format = { type = "json_schema", json_schema = {
      name = out.name, description = out.description, schema = out.schema,
      strict = out.strict ~= false } }
  end
  -- prompt caching is automatic; the key keeps one conversation on one cache
  if not compat then cache.openai(model.cache, body, req) end
  return body
end

---------------------------------------------------------------------------
-- Response

-- Shared by both OpenAI APIs: the error of a non-2xx body.
function shared.classify_body(status, body)
  local pcode, ptype, message = shared.error_fields(body)
  return shared.classify(status, pcode, ptype, message), pcode or ptype
end

function codec.classify(status, body) return shared.classify_body(status, body) end

-- Usage of either API, whose fields differ only in name: the input count
-- includes cached tokens (subtracted here), the output count reasoning.
-- Returns the normalized table, false when nothing was reported, or nil and
-- a message for a count that is not one.
function shared.usage(u, input_key, output_key, input_details, output_details)
  local id = type(u[input_details]) == "table" and u[input_details] or {}
  local od = type(u[output_details]) == "table" and u[output_details] or {}
  local input, output = shared.count(u[input_key]), shared.count(u[output_key])
  local cached, reasoning = shared.count(id.cached_tokens), shared.count(od.reasoning_tokens)
  if input == false or output == false or cached == false or reasoning == false then
    return nil, "a usage count is not a non-negative integer"
  end
  if input == nil and output == nil then return false end
  local out = { output_tokens = output, cache_read_tokens = cached, reasoning_tokens = reasoning }
  if input then out.input_tokens = math.max(input - (cached or 0), 0) end
  return out
end

local function usage_of(u)
  return shared.usage(u, "prompt_tokens", "completion_tokens", "prompt_tokens_details",
                      "completion_tokens_details")
end

local function protocol(provider, what)
  return nil, provider .. ": " .. what, "protocol"
end

function codec.decoder(model, emit)
  local provider = model.provider
  local dec = { done = false }
  local started = {}   -- tool index -> true once its first chunk went out
  local named = {}     -- tool index -> true once it had a name
  local alias = {}     -- delta position (no index on the wire) -> tool index
  local top = -1       -- highest tool index seen

  -- Tool-call fragments by their index field. Without one, the position in the
  -- delta list; a named fragment at a position whose call already has a name
  -- starts a new call (servers that send whole calls in separate chunks).
  local function tool_calls(list)
    if type(list) ~= "table" then return protocol(provider, "tool_calls is not a list") end
    for pos, tc in ipairs(list) do
      if type(tc) ~= "table" then return protocol(provider, "a tool call is not an object") end
      local fn = type(tc["function"]) == "table" and tc["function"] or {}
      local id, name, args = str(tc.id), str(fn.name), fn.arguments
      if type(args) == "table" then
        args = json.encode(args)
      elseif type(args) ~= "string" or args == "" then
        args = nil
      end
      local idx = tc.index
      if idx == nil or idx == null then
        idx = alias[pos] or pos - 1
        if name and named[idx] then idx = top + 1 end
        alias[pos] = idx
      else
        idx = type(idx) == "number" and tointeger(idx)
        if not idx or idx < 0 then return protocol(provider, "a tool call index is not a non-negative integer") end
      end
      if id or name or args then
        if not started[idx] then
          started[idx] = true
          id = id or ("call_" .. idx)
        end
        if name then named[idx] = true end
        if idx > top then top = idx end
        emit({ type = "tool_use", index = idx, id = id, name = name, input_json = args })
      end
    end
    return true
  end

  -- The hot path: one call per streamed chunk, so no helper calls and no
  -- lookups of fields a plain content delta does not have.
  local function delta(d)
    local r = d.reasoning_content
    if r == nil then r = d.reasoning end
    if r ~= nil and type(r) == "string" and r ~= "" then
      emit({ type = "thinking", index = 0, thinking = r, source = provider })
    end
    local text = d.content
    if text ~= nil and type(text) == "string" and text ~= "" then
      emit({ type = "text", text = text })
    end
    local refusal = d.refusal
    if refusal ~= nil and type(refusal) == "string" and refusal ~= "" then
      emit({ type = "refusal", text = refusal })
    end
    local tc = d.tool_calls
    if tc ~= nil and tc ~= null then return tool_calls(tc) end
    return true
  end

  local decode, type = json.decode, type

  function dec:feed(data, event)
    if self.finished then return true end -- nothing counts after [DONE]
    if data == "[DONE]" then
      self.done, self.finished = true, true
      return true
    end
    -- with keys to skip, json.decode returns an object or fails
    local obj, jerr = decode(data, UNREAD)
    if obj == nil then
      return protocol(provider, "malformed stream event (" .. tostring(jerr):gsub("^json: ", "") .. ")")
    end
    local e = obj.error
    if e ~= nil and e ~= null then return shared.stream_error(provider, obj) end
    local mdl = obj.model
    if mdl ~= nil and mdl ~= self.model and type(mdl) == "string" and mdl ~= "" then
      self.model = mdl
    end

    local u = obj.usage
    if u ~= nil and type(u) == "table" then
      local usage, err = usage_of(u)
      if usage == nil then return protocol(provider, err) end
      if usage then self.usage = usage end
    end

    local choices = obj.choices
    if type(choices) ~= "table" then return true end
    local choice = choices[1]
    if type(choice) ~= "table" or (choice.index ~= 0 and choice.index ~= nil) then
      choice = nil
      for _, c in ipairs(choices) do
        if type(c) == "table" and c.index == 0 then
          choice = c
          break
        end
      end
      if not choice then return true end
    end
    -- A server that ignored stream=true sends one whole `message` instead.
    local d = choice.delta
    if type(d) ~= "table" then d = choice.message end
    if type(d) == "table" then
      local ok, msg, code = delta(d)
      if not ok then return ok, msg, code end
    end
    local fr = choice.finish_reason
    if fr ~= nil and fr ~= null and type(fr) == "string" and fr ~= "" then
      self.finish_reason = FINISH[fr] or "stop"
      self.done = true
    end
    return true
  end

  return dec
end

---------------------------------------------------------------------------


return codec
