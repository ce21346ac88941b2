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
      rest = rest:sub(#piece + 1)
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
  elseif t == "CompactionCommitted" then
    out[#out + 1] = self:dim(clip("── compacted: " .. tostring(ev.replaced) .. " messages summarized, "
      .. tostring(ev.retained) .. " kept", w))
  elseif t == "LoopStarted" and ev.parent_loop_id then
    out[#out + 1] = self:dim(clip("── agent " .. tostring(ev.loop_id) .. " started by "
      .. tostring(ev.parent_loop_id), w))
  elseif t == "SessionStopped" then
    out[#out + 1] = self:dim("── session stopped")
  end
  return out
end

return M
