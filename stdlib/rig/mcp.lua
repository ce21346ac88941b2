-- rig.mcp: Model Context Protocol clients — tools, resources and prompts of
-- any MCP server, confined, gated and journaled (docs/mcp.md).
--
--   local fs = rig.mcp.stdio{
--     name = "fs",                       -- the server's name in tool names and rules
--                                        -- (a letter, then letters, digits, '_', '-')
--     command = "node", args = { "/…/server-filesystem/dist/index.js", ws },
--     env = { NAME = "value" },          -- added to the sandbox's scrubbed environment
--     cwd = ws,                          -- default: the profile's workspace root
--     profile = p,                       -- a rig.sandbox.profile: the server runs in an
--                                        -- executor of it (or executor = ex, one you have;
--                                        -- or unconfined = true, explicitly)
--     network = { "host:port", … },      -- what the server may reach, through the sandbox's
--                                        -- egress proxy (HTTP_PROXY inside; a profile with
--                                        -- network = "gated" gets a grant per target the rig's
--                                        -- author wrote here; "deny" refuses). Default: none
--     roots = true | { "/dir", … },      -- roots/list: true = the profile's workspace
--     sampling = { model = m, gate = g },-- answer sampling/createMessage with a rig model
--     elicitation = true | fn(req, ctx), -- route elicitation/create to the session's
--                                        -- approver (true), or answer it in Lua
--     timeout = 60, call_timeout = nil, init_timeout = 30, max_line = 16 << 20,
--     restart = "manual" | "auto",       -- auto: a call on a dead server starts it again
--     on_notification = fn(method, params),
--   }
--   local web = rig.mcp.http{ name = "web", url = "https://…/mcp",
--     headers = { Authorization = "Bearer …" }, legacy = "auto" | true | false, … the same }
--   -> client | nil, message, code   (the server started and initialized, or why not)
--
--   c.name, c.protocol_version, c.server_info, c.server_capabilities, c.instructions
--   c:tools() -> { rig.tool "NAME__TOOL", … }  c:list_tools() -> the raw MCP tools
--   c:call(tool, args [, { timeout, on_progress }]) -> MCP result | nil, message, code
--   c:resources(), c:resource_templates(), c:read(uri), c:read_text(uri),
--   c:subscribe(uri, fn(uri)), c:unsubscribe(uri)
--   c:prompts(), c:prompt(name, args), c:prompt_text(name, args) (a loop's system),
--   c:prompt_input(name, args) (blocks for s:submit)
--   c:ping(), c:status() -> "ready" | "dead" | "closed", why; c:restart(); c:close()
--   c:logs() (the last 100 notifications/message), c:set_log_level(level)
--   c:request(method, params), c:notify(method, params): anything else
--   rig.mcp.clients() -> every client made in this process (oldest first)
--
-- A loop takes clients as `mcp = { fs, web }`: their tools join the loop's, and
-- follow notifications/tools/list_changed. Each call is a gate request with one
-- requirement { kind = "mcp", scope = "SERVER/TOOL" } (docs/mcp.md).

local core = require "rig.core"
local client_mod = require "rig.mcp.client"

local M = {}

M.VERSIONS = client_mod.VERSIONS
M.jsonrpc = require "rig.mcp.jsonrpc"
M.tools_of = require "rig.mcp.tools"

local NAME = "^%a[%w_-]*$"

local common = { name = true, env = true, roots = true, sampling = true, elicitation = true,
                 timeout = true, call_timeout = true, init_timeout = true, max_line = true,
                 restart = true, on_notification = true }
local stdio_fields = { command = true, args = true, cwd = true, profile = true, executor = true,
                       unconfined = true, network = true }
local http_fields = { url = true, headers = true, legacy = true, connect_timeout = true }

local function bad(where, msg) error("rig.mcp." .. where .. ": " .. msg, 3) end

local function is_profile(v)
  if type(v) ~= "userdata" then return false end
  local mt = debug.getmetatable(v)
  return type(mt) == "table" and mt.__name == "rig.sandbox.profile"
end

local function is_executor(v)
  if type(v) ~= "userdata" then return false end
  local mt = debug.getmetatable(v)
  return type(mt) == "table" and mt.__name == "rig.sandbox.executor"
end

local function positive(where, o, k)
  local v = o[k]
  if v ~= nil and (type(v) ~= "number" or not (v > 0)) then
    bad(where, "field '" .. k .. "' must be a positive number of seconds")
  end
end

local function check_common(where, o, derived_name)
  local c = {}
  local name = o.name or derived_name
  if type(name) ~= "string" or #name > 64 or not name:match(NAME) then
    bad(where, "field 'name' must be a letter then up to 63 letters, digits, '_' or '-' (got "
      .. (type(name) == "string" and ("'" .. name .. "'") or tostring(name)) .. ")")
  end
  c.name = name
  if o.env ~= nil then
    if type(o.env) ~= "table" then bad(where, "field 'env' must be a table of NAME = value") end
    for k, v in pairs(o.env) do
      if type(k) ~= "string" or not k:match("^[%a_][%w_]*$") then
        bad(where, "field 'env' has a key that is not a variable name")
      end
      if type(v) ~= "string" then bad(where, "field 'env." .. k .. "' must be a string") end
    end
  end
  for _, k in ipairs{ "timeout", "call_timeout", "init_timeout" } do positive(where, o, k) end
  c.timeout = o.timeout or 60
  c.call_timeout = o.call_timeout
  c.init_timeout = o.init_timeout or 30
  if o.max_line ~= nil and (math.type(o.max_line) ~= "integer" or o.max_line < 1024) then
    bad(where, "field 'max_line' must be an integer of at least 1024 bytes")
  end
  c.max_line = o.max_line or (16 << 20)
  if o.restart ~= nil and o.restart ~= "manual" and o.restart ~= "auto" then
    bad(where, "field 'restart' must be \"manual\" or \"auto\"")
  end
  c.restart = o.restart or "manual"
  if o.sampling ~= nil then
    local s = o.sampling
    if type(s) ~= "table" or getmetatable(s.model) ~= "rig.model" then
      bad(where, "field 'sampling' must be { model = rig.model, gate = rig.gate? }")
    end
    if s.gate ~= nil and getmetatable(s.gate) ~= "rig.gate" then
      bad(where, "field 'sampling.gate' must be a rig.gate")
    end
    c.sampling = { model = s.model, gate = s.gate }
  end
  if o.elicitation ~= nil and o.elicitation ~= true and o.elicitation ~= false
     and type(o.elicitation) ~= "function" then
    bad(where, "field 'elicitation' must be true or a function(request, ctx)")
  end
  c.elicitation = o.elicitation or nil
  if o.on_notification ~= nil and type(o.on_notification) ~= "function" then
    bad(where, "field 'on_notification' must be a function")
  end
  c.on_notification = o.on_notification
  return c
end

local function check_roots(where, o, c, workspace)
  local r = o.roots
  if r == nil or r == false then return end
  local list = {}
  if r == true then
    if not workspace then bad(where, "field 'roots' = true needs a profile (its workspace)") end
    list[1] = { path = workspace, name = "workspace" }
  elseif type(r) == "table" then
    for i, p in ipairs(r) do
      if type(p) ~= "string" or p:sub(1, 1) ~= "/" then
        bad(where, "field 'roots[" .. i .. "]' must be an absolute path")
      end
      list[i] = { path = p }
    end
  else
    bad(where, "field 'roots' must be true or a list of absolute paths")
  end
  c.roots = list
end

local function check_fields(where, o, extra)
  if type(o) ~= "table" then bad(where, "expects a table of fields") end
  for k in pairs(o) do
    if not common[k] and not extra[k] then bad(where, "unknown field '" .. tostring(k) .. "'") end
  end
end

-- Every client made in this process and not yet collected, oldest first (the REPL's :mcp).
local registry = setmetatable({}, { __mode = "k" })
local order = 0
local function remember(c)
  order = order + 1
  registry[c] = order
  return c
end

function M.stdio(o)
  check_fields("stdio", o, stdio_fields)
  if type(o.command) ~= "string" or o.command == "" then
    bad("stdio", "field 'command' must be a non-empty string")
  end
  local argv = { o.command }
  if o.args ~= nil then
    if type(o.args) ~= "table" then bad("stdio", "field 'args' must be a list of strings") end
    for i, a in ipairs(o.args) do
      if type(a) ~= "string" then bad("stdio", "field 'args[" .. i .. "]' must be a string") end
      argv[#argv + 1] = a
    end
  end
  local base = o.command:match("([^/]+)$"):gsub("%.[%w]+$", ""):gsub("[^%w_-]", "_")
  if not base:match("^%a") then base = "server" end
  local c = check_common("stdio", o, base)
  local n = (o.profile ~= nil and 1 or 0) + (o.executor ~= nil and 1 or 0)
    + (o.unconfined and 1 or 0)
  if n ~= 1 then
    bad("stdio", "give exactly one of 'profile' (a rig.sandbox.profile), 'executor' (a "
      .. "rig.sandbox executor) and 'unconfined = true'")
  end
  if o.unconfined ~= nil and o.unconfined ~= true then
    bad("stdio", "field 'unconfined' must be true when given")
  end
  local workspace
  local executor, set = o.executor, nil
  if o.profile ~= nil then
    if not is_profile(o.profile) then bad("stdio", "field 'profile' must be a rig.sandbox.profile") end
    workspace = o.profile.workspace_root
    local sandbox = require "rig.sandbox"
    local s, err, code = sandbox.executors(o.profile, { max = 1 })
    if not s then return nil, "mcp: server '" .. c.name .. "': " .. tostring(err), code end
    set = s
    local e, gerr, gcode = s:get("mcp-" .. c.name)
    if not e then
      s:close()
      return nil, "mcp: server '" .. c.name .. "': " .. tostring(gerr), gcode
    end
    executor = e
  elseif o.executor ~= nil then
    if not is_executor(o.executor) then bad("stdio", "field 'executor' must be a rig.sandbox executor") end
    local ok, prof = pcall(function() return o.executor.profile end)
    workspace = ok and prof and prof.workspace_root or nil
  end
  if o.cwd ~= nil and (type(o.cwd) ~= "string" or o.cwd:sub(1, 1) ~= "/") then
    bad("stdio", "field 'cwd' must be an absolute path")
  end
  check_roots("stdio", o, c, workspace)
  if o.network ~= nil then
    if type(o.network) ~= "table" or #o.network == 0 then
      bad("stdio", "field 'network' must be a non-empty list of \"host:port\"")
    end
    for i, t in ipairs(o.network) do
      if type(t) ~= "string" or not t:match("^[%w%.%-%[%]:*]+:%d+$") then
        bad("stdio", "field 'network[" .. i .. "]' must be \"host:port\"")
      end
    end
    if o.unconfined then bad("stdio", "field 'network' needs a profile or an executor (unconfined has all)") end
  end
  local stdio = require "rig.mcp.stdio"
  local env = o.env
  local cl, err, code = client_mod.new(c.name, c, function()
    return stdio.open{ argv = argv, env = env, cwd = o.cwd, executor = executor,
                       unconfined = o.unconfined, max_line = c.max_line, name = c.name,
                       network = o.network }
  end)
  if not cl then
    if set then set:close() end
    return nil, err, code
  end
  cl.kind = "stdio"
  cl.argv = argv
  cl.executor_set = set
  if set then
    local close = cl.close
    cl.close = function(self)
      close(self)
      if self.executor_set then self.executor_set:close() self.executor_set = nil end
    end
  end
  return remember(cl)
end

function M.http(o)
  check_fields("http", o, http_fields)
  if type(o.url) ~= "string" or not o.url:match("^https?://[^/]") then
    bad("http", "field 'url' must be an http:// or https:// URL")
  end
  local host = o.url:match("^https?://([^/:?#]+)") or "server"
  local derived = host:gsub("[^%w_-]", "_")
  if not derived:match("^%a") then derived = "server" end
  local c = check_common("http", o, derived)
  if o.headers ~= nil then
    if type(o.headers) ~= "table" then bad("http", "field 'headers' must be a table") end
    for k, v in pairs(o.headers) do
      if type(k) ~= "string" or type(v) ~= "string" then
        bad("http", "field 'headers' must map names to strings")
      end
      local lk = k:lower()
      if lk == "mcp-session-id" or lk == "mcp-protocol-version" or lk == "content-type"
         or lk == "accept" or lk == "last-event-id" then
        bad("http", "field 'headers' may not set '" .. k .. "' (the transport does)")
      end
    end
  end
  if o.legacy ~= nil and o.legacy ~= "auto" and o.legacy ~= true and o.legacy ~= false then
    bad("http", "field 'legacy' must be \"auto\", true or false")
  end
  positive("http", o, "connect_timeout")
  check_roots("http", o, c, nil)
  local http = require "rig.mcp.http"
  local cl, err, code = client_mod.new(c.name, c, function()
    return http.open{ url = o.url, headers = o.headers, legacy = o.legacy == nil and "auto"
      or o.legacy, name = c.name, max_line = c.max_line, connect_timeout = o.connect_timeout }
  end)
  if not cl then return nil, err, code end
  cl.kind = "http"
  cl.url = o.url
  return remember(cl)
end

-- rig.mcp.server{ … }: an MCP server in Lua (rig.mcp.server, docs/mcp.md "Serving").
function M.server(o)
  local ok, srv = pcall(require("rig.mcp.server").new, o)
  if not ok then error(srv, 2) end
  return srv
end

function M.clients()
  local out = {}
  for c in pairs(registry) do out[#out + 1] = c end
  table.sort(out, function(a, b) return registry[a] < registry[b] end)
  return out
end

function M.is_client(v)
  return getmetatable(v) == client_mod.Client
end

-- ---- loops ----

-- The tools a loop instance takes from its clients, and whether they changed since.
function M.loop_tools(clients)
  local out, seen, complete = {}, {}, true
  for _, c in ipairs(clients) do
    if c.state == "ready" or (c.state == "dead" and c.opts.restart == "auto") then
      local list = c:tools()
      if not list then complete = false end
      for _, t in ipairs(list or {}) do
        if not seen[t.name] then
          seen[t.name] = true
          out[#out + 1] = t
        end
      end
    end
  end
  return out, complete
end

function M.stamp(clients)
  local parts = {}
  for i, c in ipairs(clients) do
    parts[i] = c.name .. ":" .. tostring(c.generation) .. ":" .. c.state
      .. ":" .. tostring(c.tool_cache ~= nil)
  end
  return table.concat(parts, ",")
end

return M
