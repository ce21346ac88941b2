-- rig.permissions: saved allow/deny rules for rig.gate, kept in one explicit file.
--
--   local perms = rig.permissions.file("/abs/path/permissions.json")
--   perms:match(requirement) -> "deny" | "allow" | nil   (deny rules win)
--   perms:match_deny(requirement), perms:match_allow(requirement) -> rule | nil
--   perms:add(rules) -> true | nil, message    (re-reads, merges, writes atomically)
--   perms:diagnostics() -> { "rule 3: unknown kind 'net'", … }
--   perms:reload() -> true | nil, message
--   perms:rules() -> a copy of the rules in force; perms.path
--
-- The file:
--   { "version": 1,
--     "rules": [ { "effect": "allow" | "deny", "kind": KIND, "match": "…" }, … ] }
--   KIND and how "match" matches a requirement's match:
--   command.execute  the command line, exactly; or a prefix rule "git log *" matching
--                    "git log" and "git log ARGS", but never when ARGS holds a shell
--                    control character (; & | ` $ ( ) < > or a line break), so a prefix
--                    rule cannot admit a chained command. A rule of just "*" is refused.
--   filesystem.read, filesystem.write
--                    an absolute path pattern: "*" matches within one path segment,
--                    "**" (a whole segment) any number of segments, none included
--                    ("/ws/**" matches "/ws" and everything below). The requirement's
--                    path is cleaned first ("//", ".", ".." resolved lexically);
--                    a relative path matches no rule.
--   network          "tcp://HOST:PORT": HOST exact (case-insensitive), "*.example.org"
--                    (any name below example.org, not example.org itself) or "*" (any);
--                    PORT a number or "*".
--   delegate         a delegate loop's name, exactly ("researcher"), or "*" (every
--                    delegate the loop lists). start_agent requires the delegate it
--                    starts, message_agent the delegate the child was started as
--                    (rig.delegation); list_agents and stop_agent require nothing.
--   mcp              "SERVER/TOOL" (one tool of an MCP server, as rig.mcp names the server),
--                    "SERVER/*" (every tool of that server), "SERVER:sampling" (that server's
--                    sampling requests answered by a rig model) or "*" (every MCP tool and
--                    sampling request of the servers the loop takes).
--   tool             a tool's name, exactly ("send_email"), or "*": the approval a tool
--                    with needs_approval asks for (rig.tool).
--   Each rule object holds exactly these three fields.
--
-- Safety: the path must be absolute; the file must not be a symbolic link, must be a
-- regular file owned by the current user and not writable by group or others — any of
-- these raises at rig.permissions.file and makes reload/add fail. A missing file means
-- no rules (add creates it, mode 0600). A file that is not this JSON shape raises at
-- rig.permissions.file; a malformed rule is skipped (it matches nothing) and reported by
-- diagnostics() with its index, counting from 1. A failed reload keeps the saved deny
-- rules and drops the allows (fail closed both ways). add() writes a temp file in the
-- same directory (0600), fsyncs it, renames it over the file and fsyncs the directory;
-- if anything fails it returns nil, message and the rules in force are unchanged.
-- The file is re-read when its inode, size or mtime changes (refresh(), called by
-- rig.gate before each evaluation).

local core = require "rig.core"
local json = require "rig.json"

local M = {}

local MAX_BYTES = 1 << 20
local MAX_RULES = 10000
local KINDS = { ["filesystem.read"] = true, ["filesystem.write"] = true, network = true,
                ["command.execute"] = true, delegate = true, mcp = true, tool = true }
-- a loop name (rig.loop's rule), or "*" in a delegate rule
local LOOP_NAME = "^%a[%w_.%-]*$"
-- an MCP server's name as rig.mcp takes it
local SERVER_NAME = "^%a[%w_-]*$"
local SHELL_CONTROL = "[;&|`$()<>\r\n]"

-- ---- match semantics ----

local function clean_path(p)
  if p:sub(1, 1) ~= "/" then return nil end
  local out = {}
  for seg in p:gmatch("[^/]+") do
    if seg == ".." then
      out[#out] = nil
    elseif seg ~= "." then
      out[#out + 1] = seg
    end
  end
  return out
end

local function glob_segment(pat)
  return "^" .. pat:gsub("[%^%$%(%)%%%.%[%]%+%-%?]", "%%%0"):gsub("%*", ".*") .. "$"
end

local function match_segments(pat, i, path, j)
  while true do
    local ps = pat[i]
    if ps == nil then return path[j] == nil end
    if ps == "**" then
      for k = j, #path + 1 do
        if match_segments(pat, i + 1, path, k) then return true end
      end
      return false
    end
    local s = path[j]
    if s == nil then return false end
    if ps:find("*", 1, true) then
      if not s:match(glob_segment(ps)) then return false end
    elseif ps ~= s then
      return false
    end
    i, j = i + 1, j + 1
  end
end

local function split_hostport(s)
  local host, port = s:match("^tcp://(%[[^%]]+%]):([%d*]+)$")
  if not host then host, port = s:match("^tcp://([^:/%s]+):([%d*]+)$") end
  return host, port
end

local function match_network(rule, target)
  local rh, rp = split_hostport(rule)
  local th, tp = split_hostport(target)
  if not rh or not th or tp == "*" then return false end
  if rp ~= "*" and tonumber(rp) ~= tonumber(tp) then return false end
  rh, th = rh:lower(), th:lower()
  if rh == "*" then return true end
  if rh:sub(1, 2) == "*." then
    local suffix = rh:sub(2)
    return #th > #suffix and th:sub(-#suffix) == suffix
  end
  return rh == th
end

local function match_command(rule, cmd)
  if rule == cmd then return true end
  if rule:sub(-2) == " *" then
    local prefix = rule:sub(1, -3)
    if cmd == prefix then return true end
    if cmd:sub(1, #prefix + 1) == prefix .. " " then
      return not cmd:sub(#prefix + 2):find(SHELL_CONTROL)
    end
  end
  return false
end

-- Does the (valid) rule match the requirement (kind, match)?
-- A requirement without a match (not normalized by rig.tool) uses its scope.
local function rule_matches(rule, req)
  if rule.kind ~= req.kind then return false end
  local m = req.match
  if m == nil and type(req.scope) == "string" then
    m = req.kind == "network" and ("tcp://" .. req.scope) or req.scope
  end
  if type(m) ~= "string" then return false end
  if rule.kind == "command.execute" then return match_command(rule.match, m) end
  if rule.kind == "network" then return match_network(rule.match, m) end
  if rule.kind == "delegate" or rule.kind == "tool" then return rule.match == "*" or rule.match == m end
  if rule.kind == "mcp" then
    if rule.match == "*" or rule.match == m then return true end
    if rule.match:sub(-2) == "/*" then
      local prefix = rule.match:sub(1, -2)
      return #m > #prefix and m:sub(1, #prefix) == prefix
    end
    return false
  end
  local path = clean_path(m)
  if not path then return false end
  return match_segments(rule.segments, 1, path, 1)
end

-- ---- rule validation ----

-- Returns a valid rule (with its compiled parts) or nil, reason.
local function check_rule(r)
  if type(r) ~= "table" or json.is_array(r) then return nil, "must be an object" end
  for k in pairs(r) do
    if k ~= "effect" and k ~= "kind" and k ~= "match" then
      return nil, "unknown field '" .. tostring(k) .. "'"
    end
  end
  if r.effect ~= "allow" and r.effect ~= "deny" then
    return nil, "effect must be \"allow\" or \"deny\" (got " .. tostring(json.encode(r.effect)) .. ")"
  end
  if not KINDS[r.kind] then
    return nil, "unknown kind " .. tostring(json.encode(r.kind)) .. " (filesystem.read, "
      .. "filesystem.write, network, command.execute, delegate, mcp, tool)"
  end
  local m = r.match
  if type(m) ~= "string" or m == "" then return nil, "match must be a non-empty string" end
  if #m > 4096 or m:find("[%z\r\n]") then return nil, "match must be one line of at most 4096 bytes" end
  local out = { effect = r.effect, kind = r.kind, match = m }
  if r.kind == "command.execute" then
    if m == "*" or m:match("^%s*%*$") or (m:sub(-2) == " *" and not m:sub(1, -3):find("%S")) then
      return nil, "match \"*\" would match every command"
    end
  elseif r.kind == "delegate" then
    if m ~= "*" and (#m > 64 or not m:match(LOOP_NAME)) then
      return nil, "match must be a loop name or \"*\" (got \"" .. m .. "\")"
    end
  elseif r.kind == "tool" then
    if m ~= "*" and (#m > 64 or not m:match("^[%w_-]+$")) then
      return nil, "match must be a tool name or \"*\" (got \"" .. m .. "\")"
    end
  elseif r.kind == "mcp" then
    if m ~= "*" then
      local server, tool = m:match("^([^/:]+)/(.+)$")
      local sserver = m:match("^([^/:]+):sampling$")
      local name = server or sserver
      if not name or #name > 64 or not name:match(SERVER_NAME) or
         (tool and (#tool > 128 or tool:find("[%s%c]"))) then
        return nil, "match must be \"SERVER/TOOL\", \"SERVER/*\", \"SERVER:sampling\" or \"*\" (got \""
          .. m .. "\")"
      end
    end
  elseif r.kind == "network" then
    local host, port = split_hostport(m)
    if not host then return nil, "match must be \"tcp://HOST:PORT\" (got \"" .. m .. "\")" end
    if port ~= "*" and (not port:match("^%d+$") or tonumber(port) < 1 or tonumber(port) > 65535) then
      return nil, "port must be 1 to 65535 or \"*\""
    end
    if host:find("*", 2, true) or (host:sub(1, 1) == "*" and host ~= "*" and host:sub(2, 2) ~= ".") then
      return nil, "host wildcard must be \"*\" or lead \"*.suffix\""
    end
  else
    if m:sub(1, 1) ~= "/" then return nil, "match must be an absolute path pattern" end
    local segs = {}
    for seg in m:gmatch("[^/]+") do
      if seg == "." or seg == ".." then return nil, "match must not hold '.' or '..' segments" end
      if seg:find("**", 1, true) and seg ~= "**" then
        return nil, "'**' must be a whole path segment"
      end
      segs[#segs + 1] = seg
    end
    out.segments = segs
  end
  return out
end
M.check_rule = check_rule
M.rule_matches = rule_matches

-- ---- reading ----

-- parse(text) -> { raw = { rule objects as decoded }, rules = { valid }, diagnostics = {} }
--   | nil, message (not the file's shape)
local function parse(text)
  local doc, err = json.decode(text)
  if doc == nil then return nil, "not JSON (" .. tostring(err) .. ")" end
  if type(doc) ~= "table" or json.is_array(doc) then return nil, "must hold a JSON object" end
  for k in pairs(doc) do
    if k ~= "version" and k ~= "rules" then return nil, "unknown field '" .. tostring(k) .. "'" end
  end
  if doc.version ~= 1 then return nil, "\"version\" must be 1" end
  local raw = doc.rules
  if raw == nil then raw = json.array({}) end
  if type(raw) ~= "table" or not json.is_array(raw) then return nil, "\"rules\" must be an array" end
  if #raw > MAX_RULES then return nil, "more than " .. MAX_RULES .. " rules" end
  local out = { raw = raw, rules = {}, diagnostics = {} }
  for i = 1, #raw do
    local rule, why = check_rule(raw[i])
    if rule then
      out.rules[#out.rules + 1] = rule
    else
      out.diagnostics[#out.diagnostics + 1] = "rule " .. i .. ": " .. why
    end
  end
  return out
end
M.parse = parse

-- read(path) -> parsed, stat | nil, message
local function read(path)
  local st = core.fs_lstat(path)
  local text, msg, code = core.fs_read_private(path, MAX_BYTES)
  if not text then
    if code == "ENOENT" then
      return { raw = json.array({}), rules = {}, diagnostics = {} }, nil
    end
    return nil, "permissions: " .. msg
  end
  local parsed, err = parse(text)
  if not parsed then return nil, "permissions: '" .. path .. "': " .. err end
  return parsed, st
end

local function stamp(st)
  if not st then return "absent" end
  return st.ino .. ":" .. st.size .. ":" .. st.mtime_ns
end

-- ---- the object ----

local Perms = {}
Perms.__index = Perms
Perms.__metatable = "rig.permissions"

local function install(self, parsed, st)
  self._rules = parsed.rules
  self._diagnostics = parsed.diagnostics
  self._stamp = stamp(st)
end

function Perms:reload()
  local parsed, st = read(self.path)
  if not parsed then
    -- fail closed: the saved denies stay, the allows go
    local denies = {}
    for _, r in ipairs(self._rules) do
      if r.effect == "deny" then denies[#denies + 1] = r end
    end
    self._rules = denies
    self._diagnostics = { "file: " .. st }
    self._stamp = nil
    return nil, st
  end
  install(self, parsed, st)
  return true
end

-- Re-reads the file if it changed since it was read.
function Perms:refresh()
  local st = core.fs_lstat(self.path)
  if self._stamp ~= nil and stamp(st) == self._stamp then return true end
  return self:reload()
end

function Perms:match_deny(req)
  for _, r in ipairs(self._rules) do
    if r.effect == "deny" and rule_matches(r, req) then return r end
  end
  return nil
end

function Perms:match_allow(req)
  for _, r in ipairs(self._rules) do
    if r.effect == "allow" and rule_matches(r, req) then return r end
  end
  return nil
end

function Perms:match(req)
  if type(req) ~= "table" then error("perms:match: the requirement must be a table", 2) end
  if self:match_deny(req) then return "deny" end
  if self:match_allow(req) then return "allow" end
  return nil
end

function Perms:diagnostics()
  local out = {}
  for i, d in ipairs(self._diagnostics) do out[i] = d end
  return out
end

function Perms:rules()
  local out = {}
  for i, r in ipairs(self._rules) do out[i] = { effect = r.effect, kind = r.kind, match = r.match } end
  return out
end

function Perms:add(rules)
  if type(rules) ~= "table" then error("perms:add: rules must be a list of rules", 2) end
  local new = {}
  for i, r in ipairs(rules) do
    local ok, why = check_rule(r)
    if not ok then error("perms:add: rules[" .. i .. "]: " .. why, 2) end
    new[i] = { effect = r.effect, kind = r.kind, match = r.match }
  end
  local parsed, st = read(self.path)
  if not parsed then return nil, st end
  local raw = {}
  local seen = {}
  local function key(r)
    if type(r) ~= "table" then return nil end
    return tostring(r.effect) .. "\0" .. tostring(r.kind) .. "\0" .. tostring(r.match)
  end
  for i = 1, #parsed.raw do
    raw[i] = parsed.raw[i]
    local k = key(raw[i])
    if k then seen[k] = true end
  end
  for _, r in ipairs(new) do
    local k = key(r)
    if not seen[k] then
      seen[k] = true
      raw[#raw + 1] = r
    end
  end
  if #raw > MAX_RULES then return nil, "permissions: more than " .. MAX_RULES .. " rules" end
  local text = assert(json.encode({ version = 1, rules = json.array(raw) }, { indent = 2 })) .. "\n"
  local ok, msg = core.fs_write_atomic(self.path, text)
  if not ok then return nil, "permissions: " .. msg end
  local again = assert(parse(text))
  install(self, again, core.fs_lstat(self.path))
  return true
end

function Perms:__tostring()
  return "rig.permissions(" .. self.path .. ")"
end

function M.is_perms(v)
  return getmetatable(v) == "rig.permissions"
end

function M.file(path)
  if type(path) ~= "string" or path:sub(1, 1) ~= "/" then
    error("rig.permissions.file: the path must be an absolute path (got "
      .. (type(path) == "string" and ("'" .. path .. "'") or type(path)) .. ")", 2)
  end
  if path:find("%z") then error("rig.permissions.file: the path holds a NUL byte", 2) end
  local self = setmetatable({ path = path, _rules = {}, _diagnostics = {} }, Perms)
  local ok, msg = self:reload()
  if not ok then error("rig.permissions.file: " .. tostring(msg):gsub("^permissions: ", ""), 2) end
  return self
end

return M
