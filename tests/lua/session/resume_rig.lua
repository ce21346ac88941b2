-- The rig the resume tests share between the process that is killed
-- (resume_child.lua), the process that restores and resumes, and the REPL's
-- terminal test: same loops, same policy revisions.
--
--   define(store, brain, { log = PATH, limits = {…}, rules = …,
--                          network = "gated", revision = "resume-v1",
--                          host = "example.org" (what fetchy asks for) }) -> rig, model
--   brain(request, n) -> a script step; request.system says whose call it is:
--     "resume test" (the assistant), "boss" or "worker" (delegation).
-- Every tool run appends "TOOL KEY resumed|fresh" to opts.log (ctx.idempotency_key,
-- ctx.resumed), so a test can tell what ran in which process. rig.crash_at ==
-- "tool" makes echo, "approved" fetchy, kill its process after logging
-- (rig.crash_now, set by the child).
return function(store, brain, opts)
  opts = opts or {}
  local function logged(name, ctx)
    if not opts.log then return end
    local f = assert(io.open(opts.log, "a"))
    f:write(name, " ", tostring(ctx.idempotency_key), " ", ctx.resumed and "resumed" or "fresh", "\n")
    f:close()
  end
  local steps = {}
  for i = 1, 200 do steps[i] = brain end
  local model = rig.model.script{ steps = steps }
  local echo = rig.tool{ name = "echo", description = "echoes",
    schema = { type = "object", properties = { text = { type = "string" } }, required = { "text" } },
    prepare = function(a) return { summary = "echo " .. a.text, requirements = {} } end,
    run = function(req, ctx)
      logged("echo", ctx)
      if rig.crash_at == "tool" then rig.crash_now() end
      return "echoed " .. req.summary
    end }
  local fetchy = rig.tool{ name = "fetchy", description = "needs the network",
    schema = { type = "object", properties = { host = { type = "string" } } },
    prepare = function(a)
      local host = a.host or opts.host or "example.org"
      return { summary = "fetch " .. host, requirements = {
        { kind = "network", match = "tcp://" .. host .. ":443" } } }
    end,
    run = function(_, ctx)
      logged("fetchy", ctx)
      if rig.crash_at == "approved" then rig.crash_now() end
      return "fetched"
    end }
  local gate = rig.gate{ access = { ["filesystem.read"] = "allow", ["filesystem.write"] = "deny",
    network = opts.network or "gated", ["command.execute"] = "allow" }, approver = "interactive",
    rules = opts.rules }
  local assistant = rig.loop{ name = "assistant", model = model, system = "resume test",
    tools = { echo, fetchy }, gate = gate, policy_revision = opts.revision or "resume-v1",
    limits = opts.limits }
  local boss = rig.loop{ name = "boss", model = model, system = "boss", delegates = { "worker" },
    gate = rig.gate{ access = { delegate = "allow" }, approver = "headless" }, policy_revision = "boss-v1" }
  local worker = rig.loop{ name = "worker", model = model, system = "worker",
    description = "fetches", tools = { fetchy }, gate = gate, policy_revision = "worker-v1" }
  return rig.define{ loops = { assistant, boss, worker }, primers = { "assistant", "boss" },
    active_primer = "assistant", store = store }, model
end
