-- rig.flow: definitions (validation, freezing, fingerprints), supersteps,
-- reducers, routing, sends, input/output, step limits, interrupts,
-- checkpoints and forks, the journal's per-step deltas, attach and drift,
-- the lease, and the ways a vertex reaches agents, tools and commands.

local json = rig.json
local core = require "rig.core" -- the stdlib's private binding: what the public API does not show

local function tmpdir()
  local p = os.tmpname()
  os.remove(p)
  assert(os.execute("mkdir -p '" .. p .. "'"))
  return p
end

local function chain()
  return {
    name = "chain",
    channels = { n = { reducer = "last", default = 0 }, log = "append" },
    vertices = {
      inc = function(s) return { n = s.n + 1, log = { "inc" .. s.n } } end,
    },
    edges = {
      { from = "start", to = "inc" },
      { from = "inc", to = function(s) return s.n < 3 and "inc" or "end" end,
        targets = { "inc", "end" } },
    },
  }
end

local function steps_of(store, id)
  local out = {}
  for _, ev in ipairs(assert(rig.flow.log(store, id))) do
    if ev.type == "FlowStep" then out[#out + 1] = ev end
  end
  return out
end

describe("rig.flow definitions", function()
  local function refuses(def, pat)
    expect(function() rig.flow(def) end).to_fail(pat)
  end

  it("names the field that is wrong", function()
    local d = chain()
    d.name = "Bad Name"
    refuses(d, "field 'name' must be a name")
    d = chain(); d.extra = 1
    refuses(d, "field 'extra' is unknown")
    d = chain(); d.channels.n = { reducer = "sum" }
    refuses(d, "field 'channels.n.reducer' must be")
    d = chain(); d.edges[2] = { from = "inc", to = "nowhere" }
    refuses(d, "field 'edges%[2%].to' names an unknown vertex 'nowhere'")
    d = chain(); d.edges[1] = { from = "inc", to = "inc" }
    refuses(d, "needs an edge from 'start'")
    d = chain(); d.vertices["end"] = function() end
    refuses(d, "'end' is reserved")
    d = chain(); d.output = { "n", "missing" }
    refuses(d, "field 'output%[2%]' names an unknown channel 'missing'")
    d = chain(); d.step_limit = 0
    refuses(d, "field 'step_limit' must be an integer")
    d = chain(); d.edges[2].targets = { "inc", "ghost" }
    refuses(d, "field 'edges%[2%].targets%[2%]' names an unknown vertex 'ghost'")
    d = chain(); d.vertices.inc = { run = function() end, colour = "red" }
    refuses(d, "field 'vertices.inc.colour' is unknown")
  end)

  it("is frozen", function()
    local f = rig.flow(chain())
    expect(function() f.name = "x" end).to_fail("frozen")
    expect(f.name).to_be("chain")
  end)

  it("fingerprints the graph: the same definition twice, a changed vertex differs", function()
    local a, b = rig.flow(chain()), rig.flow(chain())
    expect(a:fingerprint()).to_be(b:fingerprint())
    expect(#a:fingerprint()).to_be(64)
    local d = chain()
    d.vertices.inc = function(s) return { n = s.n + 2 } end
    expect(rig.flow(d):fingerprint() ~= a:fingerprint()).to_be(true)
    d = chain(); d.step_limit = 7
    expect(rig.flow(d):fingerprint() ~= a:fingerprint()).to_be(true)
    -- a revision names the vertex instead of its code
    local r1, r2 = chain(), chain()
    r1.vertices.inc = { run = function() return {} end, revision = "v1" }
    r2.vertices.inc = { run = function() return { n = 1 } end, revision = "v1" }
    expect(rig.flow(r1):fingerprint()).to_be(rig.flow(r2):fingerprint())
  end)
end)

describe("rig.flow runs", function()
  it("runs supersteps to the end and returns the output", function()
    local f = rig.flow(chain())
    local out, run = f:run({})
    expect(out.n).to_be(3)
    expect(out.log).to_equal({ "inc0", "inc1", "inc2" })
    expect(run:status()).to_be("done")
    local cps = run:checkpoints()
    expect(#cps).to_be(4) -- the input step and three supersteps
    expect(cps[1].step).to_be(0)
    expect(cps[4].pending).to_equal({})
  end)

  it("runs the vertices of a superstep side by side", function()
    local seen = {}
    local function wait_for(other)
      for _ = 1, 500 do
        if seen[other] then return true end
        rig.sleep(0.01)
      end
      return false
    end
    local f = rig.flow{
      name = "par",
      channels = { ok = "append" },
      vertices = {
        a = function() seen.a = true return { ok = { wait_for("b") } } end,
        b = function() seen.b = true return { ok = { wait_for("a") } } end,
      },
      edges = { { from = "start", to = { "a", "b" } } },
    }
    local out = assert(f:run())
    expect(out.ok).to_equal({ true, true })
  end)

  it("applies writes through last, append and user reducers at the barrier", function()
    local f = rig.flow{
      name = "reduce",
      channels = { last = "last", items = "append",
        total = { reducer = function(a, b) return a + b end, default = 100 } },
      vertices = {
        x = function() return { items = { 1, 2 }, total = 1 } end,
        y = function() return { items = 3, total = 10, last = "y" } end,
      },
      edges = { { from = "start", to = { "x", "y" } } },
    }
    local out = assert(f:run())
    expect(out.items).to_equal({ 1, 2, 3 })
    expect(out.total).to_be(111)
    expect(out.last).to_be("y")
  end)

  it("fails a run when two vertices write one last-value channel in a step", function()
    local f = rig.flow{
      name = "clash",
      channels = { v = "last" },
      vertices = { x = function() return { v = 1 } end, y = function() return { v = 2 } end },
      edges = { { from = "start", to = { "x", "y" } } },
    }
    local out, msg, code = f:run()
    expect(out).to_be_nil()
    expect(code).to_be("write")
    expect(msg).to_match("channel 'v' takes one value per superstep; step 1 got 2 %(from 'x', 'y'%)")
  end)

  it("fails a vertex writing an unknown channel and a router leaving its targets", function()
    local f = rig.flow{
      name = "badwrite",
      channels = { v = "last" },
      vertices = { x = function() return { w = 1 } end },
      edges = { { from = "start", to = "x" } },
    }
    local _, msg = f:run()
    expect(msg).to_match("vertex 'x' wrote unknown channel 'w'")
    local g = rig.flow{
      name = "badroute",
      channels = { v = "last" },
      vertices = { x = function() end, y = function() end },
      edges = { { from = "start", to = "x" },
                { from = "x", to = function() return "y" end, targets = { "end" } } },
    }
    local _, msg2, code2 = g:run()
    expect(code2).to_be("route")
    expect(msg2).to_match("chose 'y', which is not among its targets")
  end)

  it("stops at the step limit", function()
    local f = rig.flow{
      name = "forever",
      channels = { n = { default = 0 } },
      vertices = { spin = function(s) return { n = s.n + 1 } end },
      edges = { { from = "start", to = "spin" }, { from = "spin", to = "spin" } },
      step_limit = 5,
    }
    local out, msg, code, run = f:run()
    expect(out).to_be_nil()
    expect(code).to_be("step_limit")
    expect(msg).to_match("step limit %(5%)")
    expect(run:state().values.n).to_be(5)
  end)

  it("checks the input against input and returns only output", function()
    local f = rig.flow{
      name = "io",
      channels = { q = "last", a = "last", scratch = "last" },
      vertices = { answer = function(s) return { a = s.q .. "!", scratch = 1 } end },
      edges = { { from = "start", to = "answer" } },
      input = { "q" },
      output = { "a" },
    }
    local out = assert(f:run({ q = "hi" }))
    expect(out).to_equal({ a = "hi!" })
    local _, msg, code = f:start({ a = "no" })
    expect(code).to_be("invalid_input")
    expect(msg).to_match("channel 'a' is not an input")
  end)

  it("maps over sends and reduces the results (one task per message)", function()
    local f = rig.flow{
      name = "mapreduce",
      channels = { docs = "last", lengths = "append", total = "last" },
      vertices = {
        split = function(s, ctx) for _, d in ipairs(s.docs) do ctx:send("measure", d) end end,
        measure = function(_, ctx) return { lengths = { #ctx.message } } end,
        sum = function(s)
          local t = 0
          for _, n in ipairs(s.lengths) do t = t + n end
          return { total = t }
        end,
      },
      edges = { { from = "start", to = "split" }, { from = "measure", to = "sum" } },
    }
    local out = assert(f:run({ docs = { "a", "bb", "cccc" } }))
    table.sort(out.lengths)
    expect(out.lengths).to_equal({ 1, 2, 4 })
    expect(out.total).to_be(7)
  end)

  it("fails the run with the vertex's error", function()
    local f = rig.flow{
      name = "boom",
      channels = { v = "last" },
      vertices = { x = function() error("kaput") end },
      edges = { { from = "start", to = "x" } },
    }
    local _, msg, code, run = f:run()
    expect(code).to_be("vertex")
    expect(msg).to_match("vertex 'x' failed in step 1: .*kaput")
    expect(rig.flow.show(run.store, run.id).status).to_be("failed")
  end)
end)

describe("rig.flow checkpoints", function()
  it("journals only what changed: an append channel's new items, not the list", function()
    local f = rig.flow{
      name = "grow",
      channels = { items = "append", n = { default = 0 }, fixed = { default = "big" } },
      vertices = { add = function(s) return { items = { s.n }, n = s.n + 1 } end },
      edges = { { from = "start", to = "add" },
                { from = "add", to = function(s) return s.n < 20 and "add" or "end" end } },
    }
    local out, run = f:run()
    expect(#out.items).to_be(20)
    local steps = steps_of(run.store, run.id)
    expect(#steps).to_be(21)
    for i = 2, #steps do
      expect(#steps[i].add.items).to_be(1)      -- the new item only
      expect(steps[i].set.fixed).to_be_nil()    -- an unchanged channel is not written
    end
  end)

  it("forks from a checkpoint with a channel changed, leaving the origin as it was", function()
    local f = rig.flow(chain())
    local out, run = f:run({})
    expect(out.n).to_be(3)
    local fork = assert(run:fork{ at = 1, values = { n = -2 } })
    local fout = assert(fork:wait())
    -- from step 1 (n = 1, log = { inc0 }) with n set to -2: five more increments
    expect(fout.n).to_be(3)
    expect(#fout.log).to_be(6)
    expect(fout.log[1]).to_be("inc0")
    expect(fout.log[2]).to_be("inc-2")
    local sh = rig.flow.show(fork.store, fork.id)
    expect(sh.forked_from.run).to_be(run.id)
    expect(sh.forked_from.step).to_be(1)
    expect(rig.flow.show(run.store, run.id).output.n).to_be(3)
    local _, msg, code = run:fork{ at = 99 }
    expect(code).to_be("not_found")
    expect(msg).to_match("no checkpoint at step 99")
  end)

  it("replays from a checkpoint unchanged", function()
    local f = rig.flow(chain())
    local _, run = f:run({})
    local re = assert(run:fork{ at = 2 })
    local out = assert(re:wait())
    expect(out.n).to_be(3)
    expect(out.log).to_equal({ "inc0", "inc1", "inc2" })
  end)
end)

describe("rig.flow interrupts", function()
  local function review()
    return rig.flow{
      name = "review",
      channels = { draft = "last", verdict = "last", notes = "append" },
      vertices = {
        write = function(s, ctx) return { draft = "draft " .. ctx.step, notes = { "wrote" } } end,
        approve = function(s, ctx)
          local a = ctx:interrupt({ draft = s.draft })
          return { verdict = a, notes = { "asked" } }
        end,
      },
      edges = { { from = "start", to = "write" }, { from = "write", to = "approve" } },
    }
  end

  it("pauses the run for an answer and goes on with it", function()
    local run = assert(review():start({}))
    local out, msg, code = run:wait()
    expect(out).to_be_nil()
    expect(code).to_be("interrupted")
    expect(msg).to_match("'approve'")
    local its = run:interrupts()
    expect(#its).to_be(1)
    expect(its[1].value.draft).to_be("draft 1")
    expect(rig.flow.show(run.store, run.id).status).to_be("interrupted")
    assert(run:resume("yes"))
    out = assert(run:wait())
    expect(out.verdict).to_be("yes")
    expect(out.notes).to_equal({ "wrote", "asked" })
    local _, _, c2 = run:resume("again")
    expect(c2).to_be("closed")
  end)

  it("asks which interrupt when several are open, and answers each by key", function()
    local f = rig.flow{
      name = "two",
      channels = { got = "append" },
      vertices = {
        a = function(_, ctx) return { got = { "a=" .. ctx:interrupt("a?") } } end,
        b = function(_, ctx) return { got = { "b=" .. ctx:interrupt("b?") } } end,
      },
      edges = { { from = "start", to = { "a", "b" } } },
    }
    local run = assert(f:start())
    expect(select(3, run:wait())).to_be("interrupted")
    local its = run:interrupts()
    expect(#its).to_be(2)
    local _, _, code = run:resume("x")
    expect(code).to_be("ambiguous")
    assert(run:resume("1", its[1].key))
    expect(select(3, run:wait())).to_be("interrupted")
    assert(run:resume("2", its[2].key))
    local out = assert(run:wait())
    table.sort(out.got)
    expect(out.got).to_equal({ "a=1", "b=2" })
  end)

  it("asks a vertex's questions one after the other, each answer kept for the re-runs", function()
    local runs = 0
    local f = rig.flow{
      name = "twoq",
      channels = { name = "last", colour = "last" },
      vertices = {
        ask = function(_, ctx)
          runs = runs + 1
          local n = ctx:interrupt("name?")
          local c = ctx:interrupt("colour of " .. n .. "?")
          return { name = n, colour = c }
        end,
      },
      edges = { { from = "start", to = "ask" } },
    }
    local run = assert(f:start())
    expect(select(3, run:wait())).to_be("interrupted")
    expect(run:interrupts()[1].value).to_be("name?")
    assert(run:resume("ada"))
    expect(select(3, run:wait())).to_be("interrupted")
    expect(run:interrupts()[1].value).to_be("colour of ada?")
    assert(run:resume("teal"))
    local out = assert(run:wait())
    expect(out).to_equal({ name = "ada", colour = "teal" })
    expect(runs).to_be(3) -- asked, asked again with the first answer, then done
  end)

  it("is answered by another process's attach after the first one let go (LMDB)", function()
    local dir = tmpdir()
    local id
    do
      local store <close> = rig.store.lmdb{ root = dir }
      local run = assert(review():start({}, { store = store }))
      id = run.id
      expect(select(3, run:wait())).to_be("interrupted")
      run:close()
    end
    local store <close> = rig.store.lmdb{ root = dir }
    local run = assert(review():attach(id, { store = store }))
    expect(select(3, run:wait())).to_be("interrupted")
    assert(run:resume("later"))
    expect(assert(run:wait()).verdict).to_be("later")
  end)

  it("takes an answer given while the rest of the superstep still runs", function()
    local release = rig.cond()
    local f = rig.flow{
      name = "race",
      channels = { a = "last", b = "last" },
      vertices = {
        a = function(_, ctx) return { a = ctx:interrupt("a?") } end,
        b = function() release:wait(10) return { b = "done" } end,
      },
      edges = { { from = "start", to = { "a", "b" } } },
    }
    local run = assert(f:start())
    local deadline = rig.now() + 10
    while #run:interrupts() == 0 and rig.now() < deadline do rig.sleep(0.01) end
    expect(run:status()).to_be("running") -- b still runs
    assert(run:resume("yes"))
    release:signal()
    local out, msg = run:wait(10)
    expect(assert(out, msg)).to_equal({ a = "yes", b = "done" })
  end)

  it("takes an answer given right after attach, while the superstep runs again", function()
    local store = rig.store.memory()
    local gate = rig.cond()
    local f = rig.flow{
      name = "slowask",
      channels = { v = "last" },
      vertices = { ask = function(_, ctx) gate:wait(0.2) return { v = ctx:interrupt("?") } end },
      edges = { { from = "start", to = "ask" } },
    }
    local run = assert(f:start({}, { store = store }))
    expect(select(3, run:wait())).to_be("interrupted")
    run:close()
    local again = assert(f:attach(run.id, { store = store }))
    expect(again:status()).to_be("running")
    assert(again:resume("early"))   -- the vertex has not reached its question yet
    local out, msg = again:wait(10)
    expect(assert(out, msg).v).to_be("early")
  end)
end)

describe("rig.flow attach", function()
  it("refuses a run of a changed graph unless accepted", function()
    local dir = tmpdir()
    local store <close> = rig.store.lmdb{ root = dir }
    local d = chain()
    d.vertices.inc = function(s, ctx)
      if s.n == 1 then ctx:interrupt("stop here") end
      return { n = s.n + 1, log = { "inc" .. s.n } }
    end
    local run = assert(rig.flow(d):start({}, { store = store }))
    expect(select(3, run:wait())).to_be("interrupted")
    run:close()
    local changed = chain()
    changed.step_limit = 50
    local r2, msg, code = rig.flow(changed):attach(run.id, { store = store })
    expect(r2).to_be_nil()
    expect(code).to_be("drift")
    expect(msg).to_match("changed graph")
    local r3 = assert(rig.flow(changed):attach(run.id, { store = store, accept_drift = true }))
    local out = assert(r3:wait())
    expect(out.n).to_be(3)
    local resumed
    for _, ev in ipairs(rig.flow.log(store, run.id)) do
      if ev.type == "FlowResumed" then resumed = ev end
    end
    expect(resumed.fingerprint).to_be(rig.flow(changed):fingerprint())
  end)

  it("makes one writer: a live run's lease refuses a second attach", function()
    local dir = tmpdir()
    local store <close> = rig.store.lmdb{ root = dir }
    local gate = rig.cond()
    local d = chain()
    d.vertices.inc = function(s) gate:wait(5) return { n = s.n + 1 } end
    local f = rig.flow(d)
    local run = assert(f:start({}, { store = store }))
    local store2 <close> = rig.store.lmdb{ root = dir }
    local r2, msg, code = f:attach(run.id, { store = store2 })
    expect(r2).to_be_nil()
    expect(code).to_be("held")
    expect(msg).to_match("held by another writer")
    run:close()
  end)

  it("takes the input step on attach when a crash cut the run before it", function()
    local store = rig.store.memory()
    local f = rig.flow(chain())
    -- what a process killed between FlowStarted and the first checkpoint leaves
    local sess = assert(core.session_open(store, nil, { catalog = false }))
    assert(sess:emit(json.encode{ v = 1, type = "FlowStarted", run_id = sess.id, flow = "chain",
      fingerprint = f:fingerprint(), input = { n = 1 }, step_limit = 100, created_at = 1 },
      { type = "FlowStarted", enduring = true, wait = true }))
    local id = sess.id
    sess:close()
    local run = assert(f:attach(id, { store = store }))
    local out = assert(run:wait())
    expect(out.n).to_be(3)
    expect(out.log).to_equal({ "inc1", "inc2" })
    expect(steps_of(store, id)[1].step).to_be(0)
  end)

  it("lists runs in the index with their status", function()
    local store = rig.store.memory()
    local f = rig.flow(chain())
    local _, run = f:run({}, { store = store })
    local list = assert(f:runs({ store = store }))
    expect(#list).to_be(1)
    expect(list[1].id).to_be(run.id)
    expect(list[1].status).to_be("done")
    expect(#assert(core.catalog_list(store))).to_be(0) -- not a session
  end)
end)

describe("rig.flow vertices and the rest of luarig", function()
  it("passes a stable idempotency key and journals ctx:once results", function()
    local calls = 0
    local f = rig.flow{
      name = "once",
      channels = { v = "last", key = "last" },
      vertices = {
        x = function(_, ctx)
          local v = ctx:once("charge", function() calls = calls + 1 return { paid = 42 } end)
          local again = ctx:once("charge", function() calls = calls + 1 return "never" end)
          return { v = v.paid + again.paid, key = ctx.key }
        end,
      },
      edges = { { from = "start", to = "x" } },
    }
    local out, run = f:run()
    expect(out.v).to_be(84)
    expect(calls).to_be(1)
    expect(out.key).to_be(run.id .. "/1/1/x")
  end)

  it("runs an agent turn of a rig as a step", function()
    local model = rig.model.script{ { text = "summary of doc" } }
    local loop = rig.loop{ name = "writer", model = model, system = "summarize" }
    local store = rig.store.memory()
    local r = rig.define{ loops = { loop }, primers = { "writer" }, store = store }
    local f = rig.flow{
      name = "agent",
      channels = { doc = "last", summary = "last", session = "last" },
      vertices = {
        summarize = function(s, ctx)
          local t = ctx:turn(r, "summarize: " .. s.doc)
          return { summary = t.text, session = t.session }
        end,
      },
      edges = { { from = "start", to = "summarize" } },
    }
    local out = assert(f:run({ doc = "the doc" }, { store = store }))
    expect(out.summary).to_be("summary of doc")
    expect(#out.session).to_be(36)
    local e = assert(core.catalog_get(store, out.session)) -- the session keeps its own journal
    expect(e.id).to_be(out.session)
  end)

  it("calls a tool with the vertex's key", function()
    local got
    local t = rig.tool{ name = "adder", description = "adds",
      schema = { type = "object", properties = { a = { type = "integer" } }, required = { "a" } },
      run = function(args, ctx) got = ctx.idempotency_key return tostring(args.a + 1) end }
    local f = rig.flow{
      name = "tooly",
      channels = { r = "last" },
      vertices = { call = function(_, ctx) return { r = ctx:tool(t, { a = 41 }) } end },
      edges = { { from = "start", to = "call" } },
    }
    local out, run = f:run()
    expect(out.r).to_be("42")
    expect(got).to_be(run.id .. "/1/1/call")
  end)

  it("spawns a confined command in a vertex", function()
    local sb = rig.sandbox
    local ws = tmpdir()
    local prof = sb.profile{ workspace_root = ws, command = "allow", workspace_write = "allow" }
    local chk = sb.check(prof)
    if chk.tier == "none" or not chk.ok then skip("no sandbox here: " .. tostring(chk.why or chk.error)) end
    local set <close> = assert(sb.executors(prof, { scratch_root = ws .. "-scratch" }))
    local f = rig.flow{
      name = "cmd",
      channels = { out = "last", tier = "last" },
      vertices = {
        run = function(_, ctx)
          local ex = set:get("flow")
          local r = assert(ex:run{ argv = { "/bin/sh", "-c", "echo confined $0", ctx.key } })
          return { out = r.stdout }
        end,
      },
      edges = { { from = "start", to = "run" } },
    }
    local out, run = f:run()
    expect(assert(out).out).to_be("confined " .. run.id .. "/1/1/run\n")
  end)
end)

describe("rig.flow on NATS JetStream", function()
  it("checkpoints, lists, lets go and attaches a run on an embedded nats-server", function()
    if not os.execute("command -v nats-server >/dev/null 2>&1") then
      skip("nats-server is not installed")
    end
    local store <close> = rig.store.nats{ embedded_dir = tmpdir() }
    local d = chain()
    d.vertices.inc = function(s, ctx)
      if s.n == 2 then ctx:interrupt("halfway") end
      return { n = s.n + 1, log = { "inc" .. s.n } }
    end
    local f = rig.flow(d)
    local run = assert(f:start({}, { store = store }))
    expect(select(3, run:wait())).to_be("interrupted")
    run:close()
    local list = assert(f:runs{ store = store })
    expect(list[1].id).to_be(run.id)
    expect(list[1].status).to_be("interrupted")
    local again = assert(f:attach(run.id, { store = store }))
    expect(select(3, again:wait())).to_be("interrupted")
    assert(again:resume("go on"))
    local out = assert(again:wait())
    expect(out.n).to_be(3)
    expect(out.log).to_equal({ "inc0", "inc1", "inc2" })
    local steps = steps_of(store, run.id)
    expect(#steps).to_be(4)
    expect(#steps[4].add.log).to_be(1)
  end)
end)

describe("rig.flow reading a journal back", function()
  it("refuses a malformed record with one clear error, never a raise", function()
    local store = rig.store.memory()
    local f = rig.flow(chain())
    local sess = assert(core.session_open(store, nil, { catalog = false }))
    assert(sess:emit(json.encode{ v = 1, type = "FlowStarted", run_id = sess.id, flow = "chain",
      fingerprint = f:fingerprint(), input = {}, created_at = 1 },
      { type = "FlowStarted", enduring = true, wait = true }))
    assert(sess:emit(json.encode{ v = 1, type = "FlowStep", run_id = sess.id, step = 0,
      pending = "not a list", set = 7, created_at = 2 }, { type = "FlowStep", enduring = true, wait = true }))
    local id = sess.id
    sess:close()
    local run, msg, code = f:attach(id, { store = store })
    expect(run).to_be_nil()
    expect(code).to_be("corrupt")
    expect(msg).to_match("^flow run " .. id:gsub("%-", "%%-") .. ": a record is malformed")
    local s2, m2, c2 = rig.flow.show(store, id)
    expect(s2).to_be_nil()
    expect(c2).to_be("corrupt")
    expect(m2).to_match("malformed")
    -- and the run can be attached by nobody else meanwhile: the lease was let go
    local again, _, c3 = f:attach(id, { store = store })
    expect(again).to_be_nil()
    expect(c3).to_be("corrupt")
  end)
end)
