-- The rig the console test serves: a scripted model whose reply depends on
-- the input. "stream" answers slowly, two bytes at a time (the page must
-- show the text growing); "gate me" thinks, then calls a tool that needs
-- the network, which the gate asks about; anything else is echoed.
local function reply(req)
  local last = req.messages[#req.messages]
  if last.role == "tool" then
    return { text = "The page says: " .. last.content[1].content .. ".",
             usage = { input_tokens = 210, output_tokens = 9, cost = 0.0021 } }
  end
  local text = last.content[1].text or ""
  for _, b in ipairs(last.content) do
    if b.type == "image" or b.type == "document" then
      return { text = "you sent " .. b.type .. " " .. tostring(b.name) .. " (" .. b.media_type .. ", "
        .. tostring(b.size) .. " bytes)" }
    end
  end
  if text == "stream" then
    return { text = "Streaming, two bytes at a time, from the scripted model.", chunk = 2,
             chunk_delay = 0.04, usage = { input_tokens = 120, output_tokens = 14, cost = 0.0013 } }
  end
  if text == "gate me" then
    return { thinking = "The user wants the page: that needs the network.",
             text = "Fetching https://example.org/ for you.",
             tool_calls = { { name = "fetch_page", input = { url = "https://example.org/" } } },
             usage = { input_tokens = 150, output_tokens = 20, cost = 0.0017 } }
  end
  return { text = "you said: " .. text }
end

local fetch = rig.tool{ name = "fetch_page", description = "fetches a web page",
  schema = { type = "object", properties = { url = { type = "string" } }, required = { "url" } },
  prepare = function(input) return { summary = "GET " .. input.url, requirements = {
    { kind = "network", match = "tcp://example.org:443" } } } end,
  run = function() return "Example Domain (1256 bytes)" end }
local gate = rig.gate{ access = { ["filesystem.read"] = "allow", ["filesystem.write"] = "deny",
  network = "gated", ["command.execute"] = "allow" }, approver = "interactive" }
local steps = {}
for i = 1, 1000 do steps[i] = reply end
-- "forbidden …" trips an input guardrail (the page draws the trip)
local loop = rig.loop{ name = "assistant", model = rig.model.script(steps), system = "console test",
  tools = { fetch }, gate = gate, policy_revision = "console-v1",
  guardrails = { input = { { name = "no_forbidden", check = function(input)
    return input.text:find("^forbidden") and "a forbidden request" end } } } }
-- CONSOLE_STORE: an LMDB root, so a second server finds what a killed one left
local dir = os.getenv("CONSOLE_STORE")
return rig.define{ loops = { loop }, primers = { "assistant" },
  store = dir and rig.store.lmdb{ root = dir } or rig.store.memory() }
