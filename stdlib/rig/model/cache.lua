-- rig.model.cache: a model's prompt-caching policy (its `cache` field) and
-- what the codecs send for it. Users read docs/caching.md; in short:
--
--   cache = "auto"   (the default) Anthropic: cache breakpoints on the last
--                    two user/tool turns, the system prompt and the last
--                    tool; OpenAI: prompt_cache_key, the caller's key
--   cache = "off"    nothing: no breakpoints (block hints dropped too), no key
--   cache = { tools = true, system = true, messages = 2, ttl = "5m"|"1h",
--             key = true|false|"text", retention = "in_memory"|"24h" }
--                    "auto" tuned: each field left out keeps its auto value
--
-- Anthropic allows 4 breakpoints a request. Block hints (`cache = true` on a
-- text block of a message) are placed first; the policy fills what is left,
-- newest turn first, then the system prompt, then the tools (a request of one
-- message gets no turn breakpoint: nothing would read it). Each step's
-- request then reads the prefix the step before wrote (the breakpoint on the
-- turn before the last) and writes its own (the breakpoint on the last turn).
-- Gemini caches implicitly and reports it; the policy sends it nothing.

local json = require "rig.json"

local C = {}

C.MAX_BREAKPOINTS = 4

local AUTO = { tools = true, system = true, messages = 2, key = true }
local FIELDS = { tools = "boolean", system = "boolean", messages = "number", ttl = "string",
                 key = true, retention = "string" }
local TTLS = { ["5m"] = true, ["1h"] = true }
local RETENTIONS = { in_memory = true, ["24h"] = true }

local function copy(t)
  local out = {}
  for k, v in pairs(t) do out[k] = v end
  return out
end

-- The normalized policy of a model definition's `cache` field: a table of the
-- fields above, or false for "off". `fail(msg)` raises.
function C.check(v, fail)
  if v == nil or v == "auto" then return copy(AUTO) end
  if v == "off" or v == false then return false end
  if type(v) ~= "table" then
    fail("field 'cache' must be \"auto\", \"off\" or a table (got " .. (type(v) == "string"
      and "'" .. v .. "'" or type(v)) .. ")")
  end
  local out = copy(AUTO)
  for k, x in pairs(v) do
    local want = FIELDS[k]
    if not want then fail("unknown field 'cache." .. tostring(k) .. "'") end
    if want ~= true and type(x) ~= want then
      fail("field 'cache." .. k .. "' must be a " .. want)
    end
    out[k] = x
  end
  if math.type(out.messages) ~= "integer" and out.messages ~= math.floor(out.messages) then
    fail("field 'cache.messages' must be an integer")
  end
  out.messages = math.tointeger(out.messages)
  if out.messages < 0 or out.messages > C.MAX_BREAKPOINTS then
    fail("field 'cache.messages' must be between 0 and " .. C.MAX_BREAKPOINTS)
  end
  local n = out.messages + (out.tools and 1 or 0) + (out.system and 1 or 0)
  if n > C.MAX_BREAKPOINTS then
    fail(string.format("field 'cache' asks for %d breakpoints (tools, system and %d messages);"
      .. " Anthropic allows %d", n, out.messages, C.MAX_BREAKPOINTS))
  end
  if out.ttl ~= nil and not TTLS[out.ttl] then
    fail("field 'cache.ttl' must be \"5m\" or \"1h\" (got '" .. out.ttl .. "')")
  end
  if out.retention ~= nil and not RETENTIONS[out.retention] then
    fail("field 'cache.retention' must be \"in_memory\" or \"24h\" (got '" .. out.retention .. "')")
  end
  local key = out.key
  if type(key) == "string" then
    if key == "" or #key > 64 or key:find("[%c]") then
      fail("field 'cache.key' must be 1 to 64 printable characters")
    end
  elseif type(key) ~= "boolean" then
    fail("field 'cache.key' must be a boolean or a string")
  end
  return out
end

-- ---- Anthropic: cache_control breakpoints ----

local function marker(policy)
  if policy and policy.ttl == "1h" then return { type = "ephemeral", ttl = "1h" } end
  return { type = "ephemeral" }
end
C.marker = marker

-- Places the breakpoints on an encoded Messages body: `hinted` wire blocks
-- (from `cache = true` hints) first, then the policy's. Returns true, or nil
-- and a message when the hints alone exceed the limit.
function C.anthropic(policy, body, hinted)
  if not policy then return true end
  local mark = marker(policy)
  local used = 0
  for _, b in ipairs(hinted) do
    b.cache_control = mark
    used = used + 1
  end
  if used > C.MAX_BREAKPOINTS then
    return nil, string.format("anthropic: the request holds %d cache hints (cache = true);"
      .. " the API allows %d", used, C.MAX_BREAKPOINTS)
  end
  local function place(b)
    if used >= C.MAX_BREAKPOINTS or b.cache_control then return end
    b.cache_control = mark
    used = used + 1
  end
  -- the newest user turns: the last block of each (a tool_result or text); a
  -- request of one message (a one-off call, a compaction's summary) gets none:
  -- no later request would read it back, and a write costs more than input
  local msgs = body.messages
  local left = #msgs > 1 and policy.messages or 0
  for i = #msgs, 1, -1 do
    if left == 0 then break end
    local m = msgs[i]
    if m.role == "user" and #m.content > 0 then
      place(m.content[#m.content])
      left = left - 1
    end
  end
  if policy.system and body.system then
    local sys = body.system
    if type(sys) == "string" then
      sys = json.array({ { type = "text", text = sys } })
      body.system = sys
    end
    place(sys[#sys])
    -- a system left as one plain block without a breakpoint goes back to a string
    if not sys[#sys].cache_control and #sys == 1 then body.system = sys[1].text end
  end
  if policy.tools and body.tools and #body.tools > 0 then place(body.tools[#body.tools]) end
  return true
end

-- ---- OpenAI: prompt_cache_key and prompt_cache_retention ----

local core

-- The key for a request: the model's own string, or the caller's key (a
-- session and loop) hashed so no name leaves the machine; nil without one.
function C.openai_key(policy, req)
  if not policy or policy.key == false then return nil end
  if type(policy.key) == "string" then return policy.key end
  local k = req.cache_key
  if type(k) ~= "string" or k == "" then return nil end
  core = core or require "rig.core"
  return "luarig-" .. core.sha256_hex(k):sub(1, 32)
end

-- Adds the OpenAI fields (Chat Completions and Responses take the same two).
function C.openai(policy, body, req)
  if not policy then return end
  body.prompt_cache_key = C.openai_key(policy, req)
  body.prompt_cache_retention = policy.retention
end

return C
