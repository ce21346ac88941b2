-- rig.loop: a Loop definition, validated and frozen (DESIGN §1, §4).
--
--   local l = rig.loop{
--     name = "assistant",          -- a letter, then up to 63 letters, digits, '_', '.', '-'
--     model = m,                   -- a rig.model (rig.model.script too); required
--     system = "…",                -- the system prompt (default "")
--     tools = { t, … },            -- rig.tool objects, names unique (default none)
--     gate = g,                    -- a rig.gate; without one every tool call is denied
--     policy_revision = "v1",      -- required with a gate: names the gate's policy, which
--                                  -- the loop cannot hash itself (1 to 128 bytes)
--     limits = { iterations = 25, calls = 100, parallel = 8, result_bytes = 32768,
--                max_tokens = nil, max_cost = nil },
--     delegates = { "researcher" },-- loop names this loop may start (resolved by rig.define)
--     description = "…",           -- what a delegating loop reads about this one
--   }
--   l.name, l.model, l.system, l.tools (a new list each read), l.gate, l.limits (a copy,
--   defaults filled), l.delegates (a copy), l.policy_revision, l.description: read-only
--   l:tool(name) -> the rig.tool | nil
--   l:revision() -> 64 hex: SHA-256 of the canonical JSON of { name, model identity
--     (provider, name, base_url, effort, max_tokens, temperature, top_p, stop, thinking,
--     tools — no key, no headers), system, tools (name, description, schema, sequential,
--     in order), limits, delegates (sorted), policy_revision }. Same definition, same
--     revision, in any process; a restore compares it to what the session journaled.
--
-- limits: iterations (model calls per turn, >= 1), calls (tool calls per turn, >= 1),
-- parallel (tool calls at once, >= 1), result_bytes (0 = no cap, else >= 256: longer
-- results keep head and tail), max_tokens (output tokens per turn, or nil), max_cost
-- (dollars per turn, or nil).

local core = require "rig.core"
local json = require "rig.json"
local tool_mod = require "rig.tool"

local M = {}

local fields = { name = true, model = true, system = true, tools = true, gate = true,
                 policy_revision = true, limits = true, delegates = true, description = true }

local LIMITS = { iterations = 25, calls = 100, parallel = 8, result_bytes = 32768 }
local limit_fields = { iterations = true, calls = true, parallel = true, result_bytes = true,
                       max_tokens = true, max_cost = true }

local private = setmetatable({}, { __mode = "k" })

local function checked(level, f, ...)
  local ok, a, b = pcall(f, ...)
  if not ok then error(a, level + 1) end
  return a, b
end

local function is_model(v)
  return type(v) == "table" and getmetatable(v) == "rig.model"
end

local function is_gate(v)
  return type(v) == "table" and getmetatable(v) == "rig.gate"
end

local NAME = "^%a[%w_.-]*$"
M.NAME = NAME

local function list_of(v, path, bad)
  if type(v) ~= "table" or getmetatable(v) ~= nil then bad("field '" .. path .. "' must be a list") end
  local n = #v
  for k in pairs(v) do
    if math.type(k) ~= "integer" or k < 1 or k > n then
      bad("field '" .. path .. "' must be a list (found key " .. tostring(k) .. ")")
    end
  end
  return n
end

local function int_limit(v, name, lo, bad)
  if math.type(v) ~= "integer" then
    if type(v) == "number" and v == math.floor(v) and v >= -2^53 and v <= 2^53 then
      v = math.tointeger(v)
    else
      bad("field 'limits." .. name .. "' must be an integer")
    end
  end
  if v < lo then bad("field 'limits." .. name .. "' must be at least " .. lo .. " (got " .. v .. ")") end
  return v
end

local function check_loop(def)
  if type(def) ~= "table" then error("rig.loop: expects a table of fields", 0) end
  for k in pairs(def) do
    if not fields[k] then error("rig.loop: unknown field '" .. tostring(k) .. "'", 0) end
  end
  local name = def.name
  if type(name) ~= "string" or #name > 64 or not name:match(NAME) then
    error("rig.loop: field 'name' must be a letter then up to 63 letters, digits, '_', '.' or '-' (got "
      .. (type(name) == "string" and ("'" .. name .. "'") or type(name)) .. ")", 0)
  end
  local function bad(msg) error("rig.loop '" .. name .. "': " .. msg, 0) end
  local p = { name = name }

  if not is_model(def.model) then bad("field 'model' must be a rig.model") end
  p.model = def.model

  if def.system ~= nil and type(def.system) ~= "string" then bad("field 'system' must be a string") end
  p.system = def.system or ""
  if def.description ~= nil and type(def.description) ~= "string" then
    bad("field 'description' must be a string")
  end
  p.description = def.description

  p.tools, p.by_name = {}, {}
  if def.tools ~= nil then
    local n = list_of(def.tools, "tools", bad)
    for i = 1, n do
      local t = def.tools[i]
      if not tool_mod.is_tool(t) then bad("field 'tools[" .. i .. "]' must be a rig.tool") end
      if p.by_name[t.name] then bad("field 'tools[" .. i .. "]': duplicate tool name '" .. t.name .. "'") end
      p.tools[i] = t
      p.by_name[t.name] = t
    end
  end

  if def.gate ~= nil and not is_gate(def.gate) then bad("field 'gate' must be a rig.gate") end
  p.gate = def.gate
  local rev = def.policy_revision
  if rev ~= nil and (type(rev) ~= "string" or rev == "" or #rev > 128 or rev:find("%c")) then
    bad("field 'policy_revision' must be a string of 1 to 128 printable bytes")
  end
  if p.gate and rev == nil then
    bad("field 'policy_revision' is required with a gate (it names the gate's policy in the revision)")
  end
  p.policy_revision = rev

  local limits = {}
  for k, v in pairs(LIMITS) do limits[k] = v end
  if def.limits ~= nil then
    if type(def.limits) ~= "table" then bad("field 'limits' must be a table") end
    for k, v in pairs(def.limits) do
      if not limit_fields[k] then bad("unknown field 'limits." .. tostring(k) .. "'") end
      if k == "max_cost" then
        if type(v) ~= "number" or v ~= v or v <= 0 or v == math.huge then
          bad("field 'limits.max_cost' must be a positive number of dollars")
        end
        limits.max_cost = v
      else
        limits[k] = int_limit(v, k, k == "result_bytes" and 0 or 1, bad)
      end
    end
    if limits.result_bytes ~= 0 and limits.result_bytes < 256 then
      bad("field 'limits.result_bytes' must be 0 (no cap) or at least 256 (got "
        .. limits.result_bytes .. ")")
    end
  end
  p.limits = limits

  p.delegates = {}
  if def.delegates ~= nil then
    local n = list_of(def.delegates, "delegates", bad)
    local seen = {}
    for i = 1, n do
      local d = def.delegates[i]
      if type(d) ~= "string" or #d > 64 or not d:match(NAME) then
        bad("field 'delegates[" .. i .. "]' must be a loop name")
      end
      if seen[d] then bad("field 'delegates' lists '" .. d .. "' twice") end
      seen[d] = true
      p.delegates[i] = d
    end
  end
  return p
end

-- ---- revision ----

local function model_identity(m)
  local id = {}
  for _, k in ipairs { "provider", "name", "base_url", "effort", "max_tokens", "temperature",
                       "top_p", "stop", "thinking", "tools" } do
    local v = m[k]
    if v == nil then v = json.null end
    id[k] = v
  end
  return id
end

local function or_null(v)
  if v == nil then return json.null end
  return v
end

local function revision(p)
  local tools = {}
  for i, t in ipairs(p.tools) do tools[i] = tool_mod._projection(t) end
  local delegates = {}
  for i, d in ipairs(p.delegates) do delegates[i] = d end
  table.sort(delegates)
  local l = p.limits
  local doc = {
    v = 1,
    name = p.name,
    model = model_identity(p.model),
    system = p.system,
    tools = json.array(tools),
    limits = { iterations = l.iterations, calls = l.calls, parallel = l.parallel,
               result_bytes = l.result_bytes, max_tokens = or_null(l.max_tokens),
               max_cost = or_null(l.max_cost) },
    delegates = json.array(delegates),
    policy_revision = or_null(p.policy_revision),
  }
  local text = assert(json.encode(doc))
  return core.sha256_hex(text), text
end

-- ---- the frozen object ----

local Loop = {}

function Loop:tool(name)
  return private[self].by_name[name]
end

function Loop:revision()
  local p = private[self]
  if not p.revision then p.revision, p.canonical = revision(p) end
  return p.revision
end

-- The canonical JSON the revision hashes (for diagnosing drift).
function Loop:canonical()
  self:revision()
  return private[self].canonical
end

local copied = { tools = true, limits = true, delegates = true }

local loop_mt = {
  __index = function(t, k)
    local f = Loop[k]
    if f then return f end
    local p = private[t]
    if copied[k] then
      local out = {}
      for a, b in pairs(p[k]) do out[a] = b end
      return out
    end
    if k == "by_name" or k == "revision" or k == "canonical" then return nil end
    return p[k]
  end,
  __newindex = function(t, k)
    error("rig.loop: loop '" .. private[t].name .. "' is frozen (cannot set '" .. tostring(k)
      .. "')", 2)
  end,
  __tostring = function(t) return "rig.loop(" .. private[t].name .. ")" end,
  __metatable = "rig.loop",
}

function M.is_loop(v)
  return type(v) == "table" and getmetatable(v) == "rig.loop" and private[v] ~= nil
end

return setmetatable(M, {
  __call = function(_, def)
    local p = checked(2, check_loop, def)
    local l = setmetatable({}, loop_mt)
    private[l] = p
    return l
  end,
})
