-- The seed guide's "Add more agents", runnable: a planner that delegates
-- focused research to researcher loops, on a scripted model (no network,
-- no key; swap in rig.model{ … } for a real one).
--
--   build/luarig scripts/guide/agents.lua
--
-- What it shows:
--   * each role is an ordinary rig.loop; only the planner has `delegates`,
--     and the runner injects start_agent / message_agent / list_agents /
--     stop_agent into it (never add them yourself);
--   * rig.define's delegation_limits bound the nesting depth and the number
--     of children over the session's life;
--   * every delegate call passes the planner's gate: start_agent and
--     message_agent require { kind = "delegate", match = "researcher" }, so
--     the gate must allow it (here access `delegate = "allow"`; "gated"
--     asks a person once per call unless a saved rule allows that delegate,
--     and a saved deny rule refuses it; docs/delegation.md). list_agents and
--     stop_agent require nothing. A loop without a gate is denied;
--   * a foreground start (wait = true): the child's final answer is the
--     tool result; a background start (wait = false): the agent id at once,
--     and the child's answer reaches the planner later as a new message,
--     exactly once (journaled first as a SubagentResult command);
--   * children are loop instances "researcher#N", journaled with their
--     parent (LoopStarted.parent_loop_id) and with histories of their own.

local rig = require "rig"

-- ---- the scripted model: one script plays both roles ----

local function text_of(m)
  local out = {}
  for _, b in ipairs(m.content) do
    if b.type == "text" then out[#out + 1] = b.text end
    if b.type == "tool_result" then out[#out + 1] = tostring(b.content) end
  end
  return table.concat(out, "\n")
end

local planner_steps = {
  function()
    return { text = "I'll ask a researcher about the memory store and wait for it.",
      tool_calls = { { name = "start_agent", input = { agent = "researcher", name = "memory",
        instructions = "How does luarig's memory store keep sessions? Two sentences." } } } }
  end,
  function()
    return { text = "Now the LMDB store, in the background.",
      tool_calls = { { name = "start_agent", input = { agent = "researcher", name = "lmdb",
        wait = false,
        instructions = "How does luarig's LMDB store keep sessions? Two sentences." } } } }
  end,
  function()
    return { text = "The LMDB researcher is working; I'll summarize when it reports." }
  end,
  function()
    return { text = "Both reports are in; let me check on my agents.",
      tool_calls = { { name = "list_agents", input = {} } } }
  end,
  function()
    return { text = "Summary: the memory store keeps a session's journal in this process "
      .. "only, for tests and demos; the LMDB store keeps it on disk, so a session "
      .. "survives a crash and comes back with r:restore(id)." }
  end,
}

local researcher_answers = {
  ["memory"] = "The memory store keeps each session's journal in the process's memory. "
    .. "It is gone when the process exits: use it for tests and demos.",
  ["LMDB"] = "The LMDB store appends each session's journal to an LMDB database under its "
    .. "root directory. A restarted process restores the session from it.",
}

local planner_n = 0
local function brain(req)
  if req.system:find("^Plan") then
    planner_n = planner_n + 1
    return planner_steps[planner_n]()
  end
  local ask = text_of(req.messages[#req.messages])
  for key, answer in pairs(researcher_answers) do
    if ask:find(key, 1, true) then return { text = answer } end
  end
  return { text = "I could not find that." }
end
local steps = {}
for i = 1, 20 do steps[i] = brain end
local model = rig.model.script{ steps = steps }

-- ---- the rig ----

-- delegation allowed outright; with a person to ask: access = { delegate =
-- "gated" }, rules = rig.permissions.file(PATH), approver = "interactive"
local planner_gate = rig.gate{ access = { delegate = "allow" }, approver = "headless" }

local planner = rig.loop{
  name = "planner", model = model,
  system = "Plan the work and delegate focused research.",
  delegates = { "researcher" },
  gate = planner_gate, policy_revision = "planner-delegation-v1",
}
local researcher = rig.loop{
  name = "researcher", model = model,
  system = "Research one focused question and return evidence.",
  description = "researches one focused question",
}
local assembly = rig.define{
  loops = { planner, researcher }, primers = { "planner" },
  store = rig.store.memory(),
  delegation_limits = { depth = 2, quota = 8 },
}

-- ---- a readable transcript ----

local function one_line(s, n)
  s = s:gsub("%s*\n%s*", " / ")
  if #s > n then
    while n > 0 and (s:byte(n + 1) or 0) & 0xC0 == 0x80 do n = n - 1 end
    s = s:sub(1, n) .. "…"
  end
  return s
end

-- A loop's streamed text is printed whole, before what the step does next.
local pending = {}
local function flush(loop_id)
  local text = pending[loop_id]
  if text and text ~= "" then
    print((loop_id == "planner" and "" or "  ") .. "[" .. loop_id .. "] " .. text)
  end
  pending[loop_id] = nil
end

local function show(ev)
  local who = "[" .. tostring(ev.loop_id) .. "]"
  local t = ev.type
  if t == "TokenDelta" then
    if ev.delta.type == "text" then
      pending[ev.loop_id] = (pending[ev.loop_id] or "") .. ev.delta.text
    end
    return
  end
  if ev.loop_id then flush(ev.loop_id) end
  if t == "LoopStarted" and ev.parent_loop_id then
    print(string.format("  %s started agent %s (%s, depth %d)", "[" .. ev.parent_loop_id .. "]",
      ev.loop_id, ev.name or ev.loop, ev.depth))
  elseif t == "TurnStarted" and ev.loop_id ~= "planner" then
    print("  " .. who .. " <- " .. one_line(text_of(ev.message), 100))
  elseif t == "TurnStarted" or t == "TurnFoldedInto" then
    local text = text_of(ev.message)
    if text:find("^%[agent ") then
      print(who .. " <- hand-back: " .. one_line(text, 110))
    end
  elseif t == "PermissionDecided" then
    print(string.format("%s   gate: %s %s (%s)", who, ev.verdict, ev.tool, ev.source))
  elseif t == "ToolCallStarted" then
    print(who .. "   -> " .. ev.tool .. ": " .. one_line(ev.summary, 90))
  elseif t == "ToolCallCompleted" then
    print(who .. "   <- " .. (ev.is_error and "error: " or "") .. one_line(ev.preview, 100))
  end
end

local s = assert(assembly:session())
local sub = s:subscribe{ loops = "all" }
local question = "Compare luarig's memory and LMDB session stores."
print("luarig guide: more agents (a scripted model: no network, no key)")
print()
print("you> " .. question)
s:submit(question)
for ev in sub:events(30) do
  show(ev)
  if ev.type == "SessionIdle" then break end
end
sub:close()

print()
local children = {}
for rec in s:journal() do
  if rec.type == "LoopStarted" and rec.parent_loop_id then
    children[#children + 1] = rec.loop_id .. " (parent " .. rec.parent_loop_id .. ")"
  end
end
print("children in the journal: " .. table.concat(children, ", "))
print("researcher#2's own history: " .. #s:history("researcher#2") .. " messages; "
  .. "the planner's: " .. #s:history() .. " messages")
s:shutdown()
