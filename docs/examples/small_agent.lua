-- The small agent of issue 19: two tools of its own (one a person approves), a gate,
-- delegation to a second loop, and structured output, in one call. With
-- ANTHROPIC_API_KEY set it talks to Claude; without, small_agent_model.lua plays
-- both loops offline (make test runs it that way).
local model = os.getenv("ANTHROPIC_API_KEY") and rig.model{ "anthropic/claude-sonnet-4-5" }
  or dofile(arg[0]:gsub("[^/]*$", "") .. "small_agent_model.lua")

local weather = rig.tool{ name = "get_weather", description = "Current weather in a city.",
  schema = { type = "object", properties = { city = { type = "string" } }, required = { "city" } },
  run = function(a) return a.city .. ": 18 °C, light rain" end }
local book = rig.tool{ name = "book_table", description = "Books a table.", needs_approval = true,
  schema = { type = "object", required = { "place", "time" },
             properties = { place = { type = "string" }, time = { type = "string" } } },
  run = function(a) return "booked " .. a.place .. " at " .. a.time end }

local researcher = rig.loop{ name = "researcher", model = model, system = "You check the weather.",
  description = "checks the weather in a city", tools = { weather },
  gate = rig.gate.default(), policy_revision = "v1" }
local planner = rig.loop{ name = "planner", model = model, system = "You plan an evening out.",
  tools = { book }, delegates = { researcher }, gate = rig.gate.default(), policy_revision = "v1",
  output_schema = { name = "plan", schema = { type = "object", required = { "summary", "booked" },
    properties = { summary = { type = "string" }, booked = { type = "boolean" } } } } }

local plan = assert(rig.run(planner, "Plan dinner in Oslo at 19:00.", { on_gate = "approve" }))
print(plan.summary)
print("booked:", plan.booked)
