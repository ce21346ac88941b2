-- `luarig flow runs|show|log|dot|mermaid`: a real luarig process reading
-- the LMDB store a run of this process left behind.

local luarig = os.getenv("LUARIG") or "build/luarig"
local root = os.getenv("LUARIG_ROOT") or "."
local graph_path = root .. "/tests/flow/graph.lua"

local function tmpdir()
  local p = os.tmpname()
  os.remove(p)
  assert(os.execute("mkdir -p '" .. p .. "'"))
  return p
end

local function cli(...)
  local r = assert(rig.process.run{ argv = { luarig, "flow", ... }, timeout = 30 })
  return r.code, r.stdout, r.stderr
end

describe("luarig flow", function()
  local dir = tmpdir()
  local id
  do
    local store <close> = rig.store.lmdb{ root = dir }
    local run = assert(dofile(graph_path)("/dev/null"):start({}, { store = store }))
    id = run.id
    expect(select(3, run:wait())).to_be("interrupted")
    run:close()
  end

  it("lists runs with their status", function()
    local code, out = cli("runs", "--state", dir)
    expect(code).to_be(0)
    expect(out).to_match("^" .. id:gsub("%-", "%%-") .. "  crashy%s+interrupted step 8")
    local c2, js = cli("runs", "--state", dir, "--json")
    expect(c2).to_be(0)
    local list = rig.json.decode(js)
    expect(#list).to_be(1)
    expect(list[1].id).to_be(id)
  end)

  it("shows a run by a start of its id, with its open interrupt and checkpoints", function()
    local code, out = cli("show", "--state", dir, id:sub(1, 8))
    expect(code).to_be(0)
    expect(out).to_match("status    interrupted")
    expect(out).to_match("interrupt " .. id:gsub("%-", "%%-") .. "/9/1/ask#1 %(ask%)")
    expect(out).to_match("checkpoints 9:")
    local c2, js = cli("show", "--state", dir, id, "--json")
    expect(c2).to_be(0)
    expect(rig.json.decode(js).values.n).to_be(6)
  end)

  it("prints the journal one JSON event per line", function()
    local code, out = cli("log", "--state", dir, id)
    expect(code).to_be(0)
    local n, first = 0, nil
    for line in out:gmatch("[^\n]+") do
      n = n + 1
      local ev = assert(rig.json.decode(line))
      first = first or ev.type
    end
    expect(first).to_be("FlowStarted")
    expect(n).to_be(11) -- started, nine checkpoints, the interrupt
  end)

  it("fails clearly on unknown runs, missing stores and bad usage", function()
    local code, _, err = cli("show", "--state", dir, "ffffffff")
    expect(code).to_be(1)
    expect(err).to_match("luarig: no flow run 'ffffffff'")
    code, _, err = cli("runs", "--state", dir .. "/absent")
    expect(code).to_be(1)
    expect(err).to_match("no store at")
    code, _, err = cli("frobnicate")
    expect(code).to_be(2)
    expect(err).to_match("unknown flow command 'frobnicate'")
    code, _, err = cli("runs", "--bogus")
    expect(code).to_be(2)
    expect(err).to_match("unknown option '%-%-bogus'")
  end)

  it("renders a graph as DOT and Mermaid", function()
    local script = dir .. "/g.lua"
    local f = assert(io.open(script, "w"))
    f:write('return dofile("' .. graph_path .. '")("/dev/null")\n')
    f:close()
    local code, dot = cli("dot", script)
    expect(code).to_be(0)
    expect(dot).to_match('^digraph "crashy"')
    expect(dot).to_match('"count" %-> "fan" %[style=dashed%]')
    local c2, mm = cli("mermaid", script)
    expect(c2).to_be(0)
    expect(mm).to_match("^flowchart TD")
    expect(mm).to_match("work %-%-> ask")
    local c3, marked = cli("dot", script, "--run", id:sub(1, 8), "--state", dir)
    expect(c3).to_be(0)
    expect(marked).to_match('"ask" %[shape=box,style=filled,fillcolor=gold%];')
    local c4, mm2 = cli("mermaid", script, "--run", id, "--state", dir)
    expect(c4).to_be(0)
    expect(mm2).to_match("class ask current")
  end)

  it("renders a graph as SVG through Graphviz", function()
    local script = dir .. "/g.lua"
    if not os.execute("command -v dot >/dev/null 2>&1") then
      skip("Graphviz's dot is not installed (the SVG half)")
    end
    local c3, svg = cli("dot", script, "--svg")
    expect(c3).to_be(0)
    expect(svg).to_match("<svg")
  end)
end)
