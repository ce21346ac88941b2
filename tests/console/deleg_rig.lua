-- The rig tests/console/delegation_test.py serves: a planner whose gate asks
-- before each delegation (access delegate = "gated"; approve always saves to
-- the rules file DELEG_RULES), and two delegates. "delegate X" starts a
-- researcher on X, "critic X" a critic; then the planner says what the tool
-- returned.
local rules = assert(os.getenv("DELEG_RULES"), "DELEG_RULES is not set")

local function last_text(m)
  for _, b in ipairs(m.content) do
    if b.type == "text" then return b.text end
    if b.type == "tool_result" then return tostring(b.content) end
  end
  return ""
end

local function brain(req)
  local m = req.messages[#req.messages]
  local text = last_text(m)
  if req.system == "research" then return { text = "research on " .. text } end
  if req.system == "critique" then return { text = "critique of " .. text } end
  if m.role == "tool" then return { text = "planner got: " .. text } end
  local who, what = text:match("^(%a+) (.+)$")
  if who == "delegate" or who == "critic" then
    return { text = "delegating " .. what, tool_calls = { { name = "start_agent", input = {
      agent = who == "critic" and "critic" or "researcher", instructions = what } } } }
  end
  return { text = "you said: " .. text }
end
local steps = {}
for i = 1, 1000 do steps[i] = brain end
local model = rig.model.script(steps)

local planner = rig.loop{
  name = "planner", model = model, system = "plan", delegates = { "researcher", "critic" },
  gate = rig.gate{ access = { delegate = "gated" }, rules = rig.permissions.file(rules),
                   approver = "interactive" },
  policy_revision = "console-deleg-v1",
}
local researcher = rig.loop{ name = "researcher", model = model, system = "research" }
local critic = rig.loop{ name = "critic", model = model, system = "critique" }
return rig.define{ loops = { planner, researcher, critic }, primers = { "planner" },
                   store = rig.store.memory() }
