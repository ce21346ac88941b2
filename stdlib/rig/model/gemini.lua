-- rig.model.gemini: the codec for provider "gemini" (Google's Gemini API,
-- generateContent streamed as server-sent events):
--   POST {base_url}/models/{name}:streamGenerateContent?alt=sse
-- with the key in x-goog-api-key (GEMINI_API_KEY, else GOOGLE_API_KEY).
--
-- Request: contents (role "user" or "model", parts), systemInstruction,
-- tools as functionDeclarations with parametersJsonSchema (JSON Schema as
-- given, not the OpenAPI subset of `parameters`), toolConfig, and
-- generationConfig (maxOutputTokens, sampling, stopSequences, thinkingConfig,
-- responseMimeType + responseJsonSchema for structured output).
--
-- Stream: every event is a whole GenerateContentResponse whose parts are the
-- new pieces: text, thought summaries (`thought: true`), whole functionCall
-- parts; the last event carries finishReason; usageMetadata is cumulative.
-- There is no terminal event: a stream is done once a candidate finished.
--
-- Thought signatures: Gemini signs its reasoning on the part that follows it
-- (a functionCall, a text, or an empty text part) and wants the signature
-- back on the same part. The decoder turns each signature into a thinking
-- block of its own (empty text, `signature`, source "gemini") just before the
-- block of its part; the encoder puts it back on the part that follows, so
-- no new block field is needed. Thought summaries are not sent back unless
-- they carry a signature; other providers' thinking is dropped.
--
-- Tool calls have no id on this API: the decoder makes one
-- ("call_<responseId>_<n>"); requests never send ids, and a function response
-- is matched to its call by name, found from the call's id in the history.
--
-- Chunk shapes: see rig.model.accum.

local json = require "rig.json"
local shared = require("rig.model.openai").shared
local media = require "rig.model.media"

local null = json.null
local tointeger = math.tointeger

local PROVIDER = "gemini"

local codec = {
  default_base_url = "https://generativelanguage.googleapis.com/v1beta",
  path = "/models/{name}:streamGenerateContent?alt=sse",
}

-- Share of max_tokens given to thinking, per effort (thinking counts toward
-- maxOutputTokens); the budget is kept within 512–24576, which every 2.5
-- model accepts.
local BUDGET_SHARE = {
  minimal = 0.10, low = 0.25, medium = 0.50, high = 0.75, xhigh = 0.85, max = 0.90,
}
local MIN_BUDGET, MAX_BUDGET = 512, 24576

local function str(v)
  if type(v) == "string" and v ~= "" then return v end
  return nil
end

local function fail(what) return nil, PROVIDER .. ": " .. what end

-- A model name: an id ("gemini-2.5-flash"), or a resource name
-- ("models/gemini-2.5-flash", "tunedModels/my-model"). It goes into the URL.
function codec.check_model(m)
  local n = m.name
  local kind, id = n:match("^(%a+)/(.+)$")
  if kind and kind ~= "models" and kind ~= "tunedModels" then
    return "field 'name' must be a Gemini model id or models/… or tunedModels/… (got '" .. n .. "')"
  end
  if not (id or n):match("^[%w][%w%._%-]*$") then
    return "field 'name' must be a Gemini model id: letters, digits, '.', '_' and '-' (got '"
      .. n .. "')"
  end
  return nil
end

function codec.url_path(model)
  local n = model.name
  if not n:find("/", 1, true) then n = "models/" .. n end
  return "/" .. n .. ":streamGenerateContent?alt=sse"
end

function codec.headers(model, key) -- luacheck: ignore model
  local h = {}
  if key ~= nil and key ~= "" then h["x-goog-api-key"] = key end
  return h
end

---------------------------------------------------------------------------
-- Request

-- A call's arguments: the raw object text the model sent (kept byte for
-- byte), else the decoded table; always an object.
local tool_args = require("rig.model.request").tool_input

-- Gemini-issued thinking: whether it can be sent back, and how.
local function own_thinking(b)
  return b.source == PROVIDER and str(b.signature) ~= nil
end

-- The parts of one assistant message; a signature-only thinking block rides
-- on the part after it.
local function model_parts(m)
  local parts = json.array({})
  local sig
  local function add(p)
    if sig then p.thoughtSignature, sig = sig, nil end
    parts[#parts + 1] = p
  end
  for _, b in ipairs(m.content) do
    local t = b.type
    if t == "text" or t == "refusal" then
      if b.text ~= "" or sig then add({ text = b.text }) end
    elseif t == "tool_use" then
      add({ functionCall = { name = b.name, args = tool_args(b) } })
    elseif t == "thinking" then
      if own_thinking(b) then
        if str(b.thinking) then
          if sig then add({ text = "" }) end
          parts[#parts + 1] = { text = b.thinking, thought = true, thoughtSignature = b.signature }
        else
          if sig then add({ text = "" }) end
          sig = b.signature
        end
      end
    else
      return fail("unsupported block '" .. tostring(t) .. "' in an assistant message")
    end
  end
  if sig then add({ text = "" }) end
  return parts
end

-- An image or document as a part: inlineData (base64), fileData (a URL),
-- plain text as a text part.
local function media_part(b)
  if b.media_type == "text/plain" then
    local text = media.text(b)
    if not text then return fail("a text document by URL is not supported: give its text") end
    return { text = "[" .. media.filename(b) .. "]\n" .. text }
  end
  if b.url then return { fileData = { mimeType = b.media_type, fileUri = b.url } } end
  return { inlineData = { mimeType = b.media_type, data = media.b64(b) } }
end

-- The function response of a tool result: {output = text} or {error = text}.
-- Its images and documents follow it as parts of the same user content.
local function function_response(b, names)
  local name = names[b.tool_use_id]
  if not name then
    return fail("tool result '" .. tostring(b.tool_use_id) .. "' answers no tool call in the request")
  end
  local c = b.content
  local text
  if type(c) == "string" then
    text = c
  else
    local list = {}
    for _, p in ipairs(c or {}) do
      if p.type == "text" then list[#list + 1] = p.text
      else list[#list + 1] = "[" .. p.type .. " " .. (p.name or p.media_type) .. " follows]" end
    end
    text = table.concat(list, "\n")
  end
  local extra = {}
  if type(c) == "table" then
    for _, p in ipairs(c) do
      if media.is_media(p.type) then
        local part, err = media_part(p)
        if not part then return nil, err end
        extra[#extra + 1] = part
      end
    end
  end
  return { functionResponse = { name = name,
    response = b.is_error and { error = text } or { output = text } } }, extra
end

-- Consecutive messages of one wire role make one content; in a user content
-- the function responses come before any text.
local function encode_contents(messages)
  local names = {}
  for _, m in ipairs(messages) do
    if m.role == "assistant" then
      for _, b in ipairs(m.content) do
        if b.type == "tool_use" then names[b.id] = b.name end
      end
    end
  end
  local contents = json.array({})
  local cur
  for _, m in ipairs(messages) do
    local role = m.role == "assistant" and "model" or "user"
    local results, others = {}, {}
    if m.role == "assistant" then
      local parts, err = model_parts(m)
      if not parts then return nil, err end
      others = parts
    else
      for _, b in ipairs(m.content) do
        if b.type == "tool_result" then
          local p, extra = function_response(b, names)
          if not p then return nil, extra end
          results[#results + 1] = p
          for _, x in ipairs(extra) do others[#others + 1] = x end
        elseif media.is_media(b.type) then
          local p, err = media_part(b)
          if not p then return nil, err end
          others[#others + 1] = p
        elseif b.type == "text" then
          if b.text ~= "" then others[#others + 1] = { text = b.text } end
        else
          return fail("unsupported block '" .. tostring(b.type) .. "' in a " .. m.role .. " message")
        end
      end
    end
    if #results > 0 or #others > 0 then
      if cur == nil or cur.role ~= role then
        cur = { role = role, results = {}, others = {} }
        contents[#contents + 1] = cur
      end
      table.move(results, 1, #results, #cur.results + 1, cur.results)
      table.move(others, 1, #others, #cur.others + 1, cur.others)
    end
  end
  for i, c in ipairs(contents) do
    local parts = json.array(c.results)
    table.move(c.others, 1, #c.others, #parts + 1, parts)
    contents[i] = { role = c.role, parts = parts }
  end
  return contents
end

local function tool_config(choice)
  local fc
  if choice == "auto" then fc = { mode = "AUTO" }
  elseif choice == "required" then fc = { mode = "ANY" }
  elseif choice == "none" then fc = { mode = "NONE" }
  else fc = { mode = "ANY", allowedFunctionNames = json.array({ choice.name }) } end
  return { functionCallingConfig = fc }
end

-- thinkingConfig: Gemini 3 takes a level, 2.5 a token budget. With thinking
-- the summaries come back (includeThoughts); an effort alone sets the depth;
-- neither leaves the model's default.
local function thinking_config(model)
  local effort = model.effort
  if not model.thinking and not effort then return nil end
  local cfg = { includeThoughts = model.thinking or nil }
  if model.name:match("gemini%-3") then
    if effort then
      cfg.thinkingLevel = (effort == "minimal" or effort == "low") and "low" or "high"
    end
    return cfg
  end
  if not effort then
    cfg.thinkingBudget = -1 -- dynamic: the model decides
    return cfg
  end
  local max_tokens = model.max_tokens or 4096
  local budget = math.floor(max_tokens * BUDGET_SHARE[effort])
  budget = math.max(MIN_BUDGET, math.min(MAX_BUDGET, budget))
  if budget >= max_tokens then
    return fail("thinking needs 'max_tokens' above " .. budget .. " (it is " .. max_tokens .. ")")
  end
  cfg.thinkingBudget = budget
  return cfg
end

function codec.encode(model, req)
  local contents, err = encode_contents(req.messages or {})
  if not contents then return nil, err end
  local gen = { maxOutputTokens = model.max_tokens, temperature = model.temperature,
                topP = model.top_p }
  if model.stop and #model.stop > 0 then gen.stopSequences = shared.copy_array(model.stop) end
  local think, terr = thinking_config(model)
  if terr then return nil, terr end
  gen.thinkingConfig = think
  local out = req.output_schema
  if out then
    gen.responseMimeType = "application/json"
    gen.responseJsonSchema = out.schema
  end
  local body = { contents = contents, generationConfig = gen }
  if req.system ~= nil and req.system ~= "" then
    body.systemInstruction = { parts = json.array({ { text = req.system } }) }
  end
  if req.tools and #req.tools > 0 then
    local decls = json.array({})
    for i, t in ipairs(req.tools) do
      decls[i] = { name = t.name, description = t.description,
                   parametersJsonSchema = t.schema or { type = "object", properties = {} } }
    end
    body.tools = json.array({ { functionDeclarations = decls } })
    if req.tool_choice ~= nil then body.toolConfig = tool_config(req.tool_choice) end
  end
  return body
end

---------------------------------------------------------------------------
-- Errors

-- google.rpc status names -> our codes
local STATUS = {
  INVALID_ARGUMENT = "invalid_request", FAILED_PRECONDITION = "invalid_request",
  OUT_OF_RANGE = "invalid_request", NOT_FOUND = "invalid_request",
  ALREADY_EXISTS = "invalid_request",
  UNAUTHENTICATED = "auth", PERMISSION_DENIED = "auth",
  RESOURCE_EXHAUSTED = "rate_limited",
  UNAVAILABLE = "overloaded",
  INTERNAL = "server", UNKNOWN = "server", ABORTED = "server", DATA_LOSS = "server",
  DEADLINE_EXCEEDED = "timeout",
}

local function has(s, pat) return s:find(pat, 1, true) ~= nil end

-- "28s", "1.5s", "0.250s" -> whole seconds, rounded up
local function delay_seconds(v)
  if type(v) ~= "string" then return nil end
  local n = tonumber(v:match("^%s*(%d+%.?%d*)s%s*$"))
  if not n then return nil end
  return math.ceil(n)
end

-- The error object of a body or an event: {error = {…}} or [{error = {…}}].
local function error_of(body)
  if type(body) ~= "table" then return nil end
  if json.is_array(body) then body = body[1] end
  if type(body) ~= "table" then return nil end
  local e = body.error
  if type(e) ~= "table" then return nil end
  return e
end

-- Returns code, the provider's status name, and { retry_after, message }.
local function classify(status, e)
  local pstatus = e and str(e.status)
  local message = e and str(e.message)
  local info = { message = message }
  local reason
  if e and type(e.details) == "table" then
    for _, d in ipairs(e.details) do
      if type(d) == "table" then
        local t = type(d["@type"]) == "string" and d["@type"] or ""
        if t:match("RetryInfo$") then info.retry_after = delay_seconds(d.retryDelay) end
        if t:match("ErrorInfo$") and type(d.reason) == "string" then reason = d.reason end
      end
    end
  end
  if status == nil and e and type(e.code) == "number" then status = tointeger(e.code) end
  local m = (message or ""):lower()
  local code
  if reason == "API_KEY_INVALID" or has(m, "api key not valid") or has(m, "api key expired") then
    code = "auth"
  elseif has(m, "exceeds the maximum number of tokens") or has(m, "input token count") then
    code = "context_length"
  else
    code = pstatus and STATUS[pstatus]
  end
  if not code then
    if status == 401 or status == 403 then code = "auth"
    elseif status == 429 then code = "rate_limited"
    elseif status == 503 or status == 529 then code = "overloaded"
    elseif status == 408 or status == 504 then code = "timeout"
    elseif status and status >= 500 then code = "server"
    elseif status and status >= 400 then code = "invalid_request"
    else code = "server" end
  end
  return code, pstatus or reason, info
end

function codec.classify(status, body, headers) -- luacheck: ignore headers
  return classify(status, error_of(body))
end

---------------------------------------------------------------------------
-- Stream

local FINISH = {
  STOP = "stop", MAX_TOKENS = "length",
  SAFETY = "content_filter", RECITATION = "content_filter", BLOCKLIST = "content_filter",
  PROHIBITED_CONTENT = "content_filter", SPII = "content_filter",
  IMAGE_SAFETY = "content_filter", LANGUAGE = "content_filter",
}

local function protocol(what)
  return nil, PROVIDER .. ": malformed stream event: " .. what, "protocol"
end

local count = shared.count

local function usage_of(u)
  local prompt, cand = count(u.promptTokenCount), count(u.candidatesTokenCount)
  local thoughts, cached = count(u.thoughtsTokenCount), count(u.cachedContentTokenCount)
  local tool = count(u.toolUsePromptTokenCount)
  if prompt == false or cand == false or thoughts == false or cached == false or tool == false then
    return nil, "a usage count is not a non-negative integer"
  end
  if prompt == nil and cand == nil and thoughts == nil then return false end
  local out = { reasoning_tokens = thoughts, cache_read_tokens = cached }
  -- the prompt count includes the cached tokens; tool-use prompts are input too
  if prompt or tool then out.input_tokens = math.max((prompt or 0) + (tool or 0) - (cached or 0), 0) end
  if cand or thoughts then out.output_tokens = (cand or 0) + (thoughts or 0) end
  return out
end

function codec.decoder(model, emit) -- luacheck: ignore model
  local dec = { done = false }
  local n = -1        -- the last block index handed out
  local open          -- "text" or "thinking": the block the next piece continues
  local calls = 0
  local rid

  local function new_block(kind)
    n = n + 1
    open = kind
    return n
  end

  local function call_id(fc)
    local id = str(fc.id)
    if id then return id end
    local base = rid and rid:gsub("[^%w_-]", ""):sub(1, 24) or ""
    if base == "" then base = "gemini" end
    return "call_" .. base .. "_" .. calls
  end

  local function part(p)
    if type(p) ~= "table" or getmetatable(p) ~= nil then return protocol("a part is not an object") end
    local sig = p.thoughtSignature
    if sig == null then sig = nil end
    if sig ~= nil and type(sig) ~= "string" then return protocol("thoughtSignature is not a string") end
    sig = str(sig)
    local text = p.text
    if text == null then text = nil end
    if text ~= nil and type(text) ~= "string" then return protocol("text is not a string") end
    if p.thought == true then
      local i = open == "thinking" and n or new_block("thinking")
      if str(text) or sig then
        emit({ type = "thinking", index = i, thinking = str(text), signature = sig, source = PROVIDER })
      end
      return true
    end
    local fc = p.functionCall
    if fc ~= nil and fc ~= null then
      if type(fc) ~= "table" or getmetatable(fc) ~= nil then
        return protocol("functionCall is not an object")
      end
      local name = str(fc.name)
      if not name then return protocol("functionCall without a name") end
      local args = fc.args
      local input_json
      if args == nil or args == null then
        input_json = "{}"
      elseif type(args) == "table" and getmetatable(args) == nil then
        input_json = json.encode(args)
        if not input_json then return protocol("functionCall args cannot be encoded") end
      else
        return protocol("functionCall args is not an object")
      end
      if sig then emit({ type = "thinking", index = new_block(nil), signature = sig, source = PROVIDER }) end
      local id = call_id(fc)
      calls = calls + 1
      emit({ type = "tool_use", index = new_block(nil), id = id, name = name, input_json = input_json })
      open = nil
      return true
    end
    if sig then
      emit({ type = "thinking", index = new_block(nil), signature = sig, source = PROVIDER })
    end
    if str(text) then
      local i = open == "text" and n or new_block("text")
      emit({ type = "text", index = i, text = text })
    end
    -- inlineData, executableCode, codeExecutionResult, a server tool's
    -- functionResponse: not passed on
    return true
  end

  function dec:feed(data, event) -- luacheck: ignore event
    local obj, jerr = json.decode(data)
    if obj == nil then
      return protocol(tostring(jerr):gsub("^json: ", ""))
    end
    if type(obj) ~= "table" or getmetatable(obj) ~= nil then return protocol("not an object") end
    local e = obj.error
    if e ~= nil and e ~= null then
      local code, pstatus, info = classify(nil, type(e) == "table" and e or nil)
      local msg = PROVIDER .. ": stream error: " .. (shared.short(info.message) or "no message")
      if pstatus then msg = msg .. " (" .. pstatus .. ")" end
      return nil, msg, code, { provider_code = pstatus, retry_after = info.retry_after }
    end
    if str(obj.modelVersion) then self.model = obj.modelVersion end
    if str(obj.responseId) then rid = rid or obj.responseId end
    local u = obj.usageMetadata
    if u ~= nil and u ~= null then
      if type(u) ~= "table" then return protocol("usageMetadata is not an object") end
      local usage, err = usage_of(u)
      if usage == nil then return protocol(err) end
      if usage then self.usage = usage end
    end
    local cands = obj.candidates
    if cands == nil or cands == null then
      local pf = obj.promptFeedback
      if type(pf) == "table" and str(pf.blockReason) then
        -- the prompt itself was blocked: no candidate will come
        self.finish_reason, self.done = "content_filter", true
      end
      return true
    end
    if type(cands) ~= "table" or (next(cands) ~= nil and not json.is_array(cands)) then
      return protocol("candidates is not a list")
    end
    local cand
    for _, c in ipairs(cands) do
      if type(c) ~= "table" then return protocol("a candidate is not an object") end
      if c.index == nil or c.index == 0 then
        cand = c
        break
      end
    end
    if not cand then return true end
    local content = cand.content
    if content ~= nil and content ~= null then
      if type(content) ~= "table" then return protocol("content is not an object") end
      local parts = content.parts
      if parts ~= nil and parts ~= null then
        if type(parts) ~= "table" or (next(parts) ~= nil and not json.is_array(parts)) then
          return protocol("parts is not a list")
        end
        for _, p in ipairs(parts) do
          local ok, msg, code = part(p)
          if not ok then return ok, msg, code end
        end
      end
    end
    local fr = cand.finishReason
    if fr ~= nil and fr ~= null then
      if type(fr) ~= "string" then return protocol("finishReason is not a string") end
      local reason = FINISH[fr] or "stop"
      if reason == "stop" and calls > 0 then reason = "tool_use" end
      self.finish_reason, self.done = reason, true
    end
    return true
  end

  return dec
end

return codec
