-- s:resume() after a crash: a child process runs a session on an LMDB store
-- and kills itself with SIGKILL at one point of a turn (tests/lua/session/
-- resume_child.lua); this process restores it, resumes, and checks the turn
-- went on from the last committed step with nothing committed twice: every
-- step id has one StepDone, every call at most one ToolResultRecorded, the
-- history pairs each tool call with its result, and the tools' run log
-- (with ctx.idempotency_key) says what ran where. Also: shutdown, refusals,
-- budgets, drift, delegation.

local core = require "rig.core" -- the stdlib's private binding: what the public API does not show

local luarig = os.getenv("LUARIG") or "build/luarig"
local here = (os.getenv("LUARIG_ROOT") or ".") .. "/tests/lua/session/"
local define = dofile(here .. "resume_rig.lua")
local json = rig.json

local function tmpdir()
  local p = os.tmpname()
  os.remove(p)
  assert(os.execute("mkdir -p '" .. p .. "'"))
  return p
end

local function run_child(dir, point, resume_id)
  local p = assert(rig.process.spawn{ argv = { luarig, here .. "resume_child.lua", dir, point,
    resume_id }, stdout = "pipe", stderr = "pipe" })
  local id
  for line in p:lines("stdout") do id = id or line:match("^SESSION (%S+)") end
  local r = p:wait(30)
  local err = p:read("stderr")
  p:close()
  if r.signal ~= "SIGKILL" then error("the child was not killed: " .. tostring(err), 2) end
  expect(id).to_be_truthy()
  return id, err
end

-- The tools' run log: { { tool, key, "fresh" | "resumed" } }
local function runs(dir)
  local out = {}
  local f = io.open(dir .. "/runs.log")
  if not f then return out end
  for line in f:lines() do
    local tool, key, how = line:match("^(%S+) (%S+) (%S+)$")
    out[#out + 1] = { tool = tool, key = key, how = how }
  end
  f:close()
  return out
end

-- The journal's events, gap-free, each committed once.
local function events(store, id)
  local recs, tip = assert(core.journal_read(store, id, 1, 0))
  expect(#recs).to_be(tip)
  local out, steps, results = {}, {}, {}
  for i, r in ipairs(recs) do
    expect(r.seq).to_be(i)
    if r.kind == "event" then
      local ev = json.decode(r.body)
      ev.seq = r.seq
      out[#out + 1] = ev
      if ev.type == "StepDone" then
        if steps[ev.step_id] then error("step " .. ev.step_id .. " committed twice") end
        steps[ev.step_id] = true
      elseif ev.type == "ToolResultRecorded" then
        local k = ev.step_id .. "/" .. ev.call_id
        if results[k] then error("call " .. k .. " recorded twice") end
        results[k] = true
      end
    end
  end
  return out
end

local function of_type(evs, t, after)
  local out = {}
  for _, ev in ipairs(evs) do
    if ev.type == t and ev.seq > (after or 0) then out[#out + 1] = ev end
  end
  return out
end

local function restore_done(evs)
  local list = of_type(evs, "RestoreDone")
  return list[#list]
end

-- Each assistant message's tool calls are answered, in order, by the next message.
local function check_history(h)
  for i, m in ipairs(h) do
    local ids = {}
    for _, b in ipairs(m.content) do
      if b.type == "tool_use" then ids[#ids + 1] = b.id end
    end
    if #ids > 0 then
      local nxt = h[i + 1]
      expect(nxt and nxt.role).to_be("tool")
      expect(#nxt.content).to_be(#ids)
      for k, id in ipairs(ids) do expect(nxt.content[k].tool_use_id).to_be(id) end
    end
  end
end

-- A model for the restoring process: a list of steps (or functions), and the requests seen.
local function script(list)
  local seen = {}
  local function brain(req, n)
    seen[#seen + 1] = req
    local st = list[#seen]
    if type(st) == "function" then return st(req) end
    return st or { text = "unexpected model call" }
  end
  return brain, seen
end

-- Resumes and waits for the loop's terminal; returns it.
local function resume_and_wait(s, loop)
  local sub = s:subscribe{ ephemeral = false }
  expect(s:resume(loop)).to_be(true)
  local last
  for ev in sub:events(20) do
    if ev.ends_turn and (loop == nil or ev.loop_id == loop) then last = ev break end
  end
  sub:close()
  -- wait_idle reports a turn that did not end done (issue 19 §2)
  local ok, _, code = s:wait_idle(20)
  expect(ok or code).to_be(last.type == "TurnDone" and true
    or last.type == "TurnInterrupted" and "interrupted" or "turn_failed")
  return last
end

local function cleanup(s, dir)
  s:shutdown()
  os.execute("rm -rf '" .. dir .. "'")
end

local function text_of(m)
  local parts = {}
  for _, b in ipairs(m.content) do if b.type == "text" then parts[#parts + 1] = b.text end end
  return table.concat(parts)
end

describe("s:resume() after SIGKILL", function()
  it("mid-stream: the model is asked again with the history as committed", function()
    local dir = tmpdir()
    local id = run_child(dir, "stream")
    local store <close> = rig.store.lmdb{ root = dir }
    local brain, seen = script({ { text = "fine" } })
    local s = assert(define(store, brain):restore(id))
    local evs = events(store, id)
    expect(table.concat(restore_done(evs).resumable, ",")).to_be("assistant")
    local cut = of_type(evs, "TurnInterrupted")[1]
    expect(cut.reason).to_be("restored")
    local rs = s:resumable()
    expect(#rs).to_be(1)
    expect(rs[1].turn_id).to_be(cut.turn_id)
    expect(rs[1].step_id).to_be_nil()
    local tip = s.core:tip()
    local last = resume_and_wait(s)
    expect(last.type).to_be("TurnDone")
    expect(text_of(last.message)).to_be("fine")
    expect(#seen).to_be(1)
    expect(#seen[1].messages).to_be(1) -- the user message, as committed
    evs = events(store, id)
    local resumed = of_type(evs, "TurnResumed", tip)
    expect(#resumed).to_be(1)
    expect(resumed[1].resumes).to_be(cut.turn_id)
    expect(resumed[1].cause.command_id).to_be(cut.cause.command_id)
    expect(last.turn_id).to_be(resumed[1].turn_id)
    expect(last.cause.command_id).to_be(cut.cause.command_id)
    expect(#s:history()).to_be(2)
    -- once resumed, nothing is left to resume
    local ok, msg, code = s:resume()
    expect(ok).to_be_nil()
    expect(code).to_be("nothing_to_resume")
    expect(msg).to_match("^nothing to resume in session " .. id:gsub("%-", "%%-"))
    cleanup(s, dir)
  end, { timeout = 60 })

  it("mid-tool: the call runs again with the same idempotency key and ctx.resumed", function()
    local dir = tmpdir()
    local id = run_child(dir, "tool")
    local store <close> = rig.store.lmdb{ root = dir }
    local brain, seen = script({ { text = "done" } })
    local s = assert(define(store, brain, { log = dir .. "/runs.log" }):restore(id))
    expect(s:resumable()[1].calls).to_be(1)
    expect(s:resumable()[1].done).to_be(0)
    local last = resume_and_wait(s)
    expect(last.type).to_be("TurnDone")
    local log = runs(dir)
    expect(#log).to_be(2)
    expect(log[1].how).to_be("fresh")   -- in the killed process
    expect(log[2].how).to_be("resumed") -- here
    expect(log[2].key).to_be(log[1].key)
    expect(log[1].key).to_match("^" .. id:gsub("%-", "%%-") .. "/s[%d.]+/call_1_1$")
    -- the step's answer came from the journal: the model was asked once, after it
    expect(#seen).to_be(1)
    expect(seen[1].messages[3].role).to_be("tool")
    local h = s:history()
    check_history(h)
    expect(#h).to_be(4)
    expect(h[3].content[1].content).to_be("echoed echo x")
    local evs = events(store, id)
    local planned = of_type(evs, "ToolCallsPlanned")
    expect(#planned).to_be(1)
    local steps = of_type(evs, "StepDone")
    expect(steps[1].step_id).to_be(planned[1].step_id)
    expect(of_type(evs, "TurnResumed")[1].step_id).to_be(planned[1].step_id)
    expect(table.concat(of_type(evs, "TurnResumed")[1].rerun, ",")).to_be("call_1_1")
    cleanup(s, dir)
  end, { timeout = 60 })

  it("gate open: the restored gate answered, the resume runs the approved call without asking again", function()
    local dir = tmpdir()
    local id = run_child(dir, "gate")
    local store <close> = rig.store.lmdb{ root = dir }
    local brain = script({ { text = "done" } })
    local s = assert(define(store, brain, { log = dir .. "/runs.log" }):restore(id))
    local g = s:gates()[1]
    expect(g.restored).to_be(true)
    expect(s:respond_gate(g.gate_id, "approve")).to_be(true)
    -- answering alone runs nothing: the turn still waits for s:resume()
    expect(s:wait_idle(5)).to_be(true)
    expect(#s:resumable()).to_be(1)
    expect(#runs(dir)).to_be(0)
    local tip = s.core:tip()
    local last = resume_and_wait(s)
    expect(last.type).to_be("TurnDone")
    local log = runs(dir)
    expect(#log).to_be(1)
    expect(log[1].tool).to_be("fetchy")
    expect(log[1].how).to_be("resumed")
    local evs = events(store, id)
    expect(#of_type(evs, "PermissionRequested", tip)).to_be(0) -- not asked twice
    expect(#of_type(evs, "GateOpened", tip)).to_be(0)
    expect(s:history()[3].content[1].content).to_be("fetched")
    check_history(s:history())
    cleanup(s, dir)
  end, { timeout = 60 })

  it("approved, then killed inside the call: the resume runs it again, not asking again", function()
    local dir = tmpdir()
    local id = run_child(dir, "approved")
    local store <close> = rig.store.lmdb{ root = dir }
    local brain = script({ { text = "done" } })
    local s = assert(define(store, brain, { log = dir .. "/runs.log" }):restore(id))
    expect(#s:gates()).to_be(0)
    local tip = s.core:tip()
    expect(resume_and_wait(s).type).to_be("TurnDone")
    local log = runs(dir)
    expect(#log).to_be(2)
    expect(log[1].how .. " " .. log[2].how).to_be("fresh resumed")
    expect(log[2].key).to_be(log[1].key)
    expect(#of_type(events(store, id), "PermissionRequested", tip)).to_be(0)
    check_history(s:history())
    cleanup(s, dir)
  end, { timeout = 60 })

  it("gate open, resumed before an answer: the restored gate is superseded and the call asks again", function()
    local dir = tmpdir()
    local id = run_child(dir, "gate")
    local store <close> = rig.store.lmdb{ root = dir }
    local brain = script({ { text = "done" } })
    local s = assert(define(store, brain, { log = dir .. "/runs.log" }):restore(id))
    local old = s:gates()[1].gate_id
    local tip = s.core:tip()
    local sub = s:subscribe{ ephemeral = false }
    expect(s:resume()).to_be(true)
    local last
    for ev in sub:events(20) do
      if ev.type == "GateOpened" then
        expect(ev.gate_id ~= old).to_be(true)
        expect(s:respond_gate(old, "approve")).to_be_nil() -- superseded: no longer open
        expect(s:respond_gate(ev.gate_id, "approve")).to_be(true)
      end
      if ev.ends_turn then last = ev break end
    end
    sub:close()
    expect(last.type).to_be("TurnDone")
    -- LoopIdle and SessionIdle follow the terminal: the journal is whole once idle
    expect(s:wait_idle(20)).to_be(true)
    local evs = events(store, id)
    local res = of_type(evs, "GateResolved", tip)
    expect(res[1].gate_id).to_be(old)
    expect(res[1].action).to_be("cancelled")
    expect(res[1].source).to_be("resumed")
    expect(res[2].action).to_be("approve")
    expect(#runs(dir)).to_be(1)
    cleanup(s, dir)
  end, { timeout = 60 })

  it("gate open and approved, but the call now asks for more: it is asked again", function()
    local dir = tmpdir()
    local id = run_child(dir, "gate")
    local store <close> = rig.store.lmdb{ root = dir }
    local brain = script({ { text = "done" } })
    -- the same definition (prepare is not in the revision), a request that is not the one approved
    local s = assert(define(store, brain, { log = dir .. "/runs.log", host = "example.net" })
      :restore(id))
    expect(s:respond_gate(s:gates()[1].gate_id, "approve")).to_be(true)
    local tip = s.core:tip()
    local sub = s:subscribe{ ephemeral = false }
    expect(s:resume()).to_be(true)
    local asked
    for ev in sub:events(20) do
      if ev.type == "GateOpened" then
        asked = ev.summary
        s:respond_gate(ev.gate_id, "deny")
      end
      if ev.ends_turn then break end
    end
    sub:close()
    expect(asked).to_be("fetch example.net")
    expect(#runs(dir)).to_be(0)
    cleanup(s, dir)
  end, { timeout = 60 })

  it("gate open and denied: the resume does not run the call", function()
    local dir = tmpdir()
    local id = run_child(dir, "gate")
    local store <close> = rig.store.lmdb{ root = dir }
    local brain, seen = script({ { text = "ok, not fetched" } })
    local s = assert(define(store, brain, { log = dir .. "/runs.log" }):restore(id))
    expect(s:respond_gate(s:gates()[1].gate_id, "deny")).to_be(true)
    local last = resume_and_wait(s)
    expect(last.type).to_be("TurnDone")
    expect(#runs(dir)).to_be(0)
    local res = s:history()[3].content[1]
    expect(res.is_error).to_be(true)
    expect(res.content).to_match("denied by the user")
    expect(#seen).to_be(1)
    cleanup(s, dir)
  end, { timeout = 60 })

  it("gate open and approved always: the rule is saved and the resumed call runs by it", function()
    local dir = tmpdir()
    local id = run_child(dir, "gate")
    local store <close> = rig.store.lmdb{ root = dir }
    local brain = script({ { text = "done" } })
    local rules = rig.permissions.file(dir .. "/perms.json")
    local s = assert(define(store, brain, { log = dir .. "/runs.log", rules = rules }):restore(id))
    expect(s:respond_gate(s:gates()[1].gate_id, "approve_always")).to_be(true)
    local tip = s.core:tip()
    expect(resume_and_wait(s).type).to_be("TurnDone")
    local evs = events(store, id)
    local dec = of_type(evs, "PermissionDecided", tip)
    expect(#dec).to_be(1)
    expect(dec[1].source).to_be("rule")
    expect(#runs(dir)).to_be(1)
    cleanup(s, dir)
  end, { timeout = 60 })

  it("between steps: the committed steps stay and the model is asked again", function()
    local dir = tmpdir()
    local id = run_child(dir, "between")
    local store <close> = rig.store.lmdb{ root = dir }
    local brain, seen = script({ { text = "all done" } })
    local s = assert(define(store, brain, { log = dir .. "/runs.log" }):restore(id))
    expect(#s:history()).to_be(5)
    expect(s:resumable()[1].step_id).to_be_nil()
    local last = resume_and_wait(s)
    expect(last.type).to_be("TurnDone")
    expect(#seen).to_be(1)
    expect(#seen[1].messages).to_be(5)
    expect(#runs(dir)).to_be(2) -- both in the killed process, neither again
    for _, l in ipairs(runs(dir)) do expect(l.how).to_be("fresh") end
    -- the turn's usage goes on from its committed steps
    local evs = events(store, id)
    local used = 0
    for _, st in ipairs(of_type(evs, "StepDone")) do used = used + st.usage.output_tokens end
    expect(last.usage.output_tokens).to_be(used)
    expect(of_type(evs, "TurnResumed")[1].usage.output_tokens).to_be(
      used - of_type(evs, "StepDone")[3].usage.output_tokens)
    check_history(s:history())
    cleanup(s, dir)
  end, { timeout = 60 })

  it("two calls, one recorded and one at its gate: the recorded one keeps its result", function()
    local dir = tmpdir()
    local id = run_child(dir, "partial")
    local store <close> = rig.store.lmdb{ root = dir }
    local brain = script({ { text = "both done" } })
    local s = assert(define(store, brain, { log = dir .. "/runs.log" }):restore(id))
    local rs = s:resumable()[1]
    expect(rs.calls).to_be(2)
    expect(rs.done).to_be(1)
    expect(s:respond_gate(s:gates()[1].gate_id, "approve")).to_be(true)
    expect(resume_and_wait(s).type).to_be("TurnDone")
    local log = runs(dir)
    expect(#log).to_be(2)
    expect(log[1].tool .. " " .. log[1].how).to_be("echo fresh")
    expect(log[2].tool .. " " .. log[2].how).to_be("fetchy resumed")
    local h = s:history()
    check_history(h)
    expect(h[3].content[1].content).to_be("echoed echo x")
    expect(h[3].content[2].content).to_be("fetched")
    local evs = events(store, id)
    local tr = of_type(evs, "TurnResumed")[1]
    expect(table.concat(tr.reused, ",")).to_be("call_1_1")
    expect(table.concat(tr.rerun, ",")).to_be("call_1_2")
    cleanup(s, dir)
  end, { timeout = 60 })

  it("the answer committed, its TurnDone lost: the resumed turn ends with it, no model call", function()
    local dir = tmpdir()
    local id = run_child(dir, "final")
    local store <close> = rig.store.lmdb{ root = dir }
    local brain, seen = script({})
    local s = assert(define(store, brain):restore(id))
    expect(#s:history()).to_be(2)
    local last = resume_and_wait(s)
    expect(last.type).to_be("TurnDone")
    expect(text_of(last.message)).to_be("the answer")
    expect(#seen).to_be(0)
    expect(#s:history()).to_be(2)
    expect(#of_type(events(store, id), "StepDone")).to_be(1)
    cleanup(s, dir)
  end, { timeout = 60 })

  it("a crash during the resumed turn: resumed again, the step commits once", function()
    local dir = tmpdir()
    local id = run_child(dir, "tool")
    run_child(dir, "tool", id) -- restores, resumes, and is killed in the same call again
    local store <close> = rig.store.lmdb{ root = dir }
    local brain = script({ { text = "done at last" } })
    local s = assert(define(store, brain, { log = dir .. "/runs.log" }):restore(id))
    local last = resume_and_wait(s)
    expect(last.type).to_be("TurnDone")
    local log = runs(dir)
    expect(#log).to_be(3)
    expect(log[1].how .. log[2].how .. log[3].how).to_be("freshresumedresumed")
    expect(log[2].key).to_be(log[1].key)
    expect(log[3].key).to_be(log[1].key)
    local evs = events(store, id)
    local tr = of_type(evs, "TurnResumed")
    local ti = of_type(evs, "TurnInterrupted")
    expect(#tr).to_be(2)
    expect(#ti).to_be(2)
    expect(tr[1].resumes).to_be(ti[1].turn_id)
    expect(ti[2].turn_id).to_be(tr[1].turn_id)
    expect(tr[2].resumes).to_be(tr[1].turn_id)
    expect(tr[2].step_id).to_be(tr[1].step_id)
    expect(#of_type(evs, "StepDone")).to_be(2)
    check_history(s:history())
    cleanup(s, dir)
  end, { timeout = 90 })

  it("the turn's limits go on from its committed steps", function()
    local dir = tmpdir()
    local id = run_child(dir, "limits") -- limits.iterations = 2, one step committed
    local store <close> = rig.store.lmdb{ root = dir }
    local again = { text = "", tool_calls = { { name = "echo", input = { text = "z" } } } }
    local brain = script({ again, again, { text = "done" } })
    local s = assert(define(store, brain, { limits = { iterations = 2 } }):restore(id))
    local tip = s.core:tip()
    local last = resume_and_wait(s)
    expect(last.type).to_be("TurnFailed")
    expect(last.error.code).to_be("limit")
    expect(last.error.limit).to_be("iterations")
    -- one more step only: the resumed turn counted the one before the crash
    expect(#of_type(events(store, id), "StepDone", tip)).to_be(1)
    cleanup(s, dir)
  end, { timeout = 60 })

  it("a drifted definition: the resumed call is checked against the current one", function()
    local dir = tmpdir()
    local id = run_child(dir, "gate")
    local store <close> = rig.store.lmdb{ root = dir }
    local brain = script({ { text = "cannot fetch" } })
    local r2 = define(store, brain, { log = dir .. "/runs.log", network = "deny",
      revision = "resume-v2" })
    local s, msg, code = r2:restore(id)
    expect(code).to_be("drift")
    s = assert(r2:restore(id, { accept_drift = true }))
    expect(s:respond_gate(s:gates()[1].gate_id, "approve")).to_be(true)
    expect(resume_and_wait(s).type).to_be("TurnDone")
    expect(#runs(dir)).to_be(0) -- the approval does not outrank the policy now in force
    local res = s:history()[3].content[1]
    expect(res.is_error).to_be(true)
    expect(res.content).to_match("permission denied")
    expect(of_type(events(store, id), "TurnResumed")[1].drifted).to_be(true)
    cleanup(s, dir)
  end, { timeout = 60 })

  it("delegated: the boss's start_agent waits for the worker's resumed turn, no second worker", function()
    local dir = tmpdir()
    local id = run_child(dir, "delegate")
    local store <close> = rig.store.lmdb{ root = dir }
    local function brain(req)
      local last = req.messages[#req.messages]
      if req.system == "boss" then
        return { text = "boss got: " .. tostring(last.content[1].content) }
      end
      return { text = "worker: " .. tostring(last.content[1].content) }
    end
    local s = assert(define(store, brain, { log = dir .. "/runs.log" }):restore(id))
    local rs = s:resumable()
    expect(#rs).to_be(1) -- the worker's turn resumes through the boss's call
    expect(rs[1].loop_id).to_be("boss")
    local g = s:gates()[1]
    expect(g.loop_id).to_be("worker#1")
    expect(s:respond_gate(g.gate_id, "approve")).to_be(true)
    local last = resume_and_wait(s, "boss")
    expect(last.type).to_be("TurnDone")
    expect(text_of(last.message)).to_be("boss got: worker: fetched")
    local evs = events(store, id)
    local children = 0
    for _, ev in ipairs(of_type(evs, "LoopStarted")) do
      if ev.parent_loop_id then children = children + 1 end
    end
    expect(children).to_be(1)
    local tr = of_type(evs, "TurnResumed")
    expect(#tr).to_be(2)
    local loops = {}
    for _, ev in ipairs(tr) do loops[#loops + 1] = ev.loop_id end
    table.sort(loops)
    expect(table.concat(loops, ",")).to_be("boss,worker#1")
    expect(#runs(dir)).to_be(1)
    check_history(s:history("boss"))
    check_history(s:history("worker#1"))
    cleanup(s, dir)
  end, { timeout = 60 })
end)

describe("s:resume() without a crash", function()
  local function gate_session(dir, brain, opts)
    local store = rig.store.lmdb{ root = dir }
    local r = define(store, brain or script({ { tool_calls = { { name = "fetchy", input = {} } } } }),
      opts)
    return r, store
  end

  it("continues a turn a shutdown interrupted; a person's interrupt is not resumable", function()
    local dir = tmpdir()
    local r, store = gate_session(dir)
    local s = assert(r:session())
    local sub = s:subscribe{ ephemeral = false }
    s:submit("fetch")
    for ev in sub:events(10) do if ev.type == "GateOpened" then break end end
    sub:close()
    s:shutdown()
    local brain = script({ { text = "fetched it" }, { tool_calls = { { name = "fetchy", input = {} } } } })
    local s2 = assert(define(store, brain, { log = dir .. "/runs.log" }):restore(s.id))
    expect(s2:resumable()[1].reason).to_be("shutdown")
    expect(#s2:gates()).to_be(0) -- the shutdown cancelled it
    local sub2 = s2:subscribe{ ephemeral = false }
    expect(s2:resume()).to_be(true)
    local last
    for ev in sub2:events(20) do
      if ev.type == "GateOpened" then s2:respond_gate(ev.gate_id, "approve") end
      if ev.ends_turn then last = ev break end
    end
    sub2:close()
    expect(last.type).to_be("TurnDone")
    expect(#runs(dir)).to_be(1)
    -- interrupted by a person: over for good
    sub2 = s2:subscribe{ ephemeral = false }
    s2:submit("fetch again")
    for ev in sub2:events(10) do if ev.type == "GateOpened" then break end end
    sub2:close()
    expect(s2:interrupt()).to_be(true)
    expect(select(3, s2:wait_idle(10))).to_be("interrupted")
    s2:shutdown()
    local s3 = assert(define(store, script({})):restore(s.id))
    expect(#s3:resumable()).to_be(0)
    local ok, msg, code = s3:resume()
    expect(code).to_be("nothing_to_resume")
    cleanup(s3, dir)
    store:close()
  end, { timeout = 60 })

  it("refuses: nothing to resume, a new turn ends it, busy, bad arguments", function()
    local dir = tmpdir()
    local r, store = gate_session(dir)
    local s = assert(r:session())
    local ok, msg, code = s:resume()
    expect(ok).to_be_nil()
    expect(code).to_be("nothing_to_resume")
    expect(function() s:resume(5) end).to_fail("loop must be a loop id")
    expect(function() s:resume("nope") end).to_fail("no loop 'nope'")
    local sub = s:subscribe{ ephemeral = false }
    s:submit("fetch")
    for ev in sub:events(10) do if ev.type == "GateOpened" then break end end
    sub:close()
    s:shutdown()
    expect(function() s:resume() end).to_fail("shut down")
    -- after the restore a new turn ends the resumable one
    local brain = script({ { text = "something else" } })
    local s2 = assert(define(store, brain):restore(s.id))
    expect(#s2:resumable()).to_be(1)
    s2:submit("something else")
    expect(#s2:resumable()).to_be(0)
    ok, msg, code = s2:resume()
    expect(code).to_be("nothing_to_resume")
    expect(s2:wait_idle(10)).to_be(true)
    s2:shutdown()
    local s3 = assert(define(store, script({})):restore(s.id))
    expect(#s3:resumable()).to_be(0)
    cleanup(s3, dir)
    store:close()
  end, { timeout = 60 })

  it("is busy while a compaction holds the loop, and resumes on the compacted history", function()
    local dir = tmpdir()
    local id = run_child(dir, "between")
    local store <close> = rig.store.lmdb{ root = dir }
    local released = false
    local brain, seen = script({
      function() while not released do rig.sleep(0.01) end return { text = "the summary" } end,
      { text = "done" } })
    local s = assert(define(store, brain):restore(id))
    local sub = s:subscribe{ ephemeral = false }
    local compacting = rig.spawn(function() return s:compact() end)
    for ev in sub:events(10) do if ev.type == "SessionActive" then break end end
    sub:close()
    local ok, msg, code = s:resume()
    expect(ok).to_be_nil()
    expect(code).to_be("busy")
    expect(msg).to_match("^loop 'assistant' is busy")
    released = true
    expect(compacting:wait().replaced).to_be(1)
    expect(resume_and_wait(s).type).to_be("TurnDone")
    expect(#seen).to_be(2)
    expect(seen[2].messages[1].content[1].text).to_match("the summary")
    cleanup(s, dir)
  end, { timeout = 60 })
end)
