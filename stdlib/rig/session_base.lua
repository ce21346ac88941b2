-- rig.session_base: what every part of the session runner shares — the
-- session object's class, ids, events and command records, the catalog, the
-- fault message, usage sums, user messages, the options check, SessionStarted,
-- closing a gate. It requires only rig.core and rig.json, so each part
-- (rig.session_turn, _compact, _replay, _fork, _resume), rig.delegation,
-- rig.handoff and rig.hooks build on it without a cycle. The one thing that calls back up, starting a loop's work
-- (a new instance, an enqueued input), is handed to rig.delegation,
-- rig.handoff and rig.session_resume as an argument: rig.session_turn's
-- `runner`.

local core = require "rig.core"
local json = require "rig.json"

local M = {}

local ENDURING = {
  SessionStarted = true, SessionForked = true, SessionActive = true, SessionIdle = true,
  SessionStopped = true,
  RestoreStarted = true, RestoreDone = true, RestoreErrored = true,
  LoopStarted = true, LoopIdle = true,
  TurnStarted = true, TurnRejected = true, TurnFoldedInto = true, InputCancelled = true,
  TurnResumed = true, ToolCallsPlanned = true, ToolResultRecorded = true,
  StepDone = true, TurnDone = true, TurnFailed = true, TurnInterrupted = true,
  PermissionRequested = true, PermissionDecided = true, GateOpened = true, GateResolved = true,
  UserInputRequested = true, UserInputResolved = true, WorkspaceCheckpointed = true, WorkspaceRestored = true,
  WorkspaceFaulted = true, WorkspaceFaultCleared = true,
  ActiveLoopChanged = true, CompactionCommitted = true, ContextMeasured = true,
  HookDecided = true, GuardrailChecked = true, GuardrailTripped = true,
}
local EPHEMERAL = { TokenDelta = true, ToolCallStarted = true, ToolCallCompleted = true,
                    InputQueued = true }
local TERMINAL = { TurnDone = true, TurnFailed = true, TurnInterrupted = true }
M.ENDURING, M.EPHEMERAL, M.TERMINAL = ENDURING, EPHEMERAL, TERMINAL

local Session = {}
Session.__index = Session

local function fail(where, msg, level)
  error("rig.session: " .. where .. ": " .. msg, (level or 1) + 1)
end

-- ---- ids and events ----

-- prefix .. epoch .. "." .. n. The head before n is made once for each
-- epoch and prefix and shared by every session (s:epoch() is an integer, a
-- small counter: few distinct values; the cache starts over past 64), not a
-- string per id nor a table per session.
local id_heads, id_head_epochs = {}, 0
local function next_id(S, prefix)
  local n = S.counter + 1
  S.counter = n
  local epoch = S.epoch
  local heads = id_heads[epoch]
  if not heads then
    if id_head_epochs >= 64 then id_heads, id_head_epochs = {}, 0 end
    heads = {}
    id_heads[epoch] = heads
    id_head_epochs = id_head_epochs + 1
  end
  local head = heads[prefix]
  if not head then
    head = prefix .. epoch .. "."
    heads[prefix] = head
  end
  return head .. n
end

-- emit_event's results; an event json.encode refuses raises at emit's
-- caller (emit's tail call to here leaves that caller at level 2).
local function emitted(etype, ok, ...)
  if ok == nil and select(2, ...) == "encode" then
    error("rig.session: internal: cannot encode " .. etype .. ": " .. tostring((...)), 2)
  end
  return ok, ...
end

-- Queues one event (and waits for it when it is enduring and wait is not
-- false). Returns the seq (enduring), true (ephemeral or not waited), or
-- nil, message, code. fields may hold loop_id, turn_id, step_id, cause.
local function emit(S, etype, fields, wait)
  local enduring = ENDURING[etype]
  if not enduring and not EPHEMERAL[etype] then
    error("rig.session: internal: unknown event type '" .. tostring(etype) .. "'", 2)
  end
  local ev = fields or {}
  ev.v = 1
  ev.type = etype
  ev.session_id = S.id
  ev.event_id = next_id(S, "e")
  ev.created_at = core.time()
  if TERMINAL[etype] then ev.ends_turn = true end
  -- C encodes ev (rig.json.encode's bytes, never a Lua string) and takes the
  -- options as arguments: no table a call
  if enduring then
    return emitted(etype, S.core:emit_event(ev, etype, ev.loop_id, true, ev.event_id,
      wait ~= false))
  end
  return emitted(etype, S.core:emit_event(ev, etype, ev.loop_id, false, nil, false))
end

local function catalog(S, t)
  if S.closed then return end
  S.core:catalog(t)
end

-- Why a faulted session refuses work, said once: the C latch's message
-- already reads "session ID is faulted: cause"; a cause of our own gets that
-- prefix here. nil when the session is not faulted.
local function fault_message(S)
  local f = S.faulted_msg or S.core:faulted()
  if not f then return nil end
  f = tostring(f)
  local head = "session " .. S.id .. " is faulted: "
  if f:sub(1, #head) == head then return f end
  return head .. f
end

local USAGE_KEYS = { "input_tokens", "output_tokens", "cache_read_tokens",
                     "cache_creation_tokens", "reasoning_tokens" }

local function add_usage(sum, u)
  if not u then return end
  for i = 1, #USAGE_KEYS do
    local k = USAGE_KEYS[i]
    local v = u[k]
    if v then sum[k] = (sum[k] or 0) + v end
  end
  if u.cost then sum.cost = (sum.cost or 0) + u.cost end
end

local function new_usage()
  return { input_tokens = 0, output_tokens = 0, cache_read_tokens = 0,
           cache_creation_tokens = 0, reasoning_tokens = 0 }
end

local function note_usage(S)
  local u = S.usage_sum
  catalog(S, { input_tokens = u.input_tokens, output_tokens = u.output_tokens,
               cache_read_tokens = u.cache_read_tokens, cost = u.cost or 0 })
end

-- ---- messages ----

local function user_message(input)
  if type(input) == "string" then
    return { role = "user", content = json.array({ { type = "text", text = input } }) }
  end
  local blocks = {}
  local media = 0
  for i, b in ipairs(input) do
    if type(b) == "table" and (b.type == "image" or b.type == "document") then
      -- checked here (type, size, magic); rig.session stores the bytes (rig.media)
      local mb, err = require("rig.media").check(b, "input[" .. i .. "]")
      if not mb then return nil, err, "invalid_request" end
      blocks[i] = mb
      media = media + 1
    elseif type(b) ~= "table" or b.type ~= "text" or type(b.text) ~= "string" then
      return nil, "input[" .. i .. "] must be a { type = \"text\", text = … }, image or "
        .. "document block"
    else
      blocks[i] = { type = "text", text = b.text }
    end
  end
  if #blocks == 0 then return nil, "input must hold at least one block" end
  if media > require("rig.media").PER_MESSAGE then
    return nil, "input holds more than " .. require("rig.media").PER_MESSAGE
      .. " images and documents", "invalid_request"
  end
  return { role = "user", content = json.array(blocks) }
end

local function title_of(msg)
  for _, b in ipairs(msg.content) do
    if b.type == "text" then
      local line = b.text:match("^%s*([^\n]*)") or ""
      -- at most 80 code points
      local n, cut = 0, #line
      for p in utf8.codes(line, true) do
        n = n + 1
        if n > 80 then cut = p - 1 break end
      end
      return line:sub(1, cut)
    end
  end
  return ""
end

-- Head + tail of an over-long result, with a marker saying what was left out.
local function cap_result(text, cap)
  if not cap or cap == 0 or #text <= cap then return text end
  local marker = "\n[tool output truncated: omitted %d of %d bytes]\n"
  local room = cap - #marker - 20
  if room < 64 then room = 64 end
  local head = room // 2
  local tail = room - head
  -- do not cut inside a UTF-8 sequence
  while head > 0 and (text:byte(head + 1) or 0) & 0xC0 == 0x80 do head = head - 1 end
  local ts = #text - tail + 1
  while ts <= #text and (text:byte(ts) or 0) & 0xC0 == 0x80 do ts = ts + 1 end
  local omitted = ts - head - 1
  return text:sub(1, head) .. string.format(marker, omitted, #text) .. text:sub(ts)
end
M.cap_result = cap_result

local function new_session(r, csess)
  local S = setmetatable({
    id = csess.id, rig = r, core = csess, epoch = csess:epoch(), counter = 0,
    loops = {}, loop_order = {}, busy = 0, settling = 0, open_gates = {}, gate_order = {}, open_inputs = {},
    idle_cond = core.cond(), usage_sum = new_usage(), want_ephemeral = 0,
    subs = setmetatable({}, { __mode = "k" }), closed = false,
    -- where input without { loop = … } goes: a handoff moves it (rig.handoff)
    active = r.active_primer or r.primers[1],
  }, Session)
  return S
end

local function check_open(S, where)
  if S.closed then fail(where, "the session is shut down", 3) end
end

-- A method's options: nil, or a table whose keys are among the names given.
-- Raises at the method's caller otherwise (where names the method). Returns opts.
local function check_options(where, opts, ...)
  if opts == nil then return nil end
  if type(opts) ~= "table" then fail(where, "options must be a table", 3) end
  for k in pairs(opts) do
    local known = false
    for i = 1, select("#", ...) do
      if k == select(i, ...) then known = true break end
    end
    if not known then fail(where, "unknown option '" .. tostring(k) .. "'", 3) end
  end
  return opts
end

-- The intent log: every submit is journaled as a command record (audit only:
-- queued input that never started a turn is not replayed).
-- A command record (UserInput, and delegation's SubagentResult and
-- DelegateBackgrounded): t has type, command_id, loop_id and the payload.
local function emit_command_record(S, t, wait)
  t.v = 1
  t.created_at = core.time()
  local body = json.encode(t)
  return S.core:emit(body, { type = t.type, loop_id = t.loop_id, kind = "command",
    id = t.command_id, wait = wait == true })
end

local function emit_command(S, cid, loop_id, msg)
  emit_command_record(S, { type = "UserInput", command_id = cid, loop_id = loop_id,
    message = msg })
end

local function loop_revisions(r)
  local revs = {}
  for _, l in ipairs(r.loops) do revs[l.name] = l:revision() end
  return revs
end

local function ws_hooks(S)
  return { emit = function(etype, fields, wait) return emit(S, etype, fields, wait) end,
           catalog = function(t) catalog(S, t) end }
end

-- SessionStarted, the record a new session (created or forked) starts with.
local function emit_started(S, r)
  return emit(S, "SessionStarted", { fingerprint = r:fingerprint(),
    loops = loop_revisions(r), primers = json.array({ table.unpack(r.primers) }),
    active_primer = r.active_primer, workspace = S.workspace })
end

-- ---- gates and turns ----

-- Closes an open gate (GateResolved): answered in its call, after a
-- restore by respond_gate, or cancelled by an interrupt or a resume.
local function close_gate(S, g, action, source, code)
  if g.resolved then return true end -- answered (and journaled) before a resume
  S.open_gates[g.gate_id] = nil
  for i, id in ipairs(S.gate_order) do
    if id == g.gate_id then table.remove(S.gate_order, i) break end
  end
  return emit(S, "GateResolved", { loop_id = g.loop_id, turn_id = g.turn_id,
    gate_id = g.gate_id, action = action, source = source or "user", code = code })
end

-- The failure of a turn that reached one of its limits.
local function limit_failure(name, value, what)
  return { code = "limit", limit = name,
           message = string.format("the turn reached its %s limit (%s)", what or name,
             tostring(value)) }
end

M.Session, M.fail = Session, fail
M.next_id, M.emit, M.catalog, M.fault_message = next_id, emit, catalog, fault_message
M.add_usage, M.new_usage, M.note_usage = add_usage, new_usage, note_usage
M.user_message, M.title_of = user_message, title_of
M.new_session, M.check_open, M.check_options = new_session, check_open, check_options
M.emit_command_record, M.emit_command = emit_command_record, emit_command
M.loop_revisions, M.ws_hooks, M.emit_started = loop_revisions, ws_hooks, emit_started
M.close_gate, M.limit_failure = close_gate, limit_failure

return M
