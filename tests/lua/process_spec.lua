-- rig.process: run, spawn, pipes, signals, timeouts, cancellation, cleanup.

local process = rig.process

-- Runs f in a task of its own and returns the task once it waits inside f:
-- the task signals just before it calls f, and this one runs again only when
-- the task yields (the scheduler is cooperative), that is, blocked in f.
local function blocked_in(f)
  local c, entered = rig.cond(), false
  local t = rig.spawn(function()
    entered = true
    c:signal()
    return f()
  end)
  while not entered do c:wait() end
  return t
end

local function my_pid()
  local f = assert(io.open("/proc/self/stat"))
  local pid = f:read("n")
  f:close()
  return pid
end

-- A process counts as alive unless it is gone or a zombie.
local function alive(pid)
  local f = io.open("/proc/" .. pid .. "/stat")
  if not f then return false end
  local s = f:read("a") or ""
  f:close()
  local state = s:match("^%d+ %(.*%) (%a)")
  return state ~= nil and state ~= "Z" and state ~= "X"
end

-- Waits up to `secs` for every pid in the list to die.
local function all_dead(pids, secs)
  local deadline = rig.now() + (secs or 1)
  repeat
    local any = false
    for _, pid in ipairs(pids) do if alive(pid) then any = true end end
    if not any then return true end
    rig.sleep(0.02)
  until rig.now() > deadline
  return false
end

local function fd_count()
  local r = assert(process.run{ argv = { "ls", "/proc/" .. my_pid() .. "/fd" } })
  local n = 0
  for _ in r.stdout:gmatch("[^\n]+") do n = n + 1 end
  return n
end

-- Our children in state Z (the `cat` doing the listing is a child too, but alive).
local function zombies()
  local me = my_pid()
  local r = assert(process.run{ argv = { "sh", "-c", "cat /proc/[0-9]*/stat 2>/dev/null" } })
  local list = {}
  for line in r.stdout:gmatch("[^\n]+") do
    local pid, state, ppid = line:match("^(%d+) %(.*%) (%a) (%d+)")
    if pid and tonumber(ppid) == me and state == "Z" then list[#list + 1] = pid end
  end
  return list
end

local function no_zombies_soon()
  local deadline = rig.now() + 2
  while #zombies() > 0 do
    if rig.now() > deadline then return false end
    rig.sleep(0.02)
  end
  return true
end

describe("rig.process.run", function()
  it("returns the exit code, 0 and non-zero alike", function()
    local r = assert(process.run{ argv = { "true" } })
    expect(r.code).to_be(0)
    expect(r.signal).to_be_nil()
    expect(r.timed_out).to_be(false)
    expect(r.truncated).to_be(false)
    expect(math.type(r.pid)).to_be("integer")
    r = assert(process.run{ argv = { "sh", "-c", "exit 7" } })
    expect(r.code).to_be(7)
  end)

  it("reports the signal that ended the child", function()
    local r = assert(process.run{ argv = { "sh", "-c", "kill -TERM $$" } })
    expect(r.code).to_be_nil()
    expect(r.signal).to_be("SIGTERM")
  end)

  it("keeps stdout and stderr apart", function()
    local r = assert(process.run{ argv = { "sh", "-c", "echo out; echo err >&2; echo out2" } })
    expect(r.stdout).to_be("out\nout2\n")
    expect(r.stderr).to_be("err\n")
  end)

  it("round-trips 4 MiB of stdin through cat", function()
    local parts = {}
    for i = 1, 4096 do parts[i] = string.format("%05d", i) .. string.rep("abcdefgh", 127) .. "xy\n" end
    local data = table.concat(parts)
    expect(#data).to_be(4 << 20)
    local r = assert(process.run{ argv = { "cat" }, stdin = data, output_limit = 8 << 20 })
    expect(r.code).to_be(0)
    expect(#r.stdout).to_be(#data)
    expect(r.stdout == data).to_be(true)
    expect(r.truncated).to_be(false)
  end)

  it("does not mind a child that leaves stdin unread", function()
    local r = assert(process.run{ argv = { "true" }, stdin = string.rep("x", 4 << 20) })
    expect(r.code).to_be(0)
    r = assert(process.run{ argv = { "sh", "-c", "head -c 3; echo" }, stdin = string.rep("y", 1 << 20) })
    expect(r.stdout).to_be("yyy\n")
  end)

  it("gives the child /dev/null when stdin is nil", function()
    local r = assert(process.run{ argv = { "cat" } })
    expect(r.stdout).to_be("")
    expect(r.code).to_be(0)
  end)

  it("caps output per stream but keeps draining", function()
    local r = assert(process.run{ argv = { "sh", "-c", "head -c 3000000 /dev/zero; echo e >&2" },
                                  output_limit = 1000 })
    expect(r.code).to_be(0)  -- never blocked on a full pipe
    expect(#r.stdout).to_be(1000)
    expect(r.stderr).to_be("e\n")
    expect(r.truncated).to_be(true)
    r = assert(process.run{ argv = { "head", "-c", "2000000", "/dev/zero" } })
    expect(#r.stdout).to_be(1 << 20)  -- the default limit
    expect(r.truncated).to_be(true)
    r = assert(process.run{ argv = { "echo", "x" }, output_limit = 0 })
    expect(r.stdout).to_be("")
    expect(r.truncated).to_be(true)
  end)

  it("kills the whole group on timeout, grandchildren included", function()
    local t0 = rig.now()
    local r = assert(process.run{ argv = { "sh", "-c", "sleep 100 & echo $!; sleep 100" }, timeout = 0.3 })
    expect(rig.now() - t0).at_most(1.5)
    expect(r.timed_out).to_be(true)
    expect(r.signal).to_be("SIGKILL")
    expect(r.code).to_be_nil()
    local grandchild = tonumber(r.stdout:match("%d+"))
    expect(grandchild ~= nil).to_be(true)
    expect(all_dead({ grandchild, r.pid }, 1)).to_be(true)
  end)

  it("does not wait for a background child that holds the pipe past the timeout", function()
    local t0 = rig.now()
    local r = assert(process.run{ argv = { "sh", "-c", "sleep 100 & exit 0" }, timeout = 0.3 })
    expect(rig.now() - t0).at_most(1.5)
    expect(r.code).to_be(0)  -- the leader itself exited normally
    expect(r.timed_out).to_be(true)
  end)

  it("kills the group when the waiting task is cancelled", function()
    local marker = "lr-proc-cancel-" .. my_pid() .. "-" .. math.random(1 << 30)
    local t = rig.spawn(function()
      return process.run{ argv = { "sh", "-c", "sleep 100 & echo $! > /tmp/" .. marker .. "; sleep 100" } }
    end)
    local deadline = rig.now() + 5
    local f
    repeat rig.sleep(0.02); f = io.open("/tmp/" .. marker) until (f and f:read("a") ~= "") or rig.now() > deadline
    if f then f:close() end
    f = assert(io.open("/tmp/" .. marker))
    local grandchild = tonumber(f:read("a"):match("%d+"))
    f:close()
    os.remove("/tmp/" .. marker)
    expect(alive(grandchild)).to_be(true)
    local t0 = rig.now()
    t:cancel()
    local ok, _, code = t:wait()
    expect(ok).to_be_nil(); expect(code).to_be("cancelled")
    expect(all_dead({ grandchild }, 1)).to_be(true)
    expect(rig.now() - t0).at_most(1.5)
    local r = assert(process.run{ argv = { "pgrep", "-f", marker } })
    expect(r.stdout).to_be("")
  end)

  it("passes cwd and refuses a bad one", function()
    local r = assert(process.run{ argv = { "pwd" }, cwd = "/tmp" })
    expect(r.stdout).to_be("/tmp\n")
    local ok, msg, code = process.run{ argv = { "true" }, cwd = "/nonexistent/dir" }
    expect(ok).to_be_nil()
    expect(msg).to_be("process: cannot change to directory '/nonexistent/dir': No such file or directory")
    expect(code).to_be("ENOENT")
    ok, msg, code = process.run{ argv = { "true" }, cwd = "/etc/passwd" }
    expect(ok).to_be_nil(); expect(code).to_be("ENOTDIR")
  end)

  it("reports a missing program as ENOENT", function()
    local ok, msg, code = process.run{ argv = { "nosuch" } }
    expect(ok).to_be_nil()
    expect(msg).to_be("process: cannot run 'nosuch': No such file or directory")
    expect(code).to_be("ENOENT")
    ok, msg, code = process.run{ argv = { "/nonexistent/prog" } }
    expect(ok).to_be_nil(); expect(code).to_be("ENOENT")
    ok, msg, code = process.run{ argv = { "/etc/passwd" } }
    expect(ok).to_be_nil(); expect(code).to_be("EACCES")
  end)

  it("adds to, removes from and replaces the environment", function()
    local r = assert(process.run{ argv = { "sh", "-c", "echo $LR_T1" }, env = { LR_T1 = "one two" } })
    expect(r.stdout).to_be("one two\n")
    local all = assert(process.run{ argv = { "env" } }).stdout
    local name = all:match("^([%w_]+)=")
    expect(name ~= nil).to_be(true)
    r = assert(process.run{ argv = { "env" }, env = { [name] = false } })
    expect(r.stdout:find("\n" .. name .. "=", 1, true) == nil and r.stdout:find(name .. "=", 1, true) ~= 1).to_be(true)
    expect(r.stdout:find("PATH=", 1, true) ~= nil or not all:find("PATH=", 1, true)).to_be(true)
    r = assert(process.run{ argv = { "env" }, env_clear = true, env = { A = "1", B = false } })
    expect(r.stdout).to_be("A=1\n")
    r = assert(process.run{ argv = { "env" }, env_clear = true })
    expect(r.stdout).to_be("")
    r = assert(process.run{ argv = { "env" }, env = { LR_NUM = 42 } })
    expect(r.stdout:find("LR_NUM=42\n", 1, true) ~= nil).to_be(true)
  end)

  it("runs 50 processes in parallel tasks", function()
    local tasks = {}
    for i = 1, 50 do
      tasks[i] = rig.spawn(function() return process.run{ argv = { "sh", "-c", "exit " .. (i % 5) } } end)
    end
    for i = 1, 50 do
      local r = assert(tasks[i]:wait())
      expect(r.code).to_be(i % 5)
    end
  end)

  it("raises on misuse, naming the field", function()
    expect(function() process.run{ argv = { "true" }, tiemout = 1 } end).to_fail("rig.process.run: unknown option 'tiemout'")
    expect(function() process.run{ argv = {} } end).to_fail("'argv' must be a non%-empty list of strings")
    expect(function() process.run{} end).to_fail("'argv' must be a non%-empty list of strings")
    expect(function() process.run{ argv = "ls" } end).to_fail("'argv' must be")
    expect(function() process.run{ argv = { "echo", 1 } } end).to_fail("'argv%[2%]' must be a string")
    expect(function() process.run{ argv = { "true" }, cwd = 1 } end).to_fail("'cwd' must be a string")
    expect(function() process.run{ argv = { "true" }, timeout = -1 } end).to_fail("'timeout'")
    expect(function() process.run{ argv = { "true" }, output_limit = 1.5 } end).to_fail("'output_limit'")
    expect(function() process.run{ argv = { "true" }, env = { ["A=B"] = "x" } } end).to_fail("'env' keys")
    expect(function() process.run{ argv = { "true" }, env = { A = {} } } end).to_fail("'env.A' must be a string or false")
    expect(function() process.run{ argv = { "true" }, env_clear = 1 } end).to_fail("'env_clear'")
    expect(function() process.run{ argv = { "true" }, stdout = "pipe" } end).to_fail("unknown option 'stdout'")
    expect(function() process.run("ls") end).to_fail("expects an options table")
    expect(function() process.spawn{ argv = { "true" }, stdout = "file" } end).to_fail("'stdout' must be")
    expect(function() process.spawn{ argv = { "true" }, output_limit = 1 } end).to_fail("unknown option 'output_limit'")
  end)
end)

describe("rig.process.spawn", function()
  it("streams lines while the process still runs", function()
    local p = assert(process.spawn{ argv = { "sh", "-c", "for i in 1 2 3; do echo $i; sleep 0.3; done" } })
    expect(math.type(p.pid)).to_be("integer")
    local lines, running_at_first = {}, nil
    for line in p:lines("stdout") do
      lines[#lines + 1] = line
      if #lines == 1 then
        local ok, msg, code = p:wait(0)
        running_at_first = ok == nil and code == "timeout"
      end
    end
    expect(lines).to_equal({ "1", "2", "3" })
    expect(running_at_first).to_be(true)
    local st = assert(p:wait())
    expect(st.code).to_be(0)
    expect(st.timed_out).to_be(false)
    p:close()
  end)

  it("writes to stdin, closes it, and reads back", function()
    local p = assert(process.spawn{ argv = { "cat" }, stdin = "pipe" })
    expect(p:write("hello\n")).to_be(true)
    expect(p:read("stdout")).to_be("hello\n")
    expect(p:write("world")).to_be(true)
    expect(p:close_stdin()).to_be(true)
    local rest = {}
    for chunk in function() return p:read("stdout") end do rest[#rest + 1] = chunk end
    expect(table.concat(rest)).to_be("world")
    expect(p:read("stdout")).to_be_nil()
    expect(p:read("stderr")).to_be_nil()
    expect(p:wait().code).to_be(0)
    local ok, msg, code = p:write("more")
    expect(ok).to_be_nil(); expect(code).to_be("closed")
    p:close()
  end)

  it("streams 4 MiB both ways with backpressure", function()
    local data = string.rep("0123456789abcdef", 1 << 18)
    local p <close> = assert(process.spawn{ argv = { "cat" }, stdin = "pipe", stderr = "null" })
    local writer = rig.spawn(function()
      assert(p:write(data))
      p:close_stdin()
      return true
    end)
    local got, n = {}, 0
    while true do
      local chunk = p:read("stdout")
      if not chunk then break end
      expect(#chunk).at_most(64 << 10)
      n = n + #chunk
      got[#got + 1] = chunk
    end
    expect(writer:wait()).to_be(true)
    expect(n).to_be(#data)
    expect(table.concat(got) == data).to_be(true)
  end)

  it("passes stdin given as data", function()
    local p <close> = assert(process.spawn{ argv = { "tr", "a-z", "A-Z" }, stdin = "shout" })
    expect(p:read()).to_be("SHOUT")
    expect(function() p:write("x") end).to_fail("stdin is not a pipe")
  end)

  it("reports a child that closed its stdin", function()
    local p <close> = assert(process.spawn{ argv = { "sh", "-c", "exec 0<&-; echo ready; sleep 5" }, stdin = "pipe" })
    expect(p:read()).to_be("ready\n")
    local ok, msg, code = p:write(string.rep("x", 1 << 20))
    expect(ok).to_be_nil()
    expect(code).to_be("closed")
    expect(msg).to_be("process: the child closed its stdin")
  end)

  it("times out a wait without ending the process", function()
    local p = assert(process.spawn{ argv = { "sleep", "100" }, stdout = "null", stderr = "null" })
    local ok, msg, code = p:wait(0.05)
    expect(ok).to_be_nil(); expect(msg).to_be("timeout"); expect(code).to_be("timeout")
    expect(alive(p.pid)).to_be(true)
    expect(p:kill("SIGTERM")).to_be(true)
    local st = assert(p:wait(5))
    expect(st.signal).to_be("SIGTERM"); expect(st.code).to_be_nil()
    p:close()
  end)

  it("kills the group, by name, number or default", function()
    local p = assert(process.spawn{ argv = { "sh", "-c", "sleep 100 & echo $!; sleep 100" } })
    local grandchild = tonumber(p:read():match("%d+"))
    expect(p:kill()).to_be(true)
    expect(p:wait().signal).to_be("SIGKILL")
    expect(all_dead({ grandchild }, 1)).to_be(true)
    p:close()
    p = assert(process.spawn{ argv = { "sleep", "100" } })
    expect(p:kill(15)).to_be(true)
    expect(p:wait().signal).to_be("SIGTERM")
    p:close()
    p = assert(process.spawn{ argv = { "sleep", "100" } })
    expect(p:kill("INT")).to_be(true)
    expect(p:wait().signal).to_be("SIGINT")
    expect(function() p:kill("SIGBOGUS") end).to_fail("unknown signal 'SIGBOGUS'")
    p:close()
  end)

  it("applies a timeout to a spawned process", function()
    local p <close> = assert(process.spawn{ argv = { "sleep", "100" }, timeout = 0.2 })
    local st = assert(p:wait(5))
    expect(st.timed_out).to_be(true)
    expect(st.signal).to_be("SIGKILL")
  end)

  it("kills the group on close and on collection", function()
    local p = assert(process.spawn{ argv = { "sh", "-c", "sleep 100 & echo $!; sleep 100" } })
    local pid, grandchild = p.pid, tonumber(p:read():match("%d+"))
    p:close()
    expect(all_dead({ pid, grandchild }, 1)).to_be(true)
    expect(p.pid).to_be(pid)
    expect(function() p:read() end).to_fail("closed")
    expect(function() p:wait() end).to_fail("closed")
    p:close() -- twice is fine

    do
      local q = assert(process.spawn{ argv = { "sleep", "100" } })
      pid = q.pid
    end
    collectgarbage(); collectgarbage()
    expect(all_dead({ pid }, 1)).to_be(true)
  end)

  it("kills the group when a task blocked in read or wait is cancelled", function()
    local p = assert(process.spawn{ argv = { "sleep", "100" } })
    local t = blocked_in(function() return p:read("stdout") end)
    t:cancel()
    expect(select(3, t:wait())).to_be("cancelled")
    local st = assert(p:wait(2))
    expect(st.signal).to_be("SIGKILL")
    p:close()
    p = assert(process.spawn{ argv = { "sleep", "100" } })
    t = blocked_in(function() return p:wait() end)
    t:cancel()
    expect(select(3, t:wait())).to_be("cancelled")
    expect(assert(p:wait(2)).signal).to_be("SIGKILL")
    p:close()
  end)

  it("wakes a reader when another task closes the handle", function()
    local p = assert(process.spawn{ argv = { "sleep", "100" } })
    local t = blocked_in(function() return p:read() end)
    p:close()
    local ok, msg, code = t:wait(2)
    expect(ok).to_be_nil(); expect(code).to_be("closed")
  end)

  it("supports inherit and null streams", function()
    local p = assert(process.spawn{ argv = { "true" }, stdout = "null", stderr = "inherit" })
    expect(p:wait().code).to_be(0)
    expect(function() p:read("stdout") end).to_fail("stdout is not a pipe")
    expect(function() p:read("stdin") end).to_fail("invalid option")
    p:close()
  end)
end)

describe("process hygiene", function()
  it("leaks no file descriptors", function()
    -- Earlier cases' children are reaped (their pidfds closed) when their
    -- SIGKILL lands: let that settle first, or "before" counts their fds.
    collectgarbage(); collectgarbage()
    local before, settle = fd_count(), rig.now() + 10
    repeat
      rig.sleep(0.1)
      local n = fd_count()
      local stable = n == before
      before = n
    until stable or rig.now() > settle
    for _ = 1, 5 do
      assert(process.run{ argv = { "sh", "-c", "echo x; echo y >&2" }, stdin = "in" })
      local p = assert(process.spawn{ argv = { "cat" }, stdin = "pipe" })
      p:write("z")
      p:close()
      local ok = process.run{ argv = { "nosuch-program" } }
      assert(ok == nil)
      ok = process.run{ argv = { "true" }, cwd = "/nonexistent" }
      assert(ok == nil)
    end
    do local q = process.spawn{ argv = { "sleep", "100" } } end
    collectgarbage(); collectgarbage()
    -- Closed children are reaped (and their pidfds closed) once SIGKILL lands.
    local deadline, now = rig.now() + 10, fd_count()
    while now ~= before and rig.now() < deadline do rig.sleep(0.05); now = fd_count() end
    expect(now).to_be(before)
  end)

  it("leaves no zombies", function()
    for _ = 1, 3 do
      local p = assert(process.spawn{ argv = { "sleep", "100" } })
      p:close()
      p = assert(process.spawn{ argv = { "true" } })
      p:wait()
      p:close()
      assert(process.run{ argv = { "true" } })
      assert(process.run{ argv = { "sleep", "100" }, timeout = 0.05 })
    end
    do local q = process.spawn{ argv = { "true" } } end
    rig.sleep(0.05)
    collectgarbage(); collectgarbage()
    expect(no_zombies_soon()).to_be(true)
  end)
end)
