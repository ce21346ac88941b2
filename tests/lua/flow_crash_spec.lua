-- Crash tests: a child luarig process runs a flow on an LMDB store and is
-- killed with SIGKILL at one point (inside a vertex, right after a
-- checkpoint, inside one of three parallel tasks, at an interrupt, after an
-- answer, or by this process at a moment it does not choose). This process
-- then attaches to the run, checks the journal has no gap, that committed
-- supersteps did not run again (every vertex records its idempotency key
-- in a file), that only the cut superstep ran twice, with the same keys,
-- and that the run ends with the right output.

local luarig = os.getenv("LUARIG") or "build/luarig"
local root = os.getenv("LUARIG_ROOT") or "."
local here = root .. "/tests/flow/"
local graph = dofile(here .. "graph.lua")
local core = require "rig.core" -- the stdlib's private binding: what the public API does not show

local function tmpdir()
  local p = os.tmpname()
  os.remove(p)
  assert(os.execute("mkdir -p '" .. p .. "'"))
  return p
end

local function run_child(dir, effects, point, k, kill_at_step, env)
  local p = assert(rig.process.spawn{ argv = { luarig, here .. "child.lua", dir, effects, point,
    tostring(k or 0) }, stdout = "pipe", stderr = "pipe", env = env })
  local id
  for line in p:lines("stdout") do
    id = id or line:match("^RUN (%S+)")
    local step = tonumber(line:match("^STEP (%d+)"))
    if kill_at_step and step and step >= kill_at_step then p:kill("SIGKILL") break end
  end
  local r = p:wait(30)
  local err = p:read("stderr")
  p:close()
  return id, r, err
end

-- The journal's records are seq 1..tip with no gap; returns the last
-- committed step and the event types.
local function check_journal(store, id)
  local recs, tip = assert(core.journal_read(store, id, 1, 0))
  expect(#recs).to_be(tip)
  local last = -1
  for i, r in ipairs(recs) do
    expect(r.seq).to_be(i)
    if r.kind == "event" then
      local ev = rig.json.decode(r.body)
      if ev.type == "FlowStep" then last = ev.step end
    end
  end
  return last
end

local function effects_of(path)
  local by, lines = {}, 0
  local f = io.open(path)
  if not f then return by, 0 end
  for line in f:lines() do
    local key = line:match("^%S+ (%S+)$")
    by[key] = (by[key] or 0) + 1
    lines = lines + 1
  end
  f:close()
  return by, lines
end

local function step_of(key) return tonumber(key:match("^[^/]+/(%d+)/")) end

local function resume_and_check(dir, effects, id, answer_first)
  local store <close> = rig.store.lmdb{ root = dir }
  local committed = check_journal(store, id)
  local before = effects_of(effects)
  local flow = graph(effects)
  local run = assert(flow:attach(id, { store = store }))
  local out, msg, code = run:wait(30)
  if code == "interrupted" then
    assert(run:resume("from the parent"))
    out, msg, code = run:wait(30)
  end
  expect(code).to_be_nil()
  assert(out, msg)
  expect(out.n).to_be(6)
  table.sort(out.items)
  expect(out.items).to_equal({ 1, 2, 3, 4, 5, 6, 10, 20, 30 })
  expect(out.verdict == "from the child" or out.verdict == "from the parent").to_be(true)
  if answer_first then expect(out.verdict).to_be("from the child") end
  -- committed supersteps ran once; the cut one (committed + 1) at most twice
  local after, lines = effects_of(effects)
  local distinct = 0
  for key, n in pairs(after) do
    distinct = distinct + 1
    local s = step_of(key)
    if s <= committed then
      expect(n).to_be(1)
      expect(before[key]).to_be(1) -- it ran before the crash, not after
    elseif s == committed + 1 then
      expect(n).at_most(2)
    else
      expect(n).to_be(1)
    end
  end
  expect(distinct).to_be(10) -- six counts, three works, one ask
  expect(lines).at_most(10 + 3)
  -- the resume is journaled, from the last checkpoint
  local resumed
  for _, ev in ipairs(rig.flow.log(store, id)) do
    if ev.type == "FlowResumed" then resumed = resumed or ev end
  end
  expect(resumed.from_step).to_be(committed)
  check_journal(store, id)
  return committed, before, after
end

describe("flow runs after SIGKILL", function()
  for _, k in ipairs({ 1, 3, 5 }) do
    it("resumes a run killed inside a vertex at step " .. k, function()
      local dir = tmpdir()
      local effects = dir .. "/effects"
      local id, r = run_child(dir, effects, "vertex", k)
      expect(id).to_be_truthy()
      expect(r.signal).to_be("SIGKILL")
      local committed, before, after = resume_and_check(dir, effects, id)
      expect(committed).to_be(k - 1)
      -- the cut step's vertex ran again with the same idempotency key
      local cut = id .. "/" .. k .. "/1/count"
      expect(before[cut]).to_be(1)
      expect(after[cut]).to_be(2)
    end)
  end

  for _, k in ipairs({ 1, 2, 6 }) do
    it("resumes a run killed right after the checkpoint of step " .. k, function()
      local dir = tmpdir()
      local effects = dir .. "/effects"
      local id, r = run_child(dir, effects, "commit", k)
      expect(r.signal).to_be("SIGKILL")
      local committed = resume_and_check(dir, effects, id)
      expect(committed).at_least(k)
    end)
  end

  it("resumes a run killed inside one of three parallel tasks", function()
    local dir = tmpdir()
    local effects = dir .. "/effects"
    local id, r = run_child(dir, effects, "work")
    expect(r.signal).to_be("SIGKILL")
    local committed, before, after = resume_and_check(dir, effects, id)
    expect(committed).to_be(7) -- the input step, six counts, the fan-out
    for i = 1, 3 do
      local key = id .. "/8/" .. i .. "/work"
      expect(before[key]).to_be(1) -- all three had started
      expect(after[key]).to_be(2)  -- and ran again, with the same keys
    end
  end)

  it("resumes a run killed at its interrupt; the answer comes from the new process", function()
    local dir = tmpdir()
    local effects = dir .. "/effects"
    local id, r = run_child(dir, effects, "interrupt")
    expect(r.signal).to_be("SIGKILL")
    local store <close> = rig.store.lmdb{ root = dir }
    local sh = assert(rig.flow.show(store, id))
    expect(sh.status).to_be("interrupted")
    expect(sh.interrupts[1].vertex).to_be("ask")
    store:close()
    resume_and_check(dir, effects, id)
  end)

  it("keeps an answer journaled before the kill", function()
    local dir = tmpdir()
    local effects = dir .. "/effects"
    local id, r = run_child(dir, effects, "answered")
    expect(r.signal).to_be("SIGKILL")
    resume_and_check(dir, effects, id, true)
  end)

  for _, k in ipairs({ 2, 4, 7 }) do
    it("resumes a run this process kills at a moment after step " .. k, function()
      local dir = tmpdir()
      local effects = dir .. "/effects"
      local id, r = run_child(dir, effects, "none", 0, k)
      expect(r.signal).to_be("SIGKILL")
      local committed = resume_and_check(dir, effects, id)
      expect(committed).at_least(k)
    end)
  end

  it("refuses a second writer while the first process lives", function()
    local dir = tmpdir()
    local effects = dir .. "/effects"
    local p = assert(rig.process.spawn{ argv = { luarig, here .. "child.lua", dir, effects,
      "none", "0" }, stdout = "pipe", stderr = "pipe" })
    local id
    for line in p:lines("stdout") do
      id = id or line:match("^RUN (%S+)")
      if line:match("^STEP 2") then break end
    end
    local store <close> = rig.store.lmdb{ root = dir }
    local run, msg, code = graph(effects):attach(id, { store = store })
    expect(run).to_be_nil()
    expect(code).to_be("held")
    expect(msg).to_match("held by another writer")
    p:kill("SIGKILL")
    p:wait(10)
    p:close()
  end)
end)

-- nats-server -js on 127.0.0.1, a port it picks (read from its ports file).
local function start_nats(dir)
  local conf = dir .. "/server.conf"
  local f = assert(io.open(conf, "w"))
  f:write('listen: "127.0.0.1:-1"\njetstream { store_dir: "' .. dir .. '/js" }\n')
  f:close()
  local p = assert(rig.process.spawn{ argv = { "nats-server", "-c", conf, "-js",
    "--ports_file_dir", dir }, stdout = "null", stderr = "null" })
  local ports = dir .. "/nats-server_" .. p.pid .. ".ports"
  for _ = 1, 200 do
    local pf = io.open(ports)
    if pf then
      local u = pf:read("a"):match("(nats://127%.0%.0%.1:%d+)")
      pf:close()
      if u then return p, u end
    end
    rig.sleep(0.05)
  end
  p:kill("SIGKILL")
  error("nats-server did not start")
end

describe("flow runs after SIGKILL on NATS JetStream", function()
  it("resumes a run killed inside a vertex once the dead writer's lease expires", function()
    if not os.execute("command -v nats-server >/dev/null 2>&1") then skip("nats-server is not installed") end
    local dir = tmpdir()
    local server, url = start_nats(dir)
    local okr, err = pcall(function()
      local effects = dir .. "/effects"
      local id, r = run_child(dir, effects, "vertex", 4, nil, { FLOW_NATS_URL = url })
      expect(id).to_be_truthy()
      expect(r.signal).to_be("SIGKILL")
      local store <close> = rig.store.nats{ url = url, lease_ttl = 1 }
      local committed = check_journal(store, id)
      expect(committed).to_be(3)
      local flow = graph(effects)
      local run, msg, code
      local deadline = rig.now() + 20
      repeat -- the killed writer's lease lives up to its TTL
        run, msg, code = flow:attach(id, { store = store })
        if not run and code == "held" then rig.sleep(0.2) end
      until run or code ~= "held" or rig.now() > deadline
      assert(run, msg)
      local out
      out, msg, code = run:wait(30)
      expect(code).to_be("interrupted")
      assert(run:resume("over nats"))
      out = assert(run:wait(30))
      expect(out.n).to_be(6)
      expect(out.verdict).to_be("over nats")
      local after = effects_of(effects)
      for key, n in pairs(after) do
        local s = step_of(key)
        if s <= committed then expect(n).to_be(1) end
        if s == committed + 1 then expect(n).to_be(2) end -- the cut count ran again
      end
    end)
    server:kill("SIGTERM")
    server:wait(10)
    server:close()
    os.execute("rm -rf '" .. dir .. "'")
    if not okr then error(err, 0) end
  end)
end)
