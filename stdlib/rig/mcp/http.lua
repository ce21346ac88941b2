-- rig.mcp.http (transport): Streamable HTTP (MCP 2025-03-26 and later), with
-- the HTTP+SSE transport of 2024-11-05 as a fallback, over rig.http.
--
--   local t = http.open{ url, headers, legacy = "auto" | true | false, name, max_line }
--   t:start(on_message(text, via), on_oversized, on_close(message, code))
--   t:send(msg, { related = id }) -> true | nil, message, code
--   t:negotiated(version), t:initialized(), t:close()
--
-- Streamable HTTP: every message is a POST to the URL with Accept "application/json,
-- text/event-stream"; the answer is 202 (nothing to say), a JSON body, or an event
-- stream that carries the response and the server's requests about it (passed on
-- with via.related = the request's id). The session id the server gives with its
-- initialize answer (Mcp-Session-Id) and the negotiated MCP-Protocol-Version go with
-- every later request; 404 for a known session means it expired (the client is then
-- dead and c:restart() starts a new one). After initialization a GET opens the
-- server's own stream (405: the server has none). A stream that ends or drops
-- before it delivered its response is resumed with a GET carrying Last-Event-ID,
-- after the server's retry interval (SSE "retry:", default 1 s). close() sends DELETE.
-- Legacy (legacy = "auto" and the initialize POST gets 400, 404 or 405; or legacy =
-- true): a GET opens the event stream, whose first "endpoint" event names the URL
-- messages are POSTed to; everything the server says comes on that stream.

local core = require "rig.core"
local json = require "rig.json"

local M = {}

local T = {}
T.__index = T

local DEFAULT_RETRY = 1.0
local MAX_RESUMES = 5  -- resumptions of one stream in a row without a new event

function M.open(o)
  local t = setmetatable({ url = o.url, user_headers = o.headers or {}, legacy = o.legacy,
    name = o.name, max_line = o.max_line or (16 << 20), connect_timeout = o.connect_timeout,
    streams = {}, closed = false, mode = o.legacy == true and "legacy" or "streamable" }, T)
  return t
end

local function host_of(url)
  return url:match("^https?://([^/?#]+)") or url
end

function T:headers(extra)
  local h = {}
  for k, v in pairs(self.user_headers) do h[k] = v end
  if self.session_id then h["Mcp-Session-Id"] = self.session_id end
  if self.protocol_version then h["MCP-Protocol-Version"] = self.protocol_version end
  for k, v in pairs(extra or {}) do h[k] = v end
  return h
end

function T:start(on_message, on_oversized, on_close)
  self.on_message, self.on_oversized, self.on_close = on_message, on_oversized, on_close
  if self.mode == "legacy" then
    local ok, err, code = self:legacy_connect()
    if not ok then self.start_error = { err, code } end
  end
end

function T:negotiated(version)
  self.protocol_version = version
end

local function dead(self, why, code)
  if self.dead or self.closed then return end
  self.dead = why
  self.on_close(why, code or "closed")
end

-- The id of a response in an event's data, or nil.
local function response_id(data)
  local m = json.decode(data)
  if type(m) == "table" and m.method == nil and m.id ~= nil then return m.id end
  return nil
end

-- Passes an event's data on.
local function deliver(self, data, related)
  if data == "" then return end
  if #data > self.max_line then
    self.on_oversized(#data, data:sub(1, 512), data:sub(-512), self.max_line)
    return
  end
  self.on_message(data, { related = related })
end

-- How long a request's answer waits for its stream to end (the server closes it
-- after the answer): the next POST then never overlaps that stream, which some
-- servers (one transport per request) cannot take.
local ANSWER_HOLD = 1.0

-- Reads one event stream to its end. want: the id of the request whose answer
-- this stream owes (nil: the server's own stream). Resumes with GET +
-- Last-Event-ID when it ends before that answer came.
function T:read_stream(st, want)
  self.streams[st] = true
  local last_id, retry = nil, DEFAULT_RETRY
  local resumes = 0
  while true do
    local got_answer = false
    local held
    while true do
      local ok, ev = pcall(st.next, st)
      if not ok or not ev then break end
      if ev.id then last_id = ev.id end
      if ev.retry then retry = ev.retry / 1000 end
      if (ev.event == "message" or ev.event == nil or ev.event == "") and ev.data ~= "" then
        resumes = 0
        if want ~= nil and #ev.data <= self.max_line and response_id(ev.data) == want then
          got_answer = true
          held = { data = ev.data }
          local h = held
          core.spawn_background(function()
            core.sleep(ANSWER_HOLD)
            if not h.done then
              h.done = true
              deliver(self, h.data, want)
            end
          end)
        else
          deliver(self, ev.data, want)
        end
      end
    end
    self.streams[st] = nil
    pcall(st.close, st)
    if held and not held.done then
      held.done = true
      deliver(self, held.data, want)
    end
    if self.closed or self.dead then return end
    if want ~= nil and got_answer then return end
    if want == nil and self.get_refused then return end
    -- resume: the server's retry interval, then a GET with the last event id
    if (want ~= nil and last_id == nil) or resumes >= MAX_RESUMES then
      if want ~= nil then
        -- the answer will not come: tell the peer its request failed
        local msg = json.encode({ jsonrpc = "2.0", id = want, error = { code = -32000,
          message = "the server's event stream ended before its answer (no event id to "
            .. "resume from)" } })
        self.on_message(msg, { related = want })
      end
      return
    end
    resumes = resumes + 1
    local sok = pcall(core.sleep, retry)
    if not sok or self.closed then return end
    local extra = { Accept = "text/event-stream" }
    if last_id then extra["Last-Event-ID"] = last_id end
    local nst, gerr, gcode, resp = core.http_stream{ url = self.url, method = "GET",
      headers = self:headers(extra), connect_timeout = self.connect_timeout,
      idle_timeout = 3600, max_line = self.max_line + 1024, max_event = self.max_line + 1024 }
    if not nst then
      if gcode == "status" and resp and (resp.status == 405 or resp.status == 404) and want == nil then
        self.get_refused = true
        return
      end
      if resumes >= MAX_RESUMES then return end
    else
      st = nst
      self.streams[st] = true
    end
  end
end

-- The server's own stream (GET), opened once initialized: waited for up to its
-- headers, so what the server sends on it from then on (a request not tied to
-- one of ours) is not lost; then read in the background.
function T:initialized()
  if self.mode ~= "streamable" then return end
  local ok, st = pcall(core.http_stream, { url = self.url, method = "GET",
    headers = self:headers({ Accept = "text/event-stream" }),
    connect_timeout = self.connect_timeout, header_timeout = 10, idle_timeout = 3600,
    max_line = self.max_line + 1024, max_event = self.max_line + 1024 })
  if not ok then error(st, 0) end
  if not st then
    self.get_refused = true
    return
  end
  local ctype = st.headers["content-type"] or ""
  if not ctype:lower():find("text/event-stream", 1, true) then
    st:close()
    self.get_refused = true
    return
  end
  core.spawn_background(function() self:read_stream(st, nil) end)
end

-- ---- legacy HTTP+SSE ----

local function resolve(base, ref)
  if ref:match("^https?://") then return ref end
  local origin = base:match("^(https?://[^/?#]+)")
  if ref:sub(1, 1) == "/" then return origin .. ref end
  local dir = base:match("^(https?://[^?#]*/)") or (origin .. "/")
  return dir .. ref
end

function T:legacy_connect()
  self.mode = "legacy"
  local st, err, code = core.http_stream{ url = self.url, method = "GET",
    headers = self:headers({ Accept = "text/event-stream" }),
    connect_timeout = self.connect_timeout, idle_timeout = 3600,
    max_line = self.max_line + 1024, max_event = self.max_line + 1024 }
  if not st then
    return nil, "cannot open the event stream of '" .. host_of(self.url) .. "': " .. tostring(err),
      code
  end
  local first = st:next()
  if not first or first.event ~= "endpoint" then
    st:close()
    return nil, "the legacy event stream of '" .. host_of(self.url) .. "' did not start with an "
      .. "endpoint event", "protocol"
  end
  local ep = resolve(self.url, first.data)
  if host_of(ep) ~= host_of(self.url) then
    st:close()
    return nil, "the legacy endpoint '" .. ep .. "' is not on the server's origin", "protocol"
  end
  self.endpoint = ep
  self.legacy_stream = st
  core.spawn_background(function()
    self.streams[st] = true
    while true do
      local ok, ev = pcall(st.next, st)
      if not ok or not ev then break end
      if ev.event == "message" then deliver(self, ev.data, nil) end
    end
    self.streams[st] = nil
    dead(self, "the server's event stream ended", "closed")
  end)
  return true
end

-- ---- sending ----

function T:send(msg, opts)
  if self.closed then return nil, "the connection is closed", "closed" end
  if self.dead then return nil, self.dead, "closed" end
  if self.start_error then return nil, self.start_error[1], self.start_error[2] end
  local body, eerr = json.encode(msg)
  if not body then return nil, "cannot encode the message: " .. tostring(eerr), "encode" end
  if self.mode == "legacy" then
    local resp, err, code = core.http_request{ url = self.endpoint, method = "POST", body = body,
      headers = self:headers({ ["Content-Type"] = "application/json" }),
      connect_timeout = self.connect_timeout }
    if not resp then return nil, tostring(err), code end
    if resp.status // 100 ~= 2 then
      return nil, "http: status " .. resp.status .. " from '" .. host_of(self.endpoint) .. "'",
        "status"
    end
    return true
  end
  local is_request = msg.method ~= nil and msg.id ~= nil
  local st, err, code, resp = core.http_stream{ url = self.url, method = "POST", body = body,
    events = "auto", headers = self:headers({ ["Content-Type"] = "application/json",
      Accept = "application/json, text/event-stream" }), connect_timeout = self.connect_timeout,
    idle_timeout = 3600, max_body = self.max_line, max_line = self.max_line + 1024,
    max_event = self.max_line + 1024 }
  if not st then
    if code == "status" and resp then
      local status = resp.status
      if msg.method == "initialize" and self.legacy == "auto" and not self.session_id
         and (status == 400 or status == 404 or status == 405) then
        local ok, lerr, lcode = self:legacy_connect()
        if not ok then
          return nil, "Streamable HTTP answered " .. status .. " and the HTTP+SSE fallback "
            .. "failed: " .. tostring(lerr), lcode
        end
        return self:send(msg, opts)
      end
      if status == 404 and self.session_id then
        dead(self, "the server ended session " .. self.session_id .. " (404)", "closed")
        return nil, "the session expired (404): c:restart() starts a new one", "closed"
      end
      local detail = (resp.body or ""):sub(1, 200):gsub("%s+", " ")
      return nil, tostring(err) .. (detail ~= "" and (": " .. detail) or ""), "status"
    end
    return nil, tostring(err), code
  end
  local sid = st.headers["mcp-session-id"]
  if sid and sid ~= "" and msg.method == "initialize" then self.session_id = sid end
  if st.body ~= nil then
    -- a whole JSON answer (or 202 with nothing)
    if st.body:find("%S") then deliver(self, st.body, msg.id) end
    return true
  end
  -- an event stream: read it in the background, the answer arrives through on_message
  core.spawn_background(function() self:read_stream(st, is_request and msg.id or nil) end)
  return true
end

function T:close()
  if self.closed then return end
  self.closed = true
  for st in pairs(self.streams) do pcall(st.close, st) end
  self.streams = {}
  if self.mode == "streamable" and self.session_id then
    pcall(core.http_request, { url = self.url, method = "DELETE", headers = self:headers(),
                               timeout = 5, connect_timeout = self.connect_timeout })
  end
end

return M
