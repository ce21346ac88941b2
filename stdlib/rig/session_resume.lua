-- rig.session_resume: continuing a turn that a crash or a shutdown cut short
-- (docs/resume.md). rig.session calls in at a few points and journals on the
-- way what a resume needs: ToolCallsPlanned, the model's answer of a step
-- that calls tools, durable before any of them runs, and ToolResultRecorded,
-- each call's result as it completes, before the step's StepDone.
--
--   s:resumable() -> { { loop_id, turn_id, step_id?, calls, done, reason } }
--   s:resume([loop]) -> true | nil, msg, code ("nothing_to_resume", "busy", "faulted")
--
-- A restore still closes the turn the crash left open with TurnInterrupted
-- (reason "restored"); that turn, or one a shutdown interrupted (reason
-- "shutdown"), stays resumable until its loop starts another turn.
-- RestoreDone{ resumable = [loop ids] } says so. s:resume() starts a new turn
-- on each such loop (or the one named), journaled first as TurnResumed
-- { resumes = the cut turn, cause = its command, step_id, reused, rerun,
-- usage, revision, drifted }, which goes on from the last committed step:
--   - a step the model had answered (a ToolCallsPlanned and no StepDone): its
--     answer comes from the journal; a call with a recorded result keeps it;
--     the others run, checked and gated again (ctx.resumed, the same
--     ctx.idempotency_key as before);
--     an answer given to their gate, before the crash or to the restored gate
--     after it, stands when the call asks for the same again; the step
--     commits with its own step id, once;
--   - none: the model is asked again (a stream the crash cut, a model call
--     between steps);
--   - the last committed step ended the turn (only its terminal was lost):
--     the turn ends with it, no model call.
-- The turn's limits go on from what its committed steps used. A delegated
-- turn (a child's) is resumed by its parent's call: a start_agent or
-- message_agent call re-run by a resume waits for the request it made before
-- the crash (the child's turn resumed, or its answer taken) instead of
-- starting the work again.

local core = require "rig.core"
local json = require "rig.json"
local base = require "rig.session_base"
local structured = require "rig.session_output"
local delegation = require "rig.delegation"

local M = {}

local emit = base.emit
local new_usage, add_usage = base.new_usage, base.add_usage
local close_gate, limit_failure = base.close_gate, base.limit_failure

-- How a turn ended that a resume may continue: the restore closing what the
-- crash left open, a shutdown. A person's interrupt or a parent's stop_agent
-- is a decision, not a fault: those turns stay over.
local REASONS = { restored = true, shutdown = true }
local ANSWERS = { approve = true, approve_always = true, deny = true }
local DELEGATION = { start_agent = true, message_agent = true }

-- ---- the journal, folded ----

function M.new_fold()
  return { loops = {}, by_cause = {}, requests = {}, gates = {}, started = nil }
end

-- A turn chain: a turn and the resumes that continued it (one history).
local function new_chain(ev)
  return { loop_id = ev.loop_id, cause = ev.cause and ev.cause.command_id, turns = { ev.turn_id },
           open = true, terminal = nil, steps = 0, calls = 0, usage = new_usage(),
           last = nil, plan = nil, results = {}, gates = {}, requests = {} }
end

-- The step after the last committed one: the model's answer, what its calls did.
local function new_step(c, plan)
  c.plan, c.results, c.gates, c.requests = plan, {}, {}, {}
end

local function has(list, v)
  for _, x in ipairs(list) do if x == v then return true end end
  return false
end

-- One journal record (an event or a command, decoded).
function M.fold(f, ev, seq)
  local t = ev.type
  local c = ev.loop_id and f.loops[ev.loop_id]
  if t == "SessionStarted" then
    f.started = f.started or ev
  elseif t == "UserInput" then
    local d = ev.delegate
    if d then
      f.requests[ev.command_id] = { background = d.wait == false, child = ev.loop_id }
      local p = f.loops[d.parent_loop_id]
      if p and p.open and p.plan and has(p.turns, d.turn_id) then
        p.requests[d.call_id] = { cid = ev.command_id, child = ev.loop_id }
      end
    end
  elseif t == "DelegateBackgrounded" then
    local r = f.requests[ev.target_command_id]
    if r then r.background = true end
  elseif t == "TurnStarted" then
    c = new_chain(ev)
    f.loops[ev.loop_id] = c
    if c.cause then f.by_cause[c.cause] = c end
  elseif not c then
    return
  elseif t == "TurnResumed" then
    c.turns[#c.turns + 1] = ev.turn_id
    c.open, c.terminal = true, nil
  elseif t == "ToolCallsPlanned" then
    new_step(c, { seq = seq, step_id = ev.step_id, message = ev.message, usage = ev.usage,
                  finish_reason = ev.finish_reason })
  elseif t == "ToolResultRecorded" then
    if c.plan and c.plan.step_id == ev.step_id then c.results[ev.call_id] = ev.result end
  elseif t == "PermissionRequested" then
    if c.plan and c.plan.step_id == ev.step_id then
      local g = { gate_id = ev.gate_id, request = ev.request, unmet = ev.unmet }
      c.gates[ev.call_id] = g
      f.gates[ev.gate_id] = g
    end
  elseif t == "GateResolved" then
    local g = f.gates[ev.gate_id]
    if g then g.action = ev.action end
  elseif t == "StepDone" then
    c.steps = c.steps + 1
    for _, b in ipairs(ev.message and ev.message.content or {}) do
      if b.type == "tool_use" then c.calls = c.calls + 1 end
    end
    add_usage(c.usage, ev.usage)
    c.last = ev
    new_step(c, nil)
  elseif t == "TurnDone" or t == "TurnFailed" or t == "TurnInterrupted" then
    c.open, c.terminal = false, ev
  end
end

function M.scan(records)
  local f = M.new_fold()
  for _, r in ipairs(records) do
    if r.kind == "event" or r.kind == "command" then M.fold(f, json.decode(r.body), r.seq) end
  end
  return f
end

-- Open (the restore closes it) or interrupted by a restore or a shutdown.
local function resumable(c)
  if not c then return false end
  if c.open then return true end
  local t = c.terminal
  return t ~= nil and t.type == "TurnInterrupted" and REASONS[t.reason] == true
end

local function tool_uses(message)
  local out = {}
  for _, b in ipairs(message and message.content or {}) do
    if b.type == "tool_use" then out[#out + 1] = b end
  end
  return out
end

-- ---- what a restore says ----

-- After a restore rebuilt the loops: the turns s:resume() can continue (a
-- delegated request's turn is not among them: its parent's call resumes it,
-- or the restore handed its outcome back).
function M.restored(S, f)
  local out = {}
  for _, lid in ipairs(S.loop_order) do
    local c = f.loops[lid]
    if resumable(c) and not f.requests[c.cause] then
      local calls, done = 0, 0
      if c.plan then
        for _, b in ipairs(tool_uses(c.plan.message)) do
          calls = calls + 1
          if c.results[b.id] then done = done + 1 end
        end
      end
      out[lid] = { loop_id = lid, turn_id = c.turns[#c.turns], step_id = c.plan and c.plan.step_id,
                   calls = calls, done = done, reason = c.open and "restored" or c.terminal.reason }
    end
  end
  return out
end

function M.loop_ids(S)
  local ids = {}
  for _, lid in ipairs(S.loop_order) do
    if S.resumable_turns and S.resumable_turns[lid] then ids[#ids + 1] = lid end
  end
  return json.array(ids)
end

function M.resumable(S)
  local out = {}
  for _, lid in ipairs(S.loop_order) do
    local e = S.resumable_turns and S.resumable_turns[lid]
    if e then
      out[#out + 1] = { loop_id = e.loop_id, turn_id = e.turn_id, step_id = e.step_id,
                        calls = e.calls, done = e.done, reason = e.reason }
    end
  end
  return out
end

-- ---- resuming ----

-- Hands a chain to its loop as a resumed turn (the loop is idle).
-- runner (here and below): rig.session_turn's { enqueue, new_instance }.
local function start(S, inst, c, f, runner)
  local chain = {}
  for _, t in ipairs(c.turns) do chain[t] = true end
  local R = { chain = chain, resumes = c.turns[#c.turns], usage = c.usage, calls = c.calls,
              iterations = c.steps, plan = c.plan, step_id = c.plan and c.plan.step_id,
              results = c.results, gates = c.gates, requests = c.requests, last = c.last, fold = f }
  runner.enqueue(S, inst, { command_id = c.cause, resume = R,
    no_fold = f.requests[c.cause] and true })
end

function M.resume(S, loop, runner)
  if loop ~= nil and type(loop) ~= "string" then
    error("rig.session: resume: loop must be a loop id", 3)
  end
  if loop ~= nil and not S.loops[loop] then
    error("rig.session: resume: no loop '" .. loop .. "' in this session", 3)
  end
  local fault = S.faulted_msg or S.core:faulted()
  if fault then return nil, "session " .. S.id .. " is faulted: " .. tostring(fault), "faulted" end
  local want = {}
  for _, lid in ipairs(S.loop_order) do
    if (loop == nil or lid == loop) and S.resumable_turns and S.resumable_turns[lid] then
      want[#want + 1] = lid
    end
  end
  if #want == 0 then
    return nil, "nothing to resume in session " .. S.id .. (loop and (" loop '" .. loop .. "'") or "")
      .. ": no turn that a crash or a shutdown cut is waiting (a later turn or a resume ends that)",
      "nothing_to_resume"
  end
  for _, lid in ipairs(want) do
    if S.loops[lid].busy then
      return nil, "loop '" .. lid .. "' is busy (resume it when idle)", "busy"
    end
  end
  local records, msg, code = core.journal_read(S.rig.store, S.id, 1, 0)
  if not records then return nil, msg, code end
  local f = M.scan(records)
  for _, lid in ipairs(want) do
    if not resumable(f.loops[lid]) then
      return nil, "nothing to resume in loop '" .. lid .. "': its journal shows no cut turn",
        "nothing_to_resume"
    end
  end
  -- no yield from here on: each loop is busy with its resumed turn before anyone else runs
  for _, lid in ipairs(want) do start(S, S.loops[lid], f.loops[lid], f, runner) end
  return true
end

-- How the last committed step ended the turn, when it did (its terminal was
-- journaled after it, and lost): the terminal's type and fields, or nil.
local function ended_by(inst, R)
  local last = R.last
  if not last then return nil end
  local calls = tool_uses(last.message)
  structured.out_setup(inst)
  local final_tool = structured.FINAL_TOOL
  local output, oerr
  if #calls == 0 then
    if inst.output then
      if inst.output_native then
        output, oerr = structured.native_output(inst, last.message)
      else
        oerr = structured.invalid_output(inst, "the model answered without calling " .. final_tool)
      end
    end
  elseif #calls == 1 and calls[1].name == final_tool and inst.output and not inst.output_native then
    local final = calls[1]
    if final.error then
      oerr = structured.invalid_output(inst, "invalid JSON arguments: " .. tostring(final.error))
    else
      output, oerr = structured.check_output(inst, final.input or {})
    end
  else
    return nil
  end
  if oerr then return { "TurnFailed", { error = oerr } } end
  return { "TurnDone", { message = last.message, usage = R.usage, output = output } }
end

-- The first thing a resumed turn does (in its task): supersede the gates the
-- cut turn left open and no one answered (the call asks again), journal
-- TurnResumed, and see whether the turn had already ended or used its budget.
function M.begin(S, inst, turn, R)
  turn.resume = R
  for _, gid in ipairs({ table.unpack(S.gate_order) }) do
    local g = S.open_gates[gid]
    if g and g.restored and R.chain[g.turn_id] then
      local fg = R.fold.gates[gid]
      if g.answer then
        -- answered here, its GateResolved still on its way to the journal
        if fg then fg.action = g.answer end
      else
        if fg then fg.action = "cancelled" end
        close_gate(S, g, "cancelled", "resumed")
      end
    end
  end
  local reused, rerun = {}, {}
  if R.plan then
    for _, b in ipairs(tool_uses(R.plan.message)) do
      if R.results[b.id] then reused[#reused + 1] = b.id else rerun[#rerun + 1] = b.id end
    end
  end
  local rev = inst.def:revision()
  local started = R.fold.started and R.fold.started.loops or {}
  local ok, msg, code = emit(S, "TurnResumed", { loop_id = inst.id, turn_id = turn.id,
    resumes = R.resumes, cause = { command_id = turn.command_id }, step_id = R.step_id,
    reused = json.array(reused), rerun = json.array(rerun), usage = R.usage, revision = rev,
    drifted = started[inst.name] ~= nil and started[inst.name] ~= rev or nil })
  if not ok then return nil, msg, code end
  if not R.plan then
    R.ended = ended_by(inst, R)
    local lim, u = inst.limits, R.usage
    if not R.ended and lim.max_tokens and require("rig.budget").tokens_of(u) >= lim.max_tokens then
      R.ended = { "TurnFailed", { error = limit_failure("max_tokens", lim.max_tokens, "token") } }
    elseif not R.ended and lim.max_cost and (u.cost or 0) >= lim.max_cost then
      R.ended = { "TurnFailed", { error = limit_failure("max_cost", lim.max_cost, "cost") } }
    end
  end
  return true
end

-- The cut step's journaled answer, once, as a stream with no chunks.
local Replay = {}
Replay.__index = Replay
function Replay:stream() return self end
function Replay:chunks() return function() return nil end end
function Replay:result()
  local p = self.plan
  return { message = p.message, usage = p.usage, finish_reason = p.finish_reason }
end
function Replay:close() end

function M.take(R)
  local p = R.plan
  if not p then return nil end
  R.plan = nil
  return setmetatable({ plan = p, step_id = p.step_id }, Replay)
end

-- A gate a re-run call reaches: the answer given before the resume, when it
-- was to the same request with the same unmet requirements. approve_always
-- saved its rules when it was given; this call is approved once.
function M.answer(S, turn, call, req, decision)
  local R = turn.resume
  if turn.step_id ~= R.step_id then return nil end
  local g = R.gates[call.id]
  if not g or not ANSWERS[g.action] then return nil end
  if json.encode(g.request) ~= json.encode(req)
     or json.encode(g.unmet or json.array({})) ~= json.encode(json.array(decision.unmet or {})) then
    return nil
  end
  R.gates[call.id] = nil
  return g.action == "approve_always" and "approve" or g.action
end

-- Waits, as the cut call did, for the child's turn this resume continues.
local function wait_child(S, inst, child, c, f, call, runner)
  local d = delegation.state(S)
  local w = { cid = c.cause, parent = inst.id, child_id = child.id, background = false,
              cond = core.cond() }
  d.requests[c.cause] = w
  start(S, child, c, f, runner)
  local input = call.input or {}
  local timeout = type(input.timeout) == "number" and input.timeout or nil
  return delegation.await(S, w, inst.id, timeout)
end

-- A start_agent/message_agent call run again by a resume (past its gate, as
-- any call), whose request reached the child before the crash: a run that
-- takes the request's outcome (the child's answer, or its resumed turn's)
-- instead of making a second request. nil: the tool runs as it is.
function M.runner(S, inst, turn, call, runner)
  local req = DELEGATION[call.name] and turn.resume.requests[call.id]
  if not req then return nil end
  local f = turn.resume.fold
  local child = S.loops[req.child]
  local c = f.by_cause[req.cid]
  if not child or not c then return nil end -- it never started a turn: the call runs again
  local running = { agent_id = child.id, status = "running", message = "the agent goes on "
    .. "and its final answer will arrive as a new message" }
  return function()
    local outcome
    if f.requests[req.cid] and f.requests[req.cid].background then
      return running -- the restore handed its outcome back already
    elseif c.terminal and c.terminal.type ~= "TurnInterrupted" then
      outcome = delegation.outcome_of(c.terminal.type, c.terminal)
    elseif resumable(c) and f.loops[child.id] == c and not child.busy then
      outcome = wait_child(S, inst, child, c, f, call, runner)
      if not outcome then return running end
    else
      outcome = delegation.outcome_of("TurnInterrupted", c.terminal or {})
    end
    if outcome.status == "answered" then return outcome.text end
    return nil, "agent " .. child.id .. " " .. (delegation.HEADS[outcome.status] or outcome.status)
      .. ": " .. outcome.text
  end
end

-- A call of the resumed step: its recorded result (true: already journaled),
-- or nil (it runs).
function M.call(S, inst, turn, call)
  local R = turn.resume
  if turn.step_id ~= R.step_id then return nil end
  local got = R.results[call.id]
  if got then return got, true end
  return nil
end

return M
