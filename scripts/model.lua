-- model.lua: talk to a model, stream its reply, let it call a tool once.
--
-- With ANTHROPIC_API_KEY or OPENAI_API_KEY set, this uses the real provider;
-- otherwise a scripted model plays the same conversation offline, so the demo
-- runs anywhere.

local m
if os.getenv("ANTHROPIC_API_KEY") then
  m = rig.model{ provider = "anthropic", name = "claude-sonnet-4-5", max_tokens = 1024 }
elseif os.getenv("OPENAI_API_KEY") then
  m = rig.model{ provider = "openai", name = "gpt-4o-mini", max_tokens = 1024 }
else
  m = rig.model.script{
    { text = "Let me look at the clock.", chunk = 4, chunk_delay = 0.02,
      tool_calls = { { name = "clock", input = { zone = "UTC" } } } },
    function(req)
      local result = req.messages[#req.messages].content[1].content
      return { text = "It is " .. result .. " (UTC) — time for an agent runtime.", chunk = 5,
               chunk_delay = 0.02 }
    end,
  }
end
print("model: " .. tostring(m))

local tools = { { name = "clock", description = "The current time in a time zone (only UTC).",
  schema = { type = "object", properties = { zone = { type = "string" } }, required = { "zone" } } } }
local request = { system = "You are brief. Use the clock tool to answer.",
  messages = { { role = "user", content = "What time is it?" } }, tools = tools }

-- One turn: stream the text as it arrives, then return the whole reply.
local function turn()
  local st, err = m:stream(request)
  if not st then error(err, 0) end
  for chunk in st:chunks() do
    if chunk.type == "text" then io.write(chunk.text); io.flush() end
  end
  io.write("\n")
  return assert(st:result())
end

for _ = 1, 4 do
  local resp = turn()
  request.messages[#request.messages + 1] = resp.message
  if resp.finish_reason ~= "tool_use" then
    print(string.format("[%d in, %d out tokens]", resp.usage.input_tokens or 0,
      resp.usage.output_tokens or 0))
    break
  end
  local results = {}
  for _, block in ipairs(resp.message.content) do
    if block.type == "tool_use" then
      print(string.format("-> %s(%s)", block.name, block.input_json))
      results[#results + 1] = { type = "tool_result", tool_use_id = block.id,
                                content = os.date("!%H:%M") }
    end
  end
  request.messages[#request.messages + 1] = { role = "tool", content = results }
end
