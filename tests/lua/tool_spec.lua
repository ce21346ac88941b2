local json = require "rig.json"

local function base(over)
  local def = {
    name = "lookup", description = "look something up",
    schema = { type = "object", properties = { q = { type = "string" } }, required = { "q" } },
    prepare = function(args) return { summary = "lookup " .. args.q } end,
    run = function() return "ok" end,
  }
  for k, v in pairs(over or {}) do def[k] = v end
  return def
end

local function raises(def)
  local ok, err = pcall(rig.tool, def)
  expect(ok).to_be(false)
  return err
end

describe("rig.tool definition", function()
  it("builds a tool with readable fields", function()
    local t = rig.tool(base())
    expect(t.name).to_be("lookup")
    expect(t.description).to_be("look something up")
    expect(t.sequential).to_be(false)
    expect(type(t.prepare)).to_be("function")
    expect(type(t.run)).to_be("function")
    expect(t.schema.required[1]).to_be("q")
    expect(tostring(t)).to_be("rig.tool(lookup)")
    expect(rig.tool.is_tool(t)).to_be(true)
  end)

  it("raises at the caller's line, naming the field", function()
    local ok, err = pcall(function() rig.tool(base { name = "bad name" }) end)
    expect(ok).to_be(false)
    expect(err).to_match("tool_spec%.lua:%d+: rig%.tool: field 'name' must be")
    expect(raises(base { description = 3 })).to_match("rig.tool 'lookup': field 'description'")
    expect(raises(base { run = "x" })).to_match("field 'run' must be a function")
    expect(raises(base { prepare = 1 })).to_match("field 'prepare' must be a function")
    expect(raises(base { sequential = "yes" })).to_match("field 'sequential' must be a boolean")
    expect(raises(base { schema = 1 })).to_match("field 'schema' must be a table")
    expect(raises(base { nmae = "x" })).to_match("rig.tool: unknown field 'nmae'")
    expect(raises("x")).to_match("expects a table of fields")
  end)

  it("refuses a schema that is not an object, or outside the subset, naming the path", function()
    expect(raises(base { schema = { type = "string" } })).to_match("field 'schema.type' must be \"object\"")
    expect(raises(base { schema = { type = "object", properties = { q = { type = "strin" } } } }))
      .to_match("field 'schema.properties.q.type': unknown type 'strin'")
    expect(raises(base { schema = { type = "object", properties = { q = { type = "string", pattern = "^a" } } } }))
      .to_match("schema.properties.q.pattern': keyword 'pattern' is not supported")
    expect(raises(base { schema = { type = "object", properties = { q = { default = print } } } }))
      .to_match("schema.properties.q.default")
  end)

  it("defaults the schema to an object without properties and allows no prepare", function()
    local def = base()
    def.schema, def.prepare = nil, nil
    local t = rig.tool(def)
    expect(t.schema.type).to_be("object")
    expect(t.prepare).to_be_nil()
    expect(t:check_args(json.decode("{}"))).to_be(true)
  end)

  it("is frozen: assignment raises, and the source table no longer matters", function()
    local def = base()
    local t = rig.tool(def)
    def.name = "other"
    def.schema.properties.q.type = "integer"
    expect(t.name).to_be("lookup")
    expect(t:check_args({ q = "text" })).to_be(true)
    expect(function() t.name = "x" end).to_fail("frozen")
    -- what a read returns is a copy
    local s = t.schema
    s.properties.q.type = "integer"
    expect(t.schema.properties.q.type).to_be("string")
    local spec = t:spec()
    spec.schema.required[1] = "z"
    expect(t:spec().schema.required[1]).to_be("q")
  end)

  it("checks arguments against the schema", function()
    local t = rig.tool(base())
    expect(t:check_args(json.decode('{"q":"a"}'))).to_be(true)
    local ok, msg = t:check_args(json.decode('{"q":1}'))
    expect(ok).to_be_nil()
    expect(msg).to_be("$.q: expected string, got number")
    ok, msg = t:check_args(json.decode('{}'))
    expect(msg).to_be("$.q: required property is missing")
  end)

  it("gives the model's tool shape, which rig.model requests accept", function()
    local t = rig.tool(base { schema = { type = "object", properties = { tags = { type = "array", items = { type = "string" } } }, required = {} } })
    local spec = t:spec()
    expect(spec.name).to_be("lookup")
    expect(spec.description).to_be("look something up")
    expect(json.encode(spec.schema)).to_be('{"properties":{"tags":{"items":{"type":"string"},"type":"array"}},"required":[],"type":"object"}')
    local m = rig.model{ provider = "openai", name = "gpt-x" }
    local body = m:encode{ messages = { { role = "user", content = "hi" } }, tools = { spec } }
    expect(body).to_match('"required":%[%]')
  end)

  it("normalizes a request, deriving scope and match", function()
    local t = rig.tool(base())
    local r = assert(t:check_request{ summary = "s", command = "ls", cwd = "/w",
      requirements = { { kind = "network", match = "tcp://example.org:443" },
                       { kind = "network", scope = "api.x.io:8080" },
                       { kind = "filesystem.read", scope = "/w/a.txt", description = "the file" },
                       { kind = "command.execute", match = "ls -l" } } })
    expect(r.summary).to_be("s")
    expect(r.command).to_be("ls")
    expect(r.requirements[1].scope).to_be("example.org:443")
    expect(r.requirements[2].match).to_be("tcp://api.x.io:8080")
    expect(r.requirements[3].match).to_be("/w/a.txt")
    expect(r.requirements[3].description).to_be("the file")
    expect(r.requirements[4].scope).to_be("ls -l")
    expect(#assert(t:check_request{ summary = "nothing needed" }).requirements).to_be(0)
  end)

  it("refuses an invalid request with a message (never raises)", function()
    local t = rig.tool(base())
    local bad = {
      { 7, "prepare must return a table" },
      { { requirements = {} }, "summary must be a non%-empty string" },
      { { summary = "s", extra = 1 }, "unknown field 'extra'" },
      { { summary = "s", requirements = { { kind = "disk", scope = "/" } } }, "kind must be one of" },
      { { summary = "s", requirements = { { kind = "network" } } }, "needs a scope or a match" },
      { { summary = "s", requirements = { { kind = "network", match = "example.org" } } }, "tcp://host:port" },
      { { summary = "s", requirements = { { kind = "filesystem.read", scope = "a\nb" } } }, "one line" },
      { { summary = "s", requirements = { { kind = "filesystem.read", scope = "/a", x = 1 } } }, "unknown field 'x'" },
      { { summary = "s", requirements = { x = 1 } }, "must be a list" },
    }
    for _, c in ipairs(bad) do
      local r, msg = t:check_request(c[1])
      expect(r).to_be_nil()
      expect(msg).to_match("^invalid request: ")
      expect(msg).to_match(c[2])
    end
  end)
end)
