-- The rig the workspace crash test shares between the child that is killed
-- and the process that restores: a per-session workspace under BASE, a
-- required checkpoint after every step that ran tools.
return function(store, base, steps)
  local put = rig.tool{ name = "put", description = "writes a file in the workspace",
    schema = { type = "object", properties = { path = { type = "string" },
      text = { type = "string" } }, required = { "path", "text" } },
    prepare = function(a) return { summary = a.path .. "=" .. a.text, requirements = {} } end,
    run = function(req, ctx)
      local path, text = req.summary:match("^([^=]*)=(.*)$")
      local f = assert(io.open(ctx.workspace .. "/" .. path, "w"))
      f:write(text)
      f:close()
      if text == "crash" and rig.crash_now then rig.crash_now() end
      return "written"
    end }
  local gate = rig.gate{ access = { ["filesystem.read"] = "allow", ["filesystem.write"] = "allow",
    network = "deny", ["command.execute"] = "allow" }, approver = "headless" }
  local loop = rig.loop{ name = "assistant", model = rig.model.script(steps), system = "ws crash",
    tools = { put }, gate = gate, policy_revision = "ws-crash-v1" }
  return rig.define{ loops = { loop }, primers = { "assistant" }, store = store,
    workspace = rig.workspace.per_session{ base = base },
    snapshots = { trigger = "step_done", priority = "required" } }
end
