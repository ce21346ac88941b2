-- rig.sandbox: profiles from Lua (construction, defaults, errors naming the
-- field, frozen fields, fingerprint, access_for, restrict) and the report
-- (rig.sandbox.check and `luarig sandbox check`).
local sandbox = rig.sandbox
local process = require "rig.process"

local function tmpdir()
  local r = assert(process.run{ argv = { "mktemp", "-d" } })
  return (r.stdout:gsub("\n$", ""))
end

local root = tmpdir()
local ws = root .. "/ws"
local cache = root .. "/cache"
assert(process.run{ argv = { "mkdir", "-p", ws .. "/sub", cache, root .. "/out" } })
assert(process.run{ argv = { "ln", "-s", root .. "/out", ws .. "/link" } })

describe("rig.sandbox.profile", function()
  it("has the documented defaults and readable fields", function()
    local p = sandbox.profile{ workspace_root = ws }
    expect(p.workspace_root).to_be(ws)
    expect(p.workspace_read).to_be("allow")
    expect(p.workspace_write).to_be("gated")
    expect(p.host_read).to_be("allow")
    expect(p.host_write).to_be("deny")
    expect(p.network).to_be("gated")
    expect(p.command).to_be("gated")
    expect(p.delegate).to_be("gated")
    expect(p.mcp).to_be("gated")
    expect(p.home).to_be("isolated")
    expect(p.isolation).to_be("sandboxed")
    expect(p.ack_unconfined).to_be(false)
    expect(#p.roots).to_be(0)
    expect(p.protect.git).to_be("protected")
    expect(#p.protect.names).to_be(0)
    expect(p.protect.max_entries).to_be(200000)
    expect(p.protect.defaults).to_equal{ ".vscode", ".idea", ".devcontainer", ".cursor", ".claude",
                                         ".mcp.json", ".envrc", ".github/workflows" }
    local q = sandbox.profile{ workspace_root = ws, protect = { names = { ".tool-versions", "tools/hooks" },
                                                                git = "readonly", max_entries = 500 } }
    expect(q.protect.names).to_equal{ ".tool-versions", "tools/hooks" }
    expect(q.protect.git).to_be("readonly")
    expect(q.protect.max_entries).to_be(500)
    expect(p.nonsense).to_be_nil()
    expect(tostring(p)).to_match("^rig%.sandbox%.profile")
  end)

  it("canonicalizes the workspace and the roots", function()
    local p = sandbox.profile{ workspace_root = ws .. "/sub/..//", roots = { { path = cache .. "/." } } }
    expect(p.workspace_root).to_be(ws)
    expect(p.roots[1].path).to_be(cache)
    expect(p.roots[1].read).to_be("allow")
    expect(p.roots[1].write).to_be("deny")
  end)

  it("raises naming the field", function()
    local cases = {
      { { workspace_root = ws, tiemout = 1 }, "unknown field 'tiemout'" },
      { { workspace_root = ws, network = "maybe" }, "field 'network' must be deny, gated or allow" },
      { { workspace_root = ws, delegate = "yes" }, "field 'delegate' must be deny, gated or allow" },
      { { workspace_root = ws, mcp = "yes" }, "field 'mcp' must be deny, gated or allow" },
      { { workspace_root = ws, workspace_write = true }, "field 'workspace_write' must be" },
      { { workspace_root = ws, home = "shared" }, "field 'home' must be isolated or real" },
      { { workspace_root = ws, isolation = "none" }, "field 'isolation' must be" },
      { { workspace_root = ws, ack_unconfined = "yes" }, "field 'ack_unconfined' must be a boolean" },
      { { workspace_root = root .. "/missing" }, "field 'workspace_root': no such directory" },
      { {}, "field 'workspace_root' is required" },
      { { workspace_root = ws, workspace_read = "gated", workspace_write = "allow" },
        "field 'workspace_write' is wider than 'workspace_read'" },
      { { workspace_root = ws, roots = { { path = cache, mode = "rw" } } }, "unknown field 'roots%[1%]%.mode'" },
      { { workspace_root = ws, roots = { { read = "allow" } } }, "field 'roots%[1%]%.path' is required" },
      { { workspace_root = ws, roots = { { path = ws .. "/sub" } } }, "field 'roots%[1%]%.path' overlaps the workspace" },
      { { workspace_root = ws, roots = { { path = cache }, { path = cache } } }, "field 'roots%[2%]%.path' repeats" },
      { { workspace_root = ws, roots = { { path = cache, write = "sometimes" } } }, "field 'roots%[1%]%.write'" },
      { { workspace_root = ws, isolation = "unconfined", workspace_write = "allow", host_write = "allow",
          network = "allow" }, "needs field 'ack_unconfined'" },
      { { workspace_root = ws, isolation = "unconfined", ack_unconfined = true },
        "isolation 'unconfined' needs field 'workspace_write' to be allow" },
      { { workspace_root = ws, protect = ".envrc" }, "field 'protect' must be a table" },
      { { workspace_root = ws, protect = { names = { "../x" } } }, "field 'protect%.names%[1%]' must be a relative path" },
      { { workspace_root = ws, protect = { names = { "/etc" } } }, "field 'protect%.names%[1%]'" },
      { { workspace_root = ws, protect = { names = { "ok", 3 } } }, "field 'protect%.names%[2%]'" },
      { { workspace_root = ws, protect = { git = "none" } }, "field 'protect%.git' must be protected or readonly" },
      { { workspace_root = ws, protect = { max_entries = 0 } }, "field 'protect%.max_entries' must be a positive integer" },
      { { workspace_root = ws, protect = { nmaes = {} } }, "unknown field 'protect%.nmaes'" },
    }
    for i, c in ipairs(cases) do
      local ok, err = pcall(sandbox.profile, c[1])
      if ok then error("case " .. i .. " did not raise") end
      if not tostring(err):find(c[2]) then error("case " .. i .. ": " .. tostring(err)) end
      expect(tostring(err)).to_match("^rig%.sandbox%.profile: ")
    end
    -- positive control: the unconfined shape made complete
    local u = sandbox.profile{ workspace_root = ws, isolation = "unconfined", workspace_write = "allow",
                               host_write = "allow", network = "allow", ack_unconfined = true }
    expect(u.isolation).to_be("unconfined")
  end)

  it("is frozen", function()
    local p = sandbox.profile{ workspace_root = ws }
    expect(function() p.network = "allow" end).to_fail("frozen")
    expect(p.network).to_be("gated")
    local r = p.roots
    r[1] = { path = "/" }  -- a copy: the profile does not change
    expect(#p.roots).to_be(0)
  end)

  it("has a stable fingerprint that every field moves", function()
    local a = sandbox.profile{ workspace_root = ws }
    local b = sandbox.profile{ workspace_root = ws }
    expect(#a:fingerprint()).to_be(64)
    expect(a:fingerprint()).to_match("^[0-9a-f]+$")
    expect(a:fingerprint()).to_be(b:fingerprint())
    expect(a == b).to_be(true)
    local seen = { [a:fingerprint()] = true }
    for _, o in ipairs{ { network = "deny" }, { command = "allow" }, { delegate = "allow" },
                        { delegate = "deny" }, { mcp = "allow" }, { mcp = "deny" }, { home = "real" },
                        { workspace_write = "deny" }, { host_read = "gated" },
                        { roots = { { path = cache } } }, { workspace_root = cache },
                        { protect = { names = { ".x" } } }, { protect = { git = "readonly" } },
                        { protect = { max_entries = 10 } } } do
      o.workspace_root = o.workspace_root or ws
      local fp = sandbox.profile(o):fingerprint()
      expect(seen[fp]).to_be_nil()
      seen[fp] = true
    end
  end)

  it("answers access_for per kind and fails closed on unknown kinds", function()
    local p = sandbox.profile{ workspace_root = ws, host_read = "gated", network = "deny",
                               command = "allow", roots = { { path = cache, read = "allow", write = "gated" } } }
    expect(p:access_for("filesystem.read", ws .. "/a")).to_be("allow")
    expect(p:access_for("filesystem.write", "sub/new.txt")).to_be("gated")
    expect(p:access_for("filesystem.write", "/etc/passwd")).to_be("deny")
    expect(p:access_for("filesystem.read", "/etc/passwd")).to_be("gated")
    expect(p:access_for("filesystem.write", "link/x")).to_be("deny")   -- the symlink leads out
    expect(p:access_for("filesystem.write", "../out/x")).to_be("deny")
    expect(p:access_for("filesystem.write", cache .. "/x")).to_be("gated")
    expect(p:access_for("network", "example.com:443")).to_be("deny")
    expect(p:access_for("command.execute", "make test")).to_be("allow")
    -- delegation: one state for every delegate name (the gate's rules narrow it)
    expect(p:access_for("delegate", "researcher")).to_be("gated")
    expect(sandbox.profile{ workspace_root = ws, delegate = "deny" }:access_for("delegate", "x"))
      .to_be("deny")
    expect(sandbox.profile{ workspace_root = ws, delegate = "allow" }:access_for("delegate", "x"))
      .to_be("allow")
    -- mcp: one state for every server and tool (the gate's rules narrow it)
    expect(p:access_for("mcp", "fs/read_file")).to_be("gated")
    expect(sandbox.profile{ workspace_root = ws, mcp = "allow" }:access_for("mcp", "fs:sampling"))
      .to_be("allow")
    expect(function() p:access_for("filesystem.exec", "/bin/sh") end).to_fail("unknown access kind 'filesystem.exec'")
    expect(function() p:access_for("filesystem.read") end).to_fail("needs a path")
  end)
end)

describe("rig.sandbox.restrict", function()
  local states = { "deny", "gated", "allow" }
  local rank = { deny = 1, gated = 2, allow = 3 }

  it("takes the lower state of every pair and never widens", function()
    for _, f in ipairs{ "workspace_read", "workspace_write", "host_read", "host_write", "network", "command",
                        "delegate", "mcp" } do
      for _, x in ipairs(states) do
        for _, y in ipairs(states) do
          local oa, ob = { workspace_root = ws, [f] = x }, { workspace_root = ws, [f] = y }
          -- keep write within read so each input is valid
          if f == "workspace_write" then oa.workspace_read, ob.workspace_read = "allow", "allow" end
          if f == "workspace_read" then oa.workspace_write, ob.workspace_write = "deny", "deny" end
          if f == "host_read" then oa.host_write, ob.host_write = "deny", "deny" end
          if f == "host_write" then oa.host_read, ob.host_read = "allow", "allow" end
          local r = sandbox.restrict(sandbox.profile(oa), sandbox.profile(ob))
          expect(r[f]).to_be(rank[x] < rank[y] and x or y)
        end
      end
    end
  end)

  it("keeps home isolated and isolation sandboxed unless both agree", function()
    local real = sandbox.profile{ workspace_root = ws, home = "real" }
    local iso = sandbox.profile{ workspace_root = ws }
    expect(sandbox.restrict(real, iso).home).to_be("isolated")
    expect(sandbox.restrict(real, real).home).to_be("real")
    local u = sandbox.profile{ workspace_root = ws, isolation = "unconfined", workspace_write = "allow",
                               host_write = "allow", network = "allow", ack_unconfined = true }
    expect(sandbox.restrict(u, iso).isolation).to_be("sandboxed")
    expect(sandbox.restrict(u, u).isolation).to_be("unconfined")
  end)

  it("does not widen a root's state through the other profile's host state", function()
    local a = sandbox.profile{ workspace_root = ws, roots = { { path = cache, read = "deny", write = "deny" } } }
    local b = sandbox.profile{ workspace_root = ws }  -- host_read allow
    local r = sandbox.restrict(a, b)
    expect(r:access_for("filesystem.read", cache .. "/x")).to_be("deny")
    expect(r:access_for("filesystem.read", "/etc/hostname")).to_be("allow")
  end)

  it("protects the union: every name of either, read-only git if either, the lower cap", function()
    local a = sandbox.profile{ workspace_root = ws, protect = { names = { ".a", ".b" }, max_entries = 900 } }
    local b = sandbox.profile{ workspace_root = ws, protect = { names = { ".b", ".c" }, git = "readonly",
                                                                max_entries = 100 } }
    local r = sandbox.restrict(a, b)
    expect(r.protect.names).to_equal{ ".a", ".b", ".c" }
    expect(r.protect.git).to_be("readonly")
    expect(r.protect.max_entries).to_be(100)
    local plain = sandbox.restrict(sandbox.profile{ workspace_root = ws }, sandbox.profile{ workspace_root = ws })
    expect(plain.protect.git).to_be("protected")
    -- names in another order are the same profile
    local x = sandbox.profile{ workspace_root = ws, protect = { names = { ".b", ".a" }, max_entries = 900 } }
    expect(x:fingerprint()).to_be(a:fingerprint())
  end)

  it("refuses profiles on different workspaces", function()
    local a = sandbox.profile{ workspace_root = ws }
    local b = sandbox.profile{ workspace_root = cache }
    expect(function() sandbox.restrict(a, b) end).to_fail("different workspaces")
    expect(function() sandbox.restrict(a, {}) end).to_fail("rig.sandbox.profile expected")
  end)
end)

describe("rig.sandbox.check", function()
  local order = { "read_boundary", "write_boundary", "network_boundary", "target_network",
                  "process_boundary", "resource_limits", "env_scrub", "protected_files" }

  it("reports tier A on this machine with every guarantee of the default profile", function()
    local r = sandbox.check()
    expect(r.tier).to_be("A")
    expect(r.ok).to_be(true)
    expect(r.order).to_equal(order)
    expect(r.caps.userns).to_be(true)
    expect(r.caps.landlock_abi).at_least(1)
    expect(r.caps.seccomp).to_be(true)
    expect(type(r.cgroup)).to_be("string")
    for _, g in ipairs(order) do
      local e = r.guarantees[g]
      expect(e.enforced).to_be(true)
      expect(#e.how).at_least(10)
    end
    expect(r.guarantees.network_boundary.required).to_be(true)
    expect(r.guarantees.protected_files.how).to_match("commondir")
    -- a profile that writes the workspace needs the files the host interprets kept
    local w = sandbox.check(sandbox.profile{ workspace_root = ws, workspace_write = "allow" })
    expect(w.guarantees.protected_files.required).to_be(true)
    expect(w.guarantees.protected_files.enforced).to_be(true)
  end)

  it("reports an unconfined profile as enforcing only the environment scrub", function()
    local u = sandbox.profile{ workspace_root = ws, isolation = "unconfined", workspace_write = "allow",
                               host_write = "allow", network = "allow", ack_unconfined = true }
    local r = sandbox.check(u)
    expect(r.ok).to_be(true)
    expect(r.guarantees.env_scrub.enforced).to_be(true)
    expect(r.guarantees.read_boundary.enforced).to_be(false)
    expect(r.guarantees.read_boundary.required).to_be(false)
    expect(r.guarantees.read_boundary.missing).to_match("unconfined")
  end)

  it("prints the same report from `luarig sandbox check`", function()
    local luarig = os.getenv("LUARIG") or (os.getenv("PWD") .. "/build/luarig")
    local r = assert(process.run{ argv = { luarig, "sandbox", "check" }, cwd = ws })
    expect(r.code).to_be(0)
    local lines = {}
    for l in r.stdout:gmatch("[^\n]+") do lines[#lines + 1] = l end
    expect(lines[1]).to_be("tier: A")
    for i, g in ipairs(order) do
      expect(lines[i + 1]).to_match("^" .. g .. " +enforced +%S")
    end
    expect(r.stdout).to_match("\nprotected names: %.vscode %.idea [^\n]*%.github/workflows")
    expect(r.stdout).to_match("\nlandlock: ABI %d+\n")
    expect(r.stdout).to_match("\ncgroup: ")
    -- usage errors exit 2
    local u = assert(process.run{ argv = { luarig, "sandbox", "chek" } })
    expect(u.code).to_be(2)
    expect(u.stderr).to_match("unknown sandbox command 'chek'")
  end)
end)

-- clean up (the runner collects cases first, then runs them; so do this last)
describe("cleanup", function()
  it("removes the scratch directory", function()
    assert(process.run{ argv = { "rm", "-rf", root } })
  end)
end)
