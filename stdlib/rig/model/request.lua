-- rig.model.request: checks a request against the model contract and returns the
-- normalized copy every codec receives (see stdlib/rig/model/accum.lua for chunks):
--   system (string|nil); messages = { { role, content = { blocks } } } with string
--   content turned into one text block; tools with array keywords of their schemas
--   marked as JSON arrays; tool_choice; output_schema { name, schema, description,
--   strict }; cache_key (a string naming the conversation for the provider's prompt
--   cache: rig.model.cache); a text block's `cache = true` hint (a cache
--   breakpoint after it) is kept. Every error names the field
--   ("request.messages[2].content[1].type").

local json = require "rig.json"
local media = require "rig.model.media"

local R = {}

local request_fields = { system = true, messages = true, tools = true, tool_choice = true,
                         output_schema = true, cache_key = true, blobs = true }

local function fail(path, msg)
  error("rig.model: " .. path .. ": " .. msg, 0)
end

local function check_list(v, path, level)
  if type(v) ~= "table" then fail(path, "must be a list", level + 1) end
  local n = #v
  for k in pairs(v) do
    if math.type(k) ~= "integer" or k < 1 or k > n then
      fail(path, "must be a list (found key " .. tostring(k) .. ")", level + 1)
    end
  end
  return n
end

local function check_fields(t, allowed, path, level)
  for k in pairs(t) do
    if not allowed[k] then fail(path, "unknown field '" .. tostring(k) .. "'", level + 1) end
  end
end

local function str(v, path, level, optional)
  if v == nil and optional then return nil end
  if type(v) ~= "string" then fail(path, "must be a string", level + 1) end
  return v
end

-- ---- JSON Schema: copy, marking the keywords whose values are arrays ----

local array_keywords = { required = true, enum = true, anyOf = true, oneOf = true, allOf = true,
                         prefixItems = true, examples = true }
local schema_maps = { properties = true, patternProperties = true, ["$defs"] = true,
                      definitions = true, dependentSchemas = true }
local schema_values = { items = true, additionalProperties = true, ["not"] = true,
                        ["if"] = true, ["then"] = true, ["else"] = true, contains = true,
                        propertyNames = true, unevaluatedProperties = true,
                        unevaluatedItems = true, additionalItems = true }

local copy_schema

-- copy_value's walk: the copy, or nil, why and the keys from the failing value
-- up to v (so that the path, for the message, is built only on a failure).
local function copy_walk(v, depth)
  if depth > 64 then return nil, "is nested too deeply", {} end
  local tv = type(v)
  if tv ~= "table" then
    if tv == "function" or tv == "thread" or (tv == "userdata" and v ~= json.null) then
      return nil, "cannot hold a " .. tv, {}
    end
    return v
  end
  local out = {}
  for k, x in pairs(v) do
    local c, msg, keys = copy_walk(x, depth + 1)
    if keys then
      keys[#keys + 1] = k
      return nil, msg, keys
    end
    out[k] = c
  end
  if json.is_array(v) then json.array(out) end
  return out
end

local function copy_value(v, path, depth)
  local out, msg, keys = copy_walk(v, depth)
  if keys then
    for i = #keys, 1, -1 do path = path .. "." .. tostring(keys[i]) end
    fail(path, msg, 6)
  end
  return out
end

copy_schema = function(s, path, depth)
  if depth > 64 then fail(path, "is nested too deeply", 5) end
  if type(s) == "boolean" then return s end
  if type(s) ~= "table" then fail(path, "must be a JSON Schema object", 5) end
  local out = {}
  for k, v in pairs(s) do
    if type(k) ~= "string" then fail(path, "has a non-string key " .. tostring(k), 5) end
    local p = path .. "." .. k
    if array_keywords[k] or (k == "type" and type(v) == "table") then
      if type(v) ~= "table" then fail(p, "must be a list", 5) end
      local list = {}
      local n = #v
      for i, x in pairs(v) do
        if math.type(i) ~= "integer" or i < 1 or i > n then fail(p, "must be a list", 5) end
        if k == "anyOf" or k == "oneOf" or k == "allOf" or k == "prefixItems" then
          list[i] = copy_schema(x, p .. "[" .. i .. "]", depth + 1)
        else
          list[i] = copy_value(x, p .. "[" .. i .. "]", depth + 1)
        end
      end
      out[k] = json.array(list)
    elseif schema_maps[k] then
      if type(v) ~= "table" then fail(p, "must be an object", 5) end
      local map = {}
      for name, sub in pairs(v) do
        if type(name) ~= "string" then fail(p, "must be an object with string keys", 5) end
        map[name] = copy_schema(sub, p .. "." .. name, depth + 1)
      end
      out[k] = map
    elseif schema_values[k] and type(v) == "table" and not json.is_array(v) then
      out[k] = copy_schema(v, p, depth + 1)
    elseif k == "items" and type(v) == "table" then
      local list = {}
      for i, x in ipairs(v) do list[i] = copy_schema(x, p .. "[" .. i .. "]", depth + 1) end
      out[k] = json.array(list)
    else
      out[k] = copy_value(v, p, depth + 1)
    end
  end
  return out
end

R.copy_schema = function(s, path) return copy_schema(s, path or "schema", 0) end

-- ---- blocks ----

local block_fields = {
  text = { type = true, text = true, cache = true },
  refusal = { type = true, text = true },
  thinking = { type = true, thinking = true, signature = true, redacted = true, id = true,
               source = true },
  tool_use = { type = true, id = true, name = true, input = true, input_json = true,
               error = true },
  tool_result = { type = true, tool_use_id = true, content = true, is_error = true,
                  details = true }, -- details: kept in the history and journal, never sent
}

local allowed_blocks = {
  user = { text = true, image = true, document = true },
  assistant = { text = true, refusal = true, thinking = true, tool_use = true },
  tool = { tool_result = true },
}

local function copy_block(b, role, path, level)
  if type(b) ~= "table" then fail(path, "must be a block table", level + 1) end
  local t = b.type
  if media.is_media(t) then
    if not allowed_blocks[role][t] then
      fail(path .. ".type", (role == "assistant" and "an " or "a ") .. role .. " message cannot hold a '" .. t .. "' block", level + 1)
    end
    return media.copy(b, path, function(p, m) fail(p, m, level + 2) end)
  end
  local allowed = block_fields[t]
  if not allowed then
    fail(path .. ".type", "unknown block type '" .. tostring(t) .. "'", level + 1)
  end
  if not allowed_blocks[role][t] then
    fail(path .. ".type", (role == "assistant" and "an " or "a ") .. role .. " message cannot hold a '" .. t .. "' block", level + 1)
  end
  check_fields(b, allowed, path, level + 1)
  local out = { type = t }
  if t == "text" or t == "refusal" then
    out.text = str(b.text, path .. ".text", level + 1)
    if b.cache ~= nil then
      if type(b.cache) ~= "boolean" then fail(path .. ".cache", "must be a boolean", level + 1) end
      out.cache = b.cache or nil
    end
  elseif t == "thinking" then
    out.thinking = str(b.thinking, path .. ".thinking", level + 1, true) or ""
    out.signature = str(b.signature, path .. ".signature", level + 1, true)
    out.redacted = str(b.redacted, path .. ".redacted", level + 1, true)
    out.id = str(b.id, path .. ".id", level + 1, true)
    out.source = str(b.source, path .. ".source", level + 1, true)
  elseif t == "tool_use" then
    out.id = str(b.id, path .. ".id", level + 1)
    out.name = str(b.name, path .. ".name", level + 1)
    if b.input ~= nil and type(b.input) ~= "table" then
      fail(path .. ".input", "must be a table", level + 1)
    end
    out.input = b.input and copy_value(b.input, path .. ".input", 0) or {}
    out.input_json = str(b.input_json, path .. ".input_json", level + 1, true)
    if out.input_json then
      local v = json.decode(out.input_json)
      if type(v) ~= "table" or json.is_array(v) then out.input_json = nil end
    end
  else
    out.tool_use_id = str(b.tool_use_id, path .. ".tool_use_id", level + 1)
    local c = b.content
    if type(c) == "string" then
      out.content = c
    elseif type(c) == "table" then
      local n = check_list(c, path .. ".content", level + 1)
      local list = {}
      for i = 1, n do
        local p = path .. ".content[" .. i .. "]"
        local x = c[i]
        if type(x) == "table" and media.is_media(x.type) then
          list[i] = media.copy(x, p, function(pp, m) fail(pp, m, level + 2) end)
        else
          if type(x) ~= "table" or x.type ~= "text" then
            fail(p, "must be a {type=\"text\"}, image or document block", level + 1)
          end
          check_fields(x, block_fields.text, p, level + 1)
          list[i] = { type = "text", text = str(x.text, p .. ".text", level + 1) }
        end
      end
      out.content = list
    elseif c == nil then
      out.content = ""
    else
      fail(path .. ".content", "must be a string or a list of text blocks", level + 1)
    end
    if b.is_error ~= nil and type(b.is_error) ~= "boolean" then
      fail(path .. ".is_error", "must be a boolean", level + 1)
    end
    out.is_error = b.is_error == true
  end
  return out
end

-- ---- messages already in normal form ----
-- A message whose normalized copy would equal it, field for field, needs no
-- copy: with a cache (whose caller promises not to change what it passed) the
-- message itself goes into the request. These checks never raise: anything
-- they do not accept goes through copy_block, which gives the errors.

local ARRAY_MT = getmetatable(json.array({}))

-- A table copy_value copies without failing and into an equal table.
local function plain_value(v, depth)
  if depth > 64 then return false end
  local tv = type(v)
  if tv ~= "table" then
    return tv ~= "function" and tv ~= "thread" and (tv ~= "userdata" or v == json.null)
  end
  local mt = getmetatable(v)
  if mt ~= nil and mt ~= ARRAY_MT then return false end
  for _, x in pairs(v) do
    if not plain_value(x, depth + 1) then return false end
  end
  return true
end

-- A list check_list accepts (keys exactly 1..#v), plain or marked as an array.
local function plain_list(v)
  if type(v) ~= "table" then return false end
  local mt = getmetatable(v)
  if mt ~= nil and mt ~= ARRAY_MT then return false end
  local n = #v
  for k in pairs(v) do
    if math.type(k) ~= "integer" or k < 1 or k > n then return false end
  end
  return true
end

local function only(b, allowed)
  for k in pairs(b) do
    if not allowed[k] then return false end
  end
  return true
end

local function opt_str(v) return v == nil or type(v) == "string" end

local normal_fields = {
  text = { type = true, text = true, cache = true },
  refusal = { type = true, text = true },
  thinking = block_fields.thinking,
  tool_use = { type = true, id = true, name = true, input = true, input_json = true }, -- no error
  tool_result = { type = true, tool_use_id = true, content = true, is_error = true }, -- no details
  result_text = { type = true, text = true },
}

local function normal_block(b, allowed)
  if type(b) ~= "table" or getmetatable(b) ~= nil then return false end
  local t = b.type
  if t == nil or not allowed[t] then return false end
  if t == "image" or t == "document" then return media.normal(b) end
  if not only(b, normal_fields[t]) then return false end
  if t == "text" then
    return type(b.text) == "string" and (b.cache == nil or b.cache == true)
  elseif t == "refusal" then
    return type(b.text) == "string"
  elseif t == "thinking" then
    return type(b.thinking) == "string" and opt_str(b.signature) and opt_str(b.redacted)
      and opt_str(b.id) and opt_str(b.source)
  elseif t == "tool_use" then
    if type(b.id) ~= "string" or type(b.name) ~= "string" then return false end
    if type(b.input) ~= "table" or not plain_value(b.input, 0) then return false end
    local raw = b.input_json
    if raw == nil then return true end
    if type(raw) ~= "string" then return false end
    local v = json.decode(raw)
    return type(v) == "table" and not json.is_array(v)
  end
  -- tool_result
  if type(b.tool_use_id) ~= "string" or type(b.is_error) ~= "boolean" then return false end
  local c = b.content
  if type(c) == "string" then return true end
  if not plain_list(c) then return false end
  for i = 1, #c do
    local x = c[i]
    if type(x) ~= "table" or getmetatable(x) ~= nil then return false end
    if media.is_media(x.type) then
      if not media.normal(x) then return false end
    elseif x.type ~= "text" or type(x.text) ~= "string" or not only(x, normal_fields.result_text) then
      return false
    end
  end
  return true
end

local function normal_message(msg)
  if type(msg) ~= "table" or getmetatable(msg) ~= nil then return false end
  for k in pairs(msg) do
    if k ~= "role" and k ~= "content" then return false end
  end
  local role = msg.role
  local allowed = (role == "user" or role == "assistant" or role == "tool") and allowed_blocks[role]
  local content = msg.content
  if not allowed or not plain_list(content) then return false end
  local m = #content
  if m == 0 then return false end
  for j = 1, m do
    if not normal_block(content[j], allowed) then return false end
  end
  return true
end

local TOOL_NAME = "^[%w_-]+$"

-- cache (optional, owned by the caller): { messages = weak-keyed table } —
-- the caller promises not to change a message or the tools list after passing
-- it (the session runner's committed history never changes). Then a message
-- already in normal form goes into the request as it is (no copy), one that
-- is not is checked and copied once (the copy kept in cache.messages); the
-- same list as last time, grown at its end, is checked from where the last
-- call ended (cache.reused: how many messages came over unchecked; a list met
-- anew is looked up message by message in cache.messages); and the same tools
-- list reuses its copy.
function R.normalize(request, model, level, cache)
  level = (level or 1) + 1
  if type(request) ~= "table" then fail("request", "must be a table", level) end
  check_fields(request, request_fields, "request", level)
  local out = { stream = true }
  out.system = str(request.system, "request.system", level, true)
  local ck = request.cache_key
  if ck ~= nil and (type(ck) ~= "string" or ck == "" or #ck > 256) then
    fail("request.cache_key", "must be a string of 1 to 256 bytes", level)
  end
  out.cache_key = ck
  if request.blobs ~= nil and type(request.blobs) ~= "function" then
    fail("request.blobs", "must be a function(sha256) -> bytes", level)
  end
  out.blobs = request.blobs
  -- with a cache the caller vouches for its list (a strict check is O(n) per call)
  local n
  if cache and type(request.messages) == "table" then
    n = #request.messages
  else
    n = check_list(request.messages, "request.messages", level)
  end
  if n == 0 then fail("request.messages", "must hold at least one message", level) end
  local msgs = {}
  local list = request.messages
  local seen = cache and cache.messages
  local first = 1
  -- the same list as last time, grown at its end (its last message then still
  -- in its place: a list cut back and grown again is checked anew): the
  -- normalized prefix comes over as it is
  if seen and cache.list == list and cache.n <= n and list[cache.n] == cache.last then
    table.move(cache.msgs, 1, cache.n, 1, msgs)
    first = cache.n + 1
  end
  -- a list met anew (compaction, a hook's rewrite): its messages are noted, so
  -- that the next new list finds them
  local note = seen and first == 1
  for i = first, n do
    local msg = list[i]
    local done = seen and seen[msg]
    if done then
      msgs[i] = done
      goto next_message
    end
    if seen and normal_message(msg) then
      msgs[i] = msg
      if note then seen[msg] = msg end
      goto next_message
    end
    local path = "request.messages[" .. i .. "]"
    if type(msg) ~= "table" then fail(path, "must be a table", level) end
    check_fields(msg, { role = true, content = true }, path, level)
    local role = msg.role
    if role ~= "user" and role ~= "assistant" and role ~= "tool" then
      fail(path .. ".role", "must be 'user', 'assistant' or 'tool' (got '" .. tostring(role)
        .. "')", level)
    end
    local content = {}
    if type(msg.content) == "string" then
      if role == "tool" then
        fail(path .. ".content", "a tool message holds tool_result blocks", level)
      end
      content[1] = { type = "text", text = msg.content }
    else
      local m = check_list(msg.content, path .. ".content", level)
      if m == 0 then fail(path .. ".content", "must not be empty", level) end
      for j = 1, m do
        content[j] = copy_block(msg.content[j], role, path .. ".content[" .. j .. "]", level)
      end
    end
    msgs[i] = { role = role, content = content }
    if seen then seen[msg] = msgs[i] end
    ::next_message::
  end
  out.messages = msgs
  if seen then
    cache.list, cache.msgs, cache.n, cache.last, cache.reused = list, msgs, n, list[n], first - 1
  end

  local names = {}
  if cache and request.tools ~= nil and cache.tools_src == request.tools then
    out.tools, names = cache.tools, cache.names
  elseif request.tools ~= nil then
    local tn = check_list(request.tools, "request.tools", level)
    if tn > 0 and not model.tools then
      fail("request.tools", "model '" .. model.name .. "' is declared without tools (tools = false)",
        level)
    end
    local tools = {}
    for i = 1, tn do
      local path = "request.tools[" .. i .. "]"
      local t = request.tools[i]
      if type(t) ~= "table" then fail(path, "must be a table", level) end
      check_fields(t, { name = true, description = true, schema = true }, path, level)
      local name = str(t.name, path .. ".name", level)
      if #name > 64 or not name:match(TOOL_NAME) then
        fail(path .. ".name", "must be 1 to 64 letters, digits, '_' or '-' (got '" .. name .. "')",
          level)
      end
      if names[name] then fail(path .. ".name", "duplicate tool name '" .. name .. "'", level) end
      names[name] = true
      local schema = t.schema
      if schema == nil then schema = { type = "object", properties = {} } end
      if type(schema) ~= "table" then fail(path .. ".schema", "must be a table", level) end
      schema = copy_schema(schema, path .. ".schema", 0)
      if schema.type ~= "object" then
        fail(path .. ".schema.type", "must be \"object\" (tool arguments are an object)", level)
      end
      tools[i] = { name = name, description = str(t.description, path .. ".description", level,
        true), schema = schema }
    end
    if tn > 0 then out.tools = tools end
    if cache then cache.tools_src, cache.tools, cache.names = request.tools, out.tools, names end
  end

  local choice = request.tool_choice
  if choice ~= nil then
    if choice == "auto" or choice == "none" then
      out.tool_choice = choice
    elseif choice == "required" then
      if not out.tools then
        fail("request.tool_choice", "'required' needs at least one tool", level)
      end
      out.tool_choice = choice
    elseif type(choice) == "table" then
      check_fields(choice, { name = true }, "request.tool_choice", level)
      local name = str(choice.name, "request.tool_choice.name", level)
      if not names[name] then
        fail("request.tool_choice.name", "names no declared tool ('" .. name .. "')", level)
      end
      out.tool_choice = { name = name }
    else
      fail("request.tool_choice", "must be 'auto', 'required', 'none' or { name = … }", level)
    end
  end

  local os_ = request.output_schema
  if os_ ~= nil then
    local path = "request.output_schema"
    if type(os_) ~= "table" then fail(path, "must be a table", level) end
    check_fields(os_, { name = true, schema = true, description = true, strict = true }, path,
      level)
    local name = str(os_.name, path .. ".name", level)
    if #name > 64 or not name:match("^[%a_][%w_-]*$") then
      fail(path .. ".name", "must be a letter or '_' then up to 63 letters, digits, '_' or '-'",
        level)
    end
    if type(os_.schema) ~= "table" then fail(path .. ".schema", "must be a table", level) end
    local schema = copy_schema(os_.schema, path .. ".schema", 0)
    if schema.type ~= "object" then
      fail(path .. ".schema.type", "must be \"object\"", level)
    end
    if os_.strict ~= nil and type(os_.strict) ~= "boolean" then
      fail(path .. ".strict", "must be a boolean", level)
    end
    out.output_schema = { name = name, schema = schema,
      description = str(os_.description, path .. ".description", level, true),
      strict = os_.strict ~= false }
  end
  return out
end

-- For a codec's request body: a tool_use block's input as one JSON object —
-- the raw argument text the model sent when it is an object (kept byte for
-- byte, through json.raw), else the decoded table; never an array, so {}
-- and not [] for no arguments.
function R.tool_input(b)
  local raw = b.input_json
  if type(raw) == "string" and raw:match("^%s*{") then
    local ok, v = pcall(json.raw, raw)
    if ok and v ~= nil then return v end
  end
  local input = b.input
  if type(input) ~= "table" or next(input) == nil or json.is_array(input) or input[1] ~= nil then
    return {}
  end
  return input
end

return R
