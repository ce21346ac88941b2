-- The rig the serve tests run: a scripted model whose reply names the input
-- ("gate me" calls a gated tool; "big N" answers N KiB of text), on a
-- memory store, or an LMDB store in the directory given as arg or env.
local function reply(req)
  local last = req.messages[#req.messages]
  if last.role == "tool" then return { text = "tool said: " .. last.content[1].content } end
  local text = last.content[1].text or ""
  if text == "gate me" then
    return { text = "asking", tool_calls = { { name = "fetchy", input = {} } } }
  end
  local n = tonumber(text:match("^big (%d+)$"))
  if n then return { text = string.rep("x", 1024 * n) } end
  local secs = tonumber(text:match("^slow (%d+)$"))
  if secs then return { text = string.rep("s", 10 * secs), chunk = 1, chunk_delay = 0.1 } end
  return { text = "you said: " .. text }
end

local net = rig.tool{ name = "fetchy", description = "needs the network",
  schema = { type = "object", properties = {} },
  prepare = function() return { summary = "fetch", requirements = {
    { kind = "network", match = "tcp://example.org:443" } } } end,
  run = function() return "fetched" end }
local gate = rig.gate{ access = { ["filesystem.read"] = "allow", ["filesystem.write"] = "deny",
  network = "gated", ["command.execute"] = "allow" }, approver = "interactive" }
local steps = {}
for i = 1, 5000 do steps[i] = reply end
local loop = rig.loop{ name = "assistant", model = rig.model.script(steps), system = "serve test",
  tools = { net }, gate = gate, policy_revision = "serve-v1" }
local dir = os.getenv("SERVE_STORE")
local store = dir and rig.store.lmdb{ root = dir } or rig.store.memory()
return rig.define{ loops = { loop }, primers = { "assistant" }, store = store }
