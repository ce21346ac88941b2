-- rig.gate: the three-state decision on every tool call (docs/sandbox.md, docs/design/sessions.md).
--
--   local g = rig.gate{
--     access = profile,            -- a rig.sandbox.profile (profile:access_for(kind, scope);
--                                  -- its `delegate` field for kind "delegate", its `mcp`
--                                  -- field for kind "mcp"),
--                                  -- or a table { ["filesystem.read"] = "allow",
--                                  --   ["filesystem.write"] = "gated", network = "deny",
--                                  --   ["command.execute"] = "gated",
--                                  --   delegate = "gated", mcp = "gated",
--                                  --   tool = "gated" } (a kind left out is denied, but
--                                  --   "tool", a tool's needs_approval, is gated then)
--     rules = rig.permissions.file(PATH),  -- saved allow/deny rules, or nil
--     approver = "interactive",    -- or "headless": nobody can answer, gated means denied
--   }
--   g:evaluate(request) -> decision
--     decision = { verdict = "allow" | "deny" | "gated",
--                  reason = "…",                    -- deny: "permission denied: …"
--                  unmet = { requirement, … },      -- gated (and a headless denial)
--                  candidates = { rule, … },        -- gated: one allow rule per unmet
--                                                   -- requirement, what approve_always saves
--                  approved = { requirement, … },   -- allow by saved rules: the gated
--                                                   -- requirements those rules settled (a
--                                                   -- person's standing approval; a tool
--                                                   -- mints its grants from them as from a
--                                                   -- gate answered now)
--                  source = "access" | "rule" | "default" }
--   g:approve_always(candidates) -> true | nil, message  (the rules are written first;
--     a failed write returns nil and nothing is approved)
--   g.approver, g.rules, g.access: read-only
--
--   rig.gate.default([{ KIND = "deny" | "gated" | "allow", …, rules =, approver = }])
--     -> the gate a rig of one's own tools needs, in one expression: a call that declares
--     no access runs, delegation to the rig's loops runs (delegate = "allow"), and
--     anything else a call declares (files, network, commands, MCP, needs_approval) asks
--     a person (approver "interactive": s:respond_gate, s:ask's on_gate, the REPL, the
--     console). Each kind, rules and approver can be overridden.
--
-- Evaluation, in this order (the gate never sees raw arguments, only the request
-- the tool's prepare made, checked again here):
--   0. an invalid request: deny; no requirements at all: allow (source "default").
--   1. every requirement is routed to the access source (its kind and scope); an
--      unknown kind, a value other than deny/gated/allow, or an access source that
--      fails: deny (fail closed). The first "deny" ends the evaluation (source "access").
--   2. every saved deny rule is checked against every requirement before any allow
--      rule is looked at: a match denies (source "rule").
--   3. the requirements access left "gated" are checked against the saved allow rules.
--   4. what is left is ONE unmet set: verdict "gated" with all of it, or, headless,
--      deny "permission denied: approval required". Nothing left: allow.

local tool_mod = require "rig.tool"
local perms_mod = require "rig.permissions"

local M = {}

local KINDS = tool_mod.kinds
local STATES = { deny = true, gated = true, allow = true }
local fields = { access = true, rules = true, approver = true }

local private = setmetatable({}, { __mode = "k" })

-- debug.getmetatable: a profile's metatable is hidden behind __metatable = false
local function is_profile(v)
  if type(v) ~= "userdata" then return false end
  local mt = debug.getmetatable(v)
  return type(mt) == "table" and mt.__name == "rig.sandbox.profile"
end

local function check_gate(def)
  local function bad(msg) error("rig.gate: " .. msg, 0) end
  if type(def) ~= "table" then bad("expects a table of fields") end
  for k in pairs(def) do
    if not fields[k] then bad("unknown field '" .. tostring(k) .. "'") end
  end
  local p = {}
  local a = def.access
  if is_profile(a) then
    p.access = a
    p.access_for = function(kind, scope)
      -- a tool's own needs_approval: the profile has nothing to say about it
      if kind == "tool" then return "gated" end
      return a:access_for(kind, scope)
    end
  elseif type(a) == "table" and getmetatable(a) == nil then
    local t = {}
    for k, v in pairs(a) do
      if not KINDS[k] then
        bad("field 'access' has an unknown kind '" .. tostring(k) .. "' (filesystem.read, "
          .. "filesystem.write, network, command.execute, delegate, mcp, tool)")
      end
      if not STATES[v] then
        bad("field 'access." .. k .. "' must be \"deny\", \"gated\" or \"allow\"")
      end
      t[k] = v
    end
    p.access = t
    p.access_for = function(kind)
      local v = t[kind]
      if v == nil and kind == "tool" then return "gated" end
      if v == nil then return nil, "no access is configured for '" .. kind .. "'" end
      return v
    end
  else
    bad("field 'access' must be a rig.sandbox.profile or a table of kind = \"deny\" | \"gated\" | \"allow\"")
  end
  if def.rules ~= nil and not perms_mod.is_perms(def.rules) then
    bad("field 'rules' must be rig.permissions.file(PATH) or nil")
  end
  p.rules = def.rules
  if def.approver ~= "interactive" and def.approver ~= "headless" then
    bad("field 'approver' must be \"interactive\" or \"headless\" (got "
      .. (type(def.approver) == "string" and ("'" .. def.approver .. "'") or tostring(def.approver)) .. ")")
  end
  p.approver = def.approver
  return p
end

local function describe(r)
  return r.kind .. " '" .. r.match .. "'"
end

local function deny(reason, source, extra)
  local d = { verdict = "deny", reason = "permission denied: " .. reason, source = source }
  for k, v in pairs(extra or {}) do d[k] = v end
  return d
end

local function evaluate(p, request)
  local req, err = tool_mod.check_request(request)
  if not req then return deny(err, "default") end
  local reqs = req.requirements
  if #reqs == 0 then
    return { verdict = "allow", reason = "the request has no requirements", source = "default" }
  end

  -- 1. the access source; the first deny ends it
  local gated = {}
  for _, r in ipairs(reqs) do
    local ok, state, why = pcall(p.access_for, r.kind, r.scope)
    if not ok then
      return deny("cannot evaluate access for " .. describe(r) .. ": "
        .. tostring(state):gsub("^profile:access_for: ", ""), "access")
    end
    if state == nil then
      return deny((why or "no access for " .. describe(r)), "access")
    end
    if not STATES[state] then
      return deny("the access source gave '" .. tostring(state) .. "' for " .. describe(r), "access")
    end
    if state == "deny" then return deny("access denies " .. describe(r), "access") end
    if state == "gated" then gated[#gated + 1] = r end
  end

  -- 2. every saved deny before any saved allow
  local rules = p.rules
  if rules then
    rules:refresh()
    for _, r in ipairs(reqs) do
      local rule = rules:match_deny(r)
      if rule then
        return deny("a saved rule denies " .. describe(r) .. " (" .. rule.match .. ")", "rule")
      end
    end
  end

  -- 3. saved allows settle gated requirements
  local unmet, settled = {}, {}
  for _, r in ipairs(gated) do
    if rules and rules:match_allow(r) then
      settled[#settled + 1] = r
    else
      unmet[#unmet + 1] = r
    end
  end

  -- 4. one combined unmet set
  if #unmet == 0 then
    if #settled > 0 then
      return { verdict = "allow", reason = "allowed by saved rules", source = "rule",
               approved = settled }
    end
    return { verdict = "allow", reason = "allowed by access", source = "access" }
  end
  local candidates = {}
  for i, r in ipairs(unmet) do
    candidates[i] = { effect = "allow", kind = r.kind, match = r.match }
  end
  if p.approver == "headless" then
    return deny("approval required", "access", { unmet = unmet, code = "approval_required" })
  end
  local names = {}
  for i, r in ipairs(unmet) do names[i] = describe(r) end
  return { verdict = "gated", reason = "approval needed for " .. table.concat(names, ", "),
           unmet = unmet, candidates = candidates, source = "access" }
end

local Gate = {}

function Gate:evaluate(request)
  return evaluate(private[self], request)
end

function Gate:approve_always(candidates)
  local p = private[self]
  if type(candidates) ~= "table" then
    error("gate:approve_always: candidates must be a list of rules", 2)
  end
  if not p.rules then return nil, "approve always: the gate has no permission file (rules)" end
  for i, c in ipairs(candidates) do
    if type(c) ~= "table" or c.effect ~= "allow" then
      error("gate:approve_always: candidates[" .. i .. "] must be an allow rule", 2)
    end
  end
  local ok, msg = p.rules:add(candidates)
  if not ok then return nil, msg end
  return true
end

local gate_mt = {
  __index = function(t, k)
    local f = Gate[k]
    if f then return f end
    local p = private[t]
    if k == "approver" or k == "rules" then return p[k] end
    if k == "access" then
      if type(p.access) == "table" then
        local out = {}
        for a, b in pairs(p.access) do out[a] = b end
        return out
      end
      return p.access
    end
    return nil
  end,
  __newindex = function(_, k)
    error("rig.gate: a gate is frozen (cannot set '" .. tostring(k) .. "')", 2)
  end,
  __tostring = function(t) return "rig.gate(" .. private[t].approver .. ")" end,
  __metatable = "rig.gate",
}

function M.is_gate(v)
  return type(v) == "table" and getmetatable(v) == "rig.gate" and private[v] ~= nil
end

local DEFAULT = { ["filesystem.read"] = "gated", ["filesystem.write"] = "gated",
                  network = "gated", ["command.execute"] = "gated", delegate = "allow",
                  mcp = "gated", tool = "gated" }

local function new_gate(def, level)
  local ok, p = pcall(check_gate, def)
  if not ok then error(p, level + 1) end
  local g = setmetatable({}, gate_mt)
  private[g] = p
  return g
end

function M.default(opts)
  if opts ~= nil and type(opts) ~= "table" then
    error("rig.gate.default: expects nil or a table of kind = \"deny\" | \"gated\" | \"allow\"", 2)
  end
  local access = {}
  for k, v in pairs(DEFAULT) do access[k] = v end
  local def = { access = access, approver = "interactive" }
  for k, v in pairs(opts or {}) do
    if k == "rules" or k == "approver" then
      def[k] = v
    elseif KINDS[k] then
      access[k] = v
    else
      error("rig.gate.default: unknown option '" .. tostring(k) .. "' (a kind, rules, approver)", 2)
    end
  end
  return new_gate(def, 2)
end

return setmetatable(M, {
  __call = function(_, def)
    local ok, p = pcall(check_gate, def)
    if not ok then error(p, 2) end
    local g = setmetatable({}, gate_mt)
    private[g] = p
    return g
  end,
})
