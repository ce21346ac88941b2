-- rig.mcp.jsonrpc: one JSON-RPC 2.0 peer over any transport — the protocol
-- core rig.mcp's client uses, and the server side builds on.
--
--   local peer = jsonrpc.peer{
--     name = "server 'fs'",          -- for messages ("mcp: server 'fs': tools/call: …")
--     send = function(msg, opts) end,-- hands one message (a table) to the transport:
--                                    -- true | nil, message, code. opts.related: the id of
--                                    -- the request a message belongs to (a response's own
--                                    -- id; Streamable HTTP answers on that request's stream)
--     on_request = function(method, params, ctx) end,
--                                    -- an incoming request, in a task of its own:
--                                    -- return result | nil, { code, message, data }
--                                    -- (a raised error answers -32603). ctx = { id,
--                                    -- related (the transport's hint: the id of our request
--                                    -- whose stream carried it), progress = fn(progress,
--                                    -- total, message) when the peer asked for progress,
--                                    -- cancelled = false (set on notifications/cancelled,
--                                    -- whose arrival also cancels the task) }
--     on_notification = function(method, params, via) end,
--     on_protocol_error = function(message) end, -- malformed input from the other side
--     timeout = 60,                  -- the default seconds a request waits for its answer
--   }
--   peer:request(method, params, { timeout =, on_progress = fn(p, total, msg),
--                reset_on_progress = true, max_timeout =, related =, track = {} })
--     (track.id is set to the request's id before it is sent)
--     -> result | nil, message, code, error
--     code: "rpc" (the other side answered with an error; error = { code, message, data }),
--     "timeout" (notifications/cancelled is sent), "closed" (the transport ended; message
--     says why), "too_large" (the answer exceeded the transport's cap), "cancelled" (the
--     waiting task was cancelled: notifications/cancelled is sent and the cancellation
--     raised on), or the transport's code when the send failed.
--   peer:notify(method, params [, opts]) -> true | nil, message, code
--   peer:receive(text [, via]) -- one message as the transport read it (JSON text: an
--     object or, from an older peer, a batch array); via = { related = id } (optional)
--   peer:receive_oversized(total, head, tail [, cap]) -- a message the transport's cap cut:
--     the request it answered (its id found at either end) fails with "too_large"
--   peer:close(message [, code]) -- fails every pending request (code "closed"), cancels
--     the incoming handlers; later requests fail at once
--   peer.stats = { sent, received, malformed, unmatched, oversized }
--
-- Rules kept: ids of our requests are integers from 1; an incoming response whose
-- id matches nothing is dropped (counted); a message that is not JSON-RPC 2.0 is
-- reported through on_protocol_error and, when it carried an id and a method, answered
-- -32600; a request for a method on_request does not know answers -32601 (on_request
-- returns nil, { code = -32601 } or raises M.method_not_found(method)). Batches (arrays,
-- JSON-RPC 2.0 and MCP before 2025-06-18) are taken apart and the answers to their
-- requests go back as one array. Nothing here sends a batch.

local core = require "rig.core"
local json = require "rig.json"

local M = {}

M.PARSE_ERROR = -32700
M.INVALID_REQUEST = -32600
M.METHOD_NOT_FOUND = -32601
M.INVALID_PARAMS = -32602
M.INTERNAL_ERROR = -32603

local null = json.null
-- LUARIG_MCP_TRACE=1: every message in and out on stderr (debugging a server)
local TRACE = os.getenv("LUARIG_MCP_TRACE") == "1"
local function trace(dir, name, text)
  io.stderr:write("mcp trace ", name, " ", dir, " ", text, "\n")
end

local Peer = {}
Peer.__index = Peer

local function is_cancel(e)
  return e == "cancelled" or (type(e) == "string" and e:find("^cancelled") ~= nil)
end
M.is_cancel = is_cancel

local function valid_id(id)
  local t = math.type(id)
  if t == "integer" then return true end
  if t == "float" then return id == math.floor(id) end
  return type(id) == "string"
end

-- Ids as table keys: 7 and 7.0 are the same request.
local function key_of(id)
  if math.type(id) == "float" then return math.tointeger(id) or id end
  return id
end

function M.error(code, message, data)
  return { code = code, message = message, data = data }
end

function M.method_not_found(method)
  return { code = M.METHOD_NOT_FOUND, message = "method not found: " .. tostring(method) }
end

function M.peer(opts)
  if type(opts) ~= "table" then error("rig.mcp.jsonrpc.peer: expects a table of fields", 2) end
  if type(opts.send) ~= "function" then
    error("rig.mcp.jsonrpc.peer: field 'send' must be a function", 2)
  end
  local self = setmetatable({
    name = opts.name or "peer",
    send_fn = opts.send,
    on_request = opts.on_request,
    on_notification = opts.on_notification,
    on_protocol_error = opts.on_protocol_error,
    timeout = opts.timeout or 60,
    next_id = 0,
    pending = {},   -- key -> { cond, response, failure, on_progress, method }
    incoming = {},  -- key -> { task, ctx }
    closed = nil,   -- { message, code } once closed
    stats = { sent = 0, received = 0, malformed = 0, unmatched = 0, oversized = 0 },
  }, Peer)
  return self
end

local function protocol_error(self, msg)
  self.stats.malformed = self.stats.malformed + 1
  if self.on_protocol_error then pcall(self.on_protocol_error, msg) end
end

local function send(self, msg, opts)
  if self.closed then return nil, self.closed.message, self.closed.code end
  msg.jsonrpc = "2.0"
  self.stats.sent = self.stats.sent + 1
  if TRACE then trace(">", self.name, json.encode(msg) or "?") end
  return self.send_fn(msg, opts)
end

function Peer:notify(method, params, opts)
  return send(self, { method = method, params = params }, opts)
end

-- The cancellation notice goes out from a task of its own: the task that waited is
-- cancelled, and cancellation is latched on it (any wait of a send would raise).
local function send_cancel(self, id, reason)
  if self.closed then return end
  core.spawn_detached(function()
    self:notify("notifications/cancelled", { requestId = id, reason = reason })
  end)
end

function Peer:request(method, params, opts)
  opts = opts or {}
  if self.closed then
    return nil, self.name .. ": " .. method .. ": " .. self.closed.message, self.closed.code
  end
  self.next_id = self.next_id + 1
  local id = self.next_id
  local p = { cond = core.cond(), method = method, on_progress = opts.on_progress }
  if opts.on_progress then
    params = params or {}
    local meta = params._meta or {}
    meta.progressToken = id
    params._meta = meta
  end
  self.pending[id] = p
  if opts.track then opts.track.id = id end
  local sok, ok, msg, code = pcall(send, self, { id = id, method = method, params = params },
                                   { related = opts.related })
  if not sok then
    self.pending[id] = nil
    error(ok, 0)
  end
  if not ok then
    self.pending[id] = nil
    return nil, self.name .. ": " .. method .. ": " .. tostring(msg), code or "closed"
  end
  local timeout = opts.timeout or self.timeout
  local started = core.now()
  local deadline = started + timeout
  local hard = opts.max_timeout and (started + opts.max_timeout) or nil
  while not p.response and not p.failure do
    local left = deadline - core.now()
    if hard and hard - core.now() < left then left = hard - core.now() end
    if left <= 0 then break end
    local wok, got = pcall(p.cond.wait, p.cond, left)
    if not wok then
      self.pending[id] = nil
      if is_cancel(got) then send_cancel(self, id, "cancelled by the client") end
      error(got, 0)
    end
    if p.progressed and opts.reset_on_progress ~= false then
      p.progressed = false
      deadline = core.now() + timeout
    end
  end
  self.pending[id] = nil
  if p.failure then return nil, p.failure.message, p.failure.code end
  if not p.response then
    send_cancel(self, id, "timed out after " .. timeout .. " s")
    return nil, self.name .. ": " .. method .. ": no answer within " .. timeout .. " s", "timeout"
  end
  local r = p.response
  if r.error ~= nil then
    local e = r.error
    if type(e) ~= "table" then e = { code = M.INTERNAL_ERROR, message = tostring(e) } end
    local m = type(e.message) == "string" and e.message or "error"
    return nil, self.name .. ": " .. method .. ": " .. m .. " (error " .. tostring(e.code) .. ")",
      "rpc", { code = e.code, message = m, data = e.data }
  end
  return r.result
end

-- ---- incoming ----

local function respond(self, id, result, err, out)
  local msg
  if err then
    msg = { jsonrpc = "2.0", id = id, error = { code = err.code or M.INTERNAL_ERROR,
      message = tostring(err.message or "error"), data = err.data } }
  else
    if result == nil then result = {} end
    msg = { jsonrpc = "2.0", id = id, result = result }
  end
  if out then out[#out + 1] = msg return end
  if self.closed then return end
  self.stats.sent = self.stats.sent + 1
  if TRACE then trace(">", self.name, json.encode(msg) or "?") end
  self.send_fn(msg, { related = id })
end

local function run_request(self, msg, via, out)
  local id = msg.id
  local key = key_of(id)
  if not self.on_request then
    respond(self, id, nil, M.method_not_found(msg.method), out)
    return
  end
  local ctx = { id = id, related = via and via.related, cancelled = false }
  local params = msg.params
  local meta = type(params) == "table" and params._meta
  local token = type(meta) == "table" and meta.progressToken
  if token ~= nil and valid_id(token) then
    ctx.progress = function(progress, total, message)
      return self:notify("notifications/progress", { progressToken = token, progress = progress,
        total = total, message = message }, { related = id })
    end
  end
  local function body()
    local ok, result, err = pcall(self.on_request, msg.method, params, ctx)
    self.incoming[key] = nil
    if not ok then
      if is_cancel(result) then return end -- cancelled: no answer (the spec's rule)
      respond(self, id, nil, { code = M.INTERNAL_ERROR, message = tostring(result) }, nil)
      return
    end
    if ctx.cancelled then return end
    if result == nil then
      respond(self, id, nil, err or { code = M.INTERNAL_ERROR, message = "no result" }, nil)
    else
      respond(self, id, result, nil, nil)
    end
  end
  if out then
    -- inside a batch: answered in order, in this task (a batch comes from older peers)
    local ok, result, err = pcall(self.on_request, msg.method, params, ctx)
    if not ok then
      respond(self, id, nil, { code = M.INTERNAL_ERROR, message = tostring(result) }, out)
    elseif result == nil then
      respond(self, id, nil, err or { code = M.INTERNAL_ERROR, message = "no result" }, out)
    else
      respond(self, id, result, nil, out)
    end
    return
  end
  self.incoming[key] = { ctx = ctx }
  self.incoming[key].task = core.spawn_detached(body)
end

local function handle_notification(self, msg, via)
  local method, params = msg.method, msg.params
  if method == "notifications/cancelled" then
    local rid = type(params) == "table" and params.requestId
    local inc = rid ~= nil and self.incoming[key_of(rid)]
    if inc then
      inc.ctx.cancelled = true
      self.incoming[key_of(rid)] = nil
      if inc.task then inc.task:cancel() end
    end
  elseif method == "notifications/progress" then
    local tok = type(params) == "table" and params.progressToken
    local p = tok ~= nil and self.pending[key_of(tok)]
    if p and p.on_progress then
      p.progressed = true
      pcall(p.on_progress, params.progress, params.total, params.message)
      p.cond:signal()
    elseif p then
      p.progressed = true
    end
  end
  if self.on_notification then
    local ok, err = pcall(self.on_notification, method, params, via)
    if not ok and is_cancel(err) then error(err, 0) end
  end
end

local function handle_response(self, msg)
  local p = self.pending[key_of(msg.id)]
  if not p then
    self.stats.unmatched = self.stats.unmatched + 1
    return
  end
  p.response = msg
  p.cond:signal()
end

-- One decoded message (a table). out: a batch's answers are gathered there.
local function dispatch(self, msg, via, out)
  if type(msg) ~= "table" or json.is_array(msg) then
    protocol_error(self, self.name .. ": a message is not a JSON object")
    return
  end
  if msg.jsonrpc ~= "2.0" then
    protocol_error(self, self.name .. ": a message lacks \"jsonrpc\": \"2.0\"")
    if msg.method ~= nil and msg.id ~= nil and valid_id(msg.id) then
      respond(self, msg.id, nil, { code = M.INVALID_REQUEST,
        message = "invalid request: \"jsonrpc\" must be \"2.0\"" }, out)
    end
    return
  end
  local id, method = msg.id, msg.method
  if method ~= nil then
    if type(method) ~= "string" or method == "" then
      protocol_error(self, self.name .. ": a message has a method that is not a string")
      if id ~= nil and valid_id(id) then
        respond(self, id, nil, { code = M.INVALID_REQUEST,
          message = "invalid request: \"method\" must be a string" }, out)
      end
      return
    end
    local params = msg.params
    if params ~= nil and type(params) ~= "table" then
      protocol_error(self, self.name .. ": '" .. method .. "' has params that are neither an "
        .. "object nor an array")
      if id ~= nil and valid_id(id) then
        respond(self, id, nil, { code = M.INVALID_REQUEST,
          message = "invalid request: \"params\" must be an object or an array" }, out)
      end
      return
    end
    if id == nil then
      handle_notification(self, msg, via)
    elseif not valid_id(id) then
      protocol_error(self, self.name .. ": request '" .. method .. "' has an invalid id")
    else
      run_request(self, msg, via, out)
    end
    return
  end
  if id == nil or id == null then
    -- an error about something we sent that the other side could not read
    if msg.error ~= nil then
      local e = type(msg.error) == "table" and msg.error.message or tostring(msg.error)
      protocol_error(self, self.name .. ": the other side reports: " .. tostring(e))
    else
      protocol_error(self, self.name .. ": a message has neither a method nor an id")
    end
    return
  end
  if not valid_id(id) then
    protocol_error(self, self.name .. ": a response has an invalid id")
    return
  end
  if (msg.result == nil) == (msg.error == nil) then
    protocol_error(self, self.name .. ": a response must hold exactly one of result and error")
    local p = self.pending[key_of(id)]
    if p then
      p.failure = { message = self.name .. ": " .. p.method .. ": a malformed response "
        .. "(neither or both of result and error)", code = "protocol" }
      self.pending[key_of(id)] = nil
      p.cond:signal()
    end
    return
  end
  handle_response(self, msg)
end

function Peer:receive(text, via)
  self.stats.received = self.stats.received + 1
  if TRACE then trace("<", self.name, text) end
  local msg, err = json.decode(text)
  if msg == nil then
    protocol_error(self, self.name .. ": a message is not JSON (" .. tostring(err) .. ")")
    return
  end
  if type(msg) == "table" and json.is_array(msg) then
    if #msg == 0 then
      protocol_error(self, self.name .. ": an empty batch")
      return
    end
    local out = {}
    for i = 1, #msg do dispatch(self, msg[i], via, out) end
    if #out > 0 and not self.closed then
      self.stats.sent = self.stats.sent + 1
      self.send_fn(json.array(out), {})
    end
    return
  end
  dispatch(self, msg, via, nil)
end

-- The id of a response or request found in a message's first or last bytes.
local function find_id(head, tail)
  local s = tail and tail:match('"id"%s*:%s*(%-?%d+)%s*}%s*$') or
            tail and tail:match('"id"%s*:%s*"([^"\\]*)"%s*}%s*$')
  if s then return math.tointeger(tonumber(s)) or s end
  s = head and (head:match('^%s*{%s*"id"%s*:%s*(%-?%d+)') or
                head:match('^%s*{[^{}]-"jsonrpc"%s*:%s*"2%.0"%s*,%s*"id"%s*:%s*(%-?%d+)'))
  if s then return math.tointeger(tonumber(s)) end
  return nil
end
M._find_id = find_id

function Peer:receive_oversized(total, head, tail, cap)
  self.stats.oversized = self.stats.oversized + 1
  local id = find_id(head, tail)
  local p = id ~= nil and self.pending[key_of(id)]
  local what = "a message of " .. total .. " bytes" .. (cap and (" exceeds the cap of " .. cap
    .. " bytes") or " is too large")
  if p then
    self.pending[key_of(id)] = nil
    p.failure = { message = self.name .. ": " .. p.method .. ": the answer is too large ("
      .. what .. ")", code = "too_large" }
    p.cond:signal()
  else
    protocol_error(self, self.name .. ": " .. what .. " and was dropped")
  end
end

function Peer:close(message, code)
  if self.closed then return end
  self.closed = { message = message or "closed", code = code or "closed" }
  for key, p in pairs(self.pending) do
    self.pending[key] = nil
    p.failure = { message = self.name .. ": " .. p.method .. ": " .. self.closed.message,
                  code = self.closed.code }
    p.cond:signal()
  end
  for key, inc in pairs(self.incoming) do
    self.incoming[key] = nil
    inc.ctx.cancelled = true
    if inc.task then inc.task:cancel() end
  end
end

function Peer:pending_count()
  local n = 0
  for _ in pairs(self.pending) do n = n + 1 end
  return n
end

return M
