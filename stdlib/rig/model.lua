-- rig.model: language models behind one streaming interface.
--
--   local m = rig.model{ provider = "anthropic", name = "claude-sonnet-4-5",
--     api_key_env = "ANTHROPIC_API_KEY", base_url = nil, tools = true, thinking = false,
--     max_tokens = 4096, temperature = nil, top_p = nil, stop = nil, effort = nil,
--     prices = { input =, output =, cache_read =, cache_write = },  -- $ per million tokens
--     cache = "auto",           -- prompt caching: "auto", "off" or a table (docs/caching.md)
--     retry = { attempts = 5, delay = 1, max_delay = 30, retry_after_max = 60 },
--     timeouts = { connect = 10, header = 60, idle = 120, total = 600 },  -- seconds: connect
--                               -- and header per attempt, idle between bytes, total the
--                               -- deadline of one call (invoke or stream, every attempt and
--                               -- backoff included, from the call to the last event)
--     headers = { ["anthropic-beta"] = "…" },
--     context_window = nil,     -- tokens the model reads at most (input + output); the
--                               -- base of a loop's automatic compaction (rig.loop compaction.at)
--     structured_output = nil } -- the model takes request.output_schema natively: default
--                               -- true for openai, openai-responses, anthropic; false for
--                               -- openai-compatible and rig.model.script (a loop's
--                               -- output_schema then goes through a reserved final tool)
--   provider: "openai" (chat completions), "openai-responses", "anthropic",
--   "openai-compatible" (chat completions at any base_url: Ollama, vLLM, llama.cpp),
--   "gemini" (Google's generateContent; key from GEMINI_API_KEY, else GOOGLE_API_KEY).
--
--   rig.model{ "anthropic/claude-sonnet-4-5" [, field = override …] }
--     a model of the catalog (rig.model.catalog, docs/models-catalog.md): its
--     context window, max output, prices and capabilities, then the overrides
--
--   local resp = m:invoke(request)      -- or nil, message, code, detail
--   local st = m:stream(request [, { cache = c }]) -- or nil, message, code, detail
--     cache: a table the caller keeps across calls, { messages = setmetatable({},
--     { __mode = "k" }) }: messages (and a tools list) passed before are not
--     checked and copied again, and one already in normal form is not copied
--     at all; the caller promises not to change them
--     a user message (and a tool_result's content list) may hold image and document
--     blocks { type = "image" | "document", media_type, data | blob | url, name? }
--     (rig.model.media, docs/media.md); request.blobs = function(sha256) -> bytes
--     reads the blob ones back (a session gives its store's)
--   for chunk in st:chunks() do … end   -- { type = "text"|"thinking"|"tool_use"|"refusal", … }
--   local resp = st:result()            -- nil, message, code, detail on failure
--   resp = { message = { role = "assistant", content = { blocks } }, usage = { input_tokens,
--            output_tokens, cache_read_tokens, cache_creation_tokens, reasoning_tokens, cost },
--            finish_reason = "stop"|"length"|"tool_use"|"content_filter"|"refusal",
--            model = "…", attempts = n }
--
--   rig.model.script{ steps }            a deterministic model (tests, demos)
--   rig.model.record(model, FILE)        the same model, writing a cassette
--   rig.model.replay(FILE)               a model serving a cassette offline
--
-- Failure codes (docs/models.md has the table): network, timeout (a timeouts.* limit),
-- rate_limited, overloaded, auth, invalid_request, context_length, server, truncated
-- (the stream ended, or was cut inside an event, before its final event), cancelled,
-- protocol (bytes the provider's format does not allow, or a 2xx answer that is no
-- event stream: its status, content type and first bytes are in the message),
-- too_large (an event line over 1 MiB or an event over 16 MiB). Retried before the
-- first chunk: network, timeout, rate_limited, overloaded, server, truncated, unless
-- the next attempt would start past timeouts.total. Misuse (a malformed model or
-- request) raises.
-- Keys are read from the environment at each call and go nowhere but the
-- request's headers.

local json = require "rig.json"
local accum = require "rig.model.accum"
local request_mod = require "rig.model.request"
local cache_mod = require "rig.model.cache"
local media_mod = require "rig.model.media"

local M = {}

local providers = {
  ["openai"] = { codec = "rig.model.openai", key_env = "OPENAI_API_KEY", key_required = true },
  ["openai-compatible"] = { codec = "rig.model.openai", key_env = nil, key_required = false,
                            base_required = true },
  ["openai-responses"] = { codec = "rig.model.responses", key_env = "OPENAI_API_KEY",
                           key_required = true },
  ["anthropic"] = { codec = "rig.model.anthropic", key_env = "ANTHROPIC_API_KEY",
                    key_required = true },
  ["gemini"] = { codec = "rig.model.gemini", key_env = "GEMINI_API_KEY",
                 key_env_alt = "GOOGLE_API_KEY", key_required = true },
}
M.providers = { "anthropic", "gemini", "openai", "openai-compatible", "openai-responses" }

local efforts = { minimal = true, low = true, medium = true, high = true, xhigh = true, max = true }

local fields = {
  provider = true, name = true, api_key_env = true, base_url = true, tools = true,
  thinking = true, max_tokens = true, temperature = true, top_p = true, stop = true,
  effort = true, prices = true, retry = true, timeouts = true, headers = true,
  context_window = true, structured_output = true, cache = true,
}

-- Providers whose codec sends request.output_schema natively by default.
local NATIVE_OUTPUT = { openai = true, ["openai-responses"] = true, anthropic = true,
                        gemini = true }

local RETRY_DEFAULT = { attempts = 5, delay = 1, max_delay = 30, retry_after_max = 60 }
local TIMEOUTS_DEFAULT = { connect = 10, header = 60, idle = 120, total = 600 }

-- Validation raises without a position; the public entry points re-raise at the
-- caller's line.
local function fail(where, msg)
  error(where .. ": " .. msg, 0)
end

local function checked(level, f, ...)
  local ok, a, b = pcall(f, ...)
  if not ok then error(a, level + 1) end
  return a, b
end

local function check_number(where, name, v, lo, hi, integer)
  if type(v) ~= "number" or v ~= v then
    fail(where, "field '" .. name .. "' must be a number", 3)
  end
  if integer and math.type(v) ~= "integer" then
    if v ~= math.floor(v) then fail(where, "field '" .. name .. "' must be an integer", 3) end
    v = math.tointeger(v)
  end
  if (lo and v < lo) or (hi and v > hi) then
    fail(where, string.format("field '%s' must be between %s and %s (got %s)", name,
      tostring(lo), tostring(hi), tostring(v)), 3)
  end
  return v
end

local function sub_table(where, name, v, allowed, defaults)
  local out = {}
  for k, d in pairs(defaults or {}) do out[k] = d end
  if v == nil then return out end
  if type(v) ~= "table" then fail(where, "field '" .. name .. "' must be a table", 3) end
  for k, x in pairs(v) do
    if not allowed[k] then
      fail(where, "unknown field '" .. name .. "." .. tostring(k) .. "'", 3)
    end
    out[k] = check_number(where, name .. "." .. k, x, 0, allowed[k], k == "attempts")
  end
  return out
end

local function is_loopback(host)
  return host == "127.0.0.1" or host == "localhost" or host == "[::1]"
    or host:match("^127%.%d+%.%d+%.%d+$") ~= nil
end

-- https://host[:port][/path], or http:// for loopback only; no userinfo, query or fragment.
local function check_base_url(where, url)
  if type(url) ~= "string" then fail(where, "field 'base_url' must be a string", 3) end
  local scheme, rest = url:match("^(https?)://(.+)$")
  if not scheme then
    fail(where, "field 'base_url' must start with https:// (got '" .. url .. "')", 3)
  end
  local authority = rest:match("^([^/]*)")
  if authority:find("@", 1, true) then
    fail(where, "field 'base_url' must not carry credentials; use api_key_env", 3)
  end
  if rest:find("[?#]") then
    fail(where, "field 'base_url' must not have a query or fragment", 3)
  end
  if url:find("[%s%c]") then fail(where, "field 'base_url' must not contain spaces", 3) end
  local host = authority:match("^(%[[^%]]+%])") or authority:match("^([^:]+)")
  if not host or host == "" then fail(where, "field 'base_url' has no host", 3) end
  if scheme == "http" and not is_loopback(host:lower()) then
    fail(where, "field 'base_url' must use https:// (http:// only for loopback, got '"
      .. url .. "')", 3)
  end
  return (url:gsub("/+$", ""))
end

local header_refused = { authorization = true, ["x-api-key"] = true, ["api-key"] = true,
                         ["x-goog-api-key"] = true,
                         ["content-type"] = true, ["content-length"] = true, host = true }

local function check_common(where, def, m)
  if def.tools ~= nil and type(def.tools) ~= "boolean" then
    fail(where, "field 'tools' must be a boolean", 3)
  end
  m.tools = def.tools ~= false
  if def.context_window ~= nil then
    m.context_window = check_number(where, "context_window", def.context_window, 1, 1e9, true)
  end
  if def.structured_output ~= nil and type(def.structured_output) ~= "boolean" then
    fail(where, "field 'structured_output' must be a boolean", 3)
  end
  if def.structured_output == nil then
    m.structured_output = NATIVE_OUTPUT[m.provider] == true
  else
    m.structured_output = def.structured_output
  end
  if def.thinking ~= nil and type(def.thinking) ~= "boolean" then
    fail(where, "field 'thinking' must be a boolean", 3)
  end
  m.thinking = def.thinking == true
  m.max_tokens = def.max_tokens == nil and 4096
    or check_number(where, "max_tokens", def.max_tokens, 1, 10000000, true)
  if def.temperature ~= nil then
    m.temperature = check_number(where, "temperature", def.temperature, 0,
      m.provider == "anthropic" and 1 or 2)
  end
  if def.top_p ~= nil then m.top_p = check_number(where, "top_p", def.top_p, 0, 1) end
  if def.stop ~= nil then
    local stop = def.stop
    if type(stop) == "string" then stop = { stop } end
    if type(stop) ~= "table" or #stop == 0 then
      fail(where, "field 'stop' must be a string or a list of strings", 3)
    end
    local list = {}
    for i, s in ipairs(stop) do
      if type(s) ~= "string" or s == "" then
        fail(where, "field 'stop[" .. i .. "]' must be a non-empty string", 3)
      end
      list[i] = s
    end
    for k in pairs(stop) do
      if math.type(k) ~= "integer" or k < 1 or k > #list then
        fail(where, "field 'stop' must be a list of strings", 3)
      end
    end
    m.stop = list
  end
  if def.effort ~= nil then
    if not efforts[def.effort] then
      fail(where, "field 'effort' must be one of minimal, low, medium, high, xhigh, max (got '"
        .. tostring(def.effort) .. "')", 3)
    end
    m.effort = def.effort
  end
  if def.prices ~= nil then
    local inf = math.huge
    m.prices = sub_table(where, "prices", def.prices,
      { input = inf, output = inf, cache_read = inf, cache_write = inf, cache_creation = inf })
    -- cache_creation: the earlier name of cache_write
    local cw = m.prices.cache_creation
    if cw ~= nil then
      if m.prices.cache_write ~= nil and m.prices.cache_write ~= cw then
        fail(where, "fields 'prices.cache_write' and 'prices.cache_creation' (its earlier name)"
          .. " differ", 2)
      end
      m.prices.cache_write, m.prices.cache_creation = cw, nil
    end
  end
  m.cache = cache_mod.check(def.cache, function(msg) fail(where, msg, 2) end)
  m.retry = sub_table(where, "retry", def.retry,
    { attempts = 20, delay = 3600, max_delay = 3600, retry_after_max = 3600 }, RETRY_DEFAULT)
  if m.retry.attempts < 1 then fail(where, "field 'retry.attempts' must be at least 1", 2) end
  m.timeouts = sub_table(where, "timeouts", def.timeouts,
    { connect = 3600, header = 3600, idle = 86400, total = 86400 }, TIMEOUTS_DEFAULT)
  m.headers = {}
  if def.headers ~= nil then
    if type(def.headers) ~= "table" then fail(where, "field 'headers' must be a table", 2) end
    for k, v in pairs(def.headers) do
      if type(k) ~= "string" or not k:match("^[%w!#$%%&'*+.^_`|~-]+$") then
        fail(where, "field 'headers' has a bad header name '" .. tostring(k) .. "'", 2)
      end
      if header_refused[k:lower()] then
        fail(where, "field 'headers' may not set '" .. k .. "' (keys come from api_key_env)", 2)
      end
      if type(v) ~= "string" or v:find("[\r\n%z]") then
        fail(where, "field 'headers." .. k .. "' must be a one-line string", 2)
      end
      m.headers[k:lower()] = v
    end
  end
  return m
end

local function check_model(def)
  local where = "rig.model"
  if type(def) ~= "table" then fail(where, "expects a table of fields", 3) end
  for k in pairs(def) do
    if not fields[k] then fail(where, "unknown field '" .. tostring(k) .. "'", 3) end
  end
  local p = providers[def.provider]
  if not p then
    fail(where, "field 'provider' must be one of " .. table.concat(M.providers, ", ")
      .. " (got " .. (def.provider == nil and "nothing" or "'" .. tostring(def.provider) .. "'")
      .. ")", 3)
  end
  local m = { provider = def.provider }
  if type(def.name) ~= "string" or def.name == "" or #def.name > 256 or def.name:find("%c") then
    fail(where, "field 'name' must be a non-empty string (the provider's model id)", 3)
  end
  m.name = def.name
  if def.api_key_env ~= nil then
    if type(def.api_key_env) ~= "string" or not def.api_key_env:match("^[%a_][%w_]*$") then
      fail(where, "field 'api_key_env' must name an environment variable", 3)
    end
  end
  m.api_key_env = def.api_key_env or p.key_env
  if not def.api_key_env then m.key_env_alt = p.key_env_alt end
  m.key_required = p.key_required
  local codec = require(p.codec)
  if codec.check_model then
    local err = codec.check_model(m)
    if err then fail(where, err, 3) end
  end
  if def.base_url ~= nil then
    m.base_url = check_base_url(where, def.base_url)
  elseif p.base_required then
    fail(where, "field 'base_url' is required for provider '" .. def.provider .. "'", 3)
  else
    m.base_url = codec.default_base_url
  end
  check_common(where, def, m)
  return m, codec
end

-- The request path of a model: fixed per codec, or built from the model (gemini).
function M._path(m, codec)
  if codec.url_path then return codec.url_path(m) end
  return codec.path
end

-- ---- usage and cost ----

local function add_cost(usage, prices)
  if not prices or not usage then return end
  local cost = 0
  local function part(n, p) if n and p then cost = cost + n * p end end
  part(usage.input_tokens, prices.input)
  part(usage.output_tokens, prices.output)
  part(usage.cache_read_tokens, prices.cache_read or prices.input)
  part(usage.cache_creation_tokens, prices.cache_write or prices.input)
  usage.cost = cost / 1e6
end

-- ---- retries ----

local retryable = { network = true, timeout = true, rate_limited = true, overloaded = true,
                    server = true, truncated = true }

local function backoff(retry, attempt, retry_after)
  local d = retry.delay * (2 ^ (attempt - 1))
  if d > retry.max_delay then d = retry.max_delay end
  d = d * (0.9 + 0.2 * math.random())
  if retry_after then
    local ra = math.min(retry_after, retry.retry_after_max)
    if ra > d then d = ra end
  end
  return d
end

-- ---- transports: where an attempt's events come from ----
-- open(st) -> transport | nil, msg, code, detail; transport:read() -> data, event | nil
-- (the end) | nil, msg, code; transport:close().

local function short(s, n)
  s = tostring(s or "")
  n = n or 300
  s = s:gsub("[%c]", " ")
  if #s > n then s = s:sub(1, n) .. "…" end
  return s
end

local function status_failure(m, codec, resp)
  local status = resp and resp.status or 0
  local body = resp and resp.body and json.decode(resp.body) or nil
  if type(body) ~= "table" then body = nil end
  -- info (optional): { retry_after = s, message = text } from the body itself
  local code, provider_code, info = codec.classify(status, body, resp and resp.headers or {})
  local detail = { status = status, provider_code = provider_code }
  local h = resp and resp.headers or {}
  detail.request_id = h["x-request-id"] or h["request-id"] or h["anthropic-request-id"]
  local ra = h["retry-after"]
  if ra and ra:match("^%s*%d+%s*$") then detail.retry_after = tonumber(ra) end
  if not detail.retry_after and info then detail.retry_after = info.retry_after end
  local pmsg
  if body then
    local e = type(body.error) == "table" and body.error or body
    pmsg = type(e.message) == "string" and e.message or nil
  end
  if not pmsg and info then pmsg = info.message end
  local msg = string.format("%s: HTTP %d%s%s", m.provider, status,
    provider_code and (" (" .. short(provider_code, 64) .. ")") or "",
    pmsg and (": " .. short(pmsg)) or "")
  return nil, msg, code, detail
end

local function http_open(st)
  local m, codec = st.m, st.codec
  local key
  if m.api_key_env then
    key = os.getenv(m.api_key_env)
    if key == "" then key = nil end
    if not key and m.key_env_alt then
      key = os.getenv(m.key_env_alt)
      if key == "" then key = nil end
    end
  end
  if m.key_required and not key then
    return nil, string.format("%s: the environment variable %s is not set%s", m.provider,
      tostring(m.api_key_env), m.key_env_alt and (" (nor " .. m.key_env_alt .. ")") or ""), "auth"
  end
  local headers = codec.headers(m, key)
  headers["content-type"] = "application/json"
  headers["accept"] = "text/event-stream"
  for k, v in pairs(m.headers) do headers[k] = v end
  local t = m.timeouts
  local left = st.deadline and math.max(st.deadline - rig.now(), 0.001) or nil
  local s, msg, code, resp = rig.http.stream{
    url = m.base_url .. M._path(m, codec), method = "POST", headers = headers, body = st.body,
    connect_timeout = t.connect, header_timeout = t.header, idle_timeout = t.idle,
    timeout = left,
  }
  key, headers = nil, nil
  if not s then
    if code == "status" then return status_failure(m, codec, resp) end
    return nil, m.provider .. ": " .. tostring(msg):gsub("^http: ", ""), code
  end
  return s
end

-- ---- the stream ----

local Stream = {}
Stream.__index = Stream

-- Provider messages sometimes quote the key they rejected ("Incorrect API key
-- provided: sk-ab***yz"); nothing that looks like a key leaves in a message.
local function redact(msg)
  msg = tostring(msg)
  msg = msg:gsub("%f[%w]([sprk]k%-[%w%-_%*%.]+)", "[redacted]")
  msg = msg:gsub("%f[%w](key%-[%w%-_%*%.]+)", "[redacted]")
  msg = msg:gsub("%f[%w](AIza[%w%-_%*%.]+)", "[redacted]") -- Google API keys
  msg = msg:gsub("([Bb]earer%s+)%S+", "%1[redacted]")
  return msg
end

local function stream_fail(st, msg, code, detail)
  msg = redact(msg)
  st.state = "failed"
  st.err = { msg, code, detail }
  if st.transport then st.transport:close(); st.transport = nil end
  if st.on_end then st.on_end(st, nil, msg, code) end
  return nil, msg, code, detail
end

-- ---- the deadline (timeouts.total): one call, every attempt and backoff included ----

-- slack: for telling a transfer's own timeout from the deadline (its clock
-- started a little after ours)
local function past_deadline(st, slack)
  return st.deadline ~= nil and rig.now() >= st.deadline - (slack or 0)
end
local SLACK = 0.05

local function deadline_message(st)
  return string.format("%s: the call did not end within timeouts.total (%g s)", st.m.provider,
    st.m.timeouts.total)
end

-- Before another attempt: sleeps the backoff, or fails with the last failure
-- when the backoff would end past the deadline (there is no time left to try).
local function retry_wait(st, msg, code, detail)
  local d = backoff(st.m.retry, st.attempts, detail and detail.retry_after)
  if st.deadline and rig.now() + d >= st.deadline then
    return stream_fail(st, string.format("%s (not retried: attempt %d would start past "
      .. "timeouts.total, %g s)", msg, st.attempts + 1, st.m.timeouts.total), code, detail)
  end
  rig.sleep(d)
  return true
end

-- An HTTP event stream is read in batches (st:batch: one string per event, no
-- table and no C call per event) and handed out one event at a time, as
-- transport:read() does: data, event [, true for the cut-short last event].
local function batch_reader(tr)
  local buf, i, n, cut = {}, 1, 0, nil
  return function()
    if i > n then
      local k, c, code = tr:batch(buf, 64)
      if not k then return nil, c, code end
      i, n, cut = 1, k, c
    end
    local j = 2 * i
    i = i + 1
    return buf[j - 1], buf[j], i > n and cut or nil
  end
end

-- Opens one attempt after another until one is established or the failure is final.
local function establish(st)
  while true do
    if past_deadline(st) then return stream_fail(st, deadline_message(st), "timeout") end
    st.attempts = st.attempts + 1
    local tr, msg, code, detail = st.open(st)
    if tr then
      st.transport = tr
      st.read = type(tr.batch) == "function" and batch_reader(tr) or tr.read
      st.events = 0
      return true
    end
    if code == "timeout" and past_deadline(st, SLACK) then
      return stream_fail(st, deadline_message(st), "timeout")
    end
    if code == "cancelled" or not retryable[code] or st.attempts >= st.m.retry.attempts then
      return stream_fail(st, msg, code, detail)
    end
    if not retry_wait(st, msg, code, detail) then return end
  end
end

-- A 2xx answer that did not decode: when its content type is not an event
-- stream (a proxy's HTML page, a JSON error with status 200), say so with the
-- status, the content type and the first bytes; a protocol failure, not
-- retried (the same proxy answers the same way). Otherwise, when no event
-- came at all, the first bytes join the message.
local function not_a_stream(st, msg, code)
  local tr = st.transport
  local head = tr and type(tr.head) == "function" and tr:head() or nil
  if not head then return msg, code end
  local ctype = tr.headers and tr.headers["content-type"]
  if ctype and not ctype:lower():find("text/event-stream", 1, true) then
    return string.format("%s: HTTP %d answered with content type '%s', not an event stream; "
      .. "the body starts: '%s'", st.m.provider, tr.status or 0, short(ctype, 100),
      short(head, 200)), "protocol"
  end
  if st.events == 0 and head ~= "" then
    msg = msg .. string.format(" (HTTP %d, content type %s; the body starts: '%s')",
      tr.status or 0, ctype and ("'" .. short(ctype, 100) .. "'") or "none", short(head, 200))
  end
  return msg, code
end

local function new_decoder(st)
  local acc = accum.new()
  st.acc = acc
  local q = st.queue
  st.dec = st.codec.decoder(st.m, function(c)
    if not acc:add(c) then
      st.overflow = true
      return
    end
    st.emitted = true
    local t = st.qtail + 1
    q[t] = c
    st.qtail = t
  end)
end

-- Pulls events until a chunk is queued, the stream ends, or it fails.
local function pump(st)
  while st.qhead > st.qtail do
    if st.state ~= "open" then return end
    if past_deadline(st) then return stream_fail(st, deadline_message(st), "timeout") end
    -- cut: the transport's third value, true for a last event the end of the stream
    -- cut short before its blank line
    local data, ev, cut = st.read(st.transport)
    local msg, c, detail
    if data then
      st.events = st.events + 1
      local ok
      ok, msg, c, detail = st.dec:feed(data, ev)
      if ok and st.overflow then
        ok, msg, c = nil, st.m.provider .. ": the stream opened more than 4096 content blocks",
          "protocol"
      end
      if ok then goto continue end
      if cut == true and c == "protocol" then
        msg, c = string.format("%s: the stream ended inside an event (%d bytes of it came: '%s')",
          st.m.provider, #data, short(data, 120)), "truncated"
      end
    elseif ev == nil and cut == nil then
      if st.dec.done then
        st.state = "done"
        st.transport:close(); st.transport = nil
        return
      end
      msg, c = st.m.provider .. ": the stream ended before its final event", "truncated"
    else
      c = cut
      if c == "timeout" and past_deadline(st, SLACK) then
        msg = deadline_message(st)
      else
        msg = st.m.provider .. ": " .. tostring(ev):gsub("^http: ", "")
      end
    end
    if c == "protocol" or c == "truncated" then msg, c = not_a_stream(st, msg, c) end
    if c ~= "cancelled" and not st.emitted and retryable[c] and not past_deadline(st)
      and st.attempts < st.m.retry.attempts then
      st.transport:close(); st.transport = nil
      if not retry_wait(st, msg, c, detail) then return end
      new_decoder(st)
      if not establish(st) then return end
    else
      return stream_fail(st, msg, c, detail)
    end
    ::continue::
  end
end

-- st:next() -> chunk | nil (the end) | nil, message, code, detail
function Stream:next()
  local h = self.qhead
  if h > self.qtail then
    -- the queue is spent: start it over so a long stream does not grow it
    self.qhead, self.qtail = 1, 0
    if self.state == "open" then pump(self) end
    h = self.qhead
    if h > self.qtail then
      if self.state == "failed" then return nil, self.err[1], self.err[2], self.err[3] end
      return nil
    end
  end
  local q = self.queue
  local c = q[h]
  q[h] = nil
  self.qhead = h + 1
  return c
end

-- for chunk in st:chunks() do … end: ends at the end of the stream or at a failure
-- (st:result() tells which).
function Stream:chunks()
  return Stream.next, self
end

-- After the last chunk: the response, or nil, message, code, detail.
function Stream:result()
  while self.state == "open" do
    local c = self:next()
    if c == nil then break end
  end
  if self.state == "failed" then return nil, self.err[1], self.err[2], self.err[3] end
  if self.state == "closed" then
    return nil, self.m.provider .. ": the stream was closed", "cancelled"
  end
  if not self.resp then
    local dec = self.dec
    local usage = dec.usage or {}
    add_cost(usage, self.m.prices)
    self.resp = {
      message = self.acc:message(dec.finish_reason == "length"),
      usage = usage,
      finish_reason = dec.finish_reason or "stop",
      model = dec.model or self.m.name,
      attempts = self.attempts,
    }
    if self.on_end then self.on_end(self, self.resp) end
  end
  return self.resp
end

function Stream:close()
  if self.state == "open" then
    self.state = "closed"
    if self.on_end then self.on_end(self, nil, "closed", "cancelled") end
  end
  if self.transport then self.transport:close(); self.transport = nil end
end
Stream.__close = Stream.close
Stream.__gc = function(self) if self.transport then self.transport:close() end end

function Stream:__tostring()
  return string.format("rig.model.stream(%s/%s, %s)", self.m.provider, self.m.name, self.state)
end

-- ---- models ----

local Model = {}

local function start(self, request, opts)
  local m, codec = self._m, self._codec
  local cache
  if opts ~= nil then
    if type(opts) ~= "table" then error("rig.model: options must be a table", 3) end
    for k in pairs(opts) do
      if k ~= "cache" then error("rig.model: unknown option '" .. tostring(k) .. "'", 3) end
    end
    cache = opts.cache
    if cache ~= nil and type(cache) ~= "table" then
      error("rig.model: option 'cache' must be a table", 3)
    end
  end
  local req = checked(3, request_mod.normalize, request, m, nil, cache)
  -- with a cache: the messages normalize carried over from the last call,
  -- prepared then when that call's prepare succeeded, are not walked again
  local from = 1
  if cache and cache.prepared then from = math.min(cache.prepared, cache.reused or 0) + 1 end
  local mok, merr = media_mod.prepare(req, from)
  if not mok then return nil, m.provider .. ": " .. merr, "invalid_request" end
  if cache then cache.prepared = #req.messages end
  local body, err = codec.encode(m, req)
  if not body then error("rig.model: " .. tostring(err), 3) end
  local text
  if not codec.lazy_body then -- the script model encodes only when it estimates usage
    local jerr
    text, jerr = json.encode(body)
    if not text then error("rig.model: cannot encode the request: " .. tostring(jerr), 3) end
  end
  local st = setmetatable({ m = m, codec = codec, req = req, body = text, attempts = 0,
    queue = {}, qhead = 1, qtail = 0, state = "open", emitted = false, open = self._open or http_open,
    on_end = self._on_end }, Stream)
  -- the deadline of the whole call, streamed or not (every attempt and backoff in it)
  if m.timeouts.total and m.timeouts.total > 0 then st.deadline = rig.now() + m.timeouts.total end
  if self._on_start then self._on_start(st) end
  new_decoder(st)
  if not establish(st) then return nil, st.err[1], st.err[2], st.err[3] end
  return st
end

-- m:stream(request) -> st | nil, message, code, detail
function Model:stream(request, opts)
  return start(self, request, opts)
end

-- m:invoke(request) -> resp | nil, message, code, detail (streams underneath)
function Model:invoke(request)
  local st, msg, code, detail = start(self, request)
  if not st then return nil, msg, code, detail end
  local resp
  resp, msg, code, detail = st:result()
  st:close()
  return resp, msg, code, detail
end

-- m:encode(request) -> the request body this model would send (JSON text), for tests
-- and for inspecting what goes over the wire.
function Model:encode(request, opts)
  local req = checked(2, request_mod.normalize, request, self._m)
  local mok, merr = media_mod.prepare(req)
  if not mok then error("rig.model: " .. merr, 2) end
  local body, err = self._codec.encode(self._m, req)
  if not body then error("rig.model: " .. tostring(err), 2) end
  return assert(json.encode(body, opts))
end

local model_mt = {
  __index = function(t, k)
    local f = Model[k]
    if f then return f end
    local v = rawget(t, "_m")[k]
    if type(v) == "table" then
      local copy = {}
      for a, b in pairs(v) do copy[a] = b end
      return copy
    end
    if k == "key_required" or k == "key_env_alt" then return nil end
    return v
  end,
  __newindex = function(_, k)
    error("rig.model: a model is frozen (cannot set '" .. tostring(k) .. "')", 2)
  end,
  __tostring = function(t) return "rig.model(" .. t._m.provider .. "/" .. t._m.name .. ")" end,
  __metatable = "rig.model",
}

local function make(m, codec, extra)
  local raw = { _m = m, _codec = codec }
  for k, v in pairs(extra or {}) do raw[k] = v end
  return setmetatable(raw, model_mt)
end

function M.is_model(v)
  return type(v) == "table" and getmetatable(v) == "rig.model"
end

-- rig.model{ "provider/name", … }: the catalog's entry under the overrides.
local function expand(def)
  if type(def) == "table" and def[1] ~= nil then
    return require("rig.model.catalog").expand(def)
  end
  return def
end

function M.new(def)
  local m, codec = checked(2, function(d) return check_model(expand(d)) end, def)
  return make(m, codec)
end

-- internals for rig.model.script / record / replay
M._make = make
M._check_model = check_model
M._check_common = check_common
M._checked = checked
M._providers = providers
M._http_open = http_open

function M.script(def)
  return require("rig.model.script").new(def, M)
end

function M.record(model, file)
  return require("rig.model.cassette").record(model, file, M)
end

function M.replay(file, opts)
  return require("rig.model.cassette").replay(file, opts, M)
end

return setmetatable(M, {
  -- rig.model.catalog, loaded on first use (it reads the provider list above)
  __index = function(t, k)
    if k == "catalog" then
      local c = require "rig.model.catalog"
      rawset(t, "catalog", c)
      return c
    end
  end,
  __call = function(_, def)
    local m, codec = checked(2, function(d) return check_model(expand(d)) end, def)
    return make(m, codec)
  end,
})
