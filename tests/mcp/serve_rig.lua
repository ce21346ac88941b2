-- A rig for `luarig mcp serve` tests (tests/lua/mcp_server_spec.lua): a scripted model
-- that echoes, or for "note: TEXT" calls the gated tool `note` (command.execute
-- "note", gated: a person approves through the client's elicitation) and reports, or
-- for "slow…" answers after 30 s (a call to cancel).
-- The store: LMDB under $MCP_SERVE_STATE when set (the journal is read afterwards).
local json = rig.json
local function step(req)
  local last = req.messages[#req.messages]
  local b = last.content[1] or {}
  if b.type == "tool_result" then
    return { text = "noted: " .. tostring(b.content) }
  end
  local text = b.text or ""
  if text:match("^slow") then return { text = "finally", delay = 30 } end
  local note = text:match("^note: (.*)$")
  if note then return { text = "saving", tool_calls = { { name = "note", input = { text = note } } } } end
  return { text = "echo: " .. text }
end
local steps = {}
for i = 1, 200 do steps[i] = step end
local saved = {}
local note = rig.tool{
  name = "note", description = "Saves a note",
  schema = { type = "object", properties = { text = { type = "string" } }, required = { "text" } },
  prepare = function(args)
    return { summary = "save the note '" .. args.text .. "'",
             requirements = { { kind = "command.execute", scope = "note " .. args.text } } }
  end,
  run = function(req, ctx)
    saved[#saved + 1] = ctx.prepared
    return "saved"
  end,
}
local gate = rig.gate{ access = { ["command.execute"] = "gated" }, approver = "interactive" }
local loop = rig.loop{ name = "assistant", model = rig.model.script(steps), tools = { note },
                       gate = gate, policy_revision = "mcp-serve-test" }
local state = os.getenv("MCP_SERVE_STATE")
local store = state and rig.store.lmdb{ root = state } or rig.store.memory()
return rig.define{ loops = { loop }, primers = { "assistant" }, store = store }
