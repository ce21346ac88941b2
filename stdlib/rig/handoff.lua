-- rig.handoff: a loop hands the conversation to another loop of the rig
-- (rig.loop `handoffs`; docs/handoffs.md). Unlike delegation the conversation
-- moves: nothing comes back as a tool result.
--
-- A loop with handoffs = { "billing", { loop = "refunds", filter = "no_tools" } }
-- gets one injected tool per target, transfer_to_<loop>{ message? }. A call goes
-- through the loop's gate like start_agent: it requires { kind = "delegate",
-- scope = match = the target loop's name }. When it is approved the step
-- commits, the turn ends (TurnDone{ handoff = { to, call_id } }) and then:
--   LoopStarted { loop_id = to }                when the target has no instance yet
--   ActiveLoopChanged { from, to, reason = "handoff", turn_id, call_id, history }
--     history: the target's new conversation, the caller's history through the
--     filter: "all" (everything but the transfer call and its result), "no_tools"
--     (text only: tool calls, results and thinking dropped) or "last_user" (the
--     last user message with text), or a function(history) -> history
--   the command HandoffInput { command_id, loop_id = to, from_loop_id, message }
--     and the target's turn on it: a user message "[conversation handed over from
--     loop 'FROM']" and the model's message, if it gave one
-- The active loop is where s:submit sends input without { loop = … }; s.active
-- names it. A restore folds ActiveLoopChanged (the active loop and the target's
-- history) and starts the target's turn when a crash came between the handoff
-- and it; a fork keeps the active loop of its cut. Only top-level loops hand
-- off (a delegated child answers its parent instead); a target busy with a
-- turn of its own refuses the call (one that became busy after the call keeps
-- its history: ActiveLoopChanged{ busy = true } without one, the input queued).

local json = require "rig.json"
local tool_mod = require "rig.tool"

local M = {}

M.PREFIX = "transfer_to_"

-- The session's shared parts. What starts a loop's work, rig.session_turn's
-- runner { enqueue, new_instance }, is handed in (that module is above this one).
local base = require "rig.session_base"
local emit, next_id, user_message = base.emit, base.next_id, base.user_message
local command = base.emit_command_record

local MAX_TEXT = 64 * 1024

-- Test seam: called (S, handoff) once the handoff is journaled, before the
-- target's turn is queued (the crash test kills the process there). nil otherwise.
M.before_input = nil

function M.tools(S, inst)
  local out = {}
  for i, h in ipairs(inst.def.handoffs or {}) do
    local target = S.rig:loop(h.loop)
    local about = h.description or (target and target.description)
    out[i] = tool_mod._injected{
      name = M.PREFIX .. h.loop,
      description = "Hand this conversation over to the agent '" .. h.loop .. "'"
        .. (about and (": " .. about) or "") .. ". It goes on from here with the user; "
        .. "you do not get an answer back. Call it alone.",
      schema = { type = "object", additionalProperties = false, properties = {
        message = { type = "string", description = "what the next agent should know (optional)" },
      } },
      prepare = function(args)
        if args.message ~= nil and #args.message > MAX_TEXT then
          return nil, "message is longer than " .. MAX_TEXT .. " bytes"
        end
        return { summary = "hand the conversation to " .. h.loop,
                 requirements = { { kind = "delegate", scope = h.loop, match = h.loop } } }, args
      end,
      run = function(_, ctx)
        local me = S.loops[ctx.loop_id]
        local t = S.loops[h.loop]
        if t and t.busy then
          return nil, "refused: loop '" .. h.loop .. "' is busy with a turn of its own"
        end
        if me.turn then
          me.turn.handoff = { to = h.loop, call_id = ctx.call_id,
                              message = ctx.prepared and ctx.prepared.message, filter = h.filter }
        end
        return "the conversation goes to '" .. h.loop .. "' when this step ends"
      end,
    }
  end
  return out
end

-- Drops blocks of a message; nil when none is left.
local function keep_blocks(m, pred)
  local c = {}
  for _, b in ipairs(m.content) do
    if pred(b) then c[#c + 1] = b end
  end
  if #c == 0 then return nil end
  return { role = m.role, content = json.array(c) }
end

function M.filter(history, filter, call_id)
  local out = {}
  if type(filter) == "function" then
    local ok, v = pcall(filter, history)
    if not ok then return nil, "the handoff's filter failed: " .. tostring(v) end
    if type(v) ~= "table" then return nil, "the handoff's filter returned no list" end
    for i, m in ipairs(v) do out[i] = m end
    return out
  end
  if filter == "last_user" then
    for i = #history, 1, -1 do
      local m = history[i]
      if m.role == "user" then
        local k = keep_blocks(m, function(b) return b.type == "text" end)
        if k then return { k } end
      end
    end
    return out
  end
  for _, m in ipairs(history) do
    local k
    if filter == "no_tools" then
      k = keep_blocks(m, function(b) return b.type == "text" end)
    else
      k = keep_blocks(m, function(b)
        return not ((b.type == "tool_use" and b.id == call_id)
          or (b.type == "tool_result" and b.tool_use_id == call_id))
      end)
    end
    -- two user-side messages in a row stay apart; the codecs merge what they must
    if k then out[#out + 1] = k end
  end
  return out
end

-- After the caller's TurnDone{ handoff } is queued: the target gets the
-- conversation and a turn. cid: a command id already journaled (a restore).
function M.perform(S, inst, turn, h, runner)
  if S.stopping or S.closed or S.faulted_msg then return end
  local target = S.loops[h.to]
  local ok, msg, code
  if not target then
    local def = S.rig:loop(h.to)
    target = runner.new_instance(S, def, h.to)
    ok, msg, code = emit(S, "LoopStarted", { loop_id = h.to, loop = h.to,
      revision = def:revision(), handoff_from = inst.id }, false)
  end
  local history, ferr = M.filter(inst.history, h.filter, h.call_id)
  if not history then
    -- the conversation stays: the caller's loop remains active
    emit(S, "ActiveLoopChanged", { from = inst.id, to = inst.id, reason = "handoff_failed",
      turn_id = turn.id, call_id = h.call_id, error = ferr }, false)
    return
  end
  -- a target that started a turn of its own since the call keeps its history
  -- (its turn reads it); the handoff's input queues behind that turn
  local busy = target.busy or nil
  ok, msg, code = emit(S, "ActiveLoopChanged", { from = inst.id, to = h.to, reason = "handoff",
    turn_id = turn.id, call_id = h.call_id, history = not busy and json.array(history) or nil,
    busy = busy })
  if not ok then
    S.faulted_msg = S.faulted_msg or S.core:faulted() or tostring(msg)
    return
  end
  S.active = h.to
  if not busy then
    target.history = history
    target.context_tokens = nil
  end
  local text = "[conversation handed over from loop '" .. inst.id .. "']"
  if h.message and h.message:find("%S") then text = text .. "\n\n" .. h.message end
  local um = user_message(text)
  local cid = next_id(S, "c")
  ok = command(S, { type = "HandoffInput", command_id = cid, loop_id = h.to,
    from_loop_id = inst.id, message = um }, true)
  if not ok then
    S.faulted_msg = S.faulted_msg or S.core:faulted() or "the journal append failed"
    return
  end
  if M.before_input then M.before_input(S, h) end
  runner.enqueue(S, target, { command_id = cid, message = um, hand_back = true })
end

-- ---- restore ----

function M.new_fold() return { inputs = {}, order = {}, consumed = {} } end

function M.fold(f, ev)
  local t = ev.type
  if t == "HandoffInput" then
    f.inputs[ev.command_id] = ev
    f.order[#f.order + 1] = ev.command_id
  elseif t == "TurnStarted" or t == "InputCancelled" or t == "TurnRejected"
         or t == "TurnFoldedInto" then
    local c = ev.cause and ev.cause.command_id
    if c then f.consumed[c] = true end
  elseif t == "ActiveLoopChanged" then
    f.active = ev.to
  end
end

-- After a restore committed: the handoff turns a crash kept from starting.
function M.redeliver(S, f, runner)
  for _, cid in ipairs(f.order) do
    local ev = f.inputs[cid]
    local target = S.loops[ev.loop_id]
    if not f.consumed[cid] and target then
      runner.enqueue(S, target, { command_id = cid, message = ev.message, hand_back = true })
    end
  end
end

return M
