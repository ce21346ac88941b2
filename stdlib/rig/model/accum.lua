-- rig.model.accum: builds the final assistant message from normalized chunks.
--
-- Every provider decoder emits the same chunk shapes:
--   { type = "text", text = delta [, index = n] }
--   { type = "refusal", text = delta [, index = n] }
--   { type = "thinking", index = n, thinking = delta?, signature = s?, redacted = data?,
--     id = s?, source = provider? }
--   { type = "tool_use", index = n, id = s?, name = s?, input_json = fragment? }
-- Blocks are keyed by type and the provider's index (data from the wire, never an
-- array offset) and come out in the order they first appeared. Text and refusal
-- deltas concatenate; a tool call's argument fragments concatenate and are parsed
-- once, at the end; id, name, signature and source: the last non-empty value wins.

local json = require "rig.json"

local accum = {}
accum.__index = accum

local MAX_BLOCKS = 4096

function accum.new()
  return setmetatable({ blocks = {}, n = 0, by = {} }, accum)
end

-- The block for a chunk: by type, then by index (false when the chunk has none).
local function block_for(self, t, i)
  local by = self.by[t]
  if not by then
    by = {}
    self.by[t] = by
  end
  if i == nil then i = false end
  local b = by[i]
  if b then return b end
  local n = self.n
  if n >= MAX_BLOCKS then return nil end
  b = { type = t, index = i or nil, parts = {}, np = 0 }
  by[i] = b
  n = n + 1
  self.n = n
  self.blocks[n] = b
  return b
end

local function nonempty(s) return s ~= nil and s ~= "" end

-- Adds one chunk: true, or nil and a message when the stream holds more blocks
-- than any real reply (the index comes from the wire). Raises only on a chunk
-- type no decoder produces.
function accum:add(c)
  local t = c.type
  local i = c.index
  -- consecutive chunks nearly always continue the same block
  local b = self.last
  if b == nil or b.type ~= t or b.index ~= i then
    b = block_for(self, t, i)
    if not b then
      return nil, "the stream opened more than " .. MAX_BLOCKS .. " content blocks"
    end
    self.last = b
  end
  local piece
  if t == "text" or t == "refusal" then
    piece = c.text
  elseif t == "thinking" then
    piece = c.thinking
    if nonempty(c.signature) then b.signature = c.signature end
    if nonempty(c.redacted) then b.redacted = c.redacted end
    if nonempty(c.id) then b.id = c.id end
    if nonempty(c.source) then b.source = c.source end
  elseif t == "tool_use" then
    piece = c.input_json
    if nonempty(c.id) then b.id = c.id end
    if nonempty(c.name) then b.name = c.name end
  else
    error("model stream: unknown chunk type '" .. tostring(t) .. "'", 0)
  end
  if piece ~= nil and piece ~= "" then
    local np = b.np + 1
    b.np = np
    b.parts[np] = piece
  end
  return true
end

-- Parses one tool call's arguments: an object, or {} with an error the loop can
-- report to the model.
local function finish_tool(b, raw, truncated)
  b.input_json = raw
  if raw == "" then
    b.input = {}
    b.input_json = "{}"
  else
    local v, err = json.decode(raw)
    if v == nil then
      b.input = {}
      b.error = truncated and "the tool arguments were cut off by the output token limit"
        or ("the tool arguments are not valid JSON: " .. tostring(err):gsub("^json: ", ""))
    elseif type(v) ~= "table" or json.is_array(v) then
      b.input = {}
      b.error = "the tool arguments are not a JSON object"
    else
      b.input = v
    end
  end
  if not nonempty(b.id) then
    b.error = b.error or "the tool call has no id"
    b.id = b.id or ""
  end
  if not nonempty(b.name) then
    b.error = b.error or "the tool call has no name"
    b.name = b.name or ""
  end
end

-- The final message. `truncated` (the output hit its token limit) explains
-- unparsable tool arguments.
function accum:message(truncated)
  local content = {}
  for _, b in ipairs(self.blocks) do
    local raw = table.concat(b.parts)
    if b.type == "text" or b.type == "refusal" then
      if raw ~= "" then content[#content + 1] = { type = b.type, text = raw } end
    elseif b.type == "thinking" then
      local out = { type = "thinking", thinking = raw, signature = b.signature,
                    redacted = b.redacted, id = b.id, source = b.source }
      if raw ~= "" or out.signature or out.redacted or out.id then
        content[#content + 1] = out
      end
    else
      local out = { type = "tool_use", id = b.id, name = b.name }
      finish_tool(out, raw, truncated)
      content[#content + 1] = out
    end
  end
  return { role = "assistant", content = content }
end

return accum
