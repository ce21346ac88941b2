-- The rig fork_spec.lua and its killed child share (same loops, same policy
-- revisions): put{ path, text } writes into the session's workspace.
--   local M = dofile("tests/lua/fork/rig.lua")
--   M.define(steps, { store, workspace, snapshots, loops = { names } }) -> rig
--   M.call(path, text) -> a scripted step calling put
-- A put of "!slow" holds its tool call until the spec sets M.release = true
-- (the event it waits for, polled), so a case decides when a turn is over.
local M = { release = true }

local function allow_all()
  return rig.gate{ access = { ["filesystem.read"] = "allow", ["filesystem.write"] = "allow",
    network = "allow", ["command.execute"] = "allow" }, approver = "headless" }
end

M.put = rig.tool{ name = "put", description = "writes a file in the workspace",
  schema = { type = "object", properties = { path = { type = "string" }, text = { type = "string" } },
             required = { "path", "text" } },
  prepare = function(a) return { summary = "put " .. a.path .. "=" .. a.text, requirements = {} } end,
  run = function(req, ctx)
    local path, text = req.summary:match("^put ([^=]*)=(.*)$")
    if text == "!slow" then
      local t0 = rig.now()
      while not M.release and rig.now() - t0 < 30 do rig.sleep(0.01) end
      return "slept"
    end
    local f = assert(io.open(ctx.workspace and (ctx.workspace .. "/" .. path) or "/dev/null", "w"))
    f:write(text)
    f:close()
    return "ok"
  end }

function M.call(path, text)
  return { text = "", tool_calls = { { name = "put", input = { path = path, text = text } } } }
end

-- steps: a list (one loop) or { [loop name] = list }
function M.define(steps, opts)
  opts = opts or {}
  local loops, primers = {}, {}
  for _, name in ipairs(opts.loops or { "assistant" }) do
    loops[#loops + 1] = rig.loop{ name = name, model = rig.model.script(steps[name] or steps),
      system = "s", tools = { M.put }, gate = allow_all(), policy_revision = "fork-v1" }
    primers[#primers + 1] = name
  end
  return rig.define{ loops = loops, primers = primers, active_primer = primers[1],
    store = opts.store or rig.store.memory(), workspace = opts.workspace,
    snapshots = opts.workspace and (opts.snapshots or
      { trigger = "turn_done", priority = "required" }) or nil }
end

-- Submits and waits for the session to go idle; returns the events.
function M.turn(s, text, opts)
  local sub = s:subscribe{ ephemeral = false }
  assert(s:submit(text, opts))
  local evs = {}
  for ev in sub:events(10) do
    evs[#evs + 1] = ev
    if ev.type == "SessionIdle" then break end
  end
  sub:close()
  return evs
end

return M
