local json = require "rig.json"

local function fails(text)
  local v, msg, code = json.decode(text)
  expect(v).to_be_nil()
  expect(code).to_be("parse")
  return msg
end

local function enc_fails(v, opts)
  local s, msg, code = json.encode(v, opts)
  expect(s).to_be_nil()
  expect(code).to_be("encode")
  return msg
end

describe("rig.json decode", function()
  it("decodes scalars and containers", function()
    expect(json.decode("1")).to_be(1)
    expect(math.type(json.decode("1"))).to_be("integer")
    expect(math.type(json.decode("1.0"))).to_be("float")
    expect(math.type(json.decode("1e2"))).to_be("float")
    expect(json.decode("1e2")).to_be(100.0)
    expect(json.decode("-0.5")).to_be(-0.5)
    expect(json.decode(" true ")).to_be(true)
    expect(json.decode("false")).to_be(false)
    expect(json.decode("null")).to_be(json.null)
    expect(json.decode('"hi"')).to_be("hi")
    expect(json.decode('{"a":[1,2,{"b":null}],"c":"d"}')).to_equal({ a = { 1, 2, { b = json.null } }, c = "d" })
    expect(json.decode('\t\r\n [ ] \n')).to_equal({})
  end)

  it("marks arrays so [] and {} survive a round trip", function()
    local v = json.decode('{"a":[],"b":{},"c":[1]}')
    expect(json.is_array(v.a)).to_be(true)
    expect(json.is_array(v.b)).to_be(false)
    expect(getmetatable(v.a)).to_be(getmetatable(v.c))
    expect(json.encode(v)).to_be('{"a":[],"b":{},"c":[1]}')
  end)

  it("keeps the last of duplicate keys", function()
    expect(json.decode('{"a":1,"a":2}').a).to_be(2)
  end)

  it("decodes long arrays and objects (past the stack batch)", function()
    local parts, keys = {}, {}
    for i = 1, 1000 do
      parts[i] = tostring(i)
      keys[i] = string.format('"k%04d":%d', i, i)
    end
    local a = json.decode("[" .. table.concat(parts, ",") .. "]")
    expect(#a).to_be(1000)
    expect(a[1000]).to_be(1000)
    local o = json.decode("{" .. table.concat(keys, ",") .. "}")
    expect(o.k0001).to_be(1)
    expect(o.k1000).to_be(1000)
    expect(json.encode(o)).to_be("{" .. table.concat(keys, ",") .. "}")
  end)

  it("decodes escapes, surrogate pairs and lone surrogates", function()
    expect(json.decode([["a\"b\\c\/d\b\f\n\r\t"]])).to_be("a\"b\\c/d\b\f\n\r\t")
    expect(json.decode([["\u0041\u00e9\u20ac"]])).to_be("Aé€")
    expect(json.decode([["\ud83d\ude00"]])).to_be("😀")
    expect(json.decode([["\uD83D\uDE00"]])).to_be("😀")
    expect(json.decode([["x\ud800y"]])).to_be("x\u{FFFD}y")
    expect(json.decode([["\udc00"]])).to_be("\u{FFFD}")
    expect(json.decode([["\ud800\u0041"]])).to_be("\u{FFFD}A")
    expect(json.decode([["\u0000"]])).to_be("\0")
    expect(json.decode('"héllo 世界 😀"')).to_be("héllo 世界 😀")
  end)

  it("keeps integers that fit int64 and makes the rest floats", function()
    expect(json.decode("9223372036854775807")).to_be(math.maxinteger)
    expect(json.decode("-9223372036854775808")).to_be(math.mininteger)
    local big = json.decode("9223372036854775808")
    expect(math.type(big)).to_be("float")
    expect(big).to_be(2.0 ^ 63)
    expect(math.type(json.decode("-9223372036854775809"))).to_be("float")
    expect(math.type(json.decode("123456789012345678901234567890"))).to_be("float")
    expect(json.decode("-0")).to_be(0)
  end)

  it("reads floats exactly", function()
    for _, s in ipairs { "0.1", "1.7976931348623157e308", "5e-324", "2.2250738585072014e-308",
                         "0.30000000000000004", "123456789.123456789", "1E+2", "1e-7" } do
      expect(json.decode(s)).to_be(tonumber(s))
    end
  end)

  it("refuses what RFC 8259 does not allow, saying where", function()
    local cases = {
      { "", "json: unexpected end of input at byte 1" },
      { "   ", "json: unexpected end of input at byte 4" },
      { "[1,2,]", "json: unexpected character ']' at byte 6" },
      { '{"a":1,}', "json: expected a string key in an object at byte 8" },
      { "{a:1}", "json: expected a string key in an object at byte 2" },
      { '{"a" 1}', "json: expected ':' after an object key at byte 6" },
      { '{"a":1 "b":2}', "json: expected ',' or '}' in an object at byte 8" },
      { "[1 2]", "json: expected ',' or ']' in an array at byte 4" },
      { "[1,2", "json: unexpected end of input at byte 5" },
      { "01", "json: leading zero in a number at byte 1" },
      { "-01", "json: leading zero in a number at byte 2" },
      { "1.", "json: invalid number at byte 3" },
      { ".5", "json: unexpected character '.' at byte 1" },
      { "1e", "json: invalid number at byte 3" },
      { "-", "json: invalid number at byte 1" },
      { "+1", "json: unexpected character '+' at byte 1" },
      { "NaN", "json: unexpected character 'N' at byte 1" },
      { "Infinity", "json: unexpected character 'I' at byte 1" },
      { "1e999", "json: number out of range at byte 1" },
      { "tru", "json: invalid literal at byte 1" },
      { "nul", "json: invalid literal at byte 1" },
      { "1 2", "json: unexpected data after the value at byte 3" },
      { "{} x", "json: unexpected data after the value at byte 4" },
      { "[1] // c", "json: unexpected data after the value at byte 5" },
      { "/* c */ 1", "json: unexpected character '/' at byte 1" },
      { "'a'", "json: unexpected character ''' at byte 1" },
      { '"abc', "json: unterminated string at byte 5" },
      { '"a\nb"', "json: unescaped control character in a string at byte 3" },
      { '"a\tb"', "json: unescaped control character in a string at byte 3" },
      { '"\\x"', "json: invalid escape in a string at byte 2" },
      { '"\\u12"', "json: invalid \\u escape in a string at byte 2" },
      { '"\\u12G4"', "json: invalid \\u escape in a string at byte 2" },
      { '"\xff"', "json: invalid UTF-8 in a string at byte 2" },
      { '"\xc0\xaf"', "json: invalid UTF-8 in a string at byte 2" },
      { '"\xed\xa0\x80"', "json: invalid UTF-8 in a string at byte 2" },
      { '"\xf4\x90\x80\x80"', "json: invalid UTF-8 in a string at byte 2" },
      { '"ab\xe2\x82"', "json: invalid UTF-8 in a string at byte 4" },
      { "\0", "json: unexpected byte 0x00 at byte 1" },
      { "1\0", "json: unexpected data after the value at byte 2" },
      { "\xef\xbb\xbf1", "json: unexpected byte 0xef at byte 1" },
    }
    for _, c in ipairs(cases) do
      local msg = fails(c[1])
      if msg ~= c[2] then error(string.format("%q: expected %q, got %q", c[1], c[2], msg)) end
    end
  end)

  it("refuses nesting deeper than 512 instead of crashing", function()
    expect(json.decode(string.rep("[", 512) .. string.rep("]", 512))).to_be_truthy()
    expect(fails(string.rep("[", 513) .. string.rep("]", 513))).to_be("json: nesting deeper than 512 at byte 513")
    expect(fails(string.rep('{"a":', 600))).to_match("nesting deeper than 512")
    expect(fails(string.rep("[", 100000))).to_match("nesting deeper than 512")
  end)

  it("raises on a non-string argument", function()
    expect(function() json.decode(nil) end).to_fail("string expected, got nil")
    expect(function() json.decode(12) end).to_fail("string expected, got number")
    expect(function() json.decode({}) end).to_fail("string expected, got table")
  end)
end)

describe("rig.json encode", function()
  it("sorts keys bytewise", function()
    expect(json.encode({ b = 1, a = 2, B = 3, ["a\0"] = 4, aa = 5, [""] = 6 }))
      .to_be('{"":6,"B":3,"a":2,"a\\u0000":4,"aa":5,"b":1}')
    local t = {}
    for i = 1, 40 do t["k" .. (41 - i) * 7 % 41] = i end
    local keys = {}
    for k in json.encode(t):gmatch('"(k%d+)"') do keys[#keys + 1] = k end
    local sorted = { table.unpack(keys) }
    table.sort(sorted)
    expect(table.concat(keys, ",")).to_be(table.concat(sorted, ","))
  end)

  it("tells arrays from objects", function()
    expect(json.encode({ 1, 2, 3 })).to_be("[1,2,3]")
    expect(json.encode({})).to_be("{}")
    expect(json.encode(json.array({}))).to_be("[]")
    expect(json.encode(json.array({ 1, "a" }))).to_be('[1,"a"]')
    expect(json.encode({ [1] = "a", [2] = "b" })).to_be('["a","b"]')
    expect(json.encode({ { {} } })).to_be("[[{}]]")
  end)

  it("encodes scalars, null and strings", function()
    expect(json.encode(json.null)).to_be("null")
    expect(json.encode(nil)).to_be("null")
    expect(json.encode(true)).to_be("true")
    expect(json.encode({ a = json.null })).to_be('{"a":null}')
    expect(json.encode("a\"b\\c/\b\f\n\r\t\1\31\127")).to_be('"a\\"b\\\\c/\\b\\f\\n\\r\\t\\u0001\\u001f\127"')
    expect(json.encode("héllo 世界 😀")).to_be('"héllo 世界 😀"')
    expect(json.encode(string.rep("x", 1000))).to_be('"' .. string.rep("x", 1000) .. '"')
  end)

  it("prints integers as integers and floats shortest round-trip", function()
    expect(json.encode(math.maxinteger)).to_be("9223372036854775807")
    expect(json.encode(math.mininteger)).to_be("-9223372036854775808")
    expect(json.encode(0)).to_be("0")
    expect(json.encode(3.0)).to_be("3.0")
    expect(json.encode(-0.0)).to_be("-0.0")
    expect(json.encode(0.1)).to_be("0.1")
    expect(json.encode(1 / 3)).to_be("0.3333333333333333")
    expect(json.encode(1e20)).to_be("1e+20")
    expect(json.encode(2.0 ^ 63)).to_be("9.223372036854776e+18")
    expect(json.encode(5e-324)).to_be("4.94065645841247e-324")
    for _, x in ipairs { 0.1, 1 / 3, 1e300, -1.5e-300, 2.0 ^ 63, 123456789.123, math.pi, 5e-324, 1e15, 3.0 } do
      local back = json.decode(json.encode(x))
      expect(back).to_be(x)
      expect(math.type(back)).to_be("float")
    end
  end)

  -- The encoder prints timestamps and other floats in [1, 1e14) with integer
  -- arithmetic instead of printf; its text must be printf's, digit for digit.
  it("prints floats as the fewest of %.15g, %.16g, %.17g that read back", function()
    local function reference(x)
      local s
      for prec = 15, 17 do
        s = string.format("%." .. prec .. "g", x)
        if tonumber(s) == x then break end
      end
      s = s:gsub(",", ".")
      if not s:find("[^%d%-]") then s = s .. ".0" end
      return s
    end
    local values = { 1796162338.3054066, 1796162338.3065395, 1.5, 2.5, 1.0000000000000002,
                     99999999999999.99, 9999999999999.998, 0.5 + 2 ^ 52 - 2 ^ 52 + 1, 123456789.123,
                     4503599627370495.5, 10.000000000000002, 1e14 - 0.5, 1.25, 7.105427357601002e-15 + 1 }
    local seed = 12345
    local function rnd() -- a small LCG: the same values every run
      seed = (seed * 6364136223846793005 + 1442695040888963407) & 0x7fffffffffffffff
      return seed
    end
    for _ = 1, 20000 do
      local e = rnd() % 47 -- magnitudes 1 .. 2^47
      values[#values + 1] = (2.0 ^ e) * (1 + (rnd() % (1 << 52)) / 2 ^ 52)
      values[#values + 1] = 1.7e9 + (rnd() % 1000000000) / 1e9 -- a wall clock
      values[#values + 1] = -((rnd() % 100000) + (rnd() % 1000) / 1000) -- a few decimals
    end
    local bad = {}
    for _, x in ipairs(values) do
      local got, want = json.encode(x), reference(x)
      if got ~= want and #bad < 5 then bad[#bad + 1] = string.format("%.17g: %s, not %s", x, got, want) end
    end
    expect(table.concat(bad, "; ")).to_be("")
  end)

  it("pretty-prints with indent", function()
    local v = { name = "x", list = { 1, { a = true } }, empty = {}, none = json.array({}) }
    expect(json.encode(v, { indent = 2 })).to_be(table.concat({
      "{",
      '  "empty": {},',
      '  "list": [',
      "    1,",
      "    {",
      '      "a": true',
      "    }",
      "  ],",
      '  "name": "x",',
      '  "none": []',
      "}" }, "\n"))
    expect(json.encode({ 1, 2 }, { indent = 4 })).to_be("[\n    1,\n    2\n]")
    expect(json.encode({}, { indent = 2 })).to_be("{}")
    expect(json.encode({ a = 1 }, { indent = 0 })).to_be('{"a":1}')
    expect(json.encode("s", { indent = 2 })).to_be('"s"')
  end)

  it("raises on bad options", function()
    expect(function() json.encode({}, { indnet = 2 }) end).to_fail("unknown option 'indnet'")
    expect(function() json.encode({}, { indent = -1 }) end).to_fail("option 'indent' must be an integer")
    expect(function() json.encode({}, { indent = 1.5 }) end).to_fail("option 'indent' must be an integer")
    expect(function() json.encode({}, 2) end).to_fail("table expected")
  end)

  it("names the path of what cannot be encoded", function()
    expect(enc_fails({ tools = { { run = print } } })).to_be("json: cannot encode a function at $.tools[1].run")
    expect(enc_fails(print)).to_be("json: cannot encode a function at $")
    expect(enc_fails({ a = { 0 / 0 } })).to_be("json: cannot encode NaN at $.a[1]")
    expect(enc_fails({ a = math.huge })).to_be("json: cannot encode inf at $.a")
    expect(enc_fails({ a = -math.huge })).to_be("json: cannot encode -inf at $.a")
    expect(enc_fails({ ["x y"] = { ['q"'] = coroutine.create(print) } }))
      .to_be('json: cannot encode a thread at $["x y"]["q\\""]')
    expect(enc_fails({ a = io.stdout })).to_be("json: cannot encode a userdata (FILE*) at $.a")
    expect(enc_fails({ 1, 2, x = 3 })).to_be("json: cannot encode a table with both string and integer keys at $")
    expect(enc_fails({ a = { [1] = 1, [3] = 3 } })).to_be("json: cannot encode a sparse array at $.a")
    expect(enc_fails({ [0] = 1 })).to_be("json: cannot encode a sparse array at $")
    expect(enc_fails({ [1.5] = 1 })).to_be("json: cannot encode a table key of type number at $")
    expect(enc_fails({ [true] = 1 })).to_be("json: cannot encode a table key of type boolean at $")
    expect(enc_fails({ k = json.array({ x = 1 }) })).to_be("json: cannot encode an array with string keys at $.k")
    expect(enc_fails({ s = "ok", t = { "\xff" } })).to_be("json: invalid UTF-8 in a string at $.t[1]")
    expect(enc_fails({ ["\xc0"] = 1 })).to_be("json: invalid UTF-8 in a key at $")
    expect(enc_fails("\xed\xa0\x80")).to_be("json: invalid UTF-8 in a string at $")
  end)

  it("refuses cycles and nesting deeper than 200", function()
    local t = { a = {} }
    t.a.b = t
    expect(enc_fails(t)).to_be("json: cannot encode a reference cycle at $.a.b")
    local l = {}
    l[1] = l
    expect(enc_fails(l)).to_be("json: cannot encode a reference cycle at $[1]")
    local deep = {}
    local cur = deep
    for _ = 1, 199 do cur[1] = {} cur = cur[1] end
    expect(json.encode(deep)).to_be(string.rep("[", 199) .. "{}" .. string.rep("]", 199))
    cur[1] = {}
    expect(enc_fails(deep)).to_match("^json: nesting deeper than 200 at %$%[1%]%[1%]")
    -- the same table twice (not a cycle) is fine
    local shared = { 1 }
    expect(json.encode({ a = shared, b = shared })).to_be('{"a":[1],"b":[1]}')
  end)

  it("emits raw text verbatim and validates it when made", function()
    local r = json.raw('{"b":1,"a":[true]}')
    expect(json.encode({ x = r, y = 1 })).to_be('{"x":{"b":1,"a":[true]},"y":1}')
    expect(json.encode(r, { indent = 2 })).to_be('{"b":1,"a":[true]}')
    expect(tostring(r)).to_be('{"b":1,"a":[true]}')
    expect(function() json.raw("{") end).to_fail("rig.json.raw: the text is not one JSON value")
    expect(function() json.raw("1 2") end).to_fail("unexpected data after the value")
    expect(function() json.raw("") end).to_fail("unexpected end of input")
    expect(function() json.raw(nil) end).to_fail("string expected")
  end)

  it("encodes a large object and reads it back", function()
    local t = {}
    for i = 1, 5000 do t["key" .. i] = { i, tostring(i), i + 0.5 } end
    local back = json.decode(json.encode(t))
    expect(back).to_equal(t)
    expect(json.encode(back)).to_be(json.encode(t))
  end)
end)

describe("rig.json arrays", function()
  it("marks with json.array and tells with json.is_array", function()
    local t = {}
    expect(json.array(t)).to_be(t)
    expect(json.is_array(t)).to_be(true)
    expect(json.array(t)).to_be(t) -- marking twice is fine
    expect(json.is_array({})).to_be(false)
    expect(json.is_array({ 1, 2 })).to_be(true)
    expect(json.is_array({ 1, 2, x = 1 })).to_be(false)
    expect(json.is_array({ [2] = 1 })).to_be(false)
    expect(json.is_array({ a = 1 })).to_be(false)
    expect(json.is_array("x")).to_be(false)
    expect(json.is_array(nil)).to_be(false)
  end)

  it("refuses a table that has another metatable", function()
    expect(function() json.array(setmetatable({}, {})) end).to_fail("already has a metatable")
    expect(function() json.array("x") end).to_fail("table expected")
  end)
end)

describe("rig.json round trips", function()
  it("decodes every recorded stream line and re-encodes it stably", function()
    local root = os.getenv("LUARIG_ROOT") or "."
    local n = 0
    for _, f in ipairs { "anthropic_thinking_signature.jsonl", "anthropic_tool_use.sse",
                         "openai_chat_length_truncated.sse", "openai_chat_parallel_tool_calls.sse",
                         "openai_responses_function_call.jsonl" } do
      for l in io.lines(root .. "/tests/fixtures/" .. f) do
        local d = l:match("^data: (.*)$") or (l:sub(1, 1) == "{" and l)
        if d and d ~= "[DONE]" then
          local v = assert(json.decode(d))
          local e = assert(json.encode(v))
          expect(json.encode(json.decode(e))).to_be(e)
          expect(json.decode(e)).to_equal(v)
          n = n + 1
        end
      end
    end
    expect(n).at_least(50)
  end)

  it("is the same null as cjson's", function()
    expect(json.null).to_be(require("cjson").null)
    expect(json.decode(require("cjson").encode({ a = json.null })).a).to_be(json.null)
  end)
end)

describe("rig.json.decode with keys to skip", function()
  local json = require "rig.json"
  it("leaves out top-level keys only, and still checks their values", function()
    local t = assert(json.decode('{"id":"x","keep":1,"a":[{"id":2}],"b":{"id":3}}', { id = true }))
    expect(t.id).to_be_nil()
    expect(t.keep).to_be(1)
    expect(t.a[1].id).to_be(2)
    expect(t.b.id).to_be(3)
    local v, msg, code = json.decode('{"id":[1,}', { id = true })
    expect(v).to_be_nil(); expect(code).to_be("parse"); expect(msg).to_match("byte 10")
    -- with keys to skip the text must hold an object
    local a, amsg, acode = json.decode(' [1,2]', { id = true })
    expect(a).to_be_nil(); expect(acode).to_be("parse"); expect(amsg).to_match("expected an object at byte 2")
    expect(json.decode('"id"', { id = true })).to_be_nil()
    expect(json.decode('[1,2]')[2]).to_be(2)
    expect(pcall(json.decode, "{}", "id")).to_be(false)
  end)
end)
