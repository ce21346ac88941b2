-- rig.session_turn: the runner — a loop instance's actor (drive) runs its
-- queued input as turns, each turn its steps (a model call, then the tool
-- calls through their gates), journaling each event before it acts on it.

local core = require "rig.core"
local json = require "rig.json"
local base = require "rig.session_base"
local output = require "rig.session_output"
local compaction = require "rig.session_compact"
local delegation = require "rig.delegation"
local resuming = require "rig.session_resume"
local workspace = require "rig.workspace"
local tool_mod = require "rig.tool"

local M = {}

local next_id, emit, catalog = base.next_id, base.emit, base.catalog
local add_usage, new_usage, note_usage = base.add_usage, base.new_usage, base.note_usage
local title_of, cap_result = base.title_of, base.cap_result
local close_gate, limit_failure = base.close_gate, base.limit_failure
local FINAL_TOOL, out_setup = output.FINAL_TOOL, output.out_setup
local repair_text, user_message = output.repair_text, base.user_message
local invalid_output, check_output, native_output =
  output.invalid_output, output.check_output, output.native_output
local context_of, auto_compact = compaction.context_of, compaction.auto_compact
local hooks = require "rig.hooks"
local budget = require "rig.budget"
local handoff_lib
local function handoff()
  handoff_lib = handoff_lib or require "rig.handoff"
  return handoff_lib
end

local mcp_mod, mcp_sync -- below: a loop's MCP servers

-- What rig.delegation and rig.session_resume get to start a loop's work
-- (they are below this module, so it is handed to them): { enqueue,
-- new_instance }, filled in below.
local runner = {}
M.runner = runner

local QUEUE_MAX = 64

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
  local prior = turn.resume and resuming.answer(S, turn, call, req, decision)
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
  -- prepare (optional: a tool without it declares no access), then the request
  -- checked, and a needs_approval requirement added; run gets the arguments
  local args = call.input or {}
  local pok, req, artifact = pcall(tool_mod.prepare_call, tool, args, { session_id = S.id,
    loop_id = inst.id, workspace = S.workspace })
  if not pok and is_cancel(req) then error(req, 0) end
  if not pok then
    return tool_result(call.id, "error: preparation failed: " .. tostring(req), true)
  end
  if req == nil then return tool_result(call.id, "error: " .. tostring(artifact), true) end
  local approved, derr, dcode = decide(S, inst, turn, call, tool.name, req)
  if not approved then return tool_result(call.id, derr, true), dcode end
  if approved == true then approved = nil end
  if S.want_ephemeral > 0 then
    emit(S, "ToolCallStarted", { loop_id = inst.id, turn_id = turn.id, step_id = turn.step_id,
      tool = tool.name, call_id = call.id, summary = req.summary })
  end
  local ctx = { session_id = S.id, loop_id = inst.id, turn_id = turn.id, call_id = call.id,
                tool = tool.name, request = req, args = args, workspace = S.workspace,
                observations = inst.observations, approved = approved, prepared = artifact,
                -- the same for this call in a resume after a crash (ctx.resumed)
                idempotency_key = S.id .. "/" .. tostring(turn.step_id) .. "/" .. tostring(call.id),
                resumed = turn.resume ~= nil and turn.resume.step_id == turn.step_id or nil }
  -- for tools whose server asks back (rig.mcp): a gate decision within this call,
  -- and a question to the session's approver
  ctx.authorize = function(r)
    local nr, e = tool_mod.check_request(r)
    if not nr then return nil, e end
    local a, m = decide(S, inst, turn, call, tool.name, nr)
    if not a then return nil, (m:gsub("^error: ", "")) end
    return true
  end
  ctx.request_input = function(spec) return request_input(S, inst, turn, call, spec) end
  return run_tool(S, inst, turn, call, tool, tool_mod.run_args(tool, args, req), ctx)
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
  local run = ctx.resumed and resuming.runner(S, inst, turn, call, runner) or tool.run
  local rok, out, rmsg, rcode = run_bounded(tool, run, req, ctx, inst.limits.tool_timeout)
  if not rok and is_cancel(out) then error(out, 0) end
  local text, is_error, details, media_blocks
  if not rok then
    text, is_error = "error: " .. tostring(out), true
  elseif out == nil then
    text, is_error = "error: " .. tostring(rmsg or "the tool failed"), true
  elseif type(out) == "string" then
    text = out
  elseif getmetatable(out) == "rig.tool.result" then
    text, is_error, details = out.text, out.is_error, out.details
    if out.media then
      -- images and documents: checked, stored once, referenced from the result
      local blocks, merr = require("rig.media").take(S.rig.store, out.media,
        "tool '" .. tool.name .. "' result media")
      if blocks then
        media_blocks = blocks
      else
        -- the text stands; the model is told what it does not get
        text = text .. "\n[media left out: " .. merr .. "]"
      end
    end
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
  if media_blocks and #media_blocks > 0 then
    local content = { { type = "text", text = text } }
    for _, b in ipairs(media_blocks) do content[#content + 1] = b end
    return tool_result(call.id, json.array(content), is_error, details)
  end
  return tool_result(call.id, text, is_error, details)
end

-- One call of a step, its result journaled (ToolResultRecorded, not waited)
-- before the step commits: a resume after a crash takes a recorded result
-- instead of running the call again.
local function hooked_call(S, inst, turn, call)
  local c = call
  if inst.hooks and inst.hooks.before_tool and inst.tools[call.name] and not call.error then
    local action, v = hooks.before_tool(S, inst, turn, call)
    if action == "deny" then return tool_result(call.id, "error: " .. v, true) end
    if action == "error" then
      turn.hook_failure = turn.hook_failure or v
      return tool_result(call.id, "error: " .. v.message, true)
    end
    if v ~= call.input then
      c = {}
      for k, x in pairs(call) do c[k] = x end
      c.input = v
    end
  end
  local res = run_call(S, inst, turn, c)
  if inst.hooks and inst.hooks.after_tool then
    res = hooks.after_tool(S, inst, turn, c, res)
    if res.hook_failure then
      turn.hook_failure = turn.hook_failure or res.hook_failure
      res.hook_failure = nil
    end
  end
  return res
end

local function step_call(S, inst, turn, call)
  local res, kept
  if turn.resume then res, kept = resuming.call(S, inst, turn, call) end
  if not res then res = hooked_call(S, inst, turn, call) end
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

-- rig.mcp loads when a loop has MCP servers (rig.loop loads it then too)
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

-- The one hook at a trigger edge ("turn_start", "step_done", "turn_done",
-- "idle"): false when a required capture failed (the workspace is faulted).
local function snapshot_edge(S, trigger, fields)
  if not S.ws then return true end
  return workspace.edge(S, trigger, fields)
end

-- ---- turns ----

-- The history as s:history() hands it out: a copy of every message (arrays
-- marked as before), so that what a caller changes in it reaches neither the
-- runner's history nor the next request, which takes the history's own
-- message tables (rig.model.request: the caller of a request cache promises
-- not to change them).
local ARRAY_MT = getmetatable(json.array({}))
local function copy_tree(v, depth)
  if type(v) ~= "table" or depth > 100 then return v end
  local mt = getmetatable(v)
  if mt ~= nil and mt ~= ARRAY_MT then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = copy_tree(x, depth + 1) end
  if mt then json.array(out) end
  return out
end
function M.history_copy(inst)
  return copy_tree(inst.history, 0)
end

-- The loop's request: its tools' specs built once per instance, and a cache
-- so the model checks each committed message once, not per step, and copies
-- none in normal form (the history's messages go into the request as they are).
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
  local req = { system = inst.system, messages = inst.history, tools = inst.tool_specs or nil,
                blobs = inst.blobs }
  if inst.output then
    if inst.output_native then
      req.output_schema = output.request_schema(inst)
    else
      req.tool_choice = "required"
    end
  end
  return req
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
-- A failed structured answer: the repair to ask for ({ attempt, of, error }),
-- or nil when none is left (or the model refused).
local function repairable(inst, turn, oerr)
  local n = inst.output and inst.output.repair or 0
  if oerr.refused or (turn.repairs or 0) >= n then return nil end
  turn.repairs = (turn.repairs or 0) + 1
  return { attempt = turn.repairs, of = n, error = oerr.message }
end

-- Output guardrails on the step that would end the turn, before it commits.
-- Returns nil (passed), the failure (tripped: journaled), or nil, msg, code.
local function output_guard(S, inst, turn, message, out, usage, sum)
  if not (inst.guardrails and inst.guardrails.output) then return nil end
  local set = hooks.start(S, inst, turn, "output", { text = hooks.text_of(message),
    message = message, output = out })
  local gu = new_usage()
  local trip = hooks.finish(S, inst, turn, set, gu, add_usage)
  add_usage(sum, gu)
  add_usage(S.usage_sum, gu)
  if not trip then return nil end
  -- the step itself is not committed: its usage goes with the trip
  add_usage(S.usage_sum, usage)
  local tu = new_usage()
  add_usage(tu, gu)
  add_usage(tu, usage)
  local gerr, gmsg, gcode = hooks.tripped(S, inst, turn, "output", trip, tu, #inst.history)
  if not gerr then return nil, gmsg, gcode end
  return gerr
end

-- The turn_end hook on a turn about to be done: true (it goes on, the hook's
-- message folded in), nil (done) or nil, failure.
local function turn_end(S, inst, turn, done, iterations)
  if not (inst.hooks and inst.hooks.turn_end) then return nil end
  local m, herr = hooks.turn_end(S, inst, turn, done, iterations)
  if m == false then return nil, herr end
  if not m then return nil end
  inst.history[#inst.history + 1] = m
  local ok, msg = emit(S, "TurnFoldedInto", { loop_id = inst.id, turn_id = turn.id, message = m,
    hook = "turn_end", cause = { command_id = turn.command_id } })
  if not ok then error(msg, 0) end
  return true
end

local function run_turn(S, inst, item)
  local def = inst.def
  local limits = inst.limits
  local turn = inst.turn
  local rsm = item.resume -- a turn a crash cut short, resumed (rig.session_resume)
  local ok, msg, code
  if rsm then
    ok, msg, code = resuming.begin(S, inst, turn, rsm)
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
    local plan = rsm and resuming.take(rsm)
    local step_id = plan and plan.step_id or next_id(S, "s")
    turn.step_id = step_id
    local req = history_request(inst)
    local cok, cerr, ccode = auto_compact(S, inst, turn)
    if not cok then return nil, cerr, ccode end
    req.messages = inst.history
    req.cache_key = S.id .. "/" .. inst.id -- one prompt cache per loop of a session
    -- budgets: this step's estimate against what the turn and the session spent
    local budgeted = not plan and budget.active(S, inst)
    if budgeted then
      local berr = budget.before_step(S, inst, turn, req)
      if berr then return "TurnFailed", { error = berr } end
    end
    if not plan and inst.hooks and inst.hooks.before_model then
      local nreq, herr = hooks.before_model(S, inst, turn, req, iterations)
      if not nreq then return "TurnFailed", { error = herr } end
      req = nreq
    end
    -- input guardrails: beside the first model call of a turn
    local guard_in = not plan and not rsm and iterations == 1 and inst.guardrails
      and hooks.start(S, inst, turn, "input", { text = hooks.text_of(item.message),
        message = item.message }) or nil
    local st, serr, scode = (plan or inst.model):stream(req, { cache = inst.req_cache })
    if not st then
      hooks.cancel(guard_in)
      return "TurnFailed", { error = { code = scode or "model", message = tostring(serr) } }
    end
    local deltas = S.want_ephemeral > 0
    local early = false
    -- while input guardrails run, the step's deltas wait: a trip drops them
    -- with the step, so no subscriber sees what it would not have been shown
    local held = guard_in and deltas and {} or nil
    local function delta(chunk)
      emit(S, "TokenDelta", { loop_id = inst.id, turn_id = turn.id, step_id = step_id,
        delta = chunk })
    end
    for chunk in st:chunks() do
      if guard_in and hooks.tripped_early(guard_in) then early = true break end
      if held then
        held[#held + 1] = chunk
        if hooks.passed(guard_in) then
          for _, c in ipairs(held) do delta(c) end
          held = nil
        end
      elseif deltas then
        delta(chunk)
      end
    end
    local resp, rerr, rcode
    if not early then resp, rerr, rcode = st:result() end
    st:close()
    if guard_in then
      -- nothing of the step is committed when an input guardrail trips;
      -- guard: what the guard models cost (GuardrailChecked carries it)
      local guard = new_usage()
      local trip = hooks.finish(S, inst, turn, guard_in, guard, add_usage)
      add_usage(sum, guard)
      add_usage(S.usage_sum, guard)
      if trip then
        -- the dropped step's cost goes with the trip
        add_usage(sum, resp and resp.usage)
        add_usage(S.usage_sum, resp and resp.usage)
        local gu = new_usage()
        add_usage(gu, guard)
        add_usage(gu, resp and resp.usage)
        if inst.history[#inst.history] == item.message then inst.history[#inst.history] = nil end
        local gerr, gmsg, gcode = hooks.tripped(S, inst, turn, "input", trip, gu, #inst.history)
        if not gerr then return nil, gmsg, gcode end
        return "TurnFailed", { error = gerr }
      end
      -- passed: the deltas held back go out now, in order
      for _, c in ipairs(held or {}) do delta(c) end
      held = nil
    end
    if not resp then
      return "TurnFailed", { error = { code = rcode or "model", message = tostring(rerr) } }
    end
    add_usage(sum, resp.usage)
    inst.context_tokens = context_of(resp.usage)
    if not plan and inst.hooks and inst.hooks.after_model then
      local nresp, herr = hooks.after_model(S, inst, turn, resp, iterations)
      if not nresp then return "TurnFailed", { error = herr } end
      resp = nresp
    end
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
      if not oerr then
        local gerr, gmsg, gcode = output_guard(S, inst, turn, message, output, resp.usage, sum)
        if gerr then return "TurnFailed", { error = gerr } end
        if gmsg then return nil, gmsg, gcode end
      end
      local repair = oerr and repairable(inst, turn, oerr)
      inst.history[#inst.history + 1] = message
      add_usage(S.usage_sum, resp.usage)
      -- the turn's last step: nothing acts on it before the terminal, which
      -- is queued behind it (not waited: see drive); a repair acts on it
      ok, msg, code = emit(S, "StepDone", { loop_id = inst.id, turn_id = turn.id,
        step_id = step_id, message = message, usage = resp.usage,
        finish_reason = resp.finish_reason, estimate = budgeted and turn.estimate or nil,
        repair = repair or nil }, repair ~= nil and repair ~= false)
      if not ok then return nil, msg, code end
      if repair then
        -- the validation message goes back to the model as new input
        local m = user_message(repair_text(inst, oerr, repair.attempt))
        inst.history[#inst.history + 1] = m
        ok, msg, code = emit(S, "TurnFoldedInto", { loop_id = inst.id, turn_id = turn.id,
          message = m, repair = repair, cause = { command_id = turn.command_id } })
        if not ok then return nil, msg, code end
        goto next_step
      end
      if oerr then return "TurnFailed", { error = oerr } end
      local over = budgeted and budget.after_step(S, inst, turn, resp.usage) or nil
      local done = { message = message, usage = sum, output = output, budget = over }
      local more, herr = turn_end(S, inst, turn, done, iterations)
      if herr then return "TurnFailed", { error = herr } end
      if not more then return "TurnDone", done end
      goto next_step
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
      if not oerr then
        local gerr, gmsg, gcode = output_guard(S, inst, turn, message, output, resp.usage, sum)
        if gerr then return "TurnFailed", { error = gerr } end
        if gmsg then return nil, gmsg, gcode end
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
    if turn.hook_failure then return "TurnFailed", { error = turn.hook_failure } end
    local tool_msg = { role = "tool", content = json.array(results) }
    inst.history[#inst.history + 1] = message
    inst.history[#inst.history + 1] = tool_msg
    add_usage(S.usage_sum, resp.usage)
    -- a final answer that failed goes back to the model (its error result) when
    -- repairs are left
    local repair = final and #calls == 1 and oerr and repairable(inst, turn, oerr) or nil
    -- waited unless the final tool ends the turn here: the next model call
    -- acts on this step
    ok, msg, code = emit(S, "StepDone", { loop_id = inst.id, turn_id = turn.id,
      step_id = step_id, message = message, results = tool_msg, usage = resp.usage,
      finish_reason = resp.finish_reason, estimate = budgeted and turn.estimate or nil,
      repair = repair }, not (final and #calls == 1) or repair ~= nil)
    if not ok then return nil, msg, code end
    if repair then goto next_step end
    if final and #calls == 1 then
      if oerr then return "TurnFailed", { error = oerr } end
      local over = budgeted and budget.after_step(S, inst, turn, resp.usage) or nil
      local done = { message = message, usage = sum, output = output, budget = over }
      local more, herr = turn_end(S, inst, turn, done, iterations)
      if herr then return "TurnFailed", { error = herr } end
      if not more then return "TurnDone", done end
      goto next_step
    end
    if turn.handoff then
      -- the conversation moves (drive hands it over once this terminal is queued)
      return "TurnDone", { message = message, usage = sum,
        handoff = { to = turn.handoff.to, call_id = turn.handoff.call_id } }
    end
    if not snapshot_edge(S, "step_done", { loop_id = inst.id, turn_id = turn.id }) then
      return "TurnFailed", { error = workspace.failure(S) }
    end
    -- the turn's and the session's budgets (none set: it only notes the step)
    local berr = budget.after_step(S, inst, turn, resp.usage)
    if berr then return "TurnFailed", { error = berr } end
    ok, msg, code = fold_queue(S, inst, turn)
    if not ok then return nil, msg, code end
    ::next_step::
  end
end

-- ---- the loop's actor (rig.delegation owns the tools and the bookkeeping of children) ----

local function cancel_queue(S, inst, reason)
  while #inst.queue > 0 do
    local item = table.remove(inst.queue, 1)
    emit(S, "InputCancelled", { loop_id = inst.id, cause = { command_id = item.command_id },
      reason = reason }, false)
    if S.dg then delegation.cancelled(S, item.command_id, reason, runner) end
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
    -- s:wait_idle reports the first turn of a top-level loop that did not end
    -- done since its last call (a delegated child's ends as its parent's tool result)
    if etype ~= "TurnDone" and not inst.parent_id and not S.turn_trouble then
      S.turn_trouble = { type = etype, turn_id = turn.id, loop_id = inst.id,
                         error = fields.error, reason = fields.reason }
    end
    -- The terminal is not waited for unless a delegated request waits on
    -- this turn (rig.delegation hands its outcome on as journaled). Nothing
    -- else here acts on it: the emission queue keeps it ahead of whatever
    -- follows, subscribers see it only once journaled, a failed append
    -- faults the session (the next turn's TurnStarted or SessionIdle, both
    -- waited, report it), and wait_idle returns after SessionIdle's append,
    -- which is behind it. A wide SSE fan-out then carries the terminal with
    -- LoopIdle and SessionIdle instead of alone.
    local ok = emit(S, etype, fields, S.dg ~= nil and delegation.pending(S, turn.command_id))
    if not ok then
      S.faulted_msg = S.core:faulted() or "the journal append failed"
      break
    end
    -- a delegated turn's answer goes to its waiter or back to the parent
    -- before this loop can go idle (no SessionIdle in between)
    if S.dg then delegation.turn_ended(S, inst, turn, etype, fields, runner) end
    -- a handoff: the target loop takes the conversation and a turn before
    -- this one can go idle
    if etype == "TurnDone" and fields.handoff and turn.handoff then
      handoff().perform(S, inst, turn, turn.handoff, runner)
    end
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
    -- append (this one or an unwaited one before it) faults the session.
    -- Until then the session is settling: busy is 0 already, and a
    -- wait_idle called now (a subscriber that saw the terminal) waits for
    -- this append too, not only for busy. Cleared however the emit ends.
    S.settling = S.settling + 1
    local _ <close> = setmetatable({}, { __close = function()
      S.settling = S.settling - 1
      S.idle_cond:signal()
    end })
    if not emit(S, "SessionIdle", {}) and S.core:faulted() then
      S.faulted_msg = S.core:faulted()
      catalog(S, { state = "failed" })
    end
  end
end

-- ---- loop instances ----

-- meta (children): { parent_id, depth, display_name }
local function new_instance(S, def, id, meta)
  -- the definition's fields, read once (a frozen definition copies its
  -- lists on every read)
  local tools, list = {}, def.tools
  local inst = { id = id, def = def, name = def.name, model = def.model, system = def.system,
                 gate = def.gate, limits = def.limits, tool_list = list, tools = tools,
                 history = {}, queue = {}, busy = false, turn_index = 0, observations = {},
                 depth = 0, children = {}, hooks = def.hooks, guardrails = def.guardrails,
                 -- a request's media references, read back from the store
                 blobs = require("rig.media").resolver(S.rig.store) }
  if meta then
    inst.parent_id, inst.depth, inst.display_name = meta.parent_id, meta.depth, meta.display_name
    local parent = S.loops[meta.parent_id]
    if parent then parent.children[#parent.children + 1] = id end
  end
  if #def.delegates > 0 then
    for _, t in ipairs(delegation.tools(S, inst, runner)) do list[#list + 1] = t end
  end
  if def.handoffs and not meta then
    -- only a top-level loop hands the conversation on (a child answers its parent)
    for _, t in ipairs(handoff().tools(S, inst)) do list[#list + 1] = t end
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

-- Hands an item { command_id, message, no_fold?, hand_back? } to a loop: it
-- starts a turn when the loop is idle, else waits in its queue (a hand-back
-- is never refused for a full queue). Returns false when it was rejected.
local function enqueue(S, inst, item)
  local cid = item.command_id
  if inst.busy then
    if #inst.queue >= QUEUE_MAX and not item.hand_back then
      emit(S, "TurnRejected", { loop_id = inst.id, cause = { command_id = cid },
        reason = "queue_full" }, false)
      if S.dg then delegation.cancelled(S, cid, "queue_full", runner) end
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
  -- the driver belongs to the session, not to the task that submitted: a
  -- submitter that is cancelled later (an HTTP handler whose client left, a
  -- delegating loop's interrupted turn) must not take the turn with it, which
  -- left it unjournaled and the session busy for good. s:interrupt() and
  -- shutdown end a turn, through inst.driver.
  inst.driver = core.spawn_detached(drive, S, inst)
  return true
end

-- A primer the session has no instance of yet: its instance, and LoopStarted
-- (waited unless wait is false). Returns emit's result.
local function start_primer(S, r, name, wait)
  local def = r:loop(name)
  new_instance(S, def, name)
  return emit(S, "LoopStarted", { loop_id = name, loop = name, revision = def:revision() }, wait)
end

runner.enqueue, runner.new_instance = enqueue, new_instance
M.start_primer = start_primer
M.cancel_gates = cancel_gates
M.new_instance, M.enqueue, M.drive, M.cancel_queue = new_instance, enqueue, drive, cancel_queue

return M
