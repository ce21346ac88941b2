-- rig.tools: the standard tools, called the way the runner calls them
-- (prepare(args, pctx) then run(request, ctx)), with every limit and refusal:
-- traversal, symbolic links out (at prepare and swapped in before run), the read
-- guard, byte caps, stale writes, ambiguous edits, bash through a real sandbox
-- executor (grants from approvals, timeout, head + tail cap), glob and grep caps,
-- fetch against a real local server (caps, same-origin redirects, no secrets in
-- messages); then one session end to end.

local core = require "rig.core" -- the stdlib's private binding: what the public API does not show

local process = rig.process
local json = rig.json

local function sh(cmd)
  local r = assert(process.run{ argv = { "sh", "-c", cmd } })
  assert(r.code == 0, cmd .. ": " .. tostring(r.stderr))
  return r.stdout
end

local function my_pid()
  local f = assert(io.open("/proc/self/stat"))
  local pid = f:read("n")
  f:close()
  return pid
end

local base = "/tmp/lr-tools-spec-" .. my_pid() .. "-" .. math.random(1 << 30)
sh("mkdir -p '" .. base .. "'")
base = core.fs_realpath(base)
local n_ws = 0

-- A fresh workspace (canonical) and a directory outside it.
local function workspace()
  n_ws = n_ws + 1
  local ws = base .. "/ws" .. n_ws
  sh("mkdir -p '" .. ws .. "' '" .. base .. "/outside'")
  return ws
end

local function put(path, data)
  local f = assert(io.open(path, "wb"))
  f:write(data)
  f:close()
end

local function get(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local d = f:read("a")
  f:close()
  return d
end

-- prepare + run as the runner does, with a loop's observations table.
local function ctx_for(ws, obs, approved)
  return { session_id = "s1", loop_id = "l1", turn_id = "t1", call_id = "c1",
           workspace = ws, observations = obs or {}, approved = approved }
end

local function call(tool, args, ctx)
  assert(tool:check_args(args))
  local req, err = tool.prepare(args, { session_id = ctx.session_id, loop_id = ctx.loop_id,
                                        workspace = ctx.workspace })
  if not req then return nil, "preparation failed: " .. tostring(err), nil end
  ctx.prepared = err -- prepare's second value, as the runner hands it over
  local nreq = assert(tool:check_request(req))
  ctx.request = nreq
  local out, rerr = tool.run(nreq, ctx)
  return out, rerr, nreq
end

describe("rig.tools options", function()
  it("raises on an unknown option and on bad values", function()
    local ok, err = pcall(rig.tools.read_file, { max_byte = 1 })
    expect(ok).to_be(false)
    expect(tostring(err)).to_match("rig.tools.read_file: unknown option 'max_byte'")
    ok, err = pcall(rig.tools.glob, { max_results = 0 })
    expect(tostring(err)).to_match("option 'max_results' must be a positive integer")
    ok, err = pcall(rig.tools.bash, {})
    expect(tostring(err)).to_match("option 'executor' must be a rig.sandbox executor")
    ok, err = pcall(rig.tools.read_file, { deny = { "../x" } })
    expect(tostring(err)).to_match("option 'deny%[1%]'")
  end)

  it("fails preparation without a workspace", function()
    local _, err = call(rig.tools.read_file(), { path = "a" }, ctx_for(nil))
    expect(err).to_match("this tool needs a workspace %(rig.define{ workspace = … }%)")
  end)
end)

describe("rig.tools.read_file", function()
  it("numbers lines, reads a range and records a complete read's hash", function()
    local ws = workspace()
    put(ws .. "/a.txt", "one\ntwo\nthree\n")
    local t = rig.tools.read_file()
    local ctx = ctx_for(ws)
    local out, err, req = call(t, { path = "a.txt" }, ctx)
    expect(err).to_be_nil()
    expect(out).to_be("   1\tone\n   2\ttwo\n   3\tthree\n")
    expect(req.requirements[1].kind).to_be("filesystem.read")
    expect(req.requirements[1].match).to_be(ws .. "/a.txt")
    expect(ctx.observations.reads[ws .. "/a.txt"]).to_be(core.sha256_hex("one\ntwo\nthree\n"))
    out = call(t, { path = "./a.txt", start_line = 2, end_line = 2 }, ctx_for(ws))
    expect(out).to_be("   2\ttwo\n")
    out = call(t, { path = ws .. "/a.txt", start_line = 9 }, ctx_for(ws))
    expect(out).to_match("the file has 3 lines")
  end)

  it("refuses traversal out of the workspace", function()
    local ws = workspace()
    put(base .. "/outside/secret", "s")
    local t = rig.tools.read_file()
    local _, err = call(t, { path = "../outside/secret" }, ctx_for(ws))
    expect(err).to_match("is outside the workspace")
    _, err = call(t, { path = "sub/../../outside/secret" }, ctx_for(ws))
    expect(err).to_match("is outside the workspace")
    _, err = call(t, { path = base .. "/outside/secret" }, ctx_for(ws))
    expect(err).to_match("is outside the workspace")
  end)

  it("refuses a symbolic link that leads out, and follows one that stays in", function()
    local ws = workspace()
    put(base .. "/outside/secret", "s")
    put(ws .. "/real.txt", "in\n")
    sh("ln -s '" .. base .. "/outside' '" .. ws .. "/out'; ln -s real.txt '" .. ws .. "/alias'")
    local t = rig.tools.read_file()
    local _, err = call(t, { path = "out/secret" }, ctx_for(ws))
    expect(err).to_match("resolves outside the workspace")
    local out, _, req = call(t, { path = "alias" }, ctx_for(ws))
    expect(out).to_be("   1\tin\n")
    expect(req.requirements[1].match).to_be(ws .. "/real.txt")
  end)

  it("refuses a symbolic link swapped in between prepare and run", function()
    local ws = workspace()
    put(base .. "/outside/secret", "top secret\n")
    sh("mkdir '" .. ws .. "/dir'")
    put(ws .. "/dir/f", "fine\n")
    local t = rig.tools.read_file()
    local ctx = ctx_for(ws)
    local req, art = t.prepare({ path = "dir/f" }, ctx)
    req = assert(t:check_request(assert(req)))
    ctx.prepared = art
    -- the directory becomes a link out, with the same name beneath it
    sh("mv '" .. ws .. "/dir' '" .. ws .. "/dir.old'; ln -s '" .. base .. "/outside' '"
      .. ws .. "/dir'; cp '" .. base .. "/outside/secret' '" .. base .. "/outside/f'")
    local out, err = t.run(req, ctx)
    expect(out).to_be_nil()
    expect(err).to_match("'dir' is a symbolic link")
    -- and the file itself swapped for a link
    sh("rm '" .. ws .. "/dir'; mv '" .. ws .. "/dir.old' '" .. ws .. "/dir'")
    req, ctx.prepared = t.prepare({ path = "dir/f" }, ctx)
    req = assert(t:check_request(assert(req)))
    sh("rm '" .. ws .. "/dir/f'; ln -s '" .. base .. "/outside/secret' '" .. ws .. "/dir/f'")
    out, err = t.run(req, ctx)
    expect(out).to_be_nil()
    expect(err).to_match("'dir/f' is a symbolic link")
    expect(ctx.observations.reads).to_be_nil()
  end)

  it("applies the read guard and the byte cap with a truncation marker", function()
    local ws = workspace()
    sh("mkdir -p '" .. ws .. "/.git/objects/ab' '" .. ws .. "/priv'")
    put(ws .. "/.git/objects/ab/cd", "x")
    put(ws .. "/priv/key", "k")
    local _, err = call(rig.tools.read_file(), { path = ".git/objects/ab/cd" }, ctx_for(ws))
    expect(err).to_match("refused by the read guard %(.git/objects%)")
    _, err = call(rig.tools.read_file{ deny = { "priv" } }, { path = "priv/key" }, ctx_for(ws))
    expect(err).to_match("refused by the read guard %(priv%)")
    local lines = {}
    for i = 1, 100 do lines[i] = string.format("line %03d", i) end
    put(ws .. "/big.txt", table.concat(lines, "\n") .. "\n")
    local ctx = ctx_for(ws)
    local out = call(rig.tools.read_file{ max_bytes = 100 }, { path = "big.txt" }, ctx)
    expect(out).to_match("^   1\tline 001\n")
    expect(out).to_match("\n%[truncated: file exceeds the 100%-byte read cap %(900 bytes%)")
    expect(out:find("line 012", 1, true)).to_be_nil() -- the cut line is not shown
    expect(ctx.observations.reads[ws .. "/big.txt"]).to_be_nil() -- not a complete read
    _, err = call(rig.tools.read_file(), { path = "." }, ctx_for(ws))
    expect(err).to_match("is a directory")
    _, err = call(rig.tools.read_file(), { path = "missing" }, ctx_for(ws))
    expect(err).to_match("'missing'.*No such file")
  end)

  it("refuses a call that was never prepared", function()
    local ws = workspace()
    local t = rig.tools.read_file()
    local req = assert(t:check_request{ summary = "read a.txt",
      requirements = { { kind = "filesystem.read", match = ws .. "/a.txt" } } })
    local out, err = t.run(req, ctx_for(ws))
    expect(out).to_be_nil()
    expect(err).to_match("permission denied: this call was not prepared")
  end)
end)

describe("rig.tools.write_file and edit_file", function()
  it("creates a file with its parents and reports it", function()
    local ws = workspace()
    local ctx = ctx_for(ws)
    local out, err, req = call(rig.tools.write_file(), { path = "new/deep/f.txt", content = "hello\n" }, ctx)
    expect(err).to_be_nil()
    expect(out).to_be("created new/deep/f.txt (6 bytes)")
    expect(get(ws .. "/new/deep/f.txt")).to_be("hello\n")
    expect(req.requirements[1].kind).to_be("filesystem.write")
    expect(req.requirements[1].match).to_be(ws .. "/new/deep/f.txt")
    expect(req.summary).to_match("^write new/deep/f.txt %(6 bytes, sha256 %x+%)$")
    expect(sh("ls -A '" .. ws .. "/new/deep'")).to_be("f.txt\n") -- no temp file left
  end)

  it("refuses a stale write: unread, changed since read, or appeared meanwhile", function()
    local ws = workspace()
    put(ws .. "/f.txt", "v1\n")
    local w = rig.tools.write_file()
    local obs = {}
    local _, err = call(w, { path = "f.txt", content = "v2\n" }, ctx_for(ws, obs))
    expect(err).to_match("stale write: read 'f.txt' completely first")
    expect(get(ws .. "/f.txt")).to_be("v1\n")
    assert(call(rig.tools.read_file(), { path = "f.txt" }, ctx_for(ws, obs)))
    put(ws .. "/f.txt", "changed by someone\n")
    _, err = call(w, { path = "f.txt", content = "v2\n" }, ctx_for(ws, obs))
    expect(err).to_match("stale write: 'f.txt' changed since it was read")
    expect(get(ws .. "/f.txt")).to_be("changed by someone\n")
    assert(call(rig.tools.read_file(), { path = "f.txt" }, ctx_for(ws, obs)))
    local out = call(w, { path = "f.txt", content = "v2\n" }, ctx_for(ws, obs))
    expect(out).to_be("wrote f.txt (3 bytes)")
    expect(get(ws .. "/f.txt")).to_be("v2\n")
    -- our own write counts as read: a second write goes through
    expect(call(w, { path = "f.txt", content = "v3\n" }, ctx_for(ws, obs))).to_be("wrote f.txt (3 bytes)")
    -- a file that appears between prepare and run is not overwritten
    local ctx = ctx_for(ws, {})
    local req
    req, ctx.prepared = w.prepare({ path = "g.txt", content = "mine" }, ctx)
    req = assert(w:check_request(assert(req)))
    put(ws .. "/g.txt", "theirs")
    out, err = w.run(req, ctx)
    expect(out).to_be_nil()
    expect(err).to_match("stale write: read 'g.txt' completely first")
    expect(get(ws .. "/g.txt")).to_be("theirs")
  end)

  it("keeps an existing file's mode, refuses links, traversal, the write guard and big content", function()
    local ws = workspace()
    put(ws .. "/run.sh", "echo 1\n")
    sh("chmod 0755 '" .. ws .. "/run.sh'")
    local obs = {}
    assert(call(rig.tools.read_file(), { path = "run.sh" }, ctx_for(ws, obs)))
    assert(call(rig.tools.write_file(), { path = "run.sh", content = "echo 2\n" }, ctx_for(ws, obs)))
    expect(sh("stat -c %a '" .. ws .. "/run.sh'")).to_be("755\n")
    local w = rig.tools.write_file{ max_bytes = 10 }
    local _, err = call(w, { path = "../x", content = "" }, ctx_for(ws))
    expect(err).to_match("outside the workspace")
    _, err = call(w, { path = ".git/hooks/pre-commit", content = "" }, ctx_for(ws))
    expect(err).to_match("'.git/hooks/pre%-commit' is protected: it is inside the git entry '.git'")
    _, err = call(rig.tools.write_file{ deny = { "secret" } }, { path = "secret/x", content = "" }, ctx_for(ws))
    expect(err).to_match("refused by the write guard %(secret%)")
    _, err = call(w, { path = "a", content = string.rep("x", 11) }, ctx_for(ws))
    expect(err).to_match("larger than 10 bytes")
    -- a parent directory swapped for a link out after prepare
    sh("mkdir '" .. ws .. "/d'")
    local ctx = ctx_for(ws)
    local req
    req, ctx.prepared = w.prepare({ path = "d/new", content = "x" }, ctx)
    req = assert(w:check_request(assert(req)))
    sh("rmdir '" .. ws .. "/d'; ln -s '" .. base .. "/outside' '" .. ws .. "/d'")
    local out
    out, err = w.run(req, ctx)
    expect(out).to_be_nil()
    expect(err).to_match("'d' is a symbolic link")
    expect(get(base .. "/outside/new")).to_be_nil()
  end)

  it("edits one exact match and shows a short diff", function()
    local ws = workspace()
    put(ws .. "/m.lua", "local a = 1\nlocal b = 2\nlocal c = 3\nreturn a + b + c\n")
    local obs = {}
    assert(call(rig.tools.read_file(), { path = "m.lua" }, ctx_for(ws, obs)))
    local out, err = call(rig.tools.edit_file(), { path = "m.lua", old = "local c = 3",
      new = "local c = 30\nlocal d = 4" }, ctx_for(ws, obs))
    expect(err).to_be_nil()
    expect(out).to_be("edited m.lua: 1 replacement\n@@ line 3 @@\n local a = 1\n local b = 2\n"
      .. "-local c = 3\n+local c = 30\n+local d = 4\n")
    expect(get(ws .. "/m.lua")).to_be("local a = 1\nlocal b = 2\nlocal c = 30\nlocal d = 4\nreturn a + b + c\n")
  end)

  it("refuses an ambiguous or missing match, and an edit without a fresh read", function()
    local ws = workspace()
    put(ws .. "/x.txt", "foo bar foo\n")
    local e = rig.tools.edit_file()
    local obs = {}
    local _, err = call(e, { path = "x.txt", old = "foo", new = "baz" }, ctx_for(ws, obs))
    expect(err).to_match("stale write: read 'x.txt' completely first")
    assert(call(rig.tools.read_file(), { path = "x.txt" }, ctx_for(ws, obs)))
    _, err = call(e, { path = "x.txt", old = "foo", new = "baz" }, ctx_for(ws, obs))
    expect(err).to_be("'old' is ambiguous in 'x.txt': 2 matches (give more context or set replace_all)")
    _, err = call(e, { path = "x.txt", old = "qux", new = "baz" }, ctx_for(ws, obs))
    expect(err).to_be("'old' not found in 'x.txt'")
    _, err = call(e, { path = "x.txt", old = "", new = "baz" }, ctx_for(ws, obs))
    expect(err).to_match("'old' is empty")
    local out = call(e, { path = "x.txt", old = "foo", new = "baz", replace_all = true }, ctx_for(ws, obs))
    expect(out).to_match("^edited x.txt: 2 replacements\n")
    expect(get(ws .. "/x.txt")).to_be("baz bar baz\n")
    _, err = call(rig.tools.edit_file{ max_bytes = 4 }, { path = "x.txt", old = "baz", new = "q" },
      ctx_for(ws, obs))
    expect(err).to_match("'x.txt' is larger than 4 bytes")
    _, err = call(e, { path = "gone.txt", old = "a", new = "b" }, ctx_for(ws, obs))
    expect(err).to_match("does not exist")
    put(ws .. "/x.txt", "changed\n")
    _, err = call(e, { path = "x.txt", old = "changed", new = "z" }, ctx_for(ws, obs))
    expect(err).to_match("stale write: 'x.txt' changed since it was read")
  end)
end)

describe("rig.tools write_file and edit_file on what the host interprets", function()
  -- what git, editors, agents and CI on the host would run: never written, at any depth
  local function repo_ws()
    local ws = workspace()
    sh("cd '" .. ws .. "' && git init -q . && mkdir -p vendor/lib src fixtures && git init -q vendor/lib && "
      .. "git init -q --bare fixtures/bare.git && echo x > src/a.c && git config include.path ../common.gitconfig")
    return ws
  end

  it("refuses them with a message naming the rule, and writes everything else", function()
    local ws = repo_ws()
    local w = rig.tools.write_file()
    local cases = {
      { "vendor/lib/.git/commondir", "inside the git entry 'vendor/lib/.git'" },
      { ".git/config", "inside the git entry '.git'" },
      { "src/.git", "it is the git entry 'src/.git'" },
      { "new/sub/.git/HEAD", "inside the git entry 'new/sub/.git'" },
      { ".vscode/tasks.json", "'.vscode' at the top of the workspace is on the protected list" },
      { ".envrc", "'.envrc' at the top of the workspace is on the protected list" },
      { ".claude/settings.json", "'.claude' at the top of the workspace" },
      { ".github/workflows/x.yml", "'.github/workflows' at the top of the workspace" },
      { ".mcp.json", "'.mcp.json'" },
      { ".idea/workspace.xml", "'.idea'" },
      { ".devcontainer/devcontainer.json", "'.devcontainer'" },
      { ".cursor/mcp.json", "'.cursor'" },
      { "vendor/lib/.envrc", "'.envrc' at the top of a repository" },
      { "fixtures/bare.git/hooks/post-checkout", "inside 'fixtures/bare.git', a git directory" },
      { "common.gitconfig", "the config of the repository at '.' includes it" },
    }
    for _, c in ipairs(cases) do
      local _, err = call(w, { path = c[1], content = "x" }, ctx_for(ws))
      if not err or not err:find(c[2], 1, true) then
        error("write_file " .. c[1] .. ": " .. tostring(err))
      end
      expect(err).to_match("is protected: ")
      expect(get(ws .. "/" .. c[1]) == "x").to_be(false)
    end
    -- positive control: ordinary paths beside them are written
    for _, path in ipairs{ "src/b.c", "vendor/lib/src.c", ".github/CODEOWNERS", "docs/.vscode-notes.md",
                           "sub/.idea/x" } do
      local out, err = call(w, { path = path, content = "ok" }, ctx_for(ws))
      expect(err).to_be_nil()
      expect(out).to_match("^created ")
      expect(get(ws .. "/" .. path)).to_be("ok")
    end
  end)

  it("edit_file refuses them too, and a profile's names join the list", function()
    local ws = repo_ws()
    put(ws .. "/.envrc", "export A=1\n")
    local obs = {}
    local _, err = call(rig.tools.edit_file(), { path = ".envrc", old = "A=1", new = "A=2" }, ctx_for(ws, obs))
    expect(err).to_match("'.envrc' is protected: '.envrc' at the top of the workspace")
    expect(get(ws .. "/.envrc")).to_be("export A=1\n")
    put(ws .. "/.tool-versions", "lua 5.4\n")
    assert(call(rig.tools.read_file(), { path = ".tool-versions" }, ctx_for(ws, obs)))
    local e = rig.tools.edit_file{ protect = { ".tool-versions" } }
    _, err = call(e, { path = ".tool-versions", old = "5.4", new = "5.1" }, ctx_for(ws, obs))
    expect(err).to_match("'%.tool%-versions' at the top of the workspace is on the protected list")
    -- positive control: without the name it is edited
    local out
    out, err = call(rig.tools.edit_file(), { path = ".tool-versions", old = "5.4", new = "5.1" }, ctx_for(ws, obs))
    expect(err).to_be_nil()
    expect(out).to_match("^edited ")
    expect(function() rig.tools.write_file{ protect = { "../x" } } end).to_fail("option 'protect%[1%]'")
  end)

  it("checks again at run: a repository made after prepare is not written into", function()
    local ws = workspace()
    sh("mkdir -p '" .. ws .. "/lib'")
    local w = rig.tools.write_file()
    local ctx = ctx_for(ws)
    local req
    req, ctx.prepared = w.prepare({ path = "lib/HEAD", content = "ref: refs/heads/m\n" }, ctx)
    req = assert(w:check_request(assert(req)))
    sh("mkdir -p '" .. ws .. "/lib/objects' '" .. ws .. "/lib/refs'")
    local out, err = w.run(req, ctx)
    expect(out).to_be_nil()
    expect(err).to_match("'lib/HEAD' is protected: a HEAD beside objects/ and refs/")
    expect(get(ws .. "/lib/HEAD")).to_be_nil()
  end)
end)

-- ---- bash through a real sandbox executor ----

local function executors(ws, command)
  local profile = rig.sandbox.profile{ workspace_root = ws, workspace_read = "allow",
    workspace_write = "allow", host_read = "allow", host_write = "deny", network = "deny",
    command = command or "allow" }
  n_ws = n_ws + 1
  return assert(rig.sandbox.executors(profile, { scratch_root = base .. "/scratch" .. n_ws }))
end

describe("rig.tools.bash", function()
  it("runs a command in cwd with its output and exit code, and forgets reads", function()
    local ws = workspace()
    sh("mkdir '" .. ws .. "/sub'")
    local set = executors(ws)
    local t = rig.tools.bash{ executor = assert(set:get("b")) }
    local obs = { reads = { ["/x"] = "h" } }
    local out, err, req = call(t, { command = "pwd; echo oops >&2; exit 3", cwd = "sub" }, ctx_for(ws, obs))
    expect(err).to_be_nil()
    expect(out).to_be(ws .. "/sub\n[stderr]\noops\n[exit code: 3]")
    expect(req.command).to_be("pwd; echo oops >&2; exit 3")
    expect(req.cwd).to_be(ws .. "/sub")
    expect(req.requirements[1].kind).to_be("command.execute")
    expect(req.requirements[1].match).to_be("pwd; echo oops >&2; exit 3")
    expect(next(obs.reads)).to_be_nil()
    _, err = call(t, { command = "echo a\necho b" }, ctx_for(ws))
    expect(err).to_match("the command must be one line")
    _, err = call(t, { command = "pwd", cwd = "../" }, ctx_for(ws))
    expect(err).to_match("outside the workspace")
    set:close()
  end)

  it("turns an approval into a grant for exactly that spawn", function()
    local ws = workspace()
    local set = executors(ws, "gated")
    local t = rig.tools.bash{ executor = assert(set:get("g")) }
    local out, err = call(t, { command = "echo granted" }, ctx_for(ws))
    expect(out).to_be_nil()
    expect(err).to_match("gated by the profile and no grant was given")
    local approved = { { kind = "command.execute", scope = "echo granted", match = "echo granted" } }
    out, err = call(t, { command = "echo granted" }, ctx_for(ws, {}, approved))
    expect(err).to_be_nil()
    expect(out).to_be("granted\n[exit code: 0]")
    -- an approval of another command is no grant for this one
    out, err = call(t, { command = "echo other" }, ctx_for(ws, {}, approved))
    expect(out).to_be_nil()
    expect(err).to_match("no grant was given")
    set:close()
  end)

  it("times out, and caps output keeping head and tail", function()
    local ws = workspace()
    local set = executors(ws)
    local t = rig.tools.bash{ executor = assert(set:get("t")), max_output = 1000 }
    local t0 = rig.now()
    local out, err = call(t, { command = "echo started; sleep 20", timeout = 1 }, ctx_for(ws))
    expect(out).to_be_nil()
    expect(err).to_match("^command timed out after 1 s\nstarted\n")
    expect(rig.now() - t0 < 10).to_be(true)
    out, err = call(t, { command = "echo HEAD; seq 1 5000; echo TAIL" }, ctx_for(ws))
    expect(err).to_be_nil()
    expect(out).to_match("^HEAD\n")
    expect(out).to_match("\nTAIL\n%[exit code: 0%]$")
    expect(out).to_match("%[output truncated: omitted %d+ of %d+ bytes%]")
    expect(#out < 1200).to_be(true)
    local ok, e2 = pcall(rig.tools.bash, { executor = set:get("t"), timeout = 200 })
    expect(ok).to_be(false)
    expect(tostring(e2)).to_match("above 'max_timeout'")
    expect(t:check_args{ command = "x", timeout = 121 }).to_be_nil()
    set:close()
  end)

  it("says what the check after the run moved aside", function()
    local ws = workspace()
    sh("cd '" .. ws .. "' && git init -q .")
    local set = executors(ws)
    local t = rig.tools.bash{ executor = assert(set:get("m")) }
    local out, err = call(t, { command = "git init -q inner && echo made" }, ctx_for(ws))
    expect(err).to_be_nil()
    expect(out).to_match("^made\n%[sandbox: '" .. ws:gsub("%p", "%%%0") .. "/inner/%.git' moved to '"
      .. ws:gsub("%p", "%%%0") .. "/inner/%.git%.luarig%-quarantine': a %.git the command made inside a repository")
    expect(out).to_match("%[exit code: 0%]$")
    expect(get(ws .. "/inner/.git/HEAD")).to_be_nil()
    expect(get(ws .. "/inner/.git.luarig-quarantine/HEAD")).to_match("^ref:")
    set:close()
  end)
end)

-- ---- glob and grep ----

local function tree(ws)
  sh("cd '" .. ws .. "' && mkdir -p src/lib .git/objects node_modules/m docs && "
    .. "printf 'alpha\\nneedle one\\n' > src/a.lua && printf 'needle two\\nNeedle three\\n' > src/lib/b.lua && "
    .. "printf 'needle\\n' > node_modules/m/c.lua && printf 'needle\\n' > .git/config && "
    .. "printf 'x = 10%%\\n' > docs/readme.md && printf 'needle\\0bin' > src/bin.dat && "
    .. "ln -s '" .. base .. "/outside' src/out")
  put(base .. "/outside/z.lua", "needle outside\n")
end

describe("rig.tools.glob", function()
  it("matches ** and * inside the workspace, skipping .git and node_modules", function()
    local ws = workspace()
    tree(ws)
    local g = rig.tools.glob()
    local out, err, req = call(g, { pattern = "**/*.lua" }, ctx_for(ws))
    expect(err).to_be_nil()
    expect(out).to_be("src/a.lua\nsrc/lib/b.lua\n")
    expect(req.requirements[1].match).to_be(ws)
    out = call(g, { pattern = "*", root = "src" }, ctx_for(ws))
    expect(out).to_be("src/a.lua\nsrc/bin.dat\nsrc/lib/\nsrc/out\n")
    out = call(g, { pattern = "*.nothing" }, ctx_for(ws))
    expect(out).to_be("no matches\n")
    local _, e2 = call(g, { pattern = "../*" }, ctx_for(ws))
    expect(e2).to_match("without '..'")
    _, e2 = call(g, { pattern = "*", root = "src/out" }, ctx_for(ws))
    expect(e2).to_match("resolves outside the workspace")
  end)

  it("caps the results", function()
    local ws = workspace()
    sh("cd '" .. ws .. "' && for i in $(seq 1 30); do : > f$i.txt; done")
    local out = call(rig.tools.glob{ max_results = 10 }, { pattern = "*.txt" }, ctx_for(ws))
    local n = select(2, out:gsub("%.txt\n", ""))
    expect(n).to_be(10)
    expect(out).to_match("%[truncated: more than 10 matches; refine the pattern%]\n$")
    out = call(rig.tools.glob{ max_entries = 5 }, { pattern = "*.txt" }, ctx_for(ws))
    expect(out).to_match("%[stopped: looked at 5 entries%]")
  end)
end)

describe("rig.tools.grep", function()
  it("finds a plain string, skipping .git, node_modules, binaries and links out", function()
    local ws = workspace()
    tree(ws)
    local g = rig.tools.grep()
    local out, err = call(g, { pattern = "needle" }, ctx_for(ws))
    expect(err).to_be_nil()
    expect(out).to_be("src/a.lua:2:needle one\nsrc/lib/b.lua:1:needle two\n")
    out = call(g, { pattern = "needle", ignore_case = true, path = "src/lib" }, ctx_for(ws))
    expect(out).to_be("src/lib/b.lua:1:needle two\nsrc/lib/b.lua:2:Needle three\n")
    out = call(g, { pattern = "10%" }, ctx_for(ws)) -- plain: % is literal
    expect(out).to_be("docs/readme.md:1:x = 10%\n")
    out = call(g, { pattern = "^n%a+ t", lua_pattern = true }, ctx_for(ws))
    expect(out).to_be("src/lib/b.lua:1:needle two\n")
    out = call(g, { pattern = "zzz" }, ctx_for(ws))
    expect(out).to_be("no matches\n")
    local _, e2 = call(g, { pattern = "[a", lua_pattern = true }, ctx_for(ws))
    expect(e2).to_match("invalid Lua pattern")
    _, e2 = call(g, { pattern = "x", path = "../outside" }, ctx_for(ws))
    expect(e2).to_match("outside the workspace")
  end)

  it("caps matches and long lines", function()
    local ws = workspace()
    sh("cd '" .. ws .. "' && seq 1 50 | sed 's/^/hit /' > many.txt")
    put(ws .. "/long.txt", "hit " .. string.rep("é", 400) .. "\n")
    local out = call(rig.tools.grep{ max_matches = 5, max_line = 20 }, { pattern = "hit" }, ctx_for(ws))
    local lines = {}
    for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
    expect(#lines).to_be(6)
    expect(lines[1]).to_match("^long.txt:1:hit [^\n]*…$")
    expect(#lines[1] < 40).to_be(true)
    expect(lines[6]).to_be("[truncated: more than 5 matches]")
  end)
end)

-- ---- fetch against a real server ----

local hits = {}
local srv = rig.http.server{ listen = "127.0.0.1:0", routes = {
  ["GET /hello"] = function(req)
    hits[#hits + 1] = req.headers and req.headers["x-token"]
    return { status = 200, headers = { ["content-type"] = "text/plain", ["set-cookie"] = "sid=s3cret" },
             body = "hello there" }
  end,
  ["POST /echo"] = function(req) return { status = 201, body = "got " .. (req.body or "") } end,
  ["GET /big"] = function() return { status = 200, body = string.rep("b", 5000) } end,
  ["GET /slow"] = function() rig.sleep(5) return { status = 200, body = "late" } end,
  ["GET /here"] = function() return { status = 302, headers = { location = "/hello" } } end,
  ["POST /see-other"] = function() return { status = 303, headers = { location = "hello" } } end,
  ["GET /away"] = function()
    return { status = 302, headers = { location = "http://localhost:1/steal?token=abc" } }
  end,
  ["GET /loop"] = function() return { status = 302, headers = { location = "/loop" } } end,
} }

describe("rig.tools.fetch", function()
  it("fetches with a network requirement and shows status, headers and body", function()
    local f = rig.tools.fetch()
    local out, err, req = call(f, { url = srv.url .. "/hello?k=secret", headers = { ["X-Token"] = "tok" } },
      ctx_for(nil))
    expect(err).to_be_nil()
    expect(out).to_match("^HTTP 200\n")
    expect(out).to_match("\ncontent%-type: text/plain\n")
    expect(out:find("s3cret", 1, true)).to_be_nil()
    expect(out).to_match("\n\nhello there$")
    expect(hits[#hits]).to_be("tok")
    expect(req.requirements[1].kind).to_be("network")
    expect(req.requirements[1].match).to_be("tcp://127.0.0.1:" .. srv.port)
    expect(req.summary:find("secret", 1, true)).to_be_nil()
    expect(req.summary:find("tok", 1, true)).to_be_nil()
    out = call(f, { url = srv.url .. "/echo", method = "POST", body = "abc" }, ctx_for(nil))
    expect(out).to_match("^HTTP 201\n.*\n\ngot abc$")
  end)

  it("refuses other schemes and credentials, without echoing them", function()
    local f = rig.tools.fetch()
    local _, err = call(f, { url = "file:///etc/passwd" }, ctx_for(nil))
    expect(err).to_match("only http and https")
    _, err = call(f, { url = "http://user:hunter2@127.0.0.1/" }, ctx_for(nil))
    expect(err).to_match("credentials")
    expect(err:find("hunter2", 1, true)).to_be_nil()
  end)

  it("follows redirects on the same origin only", function()
    local f = rig.tools.fetch()
    local out = call(f, { url = srv.url .. "/here" }, ctx_for(nil))
    expect(out).to_match("\n\nhello there$")
    out = call(f, { url = srv.url .. "/see-other", method = "POST", body = "x" }, ctx_for(nil))
    expect(out).to_match("\n\nhello there$")
    local _, err = call(f, { url = srv.url .. "/away?key=k3y" }, ctx_for(nil))
    expect(err).to_match("redirect to another origin refused %(from http://127.0.0.1:%d+ to http://localhost:1%)")
    expect(err:find("abc", 1, true)).to_be_nil()
    expect(err:find("k3y", 1, true)).to_be_nil()
    _, err = call(f, { url = srv.url .. "/loop" }, ctx_for(nil))
    expect(err).to_match("too many redirects")
  end)

  it("caps the body size and the time", function()
    local _, err = call(rig.tools.fetch{ max_bytes = 1000 }, { url = srv.url .. "/big" }, ctx_for(nil))
    expect(err).to_match("larger than the 1000%-byte cap")
    local t0 = rig.now()
    _, err = call(rig.tools.fetch(), { url = srv.url .. "/slow?q=zz9", timeout = 1 }, ctx_for(nil))
    expect(err).to_match("timed out after 1 s")
    expect(err:find("zz9", 1, true)).to_be_nil()
    expect(rig.now() - t0 < 4).to_be(true)
    expect(rig.tools.fetch():check_args{ url = "http://x/", timeout = 61 }).to_be_nil()
  end)

  after_all(function() srv:close() end)
end)

-- ---- end to end through a session ----

describe("rig.tools in a session", function()
  it("reads, edits and runs bash on a scripted model, the gate allowing", function()
    local ws = workspace()
    put(ws .. "/greet.sh", "echo hello\n")
    local set = executors(ws)
    local gate = rig.gate{ access = { ["filesystem.read"] = "allow", ["filesystem.write"] = "allow",
      network = "deny", ["command.execute"] = "allow" }, approver = "headless" }
    local model = rig.model.script{
      { tool_calls = { { name = "read_file", input = { path = "greet.sh" } } } },
      { tool_calls = { { name = "edit_file", input = { path = "greet.sh", old = "hello", new = "tools" } } } },
      { tool_calls = { { name = "bash", input = { command = "sh greet.sh" } } } },
      { text = "done" },
    }
    local loop = rig.loop{ name = "assistant", model = model, system = "be brief", gate = gate,
      tools = { rig.tools.read_file(), rig.tools.edit_file(),
                rig.tools.bash{ executor = assert(set:get("e2e")) } },
      policy_revision = "v1" }
    local r = rig.define{ loops = { loop }, primers = { "assistant" }, store = rig.store.memory() }
    local s = assert(r:session())
    s.workspace = ws
    local sub = s:subscribe{ loops = "all" }
    s:submit("change the greeting and run it")
    local last
    for ev in sub:events(20) do
      last = ev
      if ev.ends_turn then break end
    end
    expect(last.type).to_be("TurnDone")
    local results = {}
    for _, m in ipairs(s:history()) do
      if m.role == "tool" then results[#results + 1] = m.content[1] end
    end
    expect(#results).to_be(3)
    expect(results[1].content).to_be("   1\techo hello\n")
    expect(results[2].is_error).to_be(false)
    expect(results[2].content).to_match("^edited greet.sh: 1 replacement\n")
    expect(results[3].content).to_be("tools\n[exit code: 0]")
    expect(get(ws .. "/greet.sh")).to_be("echo tools\n")
    s:shutdown()
    set:close()
  end)

  it("a command approved always runs again without a gate, granted by the saved rule", function()
    local ws = workspace()
    local set = executors(ws, "gated")
    local perm = base .. "/perms-always.json"
    local gate = rig.gate{ access = { ["command.execute"] = "gated" },
      rules = rig.permissions.file(perm), approver = "interactive" }
    local model = rig.model.script{
      { tool_calls = { { name = "bash", input = { command = "echo once" } } } },
      { text = "first" },
      { tool_calls = { { name = "bash", input = { command = "echo once" } } } },
      { text = "second" },
    }
    local loop = rig.loop{ name = "assistant", model = model, system = "be brief", gate = gate,
      tools = { rig.tools.bash{ executor = assert(set:get("always")) } }, policy_revision = "v1" }
    local r = rig.define{ loops = { loop }, primers = { "assistant" }, store = rig.store.memory() }
    local s = assert(r:session())
    s.workspace = ws
    local sub = s:subscribe{ ephemeral = false }
    local gates = 0
    for _, input in ipairs{ "run it", "run it again" } do
      s:submit(input)
      for ev in sub:events(20) do
        if ev.type == "GateOpened" then gates = gates + 1; s:respond_gate(ev.gate_id, "approve_always") end
        if ev.ends_turn then expect(ev.type).to_be("TurnDone") break end
      end
    end
    expect(gates).to_be(1)
    local results = {}
    for _, m in ipairs(s:history()) do
      if m.role == "tool" then results[#results + 1] = m.content[1].content end
    end
    expect(#results).to_be(2)
    expect(results[1]).to_be("once\n[exit code: 0]")
    expect(results[2]).to_be("once\n[exit code: 0]")
    s:shutdown()
    set:close()
  end)
end)
