-- rig.model.media: image and document blocks in a request, as every codec
-- reads them (docs/media.md).
--
--   { type = "image", media_type = "image/png" | "image/jpeg" | "image/webp" | "image/gif",
--     data = bytes | blob = "<64 hex>" | url = "https://…", size = n?, name = "…"? }
--   { type = "document", media_type = "application/pdf" | "text/plain", same sources }
--
-- Exactly one source: data (the bytes; for text/plain the UTF-8 text), blob (a
-- SHA-256 the request's `blobs` function turns back into bytes: a session keeps
-- media in its store once and its journal holds only the reference) or url
-- (sent as a URL where the provider fetches one). They go in user messages and
-- in a tool_result's content list. Before encoding, M.prepare resolves every
-- blob and base64-encodes each block once (kept per normalized block: for a
-- session, the history's own block or the request cache's copy of it).

local core = require "rig.core"

local M = {}

M.IMAGE_TYPES = { ["image/png"] = true, ["image/jpeg"] = true, ["image/webp"] = true,
                  ["image/gif"] = true }
M.DOCUMENT_TYPES = { ["application/pdf"] = true, ["text/plain"] = true }
M.FIELDS = { type = true, media_type = true, data = true, blob = true, url = true, size = true,
             name = true }

local B64 = setmetatable({}, { __mode = "k" }) -- normalized block -> base64 of its bytes
local TEXT = setmetatable({}, { __mode = "k" }) -- text/plain block -> its text

function M.is_media(t) return t == "image" or t == "document" end

-- Checks one media block (raises through fail(path, msg)); returns the copy.
function M.copy(b, path, fail)
  local t = b.type
  for k in pairs(b) do
    if not M.FIELDS[k] then fail(path, "unknown field '" .. tostring(k) .. "'") end
  end
  local mt = b.media_type
  local ok = t == "image" and M.IMAGE_TYPES[mt] or t == "document" and M.DOCUMENT_TYPES[mt]
  if not ok then
    fail(path .. ".media_type", "an " .. t .. " block needs media_type "
      .. (t == "image" and "image/png, image/jpeg, image/webp or image/gif"
        or "application/pdf or text/plain") .. " (got " .. tostring(mt) .. ")")
  end
  local n = (b.data ~= nil and 1 or 0) + (b.blob ~= nil and 1 or 0) + (b.url ~= nil and 1 or 0)
  if n ~= 1 then fail(path, "needs exactly one of data, blob and url") end
  if b.data ~= nil and type(b.data) ~= "string" then fail(path .. ".data", "must be a string of bytes") end
  if b.blob ~= nil and (type(b.blob) ~= "string" or not b.blob:match("^%x+$") or #b.blob ~= 64) then
    fail(path .. ".blob", "must be a SHA-256 in 64 hex digits")
  end
  if b.url ~= nil and (type(b.url) ~= "string" or not b.url:match("^https?://[^%s]+$")) then
    fail(path .. ".url", "must be an http or https URL")
  end
  if b.name ~= nil and type(b.name) ~= "string" then fail(path .. ".name", "must be a string") end
  if b.size ~= nil and math.type(b.size) ~= "integer" then fail(path .. ".size", "must be an integer") end
  return { type = t, media_type = mt, data = b.data, blob = b.blob, url = b.url, size = b.size,
           name = b.name }
end

-- True when M.copy(b) would give back a block equal to b (rig.model.request
-- then uses b itself); never raises.
function M.normal(b)
  for k in pairs(b) do
    if not M.FIELDS[k] then return false end
  end
  local t, mt = b.type, b.media_type
  if not (t == "image" and M.IMAGE_TYPES[mt] or t == "document" and M.DOCUMENT_TYPES[mt]) then
    return false
  end
  local data, blob, url = b.data, b.blob, b.url
  local n = (data ~= nil and 1 or 0) + (blob ~= nil and 1 or 0) + (url ~= nil and 1 or 0)
  if n ~= 1 then return false end
  if data ~= nil and type(data) ~= "string" then return false end
  if blob ~= nil and (type(blob) ~= "string" or not blob:match("^%x+$") or #blob ~= 64) then
    return false
  end
  if url ~= nil and (type(url) ~= "string" or not url:match("^https?://[^%s]+$")) then
    return false
  end
  if b.name ~= nil and type(b.name) ~= "string" then return false end
  return b.size == nil or math.type(b.size) == "integer"
end

-- Normalized messages (which nothing changes afterwards) found to hold no
-- media block, noted when a request is walked from its first message: a
-- request whose list is new every time (a before_model hook's) is not walked
-- block by block each time. A session's list grown at its end is walked only
-- from where the last prepared request ended (M.prepare's `from`).
local PLAIN = setmetatable({}, { __mode = "k" })

local function each_media(req, from, fn)
  local msgs = req.messages
  local note = from == 1
  for i = from, #msgs do
    local m = msgs[i]
    if not PLAIN[m] then
      local any = false
      for _, b in ipairs(m.content) do
        if M.is_media(b.type) then
          any = true
          local r = fn(b)
          if r then return r end
        elseif b.type == "tool_result" and type(b.content) == "table" then
          for _, c in ipairs(b.content) do
            if M.is_media(c.type) then
              any = true
              local r = fn(c)
              if r then return r end
            end
          end
        end
      end
      if not any and note then PLAIN[m] = true end
    end
  end
end

-- Resolves and encodes the request's media, from its message `from` on (the
-- ones before it prepared already: default 1). Returns true, or nil and why.
function M.prepare(req, from)
  local err = each_media(req, from or 1, function(b)
    if b.url or B64[b] then return nil end
    local bytes = b.data
    if bytes == nil then
      if type(req.blobs) ~= "function" then
        return "a media block refers to blob " .. b.blob:sub(1, 12) .. "… and the request has no "
          .. "'blobs' function to read it"
      end
      local got, msg = req.blobs(b.blob)
      if type(got) ~= "string" then
        return "media blob " .. b.blob:sub(1, 12) .. "… cannot be read: " .. tostring(msg)
      end
      bytes = got
    end
    if b.media_type == "text/plain" then TEXT[b] = bytes end
    B64[b] = core.base64_encode(bytes)
  end)
  if err then return nil, err end
  return true
end

-- The base64 of a prepared block (nil for a URL block).
function M.b64(b) return B64[b] end

-- data:<type>;base64,<…> or the block's URL.
function M.data_url(b)
  if b.url then return b.url end
  return "data:" .. b.media_type .. ";base64," .. B64[b]
end

-- A text/plain document's text (after prepare), nil for a URL.
function M.text(b)
  if b.url then return nil end
  return TEXT[b] or b.data
end

-- A file name for providers that want one.
function M.filename(b)
  if b.name and b.name ~= "" then return b.name end
  return b.media_type == "application/pdf" and "document.pdf" or "document.txt"
end

-- A text stand-in for a block a provider cannot take at that place.
function M.placeholder(b)
  return "[" .. b.type .. " " .. (b.name or b.media_type) .. " omitted: not supported here]"
end

return M
