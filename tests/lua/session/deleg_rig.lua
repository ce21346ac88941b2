-- The delegation rig the specs and the crash child share: a planner that may
-- start researchers, a researcher that may start helpers. One scripted model
-- plays every role: roles[system](request, n) -> step, where system is
-- "plan", "research" or "help" (the loop's system prompt).
--   define(store, roles, { limits = { depth, quota }, gate = false | g, child_gate = g })
-- The default gates allow delegation (access delegate = "allow"): the gated
-- paths are delegation_gate_spec's.
return function(store, roles, opts)
  opts = opts or {}
  local function brain(req, n)
    local f = roles[req.system]
    if not f then error("no role for system '" .. tostring(req.system) .. "'") end
    return f(req, n)
  end
  local steps = {}
  for i = 1, 300 do steps[i] = brain end
  local model = rig.model.script{ steps = steps }
  local gate = opts.gate
  if gate == nil then gate = rig.gate{ access = { delegate = "allow" }, approver = "headless" } end
  local planner = rig.loop{ name = "planner", model = model, system = "plan",
    delegates = { "researcher" }, gate = gate or nil,
    policy_revision = gate and "planner-delegation-v1" or nil }
  local researcher = rig.loop{ name = "researcher", model = model, system = "research",
    description = "researches one focused question", delegates = { "helper" },
    gate = opts.child_gate or rig.gate{ access = { delegate = "allow" }, approver = "headless" },
    policy_revision = "r1" }
  local helper = rig.loop{ name = "helper", model = model, system = "help" }
  return rig.define{ loops = { planner, researcher, helper }, primers = { "planner" },
    store = store, delegation_limits = opts.limits }, model
end
