-- rig.serve_req: the request parsing of rig.serve (request bodies, query
-- integers, Last-Event-ID), kept apart so a fuzz target can drive it with
-- nothing but rig.json (tests/fuzz/serve_body_fuzz.c).
--
--   req.body(kind, bytes) -> value | nil, code, message
--     kind: "create" ({ blocks? | text? }, an empty body is {}), "input"
--     ({ blocks } or { text }, one of them), "gate" ({ action, values? }),
--     "answer" ({ action = accept|decline|cancel, content? }: an MCP server's question),
--     "media" ({ type, base64, media_type?, name? }: an upload). A block is a text block
--     or an image/document { type, base64 | blob | url, media_type?, name? }.
--     The value: { message = string | blocks } for create/input (message
--     nil when create had none), { action = … } for gate. code is
--     "invalid_json" (the decoder's message, naming the byte) or
--     "invalid_request" (naming the field).
--   req.integer(s, lo, hi) -> n | nil   a decimal integer in [lo, hi]

local json = require "rig.json"

local M = {}

local MAX_BLOCKS = 256
local MEDIA_FIELDS = { type = true, media_type = true, base64 = true, blob = true, url = true,
                       name = true, size = true }
local ACTIONS = { approve = true, approve_always = true, deny = true }

local function bad(msg) return nil, "invalid_request", msg end

local function keys_only(t, allowed)
  for k in pairs(t) do
    if type(k) ~= "string" or not allowed[k] then
      return "unknown field '" .. tostring(k) .. "'"
    end
  end
end

local function blocks_of(v)
  if type(v) ~= "table" or not json.is_array(v) then
    return nil, "field 'blocks' must be an array of text blocks"
  end
  if #v == 0 then return nil, "field 'blocks' must not be empty" end
  if #v > MAX_BLOCKS then return nil, "field 'blocks' holds more than " .. MAX_BLOCKS .. " blocks" end
  local out = {}
  for i, b in ipairs(v) do
    if type(b) ~= "table" or json.is_array(b) then
      return nil, "blocks[" .. i .. "] must be an object"
    end
    if b.type == "image" or b.type == "document" then
      -- the bytes as base64, a blob uploaded before (POST /v1/media) or a URL;
      -- never a path or raw data: the session checks the rest (rig.media)
      local m = {}
      for k, x in pairs(b) do
        if not MEDIA_FIELDS[k] then
          return nil, "blocks[" .. i .. "]: unknown field '" .. tostring(k) .. "' (an " .. b.type
            .. " takes base64, blob or url, media_type, name)"
        end
        if k ~= "size" and type(x) ~= "string" then
          return nil, "blocks[" .. i .. "]." .. k .. " must be a string"
        end
        m[k] = x
      end
      if m.size ~= nil then m.size = math.tointeger(m.size) end
      out[i] = m
    else
      for k in pairs(b) do
        if k ~= "type" and k ~= "text" then
          return nil, "blocks[" .. i .. "]: unknown field '" .. tostring(k) .. "'"
        end
      end
      if b.type ~= "text" then
        return nil, "blocks[" .. i .. "].type must be \"text\", \"image\" or \"document\""
      end
      if type(b.text) ~= "string" then return nil, "blocks[" .. i .. "].text must be a string" end
      out[i] = { type = "text", text = b.text }
    end
  end
  return out
end

-- { blocks } or { text }; required says whether one must be there.
local function message_of(t, required)
  if t.blocks ~= nil and t.text ~= nil then return bad("give 'blocks' or 'text', not both") end
  if t.text ~= nil then
    if type(t.text) ~= "string" then return bad("field 'text' must be a string") end
    return { message = t.text }
  end
  if t.blocks ~= nil then
    local b, msg = blocks_of(t.blocks)
    if not b then return bad(msg) end
    return { message = b }
  end
  if required then return bad("the body needs 'blocks' or 'text'") end
  return {}
end

local FIELDS = {
  create = { blocks = true, text = true },
  input = { blocks = true, text = true },
  gate = { action = true, values = true },
  answer = { action = true, content = true },
  media = { type = true, media_type = true, base64 = true, name = true },
}
local ANSWERS = { accept = true, decline = true, cancel = true }

function M.body(kind, bytes)
  local allowed = FIELDS[kind]
  if not allowed then error("rig.serve_req.body: unknown kind '" .. tostring(kind) .. "'", 2) end
  if type(bytes) ~= "string" then error("rig.serve_req.body: bytes must be a string", 2) end
  if bytes == "" or bytes:find("^%s*$") then
    if kind == "create" then return {} end
    return nil, "invalid_json", "the request body is empty (want a JSON object)"
  end
  local v, err = json.decode(bytes)
  if v == nil then return nil, "invalid_json", tostring(err) end
  if type(v) ~= "table" or json.is_array(v) then
    return bad("the request body must be a JSON object")
  end
  local unknown = keys_only(v, allowed)
  if unknown then return bad(unknown) end
  if kind == "media" then
    if v.type ~= "image" and v.type ~= "document" then
      return bad("field 'type' must be \"image\" or \"document\"")
    end
    if type(v.base64) ~= "string" then return bad("field 'base64' must be a string") end
    for _, k in ipairs { "media_type", "name" } do
      if v[k] ~= nil and type(v[k]) ~= "string" then return bad("field '" .. k .. "' must be a string") end
    end
    return { type = v.type, base64 = v.base64, media_type = v.media_type, name = v.name }
  end
  if kind == "gate" then
    if type(v.action) ~= "string" then return bad("field 'action' must be a string") end
    if not ACTIONS[v.action] then
      return bad("field 'action' must be \"approve\", \"approve_always\" or \"deny\"")
    end
    if v.values ~= nil and (type(v.values) ~= "table" or json.is_array(v.values)) then
      return bad("field 'values' must be an object")
    end
    return { action = v.action }
  end
  if kind == "answer" then
    if not ANSWERS[v.action] then
      return bad("field 'action' must be \"accept\", \"decline\" or \"cancel\"")
    end
    if v.content ~= nil and (type(v.content) ~= "table" or (json.is_array(v.content) and next(v.content))) then
      return bad("field 'content' must be an object")
    end
    return { action = v.action, content = v.content }
  end
  return message_of(v, kind == "input")
end

function M.integer(s, lo, hi)
  if type(s) ~= "string" or not s:find("^%d+$") or #s > 15 then return nil end
  local n = math.tointeger(tonumber(s))
  if not n or n < lo or n > hi then return nil end
  return n
end

return M
