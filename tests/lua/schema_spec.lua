local json = require "rig.json"
local schema = require "rig.schema"

-- { schema (JSON text), value (JSON text), nil (valid) | message pattern (plain) }
local cases = {
  { '{"type":"string"}', '"a"', nil },
  { '{"type":"string"}', '1', "$: expected string, got number" },
  { '{"type":["string","null"]}', 'null', nil },
  { '{"type":["string","null"]}', 'true', "$: expected string or null, got boolean" },
  { '{"type":"integer"}', '2', nil },
  { '{"type":"integer"}', '2.0', nil },
  { '{"type":"integer"}', '2.5', "$: expected integer, got number" },
  { '{"type":"number"}', '2.5', nil },
  { '{"type":"array"}', '[]', nil },
  { '{"type":"object"}', '[]', "$: expected object, got array" },
  { '{"type":"array"}', '{}', "$: expected array, got object" },
  { '{"type":"boolean"}', 'false', nil },
  { '{"type":"null"}', '0', "$: expected null, got number" },
  { '{"enum":["a","b"]}', '"b"', nil },
  { '{"enum":["a","b"]}', '"c"', '$: must be one of "a", "b"' },
  { '{"enum":[1,null]}', '1.0', nil },
  { '{"const":{"a":[1,2]}}', '{"a":[1,2]}', nil },
  { '{"const":{"a":[1,2]}}', '{"a":[2,1]}', '$: must be {"a":[1,2]}' },
  { '{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}', '{"q":"x"}', nil },
  { '{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}', '{}',
    "$.q: required property is missing" },
  { '{"type":"object","properties":{"q":{"type":"string"}}}', '{"q":3}',
    "$.q: expected string, got number" },
  { '{"type":"object","properties":{"a":{}},"additionalProperties":false}', '{"a":1,"b":2}',
    "$.b: unknown property (not allowed here)" },
  { '{"type":"object","additionalProperties":{"type":"integer"}}', '{"x y":"s"}',
    '$["x y"]: expected integer, got string' },
  { '{"type":"object","additionalProperties":{"type":"integer"}}', '{"n":3}', nil },
  { '{"minProperties":1}', '{}', "$: must have at least 1 properties" },
  { '{"maxProperties":1}', '{"a":1,"b":2}', "$: must have at most 1 properties" },
  { '{"type":"array","items":{"type":"object","properties":{"name":{"type":"string"}}}}',
    '[{"name":"a"},{"name":"b"},{"name":3}]', "$[2].name: expected string, got number" },
  { '{"type":"object","properties":{"items":{"type":"array","items":{"type":"object","properties":{"name":{"type":"string"}}}}}}',
    '{"items":[{},{},{"name":false}]}', "$.items[2].name: expected string, got boolean" },
  { '{"prefixItems":[{"type":"string"},{"type":"integer"}],"items":false}', '["a",1]', nil },
  { '{"prefixItems":[{"type":"string"},{"type":"integer"}],"items":false}', '["a",1,2]',
    "$[2]: no value is allowed here" },
  { '{"prefixItems":[{"type":"string"},{"type":"integer"}]}', '["a","b"]',
    "$[1]: expected integer, got string" },
  { '{"minItems":2}', '[1]', "$: must hold at least 2 items" },
  { '{"maxItems":1}', '[1,2]', "$: must hold at most 1 items" },
  { '{"uniqueItems":true}', '[1,{"a":1},2,{"a":1}]', "$: items 1 and 3 are equal (must be unique)" },
  { '{"uniqueItems":true}', '[1,2,"1"]', nil },
  { '{"minLength":2}', '"é"', "$: must be at least 2 characters long" },
  { '{"maxLength":2}', '"éé"', nil },
  { '{"maxLength":2}', '"ééé"', "$: must be at most 2 characters long" },
  { '{"minimum":1}', '0', "$: must be >= 1" },
  { '{"maximum":1.5}', '1.5', nil },
  { '{"exclusiveMaximum":1.5}', '1.5', "$: must be < 1.5" },
  { '{"exclusiveMinimum":0}', '0', "$: must be > 0" },
  { '{"multipleOf":3}', '9', nil },
  { '{"multipleOf":3}', '10', "$: must be a multiple of 3" },
  { '{"multipleOf":0.1}', '0.3', nil },
  { '{"anyOf":[{"type":"string"},{"type":"integer"}]}', '3', nil },
  { '{"anyOf":[{"type":"string"},{"type":"integer"}]}', '3.5',
    "$: matches none of the allowed forms (first: $: expected string, got number)" },
  { '{"oneOf":[{"type":"integer"},{"type":"number"}]}', '3',
    "$: matches 2 of the forms where exactly one must match" },
  { '{"oneOf":[{"type":"integer"},{"type":"string"}]}', '3', nil },
  { '{"allOf":[{"minimum":1},{"maximum":2}]}', '3', "$: must be <= 2" },
  { '{"not":{"type":"null"}}', 'null', "$: matches a form that is not allowed" },
  { '{"$defs":{"p":{"type":"object","properties":{"x":{"type":"integer"}}}},"type":"object","properties":{"pt":{"$ref":"#/$defs/p"}}}',
    '{"pt":{"x":"no"}}', "$.pt.x: expected integer, got string" },
  { '{"definitions":{"n":{"type":"string"}},"items":{"$ref":"#/definitions/n"}}', '["a",1]',
    "$[1]: expected string, got number" },
  { '{"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#"}}}}',
    '{"kids":[{"kids":[{"kids":7}]}]}', "$.kids[0].kids[0].kids: expected array, got number" },
  { 'true', '{"anything":1}', nil },
  { 'false', '1', "$: no value is allowed here" },
  { '{"description":"d","title":"t","default":1,"examples":[1],"format":"uri","$schema":"https://json-schema.org/draft/2020-12/schema","$id":"x","$comment":"c"}',
    '"anything"', nil },
}

-- schemas check refuses, with the path it names
local refusals = {
  { '{"type":"str"}', "schema.type: unknown type 'str'" },
  { '{"type":[]}', "schema.type: must be a type name" },
  { '{"properties":{"a":{"typ":"string"}}}', "schema.properties.a.typ: unknown or unsupported keyword 'typ'" },
  { '{"pattern":"^a"}', "schema.pattern: keyword 'pattern' is not supported" },
  { '{"patternProperties":{}}', "schema.patternProperties: keyword 'patternProperties' is not supported" },
  { '{"items":[{"type":"string"}]}', "schema.items: must be one schema" },
  { '{"exclusiveMinimum":true}', "schema.exclusiveMinimum: must be a number" },
  { '{"minLength":-1}', "schema.minLength: must be a non-negative integer" },
  { '{"minItems":1.5}', "schema.minItems: must be a non-negative integer" },
  { '{"multipleOf":0}', "schema.multipleOf: must be greater than 0" },
  { '{"required":["a","a"]}', "schema.required: lists 'a' twice" },
  { '{"required":"a"}', "schema.required: must be a list" },
  { '{"enum":[]}', "schema.enum: must be a non-empty list" },
  { '{"anyOf":[]}', "schema.anyOf: must be a non-empty list of schemas" },
  { '{"anyOf":[{"type":1}]}', "schema.anyOf[0].type: must be a type name" },
  { '{"$ref":"#/$defs/missing"}', "schema.$ref: cannot resolve '#/$defs/missing'" },
  { '{"$ref":"http://x/y"}', "schema.$ref: cannot resolve 'http://x/y': only local references" },
  { '{"$ref":"#/properties/a","properties":{"a":{}}}', "must point into #/$defs" },
  { '{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}', "reference cycle" },
  { '{"if":{}}', "schema.if: unknown or unsupported keyword 'if'" },
  { '{"minItems":3,"maxItems":2}', "schema.minItems: is greater than maxItems" },
  { '7', "schema: must be a schema" },
}

describe("rig.schema validate", function()
  for i, c in ipairs(cases) do
    it("case " .. i .. ": " .. c[1]:sub(1, 50) .. " with " .. c[2]:sub(1, 30), function()
      local s, jerr = json.decode(c[1])
      if s == nil then error(jerr) end
      local ok, err = schema.check(s)
      if not ok then error("check refused: " .. tostring(err)) end
      local v, jerr = json.decode(c[2])
      if v == nil then error(jerr) end
      local valid, msg = schema.validate(s, v)
      if c[3] == nil then
        if not valid then error("expected valid, got " .. tostring(msg)) end
      else
        expect(valid).to_be_nil()
        if msg ~= c[3] then error("expected message " .. c[3] .. ", got " .. tostring(msg)) end
      end
    end)
  end

  it("takes plain Lua tables as values too", function()
    local s = { type = "object", properties = { list = { type = "array", items = { type = "integer" } },
                                                 none = { type = "array" } } }
    expect(schema.check(s)).to_be(true)
    expect(schema.validate(s, { list = { 1, 2 }, none = json.array({}) })).to_be(true)
    expect(select(2, schema.validate(s, { none = {} }))).to_be("$.none: expected array, got object")
    local ok, msg = schema.validate(s, { list = { 1, "x" } })
    expect(ok).to_be_nil()
    expect(msg).to_be("$.list[1]: expected integer, got string")
  end)

  it("refuses a top-level nil and non-JSON values", function()
    local s = { type = "object" }
    local ok, msg = schema.validate(s, nil)
    expect(ok).to_be_nil()
    expect(msg).to_match("^%$: ")
    ok, msg = schema.validate({ type = "object", properties = { f = {} } }, { f = print })
    expect(ok).to_be_nil()
    expect(msg).to_be("$.f: is not a JSON value")
  end)

  it("stops a reference recursion that consumes no data", function()
    local s = { ["$defs"] = { a = { allOf = { { ["$ref"] = "#/$defs/a" } } } }, ["$ref"] = "#/$defs/a" }
    expect(schema.check(s)).to_be(true)
    local ok, msg = schema.validate(s, 1)
    expect(ok).to_be_nil()
    expect(msg).to_match("nests references too deeply")
  end)
end)

describe("rig.schema check", function()
  for i, c in ipairs(refusals) do
    it("refusal " .. i .. ": " .. c[1]:sub(1, 60), function()
      local s = assert(json.decode(c[1]))
      local ok, msg = schema.check(s)
      expect(ok).to_be_nil()
      if not tostring(msg):find(c[2], 1, true) then
        error("expected " .. c[2] .. ", got " .. tostring(msg))
      end
    end)
  end

  it("refuses functions and non-string keys in a Lua schema", function()
    local ok, msg = schema.check({ type = "object", default = print })
    expect(ok).to_be_nil()
    expect(msg).to_match("schema.default: is not a JSON value")
    ok, msg = schema.check({ properties = { [1] = {} } })
    expect(ok).to_be_nil()
  end)
end)
