-- rig.http_server: the HTTP server, exposed as rig.http.server.
--
--   local srv = rig.http.server{
--     listen = "127.0.0.1:0",          -- "host:port", "[::1]:0"; port 0 picks a free port
--     max_body = 1 << 20,              -- request body cap: 413 above it
--     max_headers = 64 << 10,          -- request line + headers cap: 431 above it
--     routes = { ["GET /hello/{name}"] = function(req, res) ... end, ... },
--     before = function(req) ... end,  -- optional: runs first for every request; a
--                                      -- response table it returns is sent instead
--   }
--   srv.port, srv.url, srv:close(), srv:refusals() -> { code = count }
--
-- Errors are JSON: {"error":{"code","message","retryable"}} (404 not_found,
-- 405 method_not_allowed with Allow, 500 internal). What the host server
-- refuses before any route (host/http_server.c) has the same shape: 400
-- malformed_request, 413 body_too_large, 417 expectation_failed, 431
-- headers_too_large; srv:refusals() counts them. A method no route has
-- (any token: FOO too) is a 405 where the path matches, else a 404.
--
-- Each request runs its handler as its own task. The handler returns
-- { status =, headers =, body = } or { status =, headers =, json = }, or
-- streams through res:start / res:write / res:event / res:comment /
-- res:finish. Routes: literal segments, {name} segments (req.params.name)
-- and a final * (req.params["*"], the rest of the path). The most specific
-- route wins: at the first differing segment, literal beats {name} beats *.
-- JSON is rig.json's both ways: `json =` is encoded by json.encode (an
-- empty json.array() stays [], integers stay integers, keys in bytewise
-- order) and req:json() decodes with json.decode (arrays marked, null as
-- json.null) -> value | nil, message, "parse".
local core = require "rig.core"
local json = require "rig.json"

local METHODS = { GET = true, POST = true, PUT = true, DELETE = true, PATCH = true,
                  HEAD = true, OPTIONS = true }
local KNOWN_OPTIONS = { listen = true, routes = true, max_body = true, max_headers = true,
                        before = true }
local RESULT_FIELDS = { status = true, headers = true, body = true, json = true }

local LITERAL, PARAM, REST = 0, 1, 2

local function fail(fmt, ...)
  error("rig.http.server: " .. string.format(fmt, ...), 3)
end

local function parse_listen(s)
  if type(s) ~= "string" then fail("option 'listen' must be a string \"host:port\"") end
  local host, port = s:match("^%[([^%]]+)%]:(%d+)$")
  if not host then host, port = s:match("^([^:%[%]]+):(%d+)$") end
  if not host then fail("bad listen address '%s' (want \"host:port\" or \"[v6]:port\")", s) end
  port = tonumber(port)
  if port > 65535 then fail("bad listen port in '%s'", s) end
  return host, port
end

-- "/a/b/" -> { "a", "b", "" }; "/" -> {}
local function split_path(p)
  local parts = {}
  if p == "/" then return parts end
  local i = 2
  while true do
    local j = p:find("/", i, true)
    if not j then
      parts[#parts + 1] = p:sub(i)
      return parts
    end
    parts[#parts + 1] = p:sub(i, j - 1)
    i = j + 1
  end
end

local function compile(key, handler)
  if type(key) ~= "string" then fail("route keys must be strings \"METHOD /path\"") end
  local method, path = key:match("^(%u+) (/[^%s]*)$")
  if not method or not METHODS[method] then
    fail("bad route '%s' (want \"METHOD /path\" with METHOD one of GET, POST, PUT, DELETE, PATCH, HEAD, OPTIONS)", key)
  end
  if type(handler) ~= "function" then fail("route '%s': the handler must be a function", key) end
  local segs, names = {}, {}
  local parts = split_path(path)
  for i, p in ipairs(parts) do
    if p == "*" then
      if i ~= #parts then fail("route '%s': '*' must be the last segment", key) end
      segs[i] = { kind = REST }
    elseif p:find("^{") then
      local name = p:match("^{([%a_][%w_]*)}$")
      if not name then fail("route '%s': bad parameter segment '%s'", key, p) end
      if names[name] then fail("route '%s': parameter '%s' appears twice", key, name) end
      names[name] = true
      segs[i] = { kind = PARAM, name = name }
    elseif p:find("[{}*]") then
      fail("route '%s': bad segment '%s'", key, p)
    else
      segs[i] = { kind = LITERAL, text = p }
    end
  end
  return { method = method, key = key, segs = segs, handler = handler }
end

-- Literal before {name} before *, at the first segment where two routes differ.
local function more_specific(a, b)
  local n = math.max(#a.segs, #b.segs)
  for i = 1, n do
    local x, y = a.segs[i], b.segs[i]
    if not x or not y then return x ~= nil end
    if x.kind ~= y.kind then return x.kind < y.kind end
  end
  return a.key < b.key
end

local function decode(s)
  return (s:gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
end

local function decode_query(q)
  local t = {}
  for pair in q:gmatch("[^&]+") do
    local k, v = pair:match("^([^=]*)=?(.*)$")
    t[decode((k:gsub("+", " ")))] = decode((v:gsub("+", " ")))
  end
  return t
end

-- Returns the params table when route matches the raw path segments.
local function match(route, parts)
  local segs = route.segs
  local params = {}
  for i, s in ipairs(segs) do
    local part = parts[i]
    if part == nil then return nil end
    if s.kind == LITERAL then
      if decode(part) ~= s.text then return nil end
    elseif s.kind == PARAM then
      params[s.name] = decode(part)
    else
      params["*"] = decode(table.concat(parts, "/", i))
      return params
    end
  end
  if #parts ~= #segs then return nil end
  return params
end

local function log(fmt, ...)
  io.stderr:write("luarig: http: " .. string.format(fmt, ...) .. "\n")
  io.stderr:flush()
end

local function send_error(res, status, code, message, headers)
  local h = { ["content-type"] = "application/json" }
  for k, v in pairs(headers or {}) do h[k] = v end
  -- code and message are our own constants: a fixed field order, byte-stable,
  -- the shape of the host server's own refusals (host/http_server.c)
  return res:_reply(status, h, '{"error":{"code":"' .. code .. '","message":"' .. message ..
    '","retryable":false}}')
end

local function has_header(h, name)
  for k in pairs(h) do
    if type(k) == "string" and k:lower() == name then return true end
  end
  return false
end

-- Sends a handler's result table; raises on a malformed one.
local function send_result(res, t)
  for k in pairs(t) do
    if not RESULT_FIELDS[k] then error("unknown response field '" .. tostring(k) .. "'", 0) end
  end
  local status = t.status or 200
  if math.type(status) ~= "integer" then error("response 'status' must be an integer", 0) end
  if t.headers ~= nil and type(t.headers) ~= "table" then error("response 'headers' must be a table", 0) end
  local headers = {}
  for k, v in pairs(t.headers or {}) do headers[k] = v end
  local body = t.body
  if t.json ~= nil then
    if body ~= nil then error("response has both 'body' and 'json'", 0) end
    local err
    body, err = json.encode(t.json)
    if not body then error("response 'json' cannot be encoded: " .. tostring(err), 0) end
    if not has_header(headers, "content-type") then headers["content-type"] = "application/json" end
  end
  if body ~= nil and type(body) ~= "string" then error("response 'body' must be a string", 0) end
  return res:_reply(status, headers, body or "")
end

local request_methods = {}
function request_methods.json(req)
  if req.body == "" then return nil, "empty body", "parse" end
  local v, err = json.decode(req.body)
  if v == nil then return nil, "invalid JSON body: " .. tostring(err), "parse" end
  return v
end
local request_mt = { __index = request_methods }

local function run(route, req, res)
  -- A handler whose client left (or whose server closed) is cancelled and
  -- its error is never read (below: the response is closed): no traceback
  -- for it. One costs ~0.5M instructions (each frame's function is looked
  -- up in every loaded module), so 1,000 SSE clients leaving a serve cost
  -- more than all the events they had been sent.
  local ok, result = xpcall(route.handler, function(m)
    if res:_state() == "closed" then return m end
    return debug.traceback(m, 2)
  end, req, res)
  local state = res:_state()
  if state == "closed" then return end -- the client left, the server closed, or res:abort()
  if not ok then
    log("handler for '%s' failed: %s", route.key, tostring(result))
    if state == "new" then
      send_error(res, 500, "internal", "internal error")
    elseif state == "started" then
      res:abort() -- the client must see a broken stream, not a clean end
    end
    return
  end
  if state == "started" then
    res:finish()
    return
  end
  if state == "finished" then return end
  if type(result) ~= "table" then
    log("handler for '%s' failed: it returned no response table", route.key)
    send_error(res, 500, "internal", "internal error")
    return
  end
  local sent, err = pcall(send_result, res, result)
  if not sent then
    log("handler for '%s' failed: %s", route.key, tostring(err))
    if res:_state() == "new" then send_error(res, 500, "internal", "internal error") end
  end
end

local function server(opts)
  if type(opts) ~= "table" then fail("expects an options table") end
  for k in pairs(opts) do
    if not KNOWN_OPTIONS[k] then fail("unknown option '%s'", tostring(k)) end
  end
  local host, port = parse_listen(opts.listen)
  local max_body = opts.max_body or (1 << 20)
  local max_headers = opts.max_headers or (64 << 10)
  if math.type(max_body) ~= "integer" or max_body < 0 then fail("option 'max_body' must be a non-negative integer") end
  if math.type(max_headers) ~= "integer" or max_headers <= 0 then fail("option 'max_headers' must be a positive integer") end
  if opts.routes ~= nil and type(opts.routes) ~= "table" then fail("option 'routes' must be a table") end

  if opts.before ~= nil and type(opts.before) ~= "function" then fail("option 'before' must be a function") end
  local before = opts.before

  local routes = {}
  for key, handler in pairs(opts.routes or {}) do routes[#routes + 1] = compile(key, handler) end
  table.sort(routes, more_specific)

  local function dispatch(req, res)
    if req.raw_path:sub(1, 1) ~= "/" then return send_error(res, 404, "not_found", "not found") end
    local parts = split_path(req.raw_path)
    req.path = decode(req.raw_path)
    req.query = decode_query(req.raw_query)
    setmetatable(req, request_mt)
    if before then
      local ok, result = xpcall(before, debug.traceback, req)
      if not ok or result ~= nil then
        -- its answer goes out as a handler's would (a failure is a 500)
        local answer = function() if not ok then error(result, 0) end return result end
        return run({ key = "before", handler = answer }, req, res)
      end
    end
    local allowed, get_route
    for _, route in ipairs(routes) do
      local params = match(route, parts)
      if params then
        if route.method == req.method then
          req.params = params
          return run(route, req, res)
        end
        if route.method == "GET" and req.method == "HEAD" and not get_route then
          get_route = { route, params }
        end
        allowed = allowed or {}
        allowed[route.method] = true
      end
    end
    if get_route then
      req.params = get_route[2]
      return run(get_route[1], req, res)
    end
    if allowed then
      if allowed.GET then allowed.HEAD = true end
      local list = {}
      for m in pairs(allowed) do list[#list + 1] = m end
      table.sort(list)
      return send_error(res, 405, "method_not_allowed", "method not allowed",
                        { allow = table.concat(list, ", ") })
    end
    return send_error(res, 404, "not_found", "not found")
  end

  return core.http_listen(host, port, max_body, max_headers, dispatch)
end

return server
