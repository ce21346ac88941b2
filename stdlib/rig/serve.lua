-- rig.serve: a rig's sessions over HTTP — JSON routes and server-sent
-- events (docs/serve.md, docs/design/serve.md).
--
--   local srv = rig.serve{
--     rig = r,                          -- a rig (rig.define{…})
--     listen = "127.0.0.1:8080",        -- "host:port", "[v6]:port"; port 0 picks one
--     auth = { token = "…" } | nil,     -- bearer token; required off loopback …
--     insecure_public_bind = false,     -- … unless an authenticating proxy is in front
--     allowed_hosts = { "name", … },    -- more names the server answers to (Host and
--                                       -- Origin), besides its address and localhost
--     max_body = 1 << 20,               -- request body cap: 413 above it
--     max_headers = 64 << 10,           -- request line + headers cap
--     max_connections = 1024,           -- requests in hand at once (SSE streams count): 503 above
--     heartbeat = 20,                   -- seconds between SSE ": ping" comments
--     sse_buffer = 1024,                -- events a stream holds for a client behind; then
--                                       -- it catches up from the journal
--     drain_timeout = 10,               -- graceful shutdown: how long requests may finish
--   }
--   srv.url, srv.port; srv:run() waits for SIGINT/SIGTERM, then srv:shutdown():
--   new requests get 503, SSE streams end, requests in flight finish, the
--   live sessions shut down, the listener closes. srv:close() drops at once.
--
-- Every request first passes the browser checks (docs/serve.md): its Host must
-- name this server (the bound address, localhost or an allowed_hosts name, with
-- the bound port: 403 host_not_allowed), an Origin must be this server's own
-- (403 origin_not_allowed), and a POST must be Content-Type: application/json
-- (415 unsupported_media_type). A token changes none of this.
--
-- Routes (JSON in and out; errors {"error":{"code","message","retryable"}}):
--   GET  /v1/capabilities
--   POST /v1/sessions                      {blocks?|text?} -> 201 {session_id, command_id?}
--   GET  /v1/sessions?skip&limit           -> {sessions, skip, limit, next_skip, done}
--   POST /v1/sessions/{id}/restore         -> {session_id}
--   POST /v1/sessions/{id}/input           {blocks}|{text} -> {command_id}
--   POST /v1/sessions/{id}/interrupt       -> {interrupted}
--   POST /v1/sessions/{id}/resume          {loop?} -> 202 {resumed: [loop ids]} (docs/resume.md)
--   POST /v1/sessions/{id}/gates/{gate}    {action} -> 202 {}
--   POST /v1/sessions/{id}/inputs/{input}  {action, content?} -> 202 {}: an MCP server's
--                                          question (UserInputRequested; docs/mcp.md)
--   POST /v1/media                         {type, base64, media_type?, name?} -> 201 {blob, media_type, size}
--   GET  /v1/sessions/{id}/status
--   GET  /v1/sessions/{id}/journal?from&limit -> {events[{seq, kind, event}], next_seq, done}
--   GET  /v1/sessions/{id}/events          SSE; Last-Event-ID or ?from=SEQ resumes after SEQ
--   GET  /v1/flows…                        the flows given (flows = { f, … }): runs, their
--                                          status, journal, events, interrupts and forks
--                                          (stdlib/rig/flow/serve.lua, docs/flow.md)
--   GET  /metrics                          Prometheus text format 0.0.4 (counted from the
--                                          enduring events of the sessions this server holds)
--   GET  /, /console.js, /console.css      the web console (no token needed to load it)
local core = require "rig.core"
local json = require "rig.json"
local server = require "rig.http_server"
local parse = require "rig.serve_req"

local M = {}

M.PROTOCOL, M.VERSION = "luarig.serve", 1
local FEATURES = { "journal", "live_sse", "ephemeral_sse", "gate_response", "sse_resume",
                   "idempotency", "resume", "media" }

-- The stable error codes: status and whether a retry may succeed (docs/serve.md).
-- The lower layers answer some themselves, in the same shape: rig.http.server
-- (not_found for no route, method_not_allowed), the host server
-- (malformed_request, body_too_large over max_body, expectation_failed,
-- headers_too_large) and lua/server.c (unavailable).
local ERRORS = {
  malformed_request = { 400, false },
  invalid_json = { 400, false },
  invalid_request = { 400, false },
  unauthorized = { 401, false },
  host_not_allowed = { 403, false },
  origin_not_allowed = { 403, false },
  not_found = { 404, false },
  method_not_allowed = { 405, false },
  session_not_found = { 404, false },
  gate_not_open = { 409, false },
  input_not_open = { 409, false },
  session_not_live = { 409, false },
  session_held = { 409, true },
  session_faulted = { 409, false },
  drift = { 409, false },
  nothing_to_resume = { 409, false },
  session_busy = { 409, true },
  idempotency_conflict = { 409, false },
  flow_not_found = { 404, false },
  run_not_found = { 404, false },
  interrupt_not_open = { 409, false },
  run_held = { 409, true },
  body_too_large = { 413, false },
  unsupported_media_type = { 415, false },
  expectation_failed = { 417, false },
  headers_too_large = { 431, false },
  internal = { 500, false },
  over_capacity = { 503, true },
  shutting_down = { 503, true },
  storage = { 503, true },
  unavailable = { 503, true },
}
M.ERRORS = ERRORS

local KNOWN = { rig = true, listen = true, auth = true, insecure_public_bind = true,
                max_body = true, max_headers = true, max_connections = true, heartbeat = true,
                drain_timeout = true, sse_buffer = true, allowed_hosts = true, flows = true }

local IDEM_TTL, IDEM_MAX = 24 * 3600, 10000
local METRICS_BUFFER = 4096
-- TurnFailed codes the runner makes itself; any other code came from the model
local RUNNER_CODES = { limit = true, invalid_output = true, internal = true,
                       workspace_faulted = true, compaction_failed = true }
local JSON_HEADERS = { ["content-type"] = "application/json", ["cache-control"] = "no-store" }

local function fail(fmt, ...)
  error("rig.serve: " .. string.format(fmt, ...), 3)
end

local function log(fmt, ...)
  io.stderr:write("luarig: serve: " .. string.format(fmt, ...) .. "\n")
  io.stderr:flush()
end

local function err(code, message)
  local e = ERRORS[code]
  return { status = e[1], headers = JSON_HEADERS,
           json = { error = { code = code, message = message, retryable = e[2] } } }
end

-- A name from the request, fit to quote in a message: printable ASCII, at most 64 bytes.
local function shown(s)
  return (tostring(s):sub(1, 64):gsub("[^\32-\126]", "?"))
end

local function ok(status, value)
  return { status = status, headers = JSON_HEADERS, json = value }
end

-- "127.0.0.1", "127.x.y.z", "::1", "localhost": nothing else is loopback.
local function is_loopback(host)
  if host == "localhost" or host == "::1" then return true end
  local a, b, c, d = host:match("^(%d+)%.(%d+)%.(%d+)%.(%d+)$")
  return a == "127" and tonumber(b) < 256 and tonumber(c) < 256 and tonumber(d) < 256
end

local function listen_host(s)
  return s:match("^%[([^%]]+)%]:%d+$") or s:match("^([^:%[%]]+):%d+$")
end

-- Equal-length comparison of two SHA-256 digests: the time does not depend
-- on where the token differs (nor, through the hash, on its length).
local function token_equal(a, b)
  local x, y = core.sha256_hex(a), core.sha256_hex(b)
  local diff = 0
  for i = 1, #x do diff = diff | (x:byte(i) ~ y:byte(i)) end
  return diff == 0
end

-- A session id as the journal takes it (storage/journal.c lr_journal_id_check):
-- a lower-case hyphenated uuid. Anything else names no session (404), and
-- never reaches rig.core, which raises on a malformed id.
local H4 = string.rep("[0-9a-f]", 4)
local UUID = "^" .. H4 .. H4 .. "%-" .. H4 .. "%-" .. H4 .. "%-" .. H4 .. "%-" .. H4 .. H4 .. H4 .. "$"
local function valid_id(s)
  return type(s) == "string" and #s == 36 and s:find(UUID) ~= nil
end

-- ---- the browser checks (docs/serve.md "Browsers") ----

-- "name", "name:port", "[v6]", "[v6]:port" -> lower-case name (v6 in brackets), port | nil
local function authority(s)
  if type(s) ~= "string" then return nil end
  local name, rest
  if s:sub(1, 1) == "[" then
    name, rest = s:match("^(%[[%x:%.]+%])(.*)$")
  else
    name, rest = s:match("^([%w%-%.]+)(.*)$")
  end
  if not name then return nil end
  if rest == "" or rest == ":" then return name:lower(), nil end
  local port = rest:match("^:([1-9]%d?%d?%d?%d?)$") -- no leading zeros, no port 0
  port = tonumber(port)
  if not port or port > 65535 then return nil end
  return name:lower(), port
end

local function is_ip_literal(name)
  return name:find("^%[[%x:%.]+%]$") ~= nil or name:find("^%d+%.%d+%.%d+%.%d+$") ~= nil
end

local WILDCARD = { ["0.0.0.0"] = true, ["[::]"] = true, ["[0:0:0:0:0:0:0:0]"] = true }

-- The names this server answers to: bound = names with the bound port,
-- named = the allowed_hosts names (also without a port: a proxy in front).
local function host_names(bind_host, extra)
  local names = { bound = { localhost = true }, named = {}, wildcard = false }
  local b = bind_host:find(":", 1, true) and "[" .. bind_host:lower() .. "]" or bind_host:lower()
  if WILDCARD[b] then
    names.wildcard = true
  else
    names.bound[b] = true
  end
  if b == "localhost" then
    names.bound["127.0.0.1"] = true
    names.bound["[::1]"] = true
  end
  for _, n in ipairs(extra) do
    names.bound[n] = true
    names.named[n] = true
  end
  return names
end

-- Is name:port (port nil when absent) this server, as a Host may say?
local function host_ok(names, port, name, p)
  if not name then return false end
  if p == nil then return names.named[name] == true end
  if p ~= port then return false end
  return names.bound[name] == true or (names.wildcard and is_ip_literal(name))
end

-- Is origin (scheme://authority) this server's own? host_name/host_port: the request's Host.
local function origin_ok(names, port, origin, host_name, host_port)
  local scheme, auth = origin:match("^(%a[%w+.-]*)://([^/?#]+)$")
  if not scheme then return false end
  scheme = scheme:lower()
  if scheme ~= "http" and scheme ~= "https" then return false end
  local name, p = authority(auth)
  if not name then return false end
  -- the page came from the very address the request went to
  if scheme == "http" and name == host_name and (p or 80) == (host_port or 80) then return true end
  -- a page served under an allowed name, through a proxy in front or not
  if names.named[name] and (p == nil or p == port or p == (scheme == "http" and 80 or 443)) then
    return true
  end
  -- a page of this server under another of its names (it speaks plain HTTP only)
  return scheme == "http" and p == port and names.bound[name] == true
end

local function media_type(v)
  if type(v) ~= "string" then return nil end
  return (v:match("^[ \t]*([^;]-)[ \t]*;") or v:match("^[ \t]*(.-)[ \t]*$")):lower()
end

local function page_params(q, lo_name, lo_default)
  local lo, limit = lo_default, 100
  if q[lo_name] ~= nil then
    lo = parse.integer(q[lo_name], lo_default, math.maxinteger)
    if not lo then return nil, "query '" .. lo_name .. "' must be an integer >= " .. lo_default end
  end
  if q.limit ~= nil then
    limit = parse.integer(q.limit, 1, 1000)
    if not limit then return nil, "query 'limit' must be an integer from 1 to 1000" end
  end
  return lo, limit
end

-- The browser checks and the token comparison, for the other HTTP servers of a rig
-- (rig.mcp.server_http keeps the same rules).
M._checks = { authority = authority, host_names = host_names, host_ok = host_ok,
              origin_ok = origin_ok, media_type = media_type, token_equal = token_equal,
              is_loopback = is_loopback, listen_host = listen_host }

function M.serve(opts)
  if type(opts) ~= "table" then fail("expects an options table") end
  for k in pairs(opts) do
    if not KNOWN[k] then fail("unknown option '%s'", tostring(k)) end
  end
  local r = opts.rig
  if type(r) ~= "table" or type(r.session) ~= "function" or not r.store then
    fail("option 'rig' must be a rig (rig.define{…})")
  end
  local listen = opts.listen or "127.0.0.1:8080"
  if type(listen) ~= "string" then fail("option 'listen' must be a string \"host:port\"") end
  local host = listen_host(listen)
  if not host then fail("bad listen address '%s' (want \"host:port\" or \"[v6]:port\")", listen) end
  local token
  if opts.auth ~= nil then
    if type(opts.auth) ~= "table" then fail("option 'auth' must be a table { token = … }") end
    for k in pairs(opts.auth) do
      if k ~= "token" then fail("option 'auth': unknown field '%s'", tostring(k)) end
    end
    token = opts.auth.token
    if type(token) ~= "string" or #token < 16 then
      fail("option 'auth.token' must be a string of at least 16 bytes")
    end
  end
  if opts.insecure_public_bind ~= nil and type(opts.insecure_public_bind) ~= "boolean" then
    fail("option 'insecure_public_bind' must be a boolean")
  end
  local extra_hosts = {}
  if opts.allowed_hosts ~= nil then
    if type(opts.allowed_hosts) ~= "table" then fail("option 'allowed_hosts' must be a list of host names") end
    for i, n in ipairs(opts.allowed_hosts) do
      local name, p = authority(n)
      if type(n) ~= "string" or not name or p then
        fail("option 'allowed_hosts': entry %d must be a host name without a port (got '%s')", i, shown(n))
      end
      extra_hosts[#extra_hosts + 1] = name
    end
    for k in pairs(opts.allowed_hosts) do
      if math.type(k) ~= "integer" or k < 1 or k > #opts.allowed_hosts then
        fail("option 'allowed_hosts' must be a list of host names")
      end
    end
  end
  if not is_loopback(host) and not token and not opts.insecure_public_bind then
    return nil, "refusing to listen on '" .. listen .. "' without authentication: it is not " ..
      "a loopback address (configure a token, or acknowledge an authenticating proxy in " ..
      "front with insecure_public_bind)", "refused"
  end
  local function int_opt(name, default, lo)
    local v = opts[name]
    if v == nil then return default end
    if math.type(v) ~= "integer" or v < lo then fail("option '%s' must be an integer >= %d", name, lo) end
    return v
  end
  local max_body = int_opt("max_body", 1 << 20, 0)
  local max_headers = int_opt("max_headers", 64 << 10, 1024)
  local max_conns = int_opt("max_connections", 1024, 1)
  local SSE_BUFFER = int_opt("sse_buffer", 1024, 1)
  if SSE_BUFFER > 1 << 24 then fail("option 'sse_buffer' must be an integer 1..16777216") end
  local heartbeat = opts.heartbeat or 20
  if type(heartbeat) ~= "number" or heartbeat <= 0 then fail("option 'heartbeat' must be a positive number") end
  local drain_timeout = opts.drain_timeout or 10
  if type(drain_timeout) ~= "number" or drain_timeout < 0 then
    fail("option 'drain_timeout' must be a non-negative number")
  end
  local store = r.store

  local live = {}        -- id -> session
  local opening = {}     -- id -> cond while a restore is under way
  local idem, idem_order = {}, {}
  local inflight, draining = 0, false
  local drained = core.cond()
  local streams = {}     -- stream -> true; stream.sub is closed to end it
  local nstreams = 0

  -- ---- metrics: counted from the enduring events of the live sessions ----

  local m = { turns = { done = 0, failed = 0, interrupted = 0 }, tool_calls = 0, gates = {},
              tokens = { input = 0, output = 0 }, model_errors = {}, appends = 0, catch_ups = 0 }
  -- requests refused by the browser checks, by code (the host server counts its own)
  local refused = { host_not_allowed = 0, origin_not_allowed = 0, unsupported_media_type = 0 }
  local http_srv
  local watchers = {}    -- watcher -> true; watcher.sub is closed to end it

  local function bump(t, k, n) t[k] = (t[k] or 0) + (n or 1) end

  local function count(ev)
    m.appends = m.appends + 1
    local t = ev.type
    if t == "TurnDone" then
      bump(m.turns, "done")
    elseif t == "TurnInterrupted" then
      bump(m.turns, "interrupted")
    elseif t == "TurnFailed" then
      bump(m.turns, "failed")
      local code = type(ev.error) == "table" and ev.error.code
      if type(code) == "string" and not RUNNER_CODES[code] then bump(m.model_errors, code) end
    elseif t == "StepDone" then
      local u = type(ev.usage) == "table" and ev.usage or {}
      bump(m.tokens, "input", math.tointeger(u.input_tokens) or 0)
      bump(m.tokens, "output", math.tointeger(u.output_tokens) or 0)
      local content = type(ev.message) == "table" and ev.message.content
      for _, b in ipairs(type(content) == "table" and content or {}) do
        if type(b) == "table" and b.type == "tool_use" then m.tool_calls = m.tool_calls + 1 end
      end
    elseif t == "GateResolved" then
      if type(ev.action) == "string" then bump(m.gates, ev.action) end
    end
  end

  local function count_text(text)
    local ev = json.decode(text)
    if type(ev) == "table" then count(ev) end
  end

  -- Follows s's enduring events from its current tip until it shuts down;
  -- after an overflow it catches up from the journal (no gap, no double count).
  local function watch(s)
    local w = { sub = s:subscribe{ ephemeral = false, buffer = METRICS_BUFFER }, last = s.core:tip() }
    watchers[w] = true
    core.spawn_detached(function()
      local c = w.sub.c
      while not w.ended do
        local text, seq, code = c:next()
        if text then
          if seq and seq > w.last then
            w.last = seq
            count_text(text)
          end
        elseif code == "overflow" and not s.closed then
          w.sub:close()
          w.sub = s:subscribe{ ephemeral = false, buffer = METRICS_BUFFER }
          c = w.sub.c
          local from = w.last + 1
          while true do
            local recs, tip = core.journal_read(store, s.id, from, 256)
            if not recs then
              log("journal read of '%s' for metrics failed: %s", s.id, tostring(tip))
              break
            end
            for _, rec in ipairs(recs) do
              if rec.kind == "event" then count_text(rec.body) end
              w.last = rec.seq
            end
            if #recs == 0 then break end
            from = recs[#recs].seq + 1
            if from > tip then break end
          end
        else
          break -- the session shut down, or the server closes
        end
      end
      watchers[w] = nil
      w.sub:close()
    end)
  end

  local function unwatch_all()
    for w in pairs(watchers) do
      w.ended = true
      w.sub:close()
    end
  end

  local function forget(id)
    local s = live[id]
    if s and s.closed then live[id] = nil end
  end

  -- The live session, or nil and an error response.
  local function find(id)
    forget(id)
    local s = live[id]
    if s then return s end
    if not valid_id(id) then return nil, err("session_not_found", "no session '" .. shown(id) .. "'") end
    local e, msg, code = core.catalog_get(store, id)
    if e then
      return nil, err("session_not_live", "session '" .. id .. "' is not live (POST …/restore first)")
    end
    if code ~= "not_found" then
      log("catalog lookup of '%s' failed: %s", id, tostring(msg))
      return nil, err("storage", "the session store failed")
    end
    return nil, err("session_not_found", "no session '" .. id .. "'")
  end

  local function open_error(what, id, msg, code)
    if code == "not_found" then return err("session_not_found", "no session '" .. id .. "'") end
    if code == "held" then return err("session_held", "session '" .. id .. "' is open elsewhere") end
    if code == "drift" then
      log("%s of '%s' refused: %s", what, id, tostring(msg))
      return err("drift", "the rig's loop policy changed since session '" .. id .. "' started")
    end
    log("%s of '%s' failed: %s (%s)", what, id, tostring(msg), tostring(code))
    if code == "io" then return err("storage", "the session store failed") end
    return err("internal", "the " .. what .. " failed")
  end

  local function submit(s, message)
    local cid, msg, code = s:submit(message)
    if cid then return cid end
    if code == "faulted" then
      log("input to '%s' refused: %s", s.id, tostring(msg))
      return nil, err("session_faulted", "session '" .. s.id .. "' is faulted (restore it)")
    end
    log("input to '%s' refused: %s (%s)", s.id, tostring(msg), tostring(code))
    if code == "invalid_request" then
      -- an image or document the session refused: the message says which and why
      return nil, err("invalid_request", (tostring(msg):gsub("^submit: ", "")))
    end
    return nil, err("invalid_request", "the session refused the input")
  end

  local function body_of(req, kind)
    if #req.body > max_body then return nil, err("body_too_large", "the request body is over " .. max_body .. " bytes") end
    local v, code, msg = parse.body(kind, req.body)
    if not v then return nil, err(code, msg) end
    return v
  end

  local function live_state(s)
    if s:faulted() then return "faulted" end
    if #s:gates() > 0 then return "waiting_on_gate" end
    return (s.busy or 0) > 0 and "running" or "idle"
  end

  -- ---- handlers ----

  local function capabilities()
    return ok(200, { protocol = M.PROTOCOL, version = M.VERSION, features = json.array(FEATURES) })
  end

  local function create_session(body)
    local s, msg, code = r:session()
    if not s then return open_error("create", "(new)", msg, code) end
    live[s.id] = s
    watch(s)
    local out = { session_id = s.id }
    if body.message then
      local cid, e = submit(s, body.message)
      if not cid then return e end
      out.command_id = cid
    end
    return ok(201, out)
  end

  local function idem_prune(now)
    while #idem_order > 0 do
      local k = idem_order[1]
      local e = idem[k]
      if e and not e.pending and (now - e.at > IDEM_TTL or #idem_order > IDEM_MAX) then
        idem[k] = nil
        table.remove(idem_order, 1)
      elseif not e then
        table.remove(idem_order, 1)
      else
        break
      end
    end
  end

  local function post_sessions(req)
    local body, e = body_of(req, "create")
    if not body then return e end
    local key = req.headers["idempotency-key"]
    if key == nil then return create_session(body) end
    if #key == 0 or #key > 255 or key:find("[^\33-\126]") then
      return err("invalid_request", "header 'Idempotency-Key' must be 1 to 255 printable ASCII bytes")
    end
    local digest = core.sha256_hex(req.body)
    local now = core.now()
    idem_prune(now)
    local ent = idem[key]
    while ent and ent.pending do ent.cond:wait() ent = idem[key] end
    if ent then
      if ent.digest ~= digest then
        return err("idempotency_conflict", "Idempotency-Key was used with another body")
      end
      return ent.result
    end
    ent = { digest = digest, pending = true, cond = core.cond(), at = now }
    idem[key] = ent
    idem_order[#idem_order + 1] = key
    local okc, result = pcall(create_session, body)
    ent.pending = false
    ent.cond:signal()
    if not okc or result.status >= 500 or result.status == 409 then
      idem[key] = nil -- a failure is not remembered: the retry may succeed
      if not okc then error(result, 0) end
      return result
    end
    ent.result = result
    return result
  end

  local function list_sessions(req)
    local skip, limit = page_params(req.query, "skip", 0)
    if not skip then return err("invalid_request", limit) end
    local list, msg = core.catalog_list(store)
    if not list then
      log("catalog list failed: %s", tostring(msg))
      return err("storage", "the session store failed")
    end
    table.sort(list, function(a, b)
      if a.created_at ~= b.created_at then return (a.created_at or 0) > (b.created_at or 0) end
      return a.id < b.id
    end)
    local page = {}
    for i = skip + 1, math.min(#list, skip + limit) do
      local e = list[i]
      forget(e.id)
      e.live = live[e.id] ~= nil
      -- a busy live session's state is its live one, as /status says it (the
      -- catalog's is written after the event's append: it lags behind a gate
      -- opening); an idle one keeps the catalog's (idle, failed, interrupted)
      local s = live[e.id]
      local now = s and live_state(s)
      if now and now ~= "idle" then e.state = now end
      page[#page + 1] = e
    end
    local done = skip + #page >= #list
    return ok(200, { sessions = json.array(page), skip = skip, limit = limit,
                     next_skip = skip + #page, done = done })
  end

  local function restore(req)
    local id = req.params.id
    forget(id)
    while opening[id] do opening[id]:wait() end
    if live[id] then return ok(200, { session_id = id }) end
    if not valid_id(id) then return err("session_not_found", "no session '" .. shown(id) .. "'") end
    local c = core.cond()
    opening[id] = c
    local okc, s, msg, code = pcall(r.restore, r, id)
    opening[id] = nil
    c:signal()
    if not okc then error(s, 0) end
    if not s then return open_error("restore", id, msg, code) end
    live[id] = s
    watch(s)
    return ok(200, { session_id = id })
  end

  local function input(req)
    local s, e = find(req.params.id)
    if not s then return e end
    local body, be = body_of(req, "input")
    if not body then return be end
    local cid, se = submit(s, body.message)
    if not cid then return se end
    return ok(200, { command_id = cid })
  end

  -- An image or document stored once (base64 in JSON): blocks refer to it by
  -- { type, blob, media_type } from then on, in any session of this store.
  local function upload(req)
    local body, be = body_of(req, "media")
    if not body then return be end
    local media = require "rig.media"
    local b, merr = media.check(body, "the upload")
    if not b then return err("invalid_request", merr) end
    if not b.data then return err("invalid_request", "the upload needs its bytes (base64)") end
    local sb, serr = media.store(store, b)
    if not sb then
      log("media upload failed: %s", tostring(serr))
      return err("storage", "the session store failed")
    end
    return ok(201, { type = sb.type, blob = sb.blob, media_type = sb.media_type, size = sb.size,
                     name = sb.name })
  end

  local function interrupt(req)
    local s, e = find(req.params.id)
    if not s then return e end
    return ok(200, { interrupted = s:interrupt() })
  end

  -- Continues the turns a crash or a shutdown cut (status lists them as `resumable`).
  local function resume(req)
    local s, e = find(req.params.id)
    if not s then return e end
    local loop
    if #req.body > max_body then return err("body_too_large", "the request body is over " .. max_body .. " bytes") end
    if req.body:find("%S") then
      local v, msg = json.decode(req.body)
      if v == nil then return err("invalid_json", msg) end
      if type(v) ~= "table" or json.is_array(v) then return err("invalid_request", "the body must be a JSON object") end
      for k in pairs(v) do
        if k ~= "loop" then return err("invalid_request", "unknown field '" .. tostring(k):sub(1, 64) .. "'") end
      end
      loop = v.loop
      if loop ~= nil and (type(loop) ~= "string" or not s.loops[loop]) then
        return err("invalid_request", "field 'loop' must name a loop of the session")
      end
    end
    local resumed = {}
    for _, c in ipairs(s:resumable()) do
      if loop == nil or c.loop_id == loop then resumed[#resumed + 1] = c.loop_id end
    end
    local done, msg, code = s:resume(loop)
    if done then return ok(202, { resumed = json.array(resumed) }) end
    if code == "nothing_to_resume" then return err(code, msg) end
    if code == "busy" then return err("session_busy", msg) end
    if code == "faulted" then return err("session_faulted", "session '" .. s.id .. "' is faulted (restore it)") end
    log("resume of '%s' failed: %s (%s)", s.id, tostring(msg), tostring(code))
    return err(code == "io" and "storage" or "internal", "the resume failed")
  end

  local function gate(req)
    local s, e = find(req.params.id)
    if not s then return e end
    local body, be = body_of(req, "gate")
    if not body then return be end
    local gid = req.params.gate
    local done, msg, code = s:respond_gate(gid, body.action)
    if done then return ok(202, {}) end
    if code == "not_found" or code == "conflict" then
      return err("gate_not_open", "gate '" .. shown(gid) .. "' is not open")
    end
    log("gate '%s' of '%s' failed: %s (%s)", shown(gid), s.id, tostring(msg), tostring(code))
    return err(code == "io" and "storage" or "internal", "the gate answer failed")
  end

  -- an MCP server's question (UserInputRequested) answered: accept with content, or not
  local function answer(req)
    local s, e = find(req.params.id)
    if not s then return e end
    local body, be = body_of(req, "answer")
    if not body then return be end
    local iid = req.params.input
    local done, msg, code = s:respond_input(iid, body.action, body.action == "accept"
      and (body.content or {}) or nil)
    if done then return ok(202, {}) end
    if code == "input_not_open" then
      return err("input_not_open", "question '" .. shown(iid) .. "' is not open")
    end
    log("answer '%s' of '%s' failed: %s (%s)", shown(iid), s.id, tostring(msg), tostring(code))
    return err(code == "io" and "storage" or "internal", "the answer failed")
  end

  local function status(req)
    local id = req.params.id
    forget(id)
    local s = live[id]
    if not valid_id(id) then return err("session_not_found", "no session '" .. shown(id) .. "'") end
    local entry, msg, code = core.catalog_get(store, id)
    if not entry and code ~= "not_found" then
      log("catalog lookup of '%s' failed: %s", id, tostring(msg))
      return err("storage", "the session store failed")
    end
    if not s and not entry then return err("session_not_found", "no session '" .. id .. "'") end
    local out = { session_id = id, live = s ~= nil }
    if entry then
      out.title, out.created_at, out.last_active_at = entry.title, entry.created_at, entry.last_active_at
      out.state, out.status, out.loop_count = entry.state, entry.status, entry.loop_count
      out.cost = entry.cost
    end
    if s then
      local gates = s:gates()
      local faulted = s:faulted()
      -- live state beats the catalog, which is written at turn edges
      out.busy = (s.busy or 0) > 0
      out.state = live_state(s)
      out.faulted = faulted and true or false
      out.open_gates = json.array(gates)
      out.open_inputs = json.array(s:inputs())
      local cut = {}
      for _, c in ipairs(s:resumable()) do cut[#cut + 1] = c.loop_id end
      out.resumable = json.array(cut) -- POST …/resume continues these loops' cut turns
      out.usage = s:usage()
      out.active_loop = s.active -- where input goes (a handoff moves it)
      out.last_seq = s.core:tip()
    end
    return ok(200, out)
  end

  local function journal(req)
    local id = req.params.id
    if not valid_id(id) then return err("session_not_found", "no session '" .. shown(id) .. "'") end
    local from, limit = page_params(req.query, "from", 1)
    if not from then return err("invalid_request", limit) end
    forget(id)
    if not live[id] then
      local e, emsg, ecode = core.catalog_get(store, id)
      if not e and ecode == "not_found" then return err("session_not_found", "no session '" .. id .. "'") end
      if not e then
        log("catalog lookup of '%s' failed: %s", id, tostring(emsg))
        return err("storage", "the session store failed")
      end
    end
    local recs, tip, code = core.journal_read(store, id, from, limit)
    if not recs then
      if code == "not_found" then return err("session_not_found", "no session '" .. id .. "'") end
      log("journal read of '%s' failed: %s", id, tostring(tip))
      return err("storage", "the session store failed")
    end
    local events = {}
    for i, rec in ipairs(recs) do
      local ev
      if rec.kind == "fence" then
        ev = { type = "Fence", epoch = rec.epoch }
      else
        ev = json.raw(rec.body)
      end
      events[i] = { seq = rec.seq, kind = rec.kind, event = ev }
    end
    local next_seq = #recs > 0 and recs[#recs].seq + 1 or from
    return ok(200, { events = json.array(events), next_seq = next_seq, done = next_seq > tip })
  end

  -- ---- server-sent events ----

  local SSE_HEADERS = { ["content-type"] = "text/event-stream", ["cache-control"] = "no-store",
                        ["x-accel-buffering"] = "no" }

  -- Sends the journal's events after st.last; false once the client is gone.
  local function replay(res, st, id)
    local from = st.last + 1
    while true do
      local recs, tip = core.journal_read(store, id, from, 256)
      if not recs then
        log("journal read of '%s' for a stream failed: %s", id, tostring(tip))
        return false
      end
      for _, rec in ipairs(recs) do
        if rec.kind == "event" then
          if not res:event{ event = "enduring", id = rec.seq, data = rec.body } then return false end
        end
        st.last = rec.seq
      end
      if #recs == 0 then return true end
      from = recs[#recs].seq + 1
      if from > tip then return true end
    end
  end

  local function events(req, res)
    local s, e = find(req.params.id)
    if not s then return e end
    local cursor = req.headers["last-event-id"] or req.query.from
    local last
    if cursor ~= nil then
      last = parse.integer(cursor, 0, math.maxinteger)
      if not last then return err("invalid_request", "Last-Event-ID or 'from' must be a sequence number") end
    end
    -- subscribe first, then read the journal: a record is in one or the
    -- other (or both, and then its seq is at most st.last)
    local st = { sub = s:subscribe{ ephemeral = true, buffer = SSE_BUFFER }, last = last }
    streams[st] = true
    nstreams = nstreams + 1
    local function finish()
      if streams[st] then nstreams = nstreams - 1 end
      streams[st] = nil
      st.sub:close()
    end
    -- a client that leaves cancels this handler (rig.http.server): finish even then
    local _ <close> = setmetatable({}, { __close = finish })
    if not res:start(200, SSE_HEADERS) then return finish() end
    if last == nil then
      st.last = s.core:tip() -- live only: anything newer comes through the subscription
    elseif not replay(res, st, s.id) then
      return finish()
    end
    -- live: C forwards the events (sub:pipe, host/session_pipe.c) until the
    -- subscription overflows (catch up from the journal, pipe again), ends, or
    -- the client leaves
    while not st.ended do
      local why, seq = st.sub.c:pipe(res, { last = st.last, heartbeat = heartbeat })
      st.last = seq
      if why ~= "overflow" then break end
      -- this client fell behind by a whole buffer: catch up from the journal
      m.catch_ups = m.catch_ups + 1
      st.sub:close()
      if st.ended or s.closed then break end
      st.sub = s:subscribe{ ephemeral = true, buffer = SSE_BUFFER }
      if not replay(res, st, s.id) then break end
    end
    finish()
    if not res:closed() then res:finish() end
  end

  -- ---- metrics ----

  local METRICS_HEADERS = { ["content-type"] = "text/plain; version=0.0.4; charset=utf-8",
                            ["cache-control"] = "no-store" }

  local function label(v)
    return (v:gsub("[\\\n\"]", { ["\\"] = "\\\\", ["\n"] = "\\n", ["\""] = "\\\"" }))
  end

  local function metrics()
    local out = {}
    local function family(name, kind, help, samples)
      out[#out + 1] = "# HELP " .. name .. " " .. help
      out[#out + 1] = "# TYPE " .. name .. " " .. kind
      local keys = {}
      for k in pairs(samples) do keys[#keys + 1] = k end
      table.sort(keys)
      for _, k in ipairs(keys) do
        local v = samples[k]
        out[#out + 1] = name .. (k == "" and "" or "{" .. k .. "}") .. " " .. string.format("%d", v)
      end
    end
    local function by(lname, t, always)
      local samples = {}
      for _, k in ipairs(always or {}) do samples[lname .. '="' .. label(k) .. '"'] = 0 end
      for k, v in pairs(t) do samples[lname .. '="' .. label(k) .. '"'] = v end
      return samples
    end
    local states = { idle = 0, running = 0, waiting_on_gate = 0, faulted = 0, not_live = 0 }
    local list, msg = core.catalog_list(store)
    if not list then
      log("catalog list for metrics failed: %s", tostring(msg))
      return err("storage", "the session store failed")
    end
    local counted = {}
    for id, s in pairs(live) do
      forget(id)
      if live[id] then
        bump(states, live_state(s))
        counted[id] = true
      end
    end
    for _, e in ipairs(list) do
      if not counted[e.id] then bump(states, "not_live") end
    end
    family("luarig_sessions", "gauge", "Sessions by state: live ones by their live state, the " ..
      "catalog's others as not_live.", by("state", states))
    family("luarig_turns_total", "counter", "Turns ended, by outcome.",
      by("outcome", m.turns))
    family("luarig_tool_calls_total", "counter", "Tool calls the model made.",
      { [""] = m.tool_calls })
    family("luarig_gate_decisions_total", "counter", "Gates resolved, by action.",
      by("action", m.gates, { "approve", "approve_always", "deny" }))
    family("luarig_model_tokens_total", "counter", "Model tokens, by direction.",
      by("direction", m.tokens))
    family("luarig_model_errors_total", "counter", "Turns failed by a model error, by code.",
      by("code", m.model_errors))
    family("luarig_journal_appends_total", "counter", "Event records appended to the journals " ..
      "of the live sessions (commands and fences not counted).", { [""] = m.appends })
    family("luarig_sse_subscribers", "gauge", "Open server-sent event streams.",
      { [""] = nstreams })
    family("luarig_sse_catch_ups_total", "counter", "Times a server-sent event stream fell " ..
      "behind by its whole buffer and was caught up from the journal.", { [""] = m.catch_ups })
    local r = {}
    for k, v in pairs(refused) do r[k] = v end
    for k, v in pairs(http_srv and http_srv:refusals() or {}) do r[k] = v end
    family("luarig_http_refusals_total", "counter", "Requests refused before any route: the " ..
      "browser checks (Host, Origin, Content-Type) and the HTTP layer's own (malformed, too " ..
      "large, Expect), by error code.", by("code", r))
    return { status = 200, headers = METRICS_HEADERS, body = table.concat(out, "\n") .. "\n" }
  end

  -- ---- the web console (stdlib/rig/console/, embedded; docs/design/serve.md) ----

  -- The page and its two files load without the token (they hold no data);
  -- the page asks for the token and sends it on every API call.
  local CSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " ..
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
  local ASSETS = {
    ["/"] = { "rig/console/index.html", "text/html; charset=utf-8" },
    ["/console.js"] = { "rig/console/console.js", "text/javascript; charset=utf-8" },
    ["/console.css"] = { "rig/console/console.css", "text/css; charset=utf-8" },
  }

  local function asset(req)
    if draining then return err("shutting_down", "the server is shutting down") end
    local a = ASSETS[req.path]
    local bytes = a and core.asset(a[1])
    if not bytes then return err("not_found", "no such route") end
    return { status = 200, body = bytes, headers = {
      ["content-type"] = a[2], ["cache-control"] = "no-cache",
      ["content-security-policy"] = CSP, ["x-content-type-options"] = "nosniff",
      ["referrer-policy"] = "no-referrer", ["x-frame-options"] = "DENY" } }
  end

  -- ---- dispatch ----

  local function guard(handler)
    return function(req, res)
      if draining then
        return err("shutting_down", "the server is shutting down")
      end
      if token then
        local h = req.headers.authorization or ""
        local got = h:match("^[Bb]earer (.+)$")
        if not got or not token_equal(got, token) then
          local e = err("unauthorized", "a bearer token is required")
          e.headers = { ["content-type"] = "application/json", ["cache-control"] = "no-store",
                        ["www-authenticate"] = "Bearer" }
          return e
        end
      end
      if inflight >= max_conns then
        return err("over_capacity", "too many requests in hand; retry later")
      end
      inflight = inflight + 1
      local okh, result = pcall(handler, req, res)
      inflight = inflight - 1
      if inflight == 0 then drained:signal() end
      if not okh then error(result, 0) end
      return result
    end
  end

  local function not_found()
    return err("not_found", "no such route")
  end

  local routes = {
    ["GET /v1/capabilities"] = capabilities,
    ["POST /v1/sessions"] = post_sessions,
    ["GET /v1/sessions"] = list_sessions,
    ["POST /v1/sessions/{id}/restore"] = restore,
    ["POST /v1/sessions/{id}/input"] = input,
    ["POST /v1/sessions/{id}/interrupt"] = interrupt,
    ["POST /v1/sessions/{id}/resume"] = resume,
    ["POST /v1/sessions/{id}/gates/{gate}"] = gate,
    ["POST /v1/sessions/{id}/inputs/{input}"] = answer,
    ["POST /v1/media"] = upload,
    ["GET /v1/sessions/{id}/status"] = status,
    ["GET /v1/sessions/{id}/journal"] = journal,
    ["GET /v1/sessions/{id}/events"] = events,
    ["GET /metrics"] = metrics,
  }
  local flow_runs = {} -- the flow runs this server holds: their leases go at close
  if opts.flows ~= nil then
    if type(opts.flows) ~= "table" then fail("option 'flows' must be a list of rig.flow") end
    local fr
    fr, flow_runs = require("rig.flow.serve").routes(opts.flows, { err = err, ok = ok, log = log,
      shown = shown, store = store, heartbeat = heartbeat, page_params = page_params })
    for k, f in pairs(fr) do routes[k] = f end
  end
  for _, m in ipairs({ "GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS" }) do
    routes[m .. " /*"] = not_found
  end
  local wrapped = {}
  for k, f in pairs(routes) do wrapped[k] = guard(f) end
  for path in pairs(ASSETS) do wrapped["GET " .. path] = asset end

  -- the browser checks, before any route (with or without a token)
  local names = host_names(host, extra_hosts)
  local bound_port -- known once listening; no request comes before
  local function refuse(code, message)
    refused[code] = refused[code] + 1
    return err(code, message)
  end
  local function browser_checks(req)
    local hname, hport = authority(req.headers.host)
    if not host_ok(names, bound_port, hname, hport) then
      return refuse("host_not_allowed", "the Host header does not name this server " ..
        "(its address or localhost with its port, or a name in allowed_hosts)")
    end
    local origin = req.headers.origin
    if origin ~= nil and not origin_ok(names, bound_port, origin, hname, hport) then
      return refuse("origin_not_allowed", "requests from another origin are refused")
    end
    if req.method == "POST" and media_type(req.headers["content-type"]) ~= "application/json" then
      return refuse("unsupported_media_type", "a POST must be Content-Type: application/json")
    end
  end

  -- the host server answers a body over the cap itself, with the same JSON 413
  local srv, msg, code = server{ listen = listen, routes = wrapped, max_body = max_body,
                                 max_headers = max_headers, before = browser_checks }
  if not srv then return nil, msg, code end
  bound_port = srv.port
  http_srv = srv

  local obj = { url = srv.url, port = srv.port }

  function obj.shutdown()
    if obj.closed then return true end
    draining = true
    -- end the streams: their subscriptions close, their handlers finish
    for st in pairs(streams) do
      st.ended = true
      st.sub:close()
    end
    local deadline = core.now() + drain_timeout
    while inflight > 0 do
      local left = deadline - core.now()
      if left <= 0 then
        log("%d request(s) still in hand after %g s; closing", inflight, drain_timeout)
        break
      end
      drained:wait(left)
    end
    unwatch_all()
    for id, s in pairs(live) do
      local okc, e2 = pcall(s.shutdown, s)
      if not okc then log("shutdown of session '%s' failed: %s", id, tostring(e2)) end
      live[id] = nil
    end
    for _, R in pairs(flow_runs) do R:close() end
    obj.closed = true
    srv:close()
    return true
  end

  function obj.close()
    for _, R in pairs(flow_runs) do R:close() end
    obj.closed = true
    unwatch_all()
    srv:close()
  end

  function obj.run()
    local sig = core.await_shutdown_signal()
    log("%s: shutting down", sig)
    return obj.shutdown()
  end

  -- methods work with : and .
  return setmetatable(obj, { __index = function(_, k)
    if k == "live" then return live end
  end })
end

-- `luarig serve RIG.lua [--listen ADDR] [--auth-token-file FILE] [--insecure-public-bind]
--  [--allow-host NAME]...`
function M.cli(...)
  local cli_args = require "rig.cli_args"
  local opts, pos = cli_args.parse({ ... }, 1, {
    prefix = "serve",
    values = { ["--listen"] = "listen", ["--auth-token-file"] = "token_file",
               ["--allow-host"] = "hosts[]" },
    switches = { ["--insecure-public-bind"] = "insecure" },
  })
  local path, listen, token_file, insecure, hosts = pos[1], opts.listen, opts.token_file,
    opts.insecure, opts.hosts
  for _, n in ipairs(hosts) do
    local name, port = authority(n)
    if not name or port then
      cli_args.usage(nil, "serve: --allow-host wants a host name without a port (got '%s')", n)
    end
  end
  if not path then cli_args.usage(nil, "serve needs a rig script (RIG.lua returns a rig)") end
  local auth = token_file and cli_args.token_file(token_file, "serve")
  local r, flows = cli_args.load_rig(path, "serve")
  local srv, msg, code = M.serve{ rig = r, listen = listen or "127.0.0.1:8080", auth = auth,
                                  flows = flows, -- a second return value: a list of rig.flow
                                  insecure_public_bind = insecure or nil,
                                  allowed_hosts = #hosts > 0 and hosts or nil }
  if not srv and code == "refused" then
    -- the same refusal, in the words of the command line
    msg = "refusing to listen on '" .. listen .. "' without authentication: it is not a " ..
      "loopback address (give --auth-token-file FILE, or --insecure-public-bind when an " ..
      "authenticating proxy is in front)"
  end
  if not srv then error("serve: " .. msg, 0) end
  io.stderr:write("luarig: serving on " .. srv.url .. (auth and " (bearer token required)" or "") .. "\n")
  io.stderr:flush()
  srv:run()
end

return M
