-- rig.workspace: placements and their refusals, each snapshot trigger and
-- priority, a required capture that fails (the workspace faults until a
-- capture succeeds), rewind, seed, restore re-materializing or checking the
-- last checkpoint.

local core = require "rig.core" -- the stdlib's private binding: what the public API does not show

local function tmpdir()
  local p = os.tmpname()
  os.remove(p)
  assert(os.execute("mkdir -p '" .. p .. "'"))
  return core.ws_realpath(p)
end

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

local function read(path)
  local f = io.open(path)
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

local function allow_all()
  return rig.gate{ access = { ["filesystem.read"] = "allow", ["filesystem.write"] = "allow",
    network = "allow", ["command.execute"] = "allow" }, approver = "headless" }
end

-- put{ path, text }: writes into ctx.workspace; "!rmroot" removes the root, "!slow" sleeps 1 s.
local seen_ws = {}
local put = rig.tool{ name = "put", description = "writes a file in the workspace",
  schema = { type = "object", properties = { path = { type = "string" }, text = { type = "string" } },
             required = { "path", "text" } },
  prepare = function(a, pctx)
    seen_ws.prepare = pctx.workspace
    return { summary = "put " .. a.path, requirements = {} }
  end,
  run = function(req, ctx)
    seen_ws.run = ctx.workspace
    local a = ctx.request.summary:match("^put (.*)$")
    local text = ctx._text
    return "ok"
  end }

-- the tool reads its arguments through prepare's closure: keep them per call
local pending = {}
put = rig.tool{ name = "put", description = "writes a file in the workspace",
  schema = { type = "object", properties = { path = { type = "string" }, text = { type = "string" } },
             required = { "path", "text" } },
  prepare = function(a, pctx)
    seen_ws.prepare = pctx.workspace
    return { summary = "put " .. a.path .. "=" .. a.text, requirements = {} }
  end,
  run = function(req, ctx)
    seen_ws.run = ctx.workspace
    local path, text = req.summary:match("^put ([^=]*)=(.*)$")
    if text == "!rmroot" then
      assert(core.ws_remove_tree(ctx.workspace))
      return "removed"
    end
    if text == "!slow" then rig.sleep(1) return "slept" end
    write(ctx.workspace .. "/" .. path, text)
    return "ok"
  end }

local function call(path, text)
  return { text = "", tool_calls = { { name = "put", input = { path = path, text = text } } } }
end

local function define(steps, opts)
  local model = rig.model.script(steps)
  local loop = rig.loop{ name = "assistant", model = model, system = "s", tools = { put },
    gate = allow_all(), policy_revision = "ws-v1" }
  return rig.define{ loops = { loop }, primers = { "assistant" },
    store = opts.store or rig.store.memory(), workspace = opts.workspace,
    snapshots = opts.snapshots }
end

-- Submits and reads events until SessionIdle (and then `extra` more types, if given).
local function turn(s, text, want)
  local sub = s:subscribe{ ephemeral = false }
  assert(s:submit(text or "go"))
  local evs = {}
  for ev in sub:events(10) do
    evs[#evs + 1] = ev
    if ev.type == (want or "SessionIdle") then break end
  end
  sub:close()
  return evs
end

local function types(evs)
  local t = {}
  for _, e in ipairs(evs) do t[#t + 1] = e.type end
  return table.concat(t, " ")
end

local function of_type(evs, ty)
  local out = {}
  for _, e in ipairs(evs) do if e.type == ty then out[#out + 1] = e end end
  return out
end

-- Waits for the n-th WorkspaceCheckpointed in the session's snapshots().
local function wait_snapshots(s, n)
  for _ = 1, 200 do
    if #s:snapshots() >= n then return s:snapshots() end
    rig.sleep(0.02)
  end
  error("no " .. n .. " snapshots (have " .. #s:snapshots() .. ")")
end

describe("placements", function()
  it("exclusive: a canonical root the tools see, fenced by a lease", function()
    local d = tmpdir()
    assert(os.execute("mkdir -p " .. d .. "/real && ln -s real " .. d .. "/link"))
    local store = rig.store.lmdb{ root = d .. "/state" }
    local p = rig.workspace.exclusive{ root = d .. "/link/ws" }
    expect(p.kind).to_be("exclusive")
    expect(p.root).to_be(d .. "/real/ws")
    local r = define({ call("a.txt", "1"), { text = "done" } },
      { store = store, workspace = p })
    local s = assert(r:session())
    expect(s.workspace).to_be(d .. "/real/ws")
    turn(s)
    expect(seen_ws.prepare).to_be(d .. "/real/ws")
    expect(seen_ws.run).to_be(d .. "/real/ws")
    expect(read(d .. "/real/ws/a.txt")).to_be("1")
    -- a second session on the same root is refused while the first holds it,
    -- also through another handle on the same state directory
    local other = define({ { text = "x" } }, { store = rig.store.lmdb{ root = d .. "/state" },
      workspace = rig.workspace.exclusive{ root = d .. "/real/ws" } })
    local s2, msg, code = other:session()
    expect(s2).to_be_nil()
    expect(code).to_be("lease_held")
    expect(msg).to_match("is in use by another session")
    s:shutdown()
    local s3 = assert(other:session())
    expect(s3.workspace).to_be(d .. "/real/ws")
    s3:shutdown()
  end)

  it("per_session: base/<session id>, one directory each", function()
    local d = tmpdir()
    local r = define({ { text = "x" } }, { workspace = rig.workspace.per_session{ base = d .. "/b" } })
    local a, b = assert(r:session()), assert(r:session())
    expect(a.workspace).to_be(d .. "/b/" .. a.id)
    expect(b.workspace).to_be(d .. "/b/" .. b.id)
    expect(core.fs_lstat(a.workspace).type).to_be("dir")
    a:shutdown() b:shutdown()
  end)

  it("shared: no lease, checkpoints are fuzzy, required is refused", function()
    local d = tmpdir()
    local r = define({ { text = "x" } }, { workspace = rig.workspace.shared{ root = d } })
    local a, b = assert(r:session()), assert(r:session())
    expect(a.workspace).to_be(d)
    expect(b.workspace).to_be(d)
    write(d .. "/f", "x")
    local ref = assert(a:checkpoint())
    local snaps = a:snapshots()
    expect(#snaps).to_be(1)
    expect(snaps[1].ref).to_be(ref)
    expect(snaps[1].consistency).to_be("fuzzy")
    expect(snaps[1].trigger).to_be("manual")
    a:shutdown() b:shutdown()
    expect(function()
      define({}, { workspace = rig.workspace.shared{ root = d }, snapshots = { priority = "required" } })
    end).to_fail("'required' is refused with a shared workspace")
  end)

  it("refuses a store root that overlaps the workspace, and bad fields", function()
    local d = tmpdir()
    local store = rig.store.lmdb{ root = d .. "/ws/state" }
    expect(function() define({}, { store = store, workspace = rig.workspace.exclusive{ root = d .. "/ws" } }) end)
      .to_fail("the store root '" .. d .. "/ws/state' overlaps the workspace")
    local store2 = rig.store.lmdb{ root = d .. "/st" }
    expect(function() define({}, { store = store2, workspace = rig.workspace.per_session{ base = d } }) end)
      .to_fail("overlaps the workspace")
    expect(function() define({}, { store = store2, workspace = rig.workspace.shared{ root = d .. "/st/x" } }) end)
      .to_fail("overlaps the workspace")
    -- a sibling sharing a prefix is not an overlap
    define({}, { store = store2, workspace = rig.workspace.exclusive{ root = d .. "/st2" } })
    expect(function() define({}, { snapshots = { trigger = "idle" } }) end)
      .to_fail("field 'snapshots' needs a workspace")
    local w = rig.workspace.exclusive{ root = d .. "/w" }
    expect(function() define({}, { workspace = w, snapshots = { trigger = "often" } }) end)
      .to_fail("field 'snapshots.trigger' must be")
    expect(function() define({}, { workspace = w, snapshots = { priority = "maybe" } }) end)
      .to_fail("field 'snapshots.priority' must be")
    expect(function() define({}, { workspace = w, snapshots = { timeout = -1 } }) end)
      .to_fail("field 'snapshots.timeout'")
    expect(function() define({}, { workspace = w, snapshots = { tigger = "idle" } }) end)
      .to_fail("unknown field 'snapshots.tigger'")
    expect(function() define({}, { workspace = { root = d } }) end)
      .to_fail("field 'workspace' must be a rig.workspace placement")
    expect(function() rig.workspace.exclusive{ root = "rel/dir" } end).to_fail("must be an absolute path")
    expect(function() rig.workspace.per_session{ root = d } end).to_fail("unknown option 'root'")
    expect(function() w.root = "/x" end).to_fail("frozen")
    -- placement and policy join the fingerprint; the default policy is idle, best effort, 60 s
    local r0 = define({}, {})
    local r1 = define({}, { workspace = w })
    local r2 = define({}, { workspace = w, snapshots = { trigger = "idle", priority = "best_effort", timeout = 60 } })
    local r3 = define({}, { workspace = w, snapshots = { trigger = "turn_done" } })
    local r4 = define({}, { workspace = rig.workspace.exclusive{ root = d .. "/w2" } })
    expect(r1.snapshots).to_equal({ trigger = "idle", priority = "best_effort", timeout = 60 })
    expect(r0.workspace).to_be_nil()
    expect(r1:fingerprint() ~= r0:fingerprint()).to_be(true)
    expect(r1:fingerprint()).to_be(r2:fingerprint())
    expect(r3:fingerprint() ~= r1:fingerprint()).to_be(true)
    expect(r4:fingerprint() ~= r1:fingerprint()).to_be(true)
  end)
end)

describe("triggers and priorities", function()
  it("manual: nothing automatic; s:checkpoint() journals a manual checkpoint", function()
    local d = tmpdir()
    local r = define({ call("a", "1"), { text = "done" } },
      { workspace = rig.workspace.exclusive{ root = d }, snapshots = { trigger = "manual" } })
    local s = assert(r:session())
    local evs = turn(s)
    expect(#of_type(evs, "WorkspaceCheckpointed")).to_be(0)
    rig.sleep(0.1)
    expect(#s:snapshots()).to_be(0)
    local ref = assert(s:checkpoint())
    expect(ref).to_match("^v1:sha256:")
    local found
    for rec in s:journal{} do
      if rec.type == "WorkspaceCheckpointed" then found = rec end
    end
    expect(found.ref).to_be(ref)
    expect(found.trigger).to_be("manual")
    expect(found.consistency).to_be("quiescent")
    expect(s:snapshots()[1].seq).to_be(found.seq)
    s:shutdown()
  end)

  it("idle (best effort): one checkpoint after the session goes idle", function()
    local d = tmpdir()
    local r = define({ call("a", "1"), { text = "done" } },
      { workspace = rig.workspace.exclusive{ root = d } })
    local s = assert(r:session())
    local evs = turn(s, "go", "WorkspaceCheckpointed")
    local cp = of_type(evs, "WorkspaceCheckpointed")[1]
    expect(cp.trigger).to_be("idle")
    expect(cp.consistency).to_be("quiescent")
    expect(types(evs)).to_match("SessionIdle WorkspaceCheckpointed$")
    expect(cp.ref).to_be((r.store:snapshot(d)))
    s:shutdown()
  end)

  it("idle (required): the session is not idle until the capture commits", function()
    local d = tmpdir()
    local r = define({ call("a", "1"), { text = "done" } },
      { workspace = rig.workspace.exclusive{ root = d }, snapshots = { priority = "required" } })
    local s = assert(r:session())
    assert(s:submit("go"))
    assert(s:wait_idle(10))
    expect(#s:snapshots()).to_be(1)
    local t = {}
    for rec in s:journal{} do t[#t + 1] = rec.type end
    expect(table.concat(t, " ")).to_match("TurnDone WorkspaceCheckpointed LoopIdle SessionIdle$")
    s:shutdown()
  end)

  it("turn_done (required): after each terminal, before the next turn", function()
    local d = tmpdir()
    local r = define({ { text = "one" }, { text = "two" } },
      { workspace = rig.workspace.per_session{ base = d },
        snapshots = { trigger = "turn_done", priority = "required" } })
    local s = assert(r:session())
    assert(s:submit("first"))
    assert(s:submit("second"))   -- queued: the first turn has no tool boundary to fold it in
    assert(s:wait_idle(10))
    local t = {}
    for rec in s:journal{} do
      if rec.type ~= "PermissionDecided" and rec.type ~= "StepDone" then t[#t + 1] = rec.type end
    end
    expect(table.concat(t, " ")).to_match("TurnDone WorkspaceCheckpointed TurnStarted TurnDone " ..
      "WorkspaceCheckpointed LoopIdle SessionIdle$")
    local snaps = s:snapshots()
    expect(#snaps).to_be(2)
    expect(snaps[1].trigger).to_be("turn_done")
    expect(snaps[2].ref).to_be(snaps[1].ref)  -- nothing changed in the tree
    s:shutdown()
  end)

  it("step_done (required): one checkpoint per step that ran tools", function()
    local d = tmpdir()
    local r = define({ call("a", "1"), call("b", "2"), call("c", "3"), { text = "done" } },
      { workspace = rig.workspace.exclusive{ root = d },
        snapshots = { trigger = "step_done", priority = "required" } })
    local s = assert(r:session())
    assert(s:submit("go"))
    assert(s:wait_idle(10))
    local snaps = s:snapshots()
    expect(#snaps).to_be(3)
    expect(snaps[1].ref ~= snaps[2].ref and snaps[2].ref ~= snaps[3].ref).to_be(true)
    for _, sn in ipairs(snaps) do
      expect(sn.trigger).to_be("step_done")
      expect(sn.consistency).to_be("quiescent")
    end
    -- each checkpoint is the tree after its step: rewinding to the first leaves only a
    local st = assert(s:rewind(snaps[1].ref))
    expect(st.removed).to_be(2)
    expect(read(d .. "/a")).to_be("1")
    expect(read(d .. "/b")).to_be_nil()
    s:shutdown()
  end)

  it("step_done (best effort): never blocks; the latest pending edge wins", function()
    local d = tmpdir()
    for i = 1, 300 do write(d .. "/f" .. i, string.rep("x", i)) end
    local steps = {}
    for i = 1, 8 do steps[i] = call("s" .. i, tostring(i)) end
    steps[#steps + 1] = { text = "done" }
    local r = define(steps, { workspace = rig.workspace.exclusive{ root = d },
      snapshots = { trigger = "step_done" } })
    local s = assert(r:session())
    assert(s:submit("go"))
    assert(s:wait_idle(10))
    -- the final tree is captured by the last checkpoint (a pending edge is never lost)
    local want = assert(r.store:snapshot(d))
    local snaps
    for _ = 1, 200 do
      snaps = s:snapshots()
      if #snaps > 0 and snaps[#snaps].ref == want then break end
      rig.sleep(0.02)
    end
    expect(snaps[#snaps].ref).to_be(want)
    expect(#snaps).at_least(1)
    expect(#snaps).at_most(8)
    for _, sn in ipairs(snaps) do expect(sn.trigger).to_be("step_done") end
    s:shutdown()
  end)

  it("turn_done (best effort): an interrupted turn is a terminal too", function()
    local d = tmpdir()
    local r = define({ call("slow", "!slow"), { text = "never" } },
      { workspace = rig.workspace.exclusive{ root = d }, snapshots = { trigger = "turn_done" } })
    local s = assert(r:session())
    local sub = s:subscribe{ ephemeral = false }
    assert(s:submit("go"))
    for ev in sub:events(10) do
      if ev.type == "PermissionDecided" then s:interrupt() end
      if ev.type == "WorkspaceCheckpointed" then
        expect(ev.trigger).to_be("turn_done")
        break
      end
    end
    sub:close()
    s:shutdown()
  end)
end)

describe("a failing required snapshot", function()
  it("faults the workspace until a capture succeeds", function()
    local d = tmpdir()
    local r = define({ call("x", "!rmroot"), { text = "gone" }, { text = "back" } },
      { workspace = rig.workspace.exclusive{ root = d .. "/ws" },
        snapshots = { trigger = "turn_done", priority = "required" } })
    local s = assert(r:session())
    assert(s:submit("remove the root"))
    assert(s:wait_idle(10))
    expect(#s:snapshots()).to_be(0)
    local cid, msg, code = s:submit("more")
    expect(cid).to_be_nil()
    expect(code).to_be("workspace_faulted")
    expect(msg).to_match("the workspace is faulted")
    -- a failed manual capture keeps the fault; a successful one clears it
    local ref, cmsg = s:checkpoint()
    expect(ref).to_be_nil()
    expect(cmsg).to_be_truthy()
    expect(select(3, s:submit("still"))).to_be("workspace_faulted")
    assert(core.ws_mkdirs(d .. "/ws"))
    assert(s:checkpoint())
    assert(s:submit("again"))
    assert(s:wait_idle(10))
    expect(#s:snapshots()).to_be(2)  -- the manual one, then the turn's
    s:shutdown()
  end)

  it("a step capture that fails ends the turn with workspace_faulted", function()
    local d = tmpdir()
    local r = define({ call("x", "!rmroot"), { text = "never" } },
      { workspace = rig.workspace.exclusive{ root = d .. "/ws" },
        snapshots = { trigger = "step_done", priority = "required" } })
    local s = assert(r:session())
    local evs = turn(s)
    local failed = of_type(evs, "TurnFailed")[1]
    expect(failed.error.code).to_be("workspace_faulted")
    expect(failed.error.cause_code).to_be(of_type(evs, "WorkspaceFaulted")[1].code)
    expect(select(3, s:submit("x"))).to_be("workspace_faulted")
    s:shutdown()
  end)

  it("a capture past its timeout faults the workspace", function()
    local d = tmpdir()
    for i = 1, 2000 do write(d .. "/f" .. i, tostring(i)) end
    local r = define({ { text = "hi" } },
      { workspace = rig.workspace.exclusive{ root = d },
        snapshots = { trigger = "turn_done", priority = "required", timeout = 1e-6 } })
    local s = assert(r:session())
    assert(s:submit("go"))
    assert(s:wait_idle(10))
    local cid, msg, code = s:submit("x")
    expect(code).to_be("workspace_faulted")
    expect(msg).to_match("timed out")
    s:shutdown()
  end)
end)

-- The workspace events of a session's journal, "Type(field=…)" each, in order.
local function fault_events(s)
  local out = {}
  for rec in s:journal() do
    if rec.type == "WorkspaceFaulted" then
      out[#out + 1] = "WorkspaceFaulted(" .. tostring(rec.trigger) .. "," .. tostring(rec.code) .. ")"
    elseif rec.type == "WorkspaceFaultCleared" then
      out[#out + 1] = "WorkspaceFaultCleared(" .. tostring(rec.by) .. ")"
    elseif rec.type == "WorkspaceCheckpointed" then
      out[#out + 1] = "WorkspaceCheckpointed(" .. tostring(rec.trigger) .. ")"
    end
  end
  return table.concat(out, " ")
end

describe("workspace faults in the journal", function()
  it("journals the fault and the checkpoint that clears it", function()
    local d = tmpdir()
    local r = define({ call("x", "!rmroot"), { text = "gone" }, { text = "back" } },
      { workspace = rig.workspace.exclusive{ root = d .. "/ws" },
        snapshots = { trigger = "turn_done", priority = "required" } })
    local s = assert(r:session())
    local sub = s:subscribe{ ephemeral = false }
    assert(s:submit("remove the root"))
    local faulted
    for ev in sub:events(10) do if ev.type == "WorkspaceFaulted" then faulted = ev break end end
    sub:close()
    assert(s:wait_idle(10))
    expect(faulted.trigger).to_be("turn_done")
    expect(faulted.message).to_match("cannot open")
    expect(faulted.turn_id).to_be_truthy()
    expect(fault_events(s)).to_match("^WorkspaceFaulted%(turn_done,[%w_]+%)$")
    assert(core.ws_mkdirs(d .. "/ws"))
    local ref = assert(s:checkpoint())
    expect(fault_events(s)).to_match("^WorkspaceFaulted%(turn_done,[%w_]+%) "
      .. "WorkspaceCheckpointed%(manual%) WorkspaceFaultCleared%(checkpoint%)$")
    local cleared
    for rec in s:journal() do if rec.type == "WorkspaceFaultCleared" then cleared = rec end end
    expect(cleared.ref).to_be(ref)
    expect(s:clear_fault()).to_be(false)   -- nothing left to clear
    s:shutdown()
  end)

  it("a timed-out fault: the same checkpoint times out again, one with its own timeout clears it",
    function()
      local d = tmpdir()
      for i = 1, 2000 do write(d .. "/f" .. i, tostring(i)) end
      local r = define({ { text = "hi" }, { text = "again" } },
        { workspace = rig.workspace.exclusive{ root = d },
          snapshots = { trigger = "turn_done", priority = "required", timeout = 1e-6 } })
      local s = assert(r:session())
      assert(s:submit("go"))
      assert(s:wait_idle(10))
      expect(fault_events(s)).to_be("WorkspaceFaulted(turn_done,timeout)")
      local _, msg, code = s:submit("x")
      expect(code).to_be("workspace_faulted")
      expect(msg).to_match("s:checkpoint{ timeout = seconds }")
      expect(msg).to_match("s:clear_fault%(%)")
      -- the documented way out with the policy's own timeout fails the same way
      local ref, cmsg, ccode = s:checkpoint()
      expect(ref).to_be_nil()
      expect(ccode).to_be("timeout")
      expect(cmsg).to_match("timed out")
      expect(select(3, s:submit("x"))).to_be("workspace_faulted")
      -- its own timeout works
      expect(function() s:checkpoint{ timeout = 0 } end).to_fail("option 'timeout'")
      expect(function() s:checkpoint{ wait = 1 } end).to_fail("unknown option 'wait'")
      assert(s:checkpoint{ timeout = 60 })
      expect(fault_events(s)).to_be("WorkspaceFaulted(turn_done,timeout) "
        .. "WorkspaceCheckpointed(manual) WorkspaceFaultCleared(checkpoint)")
      assert(s:submit("now"))
      s:shutdown()
    end)

  it("s:clear_fault() after inspection lets input in, journaled", function()
    local d = tmpdir()
    local r = define({ call("x", "!rmroot"), { text = "gone" }, { text = "on we go" } },
      { workspace = rig.workspace.exclusive{ root = d .. "/ws" },
        snapshots = { trigger = "turn_done", priority = "required" } })
    local s = assert(r:session())
    assert(s:submit("remove the root"))
    assert(s:wait_idle(10))
    expect(select(3, s:submit("x"))).to_be("workspace_faulted")
    expect(s:clear_fault()).to_be(true)
    expect(fault_events(s)).to_match("WorkspaceFaultCleared%(user%)$")
    assert(s:submit("go on"))
    assert(s:wait_idle(10))
    -- the turn ran; its required capture fails again (still no root): faulted again
    expect(select(3, s:submit("x"))).to_be("workspace_faulted")
    local _, n = fault_events(s):gsub("WorkspaceFaulted", "")
    expect(n).to_be(2)
    s:shutdown()
  end)

  it("a restore keeps a journaled fault, and clears it once the tree is the checkpoint",
    function()
      -- exclusive, never checkpointed (nothing to check the tree against): the fault stands
      local store = rig.store.memory()
      local d = tmpdir()
      local opts = { store = store, workspace = rig.workspace.exclusive{ root = d .. "/ws" },
                     snapshots = { trigger = "turn_done", priority = "required" } }
      local s = assert(define({ call("x", "!rmroot"), { text = "gone" } }, opts):session())
      assert(s:submit("remove the root"))
      assert(s:wait_idle(10))
      expect(select(3, s:submit("x"))).to_be("workspace_faulted")
      local id = s.id
      s:shutdown()
      local s2 = assert(define({ { text = "after" } }, opts):restore(id))
      expect(select(3, s2:submit("x"))).to_be("workspace_faulted")
      local done
      for rec in s2:journal() do if rec.type == "RestoreDone" then done = rec end end
      expect(done.workspace_fault).to_match("cannot open")
      expect(s2:clear_fault()).to_be(true)
      s2:shutdown()

      -- per_session: a checkpoint, then a fault; the restore swaps the checkpoint back in
      local store2 = rig.store.memory()
      local base = tmpdir()
      local popts = { store = store2, workspace = rig.workspace.per_session{ base = base },
                      snapshots = { trigger = "turn_done", priority = "required" } }
      local p = assert(define({ call("a", "A"), { text = "wrote" }, call("x", "!rmroot"),
        { text = "gone" } }, popts):session())
      assert(p:submit("write"))
      assert(p:wait_idle(10))
      assert(p:submit("remove the root"))
      assert(p:wait_idle(10))
      expect(select(3, p:submit("x"))).to_be("workspace_faulted")
      local pid = p.id
      p:shutdown()
      local p2 = assert(define({ { text = "back" } }, popts):restore(pid))
      expect(read(p2.workspace .. "/a")).to_be("A")
      expect(fault_events(p2)).to_match("WorkspaceFaulted%(turn_done,[%w_]+%) "
        .. "WorkspaceFaultCleared%(restore%)$")
      assert(p2:submit("works again"))
      assert(p2:wait_idle(10))
      p2:shutdown()
    end)
end)

describe("rewind", function()
  it("is refused while busy; idle, it moves the tree and the pointer together", function()
    local d = tmpdir()
    local r = define({ call("a", "1"), { text = "one" }, call("slow", "!slow"), { text = "two" } },
      { workspace = rig.workspace.per_session{ base = d }, snapshots = { trigger = "manual" } })
    local s = assert(r:session())
    turn(s)
    local ref1 = assert(s:checkpoint())
    write(s.workspace .. "/a", "changed")
    write(s.workspace .. "/extra", "x")
    assert(s:submit("slow"))
    local st, msg, code = s:rewind(ref1)
    expect(st).to_be_nil()
    expect(code).to_be("busy")
    assert(s:wait_idle(10))
    st = assert(s:rewind(ref1))
    expect(st.written).to_be(1)
    expect(st.removed).to_be(1)
    expect(read(s.workspace .. "/a")).to_be("1")
    expect(read(s.workspace .. "/extra")).to_be_nil()
    local snaps = s:snapshots()
    expect(snaps[#snaps].event).to_be("WorkspaceRestored")
    expect(snaps[#snaps].ref).to_be(ref1)
    local bad = s:rewind("v1:sha256:" .. string.rep("0", 64))
    expect(bad).to_be_nil()
    expect(function() s:rewind(42) end).to_fail("ref must be")
    -- the pointer survives a restore: the tree comes back at the rewound ref
    write(s.workspace .. "/a", "drifted")
    local id, ws = s.id, s.workspace
    s:shutdown()
    local s2 = assert(r:restore(id))
    expect(s2.workspace).to_be(ws)
    expect(read(ws .. "/a")).to_be("1")
    local done
    for rec in s2:journal{} do if rec.type == "RestoreDone" then done = rec end end
    expect(done.workspace).to_be("materialized")
    expect(done.workspace_ref).to_be(ref1)
    s2:shutdown()
  end)

  it("needs a workspace", function()
    local r = define({ { text = "x" } }, {})
    local s = assert(r:session())
    expect(select(3, s:rewind("v1:sha256:" .. string.rep("0", 64)))).to_be("refused")
    expect(select(3, s:checkpoint())).to_be("refused")
    expect(s.workspace).to_be_nil()
    s:shutdown()
  end)
end)

describe("seed", function()
  it("populates a new per-session workspace and is journaled first", function()
    local d = tmpdir()
    local src = d .. "/src"
    assert(core.ws_mkdirs(src .. "/sub"))
    write(src .. "/sub/readme", "seeded")
    local store = rig.store.memory()
    local seed = assert(store:snapshot(src))
    local r = define({ { text = "x" } }, { store = store,
      workspace = rig.workspace.per_session{ base = d .. "/b" } })
    local s = assert(r:session{ seed = seed })
    expect(read(s.workspace .. "/sub/readme")).to_be("seeded")
    local t = {}
    for rec in s:journal{} do t[#t + 1] = rec end
    expect(t[2].type).to_be("SessionStarted")
    expect(t[3].type).to_be("WorkspaceCheckpointed")
    expect(t[3].trigger).to_be("seed")
    expect(t[3].ref).to_be(seed)
    expect(s:snapshots()[1].trigger).to_be("seed")
    s:shutdown()
    -- an unknown seed fails the creation and leaves no directory behind
    local n0 = 0
    for _ in io.popen("ls " .. d .. "/b"):lines() do n0 = n0 + 1 end
    local bad, msg = r:session{ seed = "v1:sha256:" .. string.rep("1", 64) }
    expect(bad).to_be_nil()
    expect(msg).to_match("seed snapshot")
    local n1 = 0
    for _ in io.popen("ls " .. d .. "/b"):lines() do n1 = n1 + 1 end
    expect(n1).to_be(n0)
    expect(function() r:session{ seed = 1 } end).to_fail("option 'seed'")
  end)

  it("exclusive roots take a seed only when empty; shared ones never", function()
    local d = tmpdir()
    local store = rig.store.memory()
    assert(core.ws_mkdirs(d .. "/src"))
    write(d .. "/src/f", "1")
    local seed = assert(store:snapshot(d .. "/src"))
    local r = define({ { text = "x" } }, { store = store,
      workspace = rig.workspace.exclusive{ root = d .. "/ws" } })
    local s = assert(r:session{ seed = seed })
    expect(read(d .. "/ws/f")).to_be("1")
    s:shutdown()
    local s2, msg, code = r:session{ seed = seed }
    expect(s2).to_be_nil()
    expect(code).to_be("refused")
    expect(msg).to_match("needs an empty workspace root")
    -- the refused one released the root: a plain session gets it
    assert(r:session()):shutdown()
    local sh = define({ { text = "x" } }, { store = store, workspace = rig.workspace.shared{ root = d .. "/ws" } })
    expect(select(3, sh:session{ seed = seed })).to_be("refused")
    local none = define({ { text = "x" } }, { store = store })
    expect(select(3, none:session{ seed = seed })).to_be("refused")
  end)
end)

describe("restore", function()
  it("exclusive: materializes into an empty root, otherwise checks the tree", function()
    local d = tmpdir()
    local store = rig.store.lmdb{ root = d .. "/state" }
    local function rg()
      return define({ call("a", "1"), { text = "x" }, { text = "y" }, { text = "z" } },
        { store = store, workspace = rig.workspace.exclusive{ root = d .. "/ws" },
          snapshots = { trigger = "turn_done", priority = "required" } })
    end
    local s = assert(rg():session())
    turn(s)
    local ref = s:snapshots()[1].ref
    local id = s.id
    s:shutdown()
    local function restored()
      local s2 = assert(rg():restore(id))
      local done
      for rec in s2:journal{} do if rec.type == "RestoreDone" then done = rec end end
      s2:shutdown()
      return done
    end
    expect(restored().workspace).to_be("attached")
    write(d .. "/ws/a", "changed")
    local done = restored()
    expect(done.workspace).to_be("diverged")
    expect(read(d .. "/ws/a")).to_be("changed")   -- attached, never overwritten
    assert(core.ws_remove_tree(d .. "/ws"))
    done = restored()
    expect(done.workspace).to_be("materialized")
    expect(done.workspace_ref).to_be(ref)
    expect(read(d .. "/ws/a")).to_be("1")
  end)

  it("per_session: repairs a half-finished swap, then re-materializes", function()
    local d = tmpdir()
    local store = rig.store.memory()
    local r = define({ call("a", "1"), { text = "x" } }, { store = store,
      workspace = rig.workspace.per_session{ base = d },
      snapshots = { trigger = "turn_done", priority = "required" } })
    local s = assert(r:session())
    turn(s)
    local id, ws = s.id, s.workspace
    s:shutdown()
    -- a crash between "rename the root away" and "rename staging in"
    assert(core.ws_rename(ws, d .. "/." .. id .. ".old"))
    assert(core.ws_mkdirs(d .. "/." .. id .. ".staging/junk"))
    local s2 = assert(r:restore(id))
    expect(read(ws .. "/a")).to_be("1")
    expect(core.fs_lstat(d .. "/." .. id .. ".old")).to_be_nil()
    expect(core.fs_lstat(d .. "/." .. id .. ".staging")).to_be_nil()
    s2:shutdown()
  end)

  it("fails closed when the checkpoint cannot be materialized", function()
    local d = tmpdir()
    local store = rig.store.lmdb{ root = d .. "/state" }
    local r = define({ call("a", "1"), { text = "x" } }, { store = store,
      workspace = rig.workspace.per_session{ base = d .. "/b" },
      snapshots = { trigger = "turn_done", priority = "required" } })
    local s = assert(r:session())
    turn(s)
    local id = s.id
    s:shutdown()
    -- collect every snapshot blob: the checkpoint is gone
    assert(store:gc{})
    local s2, msg = r:restore(id)
    expect(s2).to_be_nil()
    expect(msg).to_match("cannot materialize")
    local recs = assert(core.journal_read(store, id, 1, 0))
    expect(rig.json.decode(recs[#recs].body).type).to_be("RestoreErrored")
  end)
end)
