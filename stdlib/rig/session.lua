-- rig.session: live sessions of a rig — turns and steps, the queue, gates,
-- interrupt, restore (docs/sessions.md). The durable part (lease, journal, hub,
-- catalog) is C behind rig.core; this module decides what happens and
-- emits the events.
--
--   local s = r:session([{ seed = REF, on_gate = f | "approve" | "deny" | "terminal" }])
--                                    -- or r:restore(id [, { accept_drift = true, on_gate }]);
--                                    -- on_gate: the approver s:ask uses (rig.ask)
--   s.id
--   s:submit(text | blocks [, { loop = "name" }]) -> command id (never waits on the turn)
--   local sub = s:subscribe{ loops = "all" | { names }, ephemeral = true, buffer = 1024 }
--   for ev in sub:events() do … end  -- ev.type, ev.seq (enduring), ev.loop_id, ev.turn_id,
--                                    -- ev.ends_turn; sub:next([timeout]), sub.error, sub:close()
--   s:respond_gate(gate_id, "approve" | "approve_always" | "deny") -> true | nil, msg, code
--   s:gates()                        -- the open gates { { gate_id, loop_id, tool, request, unmet } }
--   s:inputs()                       -- open questions of a tool's server (MCP elicitation)
--   s:respond_input(input_id, "accept" | "decline" | "cancel", content) -> true | nil, msg, code
--   s:interrupt() -> true if a turn was cancelled
--   s:wait_idle([timeout]) -> true | nil, msg, code ("faulted", "timeout", or "turn_failed" /
--     "interrupted": the first turn of a primer loop that failed or was interrupted since
--     the last wait_idle, reported once)
--   for rec in s:journal{ from = 1 } do … end   -- rec.seq, rec.type, the event's fields
--   s:history([loop]) -> the loop's conversation (the messages the model sees), a copy
--   s:compact([loop] [, { fallback = "truncate" }]) -> { replaced, retained, summary,
--     fallback?, error? } | nil, msg, code ("busy", "nothing_to_compact", "empty_summary",
--     "faulted", "cancelled", the summarizer's code): an idle loop's older history becomes
--     one summary message (CompactionCommitted); with fallback, a failed summary drops
--     that part instead behind a marker message (fallback = "truncated"), as automatic
--     compaction always does
--   s:usage() -> { input_tokens, output_tokens, cache_read_tokens, …, cost }
--   s:fork{ at = SEQ } -> a new live session of the same rig | nil, msg, code
--     ("invalid_request": SEQ ends no committed step or turn, is past the tip, or another
--     loop's turn is in flight there; "refused": a shared workspace). Its history is this
--     one's up to SEQ (default: the last cut point), its workspace the checkpoint in force
--     there; journaled first as SessionForked{ forked_from = { session, at } }, then
--     LoopStarted{ history } per loop. s.forked_from = { session, at }. An exclusive root
--     holds one live tree: the origin must be idle ("busy"), is shut down with
--     { hand_over = true } first and the fork's f.handover = { session, ref } says so
--     (r:restore(origin) brings its tree back into the root)
--   s:checkpoint([{ timeout = s }]) -> ref | nil, msg, code; s:clear_fault() -> true | false:
--     the workspace's way out of a fault (rig.workspace; WorkspaceFaultCleared)
--   s:shutdown([{ hand_over = true }]) -> true | the handover checkpoint ref | nil, msg, code
--   s:resumable() -> { { loop_id, turn_id, step_id?, calls, done, reason } }: after a restore,
--     the turns a crash ("restored") or a shutdown cut; s:resume([loop]) -> true | nil, msg,
--     code ("nothing_to_resume", "busy", "faulted") continues them from the last committed
--     step (TurnResumed; rig.session_resume, docs/resume.md). A step's tool calls are
--     journaled before they run (ToolCallsPlanned) and each result as it completes
--     (ToolResultRecorded); a tool gets ctx.idempotency_key (session/step/call, the same
--     when a resume runs the call again) and ctx.resumed
--   r:sessions() -> catalog entries (a fork's carries forked_from = { session, at })
--
-- A loop with `delegates` gets the tools rig.delegation injects (start_agent,
-- message_agent, list_agents, stop_agent); its children are loop instances
-- "name#N" (N counts the session's children), journaled with LoopStarted
-- { parent_loop_id, parent_call_id, depth, name }, restored with their parent.
--
-- Events are flat JSON objects: v, type, session_id, loop_id, turn_id,
-- step_id, event_id, created_at, cause, ends_turn (terminals) and the type's
-- fields. Enduring ones are journaled before anyone sees them; the runner
-- applies an event to its own state when it queues it and waits for the
-- append before it acts on it (a failed append faults the session, whose
-- state then only matters to a restore, which rebuilds it from the journal).
--
-- This module is the object and its public methods. The runner's parts:
--   rig.session_base     the class, ids, events, command records, catalog, usage
--   rig.session_output   a loop's output_schema (native or the final tool)
--   rig.session_compact  compaction (s:compact, automatic before a model call)
--   rig.session_turn     turns, steps, tool calls and gates, the loop's actor
--   rig.session_replay   the journal folded; r:restore
--   rig.session_fork     s:fork
--   rig.session_resume   s:resume, continuing a cut turn
-- They require one way, with no cycle (tests/lua/stdlib_layout_spec.lua):
-- base ← output ← compact; base ← rig.delegation ← session_resume; base ←
-- rig.handoff, rig.hooks; all of those ← turn ← replay ← fork ← this module.
-- What rig.delegation, rig.handoff and session_resume need from above
-- (starting a loop's work) is handed to them: session_turn's runner.

local core = require "rig.core"
local json = require "rig.json"
local base = require "rig.session_base"
local output = require "rig.session_output"
local compaction = require "rig.session_compact"
local turns = require "rig.session_turn"
local replay = require "rig.session_replay"
local forking = require "rig.session_fork"
local resuming = require "rig.session_resume"
local workspace = require "rig.workspace"

local M = {}

local Session = base.Session
local fail, check_open, emit, catalog = base.fail, base.check_open, base.emit, base.catalog
local check_options = base.check_options
local next_id, fault_message, note_usage = base.next_id, base.fault_message, base.note_usage
local user_message, emit_command, new_session = base.user_message, base.emit_command, base.new_session
local ws_hooks = base.ws_hooks
local compact = compaction.compact
local close_gate = base.close_gate
local enqueue, drive, cancel_queue = turns.enqueue, turns.drive, turns.cancel_queue
local restore = replay.restore

M.ENDURING, M.EPHEMERAL, M.TERMINAL = base.ENDURING, base.EPHEMERAL, base.TERMINAL
M.cap_result = base.cap_result
M.FINAL_TOOL = output.FINAL_TOOL
M.SUMMARY_HEAD, M.OMITTED_HEAD = compaction.SUMMARY_HEAD, compaction.OMITTED_HEAD

local ACTIONS = { approve = true, approve_always = true, deny = true }
local INPUT_ACTIONS = { accept = true, decline = true, cancel = true }

function Session:__tostring()
  return string.format("rig.session(%s)", self.id)
end

function Session:submit(input, opts)
  check_open(self, "submit")
  local msg, err, ecode = user_message(input)
  if not msg and ecode then return nil, "submit: " .. err, ecode end -- media: expected
  if not msg then fail("submit", err, 2) end
  -- images and documents go into the store once; the journal keeps references
  for i, b in ipairs(msg.content) do
    if b.data then
      local sb, serr, scode = require("rig.media").store(self.rig.store, b)
      if not sb then return nil, "submit: " .. serr, scode or "io" end
      msg.content[i] = sb
    end
  end
  local target = self.active
  if opts ~= nil then
    check_options("submit", opts, "loop")
    if opts.loop ~= nil then target = opts.loop end
  end
  local inst = self.loops[target]
  if not inst then fail("submit", "no loop '" .. tostring(target) .. "' in this session", 2) end
  local cid = next_id(self, "c")
  local f = fault_message(self)
  if f then return nil, f, "faulted" end
  if self.ws then
    local wmsg, wcode = workspace.refusal(self)
    if wmsg then return nil, wmsg, wcode end
  end
  emit_command(self, cid, inst.id, msg)
  enqueue(self, inst, { command_id = cid, message = msg })
  return cid
end

-- Compacts an idle loop now (a busy one refuses: compaction there is
-- automatic, between steps). Input submitted meanwhile queues and runs after.
-- opts.fallback = "truncate": if the summary fails, drop the oldest messages
-- instead (as automatic compaction does); without it the failure is returned.
function Session:compact(loop, opts)
  check_open(self, "compact")
  if loop ~= nil and type(loop) ~= "string" then fail("compact", "loop must be a loop id", 2) end
  local fallback = false
  if opts ~= nil then
    check_options("compact", opts, "fallback")
    if opts.fallback ~= nil and opts.fallback ~= "truncate" then
      fail("compact", "option 'fallback' must be \"truncate\"", 2)
    end
    fallback = opts.fallback == "truncate"
  end
  local inst = self.loops[loop or self.active]
  if not inst then fail("compact", "no loop '" .. tostring(loop) .. "' in this session", 2) end
  local f = fault_message(self)
  if f then return nil, f, "faulted" end
  if inst.busy then
    return nil, "loop '" .. inst.id .. "' is busy (compact it when idle)", "busy"
  end
  inst.busy = true
  self.busy = self.busy + 1
  if self.busy == 1 then emit(self, "SessionActive", {}, false) end
  local done = { cond = core.cond() }
  inst.driver = core.spawn(function()
    local task = core.spawn(compact, self, inst, "manual", nil, fallback)
    inst.task = task
    local res, msg, code = task:wait()
    inst.task = nil
    if res == nil and code == "cancelled" then
      msg = "the compaction was interrupted"
      cancel_queue(self, inst, "interrupted")
    elseif res == nil and code == nil then
      code = "internal"
    end
    if res then note_usage(self) end
    done.res, done.msg, done.code, done.over = res, msg, code, true
    done.cond:signal()
    drive(self, inst)
  end)
  while not done.over do done.cond:wait() end
  if done.res then return done.res end
  return nil, done.msg, done.code
end

function Session:interrupt()
  check_open(self, "interrupt")
  local any = false
  for _, id in ipairs(self.loop_order) do
    local inst = self.loops[id]
    if inst.task and inst.task:status() ~= "done" then
      if inst.turn then inst.turn.interrupt_reason = "interrupted" end
      if inst.task:cancel() then any = true end
    end
  end
  return any
end

function Session:respond_gate(gate_id, action)
  check_open(self, "respond_gate")
  if type(gate_id) ~= "string" then fail("respond_gate", "gate id must be a string", 2) end
  if not ACTIONS[action] then
    fail("respond_gate", "action must be 'approve', 'approve_always' or 'deny' (got '" ..
      tostring(action) .. "')", 2)
  end
  local g = self.open_gates[gate_id]
  if not g then return nil, "no open gate '" .. gate_id .. "'", "not_found" end
  if g.answer then return nil, "gate '" .. gate_id .. "' is already answered", "conflict" end
  if g.restored then
    -- its turn ended with the crash: the answer is recorded, and an
    -- approve_always still saves its rules
    g.answer = action
    local source
    if action == "approve_always" then
      local gate = self.loops[g.loop_id] and self.loops[g.loop_id].gate
      local ok, err = gate and gate:approve_always(g.candidates or {})
      if gate and not ok then
        action, source = "deny", "rule_write_failed"
        close_gate(self, g, action, source)
        return nil, "the rule could not be saved: " .. tostring(err), "io"
      end
    end
    local ok, msg, code = close_gate(self, g, action, source)
    if not ok then return nil, msg, code end
    return true
  end
  g.answer = action
  g.cond:signal()
  return true
end

-- Answers an open question (UserInputRequested): action "accept" with content (a
-- table of the schema's fields), "decline" or "cancel".
function Session:respond_input(input_id, action, content)
  check_open(self, "respond_input")
  if not INPUT_ACTIONS[action] then
    fail("respond_input", "action must be \"accept\", \"decline\" or \"cancel\"", 2)
  end
  if content ~= nil and type(content) ~= "table" then
    fail("respond_input", "content must be a table", 2)
  end
  local q = self.open_inputs[input_id]
  if not q or q.answer then
    return nil, "no open input '" .. tostring(input_id) .. "'", "input_not_open"
  end
  q.answer = { action = action, content = action == "accept" and (content or {}) or nil }
  q.cond:signal()
  return true
end

-- The open questions { { input_id, loop_id, call_id, server, message, schema } }.
function Session:inputs()
  local out = {}
  for id, q in pairs(self.open_inputs) do
    out[#out + 1] = { input_id = id, loop_id = q.loop_id, turn_id = q.turn_id, call_id = q.call_id,
                      server = q.server, message = q.message, schema = q.schema }
  end
  table.sort(out, function(a, b) return a.input_id < b.input_id end)
  return out
end

-- s:resume([loop]) -> true | nil, msg, code ("nothing_to_resume", "busy", "faulted"):
-- continues the turns a crash or a shutdown cut (s:resumable() lists them;
-- rig.session_resume, docs/resume.md).
function Session:resume(loop)
  check_open(self, "resume")
  return resuming.resume(self, loop, turns.runner)
end

function Session:resumable()
  return resuming.resumable(self)
end

function Session:gates()
  local out = {}
  for _, gid in ipairs(self.gate_order) do
    local g = self.open_gates[gid]
    if g then
      out[#out + 1] = { gate_id = gid, loop_id = g.loop_id, turn_id = g.turn_id, tool = g.tool,
                        request = g.request, unmet = g.unmet, restored = g.restored == true }
    end
  end
  return out
end

function Session:wait_idle(timeout)
  local deadline = timeout and (core.now() + timeout)
  while true do
    local f = fault_message(self)
    if f then return nil, f, "faulted" end
    if self.busy == 0 and self.settling == 0 then
      local t = self.turn_trouble
      if not t then return true end
      self.turn_trouble = nil
      if t.type == "TurnInterrupted" then
        return nil, "turn " .. t.turn_id .. " of " .. t.loop_id .. " was interrupted ("
          .. tostring(t.reason) .. ")", "interrupted"
      end
      local e = t.error or {}
      return nil, "turn " .. t.turn_id .. " of " .. t.loop_id .. " failed: "
        .. tostring(e.message or "?") .. (e.code and (" (" .. tostring(e.code) .. ")") or ""),
        "turn_failed"
    end
    local left = deadline and (deadline - core.now())
    if left and left <= 0 then return nil, "timeout", "timeout" end
    self.idle_cond:wait(left)
  end
end

function Session:faulted()
  return fault_message(self)
end

-- s:shutdown{ hand_over = true }: an idle session first checkpoints its
-- workspace (trigger "handover", which a later restore brings back in place
-- whoever used an exclusive root meanwhile); returns that ref (true without
-- a workspace) | nil, msg, code ("busy", the capture's code: then it is live).
function Session:shutdown(opts)
  local ref
  if opts ~= nil then
    check_options("shutdown", opts, "hand_over")
    if opts.hand_over and not self.closed and self.ws then
      local msg, code
      ref, msg, code = workspace.hand_over(self)
      if not ref then return nil, msg, code end
    end
  end
  if self.closed then return true end
  self.stopping = true -- no hand-backs now: a restore delivers them
  for _, id in ipairs(self.loop_order) do
    local inst = self.loops[id]
    if inst.turn then inst.turn.interrupt_reason = "shutdown" end
    cancel_queue(self, inst, "shutting_down")
    if inst.task then inst.task:cancel() end
  end
  for _, id in ipairs(self.loop_order) do
    local inst = self.loops[id]
    if inst.driver then inst.driver:wait() end
  end
  if self.ws then workspace.close(self) end
  if not self:faulted() then
    emit(self, "SessionStopped", {})
    catalog(self, { status = "stopped", state = "stopped" })
  end
  self.closed = true
  self.core:close()
  return ref or true
end

-- The workspace: a manual capture (with its own timeout), clearing a fault,
-- a rewind (idle only), the checkpoints.
function Session:checkpoint(opts)
  check_open(self, "checkpoint")
  local timeout
  if opts ~= nil then
    check_options("checkpoint", opts, "timeout")
    timeout = opts.timeout
    if type(timeout) ~= "number" or timeout ~= timeout or timeout <= 0 or timeout > 86400 then
      fail("checkpoint", "option 'timeout' must be a number of seconds above 0, at most 86400", 2)
    end
  end
  if not self.ws then return nil, "the rig has no workspace", "refused" end
  return workspace.checkpoint(self, timeout)
end

function Session:clear_fault()
  check_open(self, "clear_fault")
  if not self.ws then return false end
  return workspace.clear_fault(self)
end

function Session:rewind(ref)
  check_open(self, "rewind")
  if type(ref) ~= "string" then fail("rewind", "ref must be a snapshot ref string", 2) end
  if not self.ws then return nil, "the rig has no workspace", "refused" end
  return workspace.rewind(self, ref)
end

function Session:snapshots()
  return workspace.snapshots(self)
end

function Session:history(loop)
  local inst = self.loops[loop or self.active]
  if not inst then fail("history", "no loop '" .. tostring(loop) .. "'", 2) end
  return turns.history_copy(inst)
end

function Session:usage()
  local out = {}
  for k, v in pairs(self.usage_sum) do out[k] = v end
  out.cost = out.cost or 0
  return out
end

-- ---- subscriptions ----

local Sub = {}
Sub.__index = Sub

local function decode_event(text, seq)
  local ev, err = json.decode(text)
  if not ev then error("rig.session: a journal event is not JSON: " .. tostring(err), 0) end
  ev.seq = seq
  return ev
end

function Session:subscribe(opts)
  check_open(self, "subscribe")
  opts = check_options("subscribe", opts or {}, "loops", "ephemeral", "buffer")
  local loops = opts.loops
  if loops == nil then loops = "all" end
  if loops ~= "all" and type(loops) ~= "table" then
    fail("subscribe", "field 'loops' must be \"all\" or a list of loop names", 2)
  end
  local ephemeral = opts.ephemeral ~= false
  local csub = self.core:subscribe{ loops = loops, ephemeral = ephemeral,
    buffer = opts.buffer or 1024 }
  local sub = setmetatable({ c = csub, S = self, ephemeral = ephemeral }, Sub)
  if ephemeral then self.want_ephemeral = self.want_ephemeral + 1 end
  self.subs[sub] = true
  return sub
end

function Sub:next(timeout)
  local text, seq, code = self.c:next(timeout)
  if not text then
    if code ~= "timeout" then self.error = seq end
    return nil, seq, code
  end
  return decode_event(text, seq)
end

function Sub:events(timeout)
  return function()
    local ev, msg, code = self:next(timeout)
    if ev then return ev end
    if code ~= "closed" then self.error, self.code = msg, code end
    return nil
  end
end

function Sub:close()
  if not self.closed then
    self.closed = true
    if self.ephemeral then self.S.want_ephemeral = self.S.want_ephemeral - 1 end
    self.c:close()
  end
end
Sub.__close = Sub.close
Sub.__gc = function(self)
  if not self.closed and self.ephemeral then self.S.want_ephemeral = self.S.want_ephemeral - 1 end
end

-- ---- reading the journal ----

local function record_table(r)
  if r.kind == "fence" then
    return { seq = r.seq, type = "Fence", epoch = r.epoch }
  end
  local t = decode_event(r.body, r.seq)
  t.kind = r.kind ~= "event" and r.kind or nil
  return t
end

local function journal_iter(store, sid, from)
  local buf, i, nxt = {}, 1, from or 1
  local done = false
  return function()
    if i > #buf then
      if done then return nil end
      local recs, tip = core.journal_read(store, sid, nxt, 256)
      if not recs then error("rig.session: " .. tostring(tip), 2) end
      buf, i = recs, 1
      if #recs == 0 then done = true return nil end
      nxt = recs[#recs].seq + 1
      if nxt > tip then done = true end
    end
    local r = buf[i]
    i = i + 1
    return record_table(r)
  end
end

function Session:journal(opts)
  local from = 1
  if opts ~= nil then
    check_options("journal", opts, "from")
    from = opts.from or 1
  end
  return journal_iter(self.rig.store, self.id, from)
end

-- ---- creating ----

local function create(r, opts)
  local seed
  if opts ~= nil then
    if type(opts) ~= "table" then fail("session", "options must be a table", 2) end
    for k in pairs(opts) do
      if k ~= "seed" and k ~= "on_gate" then
        fail("session", "unknown option '" .. tostring(k) .. "' (seed, on_gate)", 2)
      end
    end
    seed = opts.seed
    if seed ~= nil and type(seed) ~= "string" then
      fail("session", "option 'seed' must be a snapshot ref string", 2)
    end
    local og = opts.on_gate
    if og ~= nil and type(og) ~= "function" and og ~= "approve" and og ~= "deny"
       and og ~= "terminal" then
      fail("session", "option 'on_gate' must be a function or \"approve\", \"deny\" or "
        .. "\"terminal\"", 2)
    end
  end
  local csess, msg, code = core.session_open(r.store, nil)
  if not csess then return nil, msg, code end
  local S = new_session(r, csess)
  S.on_gate = opts and opts.on_gate -- the approver s:ask uses when its call names none
  local ok
  if r.workspace or seed ~= nil then
    ok, msg, code = workspace.create(S, r, seed, ws_hooks(S))
    if not ok then csess:close() return nil, msg, code end
  end
  ok, msg, code = base.emit_started(S, r)
  if ok and S.ws then ok, msg, code = workspace.started(S) end
  if not ok then workspace.release(S.ws) csess:close() return nil, msg, code end
  for i, name in ipairs(r.primers) do
    -- the last one waits: the session is fully started when it is returned
    ok, msg, code = turns.start_primer(S, r, name, i == #r.primers)
    if not ok then workspace.release(S.ws) csess:close() return nil, msg, code end
  end
  catalog(S, { state = "idle", status = "active", loop_count = #r.primers })
  return S
end

-- s:fork (rig.session_fork)
Session.fork = forking.fork

local function sessions(r)
  local list, msg, code = core.catalog_list(r.store)
  if not list then return nil, msg, code end
  return list
end

M.rig_methods = {
  session = function(r, opts) return create(r, opts) end,
  restore = function(r, id, opts) return restore(r, id, opts) end,
  sessions = sessions,
}
-- s:ask(text [, opts]) -> answer, usage | nil, message, code (rig.ask)
function Session:ask(input, opts)
  check_open(self, "ask")
  return require("rig.ask").ask(self, input, opts)
end

M.Session = Session

return M
