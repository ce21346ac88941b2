-- rig.hooks: what a loop's hooks and guardrails decide inside a turn
-- (rig.loop `hooks` and `guardrails`; the runner calls this module; docs/hooks.md).
--
-- Hooks act at five points; each decision is journaled as HookDecided
-- { hook, action, step_id?, call_id?, tool?, … } before it takes effect:
--   before_model(request, ctx) -> nil | request'      the request this model call
--     sends (system, messages, tools …); the history itself is not changed.
--     action "continue" | "rewrite" (changed = the fields replaced)
--   after_model(response, ctx) -> nil | { message = m }  the assistant message the
--     step commits instead. action "continue" | "rewrite"
--   before_tool(call, ctx) -> nil | "allow" | { action = "allow" }
--     | { action = "deny", message = "…" }    the call's result is that message (an
--                                             error result the model reads); nothing runs
--     | { action = "rewrite", input = { … } } the call runs with these arguments
--       (checked against the tool's schema again)
--   after_tool(call, result, ctx) -> nil | { content = "…", is_error = bool }
--     the result the step commits. action "continue" | "rewrite"
--   turn_end(outcome, ctx) -> nil | { action = "continue", message = "…" }
--     outcome = { type = "TurnDone", message, output, usage }: "continue" gives the
--     turn one more step, with message as new user input (TurnFoldedInto
--     { hook = "turn_end" }); limits.iterations still holds. action "stop" | "continue"
-- ctx = { session_id, loop_id, loop, turn_id, step_id, iteration, usage (the turn's
-- so far), history (the loop's conversation: read it, do not change it) }.
-- A hook that raises fails the turn: TurnFailed{ error = { code = "hook_failed",
-- hook, message } } (HookDecided{ action = "error" }); nothing of the step is committed.
--
-- Guardrails run beside the model call, in tasks of their own:
--   input: on the first step of a turn, on the turn's input { text, message }
--   output: on the step that ends the turn, on { text, message, output }, before it
--     is committed
-- A guardrail is check(input, ctx) -> falsy (passed) | true | "reason" |
-- { tripped = bool, reason = "…", info = { … } }, or a guard model with
-- instructions: it reads them as its system prompt and the text as the user's
-- message and answers a JSON object { "tripped": bool, "reason": "…" }.
-- Passing guardrails are journaled as GuardrailChecked { stage, guardrails, usage? };
-- a trip ends the turn: GuardrailTripped { stage, guardrail, reason, info, usage,
-- history_len } then TurnFailed{ error = { code = "guardrail_tripped", stage,
-- guardrail, message } }. Nothing of the tripped step is committed: no StepDone,
-- no tool call runs; an input trip also takes the turn's input back out of the
-- history (history_len: the length it returns to; a restore does the same). A
-- guardrail that raises or whose guard model fails ends the turn the same way with
-- code "guardrail_failed" (failing closed). usage: what the tripped step and the
-- guard models cost, counted in the session's usage.

local core = require "rig.core"
local json = require "rig.json"

local M = {}

local base = require "rig.session_base"
local function rt() return base end

local function emit(S, etype, f, wait) return rt().emit(S, etype, f, wait) end

local function is_cancel(e)
  return e == "cancelled" or (type(e) == "string" and e:find("^cancelled") ~= nil)
end

local function ctx_of(S, inst, turn, iteration)
  local u = {}
  for k, v in pairs(turn.usage or {}) do u[k] = v end
  return { session_id = S.id, loop_id = inst.id, loop = inst.name, turn_id = turn.id,
           step_id = turn.step_id, iteration = iteration, usage = u, history = inst.history }
end

local function hook_failure(name, err)
  return { code = "hook_failed", hook = name,
           message = "hook '" .. name .. "' failed: " .. tostring(err) }
end

-- Calls hook `name`; returns true, results… or false, failure (journaled).
local function call(S, inst, turn, name, base, ...)
  local f = inst.hooks[name]
  local res = table.pack(pcall(f, ...))
  if not res[1] then
    if is_cancel(res[2]) then error(res[2], 0) end
    local fields = { loop_id = inst.id, turn_id = turn.id, step_id = turn.step_id, hook = name,
                     action = "error", message = tostring(res[2]) }
    for k, v in pairs(base or {}) do fields[k] = v end
    emit(S, "HookDecided", fields, false)
    return false, hook_failure(name, res[2])
  end
  return true, table.unpack(res, 2, res.n)
end

local function decided(S, inst, turn, name, action, extra)
  local f = { loop_id = inst.id, turn_id = turn.id, step_id = turn.step_id, hook = name,
              action = action }
  for k, v in pairs(extra or {}) do f[k] = v end
  return emit(S, "HookDecided", f, false)
end

function M.has(inst, name)
  return inst.hooks ~= nil and inst.hooks[name] ~= nil
end

local REQ_FIELDS = { "system", "messages", "tools", "tool_choice", "output_schema" }

-- before_model: the request to send. Returns req, or nil, failure.
function M.before_model(S, inst, turn, req, iteration)
  local view = {}
  for k, v in pairs(req) do view[k] = v end
  local msgs = {}
  for i, m in ipairs(req.messages) do msgs[i] = m end
  view.messages = json.array(msgs)
  local ok, out = call(S, inst, turn, "before_model", nil, view, ctx_of(S, inst, turn, iteration))
  if not ok then return nil, out end
  if out == nil then
    decided(S, inst, turn, "before_model", "continue")
    return req
  end
  if type(out) ~= "table" or type(out.messages) ~= "table" then
    local e = "it must return nil or a request table with messages (got " .. type(out) .. ")"
    decided(S, inst, turn, "before_model", "error", { message = e })
    return nil, hook_failure("before_model", e)
  end
  local changed = {}
  for _, k in ipairs(REQ_FIELDS) do
    local was = req[k]
    local now = out[k]
    if k == "messages" then
      local same = #now == #was
      for i = 1, #now do if now[i] ~= was[i] then same = false break end end
      if not same then changed[#changed + 1] = k end
    elseif now ~= was then
      changed[#changed + 1] = k
    end
  end
  if #changed == 0 then
    decided(S, inst, turn, "before_model", "continue")
    return req
  end
  decided(S, inst, turn, "before_model", "rewrite", { changed = json.array(changed) })
  local new = {}
  for k, v in pairs(req) do new[k] = v end
  for _, k in ipairs(REQ_FIELDS) do new[k] = out[k] end
  return new
end

local function valid_message(m)
  if type(m) ~= "table" or m.role ~= "assistant" or type(m.content) ~= "table" then
    return false
  end
  for _, b in ipairs(m.content) do
    if type(b) ~= "table" or type(b.type) ~= "string" then return false end
  end
  return true
end

-- after_model: the message the step commits. Returns resp (its message
-- possibly replaced), or nil, failure.
function M.after_model(S, inst, turn, resp, iteration)
  local view = { message = resp.message, usage = resp.usage, finish_reason = resp.finish_reason,
                 model = resp.model }
  local ok, out = call(S, inst, turn, "after_model", nil, view, ctx_of(S, inst, turn, iteration))
  if not ok then return nil, out end
  if out == nil or out.message == nil or out.message == resp.message then
    decided(S, inst, turn, "after_model", "continue")
    return resp
  end
  if type(out) ~= "table" or not valid_message(out.message) then
    local e = "it must return nil or { message = an assistant message { role, content } }"
    decided(S, inst, turn, "after_model", "error", { message = e })
    return nil, hook_failure("after_model", e)
  end
  local msg = { role = "assistant", content = json.array(out.message.content) }
  decided(S, inst, turn, "after_model", "rewrite")
  local new = {}
  for k, v in pairs(resp) do new[k] = v end
  new.message = msg
  return new
end

-- before_tool: nil (allow, maybe with new input) | "deny", text | nil, nil, failure.
-- Returns action, value: "allow", input | "deny", message | "error", failure.
function M.before_tool(S, inst, turn, c)
  local base = { call_id = c.id, tool = c.name }
  local view = { id = c.id, name = c.name, input = c.input }
  local ok, out = call(S, inst, turn, "before_tool", base, view, ctx_of(S, inst, turn))
  if not ok then return "error", out end
  if out == nil or out == "allow" or (type(out) == "table" and out.action == "allow") then
    decided(S, inst, turn, "before_tool", "allow", base)
    return "allow", c.input
  end
  local e
  if type(out) ~= "table" then
    e = "it must return nil, \"allow\" or a table { action = … } (got " .. type(out) .. ")"
  elseif out.action == "deny" then
    local m = out.message
    if m == nil then m = "the call was denied by a hook" end
    if type(m) ~= "string" then
      e = "a deny's message must be a string"
    else
      local f = { message = m }
      for k, v in pairs(base) do f[k] = v end
      decided(S, inst, turn, "before_tool", "deny", f)
      return "deny", m
    end
  elseif out.action == "rewrite" then
    if type(out.input) ~= "table" then
      e = "a rewrite's input must be a table of arguments"
    else
      local f = { input = out.input }
      for k, v in pairs(base) do f[k] = v end
      decided(S, inst, turn, "before_tool", "rewrite", f)
      return "allow", out.input
    end
  else
    e = "unknown action '" .. tostring(out.action) .. "' (allow, deny, rewrite)"
  end
  local f = { message = e }
  for k, v in pairs(base) do f[k] = v end
  decided(S, inst, turn, "before_tool", "error", f)
  return "error", hook_failure("before_tool", e)
end

-- after_tool: the result block the step commits (or the failure as an error result).
function M.after_tool(S, inst, turn, c, res)
  local base = { call_id = c.id, tool = c.name }
  local view = { content = res.content, is_error = res.is_error == true }
  local ok, out = call(S, inst, turn, "after_tool", base, { id = c.id, name = c.name,
    input = c.input }, view, ctx_of(S, inst, turn))
  if not ok then
    return { type = "tool_result", tool_use_id = c.id, is_error = true,
             content = "error: " .. out.message, hook_failure = out }
  end
  if out == nil then
    decided(S, inst, turn, "after_tool", "continue", base)
    return res
  end
  if type(out) ~= "table" or type(out.content) ~= "string" then
    local e = "it must return nil or { content = \"…\", is_error = bool }"
    local f = { message = e }
    for k, v in pairs(base) do f[k] = v end
    decided(S, inst, turn, "after_tool", "error", f)
    return { type = "tool_result", tool_use_id = c.id, is_error = true,
             content = "error: hook 'after_tool' failed: " .. e,
             hook_failure = hook_failure("after_tool", e) }
  end
  local new = { type = "tool_result", tool_use_id = c.id, content = out.content,
                is_error = out.is_error == true }
  local f = { is_error = new.is_error }
  for k, v in pairs(base) do f[k] = v end
  decided(S, inst, turn, "after_tool", "rewrite", f)
  return new
end

-- turn_end on a turn about to be done: nil (it ends) | the user message to go
-- on with | false, failure.
function M.turn_end(S, inst, turn, fields, iteration)
  local outcome = { type = "TurnDone", message = fields.message, output = fields.output,
                    usage = fields.usage }
  local ok, out = call(S, inst, turn, "turn_end", nil, outcome, ctx_of(S, inst, turn, iteration))
  if not ok then return false, out end
  if out == nil or out == "stop" or (type(out) == "table" and out.action == "stop") then
    decided(S, inst, turn, "turn_end", "stop")
    return nil
  end
  if type(out) == "table" and out.action == "continue" and type(out.message) == "string"
     and out.message:find("%S") then
    decided(S, inst, turn, "turn_end", "continue", { message = out.message })
    return rt().user_message(out.message)
  end
  local e = "it must return nil, \"stop\" or { action = \"continue\", message = \"…\" }"
  decided(S, inst, turn, "turn_end", "error", { message = e })
  return false, hook_failure("turn_end", e)
end

-- ---- guardrails ----

local function text_of(message)
  local parts = {}
  for _, b in ipairs(message and message.content or {}) do
    if b.type == "text" then parts[#parts + 1] = b.text end
  end
  return table.concat(parts, "\n")
end
M.text_of = text_of

-- One guardrail on input; returns { tripped, reason, info, usage } or raises.
local function run_one(g, input, ctx)
  if g.check then
    local out = g.check(input, ctx)
    if not out then return { tripped = false } end
    if out == true then return { tripped = true } end
    if type(out) == "string" then return { tripped = true, reason = out } end
    if type(out) == "table" then
      return { tripped = out.tripped == true, reason = out.reason ~= nil and tostring(out.reason)
        or nil, info = out.info }
    end
    error("it returned a " .. type(out) .. " (falsy, true, a reason or { tripped, reason })", 0)
  end
  local resp, err, code = g.model:invoke{ system = g.instructions,
    messages = { { role = "user", content = input.text } } }
  if not resp then
    if code == "cancelled" then error("cancelled", 0) end
    error("its guard model failed: " .. tostring(err), 0)
  end
  local text = text_of(resp.message)
  local v = json.decode((text:match("%b{}")) or text)
  if type(v) ~= "table" or type(v.tripped) ~= "boolean" then
    error("its guard model did not answer { \"tripped\": bool, \"reason\": \"…\" } (got '"
      .. text:sub(1, 200) .. "')", 0)
  end
  return { tripped = v.tripped, reason = v.reason ~= nil and tostring(v.reason) or nil,
           usage = resp.usage }
end

-- Starts a stage's guardrails, each in a task. Returns the set or nil.
function M.start(S, inst, turn, stage, input)
  local list = inst.guardrails and inst.guardrails[stage]
  if not list or #list == 0 then return nil end
  local set = { stage = stage, list = list, tasks = {} }
  local ctx = { session_id = S.id, loop_id = inst.id, loop = inst.name, turn_id = turn.id,
                step_id = turn.step_id, stage = stage }
  for i, g in ipairs(list) do
    set.tasks[i] = core.spawn(function() return run_one(g, input, ctx) end)
  end
  return set
end

-- Did a guardrail of the set already trip (while the model streams)?
function M.tripped_early(set)
  if not set then return false end
  for i, t in ipairs(set.tasks) do
    if not set.done or not set.done[i] then
      if t:status() == "done" then
        local r = t:wait()
        set.done = set.done or {}
        set.done[i] = r
        if r and r.tripped then return true end
      elseif t:status() == "failed" then
        return true
      end
    end
  end
  return false
end

-- Have all guardrails of the set finished without a trip?
function M.passed(set)
  if not set then return true end
  for i, t in ipairs(set.tasks) do
    if not (set.done and set.done[i]) then
      if t:status() ~= "done" then return false end
      local r = t:wait()
      set.done = set.done or {}
      set.done[i] = r
      if not r or r.tripped then return false end
    end
  end
  return true
end

function M.cancel(set)
  if not set then return end
  for _, t in ipairs(set.tasks) do t:cancel() end
end

-- Waits for the set. Returns nil (all passed; GuardrailChecked journaled) or
-- the trip { guardrail, reason, info, failed }; usage adds into `usage`.
function M.finish(S, inst, turn, set, usage, add_usage)
  if not set then return nil end
  local trip
  local names = {}
  for i, t in ipairs(set.tasks) do
    local g = set.list[i]
    names[i] = g.name
    local r, msg, code = t:wait()
    if r == nil then
      if code == "cancelled" or is_cancel(msg) then
        M.cancel(set)
        error("cancelled", 0)
      end
      trip = trip or { guardrail = g.name, failed = true,
                       reason = "guardrail '" .. g.name .. "' failed: " .. tostring(msg) }
    else
      add_usage(usage, r.usage)
      if r.tripped and not trip then
        trip = { guardrail = g.name, reason = r.reason, info = r.info }
      end
    end
  end
  if trip then
    M.cancel(set)
    return trip
  end
  local f = { loop_id = inst.id, turn_id = turn.id, step_id = turn.step_id, stage = set.stage,
              guardrails = json.array(names) }
  if usage.input_tokens and usage.input_tokens > 0 then f.usage = usage end
  emit(S, "GuardrailChecked", f, false)
  return nil
end

-- The trip journaled; returns the terminal's failure.
function M.tripped(S, inst, turn, stage, trip, usage, history_len)
  local ok, msg, code = emit(S, "GuardrailTripped", { loop_id = inst.id, turn_id = turn.id,
    step_id = turn.step_id, stage = stage, guardrail = trip.guardrail, reason = trip.reason,
    info = trip.info, failed = trip.failed or nil, usage = usage, history_len = history_len })
  if not ok then return nil, msg, code end
  local what = stage == "input" and "the turn's input" or "the turn's answer"
  return { code = trip.failed and "guardrail_failed" or "guardrail_tripped", stage = stage,
           guardrail = trip.guardrail,
           message = trip.failed and (trip.reason or "a guardrail failed")
             or ("guardrail '" .. trip.guardrail .. "' tripped on " .. what
               .. (trip.reason and (": " .. trip.reason) or "")) }
end

return M
