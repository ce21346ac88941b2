-- rig.delegation: the tools the runner injects into a loop with `delegates`
-- (docs/delegation.md), and the bookkeeping of its children. Rig
-- authors never add these tools (rig.tool reserves the names).
--
--   start_agent{ agent, instructions, name?, wait = true, timeout? }
--     agent: one of the loop's delegates; starts a child loop instance
--     "agent#N" (N counts the session's children) with instructions as its
--     first input. wait = true: the result is the child's final answer (the
--     text of its TurnDone; a failed or interrupted turn is an error result);
--     with timeout (seconds, <= 86400) and no answer by then the result is
--     { agent_id, status = "running", message } and the answer comes later as
--     with wait = false. wait = false: the result is { agent_id, status =
--     "running" } at once, and the child's final answer later reaches the
--     parent exactly once as new input (a user message starting
--     "[agent ID answered]" / "failed" / "was interrupted" / "was cancelled").
--   message_agent{ agent_id, message, wait = true, timeout? }
--     the same for a further input to a direct child (a turn of its own,
--     after the child's current one: delegated input never folds).
--   list_agents{} -> { agents = { { agent_id, agent, name?, status =
--     "running" | "idle", queued, last_answer? } } } (direct children only)
--   stop_agent{ agent_id } -> { agent_id, stopped = true | false }
--     interrupts the child's current turn; the child persists.
--
-- Every call goes through the parent's gate (rig.loop refuses delegates
-- without a gate, and a gate whose access denies a delegate outright). A call that hands a delegate work requires { kind = "delegate", scope
-- = match = the delegate loop's name }: start_agent the agent it starts,
-- message_agent the agent the child was started as. The gate routes that
-- requirement to its access source (a profile's `delegate`, an access
-- table's `delegate`; default gated in a profile, denied when a table leaves
-- it out), then to the saved rules (a deny rule refuses, an allow rule
-- approves), and what is left gated asks a person once per call (headless:
-- "permission denied: approval required"). list_agents (reads the loop's own
-- children) and stop_agent (only ends work already approved) require nothing,
-- so they pass any gate. docs/delegation.md has the whole story.
-- Refusals are error results the model reads: an agent that is not a
-- delegate, an id that is not a direct child, the depth limit (a child of
-- depth d needs d <= delegation_limits.depth; a primer is depth 0) and the
-- quota (children over the session's life, recounted on restore).
--
-- Journal: LoopStarted { loop_id = "agent#N", loop, revision, parent_loop_id,
-- parent_call_id, turn_id, depth, name? }; the child's input is a UserInput
-- command with delegate = { parent_loop_id, call_id, turn_id, wait }; a
-- foreground wait that times out adds a DelegateBackgrounded command
-- { target_command_id }; a hand-back is the command SubagentResult {
-- command_id, loop_id = parent, child_loop_id, target_command_id, status,
-- message }, journaled before it is submitted to the parent. A restore
-- resubmits every SubagentResult whose command id caused no TurnStarted,
-- TurnFoldedInto, InputCancelled or TurnRejected, and hands back (once) the
-- outcome of every background request that has none (a child turn the crash
-- cut is "interrupted"; a request that never started is "cancelled").

local core = require "rig.core"
local json = require "rig.json"
local tool_mod = require "rig.tool"
local base = require "rig.session_base"

local emit, next_id, catalog, user_message = base.emit, base.next_id, base.catalog, base.user_message
local command = base.emit_command_record

local M = {}

M.NAMES = { "start_agent", "message_agent", "list_agents", "stop_agent" }
local MAX_TEXT = 192 * 1024  -- instructions and messages
local MAX_NAME = 256         -- a display name, bytes
local MAX_TIMEOUT = 86400
local PREVIEW = 500

-- The session's delegation state: children started (the quota) and the
-- requests whose outcome someone still waits for (by command id).
local function state(S)
  local d = S.dg
  if not d then
    d = { spawned = 0, requests = {} }
    S.dg = d
  end
  return d
end

-- Test seam: called (S, request, outcome) just before a hand-back is
-- journaled (the crash tests kill the process there). nil otherwise.
M.before_handback = nil

-- ---- outcomes and hand-backs ----

local function answer_text(fields)
  if fields.output ~= nil then return json.encode(fields.output) or "" end
  local parts = {}
  local msg = fields.message
  for _, b in ipairs(msg and msg.content or {}) do
    if b.type == "text" then parts[#parts + 1] = b.text end
  end
  return table.concat(parts)
end

local function outcome_of(etype, fields)
  if etype == "TurnDone" then return { status = "answered", text = answer_text(fields) } end
  if etype == "TurnFailed" then
    local e = fields.error or {}
    return { status = "failed", text = tostring(e.message or e.code or "the turn failed") }
  end
  return { status = "interrupted", text = tostring(fields.reason or "interrupted") }
end

local HEADS = { answered = "answered", failed = "failed", interrupted = "was interrupted",
                cancelled = "was cancelled" }

-- The parent's new input: a header line, then the answer or the reason.
local function handback_text(child_id, o)
  return "[agent " .. child_id .. " " .. (HEADS[o.status] or o.status) .. "]\n\n" .. o.text
end

-- runner (everywhere below): rig.session_turn's { enqueue, new_instance },
-- handed in by the runner, which is above this module.
local function hand_back(S, req, outcome, cid, runner)
  local parent = S.loops[req.parent]
  if not parent or S.stopping or S.closed or S.faulted_msg then return end
  local msg = user_message(handback_text(req.child_id, outcome))
  if not cid then
    if M.before_handback then M.before_handback(S, req, outcome) end
    cid = next_id(S, "c")
    local ok = command(S, { type = "SubagentResult", command_id = cid, loop_id = req.parent,
      child_loop_id = req.child_id, target_command_id = req.cid, status = outcome.status,
      message = msg }, true)
    if not ok then
      S.faulted_msg = S.faulted_msg or S.core:faulted() or "the journal append failed"
      return
    end
  end
  runner.enqueue(S, parent, { command_id = cid, message = msg, hand_back = true })
end

-- A request's outcome: to its waiting tool call, or back to the parent.
-- A foreground request whose call was cancelled is dropped.
local function resolve(S, cid, outcome, runner)
  local d = S.dg
  local req = d and d.requests[cid]
  if not req then return end
  d.requests[cid] = nil
  if req.cond then
    req.outcome = outcome
    req.cond:signal()
  elseif req.background then
    hand_back(S, req, outcome, nil, runner)
  end
end

-- From the runner: a loop's turn ended with its terminal event (journaled).
function M.turn_ended(S, inst, turn, etype, fields, runner)
  resolve(S, turn.command_id, outcome_of(etype, fields), runner)
end

-- From the runner: does someone wait on the outcome of command cid (a
-- delegated request)? Its turn's terminal is then waited for before
-- turn_ended hands the outcome on.
function M.pending(S, cid)
  local d = S.dg
  return d ~= nil and d.requests[cid] ~= nil
end

-- From the runner: queued input was cancelled or rejected.
function M.cancelled(S, cid, reason, runner)
  resolve(S, cid, { status = "cancelled", text = "the request was cancelled before it ran ("
    .. tostring(reason) .. ")" }, runner)
end

-- ---- the tools ----

local function first_line(s, n)
  local line = s:match("^%s*([^\r\n]*)") or ""
  if #line > n then
    local cut = n
    while cut > 0 and (line:byte(cut + 1) or 0) & 0xC0 == 0x80 do cut = cut - 1 end
    line = line:sub(1, cut) .. "…"
  end
  if line == "" then line = "(empty)" end
  return line
end

local function check_text(v, what)
  if #v > MAX_TEXT then
    return nil, what .. " is longer than " .. MAX_TEXT .. " bytes"
  end
  if v:find("%S") == nil then return nil, what .. " is empty" end
  return true
end

local function check_timeout(t)
  if t ~= nil and (t <= 0 or t > MAX_TIMEOUT) then
    return nil, "timeout must be more than 0 and at most " .. MAX_TIMEOUT .. " seconds"
  end
  return true
end

-- What a call that hands the delegate `name` work asks of the gate (a saved
-- rule { kind = "delegate", match = name } or "*" matches it).
local function delegate_requirement(name)
  return { kind = "delegate", scope = name, match = name }
end

-- A direct child of inst, or nil and the refusal.
local function child_of(S, inst, id)
  local c = S.loops[id]
  if not c or c.parent_id ~= inst.id then
    local known = {}
    for i, cid in ipairs(inst.children) do known[i] = cid end
    return nil, "refused: no agent '" .. tostring(id) .. "' among this loop's agents ("
      .. (#known > 0 and table.concat(known, ", ") or "none started") .. ")"
  end
  return c
end

-- Waits for a foreground request's outcome (req.cond set), at most timeout
-- seconds: then the request goes on in the background (DelegateBackgrounded;
-- its answer comes back to the parent as new input) and the result is nil.
-- A cancelled wait leaves nobody to take the answer and raises on.
local function await(S, req, parent_id, timeout)
  local deadline = timeout and (core.now() + timeout)
  while not req.outcome do
    local left = deadline and (deadline - core.now())
    if left and left <= 0 then
      req.cond, req.background = nil, true
      command(S, { type = "DelegateBackgrounded", command_id = next_id(S, "c"),
        loop_id = parent_id, target_command_id = req.cid })
      return nil
    end
    local ok, err = pcall(req.cond.wait, req.cond, left)
    if not ok then
      req.cond = nil -- the call was cancelled: nobody takes this answer
      error(err, 0)
    end
  end
  return req.outcome
end

-- Gives the child one input and, when asked, waits for its outcome.
local function request(S, parent, child, text, wait, timeout, ctx, runner)
  local d = state(S)
  local msg = user_message(text)
  local cid = next_id(S, "c")
  local req = { cid = cid, parent = parent.id, child_id = child.id, background = not wait }
  if wait then req.cond = core.cond() end
  d.requests[cid] = req
  command(S, { type = "UserInput", command_id = cid, loop_id = child.id, message = msg,
    delegate = { parent_loop_id = parent.id, call_id = ctx.call_id, turn_id = ctx.turn_id,
                 wait = wait } })
  runner.enqueue(S, child, { command_id = cid, message = msg, no_fold = true })
  if not wait then return { agent_id = child.id, status = "running" } end
  local o = await(S, req, parent.id, timeout)
  if not o then
    -- the answer will come back as new input, as for wait = false
    return { agent_id = child.id, status = "running", message = "no answer after "
      .. timeout .. " s; the agent goes on and its final answer will arrive as a new message" }
  end
  if o.status == "answered" then return o.text end
  return nil, "agent " .. child.id .. " " .. (HEADS[o.status] or o.status) .. ": " .. o.text
end

local function start(S, inst, args, ctx, runner)
  local d = state(S)
  local lim = S.rig.delegation_limits
  local depth = inst.depth + 1
  if depth > lim.depth then
    return nil, "refused: the delegation depth limit (" .. lim.depth .. ") is reached: loop '"
      .. inst.id .. "' is at depth " .. inst.depth
  end
  if d.spawned >= lim.quota then
    return nil, "refused: the session's delegation quota (" .. lim.quota
      .. " agents) is used up"
  end
  local def = S.rig:loop(args.agent)
  d.spawned = d.spawned + 1
  local id = def.name .. "#" .. d.spawned
  local child = runner.new_instance(S, def, id, { parent_id = inst.id, depth = depth,
    display_name = args.name })
  local ok, msg = emit(S, "LoopStarted", { loop_id = id, loop = def.name,
    revision = def:revision(), parent_loop_id = inst.id, parent_call_id = ctx.call_id,
    turn_id = ctx.turn_id, depth = depth, name = args.name })
  if not ok then return nil, msg end
  catalog(S, { loop_count = #S.loop_order })
  return request(S, inst, child, args.instructions, args.wait ~= false, args.timeout, ctx,
    runner)
end

local function last_answer(child)
  local h = child.history
  for i = #h, 1, -1 do
    local m = h[i]
    if m.role == "assistant" then
      local parts = {}
      for _, b in ipairs(m.content) do
        if b.type == "text" then parts[#parts + 1] = b.text end
      end
      local t = table.concat(parts)
      if t ~= "" then
        if #t > PREVIEW then
          local cut = PREVIEW
          while cut > 0 and (t:byte(cut + 1) or 0) & 0xC0 == 0x80 do cut = cut - 1 end
          t = t:sub(1, cut) .. "…"
        end
        return t
      end
    end
  end
  return nil
end

local WAIT_DOC = "true (default): wait for the agent's final answer, which becomes this "
  .. "tool's result; false: get the agent id at once and receive the answer later as a "
  .. "new message"
local TIMEOUT_DOC = "with wait: seconds to wait (at most 86400); if the agent has not "
  .. "answered by then, its answer arrives later as a new message"

-- The injected tools of a loop instance with delegates (closures over the
-- session and the instance: the parent is always this instance).
function M.tools(S, inst, runner)
  state(S)
  local delegates = inst.def.delegates
  local lines = {}
  for i, name in ipairs(delegates) do
    local l = S.rig:loop(name)
    lines[i] = "- " .. name .. (l and l.description and (": " .. l.description) or "")
  end
  local start_t = tool_mod._injected{
    name = "start_agent",
    description = "Start a sub-agent on a focused task. It works in its own conversation "
      .. "and does not see yours: give it complete instructions. Agents you can start:\n"
      .. table.concat(lines, "\n"),
    schema = { type = "object", additionalProperties = false,
      required = { "agent", "instructions" },
      properties = {
        agent = { type = "string", enum = delegates, description = "which agent to start" },
        instructions = { type = "string", description = "the task, complete" },
        name = { type = "string", description = "a short display name (optional)" },
        wait = { type = "boolean", description = WAIT_DOC },
        timeout = { type = "number", description = TIMEOUT_DOC },
      } },
    prepare = function(args)
      local ok, err = check_text(args.instructions, "instructions")
      if not ok then return nil, err end
      if args.name ~= nil and (#args.name > MAX_NAME or args.name:find("[%c]")) then
        return nil, "name must be one line of at most " .. MAX_NAME .. " bytes"
      end
      ok, err = check_timeout(args.timeout)
      if not ok then return nil, err end
      return { summary = "start agent " .. args.agent .. (args.wait == false
        and " (background)" or "") .. ": " .. first_line(args.instructions, 200),
        requirements = { delegate_requirement(args.agent) } }, args
    end,
    run = function(_, ctx) return start(S, inst, ctx.prepared, ctx, runner) end,
  }
  local message_t = tool_mod._injected{
    name = "message_agent",
    description = "Send a further message to one of the agents you started (by its "
      .. "agent_id). It runs as the agent's next turn, after the current one.",
    schema = { type = "object", additionalProperties = false,
      required = { "agent_id", "message" },
      properties = {
        agent_id = { type = "string" },
        message = { type = "string" },
        wait = { type = "boolean", description = WAIT_DOC },
        timeout = { type = "number", description = TIMEOUT_DOC },
      } },
    prepare = function(args)
      local ok, err = check_text(args.message, "message")
      if not ok then return nil, err end
      ok, err = check_timeout(args.timeout)
      if not ok then return nil, err end
      -- the gate is asked about the delegate the child was started as; an id
      -- that is no direct child now is refused at run (even if a parallel
      -- start_agent makes it one meanwhile: that child was never gated here)
      local child, refusal = child_of(S, inst, args.agent_id)
      return { summary = "message agent " .. first_line(args.agent_id, 64) .. ": "
        .. first_line(args.message, 200),
        requirements = child and { delegate_requirement(child.name) } or {} },
        { args = args, child_id = child and child.id, refusal = refusal }
    end,
    run = function(_, ctx)
      local p = ctx.prepared
      if not p.child_id then return nil, p.refusal end
      local child, err = child_of(S, inst, p.child_id)
      if not child then return nil, err end
      local args = p.args
      return request(S, inst, child, args.message, args.wait ~= false, args.timeout, ctx, runner)
    end,
  }
  local list_t = tool_mod._injected{
    name = "list_agents",
    description = "List the agents you started: id, kind, status, last answer.",
    schema = { type = "object", additionalProperties = false, properties = {} },
    prepare = function() return { summary = "list agents", requirements = {} } end,
    run = function()
      local out = {}
      for i, id in ipairs(inst.children) do
        local c = S.loops[id]
        out[i] = { agent_id = id, agent = c.name, name = c.display_name,
                   status = c.busy and "running" or "idle", queued = #c.queue,
                   last_answer = last_answer(c) }
      end
      return { agents = json.array(out) }
    end,
  }
  local stop_t = tool_mod._injected{
    name = "stop_agent",
    description = "Interrupt the current turn of an agent you started. The agent stays "
      .. "(message it again later).",
    schema = { type = "object", additionalProperties = false, required = { "agent_id" },
      properties = { agent_id = { type = "string" } } },
    prepare = function(args)
      return { summary = "stop agent " .. first_line(args.agent_id, 64), requirements = {} },
        args
    end,
    run = function(_, ctx)
      local child, err = child_of(S, inst, ctx.prepared.agent_id)
      if not child then return nil, err end
      local stopped = false
      if child.task and child.task:status() ~= "done" then
        if child.turn then child.turn.interrupt_reason = "stopped" end
        stopped = child.task:cancel() == true
      end
      return { agent_id = child.id, stopped = stopped }
    end,
  }
  return { start_t, message_t, list_t, stop_t }
end

-- ---- restore ----

function M.new_fold()
  return { requests = {}, order = {}, turn_of = {}, terminal = {}, cancelled = {},
           results = {}, result_for = {}, consumed = {} }
end

-- One journal record (an event or a command, decoded) into the fold.
function M.fold(f, ev, seq)
  local t = ev.type
  local cause = ev.cause and ev.cause.command_id
  if t == "UserInput" then
    local dl = ev.delegate
    if dl then
      f.requests[ev.command_id] = { cid = ev.command_id, parent = dl.parent_loop_id,
        child_id = ev.loop_id, background = dl.wait == false, seq = seq }
      f.order[#f.order + 1] = ev.command_id
    end
  elseif t == "DelegateBackgrounded" then
    local r = f.requests[ev.target_command_id]
    if r then r.background = true end
  elseif t == "SubagentResult" then
    f.results[#f.results + 1] = ev
    f.result_for[ev.target_command_id] = ev
  elseif t == "TurnStarted" or t == "TurnResumed" then
    if cause then f.turn_of[cause] = ev.turn_id; f.consumed[cause] = true end
  elseif t == "TurnFoldedInto" then
    if cause then f.consumed[cause] = true end
  elseif t == "InputCancelled" or t == "TurnRejected" then
    if cause then
      f.consumed[cause] = true
      f.cancelled[cause] = ev.reason or t
    end
  elseif t == "TurnDone" or t == "TurnFailed" or t == "TurnInterrupted" then
    if ev.turn_id then f.terminal[ev.turn_id] = outcome_of(t, ev) end
  end
end

-- After the loops are rebuilt: the quota recounted, and the hand-backs to
-- make (returned, delivered by M.redeliver once the restore committed).
function M.restored(S, f, children)
  state(S).spawned = children
  local plan = {}
  for _, r in ipairs(f.results) do
    if not f.consumed[r.command_id] then
      plan[#plan + 1] = { req = { parent = r.loop_id, child_id = r.child_loop_id,
        cid = r.target_command_id }, message = r.message, cid = r.command_id }
    end
  end
  for _, cid in ipairs(f.order) do
    local r = f.requests[cid]
    if r.background and not f.result_for[cid] then
      local turn = f.turn_of[cid]
      local o = turn and f.terminal[turn]
      if not o and f.cancelled[cid] then
        o = { status = "cancelled", text = "the request was cancelled before it ran ("
          .. tostring(f.cancelled[cid]) .. ")" }
      end
      o = o or { status = "cancelled",
                 text = "the session stopped before the agent started this request" }
      plan[#plan + 1] = { req = r, outcome = o }
    end
  end
  return plan
end

function M.redeliver(S, plan, runner)
  for _, p in ipairs(plan) do
    if p.cid then
      local parent = S.loops[p.req.parent]
      if parent then
        runner.enqueue(S, parent, { command_id = p.cid, message = p.message, hand_back = true })
      end
    else
      hand_back(S, p.req, p.outcome, nil, runner)
    end
  end
end

M.state, M.await = state, await
M.outcome_of, M.HEADS = outcome_of, HEADS -- rig.session_resume hands a child's outcome back too
return M
