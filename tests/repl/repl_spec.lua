-- rig.repl without a terminal: the pretty-printer, compiling, completion.
local repl = require "rig.repl"
local pretty = repl.pretty
local G = debug.getregistry()[2] -- the real globals (specs run in their own environment)

describe("rig.repl.pretty", function()
  it("prints scalars like Lua source", function()
    expect(pretty(42)).to_be("42")
    expect(pretty(1.5)).to_be("1.5")
    expect(pretty(nil)).to_be("nil")
    expect(pretty(true)).to_be("true")
    expect(pretty('say "hi"\n\t\\')).to_be('"say \\"hi\\"\\n\\t\\\\"')
    expect(pretty("\0\27")).to_be('"\\000\\027"')
  end)

  it("prints the sequence part first, then keys sorted", function()
    expect(pretty({ 3, 2, 1 })).to_be("{ 3, 2, 1 }")
    expect(pretty({ b = 1, a = 2, [2] = "x" })).to_be('{ [2] = "x", a = 2, b = 1 }')
    expect(pretty({ ["not id"] = 1, ["end"] = 2, [true] = 3 })).to_be('{ ["end"] = 2, ["not id"] = 1, [true] = 3 }')
    expect(pretty({})).to_be("{}")
  end)

  it("caps depth, entries per table, and marks cycles", function()
    expect(pretty({ { { { { 1 } } } } })).to_be("{ { { { { … } } } } }")
    local big = {}
    for i = 1, 120 do big[i] = i end
    local s = pretty(big)
    expect(s).to_match("… 70 more\n}$")
    expect(s).to_match("^{\n  1, 2, 3,")
    local t = { name = "loop" }
    t.me = t
    expect(pretty(t)).to_match("^{ me = <cycle: table: 0x%x+>, name = \"loop\" }$")
    local shared = { 1 }
    expect(pretty({ a = shared, b = shared })).to_be("{ a = { 1 }, b = { 1 } }")
  end)

  it("splits long tables over lines, one entry per line", function()
    local s = pretty({ alpha = string.rep("a", 40), beta = string.rep("b", 40) })
    expect(s).to_be('{\n  alpha = "' .. string.rep("a", 40) .. '",\n  beta = "' .. string.rep("b", 40) .. '"\n}')
  end)

  it("never runs __index or __pairs; uses __tostring", function()
    local called = false
    local t = setmetatable({ x = 1 }, {
      __index = function() called = true end,
      __pairs = function() called = true; return next, {}, nil end,
    })
    expect(pretty(t)).to_be("{ x = 1 }")
    expect(called).to_be(false)
    local obj = setmetatable({}, { __tostring = function() return "<obj>" end })
    expect(pretty({ obj })).to_be("{ <obj> }")
  end)
end)

describe("rig.repl.compile", function()
  it("tries an expression first, then a statement", function()
    expect(repl.compile("1 + 1")()).to_be(2)
    expect(repl.compile("local x = 3 return x")()).to_be(3)
  end)

  it("tells incomplete input from a syntax error", function()
    local fn, err = repl.compile("function f()")
    expect(fn).to_be_nil(); expect(err).to_be_nil()
    fn, err = repl.compile("x = = 1")
    expect(fn).to_be_nil(); expect(err).to_match("^stdin:1:")
  end)
end)

describe("rig.repl.complete", function()
  it("completes globals and keywords", function()
    G.repl_spec_global = 1
    expect(repl.complete("repl_spec_gl")).to_equal({ "repl_spec_global" })
    expect(repl.complete("functio")).to_equal({ "function" })
  end)

  it("completes fields after '.' and methods after ':'", function()
    expect(repl.complete("string.for")).to_equal({ "string.format" })
    expect(repl.complete("rig.sle")).to_equal({ "rig.sleep" })
    local t = rig.spawn(function() end)
    G.repl_spec_task = t
    expect(repl.complete("repl_spec_task:wa")).to_equal({ "repl_spec_task:wait" })
    t:wait()
    G.repl_spec_text = "abc"
    expect(repl.complete("repl_spec_text:upp")).to_equal({ "repl_spec_text:upper" })
  end)

  it("reads metatables behind __metatable (s:<Tab> on a session raised in rawget)", function()
    G.repl_spec_hidden = { f = setmetatable({}, { __metatable = "hidden", __call = function() end }),
                           v = 1 }
    expect(repl.complete("repl_spec_hidden:")).to_equal({ "repl_spec_hidden:f" })
    local r = rig.define{ loops = { rig.loop{ name = "a", model = rig.model.script{ { text = "x" } } } },
                          primers = { "a" }, store = rig.store.memory() }
    local s = assert(r:session())
    G.repl_spec_s, G.repl_spec_r = s, r
    local methods = repl.complete("repl_spec_s:")
    expect(#methods > 10).to_be(true)
    expect(repl.complete("repl_spec_s:subm")).to_equal({ "repl_spec_s:submit" })
    -- s.rig has a metatable whose __metatable is a string, as every rig object
    expect(repl.complete("repl_spec_s.rig:ses")).to_equal({ "repl_spec_s.rig:session", "repl_spec_s.rig:sessions" })
    for _, m in ipairs(methods) do expect(m:find(":_", 1, true)).to_be_nil() end
    s:shutdown()
  end)

  it("completes what a library __index function answers, not its other tables", function()
    expect(repl.complete("repl_spec_r:rest")).to_equal({ "repl_spec_r:restore" })
    expect(repl.complete("repl_spec_r.prim")).to_equal({ "repl_spec_r.primers" })
    local l = rig.loop{ name = "x", model = rig.model.script{ { text = "x" } }, system = "be brief" }
    G.repl_spec_loop = l
    expect(repl.complete("repl_spec_loop.sys")).to_equal({ "repl_spec_loop.system" })
    expect(repl.complete("repl_spec_loop:is_")).to_equal({}) -- rig.tool's is_tool is in its closure
    expect(repl.complete("rig.ser")).to_equal({ "rig.serve" }) -- not loaded: rig's area list
  end)

  it("offers the names a user's __index function closes over, without calling it", function()
    local called = false
    local methods = { go = function() end, stop = function() end, count = 3 }
    G.repl_spec_obj = setmetatable({}, { __index = function(_, k) called = true; return methods[k] end })
    expect(repl.complete("repl_spec_obj:")).to_equal({ "repl_spec_obj:go", "repl_spec_obj:stop" })
    expect(repl.complete("repl_spec_obj.c")).to_equal({ "repl_spec_obj.count" })
    expect(called).to_be(false)
  end)

  it("hides names starting with '_' unless the prefix does", function()
    G.repl_spec_under = { _secret = 1, open = 2, __gc = 3 }
    expect(repl.complete("repl_spec_under.")).to_equal({ "repl_spec_under.open" })
    expect(repl.complete("repl_spec_under._")).to_equal({ "repl_spec_under.__gc", "repl_spec_under._secret" })
  end)

  it("completes ':' commands at the start of a line, and their arguments", function()
    expect(repl.complete(":he", "")).to_equal({ ":help" })
    expect(repl.complete(":q", "  ")).to_equal({ ":quit" })
    expect(repl.complete(":he")).to_equal({ ":help" })
    expect(repl.complete(":he", "x = ")).to_equal({})
    local all = repl.complete(":", "")
    expect(#all > 15).to_be(true)
    expect(repl.complete("lo", ":history ")).to_equal({})
  end)

  it(":attach's id prefix: an ambiguous one lists the sessions it matches", function()
    local bench = require "rig.repl_bench"
    local r = rig.define{ loops = { rig.loop{ name = "a", model = rig.model.script{ { text = "x" } } } },
                          primers = { "a" }, store = rig.store.memory() }
    bench.state.r = r
    local ids, first = {}, {}
    for i = 1, 17 do -- two of 17 ids share a first hex digit
      local s = assert(r:session())
      ids[i] = s.id
      s:shutdown()
    end
    local d
    for _, id in ipairs(ids) do
      local c = id:sub(1, 1)
      if first[c] then d = c break end
      first[c] = id
    end
    local ok, err = pcall(bench.find_id, d)
    expect(ok).to_be(false)
    expect(err).to_match("^session id '" .. d .. "' is ambiguous: %d+ sessions start with it %(")
    expect(err:find(first[d], 1, true) ~= nil).to_be(true)
    expect(bench.find_id(ids[1]:sub(1, 20))).to_be(ids[1])
    bench.state.r = nil
  end)

  it("never calls a function to resolve the prefix", function()
    local called = false
    G.repl_spec_lazy = setmetatable({}, { __index = function() called = true; return { x = 1 } end })
    expect(repl.complete("repl_spec_lazy.a.")).to_equal({})
    expect(called).to_be(false)
    expect(repl.complete("f().")).to_equal({})
    expect(repl.complete("a..b")).to_equal({})
  end)
end)
