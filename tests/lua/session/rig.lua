-- The rig the crash tests share between the child that is killed and the
-- process that restores: same loops, same policy revisions.
return function(store, steps, approver)
  local model = rig.model.script(steps)
  local echo = rig.tool{ name = "echo", description = "echoes",
    schema = { type = "object", properties = { text = { type = "string" } }, required = { "text" } },
    prepare = function(a) return { summary = "echo " .. a.text, requirements = {} } end,
    run = function(req, ctx)
      if rig.crash_at == "tool" then rig.crash_now() end
      return "echoed " .. req.summary
    end }
  local net = rig.tool{ name = "fetchy", description = "needs the network",
    schema = { type = "object", properties = {} },
    prepare = function() return { summary = "fetch", requirements = {
      { kind = "network", match = "tcp://example.org:443" } } } end,
    run = function() return "fetched" end }
  local gate = rig.gate{ access = { ["filesystem.read"] = "allow", ["filesystem.write"] = "deny",
    network = "gated", ["command.execute"] = "allow" }, approver = approver or "interactive" }
  local loop = rig.loop{ name = "assistant", model = model, system = "crash test",
    tools = { echo, net }, gate = gate, policy_revision = "crash-v1" }
  return rig.define{ loops = { loop }, primers = { "assistant" }, store = store }, model
end
