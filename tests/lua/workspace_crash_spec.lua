-- A child with a per-session workspace is killed mid-turn (SIGKILL inside a
-- tool of its second step); the restore brings the workspace back to the
-- last checkpoint (after the first step) by staging then swapping.

local luarig = os.getenv("LUARIG") or "build/luarig"
local here = (os.getenv("LUARIG_ROOT") or ".") .. "/tests/lua/session/"
local define = dofile(here .. "ws_rig.lua")

local function tmpdir()
  local p = os.tmpname()
  os.remove(p)
  assert(os.execute("mkdir -p '" .. p .. "'"))
  return p
end

local function read(path)
  local f = io.open(path)
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

describe("a workspace after SIGKILL", function()
  it("restores a per-session workspace to its last checkpoint", function()
    local dir, base = tmpdir(), tmpdir()
    local p = assert(rig.process.spawn{ argv = { luarig, here .. "ws_child.lua", dir, base },
      stdout = "pipe", stderr = "pipe" })
    local id
    for line in p:lines("stdout") do id = id or line:match("^SESSION (%S+)") end
    local res = p:wait(20)
    local err = p:read("stderr")
    p:close()
    expect(id).to_be_truthy()
    expect(res.signal).to_be("SIGKILL")
    local ws = base .. "/" .. id
    -- the killed step wrote into the tree after the checkpoint
    expect(read(ws .. "/b")).to_be("crash")
    local store <close> = rig.store.lmdb{ root = dir }
    local r = define(store, base, { { text = "fine" } })
    local s = assert(r:restore(id))
    expect(s.workspace).to_be(ws)
    expect(read(ws .. "/a")).to_be("1")
    expect(read(ws .. "/b")).to_be_nil()
    local snaps = s:snapshots()
    expect(#snaps).to_be(1)
    expect(snaps[1].trigger).to_be("step_done")
    local types = {}
    for rec in s:journal{} do types[#types + 1] = rec.type end
    local t = table.concat(types, " ")
    expect(t).to_match("StepDone WorkspaceCheckpointed")
    expect(t).to_match("TurnInterrupted")
    expect(t).to_match("RestoreDone$")
    -- the session goes on in the restored tree
    assert(s:submit("after the crash"))
    assert(s:wait_idle(10))
    s:shutdown()
    expect(err == nil or not err:find("was not killed")).to_be(true)
  end)
end)
