-- s:fork{ at = SEQ }: on an LMDB store with a per_session workspace and a
-- scripted model — the fork's history is the origin's prefix and its
-- workspace the checkpoint in force at the cut, both diverge independently,
-- the origin record and the catalog's forked_from, the refusals, and a fork
-- restored after its process was killed. With an exclusive root: the origin
-- hands the root over (checkpointed, shut down, its journal otherwise
-- untouched), a restore brings its tree back, a busy origin is refused, and a
-- failure after the hand-over says how to get the origin back.

local core = require "rig.core" -- the stdlib's private binding: what the public API does not show

local luarig = os.getenv("LUARIG") or "build/luarig"
local json = rig.json

local function tmpdir()
  local p = os.tmpname()
  os.remove(p)
  assert(os.execute("mkdir -p '" .. p .. "'"))
  return core.ws_realpath(p)
end

local function read(path)
  local f = io.open(path)
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

local here = (os.getenv("LUARIG_ROOT") or ".") .. "/tests/lua/fork/"
local R = dofile(here .. "rig.lua")
local call, define, turn = R.call, R.define, R.turn

local function records(s)
  local out = {}
  for rec in s:journal() do out[#out + 1] = rec end
  return out
end

local function seqs_of(s, ty)
  local out = {}
  for rec in s:journal() do
    if rec.type == ty then out[#out + 1] = rec.seq end
  end
  return out
end

local function event_types(s)
  local t = {}
  for rec in s:journal() do
    if rec.type ~= "Fence" and not rec.kind then t[#t + 1] = rec.type end
  end
  return table.concat(t, " ")
end

local function texts(h)
  local out = {}
  for _, m in ipairs(h) do
    local parts = {}
    for _, b in ipairs(m.content) do
      parts[#parts + 1] = b.type == "text" and b.text or b.type == "tool_use" and ("call " .. b.name)
        or b.type == "tool_result" and ("result " .. tostring(b.content)) or b.type
    end
    out[#out + 1] = m.role .. ":" .. table.concat(parts, "|")
  end
  return table.concat(out, " / ")
end

-- The catalog entry of id, once its asynchronous write landed.
local function entry(store, id, want)
  for _ = 1, 200 do
    local e = core.catalog_get(store, id)
    if e and want(e) then return e end
    rig.sleep(0.02)
  end
  return core.catalog_get(store, id)
end

local STEPS = {
  call("a.txt", "one"), { text = "wrote a" },      -- the origin's turn 1
  call("b.txt", "two"), { text = "wrote b" },      -- turn 2
  { text = "origin three" },                       -- the origin's turn 3
  call("c.txt", "fork"), { text = "fork wrote c" }, -- the fork's turn
}

describe("s:fork", function()
  it("forks at a middle turn: the origin's prefix, the checkpoint's tree, then both diverge", function()
    local d = tmpdir()
    local store <close> = rig.store.lmdb{ root = d .. "/state" }
    local r = define(STEPS, { store = store, workspace = rig.workspace.per_session{ base = d .. "/ws" } })
    local s = assert(r:session())
    turn(s, "first")
    turn(s, "second")
    local done = seqs_of(s, "TurnDone")
    expect(#done).to_be(2)
    local full = texts(s:history())
    local before = records(s)
    local f = assert(s:fork{ at = done[1] })
    expect(f.id ~= s.id).to_be(true)
    expect(f.forked_from.session).to_be(s.id)
    expect(f.forked_from.at).to_be(done[1])
    -- the history: exactly the origin's up to turn 1
    expect(#f:history()).to_be(4)
    local h1 = { table.unpack(s:history(), 1, 4) }
    expect(json.encode(f:history())).to_be(json.encode(h1))
    expect(texts(f:history())).to_be("user:first / assistant:call put / tool:result ok / assistant:wrote a")
    -- the workspace: its own directory holding the checkpoint after turn 1
    expect(f.workspace).to_be(d .. "/ws/" .. f.id)
    expect(read(f.workspace .. "/a.txt")).to_be("one")
    expect(read(f.workspace .. "/b.txt")).to_be(nil)
    expect(read(s.workspace .. "/a.txt")).to_be("one")
    expect(read(s.workspace .. "/b.txt")).to_be("two")
    -- the journal starts with the origin; the origin's journal is untouched
    local ft = event_types(f)
    expect(ft).to_be("SessionForked SessionStarted WorkspaceCheckpointed LoopStarted")
    local first
    for rec in f:journal() do
      if rec.type ~= "Fence" then first = rec break end
    end
    expect(first.type).to_be("SessionForked")
    expect(first.forked_from.session).to_be(s.id)
    expect(first.forked_from.at).to_be(done[1])
    expect(first.workspace_ref).to_be(f:snapshots()[1].ref)
    expect(f:snapshots()[1].trigger).to_be("fork")
    expect(json.encode(records(s))).to_be(json.encode(before))
    -- the catalog carries the family tree
    local fe = entry(store, f.id, function(e) return e.forked_from ~= nil end)
    expect(fe.forked_from.session).to_be(s.id)
    expect(fe.forked_from.at).to_be(done[1])
    expect(fe.title).to_be("first")
    expect(entry(store, s.id, function() return true end).forked_from).to_be(nil)
    -- and `luarig sessions --json` shows it
    local p = assert(rig.process.spawn{ argv = { luarig, "sessions", "--state", d .. "/state",
      "--json" }, stdout = "pipe", stderr = "pipe" })
    local lines = {}
    for l in p:lines("stdout") do lines[#lines + 1] = l end
    p:wait(10)
    p:close()
    local cli = {}
    for _, l in ipairs(lines) do
      local e = json.decode(l)
      cli[e.id] = e
    end
    expect(cli[f.id].forked_from.session).to_be(s.id)
    expect(cli[f.id].forked_from.at).to_be(done[1])
    expect(cli[s.id].forked_from).to_be(nil)
    -- a new turn on each diverges independently
    turn(s, "third")
    expect(texts(s:history())).to_be(full .. " / user:third / assistant:origin three")
    expect(#f:history()).to_be(4)
    turn(f, "fork turn")
    expect(texts(f:history())).to_be("user:first / assistant:call put / tool:result ok / " ..
      "assistant:wrote a / user:fork turn / assistant:call put / tool:result ok / " ..
      "assistant:fork wrote c")
    expect(texts(s:history())).to_be(full .. " / user:third / assistant:origin three")
    expect(read(f.workspace .. "/c.txt")).to_be("fork")
    expect(read(s.workspace .. "/c.txt")).to_be(nil)
    expect(read(s.workspace .. "/b.txt")).to_be("two")
    -- the fork's usage is its own (it spent only its own turn)
    expect(f:usage().input_tokens < s:usage().input_tokens).to_be(true)
    f:shutdown()
    s:shutdown()
    os.execute("rm -rf '" .. d .. "'")
  end)

  it("forks at a step inside a turn and at the tip by default", function()
    local d = tmpdir()
    local r = define({ call("a.txt", "one"), call("b.txt", "two"), { text = "done" },
      { text = "again" } }, { workspace = rig.workspace.per_session{ base = d .. "/ws" },
      snapshots = { trigger = "step_done", priority = "required" } })
    local s = assert(r:session())
    turn(s, "go")
    local steps = seqs_of(s, "StepDone")
    expect(#steps).to_be(3)
    -- after the first step: user, assistant call, tool result; a.txt only
    local f = assert(s:fork{ at = steps[1] })
    expect(texts(f:history())).to_be("user:go / assistant:call put / tool:result ok")
    expect(read(f.workspace .. "/a.txt")).to_be("one")
    expect(read(f.workspace .. "/b.txt")).to_be(nil)
    -- the fork goes on with a turn of its own after the cut step
    turn(f, "more")
    expect(texts(f:history())).to_be("user:go / assistant:call put / tool:result ok / " ..
      "user:more / assistant:again")
    -- at omitted: the tip (the whole conversation, the last checkpoint)
    local g = assert(s:fork())
    expect(g.forked_from.at).to_be(seqs_of(s, "TurnDone")[1])
    expect(json.encode(g:history())).to_be(json.encode(s:history()))
    expect(read(g.workspace .. "/b.txt")).to_be("two")
    -- a fork of a fork names its own origin
    local h = assert(g:fork())
    expect(h.forked_from.session).to_be(g.id)
    expect(json.encode(h:history())).to_be(json.encode(s:history()))
    expect(read(h.workspace .. "/b.txt")).to_be("two")
    for _, x in ipairs { h, g, f, s } do x:shutdown() end
    os.execute("rm -rf '" .. d .. "'")
  end)

  it("refuses a seq that does not end a step or turn, one past the tip, and bad options", function()
    local r = define({ call("a.txt", "one"), { text = "done" } })
    local s = assert(r:session())
    -- nothing committed yet
    local f, msg, code = s:fork()
    expect(f).to_be(nil)
    expect(code).to_be("invalid_request")
    expect(msg).to_match("no committed step")
    turn(s, "go")
    local started = seqs_of(s, "TurnStarted")[1]
    f, msg, code = s:fork{ at = started }
    expect(f).to_be(nil)
    expect(code).to_be("invalid_request")
    expect(msg).to_match("seq " .. started .. " is a TurnStarted record, not the end of a step")
    local tip = records(s)
    tip = tip[#tip].seq
    f, msg, code = s:fork{ at = tip + 5 }
    expect(code).to_be("invalid_request")
    expect(msg).to_match("at seq " .. (tip + 5) .. ": it is beyond the journal's tip %(" .. tip .. "%)")
    expect(function() s:fork{ at = 1, tiemout = 3 } end).to_fail("rig.session: fork: unknown option 'tiemout'")
    expect(function() s:fork{ at = "3" } end).to_fail("option 'at' must be a positive integer")
    expect(function() s:fork{ at = 0 } end).to_fail("option 'at' must be a positive integer")
    expect(function() s:fork(3) end).to_fail("options must be a table")
    -- without a workspace the history forks alone
    f = assert(s:fork{ at = seqs_of(s, "TurnDone")[1] })
    expect(f.workspace).to_be(nil)
    expect(#f:history()).to_be(4)
    f:shutdown()
    s:shutdown()
    expect(function() s:fork() end).to_fail("the session is shut down")
  end)

  it("refuses a cut while another loop's turn is in flight", function()
    local r = define({ a = { call("x", "!slow"), { text = "a done" } }, b = { { text = "b done" } } },
      { loops = { "a", "b" } })
    local s = assert(r:session())
    local sub = s:subscribe{ ephemeral = false }
    R.release = false -- a's tool call waits until b's turn is done
    assert(s:submit("slow", { loop = "a" }))
    assert(s:submit("quick", { loop = "b" }))
    local bdone
    for ev in sub:events(10) do
      if ev.type == "TurnDone" and ev.loop_id == "b" then bdone = ev.seq; R.release = true end
      if ev.type == "SessionIdle" then break end
    end
    R.release = true
    sub:close()
    expect(bdone).to_be_truthy()
    local f, msg, code = s:fork{ at = bdone }
    expect(f).to_be(nil)
    expect(code).to_be("invalid_request")
    expect(msg).to_match("at seq " .. bdone .. " loop 'a' has turn %S+ in flight")
    -- at the tip both loops are settled: both histories come along
    f = assert(s:fork())
    expect(texts(f:history("a"))).to_be(texts(s:history("a")))
    expect(texts(f:history("b"))).to_be("user:quick / assistant:b done")
    f:shutdown()
    s:shutdown()
  end)

  it("refuses a shared workspace, saying why", function()
    local d = tmpdir()
    local r = define({ { text = "ok" } }, { workspace = rig.workspace.shared{ root = d .. "/root" },
      snapshots = { trigger = "turn_done" } })
    local s = assert(r:session())
    turn(s, "go")
    local f, msg, code = s:fork()
    expect(f).to_be(nil)
    expect(code).to_be("refused")
    expect(msg).to_match("workspace is shared %(one live root, no lease, fuzzy checkpoints%)")
    expect(s.closed).to_be(false)
    s:shutdown()
    os.execute("rm -rf '" .. d .. "'")
  end)

  -- the raw journal of a session, shut down or not: { seq, kind, body }
  local function raw(store, id)
    local recs = assert(core.journal_read(store, id, 1, 0))
    local out = {}
    for i, rec in ipairs(recs) do
      out[i] = rec.seq .. " " .. rec.kind .. " " .. (rec.body or ("epoch " .. tostring(rec.epoch)))
    end
    return out
  end

  local EXCL = {
    call("a.txt", "one"), { text = "wrote a" },       -- the origin's turn 1
    call("b.txt", "two"), { text = "wrote b" },       -- turn 2
    call("c.txt", "fork"), { text = "fork wrote c" }, -- the fork's turn
    { text = "origin again" },                        -- the origin's, restored
  }

  it("exclusive: hands the root over to the fork, and a restore brings the origin's tree back", function()
    local d = tmpdir()
    local root = d .. "/root"
    local store <close> = rig.store.lmdb{ root = d .. "/state" }
    local r = define(EXCL, { store = store, workspace = rig.workspace.exclusive{ root = root } })
    local s = assert(r:session())
    local sid = s.id
    turn(s, "first")
    turn(s, "second")
    local done = seqs_of(s, "TurnDone")
    local full = texts(s:history())
    local before = raw(store, sid)
    local f = assert(s:fork{ at = done[1] })
    -- the origin: checkpointed, then shut down; the fork says so
    expect(s.closed).to_be(true)
    expect(f.handover.session).to_be(sid)
    local after = raw(store, sid)
    for i, line in ipairs(before) do expect(after[i]).to_be(line) end
    expect(#after).to_be(#before + 2)
    local hc, stopped = json.decode(after[#after - 1]:match("^%d+ event (.*)$")),
      json.decode(after[#after]:match("^%d+ event (.*)$"))
    expect(hc.type).to_be("WorkspaceCheckpointed")
    expect(hc.trigger).to_be("handover")
    expect(hc.consistency).to_be("quiescent")
    expect(hc.ref).to_be(f.handover.ref)
    expect(stopped.type).to_be("SessionStopped")
    -- the fork: the prefix, and the root holds the checkpoint after turn 1
    expect(f.workspace).to_be(root)
    expect(texts(f:history())).to_be("user:first / assistant:call put / tool:result ok / assistant:wrote a")
    expect(read(root .. "/a.txt")).to_be("one")
    expect(read(root .. "/b.txt")).to_be(nil)
    expect(event_types(f)).to_be("SessionForked SessionStarted WorkspaceCheckpointed LoopStarted")
    expect(f:snapshots()[1].trigger).to_be("fork")
    expect(entry(store, sid, function(e) return e.status == "stopped" end).status).to_be("stopped")
    -- the fork works in the root, then is shut down (no hand-over)
    turn(f, "fork turn")
    expect(read(root .. "/c.txt")).to_be("fork")
    f:shutdown()
    -- the origin restored: its later files back, the fork's displaced tree kept
    local o = assert(r:restore(sid))
    expect(texts(o:history())).to_be(full)
    expect(read(root .. "/a.txt")).to_be("one")
    expect(read(root .. "/b.txt")).to_be("two")
    expect(read(root .. "/c.txt")).to_be(nil)
    local restored, rdone
    for rec in o:journal() do
      if rec.type == "WorkspaceRestored" then restored = rec end
      if rec.type == "RestoreDone" then rdone = rec end
    end
    expect(rdone.workspace).to_be("materialized")
    expect(restored.trigger).to_be("handover")
    expect(restored.ref).to_be(hc.ref)
    assert(store:restore(restored.displaced, d .. "/displaced"))
    expect(read(d .. "/displaced/c.txt")).to_be("fork")
    turn(o, "again")
    expect(texts(o:history())).to_be(full .. " / user:again / assistant:origin again")
    -- restored once more with the root as it left it: attached, nothing rewound
    o:shutdown()
    o = assert(r:restore(sid))
    for rec in o:journal() do if rec.type == "RestoreDone" then rdone = rec end end
    expect(rdone.workspace).to_be("attached")
    o:shutdown()
    os.execute("rm -rf '" .. d .. "'")
  end)

  it("exclusive: a busy origin is refused and stays live", function()
    local d = tmpdir()
    local r = define({ call("a.txt", "one"), { text = "a" }, call("x", "!slow"), { text = "slow" } },
      { workspace = rig.workspace.exclusive{ root = d .. "/root" } })
    local s = assert(r:session())
    turn(s, "first")
    local at = seqs_of(s, "TurnDone")[1]
    local sub = s:subscribe{ ephemeral = false }
    R.release = false -- the slow tool call holds the turn until the fork was refused
    assert(s:submit("slow"))
    for ev in sub:events(10) do if ev.type == "TurnStarted" then break end end
    sub:close()
    local f, msg, code = s:fork{ at = at }
    R.release = true
    expect(f).to_be(nil)
    expect(code).to_be("busy")
    expect(msg:find("cannot fork session " .. s.id .. ": the session is busy", 1, true) ~= nil).to_be(true)
    expect(s.closed).to_be(false)
    assert(s:wait_idle(10))
    f = assert(s:fork{ at = at })
    expect(read(d .. "/root/a.txt")).to_be("one")
    f:shutdown()
    os.execute("rm -rf '" .. d .. "'")
  end)

  it("exclusive: no checkpoint at the cut empties the root; s:shutdown{ hand_over } keeps it", function()
    local d = tmpdir()
    local root = d .. "/root"
    local store <close> = rig.store.lmdb{ root = d .. "/state" }
    local r = define(EXCL, { store = store, workspace = rig.workspace.exclusive{ root = root },
      snapshots = { trigger = "manual" } })
    local s = assert(r:session())
    local sid = s.id
    turn(s, "first")
    turn(s, "second")
    expect(#s:snapshots()).to_be(0)
    local f = assert(s:fork{ at = seqs_of(s, "TurnDone")[1] })
    expect(core.ws_dir_empty(root)).to_be(true)
    expect(event_types(f)).to_be("SessionForked SessionStarted LoopStarted")
    expect(#f:history()).to_be(4)
    -- the fork hands the root over by itself, then the origin comes back
    expect(function() f:shutdown{ handover = true } end).to_fail("rig.session: shutdown: unknown option 'handover'")
    local ref = assert(f:shutdown{ hand_over = true })
    expect(ref).to_match("^v1:sha256:")
    local o = assert(r:restore(sid))
    expect(read(root .. "/a.txt")).to_be("one")
    expect(read(root .. "/b.txt")).to_be("two")
    o:shutdown()
    -- and the fork gets its (empty) tree back
    f = assert(r:restore(f.id))
    expect(core.ws_dir_empty(root)).to_be(true)
    f:shutdown()
    os.execute("rm -rf '" .. d .. "'")
  end)

  it("exclusive: a failure after the hand-over says the origin was shut down and it restores", function()
    local d = tmpdir()
    local root = d .. "/root"
    local store <close> = rig.store.lmdb{ root = d .. "/state" }
    local r = define(EXCL, { store = store, workspace = rig.workspace.exclusive{ root = root } })
    local s = assert(r:session())
    local sid = s.id
    turn(s, "first")
    turn(s, "second")
    local at = seqs_of(s, "TurnDone")[1]
    -- another holder takes the root between the hand-over and the fork
    local Session = require("rig.session").Session
    local shutdown, thief = Session.shutdown, nil
    Session.shutdown = function(S, ...)
      local a, b, c = shutdown(S, ...)
      thief = assert(core.lease_acquire(store, "workspace-roots/" .. core.sha256_hex(root)))
      return a, b, c
    end
    local f, msg, code = s:fork{ at = at }
    Session.shutdown = shutdown
    expect(f).to_be(nil)
    expect(code).to_be("lease_held")
    expect(msg:find("(session " .. sid .. " was checkpointed and shut down first: r:restore('" .. sid ..
      "') brings it back)", 1, true) ~= nil).to_be(true)
    expect(s.closed).to_be(true)
    thief:release()
    local o = assert(r:restore(sid))
    expect(#o:history()).to_be(8)
    expect(read(root .. "/b.txt")).to_be("two")
    o:shutdown()
    os.execute("rm -rf '" .. d .. "'")
  end)

  it("restores a fork whose process was killed", function()
    local d = tmpdir()
    -- the child forks, runs a turn on the fork, then is killed with SIGKILL
    local child = [[
      local d, here = arg[1], arg[2]
      local R = dofile(here .. "rig.lua")
      local r = R.define({ R.call("a.txt", "one"), { text = "wrote a" }, R.call("b.txt", "two"),
        { text = "wrote b" }, R.call("c.txt", "fork"), { text = "fork wrote c" } },
        { store = rig.store.lmdb{ root = d .. "/state" },
          workspace = rig.workspace.per_session{ base = d .. "/ws" } })
      local s = assert(r:session())
      R.turn(s, "first")
      R.turn(s, "second")
      local at
      for rec in s:journal() do if rec.type == "TurnDone" and not at then at = rec.seq end end
      local f = assert(s:fork{ at = at })
      R.turn(f, "fork turn")
      print("FORK " .. f.id .. " " .. s.id .. " " .. at)
      io.stdout:flush()
      local st = assert(io.open("/proc/self/stat"))
      local pid = st:read("a"):match("^(%d+)")
      st:close()
      os.execute("kill -9 " .. pid)
      rig.sleep(10)
    ]]
    local cf = assert(io.open(d .. "/child.lua", "w"))
    cf:write(child)
    cf:close()
    local p = assert(rig.process.spawn{ argv = { luarig, d .. "/child.lua", d, here },
      stdout = "pipe", stderr = "pipe" })
    local line = ""
    for l in p:lines("stdout") do line = line .. l end
    local res = p:wait(20)
    local err = p:read("stderr")
    p:close()
    local fid, sid, at = line:match("^FORK (%S+) (%S+) (%d+)")
    if not fid then error("the child printed no fork: " .. line .. " " .. tostring(err)) end
    expect(res.signal).to_be("SIGKILL")
    at = tonumber(at)
    -- the parent restores the fork: its history, its workspace, its origin
    local store <close> = rig.store.lmdb{ root = d .. "/state" }
    local r = define({ { text = "after the crash" } }, { store = store,
      workspace = rig.workspace.per_session{ base = d .. "/ws" } })
    local f = assert(r:restore(fid))
    expect(f.forked_from.session).to_be(sid)
    expect(f.forked_from.at).to_be(at)
    expect(texts(f:history())).to_be("user:first / assistant:call put / tool:result ok / " ..
      "assistant:wrote a / user:fork turn / assistant:call put / tool:result ok / " ..
      "assistant:fork wrote c")
    expect(read(f.workspace .. "/a.txt")).to_be("one")
    expect(read(f.workspace .. "/c.txt")).to_be("fork")
    expect(read(f.workspace .. "/b.txt")).to_be(nil)
    expect(core.catalog_get(store, fid).forked_from.session).to_be(sid)
    turn(f, "again")
    expect(texts(f:history())).to_match("user:again / assistant:after the crash$")
    -- the origin restores too, with its own later files and its full history
    local s = assert(r:restore(sid))
    expect(#s:history()).to_be(8)
    expect(read(s.workspace .. "/b.txt")).to_be("two")
    expect(read(s.workspace .. "/c.txt")).to_be(nil)
    f:shutdown()
    s:shutdown()
    os.execute("rm -rf '" .. d .. "'")
  end, { timeout = 60 })
end)
