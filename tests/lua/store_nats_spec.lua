-- rig.store.nats: options, and sessions shared by luarig processes through
-- one nats-server this spec starts on a free loopback port (and stops).
-- The processes use a 1 s lease TTL so takeovers happen quickly.

local luarig = os.getenv("LUARIG") or "build/luarig"
local here = (os.getenv("LUARIG_ROOT") or ".") .. "/tests/lua/session/"
local define = dofile(here .. "rig.lua")

local have_server = os.execute("command -v nats-server >/dev/null 2>&1")

local function tmpdir()
  local p = os.tmpname()
  os.remove(p)
  assert(os.execute("mkdir -p '" .. p .. "'"))
  return p
end

-- nats-server -js on 127.0.0.1, a port it picks (read from its ports file).
local function start_nats(dir)
  local conf = dir .. "/server.conf"
  local f = assert(io.open(conf, "w"))
  f:write('listen: "127.0.0.1:-1"\nmax_payload: 8MB\njetstream { store_dir: "' .. dir .. '/js" }\n')
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

local function stop_nats(p, dir)
  p:kill("SIGTERM")
  p:wait(10)
  p:close()
  os.execute("rm -rf '" .. dir .. "'")
end

-- Runs f(url) against a fresh server; the server is stopped even when f fails.
local function with_nats(f)
  local dir = tmpdir()
  local server, url = start_nats(dir)
  local ok, err = pcall(f, url)
  stop_nats(server, dir)
  if not ok then error(err, 0) end
end

-- A luarig process holding a session on the NATS store; prints "SESSION <id>".
local function holder(url, extra)
  return assert(rig.process.spawn{ argv = { luarig, "-e", [[
    local store = rig.store.nats{ url = "]] .. url .. [[", lease_ttl = 1 }
    local r = dofile("]] .. here .. [[rig.lua")(store, { { text = "late" } })
    local s = assert(r:session())
    print("SESSION " .. s.id); io.stdout:flush()
    ]] .. (extra or "rig.sleep(30)") }, stdin = "pipe", stdout = "pipe" })
end

describe("rig.store.nats", function()
  if not have_server then
    it("skip: nats-server is not installed", function() end)
    return
  end

  it("checks its options", function()
    expect(function() rig.store.nats{ url = "nats://127.0.0.1:1", tiemout = 1 } end)
      .to_fail("unknown option 'tiemout'")
    expect(function() rig.store.nats{ url = "nats://x:1", embedded_dir = "/tmp/x" } end)
      .to_fail("exactly one")
    expect(function() rig.store.nats{} end).to_fail("exactly one")
    expect(function() rig.store.nats{ embedded_dir = "rel" } end).to_fail("absolute")
    expect(function() rig.store.nats{ url = "nats://x:1", lease_ttl = "1" } end)
      .to_fail("'lease_ttl' must be a number")
    expect(function() rig.store.nats{ url = "nats://x:1", nkey = "U" } end)
      .to_fail("go together")
    -- a refused connection: an expected failure, and the password is not in it
    local s, msg, code = rig.store.nats{ url = "nats://bob:hunter2@127.0.0.1:1", timeout = 0.5 }
    expect(s).to_be_nil()
    expect(code).to_be("network")
    expect(msg:find("hunter2", 1, true)).to_be_nil()
  end)

  it("embedded mode: snapshots round-trip, a second owner is refused", function()
    local dir = tmpdir()
    local ws = tmpdir()
    local f = assert(io.open(ws .. "/a.txt", "w"))
    f:write("hello nats")
    f:close()
    local store = assert(rig.store.nats{ embedded_dir = dir .. "/nats" })
    expect(store:kind()).to_be("nats")
    local ref = assert(store:snapshot(ws))
    local s2, msg = rig.store.nats{ embedded_dir = dir .. "/nats" }
    expect(s2).to_be_nil()
    expect(msg).to_match("owned by another process")
    store:close()
    local again <close> = assert(rig.store.nats{ embedded_dir = dir .. "/nats" })
    assert(again:restore(ref, dir .. "/out"))
    local g = assert(io.open(dir .. "/out/a.txt"))
    expect(g:read("a")).to_be("hello nats")
    g:close()
    os.execute("rm -rf '" .. dir .. "' '" .. ws .. "'")
  end, { timeout = 60 })

  it("a second process gets 'held', then takes over after SIGKILL and the TTL", function()
    with_nats(function(url)
    local p = holder(url)
    local id
    for line in p:lines("stdout") do id = line:match("^SESSION (%S+)") if id then break end end
    expect(id).to_be_truthy()
    local store <close> = assert(rig.store.nats{ url = url, lease_ttl = 1 })
    local rg = define(store, { { text = "x" } })
    local s, _, code = rg:restore(id)
    expect(s).to_be_nil()
    expect(code).to_be("held")
    p:kill("SIGKILL")
    p:wait(5)
    p:close()
    local s2
    for _ = 1, 100 do
      s2, _, code = rg:restore(id)
      if s2 or code ~= "held" then break end
      rig.sleep(0.1)
    end
    assert(s2, code)
    s2:shutdown()
    end)
  end, { timeout = 60 })

  it("fences a stale writer revived past its TTL: it can no longer append", function()
    with_nats(function(url)
    local p = holder(url, [[
      io.stdin:read("l")
      s:submit("from the stale writer")
      local ok, msg, code = s:wait_idle(10)
      print("RESULT " .. tostring(code) .. " " .. tostring(msg)); io.stdout:flush()
    ]])
    local lines = p:lines("stdout")
    local id = lines():match("^SESSION (%S+)")
    p:kill("SIGSTOP")
    local store <close> = assert(rig.store.nats{ url = url, lease_ttl = 1 })
    local rg = define(store, { { text = "x" } })
    local s, code
    for _ = 1, 100 do
      s, _, code = rg:restore(id)
      if s or code ~= "held" then break end
      rig.sleep(0.1)
    end
    assert(s)
    local tip = select(2, rig.core.journal_read(store, id, 1, 0))
    p:kill("SIGCONT")
    p:write("go\n")
    local result = lines()
    expect(result).to_match("^RESULT faulted")
    p:wait(10)
    p:close()
    local tip2 = select(2, rig.core.journal_read(store, id, 1, 0))
    expect(tip2).to_be(tip)
    s:shutdown()
    end)
  end, { timeout = 60 })
end)
