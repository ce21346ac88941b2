-- The stdlib's module graph, read from the sources: rig.session's parts,
-- rig.delegation and rig.workspace require one way (no cycle, not even
-- through a require deferred into a function) and reach no other module's
-- internals through a back door (the runner's `_rt` table that
-- rig.delegation and rig.session_resume used is gone). An edge is a
-- `require "x"` anywhere in a file; `pcall(require, "x")`, an optional module
-- looked up by name (rig.define finds r:session() in rig.session that way, and
-- works without it), is not one.

local root = assert(os.getenv("LUARIG_ROOT"), "LUARIG_ROOT must name the source tree")

-- Every stdlib module: its name and its source.
local function modules()
  local out = {}
  local p = assert(io.popen("cd '" .. root .. "/stdlib' && find rig -name '*.lua' | sort"))
  for path in p:lines() do
    local name = path:gsub("%.lua$", ""):gsub("/init$", ""):gsub("/", ".")
    local f = assert(io.open(root .. "/stdlib/" .. path))
    out[name] = f:read("a")
    f:close()
  end
  p:close()
  return out
end

-- module -> { required module = true }, every require in the file wherever it stands.
local function graph(mods)
  local g = {}
  for name, src in pairs(mods) do
    local deps = {}
    for _, pat in ipairs { 'require%s*%(?%s*"([%w_.]+)"', "require%s*%(?%s*'([%w_.]+)'" } do
      for dep in src:gmatch(pat) do
        if mods[dep] and dep ~= name then deps[dep] = true end
      end
    end
    g[name] = deps
  end
  return g
end

-- The modules that can reach `from` again: a cycle through it, as a path, or nil.
local function cycle_through(g, from)
  local seen = {}
  local function walk(m, path)
    for dep in pairs(g[m] or {}) do
      if dep == from then return path .. " -> " .. dep end
      if not seen[dep] then
        seen[dep] = true
        local c = walk(dep, path .. " -> " .. dep)
        if c then return c end
      end
    end
    return nil
  end
  return walk(from, from)
end

local FAMILY = { "rig.session", "rig.session_base", "rig.session_output", "rig.session_compact",
  "rig.session_turn", "rig.session_replay", "rig.session_fork", "rig.session_resume",
  "rig.delegation", "rig.handoff", "rig.hooks", "rig.budget", "rig.workspace" }

describe("the stdlib's module graph", function()
  local mods = modules()
  local g = graph(mods)

  it("holds every part of rig.session", function()
    for _, m in ipairs(FAMILY) do
      expect(mods[m] ~= nil).to_be(true)
    end
    -- a plain require is seen (the graph is not vacuously empty)
    expect(g["rig.session"]["rig.session_turn"]).to_be(true)
    expect(g["rig.session_turn"]["rig.delegation"]).to_be(true)
  end)

  it("has no require cycle through rig.session's parts, rig.delegation or rig.workspace", function()
    for _, m in ipairs(FAMILY) do
      local c = cycle_through(g, m)
      if c then error("a require cycle: " .. c, 0) end
    end
  end)

  it("has no back door into the runner (rig.session._rt)", function()
    for name, src in pairs(mods) do
      if src:find("%._rt%f[^%w_]") then error(name .. " uses a ._rt back door", 0) end
    end
    expect(require("rig.session")._rt).to_be_nil()
  end)

  it("loads rig.delegation and rig.session_resume on their own, before rig.session", function()
    local saved = {}
    for _, m in ipairs(FAMILY) do saved[m], package.loaded[m] = package.loaded[m], nil end
    local ok, err = pcall(function()
      local d = require "rig.delegation"
      local r = require "rig.session_resume"
      expect(type(d.tools)).to_be("function")
      expect(type(r.resume)).to_be("function")
      expect(package.loaded["rig.session"]).to_be_nil()
      expect(package.loaded["rig.session_turn"]).to_be_nil()
    end)
    for _, m in ipairs(FAMILY) do package.loaded[m] = saved[m] end
    if not ok then error(err, 0) end
  end)
end)

describe("the rig table scripts see", function()
  it("does not re-export rig.core, and names what scripts need of it", function()
    expect(rig.core).to_be_nil()
    expect(require("rig").core).to_be_nil()
    local core = require "rig.core"
    for _, name in ipairs { "spawn", "sleep", "now", "time", "current", "cond", "read_line",
                            "isatty", "await_shutdown_signal", "bundle_read" } do
      expect(rig[name]).to_be(core[name])
    end
    local c, ready = rig.cond(), false
    local t = rig.spawn(function()
      while not ready do c:wait() end
      return "woken"
    end)
    ready = true
    c:signal()
    expect(t:wait(10)).to_be("woken")
  end)

  it("leaves rig.core out of the scripts that ship (scripts/)", function()
    local p = assert(io.popen("cd '" .. root .. "' && grep -rln 'rig\\.core' scripts || true"))
    local hits = p:read("a")
    p:close()
    expect(hits).to_be("")
  end)
end)
