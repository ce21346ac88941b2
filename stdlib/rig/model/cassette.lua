-- rig.model.record / rig.model.replay: cassettes of model calls.
--
--   local m = rig.model.record(model, "calls.jsonl")   -- the same model, writing each call
--   local m = rig.model.replay("calls.jsonl")          -- served back offline
--
-- A cassette is JSON lines. The first line describes the model (never its key):
--   {"cassette":"luarig-model/1","model":{"provider":…,"name":…,…}}
-- then one line per HTTP attempt, written when it ends:
--   {"request":{"path":"/messages","body":{…}},
--    "response":{"status":200,"events":[["message_start","{…}"],…],"end":"done"}}
-- an event is [name, data], or [name, data, true] for a last event the end of the
-- stream cut short (it replays as such: "truncated", not "protocol");
-- "end" is "done", or {"message":…,"code":…} when the stream failed part-way; an
-- attempt refused with an HTTP status has "response":{"status":429,"error":{…}}.
-- Replay checks each request body against the next recorded one (as JSON, key
-- order aside) and fails with code "invalid_request" naming the first difference.

local json = require "rig.json"

local C = {}

local FORMAT = "luarig-model/1"
local model_keys = { "provider", "name", "base_url", "tools", "thinking", "max_tokens",
                     "temperature", "top_p", "stop", "effort", "prices", "cache" }

local function describe(m)
  local d = {}
  for _, k in ipairs(model_keys) do d[k] = m[k] end
  if m.stop then d.stop = json.array(m.stop) end
  if m.cache == false then d.cache = "off" end
  return d
end

-- ---- recording ----

local Tee = {}
Tee.__index = Tee

function Tee:read()
  local data, ev, code = self.inner:read()
  if data then
    local evs = self.events
    -- a third element, true: the last event, cut short by the end of the stream
    evs[#evs + 1] = json.array { ev, data, code == true or nil }
  elseif ev ~= nil or code ~= nil then
    self.ending = { message = ev, code = code }
  else
    self.ending = "done"
  end
  return data, ev, code
end

function Tee:close()
  if self.inner then
    self.inner:close()
    self.inner = nil
    self.writer(self.path, self.body, { status = 200, events = json.array(self.events),
      ["end"] = self.ending or { message = "closed before the end", code = "cancelled" } })
  end
end

function C.record(model, file, M)
  if not M.is_model(model) then error("rig.model.record: expects a model (from rig.model{})", 3) end
  local m = rawget(model, "_m")
  if not M._providers[m.provider] or rawget(model, "_open") then
    error("rig.model.record: only HTTP provider models can be recorded (got '"
      .. m.provider .. "')", 3)
  end
  if type(file) ~= "string" or file == "" then error("rig.model.record: expects a file name", 3) end
  local f, err = io.open(file, "w")
  if not f then error("rig.model.record: cannot write '" .. file .. "': " .. tostring(err), 3) end
  f:write(assert(json.encode { cassette = FORMAT, model = describe(m) }), "\n")
  f:flush()
  local codec = rawget(model, "_codec")
  local req_path = M._path(m, codec)

  local function writer(path, body, response)
    local line = assert(json.encode { request = { path = path, body = json.raw(body) },
                                      response = response })
    f:write(line, "\n")
    f:flush()
  end

  local http_open = M._http_open
  local function open(st)
    local tr, msg, code, detail = http_open(st)
    if not tr then
      if code ~= "cancelled" then
        writer(req_path, st.body, { status = detail and detail.status or 0,
          error = { message = msg, code = code, detail = detail } })
      end
      return nil, msg, code, detail
    end
    return setmetatable({ inner = tr, events = {}, path = req_path, body = st.body,
                          writer = writer }, Tee)
  end
  return M._make(m, codec, { _open = open })
end

-- ---- replay ----

local function show(v)
  local s = json.encode(v) or tostring(v)
  if #s > 80 then s = s:sub(1, 77) .. "..." end
  return s
end

-- The first place two decoded JSON values differ, as a path and a description.
local function first_difference(a, b, path)
  if type(a) ~= type(b) then
    return path, "recorded " .. show(a) .. ", got " .. show(b)
  end
  if type(a) ~= "table" then
    if a ~= b then return path, "recorded " .. show(a) .. ", got " .. show(b) end
    return nil
  end
  if json.is_array(a) or json.is_array(b) then
    for i = 1, math.max(#a, #b) do
      if a[i] == nil then return path .. "[" .. i .. "]", "not recorded, got " .. show(b[i]) end
      if b[i] == nil then return path .. "[" .. i .. "]", "recorded " .. show(a[i]) .. ", missing now" end
      local p, d = first_difference(a[i], b[i], path .. "[" .. i .. "]")
      if p then return p, d end
    end
    return nil
  end
  local keys = {}
  for k in pairs(a) do keys[#keys + 1] = k end
  for k in pairs(b) do if a[k] == nil then keys[#keys + 1] = k end end
  table.sort(keys, function(x, y) return tostring(x) < tostring(y) end)
  for _, k in ipairs(keys) do
    local p = path .. "." .. tostring(k)
    if a[k] == nil then return p, "not recorded, got " .. show(b[k]) end
    if b[k] == nil then return p, "recorded " .. show(a[k]) .. ", missing now" end
    local q, d = first_difference(a[k], b[k], p)
    if q then return q, d end
  end
  return nil
end

local Player = {}
Player.__index = Player

function Player:read()
  local i = self.i
  local e = self.events[i]
  if e then
    self.i = i + 1
    return e[2], e[1], e[3] == true or nil
  end
  if self.ending ~= "done" and self.ending ~= nil then
    local en = self.ending
    self.ending = nil
    return nil, en.message, en.code
  end
  return nil
end

function Player:close() self.events = {} end

local function bad(file, n, msg) error("rig.model.replay: " .. file .. ":" .. n .. ": " .. msg, 0) end

local function load(file)
  local f, err = io.open(file, "r")
  if not f then error("rig.model.replay: cannot read '" .. file .. "': " .. tostring(err), 0) end
  local header, calls, n = nil, {}, 0
  for line in f:lines() do
    n = n + 1
    if line ~= "" then
      local v, jerr = json.decode(line)
      if type(v) ~= "table" then bad(file, n, "not JSON (" .. tostring(jerr) .. ")") end
      if not header then
        if v.cassette ~= FORMAT or type(v.model) ~= "table" then
          bad(file, n, "not a luarig model cassette (no \"cassette\":\"" .. FORMAT .. "\" line)")
        end
        header = v
      else
        local rq, rs = v.request, v.response
        if type(rq) ~= "table" or type(rq.body) ~= "table" or type(rs) ~= "table"
           or math.type(rs.status) ~= "integer" then
          bad(file, n, "an interaction needs request.body and response.status")
        end
        if rs.events ~= nil then
          if type(rs.events) ~= "table" then bad(file, n, "response.events must be a list") end
          for i, e in ipairs(rs.events) do
            if type(e) ~= "table" or type(e[1]) ~= "string" or type(e[2]) ~= "string"
               or (e[3] ~= nil and e[3] ~= true) then
              bad(file, n, "response.events[" .. i .. "] must be [event, data] or [event, data, true]")
            end
          end
        elseif type(rs.error) ~= "table" or type(rs.error.message) ~= "string" then
          bad(file, n, "a response needs events or an error")
        end
        calls[#calls + 1] = { body = rq.body, response = rs, line = n }
      end
    end
  end
  f:close()
  if not header then bad(file, 1, "empty cassette") end
  return header, calls
end

function C.replay(file, opts, M)
  if type(file) ~= "string" or file == "" then error("rig.model.replay: expects a file name", 3) end
  if opts ~= nil and type(opts) ~= "table" then error("rig.model.replay: options must be a table", 3) end
  for k in pairs(opts or {}) do
    if k ~= "retry" then error("rig.model.replay: unknown option '" .. tostring(k) .. "'", 3) end
  end
  local header, calls = M._checked(3, load, file)
  local def = {}
  for k, v in pairs(header.model) do def[k] = v end
  -- cassettes from before prompt caching were recorded without it
  if def.cache == nil then def.cache = "off" end
  -- the recorded attempts are served back-to-back: no waiting between retries
  def.retry = (opts and opts.retry) or { attempts = 20, delay = 0, max_delay = 0,
                                          retry_after_max = 0 }
  local m, codec = M._checked(3, M._check_model, def)
  m.key_required = false
  local served = 0
  local function open(st)
    served = served + 1
    local call = calls[served]
    if not call then
      return nil, string.format("replay: the cassette has no call %d (it holds %d)", served, #calls),
        "invalid_request"
    end
    local got = json.decode(st.body)
    local path, what = first_difference(call.body, got, "$")
    if path then
      return nil, string.format("replay: request %d does not match %s:%d at %s: %s", served, file,
        call.line, path, what), "invalid_request"
    end
    local rs = call.response
    if rs.error then
      local e = rs.error
      return nil, e.message, e.code or "server", e.detail
    end
    return setmetatable({ events = rs.events, i = 1, ending = rs["end"] }, Player)
  end
  local model = M._make(m, codec, { _open = open })
  rawset(model, "remaining", function() return #calls - served end)
  return model
end

return C
