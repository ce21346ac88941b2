-- rig.define: a Rig, the immutable assembly a session runs (docs/architecture.md).
--
--   local r = rig.define{
--     loops = { l1, l2 },                 -- rig.loop objects, names unique; at least one (a
--                                         -- delegate given as a loop object joins by itself)
--     primers = { "assistant" },          -- the loops every session starts with
--     active_primer = "assistant",        -- required when there is more than one primer
--     store = store,                      -- a rig.store (memory or lmdb); required
--     delegation_limits = { depth = 3, quota = 64 },  -- spawn-chain depth, sub-loops per session
--     workspace = rig.workspace.exclusive{ root = dir },  -- or per_session{ base }, shared{ root }
--     snapshots = { trigger = "idle", priority = "best_effort", timeout = 60 },  -- see rig.workspace
--   }
--   r.loops (a new list each read), r:loop(name) -> rig.loop | nil, r.primers (a copy),
--   r.active_primer, r.store, r.delegation_limits (a copy), r.workspace (the placement or nil),
--   r.snapshots (a copy of the normalized policy, nil without a workspace): read-only
--   r:fingerprint() -> 64 hex: SHA-256 over every loop's revision (by name), the
--     primers in order, the active primer, the delegation limits and, with a workspace,
--     its placement (kind and canonical path) and snapshot policy
--   r:session(), r:restore(id, opts), r:sessions(): from rig.session (looked up on first use)
--
-- Refused (raising, naming the field): no loops, a duplicate loop name, no primers, an
-- unknown or repeated primer, an active primer that is not a primer, a delegate or a
-- handoff that names no loop, a loop no primer reaches through delegates or handoffs, no store, an unknown field,
-- snapshots without a workspace, required snapshots of a shared workspace, a store root
-- that overlaps the workspace.

local core = require "rig.core"
local json = require "rig.json"
local loop_mod = require "rig.loop"
local workspace = require "rig.workspace"

local M = {}

local fields = { loops = true, primers = true, store = true, active_primer = true,
                 delegation_limits = true, workspace = true, snapshots = true, budget = true }
local DELEGATION = { depth = 3, quota = 64 }

local private = setmetatable({}, { __mode = "k" })

local function checked(level, f, ...)
  local ok, a, b = pcall(f, ...)
  if not ok then error(a, level + 1) end
  return a, b
end

local function bad(msg) error("rig.define: " .. msg, 0) end

local function list_of(v, path)
  if type(v) ~= "table" or getmetatable(v) ~= nil then bad("field '" .. path .. "' must be a list") end
  local n = #v
  for k in pairs(v) do
    if math.type(k) ~= "integer" or k < 1 or k > n then
      bad("field '" .. path .. "' must be a list (found key " .. tostring(k) .. ")")
    end
  end
  return n
end

local function is_store(v)
  if type(v) ~= "userdata" then return false end
  local mt = debug.getmetatable(v)
  return type(mt) == "table" and mt.__name == "rig.store"
end

local function check_rig(def)
  if type(def) ~= "table" then bad("expects a table of fields") end
  for k in pairs(def) do
    if not fields[k] then bad("unknown field '" .. tostring(k) .. "'") end
  end
  local p = { loops = {}, by_name = {} }
  if def.loops == nil then bad("field 'loops' is required (at least one rig.loop)") end
  local n = list_of(def.loops, "loops")
  if n == 0 then bad("field 'loops' must hold at least one rig.loop") end
  for i = 1, n do
    local l = def.loops[i]
    if not loop_mod.is_loop(l) then bad("field 'loops[" .. i .. "]' must be a rig.loop") end
    if p.by_name[l.name] then bad("field 'loops[" .. i .. "]': duplicate loop name '" .. l.name .. "'") end
    p.loops[i] = l
    p.by_name[l.name] = l
  end
  -- delegates given as loop objects join the rig when not listed (transitively)
  local head = 1
  while p.loops[head] do
    for _, d in ipairs(loop_mod._delegate_loops(p.loops[head])) do
      local known = p.by_name[d.name]
      if known == nil then
        p.loops[#p.loops + 1] = d
        p.by_name[d.name] = d
      elseif known ~= d then
        bad("loop '" .. p.loops[head].name .. "' delegates to a loop named '" .. d.name
          .. "' that is not the rig's loop of that name")
      end
    end
    head = head + 1
  end

  if def.primers == nil then bad("field 'primers' is required (the loops a session starts with)") end
  local np = list_of(def.primers, "primers")
  if np == 0 then bad("field 'primers' must name at least one loop") end
  p.primers = {}
  local is_primer = {}
  for i = 1, np do
    local name = def.primers[i]
    if type(name) ~= "string" then bad("field 'primers[" .. i .. "]' must be a loop name") end
    if not p.by_name[name] then bad("field 'primers[" .. i .. "]': unknown loop '" .. name .. "'") end
    if is_primer[name] then bad("field 'primers' lists '" .. name .. "' twice") end
    is_primer[name] = true
    p.primers[i] = name
  end
  local active = def.active_primer
  if active == nil then
    if np > 1 then
      bad("field 'active_primer' is required with more than one primer")
    end
    active = p.primers[1]
  elseif type(active) ~= "string" or not is_primer[active] then
    bad("field 'active_primer' must be one of the primers (got "
      .. (type(active) == "string" and ("'" .. active .. "'") or type(active)) .. ")")
  end
  p.active_primer = active

  -- every delegate and handoff resolves; every loop is reachable from a primer
  local edges = {}
  for _, l in ipairs(p.loops) do
    local e = {}
    for j, d in ipairs(l.delegates) do
      if not p.by_name[d] then
        bad("loop '" .. l.name .. "': field 'delegates[" .. j .. "]' names no loop of this rig ('"
          .. d .. "')")
      end
      e[#e + 1] = d
    end
    for j, h in ipairs(l.handoffs or {}) do
      if not p.by_name[h.loop] then
        bad("loop '" .. l.name .. "': field 'handoffs[" .. j .. "]' names no loop of this rig ('"
          .. h.loop .. "')")
      end
      e[#e + 1] = h.loop
    end
    edges[l.name] = e
  end
  local reached, queue = {}, {}
  for _, name in ipairs(p.primers) do reached[name] = true; queue[#queue + 1] = name end
  local head = 1
  while queue[head] do
    for _, d in ipairs(edges[queue[head]]) do
      if not reached[d] then reached[d] = true; queue[#queue + 1] = d end
    end
    head = head + 1
  end
  for i, l in ipairs(p.loops) do
    if not reached[l.name] then
      bad("field 'loops[" .. i .. "]': loop '" .. l.name
        .. "' is unreachable (no primer reaches it through delegates or handoffs)")
    end
  end

  if def.store == nil then bad("field 'store' is required (a rig.store)") end
  if not is_store(def.store) then bad("field 'store' must be a rig.store") end
  p.store = def.store

  local lim = { depth = DELEGATION.depth, quota = DELEGATION.quota }
  if def.delegation_limits ~= nil then
    if type(def.delegation_limits) ~= "table" then bad("field 'delegation_limits' must be a table") end
    for k, v in pairs(def.delegation_limits) do
      if k ~= "depth" and k ~= "quota" then
        bad("unknown field 'delegation_limits." .. tostring(k) .. "'")
      end
      if math.type(v) ~= "integer" and not (type(v) == "number" and v == math.floor(v)) or v < 1 then
        bad("field 'delegation_limits." .. k .. "' must be a positive integer")
      end
      lim[k] = math.tointeger(v)
    end
  end
  p.delegation_limits = lim

  if def.budget ~= nil then
    local b = def.budget
    if type(b) ~= "table" or getmetatable(b) ~= nil then bad("field 'budget' must be a table") end
    p.budget = {}
    for k, v in pairs(b) do
      if k == "max_tokens" then
        if math.type(v) ~= "integer" and not (type(v) == "number" and v == math.floor(v)) or v < 1 then
          bad("field 'budget.max_tokens' must be a positive integer")
        end
        p.budget.max_tokens = math.tointeger(v)
      elseif k == "max_cost" then
        if type(v) ~= "number" or v ~= v or v <= 0 or v == math.huge then
          bad("field 'budget.max_cost' must be a positive number of dollars")
        end
        p.budget.max_cost = v
      else
        bad("unknown field 'budget." .. tostring(k) .. "' (max_tokens, max_cost)")
      end
    end
  end

  local ok, pol = pcall(workspace.check, def.workspace, def.snapshots, p.store)
  if not ok then bad(pol) end
  if def.workspace ~= nil then
    p.workspace = def.workspace
    p.snapshots = pol
  end
  return p
end

local function fingerprint(p)
  local loops = {}
  for i, l in ipairs(p.loops) do loops[i] = { name = l.name, revision = l:revision() } end
  table.sort(loops, function(a, b) return a.name < b.name end)
  local primers = {}
  for i, name in ipairs(p.primers) do primers[i] = name end
  local doc = {
    v = 1,
    loops = json.array(loops),
    primers = json.array(primers),
    active_primer = p.active_primer,
    delegation_limits = { depth = p.delegation_limits.depth, quota = p.delegation_limits.quota },
  }
  if p.budget then
    doc.budget = { max_tokens = p.budget.max_tokens, max_cost = p.budget.max_cost }
  end
  if p.workspace then
    doc.workspace, doc.snapshots = workspace.identity(p.workspace, p.snapshots)
  end
  return core.sha256_hex(assert(json.encode(doc)))
end

-- ---- the frozen object ----

local Rig = {}

function Rig:loop(name)
  return private[self].by_name[name]
end

function Rig:fingerprint()
  local p = private[self]
  if not p.fingerprint then p.fingerprint = fingerprint(p) end
  return p.fingerprint
end

local copied = { loops = true, primers = true, delegation_limits = true, snapshots = true,
                 budget = true }
local plain = { store = true, active_primer = true, workspace = true }

-- rig.session is another module (the runner); it may not be installed in every build,
-- so a missing module means "no such method" rather than an error.
local session_methods
local function from_session(k)
  if session_methods == nil then
    local ok, m = pcall(require, "rig.session")
    if not ok then
      if tostring(m):find("module 'rig.session' not found", 1, true) then return nil end
      error(m, 3)
    end
    session_methods = type(m) == "table" and type(m.rig_methods) == "table" and m.rig_methods
      or false
  end
  return session_methods and session_methods[k] or nil
end

local rig_mt = {
  __index = function(t, k)
    local f = Rig[k]
    if f then return f end
    local p = private[t]
    if copied[k] then
      if p[k] == nil then return nil end
      local out = {}
      for a, b in pairs(p[k]) do out[a] = b end
      return out
    end
    if plain[k] then return p[k] end
    if type(k) == "string" then return from_session(k) end
    return nil
  end,
  __newindex = function(_, k)
    error("rig.define: a rig is frozen (cannot set '" .. tostring(k) .. "')", 2)
  end,
  __tostring = function(t) return "rig.define(" .. private[t].active_primer .. ")" end,
  __metatable = "rig.define",
}

function M.is_rig(v)
  return type(v) == "table" and getmetatable(v) == "rig.define" and private[v] ~= nil
end

-- For rig.session: the private record (loops by name, primers, store, limits).
function M._private(r)
  return private[r]
end

return setmetatable(M, {
  __call = function(_, def)
    local p = checked(2, check_rig, def)
    local r = setmetatable({}, rig_mt)
    private[r] = p
    return r
  end,
})
