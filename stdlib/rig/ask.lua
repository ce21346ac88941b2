-- rig.ask: one call that returns an agent's answer (s:ask lives here; rig.session
-- forwards to it; rig.run, stdlib/rig/run.lua, is the same on a throwaway session).
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
--       print = true | { out = file, color = bool } | a rig.ask.printer
--                             -- draws the turn as it streams: text as it arrives, each
--                             -- tool call and a preview of its result, each gate and its
--                             -- answer, the usage at the end and, with a turn_done
--                             -- snapshot policy, the snapshot after it (color when out is
--                             -- a terminal and NO_COLOR is unset); on_gate may return a
--                             -- note after the action, shown beside the answer
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
--   rig.ask.printer([{ out, color }]) -> p; p:event(ev) draws one event as s:ask's
--     print does (for a subscription of one's own; pass p as print to keep the turn count
--     across asks), p:line(s) prints a line of one's own, p:finish() ends a partial line;
--     p:dim(s), p:bold(s), p:cyan(s), p:green(s), p:yellow(s), p:red(s) paint when colored.

local core = require "rig.core"

local M = {}

local ANSWERS = { approve = true, approve_always = true, deny = true }

-- ---- drawing a turn ----
--
-- The transcript the quickstart shows: streamed text indented, "→ SUMMARY (TOOL)"
-- per call with up to 6 lines of its result, "? allow SUMMARY (TOOL) — approved"
-- per gate, "✓/✗" for what saved rules or the gate decided alone, "── turn N done
-- · X in / Y out tokens" at each end and "── snapshot REF… (trigger, consistency)".

local Printer = {}
Printer.__index = Printer

function M.printer(opts)
  opts = opts or {}
  if type(opts) ~= "table" then error("rig.ask.printer: options must be a table", 2) end
  for k in pairs(opts) do
    if k ~= "out" and k ~= "color" then
      error("rig.ask.printer: unknown option '" .. tostring(k) .. "' (out, color)", 2)
    end
  end
  local out = opts.out or io.stdout
  local color = opts.color
  if color == nil then
    color = out == io.stdout and core.isatty(1) and (os.getenv("NO_COLOR") or "") == ""
      and os.getenv("TERM") ~= "dumb"
  end
  return setmetatable({ out = out, color = color == true, at_start = true, turns = 0,
                        gated = {}, shown = {} }, Printer)
end

M.Printer = Printer

local STYLE = { dim = "2", bold = "1", cyan = "36", green = "32", yellow = "33", red = "31" }
for name, code in pairs(STYLE) do
  Printer[name] = function(self, s)
    if not self.color or s == "" then return s end
    return "\27[" .. code .. "m" .. s .. "\27[0m"
  end
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

function Printer:line(s)
  self:finish()
  self:write(s .. "\n")
end

local function preview(text, n)
  local lines, more = {}, 0
  for l in (text .. "\n"):gmatch("(.-)\n") do
    if #lines < n then lines[#lines + 1] = l else more = more + 1 end
  end
  while #lines > 0 and lines[#lines] == "" do lines[#lines] = nil end
  return lines, more
end

function Printer:word(action)
  if action == "approve" then return self:green("approved") end
  if action == "approve_always" then return self:green("approved always") end
  if action == "cancelled" then return self:red("cancelled") end
  return self:red(action == "deny" and "denied" or tostring(action))
end

function Printer:ask_line(ev)
  return self:yellow("  ? ") .. "allow " .. self:cyan(tostring(ev.summary))
    .. self:dim(" (" .. tostring(ev.tool) .. ")")
end

-- The answer s:ask gave a gate: on the question's line, with the note on_gate gave.
function Printer:answered(ev, action, note)
  self.shown[ev.gate_id or ""] = true
  self:line(self:ask_line(ev) .. " — " .. self:word(action)
    .. (note and self:dim(" (" .. tostring(note) .. ")") or ""))
end

function Printer:event(ev)
  local t = ev.type
  if t == "TokenDelta" then
    local d = ev.delta
    if type(d) == "table" and d.type == "text" and type(d.text) == "string" and d.text ~= "" then
      local text = d.text
      if self.at_start then text = "  " .. text end
      self:write((text:gsub("\n", "\n  ")))
    end
  elseif t == "TurnStarted" or t == "TurnResumed" then
    self.turns = self.turns + 1
  elseif t == "StepDone" then
    self:finish()
  elseif t == "PermissionDecided" then
    if ev.verdict == "allow" and ev.source == "rule" then
      self:line(self:dim("  ✓ " .. tostring(ev.tool) .. " allowed by a saved rule"))
    elseif ev.verdict ~= "allow" then
      self:line(self:red("  ✗ " .. tostring(ev.tool) .. ": " .. tostring(ev.reason)))
    end
  elseif t == "GateOpened" then
    self.gated[ev.call_id or ""] = true
    if not self.answering then self:line(self:ask_line(ev)) end
  elseif t == "GateResolved" then
    if not self.shown[ev.gate_id or ""] then
      local src = ev.source and ev.source ~= "user" and self:dim(" (" .. ev.source .. ")") or ""
      self:line("    " .. self:word(ev.action) .. src)
    end
    self.shown[ev.gate_id or ""] = nil
  elseif t == "ToolCallStarted" then
    if not self.gated[ev.call_id or ""] then
      self:line(self:cyan("  → " .. tostring(ev.summary)) .. self:dim(" (" .. tostring(ev.tool) .. ")"))
    end
    self.gated[ev.call_id or ""] = nil
  elseif t == "ToolCallCompleted" then
    local text = ev.preview or ""
    local lines, more = preview(text, 6)
    local mark = ev.is_error and self:red("    ✗ ") or self:dim("    │ ")
    for _, l in ipairs(lines) do self:line(mark .. self:dim(l)) end
    if more > 0 or #text >= 200 then self:line(self:dim("    │ …")) end
  elseif t == "TurnDone" or t == "TurnFailed" or t == "TurnInterrupted" then
    local u = ev.usage or {}
    local cost = u.cost and u.cost > 0 and string.format(" · $%.4f", u.cost) or ""
    local what = t == "TurnDone" and self:green("done")
      or self:red(t == "TurnFailed" and ("failed: " .. tostring(ev.error and ev.error.message))
        or ("interrupted: " .. tostring(ev.reason)))
    self:line("")
    self:line(self:dim("  ── turn " .. self.turns .. " ") .. what
      .. self:dim(string.format(" · %d in / %d out tokens%s", u.input_tokens or 0,
        u.output_tokens or 0, cost)))
  elseif t == "WorkspaceCheckpointed" then
    self:line(self:dim("  ── snapshot " .. tostring(ev.ref):sub(1, 24) .. "… ("
      .. tostring(ev.trigger) .. ", " .. tostring(ev.consistency) .. ")"))
  elseif t == "WorkspaceFaulted" then
    self:line(self:red("  ── workspace faulted (" .. tostring(ev.code) .. "): " .. tostring(ev.message)))
  elseif t == "LoopStarted" and ev.parent_loop_id then
    self:line(self:dim("  ── agent " .. tostring(ev.loop_id) .. " started by "
      .. tostring(ev.parent_loop_id)))
  elseif t == "TurnRejected" then
    self:line(self:red("  ── input rejected: " .. tostring(ev.reason)))
  elseif t == "InputCancelled" then
    self:line(self:dim("  ── queued input cancelled (" .. tostring(ev.reason) .. ")"))
  end
end

-- ---- answering gates ----

local function terminal_answer(p, g)
  local function w(s) if p then p:write(s) else io.write(s) io.flush() end end
  local dim = p and function(s) return p:dim(s) end or function(s) return s end
  if p then p:line(p:ask_line(g)) else w("allow " .. tostring(g.summary) .. " (" .. tostring(g.tool) .. ")\n") end
  if not core.isatty(0) then
    w(dim("    (no terminal to ask on)") .. "\n")
    return "deny"
  end
  w(dim("    [y]es / [a]lways / [n]o: "))
  while true do
    local line = core.read_line()
    if p then p.at_start = true end -- the person's Enter ended the line
    if line == nil then w(dim("    (end of input)") .. "\n") return "deny" end
    line = line:lower():gsub("%s", "")
    if line == "y" or line == "yes" then return "approve" end
    if line == "a" or line == "always" then return "approve_always" end
    if line == "n" or line == "no" then return "deny" end
    w(dim("    y, a or n: "))
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
  local action, note
  if on_gate == "terminal" then
    action = terminal_answer(p, g)
    if p then p.shown[ev.gate_id] = true p:line("    " .. p:word(action)) end
  else
    if type(on_gate) == "string" then
      action = on_gate
    else
      local ok, a, b = pcall(on_gate, g)
      if not ok then
        if type(a) == "string" and a:find("^cancelled") then error(a, 0) end
        action, note = "deny", "on_gate raised: " .. tostring(a)
      elseif a == true then
        action, note = "approve", b
      elseif a == false or a == nil then
        action, note = "deny", b
      else
        action, note = a, b
      end
    end
    if not ANSWERS[action] then action = "deny" end
    if p then p:answered(ev, action, note) end
  end
  local ok, err = S:respond_gate(ev.gate_id, action)
  if not ok and p then p:line(p:red("  could not answer the gate: " .. tostring(err))) end
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
    error(where .. ": option 'print' must be true, { out, color } or a rig.ask.printer", 3)
  end
  if opts.timeout ~= nil and (type(opts.timeout) ~= "number" or opts.timeout <= 0) then
    error(where .. ": option 'timeout' must be a positive number of seconds", 3)
  end
  return opts
end

local function ask(S, input, opts)
  local on_gate = opts.on_gate
  if on_gate == nil then on_gate = S.on_gate end
  local p = opts.print
  if p == true then p = M.printer() elseif p and getmetatable(p) ~= Printer then p = M.printer(p) end
  if p then p.answering = on_gate ~= nil end
  local sub <close> = S:subscribe{ loops = "all", ephemeral = p ~= nil }
  local cid, msg, code = S:submit(input, opts.loop and { loop = opts.loop } or nil)
  if not cid then return nil, msg, code end
  local deadline = opts.timeout and core.now() + opts.timeout
  local turn_id, loop_id
  local ended, snap_deadline, seen_idle
  while true do
    local left = deadline and deadline - core.now()
    if ended then
      -- waiting for a best-effort capture: it may fail silently, so stop when none runs
      left = 0.2
      if core.now() > snap_deadline or (not S.ws.be_task and not S.ws.pending and seen_idle) then
        break
      end
    end
    if left and left <= 0 then
      if p then p:finish() end
      return nil, "timeout", "timeout"
    end
    local ev, emsg, ecode = sub:next(left)
    if not ev and ended and ecode == "timeout" then goto continue end
    if not ev then
      if p then p:finish() end
      if ecode == "timeout" then return nil, "timeout", "timeout" end
      local f = S:faulted()
      if f then return nil, f, "faulted" end
      return nil, "the session's events ended: " .. tostring(emsg), ecode
    end
    do
    local t = ev.type
    local mine = type(ev.cause) == "table" and ev.cause.command_id == cid
    -- the loop went idle, or on to the next input: no capture of this turn is coming later
    if ended and ev.loop_id == loop_id and (t == "LoopIdle" or t == "TurnStarted")
       or t == "SessionIdle" then
      seen_idle = true
    end
    if ended then
      -- after the terminal: the turn's snapshot (or its fault)
      if t == "WorkspaceCheckpointed" or t == "WorkspaceFaulted" then p:event(ev) end
      if (t == "WorkspaceCheckpointed" or t == "WorkspaceFaulted") and ev.turn_id == turn_id
         or t == "SessionStopped" then
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
        -- printing: the snapshot a turn_done policy takes after it (best effort: async)
        local w = S.ws
        if not p or not w or w.policy.trigger ~= "turn_done" then break end
        snap_deadline = core.now() + (w.policy.timeout or 60)
      elseif t == "SessionStopped" then
        return nil, "the session stopped", "faulted", ev
      end
    end
    end
    ::continue::
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

-- For rig.run (stdlib/rig/run.lua): the checked options and the ask itself.
M._check_opts = check_opts
M._ask = ask

return M
