-- A map-reduce workflow with one agent turn per document (rig.flow,
-- docs/flow.md), on a scripted model (no network, no key; swap in
-- rig.model{ … } for a real one) and an LMDB store in the directory given.
--
--   build/luarig scripts/guide/flow_mapreduce.lua [STATE_DIR]
--
-- What it shows:
--   * the workflow coordinates and the agent works: `split` sends one
--     message per document, `summarize` runs once per message, side by side
--     in one superstep, each an agent turn (ctx:turn) in a session of its own
--     that keeps its own journal;
--   * an append channel gathers the summaries at the barrier and `combine`
--     reduces them;
--   * every superstep ends in a checkpoint holding only what changed; the
--     run's checkpoints are listed at the end (luarig flow show ID prints
--     the same from the shell).

local rig = require "rig"

local dir = arg[1] or os.tmpname()
os.remove(dir)
os.execute("mkdir -p '" .. dir .. "'")
local store = rig.store.lmdb{ root = dir }

-- the scripted model: a summary names the document's first words
local function reply(req)
  local text = req.messages[#req.messages].content[1].text
  local doc = text:match("^summarize: (.*)$") or text
  return { text = "summary: " .. doc:match("^(%S+ %S+)") }
end
local steps = {}
for i = 1, 16 do steps[i] = reply end
local writer = rig.loop{ name = "summarizer", model = rig.model.script(steps),
  system = "Summarize the document in one line." }
local agents = rig.define{ loops = { writer }, primers = { "summarizer" }, store = store }

local f = rig.flow{
  name = "mapreduce",
  channels = { docs = "last", summaries = "append", report = "last" },
  vertices = {
    split = function(state, ctx)
      for i, d in ipairs(state.docs) do ctx:send("summarize", { n = i, text = d }) end
    end,
    summarize = function(_, ctx)
      local turn = ctx:turn(agents, "summarize: " .. ctx.message.text)
      return { summaries = { { n = ctx.message.n, text = turn.text, session = turn.session } } }
    end,
    combine = function(state)
      local s = {}
      for _, x in ipairs(state.summaries) do s[#s + 1] = x end
      table.sort(s, function(a, b) return a.n < b.n end)
      local lines = {}
      for _, x in ipairs(s) do lines[#lines + 1] = x.n .. ". " .. x.text end
      return { report = table.concat(lines, "\n") }
    end,
  },
  edges = {
    { from = "start", to = "split" },
    { from = "summarize", to = "combine" },
  },
  input = { "docs" },
  output = { "report", "summaries" },
  store = store,
}

local out, run = assert(f:run({ docs = {
  "flow coordinates explicit stages of work",
  "agents decide with a model step by step",
  "checkpoints make a crash a pause",
} }))
print("report:")
print(out.report)
print(#out.summaries .. " agent turns, each in its own session")
for _, c in ipairs(run:checkpoints()) do
  print(string.format("checkpoint step %d: next %s", c.step,
    #c.pending > 0 and table.concat(c.pending, ", ") or "(end)"))
end
print("run " .. run.id .. " (luarig flow show --state " .. dir .. " " .. run.id:sub(1, 8) .. ")")
