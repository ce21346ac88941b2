-- The scripted model small_agent.lua uses offline: it plays the planner and the
-- researcher (the system prompt says which), deciding each step from the real
-- tool results in the conversation.
local function last_result(req)
  local m = req.messages[#req.messages]
  if m.role ~= "tool" then return nil end
  return m.content[1].content
end

local function play(req)
  local got = last_result(req)
  if req.system:find("weather", 1, true) then
    if not got then return { tool_calls = { { name = "get_weather", input = { city = "Oslo" } } } } end
    return { text = got }
  end
  if not got then
    return { tool_calls = { { name = "start_agent", input = { agent = "researcher",
      instructions = "What is the weather in Oslo tonight?" } } } }
  elseif got:find("°C", 1, true) then
    return { text = "Rain tonight, so indoors.", tool_calls = { { name = "book_table",
      input = { place = "Fiskeriet", time = "19:00" } } } }
  end
  return { tool_calls = { { name = "final_answer", input = {
    summary = "Light rain in Oslo tonight (18 °C): " .. got .. ", indoors.",
    booked = got:find("^booked") ~= nil } } } }
end

local steps = {}
for i = 1, 8 do steps[i] = play end
return rig.model.script{ steps = steps, name = "small-agent-script" }
