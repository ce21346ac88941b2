-- rig.ask: one call that returns an agent's answer (the session methods
-- s:ask and rig.run live here; rig.session forwards to them).
--
--   s:ask(text | blocks [, opts]) -> answer, usage | nil, message, code, event
--     Submits the input, waits for the turn it starts (or folds into) to end and
--     returns the final text, or with the loop's output_schema the decoded object,
--     and the turn's usage. opts:
--       loop = "name"         -- the loop to ask (default the active primer)
--       on_gate = f | "approve" | "deny" | "terminal"
--                             -- answers each gate opened while it waits: f(gate) ->
--                             -- "approve" | "approve_always" | "deny" (true: approve,
--                             -- false or nil: deny); gate = { gate_id, loop_id, turn_id,
--                             -- call_id, tool, summary, request, unmet, candidates };
--                             -- "terminal" asks y/a/n on the terminal. Default: the
--                             -- session's own (r:session{ on_gate = … }), else the gate
--                             -- stays open for whoever answers it (s:respond_gate from
--                             -- another task, the REPL, the console)
--       print = true | { out = file, color = bool, width = n }
--                             -- draws the turn as it streams: text as it arrives, each
--                             -- tool call and a preview of its result, each gate and its
--                             -- answer, the usage at the end (color when out is a terminal
--                             -- and NO_COLOR is unset)
--       timeout = seconds     -- then nil, "timeout", "timeout" (the turn goes on)
--     Failures: code "turn_failed" (message "turn T failed: MESSAGE (CODE)"),
--     "interrupted", "rejected" (the input was refused: a full queue), "cancelled" (the
--     queued input was dropped: an earlier turn failed), "faulted", "timeout", or
--     submit's own; the fourth value is the event that ended it.
--
--   rig.run(loop | rig, text | blocks [, opts]) -> the same as s:ask
--     on a throwaway session in memory (a rig's own store is not used): a loop is
--     defined into a rig of its own with the loops its delegates name (rig.loop takes
--     delegate loops as objects). opts as s:ask's, but on_gate defaults to "terminal"
--     when standard input is a terminal and "deny" otherwise (nobody else can answer).
--     The session is shut down before it returns.
--
--   rig.ask.printer([{ out, color, width }]) -> p; p:event(ev) draws one event as
--     s:ask's print does (for a subscription of one's own), p:finish() ends a partial line.

local core = require "rig.core"
local json = require "rig.json"

local M = {}

local ANSWERS = { approve = true, approve_always = true, deny = true }

-- ---- drawing a turn ----

local Printer = {}
Printer.__index = Printer

function M.printer(opts)
  opts = opts or {}
  if type(opts) ~= "table" then error("rig.ask.printer: options must be a table", 2) end
  for k in pairs(opts) do
    if k ~= "out" and k ~= "color" and k ~= "width" then
      error("rig.ask.printer: unknown option '" .. tostring(k) .. "' (out, color, width)", 2)
    end
  end
  local out = opts.out or io.stdout
  local color = opts.color
  if color == nil then
    color = out == io.stdout and core.isatty(1) and (os.getenv("NO_COLOR") or "") == ""
      and os.getenv("TERM") ~= "dumb"
  end
  local rd = require("rig.repl_render").new{ color = color == true, width = opts.width or 100 }
  return setmetatable({ out = out, rd = rd, at_start = true, quiet_gates = false }, Printer)
end

function Printer:write(s)
  if s == "" then return end
  self.out:write(s)
  self.out:flush()
  self.at_start = s:sub(-1) == "\n"
end

function Printer:finish()
  if not self.at_start then self:write("\n") end
end

function Printer:lines(list)
  for _, l in ipairs(list) do
    self:finish()
    self:write(l .. "\n")
  end
end

function Printer:event(ev)
  local t = ev.type
  if t == "TokenDelta" then
    local d = ev.delta
    if type(d) == "table" and d.type == "text" and type(d.text) == "string" and d.text ~= "" then
      local text = d.text
      if self.at_start then text = "  " .. text end
      text = text:gsub("\n(.)", "\n  %1")
      self:write(text)
    end
    return
  end
  if t == "PermissionRequested" then self.rd:event(ev) return end
  if t == "GateOpened" then
    -- the question without the REPL's key line: s:ask answers it
    local l = self.rd:gate_lines(ev)
    l[#l] = nil
    self:lines(l)
    return
  end
  if t == "StepDone" then self:finish() return end
  if t == "TurnStarted" or t == "LoopIdle" or t == "SessionIdle" then return end
  self:lines(self.rd:event(ev))
end

-- ---- answering gates ----

local function terminal_answer(p, g)
  local w = p and function(s) p:write(s) end or function(s) io.write(s) io.flush() end
  if not core.isatty(0) then
    w("  (no terminal to ask on: denied)\n")
    return "deny"
  end
  w("  allow " .. tostring(g.tool) .. ": " .. tostring(g.summary) .. "? [y]es / [a]lways / [n]o: ")
  while true do
    local line = core.read_line()
    if p then p.at_start = true end
    if line == nil then return "deny" end
    line = line:lower():gsub("%s", "")
    if line == "y" or line == "yes" then return "approve" end
    if line == "a" or line == "always" then return "approve_always" end
    if line == "n" or line == "no" then return "deny" end
    w("  y, a or n: ")
  end
end

local function answer_gate(S, on_gate, ev, p)
  local g = { gate_id = ev.gate_id, loop_id = ev.loop_id, turn_id = ev.turn_id,
              call_id = ev.call_id, tool = ev.tool, summary = ev.summary }
  for _, open in ipairs(S:gates()) do
    if open.gate_id == ev.gate_id then
      g.request, g.unmet = open.request, open.unmet
    end
  end
  local req = p and p.rd.requests[ev.gate_id]
  if req then g.candidates = req.candidates end
  local action
  if on_gate == "terminal" then
    action = terminal_answer(p, g)
  elseif type(on_gate) == "string" then
    action = on_gate
  else
    local ok, a = pcall(on_gate, g)
    if not ok then
      if type(a) == "string" and a:find("^cancelled") then error(a, 0) end
      action = "deny"
      if p then p:lines({ "  on_gate raised: " .. tostring(a) .. " (denied)" }) end
    elseif a == true then
      action = "approve"
    elseif a == false or a == nil then
      action = "deny"
    else
      action = a
    end
  end
  if not ANSWERS[action] then action = "deny" end
  S:respond_gate(ev.gate_id, action)
end

local function check_on_gate(v, where)
  if v == nil or type(v) == "function" then return v end
  if v == "approve" or v == "deny" or v == "terminal" then return v end
  error(where .. ": option 'on_gate' must be a function or \"approve\", \"deny\" or "
    .. "\"terminal\"", 3)
end
M.check_on_gate = check_on_gate

local function text_of(msg)
  local out = {}
  for _, b in ipairs(msg and msg.content or {}) do
    if b.type == "text" and type(b.text) == "string" then out[#out + 1] = b.text end
  end
  return table.concat(out)
end

local ASK_OPTS = { loop = true, on_gate = true, print = true, timeout = true }

local function check_opts(opts, where)
  if opts == nil then return {} end
  if type(opts) ~= "table" then error(where .. ": options must be a table", 3) end
  for k in pairs(opts) do
    if not ASK_OPTS[k] then
      error(where .. ": unknown option '" .. tostring(k) .. "' (loop, on_gate, print, timeout)", 3)
    end
  end
  check_on_gate(opts.on_gate, where)
  if opts.print ~= nil and opts.print ~= true and opts.print ~= false and type(opts.print) ~= "table" then
    error(where .. ": option 'print' must be true or { out, color, width }", 3)
  end
  if opts.timeout ~= nil and (type(opts.timeout) ~= "number" or opts.timeout <= 0) then
    error(where .. ": option 'timeout' must be a positive number of seconds", 3)
  end
  return opts
end

local function ask(S, input, opts)
  local on_gate = opts.on_gate
  if on_gate == nil then on_gate = S.on_gate end
  local p = opts.print and M.printer(opts.print ~= true and opts.print or nil) or nil
  local sub <close> = S:subscribe{ loops = "all", ephemeral = p ~= nil }
  local cid, msg, code = S:submit(input, opts.loop and { loop = opts.loop } or nil)
  if not cid then return nil, msg, code end
  local deadline = opts.timeout and core.now() + opts.timeout
  local turn_id, loop_id
  local ended
  while true do
    local left = deadline and deadline - core.now()
    if left and left <= 0 then
      if p then p:finish() end
      return nil, "timeout", "timeout"
    end
    local ev, emsg, ecode = sub:next(left)
    if not ev then
      if p then p:finish() end
      if ecode == "timeout" then return nil, "timeout", "timeout" end
      local f = S:faulted()
      if f then return nil, f, "faulted" end
      return nil, "the session's events ended: " .. tostring(emsg), ecode
    end
    local t = ev.type
    local mine = type(ev.cause) == "table" and ev.cause.command_id == cid
    if ended then
      -- after the terminal: what the turn's end brought (its snapshot), until the loop idles
      if p and t == "WorkspaceCheckpointed" then p:event(ev) end
      if ev.loop_id == loop_id and (t == "LoopIdle" or t == "TurnStarted")
        or t == "SessionIdle" or t == "SessionStopped"
        or (t == "WorkspaceCheckpointed" and ev.turn_id == turn_id) then
        break
      end
    else
      if p and (turn_id == nil or ev.turn_id == nil or ev.turn_id == turn_id
                or ev.loop_id ~= loop_id) then
        p:event(ev)
      end
      if (t == "TurnStarted" or t == "TurnFoldedInto") and mine then
        turn_id, loop_id = ev.turn_id, ev.loop_id
      elseif t == "TurnRejected" and mine then
        if p then p:finish() end
        return nil, "input rejected: " .. tostring(ev.reason), "rejected", ev
      elseif t == "InputCancelled" and mine then
        if p then p:finish() end
        return nil, "input cancelled: " .. tostring(ev.reason), "cancelled", ev
      elseif t == "GateOpened" and on_gate ~= nil then
        answer_gate(S, on_gate, ev, p)
      elseif ev.ends_turn and turn_id ~= nil and ev.turn_id == turn_id then
        ended = ev
        if p and not S.ws then break end -- no snapshot to wait for
        if not p then break end
      elseif t == "SessionStopped" then
        return nil, "the session stopped", "faulted", ev
      end
    end
  end
  if p then p:finish() end
  local ev = ended
  if ev.type == "TurnDone" then
    local answer = ev.output
    if answer == nil then answer = text_of(ev.message) end
    return answer, ev.usage
  elseif ev.type == "TurnInterrupted" then
    return nil, "turn " .. tostring(ev.turn_id) .. " was interrupted (" .. tostring(ev.reason)
      .. ")", "interrupted", ev
  end
  local e = ev.error or {}
  return nil, "turn " .. tostring(ev.turn_id) .. " failed: " .. tostring(e.message or "?")
    .. (e.code and (" (" .. tostring(e.code) .. ")") or ""), "turn_failed", ev
end

function M.ask(S, input, opts)
  opts = check_opts(opts, "s:ask")
  return ask(S, input, opts)
end

function M.run(target, input, opts)
  opts = check_opts(opts, "rig.run")
  local loop_mod = require "rig.loop"
  local define_mod = require "rig.define"
  local r
  if loop_mod.is_loop(target) then
    r = define_mod{ loops = { target }, primers = { target.name },
                    store = require("rig.store").memory() }
  elseif define_mod.is_rig(target) then
    local p = define_mod._private(target)
    local loops = {}
    for i, l in ipairs(p.loops) do loops[i] = l end
    r = define_mod{ loops = loops, primers = p.primers, active_primer = p.active_primer,
                    store = require("rig.store").memory(), delegation_limits = p.delegation_limits,
                    workspace = p.workspace, snapshots = p.workspace and p.snapshots or nil }
  else
    error("rig.run: expects a rig.loop or a rig (rig.define), got " .. type(target), 2)
  end
  local s, msg, code = r:session()
  if not s then return nil, msg, code end
  local copy = {}
  for k, v in pairs(opts) do copy[k] = v end
  if copy.on_gate == nil then copy.on_gate = core.isatty(0) and "terminal" or "deny" end
  local res = table.pack(pcall(ask, s, input, copy))
  s:shutdown()
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

return M
