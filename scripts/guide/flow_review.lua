-- A review loop with a human interrupt (rig.flow, docs/flow.md): an agent
-- drafts, a person approves or asks for a revision, and the draft goes
-- round until approved. On a scripted model and an LMDB store in the
-- directory given; the person's answers come from the command line (or
-- stdin when it is a terminal).
--
--   build/luarig scripts/guide/flow_review.lua [STATE_DIR] [ANSWER ...]
--     (default answers: "shorter", then "approve")
--
-- What it shows:
--   * ctx:interrupt pauses the run (journaled); nothing waits in the
--     process, which could exit here: the answer may come from another
--     process that attaches the run (`f:attach(id)`), the REPL (`:flow
--     answer`) or serve (POST /v1/flows/review/runs/ID/resume);
--   * here the script lets go of the run at the first question and attaches
--     it again, as a restarted process would: the journal holds the state;
--   * a router edge loops back to `draft` until the verdict is "approve".

local rig = require "rig"

local dir = arg[1] or os.tmpname()
os.remove(dir)
os.execute("mkdir -p '" .. dir .. "'")
local answers = { table.unpack(arg, 2) }
if #answers == 0 then answers = { "shorter", "approve" } end

local function reply(req)
  local text = req.messages[#req.messages].content[1].text
  local note = text:match("feedback: (.*)$")
  return { text = note and ("a " .. note .. " draft") or "a long first draft" }
end
local steps = {}
for i = 1, 16 do steps[i] = reply end

local function build(store)
  local writer = rig.loop{ name = "writer", model = rig.model.script(steps), system = "Write release notes." }
  local agents = rig.define{ loops = { writer }, primers = { "writer" }, store = store }
  return rig.flow{
    name = "review",
    channels = { topic = "last", draft = "last", feedback = "last", rounds = { default = 0 } },
    vertices = {
      draft = function(s, ctx)
        local ask = "notes on " .. s.topic .. (s.feedback and (" — feedback: " .. s.feedback) or "")
        return { draft = ctx:turn(agents, ask).text, rounds = s.rounds + 1 }
      end,
      review = function(s, ctx)
        local verdict = ctx:interrupt({ draft = s.draft, round = s.rounds })
        return { feedback = verdict }
      end,
    },
    edges = {
      { from = "start", to = "draft" },
      { from = "draft", to = "review" },
      { from = "review", to = function(s) return s.feedback == "approve" and "end" or "draft" end,
        targets = { "draft", "end" } },
    },
    output = { "draft", "rounds" },
    store = store,
  }
end

local store = rig.store.lmdb{ root = dir }
local f = build(store)
local run = assert(f:start({ topic = "1.0" }))
local id = run.id
local n = 0
while true do
  local out, msg, code = run:wait()
  if out then
    print("approved after " .. out.rounds .. " round(s): " .. out.draft)
    break
  end
  if code ~= "interrupted" then error(msg, 0) end
  local q = run:interrupts()[1]
  print(string.format("round %d: %q — approve?", q.value.round, q.value.draft))
  n = n + 1
  if n == 1 then
    -- let go, as an exiting process would, and attach again
    run:close()
    run = assert(f:attach(id))
    print("attached run " .. id:sub(1, 8) .. " again from the store (status " .. run:status() .. ")")
    assert(select(3, run:wait()) == "interrupted")
  end
  local a = answers[n]
  if not a and rig.isatty(0) then io.write("answer> ") io.flush() a = rig.read_line() end
  a = a or "approve"
  print("answer: " .. a)
  assert(run:resume(a))
end
