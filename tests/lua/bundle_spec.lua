-- rig.bundle_read: the manifest of a verified bundle, or nil, message, code;
-- rig.bundle: the same manifest, inside the bundle that runs.
local root = os.getenv("LUARIG_ROOT") or "."
local luarig = os.getenv("LUARIG") or "build/luarig"

local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  assert(os.execute("mkdir -p " .. d .. "/app/lib"))
  return d
end

local function write(path, s)
  local f = assert(io.open(path, "wb")); f:write(s); f:close()
end

describe("rig.bundle_read", function()
  it("returns the manifest of a packed bundle", function()
    local d = tmpdir()
    write(d .. "/app/main.lua", "return 1\n")
    write(d .. "/app/lib/util.lua", "return 2\n")
    write(d .. "/app/rig.json", '{"name":"spec","version":"2.0.1","description":"d"}')
    assert(os.execute(luarig .. " pack " .. d .. "/app -o " .. d .. "/s.rig >/dev/null"))
    local m = assert(rig.bundle_read(d .. "/s.rig"))
    expect(m.name).to_be("spec"); expect(m.version).to_be("2.0.1")
    expect(m.entry).to_be("main"); expect(m.description).to_be("d")
    expect(m.format).to_be(1); expect(m.luarig).to_be(rig.version)
    expect(#m.files).to_be(2)
    expect(m.files[1].path).to_be("lib/util.lua"); expect(m.files[1].size).to_be(9)
    expect(m.files[2].sha256).to_match("^%x+$")
    os.execute("rm -rf " .. d)
  end)

  it("refuses a hostile bundle with nil, message, code", function()
    local d = tmpdir()
    assert(os.execute("python3 " .. root .. "/tests/bundle/hostile.py dotdot " .. d .. "/x.rig"))
    local m, msg, code = rig.bundle_read(d .. "/x.rig")
    expect(m).to_be_nil()
    expect(msg).to_match("entry '%.%./evil.lua' escapes the bundle")
    expect(code).to_be("refused")
    local _, msg2, code2 = rig.bundle_read(d .. "/none.rig")
    expect(msg2).to_match("cannot open")
    expect(code2).to_be("ENOENT")
    expect(function() rig.bundle_read() end).to_fail("bad argument")
    os.execute("rm -rf " .. d)
  end)
end)

describe("rig.bundle", function()
  it("is nil outside a bundle", function()
    expect(rig.bundle).to_be_nil()
  end)

  it("is the manifest rig.bundle_read returns, plus path and read", function()
    local d = tmpdir()
    write(d .. "/app/main.lua", [[
local keys = {}
for k in pairs(rig.bundle) do keys[#keys + 1] = k end
table.sort(keys)
print(table.concat(keys, " "))
print(rig.json.encode(rig.bundle.files))
io.write(rig.bundle.read("lib/util.lua"))
]])
    write(d .. "/app/lib/util.lua", "return 2\n")
    write(d .. "/app/rig.json", '{"name":"spec","version":"2.0.1"}')
    assert(os.execute(luarig .. " pack " .. d .. "/app -o " .. d .. "/s.rig >/dev/null"))
    local p = assert(io.popen(luarig .. " run " .. d .. "/s.rig"))
    local out = p:read("a")
    expect(p:close()).to_be(true)
    local keys, files, util = out:match("^([^\n]*)\n([^\n]*)\n(.*)$")
    expect(keys).to_be("entry files format luarig name path read version")
    local m = assert(rig.bundle_read(d .. "/s.rig"))
    expect(files).to_be(rig.json.encode(m.files))
    expect(util).to_be("return 2\n")
    os.execute("rm -rf " .. d)
  end)
end)
