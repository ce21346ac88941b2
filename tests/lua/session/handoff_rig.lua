-- The rig of the handoff tests (tests/lua/handoff_spec.lua and handoff_child.lua):
-- triage (a lookup tool, a handoff to billing through its gate) and billing.
-- define(triage_steps, billing_steps, { gate, filter, store }) -> rig, triage model,
-- billing model, store

local function lookup()
  return rig.tool{ name = "lookup", description = "looks an order up",
    schema = { type = "object", properties = { id = { type = "string" } }, required = { "id" } },
    prepare = function(a) return { summary = "lookup " .. a.id, requirements = {} } end,
    run = function(req) return "order " .. req.summary:sub(8) .. ": shipped" end }
end

local function define(triage_steps, billing_steps, over)
  over = over or {}
  local tm = rig.model.script(triage_steps)
  local bm = rig.model.script(billing_steps)
  local gate = over.gate or rig.gate{ access = { delegate = "allow" }, approver = "headless" }
  local triage = rig.loop{ name = "triage", model = tm, system = "route", gate = gate,
    policy_revision = "v1", tools = { lookup() },
    handoffs = { { loop = "billing", description = "money questions", filter = over.filter } } }
  local billing = rig.loop{ name = "billing", model = bm, system = "bill", tools = {},
    description = "billing" }
  local store = over.store or rig.store.memory()
  return rig.define{ loops = { triage, billing }, primers = { "triage" }, store = store }, tm, bm, store
end

return define
