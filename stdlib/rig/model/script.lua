-- rig.model.script: a deterministic model for tests and demos.
--
--   local m = rig.model.script{ steps = { step, step, … }, name = "script",
--                               retry = { attempts = 1 }, prices = { … },
--                               context_window = n, structured_output = false,
--                               keep_calls = 64 }
--   structured_output = true: the model declares native structured output, so a
--   loop's output_schema arrives as request.output_schema (a step function sees
--   it) and the step's text is the answer; false (default): the runner uses its
--   reserved final tool instead.
--   -- or rig.model.script{ step, step, … }
--   step = {
--     text = "…" | { "piece", "piece" },      -- the reply text (a list: the exact chunks)
--     thinking = "…", signature = "…",        -- a thinking block first
--     tool_calls = { { name = "…", input = { … } | input_json = "…", id = "…"? } },
--     refusal = "…",
--     error = "message" | { message = "…", code = "overloaded" },  -- after any content
--     delay = s,          -- before the response starts
--     chunk = n,          -- split text, thinking and arguments into n-byte pieces
--     chunk_delay = s,    -- between chunks
--     finish_reason = "…", usage = { … }, model = "…",
--   }
--   or a function(request, n) -> step, called with the normalized request.
--
-- Each call to invoke/stream takes the next step; m:calls() lists the requests
-- received (normalized, as a codec sees them): calls()[n] is the nth call's
-- request while it is one of the last keep_calls (default 64; older ones read
-- nil, so a long run holds a bounded number of requests), #m:calls() counts
-- every call, pairs walks the ones kept (ipairs, from call 1, stops at the first
-- one dropped). m:remaining() counts the
-- steps left. Running out of steps raises. Usage, unless the step gives it, is
-- estimated: a token per 4 bytes of request JSON in, of content out.

local json = require "rig.json"
local estimable -- below

local S = {}

local step_fields = {
  text = true, thinking = true, signature = true, tool_calls = true, refusal = true,
  error = true, delay = true, chunk = true, chunk_delay = true, finish_reason = true,
  usage = true, model = true,
}
local finish_reasons = { stop = true, length = true, tool_use = true, content_filter = true,
                         refusal = true }
local codes = { network = true, timeout = true, rate_limited = true, overloaded = true,
                auth = true, invalid_request = true, context_length = true, server = true,
                truncated = true, cancelled = true, protocol = true }

local function fail(path, msg) error("rig.model.script: " .. path .. ": " .. msg, 0) end

local function check_step(step, path, level)
  if type(step) == "function" then return end
  if type(step) ~= "table" then fail(path, "must be a table or a function", level + 1) end
  for k in pairs(step) do
    if not step_fields[k] then fail(path, "unknown field '" .. tostring(k) .. "'", level + 1) end
  end
  local t = step.text
  if t ~= nil and type(t) ~= "string" then
    if type(t) ~= "table" then fail(path .. ".text", "must be a string or a list of strings", level + 1) end
    for i, s in ipairs(t) do
      if type(s) ~= "string" then fail(path .. ".text[" .. i .. "]", "must be a string", level + 1) end
    end
  end
  for _, k in ipairs { "thinking", "signature", "refusal", "model" } do
    if step[k] ~= nil and type(step[k]) ~= "string" then
      fail(path .. "." .. k, "must be a string", level + 1)
    end
  end
  for _, k in ipairs { "delay", "chunk_delay" } do
    if step[k] ~= nil and (type(step[k]) ~= "number" or step[k] < 0) then
      fail(path .. "." .. k, "must be a number of seconds", level + 1)
    end
  end
  if step.chunk ~= nil and (math.type(step.chunk) ~= "integer" or step.chunk < 1) then
    fail(path .. ".chunk", "must be a positive integer", level + 1)
  end
  if step.finish_reason ~= nil and not finish_reasons[step.finish_reason] then
    fail(path .. ".finish_reason", "unknown finish reason '" .. tostring(step.finish_reason) .. "'",
      level + 1)
  end
  local e = step.error
  if e ~= nil and type(e) ~= "string" then
    if type(e) ~= "table" or type(e.message) ~= "string" then
      fail(path .. ".error", "must be a message or { message =, code = }", level + 1)
    end
    if e.code ~= nil and not codes[e.code] then
      fail(path .. ".error.code", "unknown failure code '" .. tostring(e.code) .. "'", level + 1)
    end
  end
  if step.tool_calls ~= nil then
    if type(step.tool_calls) ~= "table" then fail(path .. ".tool_calls", "must be a list", level + 1) end
    for i, c in ipairs(step.tool_calls) do
      local p = path .. ".tool_calls[" .. i .. "]"
      if type(c) ~= "table" or type(c.name) ~= "string" then
        fail(p, "must be { name = …, input = { … } }", level + 1)
      end
      for k in pairs(c) do
        if k ~= "name" and k ~= "input" and k ~= "input_json" and k ~= "id" then
          fail(p, "unknown field '" .. tostring(k) .. "' (a call takes name, input or input_json, "
            .. "id)", level + 1)
        end
      end
      if c.input ~= nil and c.input_json ~= nil then
        fail(p, "gives both input and input_json", level + 1)
      end
      if c.input ~= nil and type(c.input) ~= "table" then fail(p .. ".input", "must be a table", level + 1) end
      if c.input_json ~= nil and type(c.input_json) ~= "string" then
        fail(p .. ".input_json", "must be a string", level + 1)
      end
    end
  end
  if step.usage ~= nil and type(step.usage) ~= "table" then
    fail(path .. ".usage", "must be a table", level + 1)
  end
end

-- Splits s into n-byte pieces without cutting a UTF-8 sequence.
local function pieces(s, n)
  if not n or #s <= n then return { s } end
  local out, i = {}, 1
  while i <= #s do
    local j = math.min(i + n - 1, #s)
    while j < #s and (s:byte(j + 1) or 0) & 0xC0 == 0x80 do j = j + 1 end
    out[#out + 1] = s:sub(i, j)
    i = j + 1
  end
  return out
end

local function tokens(bytes) return (bytes + 3) // 4 end

-- The items one step streams: chunk tables, then { final = … } or { error = … }.
local function plan(step, n, body)
  local items, out_bytes = {}, 0
  local idx = 0
  local function add(c) items[#items + 1] = { chunk = c } end
  if step.thinking or step.signature then
    local th = step.thinking or ""
    out_bytes = out_bytes + #th
    for _, p in ipairs(pieces(th, step.chunk)) do
      add { type = "thinking", index = idx, thinking = p }
    end
    if step.signature then add { type = "thinking", index = idx, signature = step.signature } end
    idx = idx + 1
  end
  if step.text then
    local list = type(step.text) == "table" and step.text or pieces(step.text, step.chunk)
    for _, p in ipairs(list) do
      out_bytes = out_bytes + #p
      add { type = "text", index = idx, text = p }
    end
    idx = idx + 1
  end
  if step.refusal then
    out_bytes = out_bytes + #step.refusal
    for _, p in ipairs(pieces(step.refusal, step.chunk)) do add { type = "refusal", text = p } end
  end
  for i, c in ipairs(step.tool_calls or {}) do
    local args = c.input_json or assert(json.encode(c.input or {}))
    if args == "[]" then args = "{}" end
    out_bytes = out_bytes + #args
    local id = c.id or string.format("call_%d_%d", n, i)
    local first = true
    for _, p in ipairs(pieces(args, step.chunk)) do
      add { type = "tool_use", index = idx, id = first and id or nil,
            name = first and c.name or nil, input_json = p }
      first = false
    end
    idx = idx + 1
  end
  if step.error then
    local e = step.error
    local msg = type(e) == "string" and e or e.message
    items[#items + 1] = { error = { "script: " .. msg, type(e) == "table" and e.code or "server" } }
    return items
  end
  local usage = {}
  for k, v in pairs(step.usage or {}) do usage[k] = v end
  if not step.usage then
    usage.input_tokens = tokens(#body)
    usage.output_tokens = tokens(out_bytes)
    usage.cache_read_tokens, usage.cache_creation_tokens, usage.reasoning_tokens = 0, 0, 0
  end
  local finish = step.finish_reason
  if not finish then finish = (step.tool_calls and #step.tool_calls > 0) and "tool_use" or "stop" end
  items[#items + 1] = { final = { usage = usage, finish_reason = finish, model = step.model } }
  return items
end

-- The codec of a script model: the "wire" carries chunk tables.
local codec = { path = "", lazy_body = true }
function codec.encode(_, req) return req end

-- The request as JSON can hold it for the usage estimate: no blobs function,
-- media blocks as their type and size (a base64 image would count ~1.33 × its
-- bytes as text, which no provider bills).
local function media_stub(b)
  return { type = b.type, media_type = b.media_type, size = b.size or (b.data and #b.data), url = b.url }
end
estimable = function(req)
  local out = {}
  for k, v in pairs(req) do if k ~= "blobs" then out[k] = v end end
  local msgs
  for i, m in ipairs(req.messages or {}) do
    local content
    for j, b in ipairs(m.content) do
      local nb = b
      if b.type == "image" or b.type == "document" then
        nb = media_stub(b)
      elseif b.type == "tool_result" and type(b.content) == "table" then
        local c
        for k2, x in ipairs(b.content) do
          if x.type == "image" or x.type == "document" then
            c = c or { table.unpack(b.content) }
            c[k2] = media_stub(x)
          end
        end
        if c then
          nb = {}
          for k3, v3 in pairs(b) do nb[k3] = v3 end
          nb.content = json.array(c)
        end
      end
      if nb ~= b then
        content = content or { table.unpack(m.content) }
        content[j] = nb
      end
    end
    if content then
      msgs = msgs or { table.unpack(req.messages) }
      msgs[i] = { role = m.role, content = json.array(content) }
    end
  end
  if msgs then out.messages = json.array(msgs) end
  return out
end
function codec.headers() return {} end
function codec.classify() return "server" end
function codec.decoder(_, emit)
  local dec = { done = false }
  function dec.feed(self, item)
    if item.chunk then
      emit(item.chunk)
    else
      local f = item.final
      self.usage, self.finish_reason, self.model, self.done = f.usage, f.finish_reason, f.model, true
    end
    return true
  end
  return dec
end

local Transport = {}
Transport.__index = Transport
function Transport:read()
  local i = self.i
  local item = self.items[i]
  if not item then return nil end
  if i > 1 and self.chunk_delay then rig.sleep(self.chunk_delay) end
  self.i = i + 1
  if item.error then return nil, item.error[1], item.error[2] end
  return item, "script"
end
function Transport:close() self.items = {} end

function S.new(def, M)
  if type(def) ~= "table" then error("rig.model.script: expects { steps = { … } }", 3) end
  local steps = def.steps
  local opts = {}
  if steps == nil then
    steps = def
  else
    for k, v in pairs(def) do
      if k ~= "steps" and k ~= "name" and k ~= "retry" and k ~= "prices"
         and k ~= "context_window" and k ~= "structured_output" and k ~= "keep_calls" then
        error("rig.model.script: unknown field '" .. tostring(k) .. "'", 3)
      end
      opts[k] = v
    end
  end
  if type(steps) ~= "table" then error("rig.model.script: 'steps' must be a list", 3) end
  local list = {}
  for i, step in ipairs(steps) do
    M._checked(3, check_step, step, "steps[" .. i .. "]", 3)
    list[i] = step
  end
  for k in pairs(steps) do
    if math.type(k) ~= "integer" or k < 1 or k > #list then
      error("rig.model.script: steps must be a list (found key " .. tostring(k) .. ")", 3)
    end
  end
  -- the model fields, checked by rig.model's own rules (provider is a placeholder)
  local name = opts.name or "script"
  if type(name) ~= "string" or name == "" then error("rig.model.script: 'name' must be a string", 3) end
  local m = M._checked(3, M._check_common, "rig.model.script",
    { retry = opts.retry or { attempts = 1 }, prices = opts.prices,
      context_window = opts.context_window, structured_output = opts.structured_output },
    { provider = "script", name = name })

  local keep = opts.keep_calls
  if keep == nil then keep = 64 end
  if math.type(keep) ~= "integer" or keep < 0 then
    error("rig.model.script: 'keep_calls' must be an integer of at least 0", 3)
  end
  -- the last `keep` requests by call number; the view counts every call
  local kept, n, head, total = {}, 0, 1, #list
  local function open(st)
    if st.attempts == 1 then
      n = n + 1
      if keep > 0 then kept[n] = st.req end
      kept[n - keep] = nil
    end
    local step = list[head]
    if step == nil then
      error("rig.model.script: no step left for call " .. n .. " (the script has "
        .. (n - 1) .. ")", 0)
    end
    list[head] = nil
    head = head + 1
    if type(step) == "function" then
      step = step(st.req, n)
      check_step(step, "the step returned for call " .. n, 1)
      if type(step) == "function" then error("rig.model.script: a step function returned a function", 0) end
    end
    if step.delay and step.delay > 0 then rig.sleep(step.delay) end
    local body = st.body
    if not step.usage and not step.error then
      body = assert(json.encode(estimable(st.req)))
    end
    local items = plan(step, n, body)
    if items[1].error then return nil, items[1].error[1], items[1].error[2] end
    return setmetatable({ items = items, i = 1, chunk_delay = step.chunk_delay }, Transport)
  end
  local model = M._make(m, codec, { _open = open })
  local view = setmetatable({}, {
    __index = function(_, k) return kept[k] end,
    __newindex = function() error("rig.model.script: calls() is read-only", 2) end,
    __len = function() return n end,
    __pairs = function()
      local i = math.max(n - keep, 0)
      return function()
        while i < n do
          i = i + 1
          if kept[i] ~= nil then return i, kept[i] end
        end
      end
    end,
  })
  rawset(model, "calls", function() return view end)
  rawset(model, "remaining", function() return total - head + 1 end)
  return model
end

return S
