-- rig.budget: token and cost budgets checked before each step (docs/budgets.md).
--
-- Two scopes: the turn (a loop's limits.max_tokens and limits.max_cost) and the
-- session (rig.define{ budget = { max_tokens, max_cost } }, over every turn of
-- every loop). Tokens are every token a model call read or wrote (input, output,
-- cache reads and cache writes); cost is what the model's prices make of them.
--
-- Before each model call the runner estimates the step:
--   input:  the last step's context (what its request read plus what it wrote)
--           plus a token per 4 bytes of what the history gained since; the first
--           step of a loop: a token per 4 bytes of the whole request
--   output: the largest output of this loop's steps so far, else the model's
--           max_tokens, at most 1024
--   cost:   the last step's input side at the price it was billed (cache reads
--           stay cheap), the new input at the input price, the output at the
--           output price (no prices: no cost estimate, 0)
-- and refuses the step when what the scope has spent plus the estimate passes a
-- limit: TurnFailed{ error = { code = "limit", limit, scope, spent, estimate,
-- checked = "before_step" } }, no model call made. After the step, a scope at or
-- past a limit ends the turn: { …, checked = "after_step", overrun = spent - limit }:
-- an estimate that fell short lets a limit be passed by that last step's overrun
-- only, and the event says by how much. With a budget set, each StepDone carries
-- the estimate it was checked against (estimate = { tokens, cost }).

local json = require "rig.json"

local M = {}

local OUT_DEFAULT = 1024

local function tokens_of(u)
  if not u then return 0 end
  return (u.input_tokens or 0) + (u.output_tokens or 0) + (u.cache_read_tokens or 0)
    + (u.cache_creation_tokens or 0)
end
M.tokens_of = tokens_of

-- Is any budget set for this loop's turns?
function M.active(S, inst)
  local l, b = inst.limits, S.rig.budget
  return (l.max_tokens or l.max_cost or (b and (b.max_tokens or b.max_cost))) ~= nil
end

local function bytes(v)
  local t = json.encode(v)
  return t and #t or 0
end

-- The cost of u's input side at prices (per million).
local function input_cost(u, p)
  if not u or not p then return 0 end
  local c = 0
  c = c + (u.input_tokens or 0) * (p.input or 0)
  c = c + (u.cache_read_tokens or 0) * (p.cache_read or p.input or 0)
  c = c + (u.cache_creation_tokens or 0) * (p.cache_write or p.input or 0)
  return c / 1e6
end

-- The estimate of the next step: { tokens, cost }.
function M.estimate(inst, req)
  local p = inst.model.prices
  local out = inst.largest_output
  if not out then
    out = inst.model.max_tokens or OUT_DEFAULT
    if out > OUT_DEFAULT then out = OUT_DEFAULT end
  end
  local h = req.messages
  local last = inst.last_usage
  local new_in, base_tokens, base_cost
  if inst.context_tokens and last then
    -- what the history gained after the last assistant message
    local tail = {}
    for i = #h, 1, -1 do
      if h[i].role == "assistant" then break end
      table.insert(tail, 1, h[i])
    end
    new_in = (bytes(tail) + 3) // 4
    base_tokens = inst.context_tokens
    -- the last request's input side again, and its answer as input now
    base_cost = input_cost(last, p) + (last.output_tokens or 0) * (p and p.input or 0) / 1e6
  else
    new_in = (bytes(req.messages) + #(req.system or "") + bytes(req.tools or {}) + 3) // 4
    base_tokens, base_cost = 0, 0
  end
  local cost = base_cost
  if p then cost = cost + new_in * (p.input or 0) / 1e6 + out * (p.output or 0) / 1e6 end
  return { tokens = base_tokens + new_in + out, cost = cost }
end

local function scopes(S, inst, turn_sum)
  local l, b = inst.limits, S.rig.budget or {}
  return {
    { scope = "turn", spent = turn_sum, max_tokens = l.max_tokens, max_cost = l.max_cost },
    { scope = "session", spent = S.usage_sum, max_tokens = b.max_tokens, max_cost = b.max_cost },
  }
end

local function round(x) return math.floor(x * 1e6 + 0.5) / 1e6 end

local function failure(sc, name, spent, limit, extra)
  local what = name == "max_cost" and "cost" or "token"
  local f = { code = "limit", limit = name, scope = sc.scope, spent = spent, [name] = limit }
  for k, v in pairs(extra) do f[k] = v end
  if extra.estimate then
    f.message = string.format("the %s's %s budget (%s) would be passed: %s spent, the next "
      .. "step is estimated at %s", sc.scope, what, tostring(limit), tostring(spent),
      tostring(extra.estimate))
  else
    f.message = string.format("the %s reached its %s budget (%s): %s spent, %s over",
      sc.scope, what, tostring(limit), tostring(spent), tostring(extra.overrun))
  end
  return f
end

-- Before a step: nil (go on; turn.estimate set) or the failure.
function M.before_step(S, inst, turn, req)
  local est = M.estimate(inst, req)
  est.cost = round(est.cost)
  turn.estimate = est
  for _, sc in ipairs(scopes(S, inst, turn.usage)) do
    local t = tokens_of(sc.spent)
    if sc.max_tokens and t + est.tokens > sc.max_tokens then
      return failure(sc, "max_tokens", t, sc.max_tokens, { estimate = est.tokens,
        checked = "before_step" })
    end
    local c = round(sc.spent.cost or 0)
    if sc.max_cost and est.cost > 0 and c + est.cost > sc.max_cost then
      return failure(sc, "max_cost", c, sc.max_cost, { estimate = est.cost,
        checked = "before_step" })
    end
  end
  return nil
end

-- After a step (its usage in the sums): nil or the failure.
function M.after_step(S, inst, turn, usage)
  if usage then
    local o = usage.output_tokens
    if o and (not inst.largest_output or o > inst.largest_output) then inst.largest_output = o end
    inst.last_usage = usage
  end
  for _, sc in ipairs(scopes(S, inst, turn.usage)) do
    local t = tokens_of(sc.spent)
    if sc.max_tokens and t >= sc.max_tokens then
      return failure(sc, "max_tokens", t, sc.max_tokens, { overrun = t - sc.max_tokens,
        checked = "after_step" })
    end
    local c = round(sc.spent.cost or 0)
    if sc.max_cost and c >= sc.max_cost then
      return failure(sc, "max_cost", c, sc.max_cost, { overrun = round(c - sc.max_cost),
        checked = "after_step" })
    end
  end
  return nil
end

return M
