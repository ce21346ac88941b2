-- rig.media: images and documents a session takes in (user input, tool
-- results, MCP results), checked, stored once in the session's store and
-- referenced from the journal (docs/media.md).
--
--   { type = "image", path = "shot.png" }                 -- a file (read here)
--   { type = "image", data = bytes, media_type = "image/png"? }
--   { type = "image", base64 = "…", media_type? }          -- over serve (JSON)
--   { type = "image", url = "https://…", media_type? }     -- the provider fetches it
--   { type = "image", blob = "<sha256>", media_type, size? } -- stored before
--   { type = "document", path = "report.pdf" | data | base64 | url | blob, name = "…"? }
--
-- Images: PNG, JPEG, WebP, GIF, at most M.LIMITS.image bytes; documents: PDF
-- (at most M.LIMITS.document) and plain text (UTF-8, at most M.LIMITS.text).
-- The type comes from the bytes (their magic), never from the name alone; a
-- media_type given must agree. A URL's type comes from media_type or the URL's
-- extension. Stored blobs are keyed "media/sha256/<hex>": the same bytes once,
-- however often they are sent; the journaled block is { type, media_type,
-- blob, size, name? }.

local core = require "rig.core"

local M = {}

M.LIMITS = { image = 5 * 1024 * 1024, document = 32 * 1024 * 1024, text = 4 * 1024 * 1024 }
M.PER_MESSAGE = 20 -- media blocks in one message
local FIELDS = { type = true, path = true, data = true, base64 = true, url = true, blob = true,
                 media_type = true, name = true, size = true }
local EXT = { png = "image/png", jpg = "image/jpeg", jpeg = "image/jpeg", webp = "image/webp",
              gif = "image/gif", pdf = "application/pdf", txt = "text/plain" }

function M.key(hex) return "media/sha256/" .. hex end

-- The media type the bytes say they are, or nil.
function M.sniff(b)
  if b:sub(1, 8) == "\137PNG\r\n\26\n" then return "image/png" end
  if b:sub(1, 3) == "\255\216\255" then return "image/jpeg" end
  if b:sub(1, 6) == "GIF87a" or b:sub(1, 6) == "GIF89a" then return "image/gif" end
  if b:sub(1, 4) == "RIFF" and b:sub(9, 12) == "WEBP" then return "image/webp" end
  if b:sub(1, 5) == "%PDF-" then return "application/pdf" end
  return nil
end

local function human(n)
  if n >= 1024 * 1024 then return string.format("%.1f MiB", n / 1048576) end
  if n >= 1024 then return string.format("%.1f KiB", n / 1024) end
  return n .. " bytes"
end

-- The file's bytes (at most cap + 1 of them: more is refused anyway), and
-- its whole size.
local function read_file(path, cap)
  local f, err = io.open(path, "rb")
  if not f then return nil, "cannot read '" .. path .. "': " .. tostring(err) end
  local size = f:seek("end")
  f:seek("set", 0)
  local data = f:read(cap + 1)
  f:close()
  if data == nil then data = "" end
  return data, nil, size
end

-- Checks one media spec; returns a block { type, media_type, data | url | blob,
-- size, name } (data: the bytes, not yet stored), or nil and why.
function M.check(spec, where)
  where = where or "media"
  if type(spec) ~= "table" then return nil, where .. " must be a table" end
  for k in pairs(spec) do
    if not FIELDS[k] then return nil, where .. ": unknown field '" .. tostring(k) .. "'" end
  end
  local t = spec.type
  if t ~= "image" and t ~= "document" then
    return nil, where .. ".type must be \"image\" or \"document\""
  end
  local n = 0
  for _, k in ipairs { "path", "data", "base64", "url", "blob" } do
    if spec[k] ~= nil then
      if type(spec[k]) ~= "string" then return nil, where .. "." .. k .. " must be a string" end
      n = n + 1
    end
  end
  if n ~= 1 then return nil, where .. " needs exactly one of path, data, base64, url and blob" end
  if spec.name ~= nil and (type(spec.name) ~= "string" or #spec.name > 256) then
    return nil, where .. ".name must be a string of at most 256 bytes"
  end
  local declared = spec.media_type
  if declared ~= nil and type(declared) ~= "string" then
    return nil, where .. ".media_type must be a string"
  end
  local out = { type = t, name = spec.name }
  if spec.path and not out.name then out.name = spec.path:match("([^/]+)$") end
  local function allowed(mt)
    if t == "image" then
      return mt == "image/png" or mt == "image/jpeg" or mt == "image/webp" or mt == "image/gif"
    end
    return mt == "application/pdf" or mt == "text/plain"
  end
  local kinds = t == "image" and "PNG, JPEG, WebP or GIF" or "PDF or plain text"
  if spec.url then
    if not spec.url:match("^https?://[^%s]+$") then
      return nil, where .. ".url must be an http or https URL"
    end
    local mt = declared or EXT[(spec.url:match("%.(%w+)$") or ""):lower()]
    if not mt or not allowed(mt) then
      return nil, where .. ": an " .. t .. " by URL needs a media_type (" .. kinds .. ")"
    end
    out.media_type, out.url = mt, spec.url
    return out
  end
  if spec.blob then
    if not spec.blob:match("^%x+$") or #spec.blob ~= 64 then
      return nil, where .. ".blob must be a SHA-256 in 64 hex digits"
    end
    if not declared or not allowed(declared) then
      return nil, where .. ": a stored " .. t .. " needs its media_type (" .. kinds .. ")"
    end
    out.media_type, out.blob = declared, spec.blob:lower()
    out.size = math.type(spec.size) == "integer" and spec.size or nil
    return out
  end
  local cap = t == "image" and M.LIMITS.image or M.LIMITS.document
  local data, err, whole
  if spec.path then
    data, err, whole = read_file(spec.path, cap)
    if not data then return nil, where .. ": " .. err end
  elseif spec.base64 then
    if #spec.base64 > (cap // 3 + 1) * 4 then
      return nil, where .. ": the " .. t .. " is larger than " .. human(cap)
    end
    data, err = core.base64_decode(spec.base64)
    if not data then return nil, where .. ".base64: " .. tostring(err) end
  else
    data = spec.data
  end
  local mt = M.sniff(data)
  if mt == nil and t == "document" and (declared == "text/plain" or
     (declared == nil and spec.path and spec.path:match("%.txt$"))) then
    if not utf8.len(data) or data:find("\0", 1, true) then
      return nil, where .. ": a text/plain document must be UTF-8 text"
    end
    mt = "text/plain"
    cap = M.LIMITS.text
  end
  if not mt or not allowed(mt) then
    return nil, where .. ": not " .. (t == "image" and "an image" or "a document") .. " this runtime "
      .. "takes (" .. kinds .. (mt and ("; the bytes are " .. mt) or "") .. ")"
  end
  if declared and declared ~= mt then
    return nil, where .. ": media_type says " .. declared .. " but the bytes are " .. mt
  end
  if #data > cap then
    return nil, where .. ": the " .. t .. " is " .. human(whole or #data) .. ", over the limit of "
      .. human(cap)
  end
  if #data == 0 then return nil, where .. ": the " .. t .. " is empty" end
  out.media_type, out.data, out.size = mt, data, #data
  return out
end

-- Stores a checked block's bytes (once per content) and returns the block the
-- journal keeps; URL and blob blocks come back as they are.
function M.store(store, b)
  if not b.data then return b end
  local hex = core.sha256_hex(b.data)
  local ok, msg, code = store:blob_put(M.key(hex), b.data)
  if not ok then return nil, "storing the " .. b.type .. " failed: " .. tostring(msg), code end
  return { type = b.type, media_type = b.media_type, blob = hex, size = b.size, name = b.name }
end

-- Checks and stores a list of specs; returns the stored blocks or nil, why.
function M.take(store, specs, where)
  local out = {}
  if #specs > M.PER_MESSAGE then
    return nil, (where or "media") .. ": more than " .. M.PER_MESSAGE .. " images and documents"
  end
  for i, s in ipairs(specs) do
    local b, err = M.check(s, (where or "media") .. "[" .. i .. "]")
    if not b then return nil, err end
    local sb, serr = M.store(store, b)
    if not sb then return nil, serr end
    out[i] = sb
  end
  return out
end

-- The request's blobs function for a store: reads "media/sha256/<hex>".
function M.resolver(store)
  return function(hex)
    return store:blob_get(M.key(hex))
  end
end

return M
