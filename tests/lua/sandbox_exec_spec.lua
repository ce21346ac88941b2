-- rig.sandbox executors: runs confined for real (the helper, the view,
-- Landlock), output and exit codes, head + tail truncation, timeouts and
-- cancellation killing the whole tree, HOME per key, writes outside the
-- workspace (with the unconfined positive control), the scrubbed
-- environment, grants, spawn, and the set's lifecycle.

local sandbox = rig.sandbox
local process = rig.process

local function sh(cmd)
  return assert(process.run{ argv = { "sh", "-c", cmd } })
end

local function my_pid()
  local f = assert(io.open("/proc/self/stat"))
  local pid = f:read("n")
  f:close()
  return pid
end

local base = "/tmp/lr-exec-spec-" .. my_pid() .. "-" .. math.random(1 << 30)
local ws = base .. "/ws"
local outside = base .. "/outside"
sh("mkdir -p '" .. ws .. "' '" .. outside .. "'")
local scratch_n = 0
local function scratch()
  scratch_n = scratch_n + 1
  return base .. "/scratch" .. scratch_n
end

local function exists(path)
  local f = io.open(path)
  if f then f:close() end
  return f ~= nil
end

-- Processes on the host whose command line holds marker.
local function running(marker)
  local r = assert(process.run{ argv = { "pgrep", "-f", marker } }) -- pgrep never lists itself
  return r.stdout ~= ""
end

local function gone_soon(marker, secs)
  local deadline = rig.now() + (secs or 2)
  while running(marker) do
    if rig.now() > deadline then return false end
    rig.sleep(0.05)
  end
  return true
end

-- A copy of sleep named by a marker, in the workspace (so it runs inside).
local function marker_sleep(tag)
  local m = "lr-exec-marker-" .. my_pid() .. "-" .. tag
  sh("cp /bin/sleep '" .. ws .. "/" .. m .. "'")
  return m, ws .. "/" .. m
end

local function trusted(extra)
  local t = {
    workspace_root = ws, workspace_read = "allow", workspace_write = "allow",
    host_read = "allow", host_write = "deny", network = "deny", command = "allow",
  }
  for k, v in pairs(extra or {}) do t[k] = v end
  return sandbox.profile(t)
end

local set = assert(sandbox.executors(trusted(), { scratch_root = scratch(), max = 4 }))
local ex = assert(set:get("main"))

describe("rig.sandbox executors", function()
  it("runs a command and returns its output and exit code", function()
    local r = assert(ex:run{ argv = { "sh", "-c", "echo out; echo err >&2; exit 3" } })
    expect(r.code).to_be(3)
    expect(r.stdout).to_be("out\n")
    expect(r.stderr).to_be("err\n")
    expect(r.truncated).to_be(false)
    expect(r.timed_out).to_be(false)
    expect(r.report.tier).to_be("A")
    expect(r.report.guarantees.write_boundary.enforced).to_be(true)
    local r2 = assert(ex:run{ command = "cat; pwd", stdin = "hello\n" })
    expect(r2.stdout).to_be("hello\n" .. ws .. "\n")
    expect(r2.code).to_be(0)
  end)

  it("keeps the head and the tail of a long output with a marker", function()
    local r = assert(ex:run{ argv = { "seq", "1", "20000" }, output_limit = 1000 })
    local full = {}
    for i = 1, 20000 do full[i] = tostring(i) end
    full = table.concat(full, "\n") .. "\n"
    expect(r.truncated).to_be(true)
    expect(r.code).to_be(0)
    expect(r.stdout:sub(1, 500)).to_be(full:sub(1, 500))
    expect(r.stdout:sub(-500)).to_be(full:sub(-500))
    local n = r.stdout:match("\n%[\xe2\x80\xa6 (%d+) bytes omitted \xe2\x80\xa6%]\n")
    expect(tonumber(n)).to_be(#full - 1000)
    -- under the limit: nothing omitted
    local r2 = assert(ex:run{ argv = { "seq", "1", "10" }, output_limit = 1000 })
    expect(r2.truncated).to_be(false)
    expect(r2.stdout).to_be("1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n")
  end)

  it("kills the whole tree on timeout", function()
    local m, path = marker_sleep("timeout")
    local t0 = rig.now()
    local r = assert(ex:run{ command = "'" .. path .. "' 300 & '" .. path .. "' 301", timeout = 0.5 })
    expect(rig.now() - t0).at_most(5)
    expect(r.timed_out).to_be(true)
    expect(gone_soon(m)).to_be(true)
  end)

  it("kills the whole tree when the waiting task is cancelled", function()
    local m, path = marker_sleep("cancel")
    local t = rig.spawn(function()
      return ex:run{ command = "setsid '" .. path .. "' 300 & '" .. path .. "' 301" }
    end)
    local deadline = rig.now() + 5
    repeat rig.sleep(0.05) until running(m) or rig.now() > deadline
    expect(running(m)).to_be(true) -- the control: it was running
    local t0 = rig.now()
    t:cancel()
    local ok, _, code = t:wait()
    expect(ok).to_be_nil(); expect(code).to_be("cancelled")
    expect(gone_soon(m)).to_be(true)
    expect(rig.now() - t0).at_most(2.5)
  end)

  -- A helper's exit tears its namespaces down (a millisecond or more): the
  -- reaper tells the run's end first, once its pid namespace is empty
  -- (--end-fd, sandbox/sandbox.h). Here the helper is stopped, so it cannot
  -- exit: the run must still return, output and code complete.
  it("returns a run once its sandbox is empty, before its helper has exited", function()
    local s <close> = assert(sandbox.executors(trusted(), { scratch_root = scratch() }))
    local e = assert(s:get("end")) -- a set's first run: its helper is this process's child
    local fifo, ready = ws .. "/end-fifo", ws .. "/end-ready"
    sh("rm -f '" .. fifo .. "' '" .. ready .. "'; mkfifo '" .. fifo .. "'")
    local t = rig.spawn(function()
      return e:run{ command = "echo before; touch end-ready; read x < end-fifo; echo after; exit 7" }
    end)
    local deadline = rig.now() + 10
    repeat rig.sleep(0.05) until exists(ready) or rig.now() > deadline
    expect(exists(ready)).to_be(true)
    local r = assert(process.run{ argv = { "pgrep", "-P", tostring(my_pid()), "-f", "__sandbox-helper --end-fd" } })
    local helper = r.stdout:match("%d+")
    expect(helper).to_be_truthy()
    assert(process.run{ argv = { "kill", "-STOP", helper } })
    local let_go -- a guard, so that a run that waits for the helper fails instead of hanging
    local guard = rig.spawn(function()
      rig.sleep(10)
      let_go = true
      process.run{ argv = { "kill", "-CONT", helper } }
      return true
    end)
    sh("echo x > '" .. fifo .. "'")
    local res = assert(t:wait())
    local f = io.open("/proc/" .. helper .. "/stat")
    local state = f and f:read("a"):match("%) (%a)")
    if f then f:close() end
    guard:cancel()
    assert(process.run{ argv = { "kill", "-CONT", helper } })
    expect(let_go).to_be_nil()
    expect(state).to_be("T") -- still there, stopped: the end came before its exit
    expect(res.code).to_be(7)
    expect(res.stdout).to_be("before\nafter\n")
    sh("rm -f '" .. fifo .. "' '" .. ready .. "'")
  end)

  it("gives each key its own HOME and TMPDIR, memoized", function()
    local a, b = assert(set:get("a")), assert(set:get("b"))
    expect(set:get("a")).to_be(a)
    expect(a.home ~= b.home).to_be(true)
    local ra = assert(a:run{ command = 'echo "$HOME $TMPDIR"; echo x > "$HOME/mine"; echo y > "$TMPDIR/t"' })
    expect(ra.code).to_be(0)
    expect(ra.stdout).to_be(a.home .. " " .. a.tmpdir .. "\n")
    expect(exists(a.home .. "/mine")).to_be(true)
    local rb = assert(b:run{ command = 'ls -A "$HOME"; cat ' .. a.home .. '/mine' })
    expect(rb.stdout).to_be("") -- b's home is empty and a's is not in b's view
    expect(rb.code ~= 0).to_be(true)
  end)

  it("refuses writes outside the workspace; unconfined is the positive control", function()
    local target = outside .. "/pwned"
    local r = assert(ex:run{ command = "echo x > '" .. target .. "'" })
    expect(r.code ~= 0).to_be(true)
    expect(exists(target)).to_be(false)
    local inside = assert(ex:run{ command = "echo x > '" .. ws .. "/ok' && cat '" .. ws .. "/ok'" })
    expect(inside.stdout).to_be("x\n")
    local open = sandbox.profile{
      workspace_root = ws, workspace_read = "allow", workspace_write = "allow",
      host_read = "allow", host_write = "allow", network = "allow", command = "allow",
      isolation = "unconfined", ack_unconfined = true,
    }
    local uset = assert(sandbox.executors(open, { scratch_root = scratch() }))
    local u = assert(uset:get("u"))
    local ru = assert(u:run{ command = "echo x > '" .. target .. "'" })
    expect(ru.code).to_be(0)
    expect(exists(target)).to_be(true)
    expect(ru.report.unconfined).to_be(true)
    os.remove(target)
    uset:close()
  end)

  it("keeps .git/hooks and .git/config read-only inside the writable workspace", function()
    sh("mkdir -p '" .. ws .. "/deep/r/.git/hooks' && : > '" .. ws .. "/deep/r/.git/config'")
    local r = assert(ex:run{ command = "echo x > deep/r/.git/hooks/pre-commit" })
    expect(r.code ~= 0).to_be(true)
    expect(exists(ws .. "/deep/r/.git/hooks/pre-commit")).to_be(false)
    local r2 = assert(ex:run{ command = "echo x >> deep/r/.git/config" })
    expect(r2.code ~= 0).to_be(true)
    local r3 = assert(ex:run{ command = "echo x > deep/r/file && cat deep/r/file" }) -- the control
    expect(r3.stdout).to_be("x\n")
  end)

  it("scrubs the environment", function()
    local r = assert(ex:run{ argv = { "env" }, env = { OPENAI_API_KEY = "passed", EXTRA = "1" } })
    local names = {}
    for name in r.stdout:gmatch("([^=\n]+)=[^\n]*") do names[name] = true end
    expect(names.OPENAI_API_KEY).to_be(true) -- passed explicitly
    expect(names.EXTRA).to_be(true)
    expect(names.HOME).to_be(true)
    expect(names.TMPDIR).to_be(true)
    local allowed = { PATH = 1, LANG = 1, TERM = 1, TZ = 1, USER = 1, LOGNAME = 1, SHELL = 1,
      HOME = 1, TMPDIR = 1, OPENAI_API_KEY = 1, EXTRA = 1, PWD = 1, SHLVL = 1, _ = 1 }
    for name in pairs(names) do
      if not allowed[name] and not name:match("^LC_") then
        error("unexpected variable " .. name .. " in the sandbox")
      end
    end
    expect(r.stdout:match("HOME=([^\n]*)")).to_be(ex.home)
  end)

  it("redeems grants: a gated write opens for the granted command only, once", function()
    local gset = assert(sandbox.executors(trusted{ workspace_write = "gated" }, { scratch_root = scratch() }))
    local g = assert(gset:get("g"))
    local cmd = "echo granted > '" .. ws .. "/g.txt'"
    local r = assert(g:run{ command = cmd })
    expect(r.code ~= 0).to_be(true) -- blocked by the OS without a grant
    expect(exists(ws .. "/g.txt")).to_be(false)
    local token = assert(g:grant{ kind = "filesystem.write", target = ws, command = cmd })
    local grants = { { token = token, kind = "filesystem.write", target = ws } }
    r = assert(g:run{ command = cmd, grants = grants })
    expect(r.code).to_be(0)
    expect(exists(ws .. "/g.txt")).to_be(true)
    local ok, msg, code = g:run{ command = cmd, grants = grants }
    expect(ok).to_be_nil(); expect(code).to_be("refused"); expect(msg).to_match("already used")
    local t2 = assert(g:grant{ kind = "filesystem.write", target = ws, command = cmd })
    ok, msg = g:run{ command = "echo other > x", grants = { { token = t2, kind = "filesystem.write", target = ws } } }
    expect(ok).to_be_nil(); expect(msg).to_match("another command")
    -- another executor's grant
    local h = assert(gset:get("h"))
    local t3 = assert(g:grant{ kind = "filesystem.write", target = ws, command = cmd })
    ok, msg = h:run{ command = cmd, grants = { { token = t3, kind = "filesystem.write", target = ws } } }
    expect(ok).to_be_nil(); expect(msg).to_match("another execution")
    os.remove(ws .. "/g.txt")
    gset:close()
  end)

  it("spawns a streaming handle", function()
    local p = assert(ex:spawn{ command = "echo hi; cat", stdin = "pipe" })
    expect(p:write("there\n")).to_be(true)
    p:close_stdin()
    local out = {}
    for line in p:lines() do out[#out + 1] = line end
    expect(table.concat(out, ",")).to_be("hi,there")
    expect(p:wait().code).to_be(0)
    p:close()
  end)

  it("honours spawn's stdout and stderr modes", function()
    local p = assert(ex:spawn{ command = "echo out; echo err >&2", stdout = "null" })
    local ok, err = pcall(p.read, p, "stdout")
    expect(ok).to_be(false)
    expect(tostring(err)).to_match("stdout is not a pipe")
    expect(p:read("stderr")).to_be("err\n")
    expect(p:wait().code).to_be(0)
    p:close()
    expect(pcall(ex.spawn, ex, { command = "true", stderr = "file" })).to_be(false)
  end)

  it("kills a spawned tree when the executor closes", function()
    local m, path = marker_sleep("spawnclose")
    local e2 = assert(set:get("closing"))
    local p = assert(e2:spawn{ command = "'" .. path .. "' 300", stdout = "null" })
    local deadline = rig.now() + 5
    repeat rig.sleep(0.05) until running(m) or rig.now() > deadline
    expect(running(m)).to_be(true)
    e2:close()
    expect(gone_soon(m)).to_be(true)
    expect(function() return e2:run{ argv = { "true" } } end).to_fail("closed")
  end)

  it("reports refusals and misuse", function()
    local ok, msg, code = ex:run{ argv = { "no-such-command-xyz" } }
    expect(ok).to_be_nil(); expect(code).to_be("not_found"); expect(msg).to_match("not found")
    ok, msg, code = ex:run{ argv = { "true" }, network = { "example.com:443" } }
    expect(ok).to_be_nil(); expect(code).to_be("refused"); expect(msg).to_match("example.com:443")
    ok, msg, code = ex:run{ argv = { "true" }, cwd = "/var" }
    expect(ok).to_be_nil(); expect(msg).to_match("outside the sandbox's view")
    expect(function() return ex:run{ argv = { "true" }, tiemout = 1 } end).to_fail("unknown option 'tiemout'")
    expect(function() return ex:run{ argv = { "true" }, command = "true" } end).to_fail("exactly one")
    expect(function() return ex:run{ argv = { "true" }, output_limit = 0 } end).to_fail("output_limit")
    expect(function() return set:get("../x") end).to_fail("key")
    expect(function() return sandbox.executors(trusted(), { nope = 1 }) end).to_fail("unknown option 'nope'")
    expect(ex:report().guarantees.read_boundary.enforced).to_be(true)
  end)

  it("caps the executors and removes the scratch root on close", function()
    local root = scratch()
    local s2 = assert(sandbox.executors(trusted(), { scratch_root = root, max = 1 }))
    local e = assert(s2:get("one"))
    local ok, msg = s2:get("two")
    expect(ok).to_be_nil(); expect(msg).to_match("maximum of 1")
    assert(e:run{ command = 'echo x > "$HOME/f"; mkdir "$HOME/d"; chmod 000 "$HOME/d"' })
    expect(exists(root)).to_be(true)
    local ok2, msg2 = sandbox.executors(trusted(), { scratch_root = root })
    expect(ok2).to_be_nil(); expect(msg2).to_match("already exists")
    s2:close()
    expect(exists(root)).to_be(false)
    expect(function() return s2:get("one") end).to_fail("closed")
    expect(function() return e:run{ argv = { "true" } } end).to_fail("closed")
  end)
end)

-- A set's runs after its first are forked by its pre-forked helper
-- (sandbox/zygote.c, host/executor.c), which is exec'd once; each must still
-- get a sandbox of its own. The first run of an executor leaves behind what
-- it can; the next runs must see none of it.
describe("a warm executor set", function()
  -- the pre-forked helpers of this process's sets (the file's first set has one too)
  local function zygote_pids()
    local r = assert(process.run{ argv = { "pgrep", "-P", tostring(my_pid()), "-f", "__sandbox-helper --zygote" } })
    local set = {}
    for p in r.stdout:gmatch("%d+") do set[p] = true end
    return set
  end
  local function zygotes()
    local n = 0
    for _ in pairs(zygote_pids()) do n = n + 1 end
    return n
  end

  it("runs through one pre-forked helper from the second run on, gone with the set", function()
    local s = assert(sandbox.executors(trusted(), { scratch_root = scratch() }))
    local before = zygotes()
    local e = assert(s:get("w"))
    expect(assert(e:run{ argv = { "true" } }).code).to_be(0)
    expect(zygotes()).to_be(before) -- a set that runs once never starts one
    for i = 1, 3 do
      local r = assert(e:run{ command = "exit " .. i })
      expect(r.code).to_be(i)
    end
    local f = assert(s:get("other")) -- another key of the same profile: the same helper
    expect(assert(f:run{ command = "echo $$" }).stdout).to_be("2\n") -- pid 1 is the reaper
    expect(zygotes()).to_be(before + 1)
    s:close()
    expect(zygotes()).to_be(before)
  end)

  it("survives its pre-forked helper dying: the run going fails saying so, the next ones exec", function()
    local s <close> = assert(sandbox.executors(trusted(), { scratch_root = scratch() }))
    local e = assert(s:get("w"))
    local m, path = marker_sleep("zygote")
    local before = zygote_pids()
    expect(assert(e:run{ argv = { "true" } }).code).to_be(0)
    local t = rig.spawn(function() return e:run{ command = "'" .. path .. "' 1; exit 3" } end)
    local deadline = rig.now() + 5
    repeat rig.sleep(0.05) until running(m) or rig.now() > deadline
    expect(running(m)).to_be(true)
    local mine = {}
    for p in pairs(zygote_pids()) do if not before[p] then mine[#mine + 1] = p end end
    expect(#mine).to_be(1) -- this set's
    assert(process.run{ argv = { "kill", "-KILL", mine[1] } })
    -- the run goes on (it has its own lifeline) and ends; how, only the zygote knew
    local ok, msg = t:wait()
    expect(ok).to_be_nil()
    expect(msg).to_match("pre%-forked helper died")
    expect(gone_soon(m)).to_be(true)
    local r2 = assert(e:run{ command = "echo after" }) -- started by an exec'd helper
    expect(r2.stdout).to_be("after\n")
    local now = zygote_pids()
    expect(now[mine[1]]).to_be_nil()
    for p in pairs(now) do expect(before[p]).to_be(true) end -- and no new one
  end)

  it("shows forked runs the same idmapped /etc as an exec'd one, and leaves them no fd of the zygote", function()
    -- as root the host's /etc is an idmapped clone (sandbox/helper.c): every owner 65534, so
    -- /etc/shadow is unreadable; the zygote makes the idmapping's user namespace once and
    -- gives each copy its own dup, which the target must not inherit
    local s <close> = assert(sandbox.executors(trusted(), { scratch_root = scratch() }))
    local e = assert(s:get("w"))
    local root = assert(process.run{ argv = { "id", "-u" } }).stdout == "0\n"
    local cmd = [[
      stat -c %u /etc/passwd
      head -c 1 /etc/shadow >/dev/null 2>&1 && echo shadow-read || echo shadow-refused
      for f in /proc/$$/fd/*; do readlink "$f"; done | grep -c '^user:' || true
    ]]
    local first
    for i = 1, 3 do -- the first run is exec'd, the others forked by the zygote
      local r = assert(e:run{ command = cmd })
      expect(r.code).to_be(0)
      if root then expect(r.stdout).to_be("65534\nshadow-refused\n0\n") end
      if i == 1 then first = r.stdout else expect(r.stdout).to_be(first) end
    end
  end)

  -- A process's children (pgrep never lists itself) and its parent.
  local function children(pid)
    local r = assert(process.run{ argv = { "pgrep", "-P", tostring(pid) } })
    local t = {}
    for p in r.stdout:gmatch("%d+") do t[#t + 1] = p end
    return t
  end
  local function parent(pid)
    local f = io.open("/proc/" .. pid .. "/stat")
    if not f then return nil end
    local line = f:read("l")
    f:close()
    return line:match("%) %S+ (%d+)")
  end
  -- Whether every process of a process group has exited (a zombie not yet reaped by its
  -- parent counts: it runs nothing), once pidwait, on their pidfds, saw those in it end
  -- (the group of a copy holds it and its reaper).
  local function group_gone(pgid)
    process.run{ argv = { "timeout", "10", "pidwait", "-g", pgid } }
    for p in assert(process.run{ argv = { "pgrep", "-g", pgid } }).stdout:gmatch("%d+") do
      local f = io.open("/proc/" .. p .. "/stat")
      local line = f and f:read("l")
      if f then f:close() end
      if line and line:match("%) (%S+)") ~= "Z" then return false end
    end
    return true
  end
  -- The pre-forked helper of a set made after before was taken.
  local function zygote_of(before)
    for p in pairs(zygote_pids()) do if not before[p] then return p end end
    error("the set has no pre-forked helper")
  end
  -- The copy the zygote prepared after a set's second run: its only child then (that
  -- run's own copy was forked and reaped before its end was told; the next one was
  -- forked when the run was handed out, before).
  local function first_copy(z)
    local c = children(z)
    expect(#c).to_be(1)
    return c[1]
  end
  -- A run of e whose command says it started (through a FIFO the test waits on) and
  -- then becomes a marker; its task and the command's pid.
  local function run_marked(e, tag)
    local m, path = marker_sleep(tag)
    local fifo = ws .. "/" .. m .. ".started"
    sh("rm -f '" .. fifo .. "' && mkfifo '" .. fifo .. "'")
    local t = rig.spawn(function()
      return e:run{ command = "echo > '" .. fifo .. "' && exec '" .. path .. "' 1" }
    end)
    assert(process.run{ argv = { "timeout", "10", "sh", "-c", "read l < '" .. fifo .. "'" } })
    return t, assert(process.run{ argv = { "pgrep", "-o", "-f", m } }).stdout:match("%d+")
  end
  -- Until the copy's mount namespace holds a mount at path (its view is built): each
  -- wait ends at the namespace's next change (findmnt --poll on its mountinfo).
  local function wait_bound(copy, path)
    local function bound()
      local f = io.open("/proc/" .. copy .. "/mountinfo")
      if not f then return false end
      local t = f:read("a")
      f:close()
      for line in t:gmatch("[^\n]+") do
        if line:match("^%S+ %S+ %S+ %S+ (%S+)") == path then return true end
      end
      return false
    end
    local deadline = rig.now() + 10
    while not bound() do
      assert(rig.now() < deadline, "the prepared copy did not bind " .. path)
      process.run{ argv = { "findmnt", "--poll", "--task", copy, "--first-only", "--timeout", "200" } }
    end
  end

  it("prepares the next run's sandbox while the set waits, runs it there, and ends it with the set", function()
    local s = assert(sandbox.executors(trusted(), { scratch_root = scratch() }))
    local e = assert(s:get("w"))
    local before = zygote_pids()
    for _ = 1, 2 do expect(assert(e:run{ argv = { "true" } }).code).to_be(0) end
    local z = zygote_of(before)
    local copy = first_copy(z)
    local t, target = run_marked(e, "prepared")
    expect(target).to_be_truthy()
    -- the run's command is the child of the prepared copy's reaper
    expect(parent(parent(target))).to_be(copy)
    expect(assert(t:wait()).code).to_be(0)
    -- the next copy was forked when this run was handed out; with the set, it and the zygote go
    local copy2
    for _, c in ipairs(children(z)) do if c ~= copy then copy2 = c end end
    expect(copy2).to_be_truthy()
    s:close()
    expect(group_gone(z)).to_be(true)
    expect(group_gone(copy2)).to_be(true)
  end)

  it("keeps a prepared copy for each key that takes turns (each key's HOME is its own view)", function()
    local s <close> = assert(sandbox.executors(trusted(), { scratch_root = scratch() }))
    local keys = { a = assert(s:get("a")), b = assert(s:get("b")) }
    local before = zygote_pids()
    for _ = 1, 3 do
      expect(assert(keys.a:run{ argv = { "true" } }).code).to_be(0)
      expect(assert(keys.b:run{ argv = { "true" } }).code).to_be(0)
    end
    local z = zygote_of(before)
    for _, k in ipairs({ "a", "b" }) do
      local waiting = {}
      for _, c in ipairs(children(z)) do waiting[c] = true end
      local t, target = run_marked(keys[k], "turns-" .. k)
      expect(target).to_be_truthy()
      expect(waiting[parent(parent(target))]).to_be(true) -- a copy made before this run
      expect(assert(t:wait()).code).to_be(0)
    end
  end)

  it("ends a prepared copy with its pre-forked helper", function()
    local s <close> = assert(sandbox.executors(trusted(), { scratch_root = scratch() }))
    local e = assert(s:get("w"))
    local before = zygote_pids()
    for _ = 1, 2 do expect(assert(e:run{ argv = { "true" } }).code).to_be(0) end
    local z = zygote_of(before)
    local copy = first_copy(z)
    assert(process.run{ argv = { "kill", "-KILL", z } })
    expect(group_gone(z)).to_be(true) -- then the copy has its parent death signal: it forks no more
    expect(group_gone(copy)).to_be(true)
    expect(assert(e:run{ command = "echo after" }).stdout).to_be("after\n")
  end)

  it("gives a run its workspace as it is now, though it was replaced after the run's sandbox was prepared", function()
    local d = base .. "/replaced"
    sh("mkdir -p '" .. d .. "' && echo old > '" .. d .. "/f'")
    local s <close> = assert(sandbox.executors(trusted{ workspace_root = d }, { scratch_root = scratch() }))
    local e = assert(s:get("w"))
    local before = zygote_pids()
    for _ = 1, 2 do expect(assert(e:run{ argv = { "true" } }).code).to_be(0) end
    wait_bound(first_copy(zygote_of(before)), d)
    sh("mv '" .. d .. "' '" .. d .. ".old' && mkdir '" .. d .. "' && echo new > '" .. d .. "/f'")
    local r = assert(e:run{ command = "cat f && echo here > g" })
    expect(r.stdout).to_be("new\n")
    expect(exists(d .. "/g")).to_be(true)
    expect(exists(d .. ".old/g")).to_be(false)
  end)

  it("keeps a protected file read-only when it was replaced after the run's sandbox was prepared", function()
    local d = base .. "/replaced-git"
    sh("rm -rf '" .. d .. "' && mkdir -p '" .. d .. "' && cd '" .. d .. "' && git init -q .")
    local s <close> = assert(sandbox.executors(trusted{ workspace_root = d }, { scratch_root = scratch() }))
    local e = assert(s:get("w"))
    local before = zygote_pids()
    for _ = 1, 2 do expect(assert(e:run{ argv = { "true" } }).code).to_be(0) end
    wait_bound(first_copy(zygote_of(before)), d)
    -- another file under the same name (a rename, as an editor saves)
    sh("cd '" .. d .. "/.git' && cp config config.new && mv config.new config")
    local r = assert(e:run{ command = "echo '[lr-written]' >> .git/config && echo written || echo refused" })
    expect(r.stdout).to_be("refused\n")
    local f = assert(io.open(d .. "/.git/config"))
    expect(f:read("a"):find("[lr-written]", 1, true)).to_be_nil()
    f:close()
  end)

  it("gives a later run no file, process, IPC object or variable of an earlier one", function()
    local s <close> = assert(sandbox.executors(trusted(), { scratch_root = scratch() }))
    local e = assert(s:get("w"))
    local m, path = marker_sleep("warm")
    local leave = [[
      echo a > /tmp/left && echo a > /dev/shm/left && echo a > /run/left || exit 9
      ipcmk -M 4096 >/dev/null && ipcmk -Q >/dev/null || exit 8
      setsid ']] .. path .. [[' 300 </dev/null >/dev/null 2>&1 &
      n=0 # until it runs (the control below counts it)
      until for p in /proc/[0-9]*; do cat $p/comm 2>/dev/null; done | grep -q ']] .. m:sub(1, 15) .. [['; do
        n=$((n + 1)); [ $n -lt 2000 ] || exit 7; sleep 0.01
      done
      echo "$LEFT $$"
    ]]
    local look = [[
      ls -A /tmp /dev/shm /run | grep -c '^left$'
      ipcs -m | grep -c '^0x'; ipcs -q | grep -c '^0x'
      for p in /proc/[0-9]*; do cat $p/comm; done | grep -c ']] .. m:sub(1, 15) .. [['
      echo "${LEFT-unset} $$"
    ]]
    for round = 1, 2 do -- the first round's first run is exec'd, every other forked
      local r1 = assert(e:run{ command = leave, env = { LEFT = "yes" } })
      expect(r1.code).to_be(0)
      expect(r1.stdout).to_be("yes 2\n")
      local r2 = assert(e:run{ command = look })
      expect(r2.code).to_be(0)
      expect(r2.stdout).to_be("0\n0\n0\n0\nunset 2\n")
      expect(gone_soon(m)).to_be(true)
    end
    -- the control: within one run all of it is seen
    local r = assert(e:run{ command = leave .. look, env = { LEFT = "yes" } })
    expect(r.stdout).to_be("yes 2\n3\n1\n1\n1\nyes 2\n")
  end)
end)

-- Files the host interprets later (sandbox/protect.c): the placeholders of a
-- run, the check after it (run and spawn), the profile's protect options.
describe("rig.sandbox executors and the files the host interprets", function()
  local function pws(name)
    local d = base .. "/" .. name
    sh("rm -rf '" .. d .. "' && mkdir -p '" .. d .. "' && cd '" .. d .. "' && git init -q .")
    return d
  end
  local function protected_set(d, protect)
    return assert(sandbox.executors(sandbox.profile{
      workspace_root = d, workspace_write = "allow", network = "deny", command = "allow",
      protect = protect }, { scratch_root = scratch() }))
  end

  it("holds missing names with placeholders during the run and removes them after", function()
    local d = pws("ph")
    local s2 = protected_set(d)
    local e = assert(s2:get("ph"))
    local r = assert(e:run{ command = "ls -a; echo x > .envrc || echo refused; echo {} > .vscode/tasks.json" })
    expect(r.stdout).to_match("\n%.vscode\n")   -- there while it runs
    expect(r.stdout).to_match("refused")
    expect(r.stderr).to_match("Read%-only file system")
    expect(exists(d .. "/.vscode")).to_be(false)  -- gone after
    expect(exists(d .. "/.envrc")).to_be(false)
    expect(exists(d .. "/.git/commondir")).to_be(false)
    expect(r.moved_aside).to_be_nil()
    s2:close()
  end)

  it("moves aside a repository made inside a repository, and says so", function()
    local d = pws("mv")
    local s2 = protected_set(d)
    local e = assert(s2:get("mv"))
    local r = assert(e:run{ command = "git init -q sub && mkdir -p other && git init -q --bare other/b.git" })
    expect(r.code).to_be(0)
    expect(#r.moved_aside).to_be(2)
    expect(table.concat(r.moved_aside, "\n")).to_match("sub/%.git' moved to '[^']*sub/%.git%.luarig%-quarantine'")
    expect(table.concat(r.moved_aside, "\n")).to_match("other/b%.git/HEAD' moved to")
    expect(exists(d .. "/sub/.git")).to_be(false)
    expect(exists(d .. "/sub/.git.luarig-quarantine/HEAD")).to_be(true)
    -- the same in a spawned process, once it is gone
    local p = assert(e:spawn{ command = "git init -q sub2", stdout = "null" })
    assert(p:wait())
    p:close()
    expect(exists(d .. "/sub2/.git")).to_be(false)
    expect(exists(d .. "/sub2/.git.luarig-quarantine")).to_be(true)
    s2:close()
  end)

  it("refuses a tree beyond the walk's cap, naming the field, and makes .git read-only on request", function()
    local d = pws("cap")
    sh("cd '" .. d .. "' && mkdir -p many && for i in $(seq 1 60); do : > many/f$i; done")
    local s2 = protected_set(d, { max_entries = 40 })
    local ok, msg, code = assert(s2:get("c")):run{ argv = { "true" } }
    expect(ok).to_be_nil()
    expect(code).to_be("refused")
    expect(msg).to_match("more than 40 entries")
    expect(msg).to_match("protect%.max_entries")
    s2:close()
    local s3 = protected_set(d, { git = "readonly" })
    local r = assert(assert(s3:get("r")):run{ command = "touch .git/x || echo refused; touch many/ok" })
    expect(r.stdout).to_match("refused")
    expect(exists(d .. "/.git/x")).to_be(false)
    expect(exists(d .. "/many/ok")).to_be(true)
    expect(r.report.guarantees.protected_files.how).to_match("the whole git directory")
    s3:close()
  end)
end)

-- Leaves nothing behind (the spec's own set too).
describe("cleanup", function()
  it("removes the spec's files", function()
    set:close()
    sh("rm -rf '" .. base .. "'")
    expect(exists(base)).to_be(false)
  end)
end)
