-- rig.tool: a tool definition, validated and frozen (docs/design/tools.md).
--
--   local t = rig.tool{
--     name = "lookup",                   -- 1 to 64 letters, digits, '_' or '-'
--     description = "…",                 -- what the model reads
--     schema = { type = "object", … },   -- JSON Schema of the arguments (rig.schema's
--                                        -- subset); default: an object with no properties
--     run = function(args, ctx) return "text" end,  -- args: the validated arguments;
--                                        -- returns text, or nil, message, or
--                                        -- rig.tool.result{ text, is_error, details }, or
--                                        -- a table (sent as its JSON)
--     needs_approval = true,             -- or function(args) -> boolean: a person approves
--                                        -- each call (a requirement { kind = "tool",
--                                        -- match = NAME }); default false
--     prepare = function(args, pctx) return request [, artifact] end,  -- or nil, message;
--                                        -- optional: the access a call declares (below),
--                                        -- for the gate; artifact reaches run as ctx.prepared
--     sequential = false,                -- true: runs alone, never beside another call
--   }
--   A tool without prepare declares no access: its request is { summary = "NAME {args}",
--   requirements = {} } (plus the approval requirement when needs_approval says so), so
--   any gate allows it (rig.gate.default() is the shortest).
--   t.name, t.description, t.schema (a copy), t.sequential, t.prepare, t.run,
--   t.needs_approval: read-only
--   t:check_args(args) -> true | nil, "$.q: expected string, got number"
--   t:check_request(req) -> request (a normalized copy) | nil, message
--     request = { summary = "…", requirements = { requirement, … }, command = "…"?,
--                 cwd = "…"? }
--     requirement = { kind = "filesystem.read" | "filesystem.write" | "network"
--                     | "command.execute" | "delegate" | "mcp" | "tool", scope = "…", match = "…",
--                     description = "…"? }
--       scope is what the access source routes on (a path for filesystem kinds,
--       "host:port" for network, the command line for command.execute, the
--       delegate loop's name for delegate, "SERVER/TOOL" or "SERVER:sampling" for
--       mcp, the tool's name for tool); match is what saved permission rules match (a path, "tcp://host:port",
--       a command line, a loop name, "SERVER/TOOL"). Give either: the other is
--       derived (network: "tcp://" .. scope).
--   rig.tool.result{ text = "…", is_error = false, details = { … } } -> a result a run
--     may return instead of a string: text is what the model reads, is_error marks it a
--     tool error, details (a JSON-encodable table) is kept with the tool_result block in
--     the journal but never sent to the model (rig.mcp keeps the MCP content there);
--     media = { { type = "image" | "document", path | data | base64 | url, … } } go to the
--     model with the text, stored once (rig.media, docs/media.md)
--   t:spec() -> { name =, description =, schema = } (the tool as a model request lists it)
--
-- run's ctx (from rig.session): session_id, loop_id, turn_id, call_id, tool, request
-- (the normalized request the gate decided on), args (the validated arguments again),
-- workspace, observations, approved (requirements a person approved), prepared (what
-- prepare returned second), idempotency_key ("SESSION/STEP/CALL": the same when a
-- resume after a crash runs the call again, docs/resume.md) and resumed (true then).
-- For rigs written when run received the request: a tool with prepare still finds the
-- request's fields (summary, requirements, command, cwd) on its first argument when the
-- arguments have no field of that name; new code reads ctx.request.
--
-- Reserved names (the runner injects these tools itself; a rig.tool may not take
-- them): "final_answer" (a loop's output_schema without native structured output),
-- "start_agent", "message_agent", "list_agents", "stop_agent" (a loop with
-- delegates: rig.delegation).
--
-- Every call goes through the loop's gate, prepared or not: rig.loop refuses a loop
-- with tools and no gate.

local json = require "rig.json"
local schema_mod = require "rig.schema"
local request_mod = require "rig.model.request"

local M = {}

local fields = { name = true, description = true, schema = true, prepare = true, run = true,
                 sequential = true, needs_approval = true }

local KINDS = { ["filesystem.read"] = true, ["filesystem.write"] = true, network = true,
                ["command.execute"] = true, delegate = true, mcp = true, tool = true }
M.kinds = KINDS

local RESERVED = { final_answer = true, start_agent = true, message_agent = true,
                   list_agents = true, stop_agent = true }
M.RESERVED = RESERVED

local private = setmetatable({}, { __mode = "k" })

local function fail(msg) error("rig.tool: " .. msg, 0) end

local function checked(level, f, ...)
  local ok, a, b = pcall(f, ...)
  if not ok then error(a, level + 1) end
  return a, b
end

local function deep_copy(v)
  if type(v) ~= "table" or v == json.null then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = deep_copy(x) end
  if json.is_array(v) then json.array(out) end
  return out
end
M._deep_copy = deep_copy

local function check_tool(def, injected)
  if type(def) ~= "table" then fail("expects a table of fields") end
  for k in pairs(def) do
    if not fields[k] then fail("unknown field '" .. tostring(k) .. "'") end
  end
  local name = def.name
  if type(name) ~= "string" or #name < 1 or #name > 64 or not name:match("^[%w_-]+$") then
    fail("field 'name' must be 1 to 64 letters, digits, '_' or '-' (got "
      .. (type(name) == "string" and ("'" .. name .. "'") or type(name)) .. ")")
  end
  if RESERVED[name] and not injected then
    fail("field 'name': '" .. name .. "' is reserved for a tool the runner injects")
  end
  local where = "rig.tool '" .. name .. "'"
  local function bad(msg) error(where .. ": " .. msg, 0) end
  if type(def.description) ~= "string" or def.description == "" then
    bad("field 'description' must be a non-empty string")
  end
  local schema = def.schema
  if schema == nil then schema = { type = "object", properties = {} } end
  if type(schema) ~= "table" then bad("field 'schema' must be a table (a JSON Schema)") end
  local function schema_fail(msg)
    msg = tostring(msg):gsub("^rig%.model: ", "")
    local path, rest = msg:match("^(%S+): (.*)$")
    bad(path and ("field '" .. path .. "': " .. rest) or ("field 'schema': " .. msg))
  end
  local ok, copy = pcall(request_mod.copy_schema, schema, "schema")
  if not ok then schema_fail(copy) end
  local sok, serr = schema_mod.check(copy)
  if not sok then schema_fail(serr) end
  if copy.type ~= "object" then
    bad("field 'schema.type' must be \"object\" (tool arguments are an object)")
  end
  if def.prepare ~= nil and type(def.prepare) ~= "function" then
    bad("field 'prepare' must be a function")
  end
  if type(def.run) ~= "function" then bad("field 'run' must be a function") end
  if def.sequential ~= nil and type(def.sequential) ~= "boolean" then
    bad("field 'sequential' must be a boolean")
  end
  local na = def.needs_approval
  if na ~= nil and type(na) ~= "boolean" and type(na) ~= "function" then
    bad("field 'needs_approval' must be a boolean or a function(args) -> boolean")
  end
  return { name = name, description = def.description, schema = copy, prepare = def.prepare,
           run = def.run, sequential = def.sequential == true, needs_approval = na or false }
end

-- ---- requests ----

local request_fields = { summary = true, requirements = true, command = true, cwd = true }
local requirement_fields = { kind = true, scope = true, match = true, description = true }

local function one_line(v, path, optional)
  if v == nil and optional then return nil end
  if type(v) ~= "string" or v == "" then return nil, path .. " must be a non-empty string" end
  if #v > 4096 then return nil, path .. " is longer than 4096 bytes" end
  if v:find("[%z\r\n]") then return nil, path .. " must be one line" end
  return v
end

-- Normalizes one requirement: both scope and match present.
local function check_requirement(r, path)
  if type(r) ~= "table" then return nil, path .. " must be a table" end
  for k in pairs(r) do
    if not requirement_fields[k] then return nil, path .. ": unknown field '" .. tostring(k) .. "'" end
  end
  if not KINDS[r.kind] then
    return nil, path .. ".kind must be one of filesystem.read, filesystem.write, network, "
      .. "command.execute, delegate, mcp, tool (got " .. (type(r.kind) == "string" and ("'" .. r.kind .. "'")
      or tostring(r.kind)) .. ")"
  end
  local scope, err = one_line(r.scope, path .. ".scope", true)
  if err then return nil, err end
  local match
  match, err = one_line(r.match, path .. ".match", true)
  if err then return nil, err end
  local desc
  desc, err = one_line(r.description, path .. ".description", true)
  if err then return nil, err end
  if not scope and not match then return nil, path .. " needs a scope or a match" end
  if r.kind == "network" then
    if match and not match:match("^tcp://[^/%s]+:%d+$") then
      return nil, path .. ".match must be 'tcp://host:port' (got '" .. match .. "')"
    end
    if scope and not scope:match("^[^/%s]+:%d+$") then
      return nil, path .. ".scope must be 'host:port' (got '" .. scope .. "')"
    end
    scope = scope or match:sub(7)
    match = match or ("tcp://" .. scope)
  else
    scope = scope or match
    match = match or scope
  end
  return { kind = r.kind, scope = scope, match = match, description = desc }
end

-- check_request(req) -> normalized copy | nil, message (never raises: req comes from prepare).
function M.check_request(req)
  if type(req) ~= "table" then return nil, "invalid request: prepare must return a table" end
  for k in pairs(req) do
    if not request_fields[k] then
      return nil, "invalid request: unknown field '" .. tostring(k) .. "'"
    end
  end
  local out = {}
  local err
  out.summary, err = one_line(req.summary, "summary")
  if err then return nil, "invalid request: " .. err end
  out.command, err = one_line(req.command, "command", true)
  if err then return nil, "invalid request: " .. err end
  out.cwd, err = one_line(req.cwd, "cwd", true)
  if err then return nil, "invalid request: " .. err end
  local reqs = req.requirements
  local list = {}
  if reqs ~= nil then
    if type(reqs) ~= "table" then return nil, "invalid request: requirements must be a list" end
    local n = #reqs
    for k in pairs(reqs) do
      if math.type(k) ~= "integer" or k < 1 or k > n then
        return nil, "invalid request: requirements must be a list"
      end
    end
    if n > 256 then return nil, "invalid request: more than 256 requirements" end
    for i = 1, n do
      local r
      r, err = check_requirement(reqs[i], "requirements[" .. i .. "]")
      if not r then return nil, "invalid request: " .. err end
      list[i] = r
    end
  end
  out.requirements = list
  return out
end

-- ---- a call: prepare, then run with the arguments ----

local function default_summary(name, args)
  local enc = json.encode(args) or "{}"
  if enc == "[]" then enc = "{}" end
  local s = name .. " " .. enc
  if #s > 200 then
    local cut = 197
    while cut > 1 and (s:byte(cut + 1) or 0) & 0xC0 == 0x80 do cut = cut - 1 end
    s = s:sub(1, cut) .. "..."
  end
  return s
end
M._default_summary = default_summary

-- prepare_call(t, args, pctx) -> request (normalized), artifact | nil, message.
-- Raises only what prepare or needs_approval raised (the caller passes a
-- cancellation on). The message is the tool error's text after "error: ".
function M.prepare_call(t, args, pctx)
  local p = private[t]
  local req, artifact
  if p.prepare then
    local perr
    req, perr = p.prepare(args, pctx)
    if req == nil then return nil, "preparation failed: " .. tostring(perr) end
    artifact = perr
  else
    req = { summary = default_summary(p.name, args) }
  end
  local nreq, rerr = M.check_request(req)
  if not nreq then return nil, "preparation failed: " .. tostring(rerr) end
  local na = p.needs_approval
  if na and (na == true or na(args, pctx)) then
    local reqs = nreq.requirements
    reqs[#reqs + 1] = { kind = "tool", scope = p.name, match = p.name,
                        description = "approve each call of '" .. p.name .. "'" }
  end
  return nreq, artifact
end

local REQUEST_KEYS = { summary = true, requirements = true, command = true, cwd = true }

-- The first argument run receives: a copy of the validated arguments. A tool with
-- prepare also finds the request's fields there when the arguments lack them (the
-- shape run had before it received the arguments).
function M.run_args(t, args, req)
  local copy = deep_copy(args or {})
  if type(copy) ~= "table" then copy = {} end
  if private[t].prepare and getmetatable(copy) == nil then
    setmetatable(copy, { __index = function(_, k)
      if REQUEST_KEYS[k] then return req[k] end
    end })
  end
  return copy
end

-- ---- the frozen object ----

local Tool = {}

function Tool:check_args(args)
  local p = private[self]
  return schema_mod.validate(p.schema, args)
end

function Tool:check_request(req)
  return M.check_request(req)
end

function Tool:spec()
  local p = private[self]
  return { name = p.name, description = p.description, schema = deep_copy(p.schema) }
end

local tool_mt = {
  __index = function(t, k)
    local f = Tool[k]
    if f then return f end
    local p = private[t]
    if k == "schema" then return deep_copy(p.schema) end
    return p[k]
  end,
  __newindex = function(t, k)
    error("rig.tool: tool '" .. private[t].name .. "' is frozen (cannot set '" .. tostring(k)
      .. "')", 2)
  end,
  __tostring = function(t) return "rig.tool(" .. private[t].name .. ")" end,
  __metatable = "rig.tool",
}

-- ---- results ----

local RESULT_MT = { __metatable = "rig.tool.result" }

function M.result(t)
  if type(t) ~= "table" then error("rig.tool.result: expects a table { text, is_error, details }", 2) end
  for k in pairs(t) do
    if k ~= "text" and k ~= "is_error" and k ~= "details" and k ~= "media" then
      error("rig.tool.result: unknown field '" .. tostring(k) .. "'", 2)
    end
  end
  if type(t.text) ~= "string" then error("rig.tool.result: field 'text' must be a string", 2) end
  if t.is_error ~= nil and type(t.is_error) ~= "boolean" then
    error("rig.tool.result: field 'is_error' must be a boolean", 2)
  end
  if t.details ~= nil and type(t.details) ~= "table" then
    error("rig.tool.result: field 'details' must be a table", 2)
  end
  if t.media ~= nil and type(t.media) ~= "table" then
    error("rig.tool.result: field 'media' must be a list of image and document specs", 2)
  end
  return setmetatable({ text = t.text, is_error = t.is_error == true, details = t.details,
    media = t.media }, RESULT_MT)
end

function M.is_result(v)
  return type(v) == "table" and getmetatable(v) == "rig.tool.result"
end

function M.is_tool(v)
  return type(v) == "table" and getmetatable(v) == "rig.tool" and private[v] ~= nil
end

-- The fields a loop's revision hashes (name, description, schema, sequential).
function M._projection(t)
  local p = private[t]
  return { name = p.name, description = p.description, schema = p.schema,
           sequential = p.sequential }
end

-- For the runner's injected tools (rig.delegation): a reserved name is allowed.
function M._injected(def)
  local p = checked(2, check_tool, def, true)
  local t = setmetatable({}, tool_mt)
  private[t] = p
  return t
end

return setmetatable(M, {
  __call = function(_, def)
    local p = checked(2, check_tool, def)
    local t = setmetatable({}, tool_mt)
    private[t] = p
    return t
  end,
})
