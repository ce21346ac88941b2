-- The three graphs of rig.flow's benchmark (tests/bench/flow_bench.py), the
-- same as tests/bench/flow_langgraph.mjs builds in LangGraph.js:
--   fanout     start -> split, which sends 100 messages to work (one task
--              each, appending to a list) -> join -> end
--   loop       1,000 supersteps of one vertex appending one item to a list
--   interrupt  write -> review, which interrupts; resumed with a value -> end
--
--   luarig flow_graphs.lua GRAPH memory|lmdb DIR
-- prints one JSON line: { cpu_s, steps, bytes (journal bytes of the run),
-- peak_rss_kib, wall_s }.
local core = require "rig.core"
local json = rig.json
local graph, kind, dir = arg[1], arg[2], arg[3]

local store = (kind == "lmdb" and graph ~= "resume") and rig.store.lmdb{ root = dir } or rig.store.memory()

local defs = {
  fanout = {
    name = "fanout",
    channels = { results = "append", total = "last" },
    vertices = {
      split = function(_, ctx) for i = 1, 100 do ctx:send("work", i) end end,
      work = function(_, ctx) return { results = { ctx.message * 2 } } end,
      join = function(s)
        local t = 0
        for _, v in ipairs(s.results) do t = t + v end
        return { total = t }
      end,
    },
    edges = { { from = "start", to = "split" }, { from = "work", to = "join" } },
  },
  loop = {
    name = "loop",
    channels = { items = "append", n = { default = 0 } },
    vertices = { step = function(s) return { items = { "item " .. s.n }, n = s.n + 1 } end },
    edges = { { from = "start", to = "step" },
              { from = "step", to = function(s) return s.n < 1000 and "step" or "end" end } },
    step_limit = 2000,
  },
  interrupt = {
    name = "interrupt",
    channels = { draft = "last", verdict = "last" },
    vertices = {
      write = function(s) return { draft = "draft of " .. tostring(s.draft) } end,
      review = function(s, ctx) return { verdict = ctx:interrupt({ draft = s.draft }) } end,
    },
    edges = { { from = "start", to = "write" }, { from = "write", to = "review" } },
  },
}

-- Resume after kill -9 (the loop graph on LMDB):
--   luarig flow_graphs.lua crash lmdb DIR      runs it, printing RUN id and STEP n
--   luarig flow_graphs.lua resume lmdb DIR ID  attaches; prints { resume_s }: from
--     before the store opens to the first checkpoint committed after the attach
if graph == "crash" then
  local run = assert(rig.flow(defs.loop):start({}, { store = store }))
  print("RUN " .. run.id)
  io.stdout:flush()
  for ev in run:subscribe():events() do
    if ev.type == "FlowStep" then print("STEP " .. ev.step) io.stdout:flush() end
  end
  return
end
if graph == "resume" then
  local t0 = rig.now()
  local rstore = rig.store.lmdb{ root = dir }
  local run = assert(rig.flow(defs.loop):attach(arg[4], { store = rstore }))
  local from = run.step
  for ev in run:subscribe():events() do
    if ev.type == "FlowStep" and ev.step > from then break end
  end
  print(json.encode({ resume_s = rig.now() - t0, from_step = from }))
  os.exit(0)
end

local f = rig.flow(defs[graph])
local c0, t0 = os.clock(), rig.now()
local run = assert(f:start({}, { store = store }))
local out, msg, code = run:wait()
if code == "interrupted" then
  assert(run:resume("approved"))
  out, msg, code = run:wait()
end
assert(out, msg)
local cpu, wall = os.clock() - c0, rig.now() - t0
if graph == "fanout" then assert(out.total == 10100) end
if graph == "loop" then assert(#out.items == 1000) end
if graph == "interrupt" then assert(out.verdict == "approved") end
local recs = assert(core.journal_read(store, run.id, 1, 0))
local bytes = 0
for _, r in ipairs(recs) do bytes = bytes + #(r.body or "") end
local steps = #run:checkpoints() - 1 -- supersteps after the input step
local f2 = assert(io.open("/proc/self/status"))
local hwm = tonumber(f2:read("a"):match("VmHWM:%s+(%d+)"))
f2:close()
print(json.encode({ cpu_s = cpu, wall_s = wall, steps = steps, bytes = bytes, peak_rss_kib = hwm }))
