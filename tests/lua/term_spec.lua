-- rig.read_line and rig.isatty: a line from standard input read
-- while the loop keeps running (a child luarig with a pipe for stdin).

local luarig = os.getenv("LUARIG") or "build/luarig"

local function child(code, stdin)
  return assert(rig.process.spawn{ argv = { luarig, "-e", code }, stdin = stdin or "pipe",
    stdout = "pipe", stderr = "pipe" })
end

local function read_all(p)
  local out = {}
  for l in p:lines("stdout") do out[#out + 1] = l end
  return table.concat(out, "\n")
end

describe("rig.read_line", function()
  it("returns lines without their newline, then nil at the end", function()
    local p = child("for _ = 1, 3 do print(tostring(rig.read_line())) end")
    p:write("yes\n\nlast")
    p:close_stdin()
    expect(read_all(p)).to_be("yes\n\nlast")
    expect(p:wait(10).code).to_be(0)
    p:close()
  end)

  it("waits without blocking other tasks, and stops at the newline", function()
    local p = child("local t = rig.spawn(function() for _ = 1, 3 do rig.sleep(0.02) "
      .. "io.write('tick ') io.flush() end end) print(rig.read_line()) t:wait() "
      .. "print(rig.read_line(3)) print(rig.read_line(3))")
    rig.sleep(0.5)
    p:write("typed\nabcdef\n")
    p:close_stdin()
    expect(read_all(p)).to_be("tick tick tick typed\nabc\ndef")
    expect(p:wait(10).code).to_be(0)
    p:close()
  end)

  it("is cancelled with its task", function()
    local p = child("local t = rig.spawn(rig.read_line) rig.sleep(0.05) "
      .. "t:cancel() print(select(3, t:wait()))")
    expect(read_all(p)).to_be("cancelled")
    expect(p:wait(10).code).to_be(0)
    p:close()
  end)

  it("reads a file or /dev/null directly, and refuses a bad cap", function()
    local r = assert(rig.process.run{ argv = { "/bin/sh", "-c", "'" .. luarig
      .. "' -e 'print(rig.read_line(), rig.isatty(0))' </dev/null" } })
    expect(r.stdout).to_be("nil\tfalse\n")
    local ok, err = pcall(rig.read_line, 0)
    expect(ok).to_be(false)
    expect(tostring(err)).to_match("between 1 and 65536")
    ok, err = pcall(rig.isatty, 3)
    expect(tostring(err)).to_match("must be 0, 1 or 2")
  end)
end)
