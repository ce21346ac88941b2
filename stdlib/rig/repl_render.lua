-- rig.repl_render: how the REPL draws a session's events above the prompt.
--
--   local rd = require("rig.repl_render").new{ color = true, width = 80 }
--   rd:event(ev) -> { line, … }   -- the lines to print now (maybe none)
--   rd:flush()   -> { line, … }   -- streamed text not yet ended by a newline
--   rd.requests[gate_id]          -- the PermissionRequested of an open gate
--   rd:gate_lines(req_or_gate, { details = true })  -- the question for one gate
--
-- No I/O: the caller prints. Streamed text is shown a line at a time (the
-- partial last line when anything else happens, or at the turn's end), so
-- a line printed above the prompt is never rewritten. width may be a number
-- or a function returning the current number of columns; every line fits it.
-- color = false (NO_COLOR) draws the same text without escape codes.

local M = {}

local R = {}
R.__index = R

local function ulen(s)
  return utf8.len(s) or #s
end

-- The first n characters of s (UTF-8 aware; invalid bytes count as one).
local function usub(s, n)
  if not utf8.len(s) then return s:sub(1, n) end
  local stop = utf8.offset(s, n + 1)
  return stop and s:sub(1, stop - 1) or s
end

function M.new(opts)
  opts = opts or {}
  for k in pairs(opts) do
    if k ~= "color" and k ~= "width" then
      error("rig.repl_render.new: unknown option '" .. tostring(k) .. "'", 2)
    end
  end
  return setmetatable({ color = opts.color == true, width_opt = opts.width or 80,
    partial = nil, kind = nil, requests = {}, turns = 0 }, R)
end

function R:width()
  local w = self.width_opt
  if type(w) == "function" then w = w() end
  w = math.tointeger(w) or 80
  return w < 20 and 20 or w
end

function R:paint(code, s)
  if not self.color or s == "" then return s end
  return "\27[" .. code .. "m" .. s .. "\27[0m"
end

local STYLE = { dim = "2", bold = "1", cyan = "36", green = "32", yellow = "33", red = "31" }
for name, code in pairs(STYLE) do
  R[name] = function(self, s) return self:paint(code, s) end
end

-- Splits text into lines of at most `room` characters after `lead`; every
-- produced line starts with lead (cont for the wrapped rest).
local function wrap(text, lead, cont, width, out)
  for raw in (text .. "\n"):gmatch("(.-)\n") do
    raw = raw:gsub("\r", ""):gsub("\t", "  ")
    local first, rest = true, raw
    repeat
      local room = math.max(8, width - ulen(first and lead or cont))
      local piece = usub(rest, room)
      if #piece < #rest then
        -- a word is not cut when a space in the later half of the piece can end the line
        local at = (piece .. rest:sub(#piece + 1, #piece + 1)):match(".*() ")
        if at and at > #piece // 2 then
          piece, rest = piece:sub(1, at - 1), rest:sub(at + 1)
        else
          rest = rest:sub(#piece + 1)
        end
      else
        rest = ""
      end
      out[#out + 1] = (first and lead or cont) .. piece
      first = false
    until rest == ""
  end
  return out
end

-- One line cut to the width with "…".
local function clip(s, width)
  s = s:gsub("[\r\n]", " "):gsub("\t", "  ")
  if ulen(s) <= width then return s end
  return usub(s, width - 1) .. "…"
end

function R:text_lines(kind, text, out)
  local lead = kind == "thinking" and "  ┊ " or "  "
  local lines = wrap(text, lead, lead, self:width(), {})
  for _, l in ipairs(lines) do
    out[#out + 1] = kind == "thinking" and self:dim(l) or l
  end
end

function R:flush(out)
  out = out or {}
  if self.partial and self.partial ~= "" then self:text_lines(self.kind, self.partial, out) end
  self.partial, self.kind = nil, nil
  return out
end

function R:delta(d, out)
  local kind = d.type == "thinking" and "thinking" or "text"
  local text = d.text or d.thinking
  if type(text) ~= "string" or text == "" then return end
  if self.kind and self.kind ~= kind then self:flush(out) end
  self.kind = kind
  local buf = (self.partial or "") .. text
  local cut = buf:match("^.*()\n")
  if cut then
    self:text_lines(kind, buf:sub(1, cut - 1), out)
    buf = buf:sub(cut + 1)
  end
  self.partial = buf
end

local function usage_text(u)
  u = u or {}
  local s = string.format("%d in / %d out tokens", u.input_tokens or 0, u.output_tokens or 0)
  if u.cost and u.cost > 0 then s = s .. string.format(" · $%.4f", u.cost) end
  return s
end

local function rule_text(c)
  return tostring(c.effect or "allow") .. " " .. tostring(c.kind) .. " " .. tostring(c.match)
end

local function need_text(u)
  return tostring(u.kind) .. " " .. tostring(u.match or u.scope or "")
end

-- The question for one gate. g: a GateOpened event (with the request the
-- PermissionRequested carried, when seen) or an entry of s:gates().
function R:gate_lines(g, opts)
  local w = self:width()
  local out = {}
  local req = self.requests[g.gate_id] or {}
  local summary = g.summary or (g.request and g.request.summary) or (req.request and req.request.summary) or ""
  out[#out + 1] = self:yellow(clip("? allow " .. tostring(g.tool) .. ": " .. tostring(summary), w))
  local unmet = g.unmet or req.unmet or {}
  if #unmet > 0 then
    local needs = {}
    for i, u in ipairs(unmet) do needs[i] = need_text(u) end
    wrap(table.concat(needs, ", "), "  needs: ", "         ", w, out)
  end
  local cands = g.candidates or req.candidates or {}
  local always = #cands > 0 and ("saves " .. (function()
    local t = {}
    for i, c in ipairs(cands) do t[i] = rule_text(c) end
    return table.concat(t, "; ")
  end)()) or "saves no rule"
  if opts and opts.details then
    local request = g.request or req.request
    if request then
      local pretty = require("rig.repl").pretty(request)
      wrap(pretty, "  request: ", "    ", w, out)
    end
    out[#out + 1] = self:dim(clip("  gate " .. tostring(g.gate_id) .. " · loop "
      .. tostring(g.loop_id) .. " · turn " .. tostring(g.turn_id), w))
  end
  wrap("[y] approve · [a] always (" .. always .. ") · [n] deny · [?] details",
    "  ", "    ", w, out)
  return out
end

-- The question an MCP server asks through a tool call (UserInputRequested, or an
-- entry of s:inputs()): its message, the fields of its schema with their defaults,
-- and the keys.
function R:input_lines(q)
  local w = self:width()
  local out = {}
  out[#out + 1] = self:yellow(clip("? " .. tostring(q.server or "a server") .. " asks: "
    .. tostring(q.message or ""), w))
  local props = type(q.schema) == "table" and q.schema.properties
  if type(props) == "table" then
    local names = {}
    for k in pairs(props) do names[#names + 1] = k end
    table.sort(names)
    for _, k in ipairs(names) do
      local p = props[k]
      local d = type(p) == "table" and p.default
      local kind = type(p) == "table" and tostring(p.type or "any") or "any"
      -- the choices, when the schema lists them (SEP-1330: enum, oneOf/anyOf of const)
      local function choices(x)
        if type(x) ~= "table" then return nil end
        if type(x.enum) == "table" then
          local t = {}
          for i, v in ipairs(x.enum) do t[i] = tostring(v) end
          return t
        end
        local alts = x.oneOf or x.anyOf
        if type(alts) == "table" and #alts > 0 then
          local t = {}
          for i, a in ipairs(alts) do
            if type(a) ~= "table" or a.const == nil then return nil end
            t[i] = tostring(a.const) .. (type(a.title) == "string" and (" \"" .. a.title .. "\"") or "")
          end
          return t
        end
      end
      local ch = type(p) == "table" and (kind == "array" and choices(p.items) or choices(p))
      if ch then kind = kind .. (kind == "array" and " of " or ": ") .. table.concat(ch, " | ") end
      local line = "  " .. k .. " (" .. kind .. ")"
      if d ~= nil and d ~= require("rig.json").null then
        line = line .. " = " .. (type(d) == "string" and string.format("%q", d) or tostring(d))
      end
      if type(p) == "table" and type(p.description) == "string" then line = line .. ": " .. p.description end
      out[#out + 1] = clip(line, w)
    end
  end
  wrap("[y] accept (the defaults) · [n] decline · [c] cancel · or :answer "
    .. tostring(q.input_id) .. " accept FIELD=VALUE …", "  ", "    ", w, out)
  return out
end

local INPUT_RESOLVED = { accept = { "green", "✓ answered" }, decline = { "red", "✗ declined" },
                         cancel = { "red", "✗ cancelled" } }

local RESOLVED = { approve = { "green", "✓ approved" }, approve_always = { "green", "✓ approved always" },
                   deny = { "red", "✗ denied" }, cancelled = { "red", "✗ cancelled" } }

-- rd:event(ev) -> lines
function R:event(ev)
  local out = {}
  local t = ev.type
  local w = self:width()
  if t == "TokenDelta" then
    if type(ev.delta) == "table" then self:delta(ev.delta, out) end
    return out
  end
  if t == "PermissionRequested" then
    self.requests[ev.gate_id or ""] = ev
    return out
  end
  self:flush(out)
  if t == "TurnStarted" then
    self.turns = self.turns + 1
    out[#out + 1] = self:dim(clip("── turn " .. tostring(ev.turn_id) .. " · " .. tostring(ev.loop_id), w))
  elseif t == "TurnResumed" then
    self.turns = self.turns + 1
    local n = ev.step_id and #(ev.rerun or {}) or 0
    local kept = ev.step_id and #(ev.reused or {}) or 0
    local what = ev.step_id and string.format(" · %d call%s to run, %d result%s kept", n,
      n == 1 and "" or "s", kept, kept == 1 and "" or "s") or ""
    out[#out + 1] = self:dim(clip("── turn " .. tostring(ev.turn_id) .. " · " .. tostring(ev.loop_id)
      .. " resumes " .. tostring(ev.resumes) .. what, w))
  elseif t == "ToolCallStarted" then
    out[#out + 1] = self:cyan(clip("  → " .. tostring(ev.tool) .. " " .. tostring(ev.summary or ""), w))
  elseif t == "ToolCallCompleted" then
    local text = tostring(ev.preview or "")
    local lines, n = {}, 0
    for l in (text .. "\n"):gmatch("(.-)\n") do n = n + 1; lines[n] = l end
    while n > 0 and lines[n] == "" do lines[n] = nil; n = n - 1 end
    local shown = math.min(n, 4)
    local mark = ev.is_error and "    ✗ " or "    │ "
    for i = 1, shown do
      local l = clip(mark .. lines[i], w)
      out[#out + 1] = ev.is_error and self:red(l) or self:dim(l)
    end
    if n > shown or #text >= 200 then out[#out + 1] = self:dim("    │ …") end
    if n == 0 then out[#out + 1] = self:dim("    │ (no output)") end
  elseif t == "GateOpened" then
    for _, l in ipairs(self:gate_lines(ev)) do out[#out + 1] = l end
  elseif t == "UserInputRequested" then
    for _, l in ipairs(self:input_lines(ev)) do out[#out + 1] = l end
  elseif t == "UserInputResolved" then
    local r = INPUT_RESOLVED[ev.action] or { "dim", tostring(ev.action) }
    local extra = ev.source and ev.source ~= "user" and (" (" .. ev.source .. ")") or ""
    out[#out + 1] = "  " .. self[r[1]](self, r[2] .. extra)
  elseif t == "GateResolved" then
    local r = RESOLVED[ev.action] or { "dim", tostring(ev.action) }
    local extra = ev.source and ev.source ~= "user" and (" (" .. ev.source .. ")") or ""
    out[#out + 1] = "  " .. self[r[1]](self, r[2] .. extra)
    self.requests[ev.gate_id or ""] = nil
  elseif t == "PermissionDecided" then
    if ev.verdict == "allow" and ev.source == "rule" then
      out[#out + 1] = self:dim(clip("  ✓ " .. tostring(ev.tool) .. " allowed by a saved rule", w))
    elseif ev.verdict ~= "allow" then
      wrap("✗ " .. tostring(ev.tool) .. ": " .. tostring(ev.reason), "  ", "    ", w, out)
      for i = #out, 1, -1 do
        if out[i]:find("✗", 1, true) then out[i] = self:red(out[i]) break end
      end
    end
  elseif t == "TurnDone" then
    out[#out + 1] = self:dim("── ") .. self:green("done") .. self:dim(" · " .. usage_text(ev.usage))
  elseif t == "TurnFailed" then
    local e = ev.error or {}
    local msg = "failed: " .. tostring(e.message or e.code or "?")
    if e.code then msg = msg .. " (" .. tostring(e.code) .. ")" end
    local lines = wrap(msg, "── ", "   ", w, {})
    for _, l in ipairs(lines) do out[#out + 1] = self:red(l) end
    out[#out + 1] = self:dim("   " .. usage_text(ev.usage))
  elseif t == "TurnInterrupted" then
    out[#out + 1] = self:yellow(clip("── interrupted (" .. tostring(ev.reason) .. ")", w))
  elseif t == "TurnRejected" then
    out[#out + 1] = self:red(clip("── input rejected: " .. tostring(ev.reason), w))
  elseif t == "InputCancelled" then
    out[#out + 1] = self:dim(clip("── queued input cancelled (" .. tostring(ev.reason) .. ")", w))
  elseif t == "InputQueued" then
    out[#out + 1] = self:dim(clip("── queued (position " .. tostring(ev.position) .. ")", w))
  elseif t == "WorkspaceCheckpointed" then
    out[#out + 1] = self:dim(clip("── snapshot " .. tostring(ev.ref) .. " (" .. tostring(ev.trigger) .. ")", w))
  elseif t == "WorkspaceRestored" then
    out[#out + 1] = self:dim(clip("── workspace rewound to " .. tostring(ev.ref), w))
  elseif t == "WorkspaceFaulted" then
    local lines = wrap("workspace faulted (" .. tostring(ev.code) .. "): " .. tostring(ev.message),
      "── ", "   ", w, {})
    for _, l in ipairs(lines) do out[#out + 1] = self:red(l) end
  elseif t == "WorkspaceFaultCleared" then
    out[#out + 1] = self:dim(clip("── workspace fault cleared (" .. tostring(ev.by) .. ")", w))
  elseif t == "CompactionCommitted" and ev.fallback then
    out[#out + 1] = self:yellow(clip("── compacted: the summary failed; " .. tostring(ev.replaced)
      .. " older messages dropped, " .. tostring(ev.retained) .. " kept", w))
  elseif t == "CompactionCommitted" then
    out[#out + 1] = self:dim(clip("── compacted: " .. tostring(ev.replaced) .. " messages summarized, "
      .. tostring(ev.retained) .. " kept", w))
  elseif t == "LoopStarted" and ev.parent_loop_id then
    out[#out + 1] = self:dim(clip("── agent " .. tostring(ev.loop_id) .. " started by "
      .. tostring(ev.parent_loop_id), w))
  elseif t == "HookDecided" and ev.action ~= "continue" and ev.action ~= "allow"
         and ev.action ~= "stop" then
    local what = "  ⚑ hook " .. tostring(ev.hook) .. ": " .. tostring(ev.action)
    if ev.tool then what = what .. " " .. tostring(ev.tool) end
    if ev.message then what = what .. " — " .. tostring(ev.message) end
    local l = clip(what, w)
    out[#out + 1] = (ev.action == "deny" or ev.action == "error") and self:red(l) or self:yellow(l)
  elseif t == "GuardrailTripped" then
    local lines = wrap("guardrail " .. tostring(ev.guardrail) .. " tripped on the "
      .. tostring(ev.stage) .. (ev.reason and (": " .. tostring(ev.reason)) or ""), "── ", "   ",
      w, {})
    for _, l in ipairs(lines) do out[#out + 1] = self:red(l) end
  elseif t == "ActiveLoopChanged" then
    out[#out + 1] = self:cyan(clip("── " .. tostring(ev.from) .. " hands the conversation to "
      .. tostring(ev.to) .. (ev.reason and ev.reason ~= "handoff" and (" (" .. tostring(ev.reason)
      .. ")") or ""), w))
  elseif t == "SessionStopped" then
    out[#out + 1] = self:dim("── session stopped")
  end
  return out
end

-- ---- inspecting: s:history(), s:usage(), s:snapshots(), s:journal() ----
--
--   rd:history_lines(messages) -> lines   -- one block per message: "[N] role", its blocks indented
--   rd:usage_lines(usage)      -> lines   -- one "label  value" line per counter, cost last
--   rd:snapshot_lines(list)    -> lines   -- a table: #, seq, event, trigger, consistency, ref
--   rd:record_line(rec)        -> line    -- one journal record: seq, type, its fields as k=v
-- Every line fits the width; color only dims, bolds and tints (NO_COLOR: the same text).

local function compact(v)
  if type(v) ~= "table" then return tostring(v) end
  local ok, s = pcall(function() return require("rig.json").encode(v) end)
  if ok and type(s) == "string" then return s end
  return (require("rig.repl").pretty(v):gsub("\n%s*", " "))
end

local function split_lines(text)
  local lines, n = {}, 0
  for l in (tostring(text) .. "\n"):gmatch("(.-)\n") do n = n + 1; lines[n] = l end
  while n > 0 and lines[n] == "" do lines[n] = nil; n = n - 1 end
  return lines, n
end

local RESULT_LINES = 6

-- An image or document as one line: what it is, its size, where it lives.
local function media_text(b)
  local size = b.size and (b.size >= 1024 and string.format("%.1f KiB", b.size / 1024)
    or (b.size .. " bytes"))
  local where = b.url or (b.blob and ("blob " .. b.blob:sub(1, 12))) or nil
  local bits = { b.media_type }
  if size then bits[#bits + 1] = size end
  if where then bits[#bits + 1] = where end
  return "[" .. tostring(b.type) .. (b.name and (" " .. b.name) or "") .. ": "
    .. table.concat(bits, ", ") .. "]"
end

local function result_text(c)
  if type(c) == "string" then return c end
  if type(c) == "table" then
    local parts = {}
    for _, b in ipairs(c) do
      parts[#parts + 1] = (b.type == "image" or b.type == "document") and media_text(b)
        or tostring(b.text or "")
    end
    return table.concat(parts, "\n")
  end
  return tostring(c)
end

function R:history_lines(messages)
  local w = self:width()
  local out = {}
  for i, m in ipairs(messages or {}) do
    out[#out + 1] = self:bold(clip("[" .. i .. "] " .. tostring(m.role), w))
    local content = m.content
    if type(content) == "string" then content = { { type = "text", text = content } } end
    for _, b in ipairs(content or {}) do
      local t = b.type
      if t == "text" or t == "refusal" then
        wrap(tostring(b.text), "  ", "  ", w, out)
      elseif t == "thinking" then
        -- a signature alone (Gemini's, or reasoning kept encrypted) has nothing to show
        local text = b.redacted and "(redacted thinking)" or tostring(b.thinking or "")
        local lines = text ~= "" and wrap(text, "  ┊ ", "  ┊ ", w, {}) or {}
        for _, l in ipairs(lines) do out[#out + 1] = self:dim(l) end
      elseif t == "tool_use" then
        out[#out + 1] = self:cyan(clip("  → " .. tostring(b.name) .. " " .. compact(b.input or {}), w))
      elseif t == "tool_result" then
        local lines, n = split_lines(result_text(b.content))
        local mark = b.is_error and "  ✗ " or "  ← "
        for k = 1, math.min(n, RESULT_LINES) do
          local l = clip((k == 1 and mark or "    ") .. lines[k], w)
          out[#out + 1] = b.is_error and self:red(l) or l
        end
        if n == 0 then out[#out + 1] = clip(mark .. "(no output)", w) end
        if n > RESULT_LINES then
          out[#out + 1] = self:dim("    … " .. (n - RESULT_LINES) .. " more lines")
        end
      else
        if t == "image" or t == "document" then
          out[#out + 1] = self:cyan(clip("  " .. media_text(b), w))
        else
          out[#out + 1] = self:dim(clip("  (" .. tostring(t) .. " block)", w))
        end
      end
    end
  end
  if #out == 0 then out[1] = "(no messages)" end
  return out
end

local USAGE_ORDER = { "input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens",
                      "reasoning_tokens" }

function R:usage_lines(u)
  u = u or {}
  local keys, seen = {}, { cost = true }
  for _, k in ipairs(USAGE_ORDER) do
    if u[k] ~= nil then keys[#keys + 1] = k; seen[k] = true end
  end
  local rest = {}
  for k in pairs(u) do if not seen[k] then rest[#rest + 1] = tostring(k) end end
  table.sort(rest)
  for _, k in ipairs(rest) do keys[#keys + 1] = k end
  local rows = {}
  for _, k in ipairs(keys) do
    local v = u[k]
    rows[#rows + 1] = { (k:gsub("_", " ")), math.type(v) == "float" and string.format("%.6g", v) or tostring(v) }
  end
  rows[#rows + 1] = { "cost", string.format("$%.4f", tonumber(u.cost) or 0) }
  local lw, vw = 0, 0
  for _, r in ipairs(rows) do lw = math.max(lw, ulen(r[1])); vw = math.max(vw, ulen(r[2])) end
  local out = {}
  for _, r in ipairs(rows) do
    out[#out + 1] = clip(r[1] .. string.rep(" ", lw - ulen(r[1]) + 2) .. string.rep(" ", vw - ulen(r[2])) .. r[2],
      self:width())
  end
  return out
end

function R:snapshot_lines(list)
  local w = self:width()
  if not list or #list == 0 then return { "no snapshots" } end
  local head = { "#", "seq", "event", "trigger", "consistency", "ref" }
  local rows = {}
  for i, sn in ipairs(list) do
    local ev = sn.event == "WorkspaceRestored" and "rewound" or "snapshot"
    rows[i] = { tostring(i), tostring(sn.seq or "-"), ev, tostring(sn.trigger or "-"),
      tostring(sn.consistency or "-"), tostring(sn.ref) }
  end
  local widths = {}
  for _, row in ipairs({ head, table.unpack(rows) }) do
    for c, v in ipairs(row) do widths[c] = math.max(widths[c] or 0, ulen(v)) end
  end
  local out = {}
  local wide = 0
  for c = 1, #head do wide = wide + widths[c] + 2 end
  local below = wide - 2 > w -- too narrow: each ref on a line of its own, under its row
  for r, row in ipairs({ head, table.unpack(rows) }) do
    local cells = {}
    local n = below and #row - 1 or #row
    for c = 1, n do
      cells[c] = c == n and row[c] or (row[c] .. string.rep(" ", widths[c] - ulen(row[c])))
    end
    local line = clip(table.concat(cells, "  "), w)
    out[#out + 1] = r == 1 and self:bold(line) or line
    if below and r > 1 then out[#out + 1] = clip("   " .. row[#row], w) end
  end
  return out
end

local RECORD_SKIP = { v = true, session_id = true, type = true, seq = true, created_at = true,
                      event_id = true }

local RECORD_FIRST = { loop_id = 1, turn_id = 2, step_id = 3, tool = 4, summary = 5, message = 6 }

-- A message as role:"its text" (+N calls), so a record's line says what was said.
local function message_text(m)
  local texts, calls = {}, 0
  local content = m.content
  if type(content) == "string" then content = { { type = "text", text = content } } end
  for _, b in ipairs(type(content) == "table" and content or {}) do
    if b.type == "text" then texts[#texts + 1] = tostring(b.text)
    elseif b.type == "tool_use" then calls = calls + 1
    elseif b.type == "tool_result" then texts[#texts + 1] = result_text(b.content) end
  end
  local s = tostring(m.role) .. ':"' .. table.concat(texts, " "):gsub("%s+", " ") .. '"'
  if calls > 0 then s = s .. " +" .. calls .. (calls == 1 and " call" or " calls") end
  return s
end

local function field_text(v)
  if type(v) == "table" and v.role and v.content then return message_text(v) end
  return (compact(v):gsub("[\r\n\t]+", " "))
end

function R:record_line(rec)
  local keys = {}
  for k in pairs(rec) do if not RECORD_SKIP[k] then keys[#keys + 1] = tostring(k) end end
  table.sort(keys, function(a, b)
    local x, y = RECORD_FIRST[a] or 99, RECORD_FIRST[b] or 99
    if x ~= y then return x < y end
    return a < b
  end)
  local parts = {}
  for _, k in ipairs(keys) do
    parts[#parts + 1] = k .. "=" .. field_text(rec[k])
  end
  local head = string.format("%5s %s", tostring(rec.seq or "-"), tostring(rec.type))
  local line = clip(#parts > 0 and (head .. "  " .. table.concat(parts, " ")) or head, self:width())
  if ulen(line) <= ulen(head) then return self:bold(line) end
  return self:bold(head) .. line:sub(#head + 1)
end

return M
