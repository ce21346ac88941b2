local json = require "rig.json"
local core = require "rig.core"

local dir = os.getenv("TMPDIR") or "/tmp"
local n = 0
local made = {}
local function scratch()
  n = n + 1
  local d = string.format("%s/luarig-gate-%d-%d-%d", dir, math.floor(rig.time()), math.random(1e9), n)
  assert(os.execute("mkdir -p '" .. d .. "' && chmod 700 '" .. d .. "'"))
  made[#made + 1] = d
  return d
end
-- the scratch directories go with the run, whatever its cases did
after_all(function()
  for _, d in ipairs(made) do assert(os.execute("rm -rf '" .. d .. "'")) end
end)
local function write(path, text, mode)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
  assert(os.execute("chmod " .. (mode or "600") .. " '" .. path .. "'"))
end
local function read(path)
  local f = assert(io.open(path))
  local s = f:read("a")
  f:close()
  return s
end

local function req(...)
  return { summary = "test", requirements = { ... } }
end
local function net(hostport) return { kind = "network", match = "tcp://" .. hostport } end
local function cmd(line) return { kind = "command.execute", match = line } end
local function rd(path) return { kind = "filesystem.read", scope = path } end

local function rules_file(rules)
  local d = scratch()
  local path = d .. "/permissions.json"
  write(path, assert(json.encode({ version = 1, rules = json.array(rules) })))
  return path, d
end

describe("rig.gate evaluation", function()
  it("allows a request with zero requirements", function()
    local g = rig.gate{ access = { network = "deny" }, approver = "headless" }
    local d = g:evaluate(req())
    expect(d.verdict).to_be("allow")
    expect(d.source).to_be("default")
  end)

  it("short-circuits on an access deny, before any saved rule", function()
    local path = rules_file{ { effect = "allow", kind = "network", match = "tcp://*:*" } }
    local g = rig.gate{ access = { network = "deny", ["command.execute"] = "gated" },
                        rules = rig.permissions.file(path), approver = "interactive" }
    local d = g:evaluate(req(cmd("ls"), net("example.org:443")))
    expect(d.verdict).to_be("deny")
    expect(d.source).to_be("access")
    expect(d.reason).to_be("permission denied: access denies network 'tcp://example.org:443'")
  end)

  it("fails closed on a kind the access table does not configure", function()
    local g = rig.gate{ access = { network = "allow" }, approver = "interactive" }
    local d = g:evaluate(req(cmd("ls")))
    expect(d.verdict).to_be("deny")
    expect(d.reason).to_match("no access is configured for 'command.execute'")
  end)

  it("fails closed on an invalid request (an unknown kind never reaches the access source)", function()
    local g = rig.gate{ access = { network = "allow" }, approver = "interactive" }
    local d = g:evaluate({ summary = "x", requirements = { { kind = "telepathy", match = "x" } } })
    expect(d.verdict).to_be("deny")
    expect(d.reason).to_match("^permission denied: invalid request: ")
  end)

  it("routes requirements to a sandbox profile", function()
    local ws = scratch()
    local p = rig.sandbox.profile{ workspace_root = ws, workspace_read = "allow", workspace_write = "gated",
      host_read = "deny", host_write = "deny", network = "gated", command = "deny" }
    local g = rig.gate{ access = p, approver = "interactive" }
    expect(g:evaluate(req(rd(ws .. "/a.txt"))).verdict).to_be("allow")
    expect(g:evaluate(req(rd("/etc/passwd"))).verdict).to_be("deny")
    local d = g:evaluate(req({ kind = "filesystem.write", scope = ws .. "/a.txt" }, net("x.org:443")))
    expect(d.verdict).to_be("gated")
    expect(#d.unmet).to_be(2)
    expect(g:evaluate(req(cmd("ls"))).source).to_be("access")
  end)

  it("checks every saved deny before any saved allow", function()
    -- the allow for the first requirement comes first in the file; the deny for the second must still win
    local path = rules_file{
      { effect = "allow", kind = "command.execute", match = "git log *" },
      { effect = "allow", kind = "network", match = "tcp://*.example.org:443" },
      { effect = "deny", kind = "network", match = "tcp://evil.example.org:443" },
    }
    local g = rig.gate{ access = { network = "gated", ["command.execute"] = "gated" },
                        rules = rig.permissions.file(path), approver = "interactive" }
    local d = g:evaluate(req(cmd("git log -1"), net("evil.example.org:443")))
    expect(d.verdict).to_be("deny")
    expect(d.source).to_be("rule")
    expect(d.reason).to_match("a saved rule denies network 'tcp://evil.example.org:443'")
    d = g:evaluate(req(cmd("git log -1"), net("api.example.org:443")))
    expect(d.verdict).to_be("allow")
    expect(d.source).to_be("rule")
  end)

  it("a saved deny applies even where access allows", function()
    local path = rules_file{ { effect = "deny", kind = "command.execute", match = "rm *" } }
    local g = rig.gate{ access = { ["command.execute"] = "allow" }, rules = rig.permissions.file(path),
                        approver = "interactive" }
    expect(g:evaluate(req(cmd("rm -rf x"))).verdict).to_be("deny")
    expect(g:evaluate(req(cmd("ls"))).verdict).to_be("allow")
  end)

  it("gathers what is left into one unmet set with one candidate per requirement", function()
    local path = rules_file{ { effect = "allow", kind = "command.execute", match = "ls" } }
    local g = rig.gate{ access = { network = "gated", ["command.execute"] = "gated", ["filesystem.read"] = "allow" },
                        rules = rig.permissions.file(path), approver = "interactive" }
    local d = g:evaluate(req(cmd("ls"), net("a.org:443"), rd("/x"), cmd("make test")))
    expect(d.verdict).to_be("gated")
    expect(#d.unmet).to_be(2)
    expect(d.unmet[1].match).to_be("tcp://a.org:443")
    expect(d.unmet[2].match).to_be("make test")
    expect(d.candidates).to_equal({
      { effect = "allow", kind = "network", match = "tcp://a.org:443" },
      { effect = "allow", kind = "command.execute", match = "make test" },
    })
  end)

  it("headless: gated becomes a denial, approval required", function()
    local g = rig.gate{ access = { network = "gated" }, approver = "headless" }
    local d = g:evaluate(req(net("a.org:443")))
    expect(d.verdict).to_be("deny")
    expect(d.reason).to_be("permission denied: approval required")
    expect(d.code).to_be("approval_required")
    expect(#d.unmet).to_be(1)
    expect(g.approver).to_be("headless")
  end)

  it("approve_always writes the candidates, and the next call needs no approval", function()
    local d0 = scratch()
    local path = d0 .. "/perms.json"   -- missing: no rules yet
    local perms = rig.permissions.file(path)
    local g = rig.gate{ access = { network = "gated", ["command.execute"] = "gated" }, rules = perms,
                        approver = "interactive" }
    local d = g:evaluate(req(net("a.org:443"), cmd("make")))
    expect(d.verdict).to_be("gated")
    expect(g:approve_always(d.candidates)).to_be(true)
    local st = core.fs_lstat(path)
    expect(st.type).to_be("file")
    expect(st.mode).to_be(tonumber("600", 8))
    local doc = json.decode(read(path))
    expect(doc.version).to_be(1)
    expect(#doc.rules).to_be(2)
    d = g:evaluate(req(net("a.org:443"), cmd("make")))
    expect(d.verdict).to_be("allow")
    expect(d.source).to_be("rule")
    -- what the rules settled is handed on, so a tool can grant it as if approved now
    expect(#d.approved).to_be(2)
    expect(d.approved[1].kind).to_be("network")
    expect(d.approved[2].kind).to_be("command.execute")
    expect(d.approved[2].match).to_be("make")
    -- approving again does not duplicate, and a fresh reader of the file agrees
    expect(g:approve_always(d.candidates or { { effect = "allow", kind = "network", match = "tcp://a.org:443" } })).to_be(true)
    expect(#json.decode(read(path)).rules).to_be(2)
    expect(rig.permissions.file(path):match(net("a.org:443"))).to_be("allow")
  end)

  it("a failed write approves nothing", function()
    local d0 = scratch()
    local path = d0 .. "/perms.json"
    local perms = rig.permissions.file(path)
    local g = rig.gate{ access = { network = "gated" }, rules = perms, approver = "interactive" }
    local d = g:evaluate(req(net("a.org:443")))
    -- a read-only directory (root ignores modes, so also take the directory away)
    assert(os.execute("chmod 500 '" .. d0 .. "'"))
    local euid = core.fs_getuid()
    if euid == 0 then assert(os.execute("rmdir '" .. d0 .. "'")) end
    local ok, msg = g:approve_always(d.candidates)
    expect(ok).to_be_nil()
    expect(msg).to_match("^permissions: cannot ")
    expect(g:evaluate(req(net("a.org:443"))).verdict).to_be("gated")
    expect(#perms:rules()).to_be(0)
    if euid ~= 0 then
      os.execute("chmod 700 '" .. d0 .. "'")
      expect(core.fs_lstat(path)).to_be_nil()
    end
  end)

  it("approve_always without a permission file fails", function()
    local g = rig.gate{ access = { network = "gated" }, approver = "interactive" }
    local ok, msg = g:approve_always({ { effect = "allow", kind = "network", match = "tcp://a:1" } })
    expect(ok).to_be_nil()
    expect(msg).to_match("no permission file")
  end)

  it("validates its definition", function()
    expect(function() rig.gate{ access = { network = "gated" } } end).to_fail("field 'approver'")
    expect(function() rig.gate{ access = { net = "allow" }, approver = "headless" } end).to_fail("unknown kind 'net'")
    expect(function() rig.gate{ access = { network = "maybe" }, approver = "headless" } end).to_fail("access.network")
    expect(function() rig.gate{ access = 1, approver = "headless" } end).to_fail("field 'access'")
    expect(function() rig.gate{ access = {}, approver = "headless", rules = {} } end).to_fail("field 'rules'")
    expect(function() rig.gate{ access = {}, approver = "headless", extra = 1 } end).to_fail("unknown field 'extra'")
    local g = rig.gate{ access = { network = "allow" }, approver = "headless" }
    expect(function() g.approver = "interactive" end).to_fail("frozen")
  end)
end)

describe("rig.gate and a tool's own needs_approval (kind tool)", function()
  local function tl(name) return { kind = "tool", match = name } end

  it("is gated whatever the access source, unless the access table says otherwise", function()
    local g = rig.gate{ access = {}, approver = "interactive" }
    local d = g:evaluate(req(tl("send")))
    expect(d.verdict).to_be("gated")
    expect(d.candidates[1]).to_equal({ effect = "allow", kind = "tool", match = "send" })
    expect(rig.gate{ access = {}, approver = "headless" }:evaluate(req(tl("send"))).reason)
      .to_be("permission denied: approval required")
    expect(rig.gate{ access = { tool = "allow" }, approver = "headless" }:evaluate(req(tl("send")))
      .verdict).to_be("allow")
    expect(rig.gate{ access = { tool = "deny" }, approver = "interactive" }:evaluate(req(tl("send")))
      .verdict).to_be("deny")
    local p = rig.sandbox.profile{ workspace_root = scratch() }
    expect(rig.gate{ access = p, approver = "interactive" }:evaluate(req(tl("send"))).verdict)
      .to_be("gated")
  end)

  it("saved rules settle it by the tool's name or *", function()
    local path = rules_file{ { effect = "allow", kind = "tool", match = "send" },
                             { effect = "deny", kind = "tool", match = "wipe" } }
    local g = rig.gate{ access = {}, rules = rig.permissions.file(path), approver = "interactive" }
    expect(g:evaluate(req(tl("send"))).source).to_be("rule")
    expect(g:evaluate(req(tl("send"))).verdict).to_be("allow")
    expect(g:evaluate(req(tl("wipe"))).verdict).to_be("deny")
    expect(g:evaluate(req(tl("other"))).verdict).to_be("gated")
    local perms = require "rig.permissions"
    expect(perms.check_rule{ effect = "allow", kind = "tool", match = "*" }).to_be_truthy()
    local _, why = perms.check_rule{ effect = "allow", kind = "tool", match = "a b" }
    expect(why).to_match("match must be a tool name")
  end)
end)

describe("rig.gate.default", function()
  it("allows what declares nothing, allows delegation, asks for anything else", function()
    local g = rig.gate.default()
    expect(g.approver).to_be("interactive")
    expect(g:evaluate(req()).verdict).to_be("allow")
    expect(g:evaluate(req({ kind = "delegate", match = "researcher" })).verdict).to_be("allow")
    for _, r in ipairs { net("example.org:443"), cmd("ls"), rd("/etc/passwd"),
                         { kind = "filesystem.write", match = "/x" }, { kind = "tool", match = "t" },
                         { kind = "mcp", match = "s/t" } } do
      expect(g:evaluate(req(r)).verdict).to_be("gated")
    end
  end)

  it("takes overrides per kind, rules and approver, and refuses anything else", function()
    local g = rig.gate.default{ network = "deny", approver = "headless" }
    expect(g:evaluate(req(net("a:1"))).verdict).to_be("deny")
    expect(g:evaluate(req(cmd("ls"))).reason).to_be("permission denied: approval required")
    expect(function() rig.gate.default{ netwrok = "deny" } end).to_fail("unknown option 'netwrok'")
    expect(function() rig.gate.default{ network = "maybe" } end).to_fail("access.network")
  end)
end)

describe("rig.permissions.file", function()
  it("refuses a relative path", function()
    expect(function() rig.permissions.file("perms.json") end).to_fail("absolute path")
  end)

  it("refuses a symlink", function()
    local path, d = rules_file{}
    assert(os.execute("ln -s '" .. path .. "' '" .. d .. "/link.json'"))
    expect(function() rig.permissions.file(d .. "/link.json") end).to_fail("is a symbolic link")
  end)

  it("refuses a file writable by group or others", function()
    local path = rules_file{}
    assert(os.execute("chmod 620 '" .. path .. "'"))
    expect(function() rig.permissions.file(path) end).to_fail("writable by group or others")
  end)

  it("refuses a file another user owns", function()
    local path
    if core.fs_getuid() == 0 then
      path = rules_file{}
      assert(os.execute("chown 65534 '" .. path .. "'"))
    else
      path = "/etc/passwd"
    end
    expect(function() rig.permissions.file(path) end).to_fail("not owned by the current user")
  end)

  it("refuses a file that is not the JSON shape", function()
    local d = scratch()
    write(d .. "/a.json", "{ not json")
    expect(function() rig.permissions.file(d .. "/a.json") end).to_fail("not JSON")
    write(d .. "/b.json", '{"version":2,"rules":[]}')
    expect(function() rig.permissions.file(d .. "/b.json") end).to_fail('"version" must be 1')
    write(d .. "/c.json", '{"version":1,"rules":{}}')
    expect(function() rig.permissions.file(d .. "/c.json") end).to_fail('"rules" must be an array')
  end)

  it("skips malformed rules and reports them by index", function()
    local d = scratch()
    write(d .. "/p.json", [[{"version":1,"rules":[
      {"effect":"allow","kind":"network","match":"tcp://a.org:443"},
      {"effect":"maybe","kind":"network","match":"tcp://b.org:443"},
      {"effect":"allow","kind":"net","match":"x"},
      {"effect":"allow","kind":"network","match":"a.org"},
      {"effect":"allow","kind":"filesystem.read","match":"relative/**"},
      {"effect":"allow","kind":"command.execute","match":"*"},
      {"effect":"allow","kind":"command.execute","match":"ls","extra":1},
      "string",
      {"effect":"allow","kind":"filesystem.read","match":"/a/x**"}
    ]}]])
    local p = rig.permissions.file(d .. "/p.json")
    local diag = p:diagnostics()
    expect(#diag).to_be(8)
    expect(diag[1]).to_match("^rule 2: effect")
    expect(diag[2]).to_match("^rule 3: unknown kind")
    expect(diag[3]).to_match("^rule 4: match must be \"tcp://HOST:PORT\"")
    expect(diag[4]).to_match("^rule 5: match must be an absolute path")
    expect(diag[5]).to_match("^rule 6: .*every command")
    expect(diag[6]).to_match("^rule 7: unknown field 'extra'")
    expect(diag[7]).to_match("^rule 8: must be an object")
    expect(diag[8]).to_match("^rule 9: '%*%*' must be a whole path segment")
    expect(#p:rules()).to_be(1)
    expect(p:match(net("b.org:443"))).to_be_nil()
    -- add keeps the malformed rules the person wrote (they stay visible to fix)
    expect(p:add{ { effect = "allow", kind = "network", match = "tcp://c.org:443" } }).to_be(true)
    expect(#json.decode(read(d .. "/p.json")).rules).to_be(10)
    expect(#p:diagnostics()).to_be(8)
  end)

  it("matches commands, paths and network addresses as documented", function()
    local path = rules_file{
      { effect = "allow", kind = "command.execute", match = "git log *" },
      { effect = "allow", kind = "command.execute", match = "make" },
      { effect = "allow", kind = "filesystem.read", match = "/ws/**" },
      { effect = "allow", kind = "filesystem.write", match = "/ws/*.txt" },
      { effect = "allow", kind = "network", match = "tcp://*.example.org:443" },
      { effect = "allow", kind = "network", match = "tcp://Host.IO:*" },
    }
    local p = rig.permissions.file(path)
    local cases = {
      { cmd("git log"), "allow" }, { cmd("git log --oneline -3"), "allow" },
      { cmd("git logx"), nil }, { cmd("git log; rm -rf /"), nil }, { cmd("git log && curl x"), nil },
      { cmd("git log $(id)"), nil }, { cmd("make"), "allow" }, { cmd("make test"), nil },
      { rd("/ws"), "allow" }, { rd("/ws/a/b/c"), "allow" }, { rd("/ws/../etc/passwd"), nil },
      { rd("/wsx"), nil }, { rd("ws/a"), nil }, { rd("//ws//a"), "allow" },
      { { kind = "filesystem.write", match = "/ws/a.txt" }, "allow" },
      { { kind = "filesystem.write", match = "/ws/d/a.txt" }, nil },
      { { kind = "filesystem.read", match = "/ws/../ws/x" }, "allow" },
      { net("api.example.org:443"), "allow" }, { net("a.b.example.org:443"), "allow" },
      { net("example.org:443"), nil }, { net("api.example.org:80"), nil }, { net("evilexample.org:443"), nil },
      { net("host.io:1"), "allow" }, { net("HOST.io:65535"), "allow" },
    }
    for i, c in ipairs(cases) do
      local got = p:match(c[1])
      if got ~= c[2] then
        error("case " .. i .. " (" .. (c[1].match or c[1].scope) .. "): expected " .. tostring(c[2]) .. ", got " .. tostring(got))
      end
    end
  end)

  it("re-reads a file edited by hand; a broken edit keeps only the denies", function()
    local path = rules_file{ { effect = "allow", kind = "command.execute", match = "ls" },
                             { effect = "deny", kind = "command.execute", match = "rm *" } }
    local p = rig.permissions.file(path)
    local g = rig.gate{ access = { ["command.execute"] = "gated" }, rules = p, approver = "interactive" }
    expect(g:evaluate(req(cmd("ls"))).verdict).to_be("allow")
    write(path, '{"version":1,"rules":[{"effect":"allow","kind":"command.execute","match":"pwd"}]}')
    expect(g:evaluate(req(cmd("pwd"))).verdict).to_be("allow")
    expect(g:evaluate(req(cmd("ls"))).verdict).to_be("gated")
    write(path, '{"version":1,"rules":[{"effect":"deny","kind":"command.execute","match":"pwd"}]}')
    expect(p:reload()).to_be(true)
    write(path, '{"version":1, oops')
    local ok, msg = p:reload()
    expect(ok).to_be_nil()
    expect(msg).to_match("not JSON")
    expect(p:diagnostics()[1]).to_match("^file: ")
    expect(p:match(cmd("pwd"))).to_be("deny")
    -- add refuses to overwrite a file it cannot read
    ok, msg = p:add{ { effect = "allow", kind = "command.execute", match = "ls" } }
    expect(ok).to_be_nil()
    expect(read(path)).to_be('{"version":1, oops')
  end)

  it("survives random bytes and random rule documents (the parser is Lua: a randomized test)", function()
    local perms = require "rig.permissions"
    local seed = os.time()
    math.randomseed(seed)
    local pieces = { '{', '}', '[', ']', '"version"', ':', '1', ',', '"rules"', '"effect"', '"allow"',
      '"deny"', '"kind"', '"network"', '"command.execute"', '"filesystem.read"', '"match"',
      '"tcp://*.a:1"', '"/a/**"', '"ls *"', 'null', '"\\u0000"', '2', '-1', '"*"', '"x"', ' ' }
    local parsed_ok = 0
    for i = 1, 3000 do
      local text
      if i % 3 == 0 then
        local t = {}
        for j = 1, math.random(0, 200) do t[j] = string.char(math.random(0, 255)) end
        text = table.concat(t)
      else
        local t = {}
        for j = 1, math.random(1, 60) do t[j] = pieces[math.random(#pieces)] end
        text = table.concat(t)
        if i % 2 == 0 then text = '{"version":1,"rules":[' .. text .. ']}' end
      end
      local ok, r, err = pcall(perms.parse, text)
      if not ok then error("seed " .. seed .. ": parse raised on " .. string.format("%q", text) .. ": " .. tostring(r)) end
      if r then
        parsed_ok = parsed_ok + 1
        for _, rule in ipairs(r.rules) do
          -- every accepted rule can be matched against every kind of requirement without raising
          for _, q in ipairs { net("a:1"), cmd("ls x"), rd("/a/b") } do perms.rule_matches(rule, q) end
        end
      else
        expect(type(err)).to_be("string")
      end
    end
    expect(parsed_ok).at_least(1)
  end)
end)
