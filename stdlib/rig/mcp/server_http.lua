-- rig.mcp.server_http: a rig.mcp.server over Streamable HTTP (MCP 2025-03-26 and
-- later), on rig.http.server. srv:serve_http{…} calls it.
--
--   local h = srv:serve_http{
--     listen = "127.0.0.1:0",       -- "host:port"; port 0 picks one
--     path = "/mcp",                -- the endpoint
--     auth = { token = "…" },       -- bearer token (≥ 16 bytes); required off loopback …
--     insecure_public_bind = false, -- … unless an authenticating proxy is in front
--     allowed_hosts = { "name" },   -- more names for Host and Origin (as luarig serve)
--     retry = 1000,                 -- ms: the SSE retry: a client waits before resuming
--     keep_events = 1000,           -- events a stream keeps for a resuming client
--     session_ttl = 3600,           -- s: a session idle this long (no request, no stream) ends
--     max_sessions = 1024,          -- sessions at once: an initialize beyond is refused (503)
--     max_body = 4 << 20,
--   } -> h | nil, message, code;  h.url (…/mcp), h.port, h:close()
--
-- The endpoint: POST a JSON-RPC message. An initialize request opens a session
-- (its id in Mcp-Session-Id; every later request must carry it: 400 without, 404 for an
-- ended one). A POST of requests answers with an event stream (text/event-stream): a
-- priming event (an id, the retry, no data), then the server's messages about that
-- request (progress, logs, its own requests — elicitation, sampling) and last the
-- response, after which the stream ends; notifications and responses get 202. Every
-- event has an id "STREAM-N"; a client that lost a stream (or whose stream the tool
-- ended, ctx.close_stream) GETs with Last-Event-ID and gets what followed, and the rest
-- as it comes. GET without Last-Event-ID is the session's own stream (messages tied to
-- no request; one at a time: 409). DELETE ends the session. The browser checks of
-- luarig serve apply first (docs/serve.md): Host must name this server (403), an Origin
-- must be its own (403), a POST must be application/json (415); then the token (401).
-- MCP-Protocol-Version, when sent, must be one luarig speaks (400).

local core = require "rig.core"
local json = require "rig.json"
local checks = require("rig.serve")._checks
local http_server = require "rig.http_server"

local M = {}

local SUPPORTED = {}
for _, v in ipairs(require("rig.mcp.client").VERSIONS) do SUPPORTED[v] = true end

local KNOWN = { listen = true, path = true, auth = true, insecure_public_bind = true,
                allowed_hosts = true, retry = true, keep_events = true, session_ttl = true,
                max_body = true, max_sessions = true }

local function bad(msg) error("rig.mcp.server: serve_http: " .. msg, 4) end

local function random_id()
  local f = io.open("/dev/urandom", "rb")
  local bytes = f and f:read(16) or (tostring(core.now()) .. tostring({}))
  if f then f:close() end
  return core.sha256_hex(bytes .. tostring(core.time())):sub(1, 32)
end

local function key_of(id)
  if math.type(id) == "float" then return math.tointeger(id) or id end
  return id
end

local JSON = { ["content-type"] = "application/json" }

local function rpc_refusal(status, code, message, extra)
  local h = { ["content-type"] = "application/json" }
  for k, v in pairs(extra or {}) do h[k] = v end
  return { status = status, headers = h, body = json.encode({ jsonrpc = "2.0", id = json.null,
    error = { code = code, message = message } }) }
end

-- ---- streams: numbered events kept for resumption, one writer at a time ----

local function new_stream(S, sid)
  local st = { id = sid, n = 0, base = 0, events = {}, cond = core.cond(), open = {},
               pending = 0, done = false, writer = nil, delivered = 0 }
  S.streams[sid] = st
  S.stream_order[#S.stream_order + 1] = sid
  -- keep the last 64 streams of a session for resumption
  while #S.stream_order > 64 do
    local old = table.remove(S.stream_order, 1)
    if S.streams[old] ~= S.get_stream then S.streams[old] = nil end
  end
  return st
end

local function push(S, st, text)
  st.n = st.n + 1
  st.events[st.n] = text
  local drop = st.n - S.keep
  if drop > st.base then
    for i = st.base + 1, drop do st.events[i] = nil end
    st.base = drop
  end
  st.cond:signal()
end

-- Writes the stream's events from position pos on res until it is done (or a newer
-- writer took it, or the tool ended it, or the client left).
local function pump(S, st, res, pos, heartbeat)
  local me = {}
  st.writer = me
  st.cut = false
  local ok, err = pcall(function()
    while st.writer == me do
      while pos < st.n and st.writer == me do
        pos = pos + 1
        local data = st.events[pos]
        if data then
          if not res:event{ id = st.id .. "-" .. pos, event = "message", data = data } then return end
          if pos > st.delivered then st.delivered = pos end
        end
      end
      if st.writer ~= me or st.cut then return end
      if st.done and pos >= st.n then return end
      local got = st.cond:wait(heartbeat)
      if not got and st.writer == me and not res:comment("ping") then return end
    end
  end)
  if st.writer == me then st.writer = nil end
  S.touched = core.now()
  if not ok and not tostring(err):find("cancel") then error(err, 0) end
end

-- ---- the server ----

function M.serve(server, o)
  for k in pairs(o) do
    if not KNOWN[k] then bad("unknown option '" .. tostring(k) .. "'") end
  end
  local listen = o.listen or "127.0.0.1:0"
  local host = checks.listen_host(listen)
  if not host then bad("bad listen address '" .. tostring(listen) .. "'") end
  local path = o.path or "/mcp"
  if type(path) ~= "string" or not path:match("^/[%w%-%._~/]*$") then bad("option 'path' must be a path") end
  local token
  if o.auth ~= nil then
    if type(o.auth) ~= "table" or type(o.auth.token) ~= "string" or #o.auth.token < 16 then
      bad("option 'auth' must be { token = a string of at least 16 bytes }")
    end
    token = o.auth.token
  end
  if not checks.is_loopback(host) and not token and not o.insecure_public_bind then
    return nil, "refusing to listen on '" .. listen .. "' without authentication: it is not "
      .. "a loopback address (configure a token, or acknowledge an authenticating proxy in "
      .. "front with insecure_public_bind)", "refused"
  end
  local extra = {}
  for i, n in ipairs(o.allowed_hosts or {}) do
    local name, p = checks.authority(n)
    if not name or p then bad("option 'allowed_hosts': entry " .. i .. " must be a host name without a port") end
    extra[#extra + 1] = name
  end
  local retry = o.retry or 1000
  local keep = o.keep_events or 1000
  local ttl = o.session_ttl or 3600
  local max_sessions = o.max_sessions or 1024
  if math.type(max_sessions) ~= "integer" or max_sessions < 1 then
    bad("option 'max_sessions' must be a positive integer")
  end
  local sessions, nsessions = {}, 0
  local h = { sessions = sessions }
  local names = checks.host_names(host, extra)
  local bound_port

  local function refuse(status, code, message, hdrs)
    return rpc_refusal(status, code, message, hdrs)
  end

  local function before(req)
    local hname, hport = checks.authority(req.headers.host)
    if not checks.host_ok(names, bound_port, hname, hport) then
      return refuse(403, -32000, "Forbidden: the Host header does not name this server")
    end
    local origin = req.headers.origin
    if origin ~= nil and not checks.origin_ok(names, bound_port, origin, hname, hport) then
      return refuse(403, -32000, "Forbidden: requests from another origin are refused")
    end
    if token then
      local auth = req.headers.authorization or ""
      local given = auth:match("^[Bb]earer%s+(%S+)%s*$")
      if not given or not checks.token_equal(given, token) then
        return refuse(401, -32001, "Unauthorized: a bearer token is required",
                      { ["www-authenticate"] = 'Bearer realm="luarig"' })
      end
    end
    if req.method == "POST" and checks.media_type(req.headers["content-type"]) ~= "application/json" then
      return refuse(415, -32000, "Unsupported Media Type: a POST must be application/json")
    end
    local v = req.headers["mcp-protocol-version"]
    if v ~= nil and not SUPPORTED[v] then
      return refuse(400, -32000, "Bad Request: unsupported MCP-Protocol-Version '"
        .. tostring(v):sub(1, 32):gsub("[^%w%-]", "?") .. "'")
    end
  end

  local function session_of(req)
    local sid = req.headers["mcp-session-id"]
    if sid == nil then
      return nil, refuse(400, -32000, "Bad Request: Mcp-Session-Id header is required")
    end
    local S = sessions[sid]
    if not S then return nil, refuse(404, -32001, "Session not found") end
    S.touched = core.now()
    return S
  end

  local function open_session()
    local sid = random_id()
    local S = { id = sid, streams = {}, stream_order = {}, req_stream = {}, keep = keep,
                nstreams = 0, touched = core.now() }
    S.get_stream = new_stream(S, "g")
    S.conn = server:connect(function(msg, opts)
      local text, err = json.encode(msg)
      if not text then return nil, "cannot encode the message: " .. tostring(err), "encode" end
      local related = opts and opts.related
      local st = related ~= nil and S.req_stream[key_of(related)] or nil
      if not st or st.done then st = S.get_stream end
      push(S, st, text)
      local is_response = msg.method == nil and msg.id ~= nil
      if is_response and st.open[key_of(msg.id)] then
        st.open[key_of(msg.id)] = nil
        st.pending = st.pending - 1
        S.req_stream[key_of(msg.id)] = nil
        if st.pending <= 0 then
          st.done = true
          st.cond:signal()
        end
      end
      return true
    end, sid)
    S.conn.close_stream = function(request_id)
      local st = S.req_stream[key_of(request_id)]
      if st then
        st.cut = true
        st.writer = nil
        st.cond:signal()
      end
    end
    sessions[sid] = S
    nsessions = nsessions + 1
    return S
  end

  local function end_session(S, why)
    if sessions[S.id] ~= S then return end
    sessions[S.id] = nil
    nsessions = nsessions - 1
    for _, st in pairs(S.streams) do
      st.done = true
      st.writer = nil
      st.cond:signal()
    end
    S.conn:close(why)
  end

  local SSE = function(sid)
    return { ["content-type"] = "text/event-stream", ["cache-control"] = "no-cache",
             ["mcp-session-id"] = sid }
  end

  local function post(req, res)
    local msg = json.decode(req.body)
    if type(msg) ~= "table" then
      return refuse(400, -32700, "Parse error: the body is not a JSON-RPC message")
    end
    if json.is_array(msg) then
      return refuse(400, -32600, "Invalid Request: batches are not supported (MCP 2025-06-18)")
    end
    local S
    if msg.method == "initialize" and msg.id ~= nil then
      if req.headers["mcp-session-id"] ~= nil then
        return refuse(400, -32600, "Invalid Request: the session is already initialized")
      end
      if nsessions >= max_sessions then
        return refuse(503, -32000, "Service Unavailable: " .. max_sessions .. " sessions are open "
          .. "(end one with DELETE, or wait for idle ones to expire)", { ["retry-after"] = "5" })
      end
      S = open_session()
    else
      local r
      S, r = session_of(req)
      if not S then return r end
    end
    local is_request = type(msg.method) == "string" and msg.id ~= nil and msg.id ~= json.null
    if not is_request then
      S.conn:receive(req.body)
      return { status = 202, headers = { ["mcp-session-id"] = S.id }, body = "" }
    end
    S.nstreams = S.nstreams + 1
    local st = new_stream(S, tostring(S.nstreams))
    st.open[key_of(msg.id)] = true
    st.pending = 1
    S.req_stream[key_of(msg.id)] = st
    if not res:start(200, SSE(S.id)) then return end
    -- the priming event: an id to resume from, and how long to wait first
    if not res:event{ id = st.id .. "-0", retry = retry, data = "" } then
      S.conn:receive(req.body)
      return
    end
    S.conn:receive(req.body)
    pump(S, st, res, 0, 15)
  end

  local function get(req, res)
    local S, r = session_of(req)
    if not S then return r end
    local accept = req.headers.accept or ""
    if not accept:find("text/event-stream", 1, true) then
      return refuse(406, -32000, "Not Acceptable: the client must accept text/event-stream")
    end
    local last = req.headers["last-event-id"]
    local st, pos
    if last then
      local sid, n = last:match("^([%w]+)%-(%d+)$")
      st = sid and S.streams[sid]
      if not st then return refuse(400, -32000, "Bad Request: no stream to resume at '" ..
        last:sub(1, 40):gsub("[^%w%-]", "?") .. "'") end
      pos = math.tointeger(tonumber(n))
      if pos > st.n then return refuse(400, -32000, "Bad Request: event id beyond the stream") end
      if pos < st.base then pos = st.base end -- what was dropped is gone
    else
      st = S.get_stream
      if st.writer then
        return refuse(409, -32000, "Conflict: the session's stream is already open")
      end
      pos = st.delivered
    end
    if not res:start(200, SSE(S.id)) then return end
    if st == S.get_stream and not last then
      if not res:event{ id = "g-" .. pos, retry = retry, data = "" } then return end
    end
    pump(S, st, res, pos, 15)
  end

  local function delete(req)
    local S, r = session_of(req)
    if not S then return r end
    end_session(S, "the client ended the session")
    return { status = 200, headers = JSON, body = "" }
  end

  local routes = {
    ["POST " .. path] = post,
    ["GET " .. path] = get,
    ["DELETE " .. path] = delete,
  }
  local srv, msg, code = http_server{ listen = listen, routes = routes, before = before,
                                      max_body = o.max_body or (4 << 20) }
  if not srv then return nil, msg, code end
  bound_port = srv.port
  h.port = srv.port
  h.url = srv.url:gsub("/$", "") .. path
  local sweeper = core.spawn_background(function()
    while true do
      core.sleep(math.min(60, ttl))
      local now = core.now()
      for _, S in pairs(sessions) do
        local busy = false
        for _, st in pairs(S.streams) do if st.writer then busy = true end end
        if not busy and now - S.touched > ttl then end_session(S, "the session expired") end
      end
    end
  end)
  function h.close()
    if h.closed then return end
    h.closed = true
    pcall(sweeper.cancel, sweeper)
    for _, S in pairs(sessions) do end_session(S, "the server closed") end
    srv:close()
  end
  return setmetatable(h, { __index = { close = h.close } })
end

return M
