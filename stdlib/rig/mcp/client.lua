-- rig.mcp.client: one connection to an MCP server over a transport
-- (rig.mcp.stdio, rig.mcp.http): lifecycle, tools, resources, prompts, and the
-- server's requests (ping, roots, sampling, elicitation). rig.mcp documents the
-- user-facing API; this file is the engine.

local core = require "rig.core"
local json = require "rig.json"
local jsonrpc = require "rig.mcp.jsonrpc"
local tools_mod = require "rig.mcp.tools"

local M = {}

-- Newest first: what we ask for, and what we accept back.
M.VERSIONS = { "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05" }
M.LATEST = M.VERSIONS[1]
local SUPPORTED = {}
for _, v in ipairs(M.VERSIONS) do SUPPORTED[v] = true end

local MAX_PAGES = 1000      -- pages of one list (tools/list, resources/list, …)
local MAX_ITEMS = 100000    -- items of one list
local LOG_KEEP = 100        -- notifications/message kept for c:logs()

local null = json.null
local Client = {}
Client.__index = Client
M.Client = Client

local function fail(c, msg, code)
  return nil, "mcp: server '" .. c.name .. "': " .. msg, code
end

-- ---- the server's requests and notifications ----

-- The call (a rig tool's ctx) a server request belongs to: the request whose
-- stream carried it (Streamable HTTP), else the only call in flight.
local function call_ctx(c, related)
  local only, n = nil, 0
  for e in pairs(c.in_flight) do
    if related ~= nil and e.track.id == related then return e.ctx end
    n = n + 1
    only = e.ctx
  end
  if n == 1 then return only end
  return nil
end

local function file_uri(path)
  return "file://" .. path:gsub("[^%w/%-%._~]", function(ch)
    return string.format("%%%02X", ch:byte())
  end)
end
M.file_uri = file_uri

local function roots_list(c)
  local list = {}
  for i, r in ipairs(c.opts.roots or {}) do
    list[i] = { uri = file_uri(r.path), name = r.name }
  end
  return { roots = json.array(list) }
end

-- Fills the defaults of an elicitation's requestedSchema into content (SEP-1034).
local function apply_defaults(schema, content)
  content = type(content) == "table" and content or {}
  local props = type(schema) == "table" and schema.properties
  if type(props) == "table" then
    for k, p in pairs(props) do
      if content[k] == nil and type(p) == "table" and p.default ~= nil and p.default ~= null then
        content[k] = p.default
      end
    end
  end
  return content
end
M.apply_defaults = apply_defaults

local function on_elicit(c, params, rctx)
  local handler = c.opts.elicitation
  if not handler then
    return nil, { code = jsonrpc.METHOD_NOT_FOUND, message = "elicitation is not supported" }
  end
  if type(params) ~= "table" or type(params.message) ~= "string" then
    return nil, { code = jsonrpc.INVALID_PARAMS, message = "elicitation/create needs a message" }
  end
  local schema = params.requestedSchema
  local req = { server = c.name, message = params.message, schema = schema,
                mode = params.mode or "form", url = params.url }
  local ctx = call_ctx(c, rctx.related)
  local answer
  if type(handler) == "function" then
    answer = handler(req, ctx)
  elseif ctx and ctx.request_input then
    answer = ctx.request_input(req) -- the session's approver (REPL, console, serve)
  else
    answer = { action = "decline" } -- nobody can answer
  end
  if type(answer) ~= "table" or (answer.action ~= "accept" and answer.action ~= "decline"
     and answer.action ~= "cancel") then
    return { action = "cancel" }
  end
  if answer.action == "accept" then
    return { action = "accept", content = apply_defaults(schema, answer.content) }
  end
  return { action = answer.action }
end

-- sampling/createMessage: a rig model answers, after the gate (requirement mcp
-- "SERVER:sampling") of the loop whose call is in flight, or the client's own.
local function on_sampling(c, params, rctx)
  local s = c.opts.sampling
  if not s then
    return nil, { code = jsonrpc.METHOD_NOT_FOUND, message = "sampling is not supported" }
  end
  if type(params) ~= "table" or type(params.messages) ~= "table" then
    return nil, { code = jsonrpc.INVALID_PARAMS, message = "sampling/createMessage needs messages" }
  end
  local scope = c.name .. ":sampling"
  local req = { summary = "mcp " .. scope .. ": the server asks the model for "
                  .. #params.messages .. " message(s)",
                requirements = { { kind = "mcp", scope = scope, match = scope } } }
  local ctx = call_ctx(c, rctx.related)
  local ok, why
  if ctx and ctx.authorize then
    ok, why = ctx.authorize(req)
  elseif s.gate then
    local d = s.gate:evaluate(req)
    ok = d.verdict == "allow"
    why = d.verdict == "gated" and "permission denied: approval required (no session to ask)"
      or d.reason
  else
    ok, why = false, "permission denied: sampling has no gate"
  end
  if not ok then
    return nil, { code = -1, message = tostring(why or "permission denied") }
  end
  local msgs = {}
  for i, m in ipairs(params.messages) do
    local role = m.role == "assistant" and "assistant" or "user"
    local content = m.content
    local text
    if type(content) == "table" and content.type == "text" then text = content.text
    elseif type(content) == "table" and json.is_array(content) then
      local parts = {}
      for _, b in ipairs(content) do parts[#parts + 1] = (tools_mod.block(b)) end
      text = table.concat(parts, "\n")
    else text = (tools_mod.block(content)) end
    msgs[i] = { role = role, content = tostring(text or "") }
  end
  local resp, err = s.model:invoke{ system = type(params.systemPrompt) == "string"
    and params.systemPrompt or nil, messages = msgs }
  if not resp then return nil, { code = -1, message = "the model failed: " .. tostring(err) } end
  local parts = {}
  for _, b in ipairs(resp.message.content) do
    if b.type == "text" then parts[#parts + 1] = b.text end
  end
  return { role = "assistant", content = { type = "text", text = table.concat(parts) },
           model = s.model.name, stopReason = resp.finish_reason == "length" and "maxTokens"
             or "endTurn" }
end

local function on_request(c, method, params, rctx)
  if method == "ping" then return {} end
  if method == "roots/list" then
    if not c.opts.roots then
      return nil, { code = jsonrpc.METHOD_NOT_FOUND, message = "roots are not supported" }
    end
    return roots_list(c)
  end
  if method == "elicitation/create" then return on_elicit(c, params, rctx) end
  if method == "sampling/createMessage" then return on_sampling(c, params, rctx) end
  return nil, jsonrpc.method_not_found(method)
end

local function on_notification(c, method, params)
  if method == "notifications/tools/list_changed" then
    c.tool_cache = nil
    c.generation = c.generation + 1
  elseif method == "notifications/resources/list_changed" then
    c.resource_cache = nil
  elseif method == "notifications/prompts/list_changed" then
    c.prompt_cache = nil
  elseif method == "notifications/resources/updated" then
    local uri = type(params) == "table" and params.uri
    local fn = uri and c.subscriptions[uri]
    if fn then
      local ok, err = pcall(fn, uri, params)
      if not ok and jsonrpc.is_cancel(err) then error(err, 0) end
    end
  elseif method == "notifications/message" then
    local logs = c.log_ring
    logs[#logs + 1] = params
    if #logs > LOG_KEEP then table.remove(logs, 1) end
  end
  c.notifications = c.notifications + 1
  if c.opts.on_notification then
    local ok, err = pcall(c.opts.on_notification, method, params)
    if not ok and jsonrpc.is_cancel(err) then error(err, 0) end
  end
end

-- ---- lifecycle ----

local function capabilities(c)
  local caps = {}
  if c.opts.roots then caps.roots = { listChanged = false } end
  if c.opts.sampling then caps.sampling = {} end
  if c.opts.elicitation then caps.elicitation = {} end
  return caps
end

function Client:_start()
  local t, err, code = self.open_transport()
  if not t then return nil, err, code end
  self.transport = t
  self.state = "starting"
  local peer
  peer = jsonrpc.peer{
    name = "mcp: server '" .. self.name .. "'",
    timeout = self.opts.timeout,
    send = function(msg, o) return t:send(msg, o) end,
    on_request = function(method, params, rctx) return on_request(self, method, params, rctx) end,
    on_notification = function(method, params) return on_notification(self, method, params) end,
    on_protocol_error = function(msg)
      self.protocol_errors = self.protocol_errors + 1
      self.last_protocol_error = msg
    end,
  }
  self.peer = peer
  t:start(function(text, via) peer:receive(text, via) end,
          function(total, head, tail, cap) peer:receive_oversized(total, head, tail, cap) end,
          function(why, ccode)
            if self.peer == peer then
              self.state = self.state == "closed" and "closed" or "dead"
              self.dead_reason = why
            end
            peer:close(why, ccode)
          end)
  local res, ierr, icode = peer:request("initialize", {
    protocolVersion = M.LATEST, capabilities = capabilities(self),
    clientInfo = { name = "luarig", title = "luarig", version = core.version },
  }, { timeout = self.opts.init_timeout })
  if not res then
    t:close(0.5)
    self.state = "dead"
    return nil, tostring(ierr), icode
  end
  if type(res) ~= "table" or type(res.protocolVersion) ~= "string" then
    t:close(0.5)
    self.state = "dead"
    return fail(self, "initialize: the answer has no protocolVersion", "protocol")
  end
  if not SUPPORTED[res.protocolVersion] then
    t:close(0.5)
    self.state = "dead"
    return fail(self, "initialize: protocol version '" .. res.protocolVersion .. "' is not one "
      .. "luarig speaks (" .. table.concat(M.VERSIONS, ", ") .. ")", "protocol")
  end
  self.protocol_version = res.protocolVersion
  if t.negotiated then t:negotiated(res.protocolVersion) end
  self.server_info = type(res.serverInfo) == "table" and res.serverInfo or {}
  self.server_capabilities = type(res.capabilities) == "table" and res.capabilities or {}
  self.instructions = type(res.instructions) == "string" and res.instructions or nil
  local ok, nerr, ncode = peer:notify("notifications/initialized")
  if not ok then
    t:close(0.5)
    self.state = "dead"
    return nil, tostring(nerr), ncode
  end
  if t.initialized then t:initialized() end
  self.state = "ready"
  self.tool_cache, self.resource_cache, self.prompt_cache = nil, nil, nil
  self.generation = self.generation + 1
  return true
end

function M.new(name, opts, open_transport)
  local c = setmetatable({
    name = name, opts = opts, open_transport = open_transport, state = "new",
    generation = 0, in_flight = {}, subscriptions = {}, log_ring = {},
    notifications = 0, protocol_errors = 0, restarts = 0,
  }, Client)
  local ok, err, code = c:_start()
  if not ok then return nil, err, code end
  return c
end

function Client:status()
  return self.state, self.dead_reason
end

-- A live connection, restarting a dead one when restart = "auto".
local function ready(c)
  if c.state == "ready" then return true end
  if c.state == "closed" then return fail(c, "the client is closed", "closed") end
  if c.state == "dead" and c.opts.restart == "auto" then
    local ok, err, code = c:restart()
    if ok then return true end
    return nil, err, code
  end
  return fail(c, "the server is not running (" .. tostring(c.dead_reason or c.state)
    .. "); c:restart() starts it again", "closed")
end

function Client:restart()
  if self.state == "closed" then error("rig.mcp: client '" .. self.name .. "' is closed", 2) end
  if self.transport then self.transport:close(0.5) end
  if self.peer then self.peer:close("restarted") end
  self.restarts = self.restarts + 1
  self.dead_reason = nil
  local ok, err, code = self:_start()
  if not ok then
    self.state = "dead"
    self.dead_reason = err
    return nil, err, code
  end
  return true
end

function Client:close()
  if self.state == "closed" then return end
  self.state = "closed"
  if self.peer then self.peer:close("the client closed the connection") end
  if self.transport then self.transport:close() end
end

function Client:ping(timeout)
  local ok, err, code = ready(self)
  if not ok then return nil, err, code end
  local res, perr, pcode = self.peer:request("ping", nil, { timeout = timeout or 10 })
  if res == nil then return nil, perr, pcode end
  return true
end

-- A request on a live connection: result | nil, message, code.
function Client:request(method, params, opts)
  local ok, err, code = ready(self)
  if not ok then return nil, err, code end
  return self.peer:request(method, params, opts)
end

function Client:notify(method, params)
  local ok, err, code = ready(self)
  if not ok then return nil, err, code end
  return self.peer:notify(method, params)
end

-- Every page of a list method: the items | nil, message, code.
local function list_all(c, method, key, params)
  local items, cursor = {}, nil
  for _ = 1, MAX_PAGES do
    local p = {}
    for k, v in pairs(params or {}) do p[k] = v end
    p.cursor = cursor
    local res, err, code = c:request(method, next(p) and p or nil)
    if not res then return nil, err, code end
    if type(res) ~= "table" or type(res[key]) ~= "table" then
      return fail(c, method .. ": the answer has no '" .. key .. "' list", "protocol")
    end
    for _, it in ipairs(res[key]) do
      items[#items + 1] = it
      if #items > MAX_ITEMS then
        return fail(c, method .. ": more than " .. MAX_ITEMS .. " items", "too_large")
      end
    end
    cursor = res.nextCursor
    if cursor == nil or cursor == null then return items end
    if type(cursor) ~= "string" then
      return fail(c, method .. ": nextCursor is not a string", "protocol")
    end
  end
  return fail(c, method .. ": more than " .. MAX_PAGES .. " pages", "too_large")
end

-- ---- tools ----

function Client:list_tools()
  if self.tool_cache then return self.tool_cache end
  local gen = self.generation
  local list, err, code = list_all(self, "tools/list", "tools")
  if not list then return nil, err, code end
  local out = {}
  for _, t in ipairs(list) do
    if type(t) == "table" and type(t.name) == "string" and t.name ~= "" then out[#out + 1] = t end
  end
  if self.generation == gen then self.tool_cache = out end
  return out
end

-- The server's tools as rig tools (names "SERVER__TOOL"), cached until the list changes.
function Client:tools()
  local list, err, code = self:list_tools()
  if not list then return nil, err, code end
  if self.rig_tools and self.rig_tools_for == list then return self.rig_tools end
  local out, taken, dropped = {}, {}, {}
  for _, t in ipairs(list) do
    local name = tools_mod.name(self.name, t.name, taken)
    taken[name] = true
    local rt, d = tools_mod.wrap(self, t, name)
    out[#out + 1] = rt
    if #d > 0 then dropped[t.name] = d end
  end
  self.rig_tools, self.rig_tools_for, self.dropped = out, list, dropped
  return out
end

-- tools/call. opts: ctx (a rig tool's ctx: routes the server's requests to its
-- session), timeout, on_progress. -> the result table | nil, message, code
function Client:call(name, args, opts)
  opts = opts or {}
  if type(name) ~= "string" then error("rig.mcp: c:call: the tool name must be a string", 2) end
  if args ~= nil and type(args) ~= "table" then
    error("rig.mcp: c:call: the arguments must be a table", 2)
  end
  local ok, err, code = ready(self)
  if not ok then return nil, err, code end
  local track = {}
  local entry = { ctx = opts.ctx or {}, track = track }
  self.in_flight[entry] = true
  local pok, res, rerr, rcode = pcall(self.peer.request, self.peer, "tools/call",
    { name = name, arguments = args or {} },
    { timeout = opts.timeout or self.opts.call_timeout, track = track,
      on_progress = opts.on_progress })
  self.in_flight[entry] = nil
  if not pok then error(res, 0) end
  if res == nil then return nil, rerr, rcode end
  return res
end

-- ---- resources ----

function Client:resources()
  if self.resource_cache then return self.resource_cache end
  local list, err, code = list_all(self, "resources/list", "resources")
  if not list then return nil, err, code end
  self.resource_cache = list
  return list
end

function Client:resource_templates()
  return list_all(self, "resources/templates/list", "resourceTemplates")
end

-- resources/read -> { contents = { { uri, mimeType, text | blob } } } | nil, message, code
function Client:read(uri)
  if type(uri) ~= "string" then error("rig.mcp: c:read: the uri must be a string", 2) end
  local res, err, code = self:request("resources/read", { uri = uri })
  if not res then return nil, err, code end
  if type(res) ~= "table" or type(res.contents) ~= "table" then
    return fail(self, "resources/read: the answer has no 'contents' list", "protocol")
  end
  return res
end

-- The text of a resource (its text contents joined), for prompts and systems.
function Client:read_text(uri)
  local res, err, code = self:read(uri)
  if not res then return nil, err, code end
  local parts = {}
  for _, ct in ipairs(res.contents) do
    if type(ct) == "table" and type(ct.text) == "string" then parts[#parts + 1] = ct.text end
  end
  return table.concat(parts, "\n")
end

function Client:subscribe(uri, fn)
  if type(uri) ~= "string" then error("rig.mcp: c:subscribe: the uri must be a string", 2) end
  if type(fn) ~= "function" then error("rig.mcp: c:subscribe: the callback must be a function", 2) end
  local res, err, code = self:request("resources/subscribe", { uri = uri })
  if not res then return nil, err, code end
  self.subscriptions[uri] = fn
  return true
end

function Client:unsubscribe(uri)
  self.subscriptions[uri] = nil
  local res, err, code = self:request("resources/unsubscribe", { uri = uri })
  if not res then return nil, err, code end
  return true
end

-- ---- prompts ----

function Client:prompts()
  if self.prompt_cache then return self.prompt_cache end
  local list, err, code = list_all(self, "prompts/list", "prompts")
  if not list then return nil, err, code end
  self.prompt_cache = list
  return list
end

-- prompts/get -> { description, messages = { { role, content } } } | nil, message, code
function Client:prompt(name, args)
  if type(name) ~= "string" then error("rig.mcp: c:prompt: the prompt name must be a string", 2) end
  local sargs
  if args ~= nil then
    if type(args) ~= "table" then error("rig.mcp: c:prompt: the arguments must be a table", 2) end
    sargs = {}
    for k, v in pairs(args) do sargs[k] = tostring(v) end -- prompt arguments are strings
  end
  local res, err, code = self:request("prompts/get", { name = name, arguments = sargs })
  if not res then return nil, err, code end
  if type(res) ~= "table" or type(res.messages) ~= "table" then
    return fail(self, "prompts/get: the answer has no 'messages' list", "protocol")
  end
  return res
end

-- A prompt as one text (its messages' text joined): a loop's system.
function Client:prompt_text(name, args)
  local res, err, code = self:prompt(name, args)
  if not res then return nil, err, code end
  local parts = {}
  for _, m in ipairs(res.messages) do
    local text = tools_mod.block(m.content)
    parts[#parts + 1] = text
  end
  return table.concat(parts, "\n\n")
end

-- A prompt as input blocks for s:submit (its messages' text, one block each).
function Client:prompt_input(name, args)
  local res, err, code = self:prompt(name, args)
  if not res then return nil, err, code end
  local blocks = {}
  for _, m in ipairs(res.messages) do
    blocks[#blocks + 1] = { type = "text", text = (tools_mod.block(m.content)) }
  end
  if #blocks == 0 then return fail(self, "prompts/get: prompt '" .. name .. "' is empty", "protocol") end
  return blocks
end

-- ---- logging ----

function Client:logs()
  local out = {}
  for i, l in ipairs(self.log_ring) do out[i] = l end
  return out
end

function Client:set_log_level(level)
  local res, err, code = self:request("logging/setLevel", { level = level })
  if not res then return nil, err, code end
  return true
end

function Client:__tostring()
  return "rig.mcp.client(" .. self.name .. ", " .. self.state .. ")"
end

return M
