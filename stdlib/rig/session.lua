-- rig.session: live sessions of a rig — turns and steps, the queue, gates,
-- interrupt, restore (DESIGN §5). The durable part (lease, journal, hub,
-- catalog) is C behind rig.core; this module decides what happens and
-- emits the events.
--
--   local s = r:session()            -- or r:restore(id [, { accept_drift = true }])
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
--   s:wait_idle([timeout]) -> true | nil, msg, code ("faulted", "timeout")
--   for rec in s:journal{ from = 1 } do … end   -- rec.seq, rec.type, the event's fields
--   s:history([loop]) -> the loop's conversation (the messages the model sees)
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

local core = require "rig.core"
local json = require "rig.json"

local M = {}

local mcp_mod, mcp_sync -- below: a loop's MCP servers

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
}
local EPHEMERAL = { TokenDelta = true, ToolCallStarted = true, ToolCallCompleted = true,
                    InputQueued = true }
local TERMINAL = { TurnDone = true, TurnFailed = true, TurnInterrupted = true }
M.ENDURING, M.EPHEMERAL, M.TERMINAL = ENDURING, EPHEMERAL, TERMINAL

local QUEUE_MAX = 64
local ACTIONS = { approve = true, approve_always = true, deny = true }

local Session = {}
Session.__index = Session

local function fail(where, msg, level)
  error("rig.session: " .. where .. ": " .. msg, (level or 1) + 1)
end

-- Resuming a turn a crash cut short (rig.session_resume owns it).
local resume_mod
local function rs()
  resume_mod = resume_mod or require "rig.session_resume"
  return resume_mod
end

-- ---- ids and events ----

local function next_id(S, prefix)
  local n = S.counter + 1
  S.counter = n
  return prefix .. S.epoch .. "." .. n
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
  local text, err = json.encode(ev)
  if not text then
    error("rig.session: internal: cannot encode " .. etype .. ": " .. tostring(err), 2)
  end
  return S.core:emit(text, { type = etype, loop_id = ev.loop_id, enduring = enduring == true,
    ends_turn = TERMINAL[etype] == true, id = enduring and ev.event_id or nil,
    wait = enduring and wait ~= false })
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
  for i, b in ipairs(input) do
    if type(b) ~= "table" or b.type ~= "text" or type(b.text) ~= "string" then
      return nil, "input[" .. i .. "] must be a { type = \"text\", text = … } block"
    end
    blocks[i] = { type = "text", text = b.text }
  end
  if #blocks == 0 then return nil, "input must hold at least one block" end
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

-- ---- tools and gates ----

local function tool_result(id, text, is_error, details)
  return { type = "tool_result", tool_use_id = id, content = text, is_error = is_error == true,
           details = details }
end

-- A task's cancellation travels as the error "cancelled": a tool's pcall must
-- pass it on, or the step would commit with a result the interrupt cut short.
local function is_cancel(e)
  return e == "cancelled" or (type(e) == "string" and e:find("^cancelled") ~= nil)
end

-- Waits for the person's answer to an open gate (at most limits.gate_timeout
-- seconds when set: then the action is "timeout"). Returns the action.
local function open_gate(S, inst, turn, call, tool, req, decision)
  -- a resumed step: an answer given before the resume stands (not asked twice)
  local prior = turn.resume and rs().answer(S, turn, call, req, decision)
  if prior then return prior, { resolved = true } end
  local gid = next_id(S, "g")
  local g = { gate_id = gid, loop_id = inst.id, turn_id = turn.id, call_id = call.id,
              tool = tool.name, request = req, unmet = decision.unmet,
              candidates = decision.candidates, cond = core.cond() }
  S.open_gates[gid] = g
  S.gate_order[#S.gate_order + 1] = gid
  local base = { loop_id = inst.id, turn_id = turn.id, step_id = turn.step_id,
                 gate_id = gid, tool = tool.name, call_id = call.id }
  local f = {}
  for k, v in pairs(base) do f[k] = v end
  f.request = req
  f.unmet = json.array(decision.unmet or {})
  f.candidates = json.array(decision.candidates or {})
  local ok, msg, code = emit(S, "PermissionRequested", f, false)
  if ok then
    f = {}
    for k, v in pairs(base) do f[k] = v end
    f.summary = req.summary
    ok, msg, code = emit(S, "GateOpened", f)
  end
  if not ok then
    S.open_gates[gid] = nil
    return nil, msg, code
  end
  catalog(S, { state = "waiting_on_gate" })
  local limit = inst.limits.gate_timeout
  local deadline = limit and core.now() + limit
  while not g.answer do
    local left = deadline and deadline - core.now()
    if left and left <= 0 then
      g.answer = "timeout"
      break
    end
    g.cond:wait(left)
  end
  return g.answer, g
end

local function close_gate(S, g, action, source, code)
  if g.resolved then return true end -- answered (and journaled) before a resume
  S.open_gates[g.gate_id] = nil
  for i, id in ipairs(S.gate_order) do
    if id == g.gate_id then table.remove(S.gate_order, i) break end
  end
  return emit(S, "GateResolved", { loop_id = g.loop_id, turn_id = g.turn_id,
    gate_id = g.gate_id, action = action, source = source or "user", code = code })
end

-- A tool's run, bounded by limits.tool_timeout when set: in a task of its own,
-- cancelled (its processes with it) when the time is up. Returns pcall's
-- results, or false, message, nil, "timeout".
local function run_bounded(tool, run, req, ctx, limit)
  if not limit then return pcall(run, req, ctx) end
  local t = core.spawn(function() return table.pack(pcall(run, req, ctx)) end)
  local res, msg, code = t:wait(limit)
  if res then return table.unpack(res, 1, res.n) end
  if code == "timeout" then
    t:cancel()
    return false, "timeout: tool '" .. tool.name .. "' did not finish within " .. limit ..
      " s (limits.tool_timeout)", nil, "timeout"
  end
  if code == "cancelled" then error("cancelled", 0) end
  return false, msg
end

local decide, run_tool

-- A question a tool's server asks the person (MCP elicitation), within a call:
-- UserInputRequested, then the answer (s:respond_input) as UserInputResolved.
-- A headless gate (or none) cannot ask: declined at once. Returns
-- { action = "accept" | "decline" | "cancel", content = { … } }.
local INPUT_ACTIONS = { accept = true, decline = true, cancel = true }
local function request_input(S, inst, turn, call, spec)
  local gate = inst.gate
  if not gate or gate.approver ~= "interactive" then return { action = "decline" } end
  local id = next_id(S, "i")
  local q = { input_id = id, loop_id = inst.id, turn_id = turn.id, call_id = call.id,
              server = spec.server, message = spec.message, schema = spec.schema,
              cond = core.cond() }
  S.open_inputs[id] = q
  local ok = emit(S, "UserInputRequested", { loop_id = inst.id, turn_id = turn.id,
    step_id = turn.step_id, call_id = call.id, input_id = id, server = spec.server,
    message = spec.message, schema = spec.schema })
  if not ok then
    S.open_inputs[id] = nil
    return { action = "cancel" }
  end
  local wok, werr = pcall(function() while not q.answer do q.cond:wait() end end)
  S.open_inputs[id] = nil
  if not wok then
    emit(S, "UserInputResolved", { loop_id = inst.id, turn_id = turn.id, input_id = id,
      action = "cancel", source = "interrupt" }, false)
    error(werr, 0)
  end
  emit(S, "UserInputResolved", { loop_id = inst.id, turn_id = turn.id, input_id = id,
    action = q.answer.action, content = q.answer.content, source = "user" })
  return q.answer
end
local tool_lib
local function tool_mod()
  tool_lib = tool_lib or require "rig.tool"
  return tool_lib
end

-- One tool call: check, prepare, gate, run. Returns the tool_result block.
local function run_call(S, inst, turn, call)
  local def = inst.def
  local tool = inst.tools[call.name]
  if not tool then
    return tool_result(call.id, "error: unknown tool '" .. tostring(call.name) .. "'", true)
  end
  if call.error then
    return tool_result(call.id, "error: invalid arguments: " .. call.error, true)
  end
  local ok, msg = tool:check_args(call.input or {})
  if not ok then
    return tool_result(call.id, "error: invalid arguments: " .. tostring(msg), true)
  end
  if tool.prepare == nil then
    return tool_result(call.id, "error: permission denied: tool has no call preparation", true)
  end
  local pok, req, perr = pcall(tool.prepare, call.input or {}, { session_id = S.id,
    loop_id = inst.id, workspace = S.workspace })
  if not pok and is_cancel(req) then error(req, 0) end
  if not pok then
    return tool_result(call.id, "error: preparation failed: " .. tostring(req), true)
  end
  if req == nil then
    return tool_result(call.id, "error: preparation failed: " .. tostring(perr), true)
  end
  local artifact = perr -- prepare may return (request, artifact): handed to run as ctx.prepared
  local nreq, rerr = tool:check_request(req)
  if not nreq then
    return tool_result(call.id, "error: preparation failed: invalid request: " .. tostring(rerr),
      true)
  end
  req = nreq
  local approved, derr, dcode = decide(S, inst, turn, call, tool.name, req)
  if not approved then return tool_result(call.id, derr, true), dcode end
  if approved == true then approved = nil end
  if S.want_ephemeral > 0 then
    emit(S, "ToolCallStarted", { loop_id = inst.id, turn_id = turn.id, step_id = turn.step_id,
      tool = tool.name, call_id = call.id, summary = req.summary })
  end
  local ctx = { session_id = S.id, loop_id = inst.id, turn_id = turn.id, call_id = call.id,
                tool = tool.name, request = req, workspace = S.workspace,
                observations = inst.observations, approved = approved, prepared = artifact,
                -- the same for this call in a resume after a crash (ctx.resumed)
                idempotency_key = S.id .. "/" .. tostring(turn.step_id) .. "/" .. tostring(call.id),
                resumed = turn.resume ~= nil and turn.resume.step_id == turn.step_id or nil }
  -- for tools whose server asks back (rig.mcp): a gate decision within this call,
  -- and a question to the session's approver
  ctx.authorize = function(r)
    local nr, e = tool_mod().check_request(r)
    if not nr then return nil, e end
    local a, m = decide(S, inst, turn, call, tool.name, nr)
    if not a then return nil, (m:gsub("^error: ", "")) end
    return true
  end
  ctx.request_input = function(spec) return request_input(S, inst, turn, call, spec) end
  return run_tool(S, inst, turn, call, tool, req, ctx)
end

-- The gate's decision on one call's request: the approved requirements (or true),
-- or nil and the error result's text.
decide = function(S, inst, turn, call, tool_name, req)
  local tool = { name = tool_name }
  local gate = inst.gate
  if not gate then
    local m = "permission denied: loop '" .. inst.name .. "' has no gate"
    emit(S, "PermissionDecided", { loop_id = inst.id, turn_id = turn.id, step_id = turn.step_id,
      tool = tool.name, call_id = call.id, verdict = "deny", source = "default", reason = m }, false)
    return nil, "error: " .. m
  end
  local d = gate:evaluate(req)
  local approved
  if d.verdict == "gated" then
    local action, g = open_gate(S, inst, turn, call, tool, req, d)
    if not action then
      return nil, "error: " .. tostring(g)
    end
    if action == "timeout" then
      local cok, cmsg, ccode = close_gate(S, g, "deny", "timeout", "timeout")
      if not cok then return nil, "error: " .. tostring(cmsg), ccode end
      catalog(S, { state = "running" })
      return nil, "error: permission denied: nobody answered within " ..
        inst.limits.gate_timeout .. " s (limits.gate_timeout)"
    end
    if action == "approve_always" then
      local wok, werr = gate:approve_always(d.candidates or {})
      if not wok then
        close_gate(S, g, "deny", "rule_write_failed")
        return nil, "error: permission denied: the rule could not be saved: "
          .. tostring(werr)
      end
    end
    local cok, cmsg, ccode = close_gate(S, g, action)
    if not cok then return nil, "error: " .. tostring(cmsg), ccode end
    catalog(S, { state = "running" })
    if action == "deny" then
      return nil, "error: permission denied: denied by the user"
    end
    approved = d.unmet
  else
    local e, emsg = emit(S, "PermissionDecided", { loop_id = inst.id, turn_id = turn.id,
      step_id = turn.step_id, tool = tool.name, call_id = call.id, verdict = d.verdict,
      source = d.source, reason = d.reason }, false)
    if not e then return nil, "error: " .. tostring(emsg) end
    if d.verdict ~= "allow" then
      local reason = d.reason or "permission denied"
      if not reason:find("^permission denied") then reason = "permission denied: " .. reason end
      return nil, "error: " .. reason
    end
    approved = d.approved -- requirements a saved rule (an earlier "approve always") settled
  end
  return approved or true
end

run_tool = function(S, inst, turn, call, tool, req, ctx)
  -- a delegation call a resume runs again waits for the request it made before
  local run = ctx.resumed and rs().runner(S, inst, turn, call) or tool.run
  local rok, out, rmsg, rcode = run_bounded(tool, run, req, ctx, inst.limits.tool_timeout)
  if not rok and is_cancel(out) then error(out, 0) end
  local text, is_error, details
  if not rok then
    text, is_error = "error: " .. tostring(out), true
  elseif out == nil then
    text, is_error = "error: " .. tostring(rmsg or "the tool failed"), true
  elseif type(out) == "string" then
    text = out
  elseif getmetatable(out) == "rig.tool.result" then
    text, is_error, details = out.text, out.is_error, out.details
  else
    local enc = json.encode(out)
    text = enc or tostring(out)
  end
  text = cap_result(text, inst.limits.result_bytes)
  if S.want_ephemeral > 0 then
    emit(S, "ToolCallCompleted", { loop_id = inst.id, turn_id = turn.id, step_id = turn.step_id,
      tool = tool.name, call_id = call.id, is_error = is_error == true,
      code = not rok and rcode or nil, preview = text:sub(1, 200) })
  end
  return tool_result(call.id, text, is_error, details)
end

-- One call of a step, its result journaled (ToolResultRecorded, not waited)
-- before the step commits: a resume after a crash takes a recorded result
-- instead of running the call again.
local function step_call(S, inst, turn, call)
  local res, kept
  if turn.resume then res, kept = rs().call(S, inst, turn, call) end
  if not res then res = run_call(S, inst, turn, call) end
  if not kept then
    emit(S, "ToolResultRecorded", { loop_id = inst.id, turn_id = turn.id, step_id = turn.step_id,
      call_id = call.id, tool = call.name, result = res }, false)
  end
  return res
end

-- Runs the step's calls: consecutive non-sequential tools together (at most
-- `parallel` at a time), a sequential tool alone. Results in call order.
local function run_calls(S, inst, turn, calls)
  local results = {}
  local parallel = inst.limits.parallel or 8
  local i, n = 1, #calls
  while i <= n do
    local c = calls[i]
    local tool = inst.tools[c.name]
    if (tool and tool.sequential) or parallel <= 1 then
      results[i] = step_call(S, inst, turn, c)
      i = i + 1
    else
      local batch = {}
      while i <= n and #batch < parallel do
        local t2 = inst.tools[calls[i].name]
        if t2 and t2.sequential then break end
        batch[#batch + 1] = i
        i = i + 1
      end
      if #batch == 1 then
        results[batch[1]] = step_call(S, inst, turn, calls[batch[1]])
      else
        local tasks = {}
        for k, idx in ipairs(batch) do
          tasks[k] = core.spawn(step_call, S, inst, turn, calls[idx])
        end
        for k, idx in ipairs(batch) do
          local r, msg, code = tasks[k]:wait()
          if r == nil then
            if code == "cancelled" then error("cancelled", 0) end
            r = tool_result(calls[idx].id, "error: " .. tostring(msg), true)
          end
          results[idx] = r
        end
      end
    end
  end
  return results
end

-- ---- MCP servers (rig.mcp owns the clients; a loop's `mcp` lists them) ----

local mcp_lib
mcp_mod = function()
  mcp_lib = mcp_lib or require "rig.mcp"
  return mcp_lib
end

-- The instance's tools: its own and injected ones, then the servers' (listed now;
-- again after a server's tools/list_changed, a restart or a failed listing).
mcp_sync = function(inst)
  local list, tools = {}, {}
  for i, t in ipairs(inst.base_tools) do list[i] = t end
  for _, t in ipairs(list) do tools[t.name] = t end
  local ok, got, complete = pcall(mcp_mod().loop_tools, inst.mcp)
  if ok then
    for _, t in ipairs(got) do
      if not tools[t.name] then
        list[#list + 1] = t
        tools[t.name] = t
      end
    end
  elseif is_cancel(got) then
    error(got, 0)
  end
  inst.tool_list, inst.tools = list, tools
  -- a listing that failed (or could not wait here) is tried again at the next step
  inst.mcp_stamp = ok and complete and mcp_mod().stamp(inst.mcp) or false
end

-- ---- the workspace (rig.workspace owns placements and the snapshot policy) ----

local workspace_mod
local function ws()
  workspace_mod = workspace_mod or require "rig.workspace"
  return workspace_mod
end

-- The one hook at a trigger edge ("turn_start", "step_done", "turn_done",
-- "idle"): false when a required capture failed (the workspace is faulted).
local function snapshot_edge(S, trigger, fields)
  if not S.ws then return true end
  return ws().edge(S, trigger, fields)
end

-- ---- turns ----

-- The reserved tool a loop's output_schema goes through when its model has no
-- native structured output (rig.tool refuses the name).
local FINAL_TOOL = "final_answer"
M.FINAL_TOOL = FINAL_TOOL

-- The definition's output_schema and compaction, read once per instance.
local function out_setup(inst)
  if inst.out_ready then return end
  inst.out_ready = true
  local def = inst.def
  local output = def.output_schema
  inst.output = output
  inst.output_native = output ~= nil and inst.model.structured_output == true
  inst.compaction = def.compaction
  inst.context_window = inst.model.context_window
end

-- The loop's request: its tools' specs built once per instance, and a cache
-- so the model checks and copies each committed message once, not per step.
-- An output_schema goes natively into the request, or as the final tool the
-- model must call (tool_choice "required": every step calls a tool).
local function history_request(inst)
  if inst.mcp and inst.mcp_stamp ~= mcp_mod().stamp(inst.mcp) then
    mcp_sync(inst)
    inst.tool_specs = nil
  end
  if inst.tool_specs == nil then
    out_setup(inst)
    local final = inst.output and not inst.output_native
    local tools = false
    if #inst.tool_list > 0 or final then
      tools = {}
      for i, t in ipairs(inst.tool_list) do tools[i] = t:spec() end
      if final then
        tools[#tools + 1] = { name = FINAL_TOOL, schema = inst.output.schema,
          description = "Give the final answer of this turn (\"" .. inst.output.name .. "\""
            .. (inst.output.description and (": " .. inst.output.description) or "")
            .. ") as this tool's arguments. Call it alone, once, when the work is done." }
      end
    end
    inst.tool_specs = tools
    inst.req_cache = { messages = setmetatable({}, { __mode = "k" }) }
  end
  local req = { system = inst.system, messages = inst.history, tools = inst.tool_specs or nil }
  if inst.output then
    if inst.output_native then
      req.output_schema = inst.output
    else
      req.tool_choice = "required"
    end
  end
  return req
end

-- ---- structured output ----

local schema_mod = require "rig.schema"

local function invalid_output(inst, msg)
  return { code = "invalid_output", schema = inst.output.name,
           message = "the final answer does not match output schema '" .. inst.output.name
             .. "': " .. msg }
end

-- Checks a decoded final answer. Returns the value, or nil and the failure.
local function check_output(inst, value)
  if type(value) ~= "table" or json.is_array(value) then
    return nil, invalid_output(inst, "it is not a JSON object")
  end
  local ok, err = schema_mod.validate(inst.output.schema, value)
  if not ok then return nil, invalid_output(inst, err) end
  return value
end

-- A native answer: the message's text is the JSON.
local function native_output(inst, message)
  local parts = {}
  for _, b in ipairs(message.content) do
    if b.type == "text" then parts[#parts + 1] = b.text end
    if b.type == "refusal" then
      return nil, invalid_output(inst, "the model refused: " .. tostring(b.text))
    end
  end
  local text = table.concat(parts)
  local value, err = json.decode(text)
  if value == nil then return nil, invalid_output(inst, "not JSON: " .. tostring(err)) end
  return check_output(inst, value)
end

-- ---- compaction ----

local loop_mod = require "rig.loop"
local SUMMARY_HEAD = "[summary of the earlier conversation]\n\n"
M.SUMMARY_HEAD = SUMMARY_HEAD
-- The marker that replaces the oldest messages when their summary failed.
local OMITTED_HEAD = "[earlier conversation omitted]\n\n"
M.OMITTED_HEAD = OMITTED_HEAD
local COMPACTION_DEFAULT = { at = false, keep = 4 }
local CLIP = 2000

-- What the last step's context held: the next request holds at least this.
local function context_of(u)
  if not u or not u.input_tokens then return nil end
  return u.input_tokens + (u.cache_read_tokens or 0) + (u.cache_creation_tokens or 0)
    + (u.output_tokens or 0)
end

local function is_summary(msg)
  local b = msg and msg.role == "user" and msg.content[1]
  return b and b.type == "text" and (b.text:sub(1, #SUMMARY_HEAD) == SUMMARY_HEAD
    or b.text:sub(1, #OMITTED_HEAD) == OMITTED_HEAD) or false
end

local function clip(s, n)
  if #s <= n then return s end
  local cut = n
  while cut > 0 and (s:byte(cut + 1) or 0) & 0xC0 == 0x80 do cut = cut - 1 end
  return s:sub(1, cut) .. " […" .. (#s - cut) .. " bytes cut]"
end

-- The older messages as one plain-text transcript (provider neutral: no tool
-- blocks reach the summarizer; tool input and results cut to 2000 bytes).
local function transcript(h, last)
  local out = {}
  for i = 1, last do
    local m = h[i]
    for _, b in ipairs(m.content) do
      local t = b.type
      if t == "text" then
        out[#out + 1] = "[" .. m.role .. "]\n" .. b.text
      elseif t == "refusal" then
        out[#out + 1] = "[assistant refused]\n" .. b.text
      elseif t == "thinking" then
        out[#out + 1] = "[assistant thinking omitted]"
      elseif t == "tool_use" then
        local args = b.input_json or json.encode(b.input or {}) or "{}"
        out[#out + 1] = "[assistant calls tool " .. tostring(b.name) .. " (" .. tostring(b.id)
          .. ")]\n" .. clip(args, CLIP)
      elseif t == "tool_result" then
        local c = b.content
        if type(c) == "table" then
          local parts = {}
          for k, x in ipairs(c) do parts[k] = x.text end
          c = table.concat(parts, "\n")
        end
        out[#out + 1] = "[tool " .. (b.is_error and "error" or "result") .. " for "
          .. tostring(b.tool_use_id) .. "]\n" .. clip(tostring(c), CLIP)
      end
    end
  end
  return table.concat(out, "\n\n")
end

-- The first retained index: at least `keep` recent messages, and the tail
-- never starts with tool results (their assistant message stays with them).
local function compaction_cut(h, keep)
  local cut = #h - keep + 1
  if cut < 1 then cut = 1 end
  while cut > 1 and h[cut].role == "tool" do cut = cut - 1 end
  return cut
end

-- Replaces the older part of the loop's history with a summary and commits
-- CompactionCommitted. Returns { replaced, retained, summary } or nil,
-- message, code ("nothing_to_compact", the summarizer's failure code,
-- "empty_summary", or the journal's code with the session faulted).
-- fallback: when the summary fails (after the summarizer model's own
-- retries), the same older part is dropped instead and a marker message
-- stands in for it (CompactionCommitted{ fallback = "truncated", error }),
-- so the loop can always take its next step; the result then has
-- fallback = "truncated" and error.
local function compact(S, inst, trigger, turn, fallback)
  out_setup(inst)
  local cfg = inst.compaction or COMPACTION_DEFAULT
  local h = inst.history
  local cut = compaction_cut(h, cfg.keep)
  if cut <= 1 or (cut == 2 and is_summary(h[1])) then
    return nil, "nothing to compact in loop '" .. inst.id .. "' (" .. #h .. " messages, "
      .. cfg.keep .. " kept)", "nothing_to_compact"
  end
  local model = cfg.model or inst.model
  local resp, err, code = model:invoke{
    system = cfg.prompt or loop_mod.SUMMARY_PROMPT,
    messages = { { role = "user", content = "Summarize the conversation below; your summary "
      .. "will replace it.\n\n<conversation>\n" .. transcript(h, cut - 1)
      .. "\n</conversation>" } },
  }
  local text, failed
  if not resp then
    if code == "cancelled" then error("cancelled", 0) end
    failed = { code = code or "model", message = "the summary failed: " .. tostring(err) }
  else
    local parts = {}
    for _, b in ipairs(resp.message.content) do
      if b.type == "text" then parts[#parts + 1] = b.text end
    end
    text = table.concat(parts)
    if not text:find("%S") then
      failed = { code = "empty_summary", message = "the summary model returned no text" }
    end
  end
  if failed and not fallback then
    return nil, failed.message .. " (s:compact(loop, { fallback = \"truncate\" }) drops the "
      .. "oldest messages instead)", failed.code
  end
  if h ~= inst.history then error("rig.session: internal: the history changed while compacting", 0) end
  local summary
  if failed then
    local n = cut - 1
    summary = { role = "user", content = json.array({ { type = "text", text = OMITTED_HEAD ..
      string.format("%d earlier message%s of this conversation %s dropped because the summary "
        .. "failed; %s content is no longer available.", n, n == 1 and "" or "s",
        n == 1 and "was" or "were", n == 1 and "its" or "their") } }) }
  else
    summary = { role = "user",
                content = json.array({ { type = "text", text = SUMMARY_HEAD .. text } }) }
  end
  local new = { summary }
  table.move(h, cut, #h, 2, new)
  local fields = { loop_id = inst.id, turn_id = turn and turn.id, trigger = trigger,
    summary = summary, replaced = cut - 1, retained = #h - cut + 1,
    context_tokens = inst.context_tokens, usage = resp and resp.usage, model = resp and resp.model }
  if failed then
    fields.fallback = "truncated"
    fields.error = { code = "compaction_failed", cause_code = failed.code,
                     message = failed.message }
  end
  -- a new table: the request cache keys on the list
  inst.history = new
  inst.context_tokens = nil
  add_usage(S.usage_sum, resp and resp.usage)
  local ok, msg, ecode = emit(S, "CompactionCommitted", fields)
  if not ok then
    S.faulted_msg = S.faulted_msg or S.core:faulted() or "the journal append failed"
    return nil, msg, ecode or "faulted"
  end
  return { replaced = fields.replaced, retained = fields.retained, summary = summary,
           fallback = fields.fallback, error = fields.error }
end

-- Before a model call: compacts when the last step's context reached `at` of
-- the model's window; a failed summary falls back to dropping the oldest
-- messages (journaled), so the turn goes on. Returns true, or nil, message,
-- code when the journal failed.
local function auto_compact(S, inst, turn)
  local cfg = inst.compaction
  local used = inst.context_tokens
  if not cfg or not cfg.at or not used or not inst.context_window
     or used < cfg.at * inst.context_window then
    return true
  end
  local res, msg, code = compact(S, inst, "automatic", turn, true)
  if res then return true end
  if code == "nothing_to_compact" then
    inst.context_tokens = nil
    return true
  end
  return nil, msg, code
end

local function limit_failure(name, value, what)
  return { code = "limit", limit = name,
           message = string.format("the turn reached its %s limit (%s)", what or name,
             tostring(value)) }
end

-- Folds queued input into the running turn (at a tool-result boundary).
-- A delegated request (no_fold) is a turn of its own: folding stops before it.
local function fold_queue(S, inst, turn)
  while #inst.queue > 0 and not inst.queue[1].no_fold do
    local item = table.remove(inst.queue, 1)
    inst.history[#inst.history + 1] = item.message
    local ok, msg, code = emit(S, "TurnFoldedInto", { loop_id = inst.id, turn_id = turn.id,
      message = item.message, cause = { command_id = item.command_id } })
    if not ok then return nil, msg, code end
  end
  return true
end

-- The body of one turn, in its own task (interrupt cancels it). Returns the
-- terminal event's type and fields.
local function run_turn(S, inst, item)
  local def = inst.def
  local limits = inst.limits
  local turn = inst.turn
  local rsm = item.resume -- a turn a crash cut short, resumed (rig.session_resume)
  local ok, msg, code
  if rsm then
    ok, msg, code = rs().begin(S, inst, turn, rsm)
    if ok and rsm.ended then return rsm.ended[1], rsm.ended[2] end
  else
    inst.history[#inst.history + 1] = item.message
    ok, msg, code = emit(S, "TurnStarted", { loop_id = inst.id, turn_id = turn.id,
      message = item.message, cause = { command_id = item.command_id } })
  end
  if not ok then return nil, msg, code end
  -- a resumed turn goes on with the budget its committed steps used
  local sum = rsm and rsm.usage or new_usage()
  turn.usage = sum
  local calls_total = rsm and rsm.calls or 0
  local iterations = rsm and rsm.iterations or 0
  while true do
    iterations = iterations + 1
    if iterations > limits.iterations then
      return "TurnFailed", { error = limit_failure("iterations", limits.iterations) }
    end
    -- the step the crash cut after the model answered: that answer, once
    local plan = rsm and rs().take(rsm)
    local step_id = plan and plan.step_id or next_id(S, "s")
    turn.step_id = step_id
    local req = history_request(inst)
    local cok, cerr, ccode = auto_compact(S, inst, turn)
    if not cok then return nil, cerr, ccode end
    req.messages = inst.history
    req.cache_key = S.id .. "/" .. inst.id -- one prompt cache per loop of a session
    local st, serr, scode = (plan or inst.model):stream(req, { cache = inst.req_cache })
    if not st then
      return "TurnFailed", { error = { code = scode or "model", message = tostring(serr) } }
    end
    local deltas = S.want_ephemeral > 0
    for chunk in st:chunks() do
      if deltas then
        emit(S, "TokenDelta", { loop_id = inst.id, turn_id = turn.id, step_id = step_id,
          delta = chunk })
      end
    end
    local resp, rerr, rcode = st:result()
    st:close()
    if not resp then
      return "TurnFailed", { error = { code = rcode or "model", message = tostring(rerr) } }
    end
    add_usage(sum, resp.usage)
    inst.context_tokens = context_of(resp.usage)
    local message = resp.message
    local calls = {}
    local final
    for _, b in ipairs(message.content) do
      if b.type == "tool_use" then
        calls[#calls + 1] = b
        if b.name == FINAL_TOOL and inst.output and not inst.output_native then final = b end
      end
    end
    if #calls == 0 then
      if #message.content == 0 then
        return "TurnFailed", { error = { code = "empty_response",
          message = "the model returned an empty response" } }
      end
      -- a structured answer is checked only now, after the stream ended cleanly
      local output, oerr
      if inst.output then
        if inst.output_native then
          output, oerr = native_output(inst, message)
        else
          oerr = invalid_output(inst, "the model answered without calling " .. FINAL_TOOL)
        end
      end
      inst.history[#inst.history + 1] = message
      add_usage(S.usage_sum, resp.usage)
      -- the turn's last step: nothing acts on it before the terminal, which
      -- is queued behind it (not waited: see drive)
      ok, msg, code = emit(S, "StepDone", { loop_id = inst.id, turn_id = turn.id,
        step_id = step_id, message = message, usage = resp.usage,
        finish_reason = resp.finish_reason }, false)
      if not ok then return nil, msg, code end
      if oerr then return "TurnFailed", { error = oerr } end
      return "TurnDone", { message = message, usage = sum, output = output }
    end
    calls_total = calls_total + #calls
    if calls_total > limits.calls then
      return "TurnFailed", { error = limit_failure("calls", limits.calls, "tool calls") }
    end
    if not plan and not (final and #calls == 1) then
      -- durable before any call runs: a resume after a crash runs this step's
      -- calls that have no ToolResultRecorded instead of asking the model again
      ok, msg, code = emit(S, "ToolCallsPlanned", { loop_id = inst.id, turn_id = turn.id,
        step_id = step_id, message = message, usage = resp.usage,
        finish_reason = resp.finish_reason })
      if not ok then return nil, msg, code end
    end
    local results, output, oerr
    if final and #calls == 1 then
      -- the final tool alone: its arguments are the answer; nothing runs
      if final.error then
        oerr = invalid_output(inst, "invalid JSON arguments: " .. tostring(final.error))
      else
        output, oerr = check_output(inst, final.input or {})
      end
      results = { tool_result(final.id, oerr and ("error: " .. oerr.message)
        or "the final answer was accepted", oerr ~= nil) }
    elseif final then
      -- beside other calls it is refused; they run, and the turn goes on
      local others, where = {}, {}
      for i, c in ipairs(calls) do
        if c.name ~= FINAL_TOOL then
          others[#others + 1] = c
          where[#others] = i
        end
      end
      local got = run_calls(S, inst, turn, others)
      results = {}
      for k, r in ipairs(got) do results[where[k]] = r end
      for i, c in ipairs(calls) do
        if not results[i] then
          results[i] = tool_result(c.id, "error: call " .. FINAL_TOOL .. " alone, after the "
            .. "other tools' results", true)
        end
      end
    else
      results = run_calls(S, inst, turn, calls)
    end
    if turn.interrupt_reason then error("cancelled", 0) end
    local tool_msg = { role = "tool", content = json.array(results) }
    inst.history[#inst.history + 1] = message
    inst.history[#inst.history + 1] = tool_msg
    add_usage(S.usage_sum, resp.usage)
    -- waited unless the final tool ends the turn here: the next model call
    -- acts on this step
    ok, msg, code = emit(S, "StepDone", { loop_id = inst.id, turn_id = turn.id,
      step_id = step_id, message = message, results = tool_msg, usage = resp.usage,
      finish_reason = resp.finish_reason }, not (final and #calls == 1))
    if not ok then return nil, msg, code end
    if final and #calls == 1 then
      if oerr then return "TurnFailed", { error = oerr } end
      return "TurnDone", { message = message, usage = sum, output = output }
    end
    if not snapshot_edge(S, "step_done", { loop_id = inst.id, turn_id = turn.id }) then
      return "TurnFailed", { error = ws().failure(S) }
    end
    local tokens = sum.input_tokens + sum.output_tokens
    if limits.max_tokens and tokens >= limits.max_tokens then
      return "TurnFailed", { error = limit_failure("max_tokens", limits.max_tokens, "token") }
    end
    if limits.max_cost and (sum.cost or 0) >= limits.max_cost then
      return "TurnFailed", { error = limit_failure("max_cost", limits.max_cost, "cost") }
    end
    ok, msg, code = fold_queue(S, inst, turn)
    if not ok then return nil, msg, code end
  end
end

-- ---- delegation (rig.delegation owns the tools and the bookkeeping) ----

local deleg_mod
local function dg()
  deleg_mod = deleg_mod or require "rig.delegation"
  return deleg_mod
end

local function cancel_queue(S, inst, reason)
  while #inst.queue > 0 do
    local item = table.remove(inst.queue, 1)
    emit(S, "InputCancelled", { loop_id = inst.id, cause = { command_id = item.command_id },
      reason = reason }, false)
    if S.dg then dg().cancelled(S, item.command_id, reason) end
  end
end

-- Resolves the gates a cancelled turn left open.
local function cancel_gates(S, turn_id)
  for _, gid in ipairs({ table.unpack(S.gate_order) }) do
    local g = S.open_gates[gid]
    if g and g.turn_id == turn_id and not g.restored then
      close_gate(S, g, "cancelled", "interrupt")
    end
  end
end

-- The loop instance's actor: runs queued input as turns until none is left.
local function drive(S, inst)
  ::again::
  while (inst.starting or #inst.queue > 0) and not S.faulted_msg do
    local item = inst.starting or table.remove(inst.queue, 1)
    inst.starting = nil
    inst.turn = { id = next_id(S, "t"), command_id = item.command_id }
    local turn = inst.turn
    snapshot_edge(S, "turn_start")
    if S.title == nil or S.title == "" then
      S.title = title_of(item.message)
      catalog(S, { state = "running", title = S.title })
    else
      catalog(S, { state = "running" })
    end
    local task = core.spawn(run_turn, S, inst, item)
    inst.task = task
    local etype, fields, code = task:wait()
    inst.task = nil
    local state
    if etype == nil and code == "cancelled" then
      cancel_gates(S, turn.id)
      etype, fields = "TurnInterrupted", { reason = turn.interrupt_reason or "interrupted" }
      state = "interrupted"
      cancel_queue(S, inst, "interrupted")
    elseif etype == nil then
      -- the turn's task failed: a faulted session or a bug in a tool or the runner
      if S.core:faulted() then
        S.faulted_msg = S.core:faulted()
        inst.turn = nil
        break
      end
      etype, fields = "TurnFailed", { error = { code = "internal", message = tostring(fields) } }
      state = "failed"
    elseif etype == "TurnDone" then
      state = "idle"
    else
      state = "failed"
    end
    fields.loop_id, fields.turn_id = inst.id, turn.id
    fields.cause = { command_id = turn.command_id }
    if etype ~= "TurnDone" then
      fields.usage = turn.usage
      if etype == "TurnFailed" then cancel_queue(S, inst, "turn_failed") end
    end
    inst.turn = nil
    -- The terminal is not waited for unless a delegated request waits on
    -- this turn (rig.delegation hands its outcome on as journaled). Nothing
    -- else here acts on it: the emission queue keeps it ahead of whatever
    -- follows, subscribers see it only once journaled, a failed append
    -- faults the session (the next turn's TurnStarted or SessionIdle, both
    -- waited, report it), and wait_idle returns after SessionIdle's append,
    -- which is behind it. A wide SSE fan-out then carries the terminal with
    -- LoopIdle and SessionIdle instead of alone.
    local ok = emit(S, etype, fields, S.dg ~= nil and dg().pending(S, turn.command_id))
    if not ok then
      S.faulted_msg = S.core:faulted() or "the journal append failed"
      break
    end
    -- a delegated turn's answer goes to its waiter or back to the parent
    -- before this loop can go idle (no SessionIdle in between)
    if S.dg then dg().turn_ended(S, inst, turn, etype, fields) end
    note_usage(S)
    catalog(S, { state = state })
    if not snapshot_edge(S, "turn_done", { loop_id = inst.id, turn_id = turn.id }) then
      cancel_queue(S, inst, "workspace_faulted")
    end
  end
  -- the session goes idle with this loop: a required capture holds it busy
  if not S.faulted_msg and S.busy == 1 then
    snapshot_edge(S, "idle", { loop_id = inst.id })
    if (inst.starting or #inst.queue > 0) and not S.faulted_msg then goto again end
  end
  inst.busy = false
  S.busy = S.busy - 1
  if S.faulted_msg then
    catalog(S, { state = "failed" })
    S.idle_cond:signal()
    return
  end
  emit(S, "LoopIdle", { loop_id = inst.id }, false)
  if S.busy == 0 then
    -- waited: wait_idle returns once the turn's events are durable; a failed
    -- append (this one or an unwaited one before it) faults the session
    if not emit(S, "SessionIdle", {}) and S.core:faulted() then
      S.faulted_msg = S.core:faulted()
      catalog(S, { state = "failed" })
    end
    S.idle_cond:signal()
  end
end

-- ---- the session object ----

local function new_session(r, csess)
  local S = setmetatable({
    id = csess.id, rig = r, core = csess, epoch = csess:epoch(), counter = 0,
    loops = {}, loop_order = {}, busy = 0, open_gates = {}, gate_order = {}, open_inputs = {},
    idle_cond = core.cond(), usage_sum = new_usage(), want_ephemeral = 0,
    subs = setmetatable({}, { __mode = "k" }), closed = false,
  }, Session)
  return S
end

-- meta (children): { parent_id, depth, display_name }
local function new_instance(S, def, id, meta)
  -- the definition's fields, read once (a frozen definition copies its
  -- lists on every read)
  local tools, list = {}, def.tools
  local inst = { id = id, def = def, name = def.name, model = def.model, system = def.system,
                 gate = def.gate, limits = def.limits, tool_list = list, tools = tools,
                 history = {}, queue = {}, busy = false, turn_index = 0, observations = {},
                 depth = 0, children = {} }
  if meta then
    inst.parent_id, inst.depth, inst.display_name = meta.parent_id, meta.depth, meta.display_name
    local parent = S.loops[meta.parent_id]
    if parent then parent.children[#parent.children + 1] = id end
  end
  if #def.delegates > 0 then
    for _, t in ipairs(dg().tools(S, inst)) do list[#list + 1] = t end
  end
  for _, t in ipairs(list) do tools[t.name] = t end
  local mcp = def.mcp
  if mcp then
    inst.mcp, inst.base_tools = mcp, list
    mcp_sync(inst)
  end
  S.loops[id] = inst
  S.loop_order[#S.loop_order + 1] = id
  return inst
end

function Session:__tostring()
  return string.format("rig.session(%s)", self.id)
end

local function check_open(S, where)
  if S.closed then fail(where, "the session is shut down", 3) end
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

-- Hands an item { command_id, message, no_fold?, hand_back? } to a loop: it
-- starts a turn when the loop is idle, else waits in its queue (a hand-back
-- is never refused for a full queue). Returns false when it was rejected.
local function enqueue(S, inst, item)
  local cid = item.command_id
  if inst.busy then
    if #inst.queue >= QUEUE_MAX and not item.hand_back then
      emit(S, "TurnRejected", { loop_id = inst.id, cause = { command_id = cid },
        reason = "queue_full" }, false)
      if S.dg then dg().cancelled(S, cid, "queue_full") end
      return false
    end
    inst.queue[#inst.queue + 1] = item
    if S.want_ephemeral > 0 then
      emit(S, "InputQueued", { loop_id = inst.id, cause = { command_id = cid },
        position = #inst.queue })
    end
    return true
  end
  inst.starting = item
  inst.busy = true
  S.busy = S.busy + 1
  -- a new or resumed turn ends what a restore left resumable on this loop
  if S.resumable_turns then S.resumable_turns[inst.id] = nil end
  if S.busy == 1 then emit(S, "SessionActive", {}, false) end
  -- a driver started from inside another loop's turn (a delegated request,
  -- a hand-back) must outlive that turn's cancellation
  local spawn = (item.no_fold or item.hand_back) and core.spawn_detached or core.spawn
  inst.driver = spawn(drive, S, inst)
  return true
end

function Session:submit(input, opts)
  check_open(self, "submit")
  local msg, err = user_message(input)
  if not msg then fail("submit", err, 2) end
  local target = self.rig.active_primer or self.rig.primers[1]
  if opts ~= nil then
    if type(opts) ~= "table" then fail("submit", "options must be a table", 2) end
    for k in pairs(opts) do
      if k ~= "loop" then fail("submit", "unknown option '" .. tostring(k) .. "'", 2) end
    end
    if opts.loop ~= nil then target = opts.loop end
  end
  local inst = self.loops[target]
  if not inst then fail("submit", "no loop '" .. tostring(target) .. "' in this session", 2) end
  local cid = next_id(self, "c")
  local f = fault_message(self)
  if f then return nil, f, "faulted" end
  if self.ws then
    local wmsg, wcode = ws().refusal(self)
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
    if type(opts) ~= "table" then fail("compact", "options must be a table", 2) end
    for k, v in pairs(opts) do
      if k ~= "fallback" then fail("compact", "unknown option '" .. tostring(k) .. "'", 2) end
      if v ~= "truncate" then fail("compact", "option 'fallback' must be \"truncate\"", 2) end
    end
    fallback = opts.fallback == "truncate"
  end
  local inst = self.loops[loop or self.rig.active_primer or self.rig.primers[1]]
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
  return rs().resume(self, loop)
end

function Session:resumable()
  return rs().resumable(self)
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
    if self.busy == 0 then return true end
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
    if type(opts) ~= "table" then fail("shutdown", "options must be a table", 2) end
    for k in pairs(opts) do
      if k ~= "hand_over" then fail("shutdown", "unknown option '" .. tostring(k) .. "'", 2) end
    end
    if opts.hand_over and not self.closed and self.ws then
      local msg, code
      ref, msg, code = ws().hand_over(self)
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
  if self.ws then ws().close(self) end
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
    if type(opts) ~= "table" then fail("checkpoint", "options must be a table", 2) end
    for k in pairs(opts) do
      if k ~= "timeout" then fail("checkpoint", "unknown option '" .. tostring(k) .. "'", 2) end
    end
    timeout = opts.timeout
    if type(timeout) ~= "number" or timeout ~= timeout or timeout <= 0 or timeout > 86400 then
      fail("checkpoint", "option 'timeout' must be a number of seconds above 0, at most 86400", 2)
    end
  end
  if not self.ws then return nil, "the rig has no workspace", "refused" end
  return ws().checkpoint(self, timeout)
end

function Session:clear_fault()
  check_open(self, "clear_fault")
  if not self.ws then return false end
  return ws().clear_fault(self)
end

function Session:rewind(ref)
  check_open(self, "rewind")
  if type(ref) ~= "string" then fail("rewind", "ref must be a snapshot ref string", 2) end
  if not self.ws then return nil, "the rig has no workspace", "refused" end
  return ws().rewind(self, ref)
end

function Session:snapshots()
  return ws().snapshots(self)
end

function Session:history(loop)
  local inst = self.loops[loop or self.rig.active_primer or self.rig.primers[1]]
  if not inst then fail("history", "no loop '" .. tostring(loop) .. "'", 2) end
  return inst.history
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
  opts = opts or {}
  if type(opts) ~= "table" then fail("subscribe", "options must be a table", 2) end
  for k in pairs(opts) do
    if k ~= "loops" and k ~= "ephemeral" and k ~= "buffer" then
      fail("subscribe", "unknown option '" .. tostring(k) .. "'", 2)
    end
  end
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
    if type(opts) ~= "table" then fail("journal", "options must be a table", 2) end
    for k in pairs(opts) do
      if k ~= "from" then fail("journal", "unknown option '" .. tostring(k) .. "'", 2) end
    end
    from = opts.from or 1
  end
  return journal_iter(self.rig.store, self.id, from)
end

-- ---- creating and restoring ----

local function loop_revisions(r)
  local revs = {}
  for _, l in ipairs(r.loops) do revs[l.name] = l:revision() end
  return revs
end

local function ws_hooks(S)
  return { emit = function(etype, fields, wait) return emit(S, etype, fields, wait) end,
           catalog = function(t) catalog(S, t) end }
end

local function create(r, opts)
  local seed
  if opts ~= nil then
    if type(opts) ~= "table" then fail("session", "options must be a table", 2) end
    for k in pairs(opts) do
      if k ~= "seed" then fail("session", "unknown option '" .. tostring(k) .. "'", 2) end
    end
    seed = opts.seed
    if seed ~= nil and type(seed) ~= "string" then
      fail("session", "option 'seed' must be a snapshot ref string", 2)
    end
  end
  local csess, msg, code = core.session_open(r.store, nil)
  if not csess then return nil, msg, code end
  local S = new_session(r, csess)
  local ok
  if r.workspace or seed ~= nil then
    ok, msg, code = ws().create(S, r, seed, ws_hooks(S))
    if not ok then csess:close() return nil, msg, code end
  end
  ok, msg, code = emit(S, "SessionStarted", { fingerprint = r:fingerprint(),
    loops = loop_revisions(r), primers = json.array({ table.unpack(r.primers) }),
    active_primer = r.active_primer, workspace = S.workspace })
  if ok and S.ws then ok, msg, code = ws().started(S) end
  if not ok then ws().release(S.ws) csess:close() return nil, msg, code end
  for i, name in ipairs(r.primers) do
    new_instance(S, r:loop(name), name)
    -- the last one waits: the session is fully started when it is returned
    ok, msg, code = emit(S, "LoopStarted", { loop_id = name, loop = name,
      revision = r:loop(name):revision() }, i == #r.primers)
    if not ok then ws().release(S.ws) csess:close() return nil, msg, code end
  end
  catalog(S, { state = "idle", status = "active", loop_count = #r.primers })
  return S
end

-- Folds the journal into loops, open turns and open gates (no I/O).
local function fold(records)
  local st = { loops = {}, order = {}, gates = {}, gate_order = {}, started = nil,
               last_quiescence = nil, counter = 0, usage = new_usage(), title = nil,
               children = 0, dg = dg().new_fold(), rs = rs().new_fold() }
  local function inst(id)
    local l = st.loops[id]
    if not l then
      l = { id = id, history = {}, open_turn = nil }
      st.loops[id] = l
      st.order[#st.order + 1] = id
    end
    return l
  end
  local dfold, rfold = dg().fold, rs().fold
  for _, r in ipairs(records) do
    if r.kind == "command" then
      local c = json.decode(r.body)
      dfold(st.dg, c, r.seq)
      rfold(st.rs, c, r.seq)
    elseif r.kind == "event" then
      local ev = json.decode(r.body)
      local t = ev.type
      dfold(st.dg, ev, r.seq)
      rfold(st.rs, ev, r.seq)
      if t == "SessionStarted" then
        st.started = st.started or ev
      elseif t == "SessionForked" then
        st.forked_from = ev.forked_from
        st.title = st.title or ev.title
      elseif t == "LoopStarted" then
        local l = inst(ev.loop_id)
        l.loop = ev.loop
        if ev.history then
          -- a fork's loop starts with the origin's history at the cut
          l.history = ev.history
          l.context_tokens = ev.context_tokens
        end
        if ev.parent_loop_id then
          -- a child: the quota counts it
          l.parent, l.depth, l.display = ev.parent_loop_id, ev.depth, ev.name
          st.children = st.children + 1
        end
      elseif t == "TurnStarted" then
        local l = inst(ev.loop_id)
        l.history[#l.history + 1] = ev.message
        l.open_turn = ev.turn_id
        l.open_cause = ev.cause
        if not st.title then st.title = title_of(ev.message) end
      elseif t == "StepDone" then
        local l = inst(ev.loop_id)
        l.history[#l.history + 1] = ev.message
        if ev.results then l.history[#l.history + 1] = ev.results end
        add_usage(st.usage, ev.usage)
        l.context_tokens = context_of(ev.usage)
      elseif t == "CompactionCommitted" then
        -- [summary, retained…]: the tail after the replaced head, as it was
        local l = inst(ev.loop_id)
        local h = { ev.summary }
        table.move(l.history, ev.replaced + 1, #l.history, 2, h)
        l.history = h
        l.context_tokens = nil
        add_usage(st.usage, ev.usage)
      elseif t == "TurnResumed" then
        local l = inst(ev.loop_id)
        l.open_turn = ev.turn_id
        l.open_cause = ev.cause
      elseif t == "TurnFoldedInto" then
        local l = inst(ev.loop_id)
        l.history[#l.history + 1] = ev.message
      elseif TERMINAL[t] then
        inst(ev.loop_id).open_turn = nil
      elseif t == "PermissionRequested" then
        st.gates[ev.gate_id] = ev
        st.gate_order[#st.gate_order + 1] = ev.gate_id
      elseif t == "GateResolved" then
        st.gates[ev.gate_id] = nil
      elseif t == "SessionActive" or t == "SessionIdle" then
        st.last_quiescence = t
      end
    end
  end
  return st
end

-- The workspace events of a journal, decoded, with their seq.
local function workspace_events(records)
  local out = {}
  for _, r in ipairs(records) do
    if r.kind == "event" and r.body:find("\"Workspace", 1, true) then
      local ev = json.decode(r.body)
      if ev and (ev.type == "WorkspaceCheckpointed" or ev.type == "WorkspaceRestored"
                 or ev.type == "WorkspaceFaulted" or ev.type == "WorkspaceFaultCleared") then
        ev.seq = r.seq
        out[#out + 1] = ev
      end
    end
  end
  return out
end

local function restore(r, id, opts)
  if type(id) ~= "string" then fail("restore", "session id must be a string", 2) end
  local accept_drift = false
  if opts ~= nil then
    if type(opts) ~= "table" then fail("restore", "options must be a table", 2) end
    for k in pairs(opts) do
      if k ~= "accept_drift" then fail("restore", "unknown option '" .. tostring(k) .. "'", 2) end
    end
    accept_drift = opts.accept_drift == true
  end
  local csess, msg, code = core.session_open(r.store, id)
  if not csess then return nil, msg, code end
  local records, rerr, rcode = core.journal_read(r.store, id, 1, 0)
  if not records then csess:close() return nil, rerr, rcode end
  local st = fold(records)
  local S = new_session(r, csess)
  if not st.started then
    emit(S, "RestoreErrored", { reason = "the journal has no SessionStarted" })
    csess:close()
    return nil, "session " .. id .. " has no SessionStarted record", "corrupt"
  end
  -- drift: every loop's policy revision against the one it started with
  local now = loop_revisions(r)
  local changed = {}
  for name, rev in pairs(st.started.loops or {}) do
    if now[name] ~= rev then changed[#changed + 1] = name end
  end
  for name in pairs(now) do
    if not (st.started.loops or {})[name] then changed[#changed + 1] = name end
  end
  table.sort(changed)
  if #changed > 0 and not accept_drift then
    local m = "the policy of loop(s) " .. table.concat(changed, ", ") ..
      " changed since the session started (pass { accept_drift = true } to accept)"
    emit(S, "RestoreErrored", { reason = m, drift = json.array(changed) })
    csess:close()
    return nil, m, "drift"
  end
  local ok
  if r.workspace then
    ok, msg, code = ws().reopen(S, r, workspace_events(records), ws_hooks(S))
    if not ok then
      emit(S, "RestoreErrored", { reason = "workspace: " .. tostring(msg) })
      csess:close()
      return nil, msg, code
    end
  end
  ok, msg, code = emit(S, "RestoreStarted", { drift = json.array(changed),
    accepted = #changed > 0 or nil })
  if not ok then ws().release(S.ws) csess:close() return nil, msg, code end
  for _, lid in ipairs(st.order) do
    local f = st.loops[lid]
    local name = f.loop or lid:match("^[^#]+")
    local def = r:loop(name)
    if def then
      local inst = new_instance(S, def, lid, f.parent and { parent_id = f.parent,
        depth = f.depth or 1, display_name = f.display } or nil)
      inst.history = f.history
      inst.context_tokens = f.context_tokens
      if f.open_turn then
        local ti = { loop_id = lid, turn_id = f.open_turn, reason = "restored",
          cause = f.open_cause }
        emit(S, "TurnInterrupted", ti, false)
        dg().fold(st.dg, ti)
        emit(S, "LoopIdle", { loop_id = lid }, false)
      end
    end
  end
  -- the quota recounted; the hand-backs a crash left undelivered
  local handbacks = dg().restored(S, st.dg, st.children)
  for _, name in ipairs(r.primers) do
    if not S.loops[name] then
      new_instance(S, r:loop(name), name)
      emit(S, "LoopStarted", { loop_id = name, loop = name,
        revision = r:loop(name):revision() }, false)
    end
  end
  for _, gid in ipairs(st.gate_order) do
    local g = st.gates[gid]
    if g then
      S.open_gates[gid] = { gate_id = gid, loop_id = g.loop_id, turn_id = g.turn_id,
        call_id = g.call_id, tool = g.tool, request = g.request, unmet = g.unmet,
        candidates = g.candidates, restored = true }
      S.gate_order[#S.gate_order + 1] = gid
    end
  end
  if st.last_quiescence == "SessionActive" then emit(S, "SessionIdle", {}, false) end
  -- the turns a crash or a shutdown cut that s:resume() can continue
  S.resumable_turns = rs().restored(S, st.rs)
  S.usage_sum = st.usage
  S.title = st.title
  S.forked_from = st.forked_from
  -- the workspace at its last checkpoint-or-restore ref, failing closed
  local wstate = "none"
  if S.ws then
    wstate, msg, code = ws().materialize(S)
    if not wstate then
      emit(S, "RestoreErrored", { reason = "workspace: " .. tostring(msg) })
      ws().release(S.ws)
      csess:close()
      return nil, msg, code
    end
  end
  ok, msg, code = emit(S, "RestoreDone", { loops = #S.loop_order,
    open_gates = #S.gate_order, workspace = wstate,
    workspace_ref = S.ws and S.ws.current or nil, resumable = rs().loop_ids(S),
    workspace_fault = S.ws and S.ws.fault or nil })
  if not ok then ws().release(S.ws) csess:close() return nil, msg, code end
  if S.ws and S.ws.current then catalog(S, { workspace_ref = S.ws.current }) end
  catalog(S, { state = #S.gate_order > 0 and "waiting_on_gate" or "idle", status = "active",
    loop_count = #S.loop_order, title = S.title })
  note_usage(S)
  dg().redeliver(S, handbacks)
  return S
end

-- ---- forking ----

-- Records that start activity: a checkpoint journaled after the cut but
-- before the next of these still shows the tree as the cut left it.
local ACTIVITY = { TurnStarted = true, TurnResumed = true, StepDone = true,
                   TurnFoldedInto = true, WorkspaceRestored = true }

-- The cut points of a journal: a StepDone or a turn's terminal with no
-- other loop's turn in flight, and the end of a fork's seed (its last
-- LoopStarted carrying a history). Returns them, the tip, and why `at` is
-- not one.
local function cut_points(records, at)
  local evs, seed_end = {}, nil
  for i, r in ipairs(records) do
    if r.kind == "event" then
      local ev = json.decode(r.body)
      evs[i] = ev
      if ev.type == "LoopStarted" and ev.history then seed_end = r.seq end
    end
  end
  local open, cuts, why = {}, {}, nil
  local tip = records[#records] and records[#records].seq or 0
  local ENDS = "the end of a step or turn (StepDone, TurnDone, TurnFailed, TurnInterrupted)"
  for i, r in ipairs(records) do
    local ev = evs[i]
    if ev then
      local t = ev.type
      if t == "TurnStarted" or t == "TurnResumed" then open[ev.loop_id] = ev.turn_id end
      if TERMINAL[t] then open[ev.loop_id] = nil end
      local busy
      for lid, tid in pairs(open) do
        if lid ~= ev.loop_id then busy = busy or { lid, tid } end
      end
      local ends = t == "StepDone" or TERMINAL[t] or r.seq == seed_end
      if ends and not busy then cuts[#cuts + 1] = r.seq end
      if r.seq == at then
        if not ends then
          why = "seq " .. at .. " is a " .. tostring(t) .. " record, not " .. ENDS
        elseif busy then
          why = "at seq " .. at .. " loop '" .. busy[1] .. "' has turn " .. tostring(busy[2]) ..
            " in flight: it cannot be cut there"
        end
      end
    elseif r.seq == at then
      why = "seq " .. at .. " is a " .. r.kind .. " record, not " .. ENDS
    end
  end
  return cuts, tip, why
end

-- The workspace ref in force at the cut: the last checkpoint or restore at
-- or before it, or a checkpoint the cut's own edge took after it (before the
-- next activity).
local function ref_at(records, at)
  local ref
  for _, r in ipairs(records) do
    if r.kind == "event" and (r.seq <= at or r.body:find("\"Workspace", 1, true)
        or r.body:find("\"Turn", 1, true) or r.body:find("\"StepDone\"", 1, true)) then
      local ev = json.decode(r.body)
      local t = ev.type
      if r.seq > at and ACTIVITY[t] then break end
      if t == "WorkspaceCheckpointed" or (t == "WorkspaceRestored" and r.seq <= at) then
        ref = ev.ref
      end
    end
  end
  return ref
end

local FORK_REFUSED = {
  shared = "the rig's workspace is shared (one live root, no lease, fuzzy checkpoints): " ..
    "no fork can be given a tree of its own or be fenced from its origin in it " ..
    "(a fork needs a per_session or exclusive workspace)",
}

-- s:fork{ at = SEQ } -> a new live session (same rig) whose history is this
-- one's up to the committed step or turn ending at journal seq SEQ (default:
-- the last one) and whose workspace is the checkpoint in force there.
function Session:fork(opts)
  check_open(self, "fork")
  local at
  if opts ~= nil then
    if type(opts) ~= "table" then fail("fork", "options must be a table", 2) end
    for k in pairs(opts) do
      if k ~= "at" then fail("fork", "unknown option '" .. tostring(k) .. "'", 2) end
    end
    at = opts.at
    if at ~= nil and (math.type(at) ~= "integer" or at < 1) then
      fail("fork", "option 'at' must be a positive integer (a journal seq)", 2)
    end
  end
  local r = self.rig
  local pv = r.workspace
  if pv and FORK_REFUSED[pv.kind] then
    return nil, "cannot fork session " .. self.id .. ": " .. FORK_REFUSED[pv.kind], "refused"
  end
  local records, rerr, rcode = core.journal_read(r.store, self.id, 1, 0)
  if not records then return nil, rerr, rcode end
  local cuts, tip, why = cut_points(records, at)
  if at == nil then
    at = cuts[#cuts]
    if not at then
      return nil, "cannot fork session " .. self.id .. ": it has no committed step yet",
        "invalid_request"
    end
  elseif at > tip then
    return nil, "cannot fork session " .. self.id .. " at seq " .. at ..
      ": it is beyond the journal's tip (" .. tip .. ")", "invalid_request"
  elseif why then
    return nil, "cannot fork session " .. self.id .. ": " .. why, "invalid_request"
  end
  local prefix = {}
  for _, rec in ipairs(records) do
    if rec.seq <= at then prefix[#prefix + 1] = rec end
  end
  local st = fold(prefix)
  local ref = pv and ref_at(records, at) or nil
  local origin = { session = self.id, at = at }
  -- an exclusive root holds one live session's tree: the origin (idle) is
  -- checkpointed and shut down, handing the root (and its lease) to the fork
  local handover, after
  if pv and pv.kind == "exclusive" and self.ws then
    local href, hmsg, hcode = self:shutdown{ hand_over = true }
    if not href then
      return nil, "cannot fork session " .. self.id .. ": " .. tostring(hmsg), hcode
    end
    handover = { session = self.id, ref = href }
    after = function(m)
      return "cannot fork session " .. self.id .. ": " .. tostring(m) .. " (session " .. self.id ..
        " was checkpointed and shut down first: r:restore('" .. self.id .. "') brings it back)"
    end
  end
  local function failed(m, c)
    return nil, after and after(m) or m, c
  end
  -- the new session: its lease, its workspace with the checkpoint's tree
  local csess, msg, code = core.session_open(r.store, nil)
  if not csess then return failed(msg, code) end
  local S = new_session(r, csess)
  local ok
  if pv then
    ok, msg, code = ws().create(S, r, ref, ws_hooks(S), "fork")
    if not ok then csess:close() return failed(msg, code) end
  end
  local function undo(_, m, c)
    ws().release(S.ws)
    csess:close()
    return failed(m, c)
  end
  ok, msg, code = emit(S, "SessionForked", { forked_from = origin, title = st.title,
    workspace_ref = ref })
  if ok then
    ok, msg, code = emit(S, "SessionStarted", { fingerprint = r:fingerprint(),
      loops = loop_revisions(r), primers = json.array({ table.unpack(r.primers) }),
      active_primer = r.active_primer, workspace = S.workspace })
  end
  if ok and S.ws then ok, msg, code = ws().started(S) end
  if not ok then return undo(nil, msg, code) end
  for i, lid in ipairs(st.order) do
    local f = st.loops[lid]
    local name = f.loop or lid:match("^[^#]+")
    local def = r:loop(name)
    if def then
      local inst = new_instance(S, def, lid, f.parent and { parent_id = f.parent,
        depth = f.depth or 1, display_name = f.display } or nil)
      inst.history = f.history
      inst.context_tokens = f.context_tokens
      ok, msg, code = emit(S, "LoopStarted", { loop_id = lid, loop = name,
        revision = def:revision(), parent_loop_id = f.parent, depth = f.parent and f.depth or nil,
        name = f.display, history = json.array(f.history), context_tokens = f.context_tokens },
        i == #st.order)
      if not ok then return undo(nil, msg, code) end
    end
  end
  for _, name in ipairs(r.primers) do
    if not S.loops[name] then
      new_instance(S, r:loop(name), name)
      ok, msg, code = emit(S, "LoopStarted", { loop_id = name, loop = name,
        revision = r:loop(name):revision() })
      if not ok then return undo(nil, msg, code) end
    end
  end
  -- the delegation quota counts the children the fork inherited; requests
  -- still open at the cut are the origin's, not handed back here
  dg().restored(S, dg().new_fold(), st.children)
  S.title = st.title
  S.forked_from = origin
  S.handover = handover
  catalog(S, { state = "idle", status = "active", loop_count = #S.loop_order,
    title = S.title or "", forked_from = origin, workspace_ref = ref })
  note_usage(S)
  return S
end

local function sessions(r)
  local list, msg, code = core.catalog_list(r.store)
  if not list then return nil, msg, code end
  return list
end

-- The runner's internals rig.delegation works with.
M._rt = { emit = emit, next_id = next_id, enqueue = enqueue, command = emit_command_record,
          new_instance = new_instance, catalog = catalog, user_message = user_message,
          -- and rig.session_resume's
          close_gate = close_gate, limit_failure = limit_failure,
          out_setup = out_setup, native_output = native_output, check_output = check_output,
          invalid_output = invalid_output, new_usage = new_usage, add_usage = add_usage }

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
