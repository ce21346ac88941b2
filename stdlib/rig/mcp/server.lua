-- rig.mcp.server: an MCP server written in Lua — tools (rig tools as they are,
-- or plain handlers), resources (static, templated, subscribable), prompts,
-- completions, logging and progress, over stdio or Streamable HTTP
-- (rig.mcp.server_http). docs/mcp.md "Serving" is the user's page.
--
--   local srv = rig.mcp.server{
--     name = "notes", version = "1.0.0", title = "Notes", instructions = "…",
--     tools = { rig.tool{…},                     -- a rig tool: its request (prepare,
--                                                -- needs_approval) → the gate → run(args, ctx)
--               { name = "add", description = "…", input_schema = { … },
--                 output_schema = { … }?, annotations = { … }?, title = "…"?,
--                 run = function(args, ctx) return "text" | MCP result | nil, msg end } },
--     resources = { { uri = "notes://all", name = "all", description = "…",
--                     mime_type = "text/plain", text = "…" | blob = "base64…"
--                     | read = function(uri, ctx) return text | { contents } end } },
--     resource_templates = { { uri_template = "notes://{id}", name =, description =,
--                              mime_type =, read = function(uri, vars, ctx) … end,
--                              list = function(ctx) return { { uri, name, … } } end,  -- optional:
--                                                          -- its resources in resources/list
--                              complete = { id = function(value) return { … } end } } },
--     prompts = { { name = "review", description = "…", title =,
--                   arguments = { { name = "file", description = "…", required = true } },
--                   get = function(args, ctx) return "text" | { messages } end,
--                   complete = { file = function(value) return { … } end } } },
--     gate = rig.gate{…},          -- every tools/call passes it (default below)
--     on_call = function(record) end, -- each finished tools/call: { tool, session,
--                                  -- arguments, verdict, is_error, ms }
--     page_size = 100,             -- items per page of a list
--   }
--   srv:serve_stdio()              -- this process's stdin/stdout until EOF (blocks)
--   local h = srv:serve_http{ listen = "127.0.0.1:0", path = "/mcp", auth = { token = … },
--                             allowed_hosts = { … } }  -> h.url, h:close() (rig.mcp.server_http)
--   srv:resource_updated(uri)      -- notifications/resources/updated to the subscribers
--   srv:tools_changed(), srv:resources_changed(), srv:prompts_changed()
--   srv:log(level, data [, logger]) -- notifications/message to every session
--   srv:sessions() -> the connected sessions { id, client_info, protocol_version }
--
-- run's ctx: session (id, client_info, client_capabilities), request_id,
-- progress(p, total, message), log(level, data, logger), elicit(message, schema) ->
-- { action, content } | nil, msg, sample{ messages, maxTokens, … } -> result | nil, msg,
-- send_request(method, params), close_stream() (Streamable HTTP: end this request's SSE
-- stream now; the client resumes it with GET + Last-Event-ID), cancelled().
--
-- The gate: each tools/call is a gate request — a rig tool's own (its prepare), a
-- plain handler's { kind = "mcp", scope = "SERVER/TOOL" }. Without `gate` the server
-- allows its own handlers' mcp requirement, asks for a rig tool's approval (kind
-- "tool") and refuses the rest (a rig tool that needs the filesystem, a command or
-- the network is refused until a gate says so). A
-- "gated" verdict asks the person on the other side through elicitation when the
-- client offers it (accept with approve = true runs the call), else it is refused.

local core = require "rig.core"
local json = require "rig.json"
local jsonrpc = require "rig.mcp.jsonrpc"
local client_mod = require "rig.mcp.client"
local tool_mod = require "rig.tool"

local M = {}

local null = json.null
M.VERSIONS = client_mod.VERSIONS
local SUPPORTED = {}
for _, v in ipairs(M.VERSIONS) do SUPPORTED[v] = true end

local LEVELS = { debug = 0, info = 1, notice = 2, warning = 3, error = 4, critical = 5,
                 alert = 6, emergency = 7 }
M.LEVELS = LEVELS
local RESOURCE_NOT_FOUND = -32002
local NAME = "^[%w_%-%.]+$"

local function bad(msg) error("rig.mcp.server: " .. msg, 3) end

local Server = {}
Server.__index = Server
M.Server = Server

local function str_field(o, k, where, required)
  local v = o[k]
  if v == nil then
    if required then bad(where .. ": field '" .. k .. "' is required") end
    return nil
  end
  if type(v) ~= "string" then bad(where .. ": field '" .. k .. "' must be a string") end
  return v
end

local function list(v, where)
  if v == nil then return {} end
  if type(v) ~= "table" then bad("field '" .. where .. "' must be a list") end
  return v
end

local TOOL_FIELDS = { name = true, description = true, input_schema = true, output_schema = true,
                      annotations = true, title = true, run = true }

local function norm_tool(t, i)
  local where = "tools[" .. i .. "]"
  if tool_mod.is_tool(t) then
    return { name = t.name, description = t.description, input_schema = t.schema, rig = t }
  end
  if type(t) ~= "table" then bad(where .. " must be a rig.tool or a table") end
  for k in pairs(t) do
    if not TOOL_FIELDS[k] then bad(where .. ": unknown field '" .. tostring(k) .. "'") end
  end
  local name = str_field(t, "name", where, true)
  if not name:match(NAME) or #name > 128 then
    bad(where .. ": name '" .. name .. "' must be 1 to 128 letters, digits, '_', '-' or '.'")
  end
  if type(t.run) ~= "function" then bad(where .. ": field 'run' must be a function(args, ctx)") end
  if t.input_schema ~= nil and type(t.input_schema) ~= "table" then
    bad(where .. ": field 'input_schema' must be a JSON Schema table")
  end
  if t.output_schema ~= nil and type(t.output_schema) ~= "table" then
    bad(where .. ": field 'output_schema' must be a JSON Schema table")
  end
  return { name = name, description = str_field(t, "description", where) or "",
           title = str_field(t, "title", where),
           input_schema = t.input_schema or { type = "object", properties = {} },
           output_schema = t.output_schema, annotations = t.annotations, run = t.run }
end

-- "notes://{id}/x" -> a Lua pattern and the variable names
local function template_pattern(tpl)
  local names, parts, i = {}, { "^" }, 1
  while i <= #tpl do
    local a, b, name = tpl:find("{([%w_]+)}", i)
    if not a then
      parts[#parts + 1] = tpl:sub(i):gsub("%p", "%%%0")
      break
    end
    parts[#parts + 1] = tpl:sub(i, a - 1):gsub("%p", "%%%0")
    parts[#parts + 1] = "([^/]+)"
    names[#names + 1] = name
    i = b + 1
  end
  parts[#parts + 1] = "$"
  return table.concat(parts), names
end

function M.new(o)
  if type(o) ~= "table" then bad("expects a table of fields") end
  local known = { name = true, version = true, title = true, instructions = true, tools = true,
                  resources = true, resource_templates = true, prompts = true, gate = true,
                  on_call = true, page_size = true }
  for k in pairs(o) do
    if not known[k] then bad("unknown field '" .. tostring(k) .. "'") end
  end
  local self = setmetatable({ name = str_field(o, "name", "server", true),
    version = str_field(o, "version", "server") or core.version,
    title = str_field(o, "title", "server"), instructions = str_field(o, "instructions", "server"),
    tool_list = {}, tool_by_name = {}, resource_list = {}, resource_by_uri = {},
    template_list = {}, prompt_list = {}, prompt_by_name = {}, conns = {}, nconns = 0,
    page_size = o.page_size or 100, on_call = o.on_call }, Server)
  if not self.name:match("^%a[%w_%-]*$") then
    bad("field 'name' must be a letter then letters, digits, '_' or '-'")
  end
  if math.type(self.page_size) ~= "integer" or self.page_size < 1 then
    bad("field 'page_size' must be a positive integer")
  end
  if o.gate ~= nil and getmetatable(o.gate) ~= "rig.gate" then bad("field 'gate' must be a rig.gate") end
  if o.on_call ~= nil and type(o.on_call) ~= "function" then bad("field 'on_call' must be a function") end
  -- the default: the handlers' own mcp requirement, and a person (asked through the
  -- client's elicitation) for a rig tool that needs approval; nothing else
  self.gate = o.gate or require("rig.gate"){ access = { mcp = "allow", tool = "gated" },
                                            approver = "interactive" }
  for i, t in ipairs(list(o.tools, "tools")) do
    local nt = norm_tool(t, i)
    if self.tool_by_name[nt.name] then bad("tools[" .. i .. "]: duplicate tool '" .. nt.name .. "'") end
    self.tool_list[#self.tool_list + 1] = nt
    self.tool_by_name[nt.name] = nt
  end
  for i, r in ipairs(list(o.resources, "resources")) do
    local where = "resources[" .. i .. "]"
    if type(r) ~= "table" then bad(where .. " must be a table") end
    local uri = str_field(r, "uri", where, true)
    local n = (r.text ~= nil and 1 or 0) + (r.blob ~= nil and 1 or 0) + (r.read ~= nil and 1 or 0)
    if n ~= 1 then bad(where .. ": give exactly one of 'text', 'blob' and 'read'") end
    if r.read ~= nil and type(r.read) ~= "function" then bad(where .. ": field 'read' must be a function") end
    local nr = { uri = uri, name = str_field(r, "name", where) or uri,
                 description = str_field(r, "description", where) or "",
                 title = str_field(r, "title", where),
                 mime_type = str_field(r, "mime_type", where), text = str_field(r, "text", where),
                 blob = str_field(r, "blob", where), read = r.read }
    if self.resource_by_uri[uri] then bad(where .. ": duplicate uri '" .. uri .. "'") end
    self.resource_list[#self.resource_list + 1] = nr
    self.resource_by_uri[uri] = nr
  end
  for i, r in ipairs(list(o.resource_templates, "resource_templates")) do
    local where = "resource_templates[" .. i .. "]"
    if type(r) ~= "table" then bad(where .. " must be a table") end
    local tpl = str_field(r, "uri_template", where, true)
    if type(r.read) ~= "function" then bad(where .. ": field 'read' must be a function(uri, vars, ctx)") end
    if r.list ~= nil and type(r.list) ~= "function" then bad(where .. ": field 'list' must be a function(ctx)") end
    local pat, names = template_pattern(tpl)
    self.template_list[#self.template_list + 1] = { uri_template = tpl, pattern = pat, names = names,
      name = str_field(r, "name", where) or tpl, description = str_field(r, "description", where) or "",
      title = str_field(r, "title", where), mime_type = str_field(r, "mime_type", where),
      read = r.read, complete = r.complete, list = r.list }
  end
  for i, p in ipairs(list(o.prompts, "prompts")) do
    local where = "prompts[" .. i .. "]"
    if type(p) ~= "table" then bad(where .. " must be a table") end
    local name = str_field(p, "name", where, true)
    if type(p.get) ~= "function" then bad(where .. ": field 'get' must be a function(args, ctx)") end
    local args = {}
    for j, a in ipairs(list(p.arguments, where .. ".arguments")) do
      if type(a) ~= "table" or type(a.name) ~= "string" then
        bad(where .. ".arguments[" .. j .. "] must be { name = …, description =, required = }")
      end
      args[j] = { name = a.name, description = a.description, required = a.required == true }
    end
    if self.prompt_by_name[name] then bad(where .. ": duplicate prompt '" .. name .. "'") end
    local np = { name = name, description = str_field(p, "description", where) or "",
                 title = str_field(p, "title", where), arguments = args, get = p.get,
                 complete = p.complete }
    self.prompt_list[#self.prompt_list + 1] = np
    self.prompt_by_name[name] = np
  end
  return self
end

-- ---- one connection (a session): its peer and what the client said ----

local Conn = {}
Conn.__index = Conn

-- send(msg, opts) is the transport's; opts.related routes it (Streamable HTTP).
function Server:connect(send, id)
  local c = setmetatable({ server = self, id = id, subscriptions = {}, level = nil,
                           initialized = false }, Conn)
  c.peer = jsonrpc.peer{
    name = "mcp: client" .. (id and (" '" .. id:sub(1, 8) .. "'") or ""),
    send = send,
    on_request = function(method, params, rctx) return self:_request(c, method, params, rctx) end,
    on_notification = function(method, params)
      if method == "notifications/initialized" then c.initialized = true end
    end,
    timeout = 300,
  }
  self.conns[c] = true
  self.nconns = self.nconns + 1
  return c
end

function Conn:receive(text, via) self.peer:receive(text, via) end

function Conn:close(why)
  if self.closed then return end
  self.closed = true
  self.server.conns[self] = nil
  self.server.nconns = self.server.nconns - 1
  self.peer:close(why or "the session ended")
end

function Server:sessions()
  local out = {}
  for c in pairs(self.conns) do
    out[#out + 1] = { id = c.id, client_info = c.client_info, protocol_version = c.protocol_version }
  end
  return out
end

local function notify_all(self, method, params, filter)
  for c in pairs(self.conns) do
    if c.initialized and (not filter or filter(c)) then c.peer:notify(method, params) end
  end
end

function Server:resource_updated(uri)
  notify_all(self, "notifications/resources/updated", { uri = uri },
    function(c) return c.subscriptions[uri] end)
end
function Server:tools_changed() notify_all(self, "notifications/tools/list_changed") end
function Server:resources_changed() notify_all(self, "notifications/resources/list_changed") end
function Server:prompts_changed() notify_all(self, "notifications/prompts/list_changed") end

local function log_to(c, level, data, logger, related)
  if not LEVELS[level] then error("rig.mcp.server: unknown log level '" .. tostring(level) .. "'", 3) end
  if c.level and LEVELS[level] < LEVELS[c.level] then return true end
  return c.peer:notify("notifications/message", { level = level, data = data, logger = logger },
                       { related = related })
end

function Server:log(level, data, logger)
  for c in pairs(self.conns) do
    if c.initialized then log_to(c, level, data, logger) end
  end
end

-- ---- requests ----

local function rpc_error(code, message, data) return nil, { code = code, message = message, data = data } end

local function page(self, items, params, key, map)
  local start = 1
  local cursor = type(params) == "table" and params.cursor or nil
  if cursor ~= nil and cursor ~= null then
    start = math.tointeger(tonumber(cursor))
    if type(cursor) ~= "string" or not start or start < 1 or start > #items + 1 then
      return rpc_error(jsonrpc.INVALID_PARAMS, "invalid cursor")
    end
  end
  local out = {}
  local last = math.min(#items, start + self.page_size - 1)
  for i = start, last do out[#out + 1] = map(items[i]) end
  local res = { [key] = json.array(out) }
  if last < #items then res.nextCursor = tostring(last + 1) end
  return res
end

local function tool_entry(t)
  local e = { name = t.name, description = t.description, inputSchema = t.input_schema,
              title = t.title, outputSchema = t.output_schema, annotations = t.annotations }
  return e
end

-- A handler's answer as a CallToolResult.
local function as_result(v, err)
  if v == nil then
    return { content = json.array{ { type = "text", text = tostring(err or "the tool failed") } },
             isError = true }
  end
  if type(v) == "string" then return { content = json.array{ { type = "text", text = v } } } end
  if tool_mod.is_result(v) then
    return { content = json.array{ { type = "text", text = v.text } }, isError = v.is_error or nil }
  end
  if type(v) == "table" then
    if v.content == nil then
      if v.structuredContent ~= nil then
        v.content = json.array{ { type = "text", text = json.encode(v.structuredContent) } }
      else
        v.content = json.array{}
      end
    end
    return v
  end
  return { content = json.array{ { type = "text", text = tostring(v) } } }
end

local function error_result(msg)
  return { content = json.array{ { type = "text", text = msg } }, isError = true }
end

-- ctx for a handler, bound to this request.
local function handler_ctx(self, c, rctx)
  local ctx = { session = { id = c.id, client_info = c.client_info,
                            client_capabilities = c.client_capabilities or {} },
                request_id = rctx.id, server = self }
  ctx.progress = function(p, total, message)
    if rctx.progress then return rctx.progress(p, total, message) end
    return true
  end
  ctx.log = function(level, data, logger) return log_to(c, level, data, logger, rctx.id) end
  ctx.send_request = function(method, params, opts)
    opts = opts or {}
    return c.peer:request(method, params, { related = rctx.id, timeout = opts.timeout or 300 })
  end
  ctx.elicit = function(message, schema)
    local caps = c.client_capabilities or {}
    if type(caps.elicitation) ~= "table" then
      return nil, "the client does not offer elicitation", "unsupported"
    end
    return ctx.send_request("elicitation/create", { message = message,
      requestedSchema = schema or { type = "object", properties = {} } })
  end
  ctx.sample = function(params)
    local caps = c.client_capabilities or {}
    if type(caps.sampling) ~= "table" then
      return nil, "the client does not offer sampling", "unsupported"
    end
    return ctx.send_request("sampling/createMessage", params)
  end
  ctx.close_stream = function()
    if c.close_stream then c.close_stream(rctx.id) end
  end
  ctx.cancelled = function() return rctx.cancelled end
  return ctx
end
M.handler_ctx = handler_ctx

-- A gated verdict, put to the person on the client's side (elicitation), if it can ask.
local function ask_approval(ctx, tname, req)
  local ans = ctx.elicit("Allow the tool '" .. tname .. "'? " .. tostring(req.summary or ""),
    { type = "object", properties = { approve = { type = "boolean", title = "Approve",
      description = "run this call", default = false } }, required = json.array{ "approve" } })
  if type(ans) == "table" and ans.action == "accept" and type(ans.content) == "table"
     and ans.content.approve == true then
    return true
  end
  return false
end

function Server:_call_tool(c, params, rctx)
  if type(params) ~= "table" or type(params.name) ~= "string" then
    return rpc_error(jsonrpc.INVALID_PARAMS, "tools/call needs a tool name")
  end
  local t = self.tool_by_name[params.name]
  if not t then return rpc_error(jsonrpc.INVALID_PARAMS, "unknown tool: " .. params.name) end
  local args = params.arguments
  if args == nil or args == null then args = {} end
  if type(args) ~= "table" then return rpc_error(jsonrpc.INVALID_PARAMS, "arguments must be an object") end
  local ctx = handler_ctx(self, c, rctx)
  local started = core.now()
  local record = { tool = t.name, session = c.id, arguments = args }
  local function done(res, verdict)
    record.verdict, record.is_error = verdict, res.isError == true
    record.ms = math.floor((core.now() - started) * 1000 + 0.5)
    if self.on_call then pcall(self.on_call, record) end
    return res
  end
  -- the gate's request: the rig tool's own, else the server's mcp requirement
  local req, artifact
  if t.rig then
    local ok, msg = t.rig:check_args(args)
    if not ok then return done(error_result("invalid arguments: " .. tostring(msg)), "invalid") end
    -- the tool's own request (its prepare, or none: no access declared; plus the
    -- approval requirement when needs_approval says so), checked as the runner does
    local pok, r, a = pcall(tool_mod.prepare_call, t.rig, args, { session_id = c.id })
    if not pok and jsonrpc.is_cancel(r) then error(r, 0) end
    if not pok then return done(error_result("preparation failed: " .. tostring(r)), "invalid") end
    if r == nil then return done(error_result(tostring(a)), "invalid") end
    req, artifact = r, a
  else
    local scope = self.name .. "/" .. t.name
    req = { summary = "mcp serve " .. scope,
            requirements = { { kind = "mcp", scope = scope, match = scope } } }
  end
  local d = self.gate:evaluate(req)
  local verdict = d.verdict
  if verdict == "gated" then
    verdict = ask_approval(ctx, t.name, req) and "allow" or "deny"
    if verdict == "deny" then
      return done(error_result("permission denied: approval required and not given"), "deny")
    end
  elseif verdict == "deny" then
    return done(error_result(tostring(d.reason or "permission denied")), "deny")
  end
  local ok, v, err
  if t.rig then
    ctx.prepared, ctx.request, ctx.approved, ctx.args = artifact, req, d.approved, args
    ctx.session_id, ctx.tool = c.id, t.name
    ok, v, err = pcall(t.rig.run, tool_mod.run_args(t.rig, args, req), ctx)
  else
    ok, v, err = pcall(t.run, args, ctx)
  end
  if not ok then
    if jsonrpc.is_cancel(v) then error(v, 0) end
    return done(error_result(tostring(v)), verdict)
  end
  return done(as_result(v, err), verdict)
end

local function read_resource(self, c, uri, rctx)
  local ctx = handler_ctx(self, c, rctx)
  local function contents(v, mime)
    if type(v) == "string" then
      return { contents = json.array{ { uri = uri, mimeType = mime, text = v } } }
    end
    if type(v) == "table" and v.contents then return v end
    if type(v) == "table" and (v.text or v.blob) then
      return { contents = json.array{ { uri = uri, mimeType = v.mime_type or v.mimeType or mime,
                                        text = v.text, blob = v.blob } } }
    end
    return nil
  end
  local r = self.resource_by_uri[uri]
  if r then
    if r.text then return contents(r.text, r.mime_type) end
    if r.blob then return { contents = json.array{ { uri = uri, mimeType = r.mime_type, blob = r.blob } } } end
    local v, err = r.read(uri, ctx)
    if v == nil then return rpc_error(RESOURCE_NOT_FOUND, tostring(err or "resource not found"), { uri = uri }) end
    return contents(v, r.mime_type)
  end
  for _, tp in ipairs(self.template_list) do
    local caps = { uri:match(tp.pattern) }
    if #caps > 0 and #caps == #tp.names then
      local vars = {}
      for i, n in ipairs(tp.names) do
        vars[n] = (caps[i]:gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
      end
      local v, err = tp.read(uri, vars, ctx)
      if v == nil then
        return rpc_error(RESOURCE_NOT_FOUND, tostring(err or "resource not found"), { uri = uri })
      end
      return contents(v, tp.mime_type)
    end
  end
  return rpc_error(RESOURCE_NOT_FOUND, "resource not found: " .. uri, { uri = uri })
end

local function prompt_get(self, c, params, rctx)
  if type(params) ~= "table" or type(params.name) ~= "string" then
    return rpc_error(jsonrpc.INVALID_PARAMS, "prompts/get needs a prompt name")
  end
  local p = self.prompt_by_name[params.name]
  if not p then return rpc_error(jsonrpc.INVALID_PARAMS, "unknown prompt: " .. params.name) end
  local args = type(params.arguments) == "table" and params.arguments or {}
  for _, a in ipairs(p.arguments) do
    if a.required and args[a.name] == nil then
      return rpc_error(jsonrpc.INVALID_PARAMS, "prompt '" .. p.name .. "' needs argument '" .. a.name .. "'")
    end
  end
  local v, err = p.get(args, handler_ctx(self, c, rctx))
  if v == nil then return rpc_error(jsonrpc.INTERNAL_ERROR, tostring(err or "the prompt failed")) end
  if type(v) == "string" then
    return { description = p.description,
             messages = json.array{ { role = "user", content = { type = "text", text = v } } } }
  end
  if type(v) == "table" and v.messages then
    if v.description == nil then v.description = p.description end
    return v
  end
  return { description = p.description, messages = json.array(v) }
end

local function complete(self, c, params)
  if type(params) ~= "table" or type(params.ref) ~= "table" or type(params.argument) ~= "table" then
    return rpc_error(jsonrpc.INVALID_PARAMS, "completion/complete needs ref and argument")
  end
  local ref, arg = params.ref, params.argument
  local fns
  if ref.type == "ref/prompt" then
    local p = self.prompt_by_name[ref.name or ""]
    if not p then return rpc_error(jsonrpc.INVALID_PARAMS, "unknown prompt: " .. tostring(ref.name)) end
    fns = p.complete
  elseif ref.type == "ref/resource" then
    for _, tp in ipairs(self.template_list) do
      if tp.uri_template == ref.uri then fns = tp.complete end
    end
  else
    return rpc_error(jsonrpc.INVALID_PARAMS, "unknown reference type: " .. tostring(ref.type))
  end
  local values = {}
  local f = type(fns) == "table" and fns[arg.name]
  local value = type(arg.value) == "string" and arg.value or ""
  if type(f) == "function" then
    values = f(value, type(params.context) == "table" and params.context.arguments or {}) or {}
  elseif type(f) == "table" then
    for _, v in ipairs(f) do
      if v:sub(1, #value) == value then values[#values + 1] = v end
    end
  end
  local total = #values
  local out = {}
  for i = 1, math.min(total, 100) do out[i] = values[i] end
  return { completion = { values = json.array(out), total = total, hasMore = total > 100 } }
end

function Server:capabilities()
  local caps = { logging = {}, completions = {} }
  if #self.tool_list > 0 then caps.tools = { listChanged = true } end
  if #self.resource_list > 0 or #self.template_list > 0 then
    caps.resources = { subscribe = true, listChanged = true }
  end
  if #self.prompt_list > 0 then caps.prompts = { listChanged = true } end
  return caps
end

function Server:_request(c, method, params, rctx)
  if method == "initialize" then
    if type(params) ~= "table" then return rpc_error(jsonrpc.INVALID_PARAMS, "initialize needs params") end
    local want = params.protocolVersion
    c.protocol_version = SUPPORTED[want] and want or M.VERSIONS[1]
    c.client_info = type(params.clientInfo) == "table" and params.clientInfo or {}
    c.client_capabilities = type(params.capabilities) == "table" and params.capabilities or {}
    if c.on_initialize then c.on_initialize(c.protocol_version) end
    return { protocolVersion = c.protocol_version, capabilities = self:capabilities(),
             serverInfo = { name = self.name, version = self.version, title = self.title },
             instructions = self.instructions }
  end
  if method == "ping" then return {} end
  if method == "tools/list" then return page(self, self.tool_list, params, "tools", tool_entry) end
  if method == "tools/call" then return self:_call_tool(c, params, rctx) end
  if method == "resources/list" then
    local all = self.resource_list
    for _, tp in ipairs(self.template_list) do
      if tp.list then
        if all == self.resource_list then
          all = {}
          for i, r in ipairs(self.resource_list) do all[i] = r end
        end
        for _, r in ipairs(tp.list(handler_ctx(self, c, rctx)) or {}) do
          all[#all + 1] = { uri = r.uri, name = r.name, title = r.title,
                            description = r.description, mime_type = r.mime_type or r.mimeType }
        end
      end
    end
    return page(self, all, params, "resources", function(r)
      return { uri = r.uri, name = r.name, title = r.title, description = r.description,
               mimeType = r.mime_type }
    end)
  end
  if method == "resources/templates/list" then
    return page(self, self.template_list, params, "resourceTemplates", function(r)
      return { uriTemplate = r.uri_template, name = r.name, title = r.title,
               description = r.description, mimeType = r.mime_type }
    end)
  end
  if method == "resources/read" then
    if type(params) ~= "table" or type(params.uri) ~= "string" then
      return rpc_error(jsonrpc.INVALID_PARAMS, "resources/read needs a uri")
    end
    return read_resource(self, c, params.uri, rctx)
  end
  if method == "resources/subscribe" or method == "resources/unsubscribe" then
    if type(params) ~= "table" or type(params.uri) ~= "string" then
      return rpc_error(jsonrpc.INVALID_PARAMS, method .. " needs a uri")
    end
    c.subscriptions[params.uri] = method == "resources/subscribe" or nil
    return {}
  end
  if method == "prompts/list" then
    return page(self, self.prompt_list, params, "prompts", function(p)
      local args = {}
      for i, a in ipairs(p.arguments) do args[i] = a end
      return { name = p.name, title = p.title, description = p.description,
               arguments = json.array(args) }
    end)
  end
  if method == "prompts/get" then return prompt_get(self, c, params, rctx) end
  if method == "completion/complete" then return complete(self, c, params) end
  if method == "logging/setLevel" then
    local level = type(params) == "table" and params.level
    if not LEVELS[level] then return rpc_error(jsonrpc.INVALID_PARAMS, "unknown log level") end
    c.level = level
    return {}
  end
  return nil, jsonrpc.method_not_found(method)
end

-- ---- stdio ----

-- This process's stdin and stdout are the connection: newline-delimited JSON-RPC,
-- framed in C (rig.core.mcp_framer), until the client closes stdin. Nothing else
-- may write to stdout (print goes to stderr meanwhile).
function Server:serve_stdio(opts)
  opts = opts or {}
  local max_line = opts.max_line or (16 << 20)
  local out = io.stdout
  local c
  c = self:connect(function(msg)
    local text, err = json.encode(msg)
    if not text then return nil, "cannot encode the message: " .. tostring(err), "encode" end
    local ok, werr = out:write(text, "\n")
    if not ok then return nil, "cannot write to stdout: " .. tostring(werr), "closed" end
    out:flush()
    return true
  end, "stdio")
  local saved_print = print
  print = function(...) -- luacheck: ignore
    local parts = {}
    for i = 1, select("#", ...) do parts[i] = tostring((select(i, ...))) end
    io.stderr:write(table.concat(parts, "\t"), "\n")
  end
  local fr = core.mcp_framer(max_line)
  local function drain()
    while true do
      local line, total, head, tail = fr:pop()
      if line == nil then return end
      if line == false then
        c.peer:receive_oversized(total, head, tail, max_line)
      elseif line:find("%S") then
        c:receive(line)
      end
    end
  end
  while true do
    local chunk, err = core.stdin_read(1 << 16)
    if not chunk then
      if err then io.stderr:write("luarig: mcp serve: ", tostring(err), "\n") end
      break
    end
    fr:feed(chunk)
    drain()
  end
  fr:finish()
  drain()
  -- the requests in flight finish (their answers may still go out) for a moment
  local deadline = core.now() + (opts.drain or 2)
  while next(c.peer.incoming) and core.now() < deadline do core.sleep(0.02) end
  c:close("stdin closed")
  fr:close()
  print = saved_print -- luacheck: ignore
  return true
end

function Server:serve_http(opts)
  return require("rig.mcp.server_http").serve(self, opts or {})
end

return M
