-- rig.mcp.tools: MCP tools as rig tools, and MCP results as tool results.
--
--   tools.name(server, tool, taken) -> "server__tool" made fit for rig.tool (letters,
--     digits, '_' and '-', at most 64 bytes; anything else becomes '_'; a name cut or
--     already taken ends in '_' and 6 hex digits of its SHA-256)
--   tools.schema(input_schema) -> schema rig.schema can check, { dropped keyword paths }
--   tools.result(server, tool, result, output_schema) -> text, is_error, details
--   tools.wrap(client, t) -> rig.tool
--
-- Schemas: rig.schema checks a subset of JSON Schema. What it cannot check is dropped
-- from the copy the loop validates and the model sees, never the tool: "pattern" and
-- "patternProperties" (no regex engine: the pattern is written into the property's
-- description instead), the array form of "items" (becomes prefixItems), boolean
-- exclusiveMinimum/Maximum, and keywords outside the subset (if/then/else,
-- contains, propertyNames, dependent*, unevaluated*, $anchor, $dynamicRef, …). A
-- schema that still does not pass becomes { type = "object" } (any arguments). The
-- server validates its own arguments either way; t.mcp.dropped lists what went.

local core = require "rig.core"
local json = require "rig.json"
local schema_mod = require "rig.schema"
local tool_mod = require "rig.tool"

local M = {}

local null = json.null

-- ---- names ----

local function short_hash(s)
  return core.sha256_hex(s):sub(1, 6)
end

function M.name(server, tool, taken)
  local base = server .. "__" .. tool
  local clean = base:gsub("[^%w_-]", "_")
  if #clean > 64 or (taken and taken[clean]) then
    clean = clean:sub(1, 57) .. "_" .. short_hash(base)
  end
  return clean
end

-- ---- schemas ----

local KEEP = {
  type = true, enum = true, const = true, properties = true, required = true,
  additionalProperties = true, minProperties = true, maxProperties = true, items = true,
  prefixItems = true, minItems = true, maxItems = true, uniqueItems = true, minLength = true,
  maxLength = true, minimum = true, maximum = true, exclusiveMinimum = true,
  exclusiveMaximum = true, multipleOf = true, anyOf = true, oneOf = true, allOf = true,
  ["not"] = true, ["$ref"] = true, ["$defs"] = true, definitions = true,
  title = true, description = true, default = true, examples = true, format = true,
  ["$schema"] = true, ["$id"] = true, ["$comment"] = true, deprecated = true, readOnly = true,
  writeOnly = true,
}
local SUB = { items = true, additionalProperties = true, ["not"] = true }
local SUBS = { anyOf = true, oneOf = true, allOf = true, prefixItems = true }
local MAPS = { properties = true, ["$defs"] = true, definitions = true }

local function lenient(s, path, dropped, depth)
  if depth > 64 then dropped[#dropped + 1] = path .. " (nested too deeply)" return true end
  if type(s) == "boolean" then return s end
  if type(s) ~= "table" or json.is_array(s) then
    dropped[#dropped + 1] = path .. " (not a schema)"
    return true
  end
  local out = {}
  local note
  for k, v in pairs(s) do
    local p = path .. "." .. tostring(k)
    if type(k) ~= "string" then
      dropped[#dropped + 1] = p
    elseif k == "pattern" then
      if type(v) == "string" then note = "must match the pattern " .. v end
      dropped[#dropped + 1] = p
    elseif (k == "exclusiveMinimum" or k == "exclusiveMaximum") and type(v) ~= "number" then
      dropped[#dropped + 1] = p
    elseif k == "items" and type(v) == "table" and json.is_array(v) then
      local list = {}
      for i, x in ipairs(v) do list[i] = lenient(x, p .. "[" .. i .. "]", dropped, depth + 1) end
      out.prefixItems = json.array(list)
    elseif SUB[k] and type(v) == "table" then
      out[k] = lenient(v, p, dropped, depth + 1)
    elseif SUBS[k] and type(v) == "table" then
      local list = {}
      for i, x in ipairs(v) do list[i] = lenient(x, p .. "[" .. i .. "]", dropped, depth + 1) end
      out[k] = json.array(list)
    elseif MAPS[k] and type(v) == "table" then
      local map = {}
      for name, sub in pairs(v) do
        if type(name) == "string" then map[name] = lenient(sub, p .. "." .. name, dropped, depth + 1) end
      end
      out[k] = map
    elseif KEEP[k] then
      out[k] = v
    else
      dropped[#dropped + 1] = p
    end
  end
  if note then
    out.description = (type(out.description) == "string" and (out.description .. " ") or "")
      .. "(" .. note .. ")"
  end
  return out
end

function M.schema(input)
  local dropped = {}
  if input == nil or input == null then return { type = "object", properties = {} }, dropped end
  local s = lenient(input, "inputSchema", dropped, 0)
  if type(s) ~= "table" then s = { type = "object" } end
  if s.type == nil then s.type = "object" end
  return s, dropped
end

-- ---- results ----

local INLINE_MAX = 256 << 10 -- base64 bytes of an image, audio or blob kept in details

local function b64_size(data)
  if type(data) ~= "string" then return 0 end
  local n = #data
  local pad = data:sub(-2) == "==" and 2 or (data:sub(-1) == "=" and 1 or 0)
  return math.max(0, n // 4 * 3 - pad)
end

local function str(v) return type(v) == "string" and v or nil end

-- One content block as text (for the model now) and as structure (for details).
local function block(b)
  if type(b) ~= "table" then return "[content block that is not an object]", { type = "invalid" } end
  local t = b.type
  if t == "text" then
    return str(b.text) or "", { type = "text", text = str(b.text) or "" }
  elseif t == "image" or t == "audio" then
    local size = b64_size(b.data)
    local mime = str(b.mimeType) or "application/octet-stream"
    local d = { type = t, mime_type = mime, size = size }
    if type(b.data) == "string" and #b.data <= INLINE_MAX then d.data = b.data
    else d.omitted = true end
    return "[" .. t .. ": " .. mime .. ", " .. size .. " bytes]", d
  elseif t == "resource_link" then
    local parts = { "[resource link: " .. (str(b.name) or str(b.uri) or "?") }
    if str(b.uri) then parts[#parts + 1] = " <" .. b.uri .. ">" end
    local meta = {}
    if str(b.mimeType) then meta[#meta + 1] = b.mimeType end
    if math.type(b.size) == "integer" then meta[#meta + 1] = b.size .. " bytes" end
    if #meta > 0 then parts[#parts + 1] = " (" .. table.concat(meta, ", ") .. ")" end
    parts[#parts + 1] = "]"
    if str(b.description) then parts[#parts + 1] = " " .. b.description end
    return table.concat(parts), { type = "resource_link", uri = str(b.uri), name = str(b.name),
      mime_type = str(b.mimeType), size = b.size, description = str(b.description) }
  elseif t == "resource" then
    local r = type(b.resource) == "table" and b.resource or {}
    local uri, mime = str(r.uri) or "?", str(r.mimeType)
    if str(r.text) then
      return "[resource " .. uri .. (mime and (" (" .. mime .. ")") or "") .. "]\n" .. r.text,
        { type = "resource", uri = uri, mime_type = mime, text = r.text }
    end
    local size = b64_size(r.blob)
    local d = { type = "resource", uri = uri, mime_type = mime, size = size }
    if type(r.blob) == "string" and #r.blob <= INLINE_MAX then d.blob = r.blob else d.omitted = true end
    return "[resource " .. uri .. ": " .. (mime or "application/octet-stream") .. ", " .. size
      .. " bytes]", d
  end
  return "[content of type " .. tostring(t) .. "]", { type = tostring(t) }
end
M.block = block

-- The media spec (rig.media) of an image or an embedded PDF the model can
-- read, or nil: the session checks and stores it, and the model gets it with
-- the result's text.
local MEDIA_IMAGES = { ["image/png"] = true, ["image/jpeg"] = true, ["image/webp"] = true,
                       ["image/gif"] = true }
function M.media_of(b)
  if type(b) ~= "table" then return nil end
  if b.type == "image" and type(b.data) == "string" and MEDIA_IMAGES[b.mimeType] then
    return { type = "image", base64 = b.data, media_type = b.mimeType }
  end
  local r = b.type == "resource" and type(b.resource) == "table" and b.resource
  if r and type(r.blob) == "string" and r.mimeType == "application/pdf" then
    return { type = "document", base64 = r.blob, media_type = "application/pdf",
             name = type(r.uri) == "string" and r.uri:match("([^/]+)$") or nil }
  end
  return nil
end

-- text, is_error, details, media? for one tools/call result.
function M.result(server, tool, result, output_schema)
  local details = { mcp = { server = server, tool = tool } }
  if type(result) ~= "table" or json.is_array(result) then
    details.is_error = true
    return "error: server '" .. server .. "' answered tools/call with a result that is not an "
      .. "object", true, details
  end
  local is_error = result.isError == true
  local texts, blocks, media = {}, {}, {}
  local content = result.content
  if type(content) == "table" and json.is_array(content) then
    for i, b in ipairs(content) do
      texts[i], blocks[i] = block(b)
      local m = M.media_of(b)
      if m then media[#media + 1] = m end
    end
  elseif content ~= nil and content ~= null then
    texts[1] = "[content that is not a list]"
  end
  details.content = json.array(blocks)
  local sc = result.structuredContent
  if sc ~= nil and sc ~= null then
    details.structured = sc
    if output_schema and not is_error then
      local ok, err = schema_mod.validate(output_schema, sc)
      if not ok then
        details.is_error = true
        return "error: server '" .. server .. "' tool '" .. tool .. "' returned structured "
          .. "content that does not match its output schema: " .. tostring(err), true, details
      end
    end
    if #texts == 0 then texts[1] = json.encode(sc) or "" end
  elseif output_schema and not is_error then
    details.is_error = true
    return "error: server '" .. server .. "' tool '" .. tool .. "' declares an output schema "
      .. "but returned no structured content", true, details
  end
  details.is_error = is_error
  local text = table.concat(texts, "\n")
  if text == "" then text = is_error and "the tool failed (no message)" or "(no content)" end
  if is_error and not text:find("^error:") then text = "error: " .. text end
  return text, is_error, details, #media > 0 and media or nil
end

-- ---- the rig tool ----

local function one_line(s, n)
  s = tostring(s):gsub("[%z\r\n]+", " ")
  if #s > n then s = s:sub(1, n) .. "…" end
  return s
end

function M.wrap(client, t, rig_name)
  local server = client.name
  local input, dropped = M.schema(t.inputSchema)
  local out_schema
  if type(t.outputSchema) == "table" then
    local s = M.schema(t.outputSchema)
    if schema_mod.check(s) then out_schema = s end
  end
  local desc = str(t.description) or ""
  local title = str(t.title) or (type(t.annotations) == "table" and str(t.annotations.title))
  if title and title ~= "" then desc = title .. (desc ~= "" and (": " .. desc) or "") end
  if desc == "" then desc = "MCP tool " .. t.name .. " of server " .. server end
  local scope = server .. "/" .. t.name
  local def = {
    name = rig_name, description = desc, schema = input,
    prepare = function(args)
      local a = json.encode(args) or "{}"
      return { summary = one_line("mcp " .. scope .. " " .. a, 300),
               requirements = { { kind = "mcp", scope = scope, match = scope } } }, args
    end,
    run = function(_, ctx)
      local result, err, code = client:call(t.name, ctx.prepared or {}, { ctx = ctx })
      if not result then
        return tool_mod.result{ text = "error: " .. tostring(err), is_error = true,
          details = { mcp = { server = server, tool = t.name }, is_error = true,
                      code = code } }
      end
      local text, is_error, details, media = M.result(server, t.name, result, out_schema)
      return tool_mod.result{ text = text, is_error = is_error, details = details, media = media }
    end,
  }
  -- rig.tool's own checks (copy, then the subset): a schema that still fails them
  -- means any arguments (the server checks its own)
  local ok, rt = pcall(tool_mod, def)
  if not ok then
    dropped[#dropped + 1] = "inputSchema (not checkable: any arguments are accepted)"
    def.schema = { type = "object" }
    rt = tool_mod(def)
  end
  return rt, dropped
end

return M
