-- rig.schema: JSON Schema (draft 2020-12, the subset tool schemas use) for
-- checking a tool's arguments before its prepare step runs.
--
--   schema.check(s) -> true | nil, "schema.properties.q.type: unknown type 'str'"
--     refuses, naming the path, any keyword outside the subset below and any
--     malformed value; a tool definition raises with this message.
--   schema.validate(s, value) -> true | nil, "$.items[2].name: expected string, got number"
--     s must have passed check. value is what rig.json.decode returns
--     (json.null for null, arrays marked) or a plain Lua table (a table with
--     keys 1..n is an array; an empty table is an object unless marked with
--     json.array, as rig.json.encode would send it). Paths are JSONPath as the model sees its
--     own arguments: "$" the root, ".name" or ["odd name"] for a property,
--     [i] for an array element counting from 0.
--
-- Keywords: type (a name or a list; "integer" accepts 2 and 2.0), enum, const,
--   properties, required, additionalProperties (boolean | schema),
--   minProperties, maxProperties, items (one schema), prefixItems, minItems,
--   maxItems, uniqueItems, minLength, maxLength (counted in code points),
--   minimum, maximum, exclusiveMinimum, exclusiveMaximum (numbers, as in
--   2020-12), multipleOf, anyOf, oneOf, allOf, not, $ref to "#", "#/$defs/…"
--   or "#/definitions/…" (JSON Pointer with ~0 ~1), $defs, definitions.
--   Annotations, accepted and ignored: title, description, default, examples,
--   format, $schema, $id, $comment, deprecated, readOnly, writeOnly.
--   A boolean schema: true accepts anything, false nothing.
-- Refused at check time: "pattern" and "patternProperties" (luarig carries
--   no ECMA-262 regex engine, and accepting the keyword while ignoring it
--   would let through arguments the author meant to refuse: check such a
--   value in prepare instead), the array form of "items" (draft 7 tuples:
--   use prefixItems), boolean exclusiveMinimum/Maximum (draft 4), and every
--   other keyword (if/then/else, contains, propertyNames, dependent*,
--   unevaluated*, $anchor, $dynamicRef, …).

local json = require "rig.json"

local S = {}

local null = json.null
local is_marked = json.is_array
local MAX_DEPTH = 64       -- nesting of a schema
local MAX_EVAL_DEPTH = 128 -- nested evaluations (through $ref) while validating

local type_names = { null = true, boolean = true, object = true, array = true, number = true,
                     string = true, integer = true }

local annotations = { title = true, description = true, default = true, examples = true,
                      format = true, ["$schema"] = true, ["$id"] = true, ["$comment"] = true,
                      deprecated = true, readOnly = true, writeOnly = true }

local refused = {
  pattern = "keyword 'pattern' is not supported: luarig does not evaluate regular expressions "
    .. "in schemas (check the value in the tool's prepare step instead)",
  patternProperties = "keyword 'patternProperties' is not supported: luarig does not evaluate "
    .. "regular expressions in schemas (check the names in the tool's prepare step instead)",
}

-- ---- values ----

-- A Lua table is a JSON array when marked, or when its keys are exactly 1..n (n > 0).
local function is_array(v)
  if is_marked(v) then return true end
  local n = #v
  if n == 0 then return false end
  local count = 0
  for k in pairs(v) do
    if math.type(k) ~= "integer" or k < 1 or k > n then return false end
    count = count + 1
  end
  return count == n
end

-- The JSON type of a value: null, boolean, number, string, array, object (nil if none).
local function kind(v)
  local t = type(v)
  if t == "string" or t == "boolean" then return t end
  if t == "number" then return v == v and v ~= math.huge and v ~= -math.huge and "number" or nil end
  if v == null then return "null" end
  if t == "table" then return is_array(v) and "array" or "object" end
  return nil
end

local function is_integer(v)
  return math.type(v) == "integer" or (math.type(v) == "float" and v == math.floor(v))
end

local function equal(a, b)
  if a == b then return true end
  local ka, kb = kind(a), kind(b)
  if ka ~= kb or (ka ~= "array" and ka ~= "object") then return false end
  for k, x in pairs(a) do if not equal(x, b[k]) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end

local function show(v)
  local s = json.encode(v)
  if not s then return tostring(v) end
  if #s > 60 then s = s:sub(1, 57) .. "..." end
  return s
end

local function key_path(path, name)
  if type(name) == "string" and name:match("^[%a_][%w_]*$") then return path .. "." .. name end
  return path .. "[" .. (json.encode(tostring(name)) or "?") .. "]"
end

-- ---- check ----

local function is_list(v)
  if type(v) ~= "table" then return false end
  if is_marked(v) then return true end
  local n = #v
  for k in pairs(v) do
    if math.type(k) ~= "integer" or k < 1 or k > n then return false end
  end
  return true
end

local check_schema

local function bad(path, msg) error({ msg = path .. ": " .. msg }, 0) end

local function check_value(v, path, depth)
  if depth > MAX_DEPTH then bad(path, "is nested too deeply") end
  local k = kind(v)
  if not k then bad(path, "is not a JSON value (a " .. type(v) .. ")") end
  if k == "array" or k == "object" then
    for key, x in pairs(v) do
      if k == "object" and type(key) ~= "string" then
        bad(path, "has a non-string key " .. tostring(key))
      end
      check_value(x, path .. "." .. tostring(key), depth + 1)
    end
  end
end

local function non_negative_integer(v, path)
  if math.type(v) ~= "integer" and not (type(v) == "number" and is_integer(v)) or v < 0 then
    bad(path, "must be a non-negative integer")
  end
end

local function check_number(v, path)
  if kind(v) ~= "number" then bad(path, "must be a number") end
end

local function schema_list(v, path, depth, ctx)
  if not is_list(v) or #v == 0 then bad(path, "must be a non-empty list of schemas") end
  for i = 1, #v do check_schema(v[i], path .. "[" .. (i - 1) .. "]", depth + 1, ctx) end
end

local function schema_map(v, path, depth, ctx)
  if type(v) ~= "table" or (is_array(v)) then bad(path, "must be an object of schemas") end
  for name, sub in pairs(v) do
    if type(name) ~= "string" then bad(path, "has a non-string key " .. tostring(name)) end
    check_schema(sub, key_path(path, name), depth + 1, ctx)
  end
end

local keywords = {}

keywords.type = function(v, path)
  if type(v) == "string" then
    if not type_names[v] then bad(path, "unknown type '" .. v .. "'") end
    return
  end
  if not is_list(v) or #v == 0 then bad(path, "must be a type name or a non-empty list of them") end
  local seen = {}
  for i = 1, #v do
    local t = v[i]
    if type(t) ~= "string" or not type_names[t] then
      bad(path .. "[" .. (i - 1) .. "]", "unknown type '" .. tostring(t) .. "'")
    end
    if seen[t] then bad(path, "lists '" .. t .. "' twice") end
    seen[t] = true
  end
end

keywords.enum = function(v, path, depth)
  if not is_list(v) or #v == 0 then bad(path, "must be a non-empty list of values") end
  check_value(v, path, depth)
end
keywords.const = function(v, path, depth) check_value(v, path, depth) end
keywords.properties = schema_map
keywords["$defs"] = schema_map
keywords.definitions = schema_map
keywords.required = function(v, path)
  if not is_list(v) then bad(path, "must be a list of property names") end
  local seen = {}
  for i = 1, #v do
    if type(v[i]) ~= "string" then bad(path .. "[" .. (i - 1) .. "]", "must be a string") end
    if seen[v[i]] then bad(path, "lists '" .. v[i] .. "' twice") end
    seen[v[i]] = true
  end
end
keywords.additionalProperties = function(v, path, depth, ctx) check_schema(v, path, depth + 1, ctx) end
keywords["not"] = keywords.additionalProperties
keywords.items = function(v, path, depth, ctx)
  if type(v) == "table" and is_array(v) then
    bad(path, "must be one schema (the list form is draft 7's tuple: use prefixItems)")
  end
  check_schema(v, path, depth + 1, ctx)
end
keywords.prefixItems = schema_list
keywords.anyOf = schema_list
keywords.oneOf = schema_list
keywords.allOf = schema_list
for _, k in ipairs { "minItems", "maxItems", "minLength", "maxLength", "minProperties",
                     "maxProperties" } do
  keywords[k] = non_negative_integer
end
keywords.uniqueItems = function(v, path)
  if type(v) ~= "boolean" then bad(path, "must be a boolean") end
end
for _, k in ipairs { "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum" } do
  keywords[k] = function(v, path)
    if type(v) == "boolean" then
      bad(path, "must be a number (a boolean is draft 4's form: give the bound itself)")
    end
    check_number(v, path)
  end
end
keywords.multipleOf = function(v, path)
  check_number(v, path)
  if v <= 0 then bad(path, "must be greater than 0") end
end
keywords["$ref"] = function(v, path, _, ctx)
  if type(v) ~= "string" then bad(path, "must be a string") end
  ctx.refs[#ctx.refs + 1] = { ref = v, path = path }
end

-- Resolves a local reference against the root ("#", "#/$defs/a", "#/definitions/a/properties/b").
local function resolve(root, ref)
  if ref == "#" then return root end
  local pointer = ref:match("^#(/.*)$")
  if not pointer then return nil, "only local references (\"#/$defs/…\") are supported" end
  local node = root
  local first = true
  for part in pointer:gmatch("/([^/]*)") do
    part = part:gsub("~1", "/"):gsub("~0", "~")
    if first and part ~= "$defs" and part ~= "definitions" then
      return nil, "must point into #/$defs or #/definitions"
    end
    first = false
    if type(node) ~= "table" then return nil end
    local n = node[part]
    if n == nil and is_array(node) and part:match("^%d+$") then n = node[tonumber(part) + 1] end
    node = n
    if node == nil then return nil end
  end
  if type(node) ~= "table" and type(node) ~= "boolean" then return nil end
  return node
end

check_schema = function(s, path, depth, ctx)
  if depth > MAX_DEPTH then bad(path, "is nested too deeply") end
  if type(s) == "boolean" then return end
  if type(s) ~= "table" or (next(s) ~= nil and is_array(s)) then
    bad(path, "must be a schema (an object or a boolean)")
  end
  for k, v in pairs(s) do
    if type(k) ~= "string" then bad(path, "has a non-string key " .. tostring(k)) end
    local p = path .. "." .. k
    if refused[k] then
      bad(p, refused[k])
    elseif annotations[k] then
      check_value(v, p, depth + 1)
    elseif keywords[k] then
      keywords[k](v, p, depth, ctx)
    else
      bad(p, "unknown or unsupported keyword '" .. k .. "'")
    end
  end
  if s.minItems and s.maxItems and s.minItems > s.maxItems then
    bad(path .. ".minItems", "is greater than maxItems")
  end
  if s.minLength and s.maxLength and s.minLength > s.maxLength then
    bad(path .. ".minLength", "is greater than maxLength")
  end
end

function S.check(s)
  local ctx = { refs = {} }
  local ok, err = pcall(check_schema, s, "schema", 0, ctx)
  if not ok then
    if type(err) == "table" then return nil, err.msg end
    error(err, 0)
  end
  for _, r in ipairs(ctx.refs) do
    local target, why = resolve(s, r.ref)
    if not target then
      return nil, r.path .. ": cannot resolve '" .. r.ref .. "'" .. (why and (": " .. why) or "")
    end
    -- a chain of bare references that comes back to itself never reaches data
    local seen, node = {}, target
    while type(node) == "table" and type(node["$ref"]) == "string" do
      if seen[node] then return nil, r.path .. ": '" .. r.ref .. "' is a reference cycle" end
      seen[node] = true
      node = resolve(s, node["$ref"])
    end
  end
  return true
end

-- ---- validate ----

local validate

local function fail(path, msg) return nil, path .. ": " .. msg end

local function type_ok(t, k, v)
  if t == k then return true end
  if t == "integer" then return k == "number" and is_integer(v) end
  return false
end

local function type_list(t)
  if type(t) == "string" then return t end
  local out = {}
  for i = 1, #t do out[i] = t[i] end
  if #out == 1 then return out[1] end
  return table.concat(out, ", ", 1, #out - 1) .. " or " .. out[#out]
end

local function branches(root, list, v, path, depth)
  local n, first_err = 0, nil
  for i = 1, #list do
    local ok, err = validate(root, list[i], v, path, depth + 1)
    if ok then n = n + 1 elseif not first_err then first_err = err end
  end
  return n, first_err
end

local function text_len(s)
  return utf8.len(s) or #s
end

validate = function(root, s, v, path, depth)
  if depth > MAX_EVAL_DEPTH then return fail(path, "the schema nests references too deeply") end
  if s == true then return true end
  if s == false then return fail(path, "no value is allowed here") end
  local k = kind(v)
  if v == nil then k = nil end
  if not k then return fail(path, "is not a JSON value") end

  if s["$ref"] then
    local target = resolve(root, s["$ref"])
    local ok, err = validate(root, target, v, path, depth + 1)
    if not ok then return nil, err end
  end

  local t = s.type
  if t ~= nil then
    local ok = false
    if type(t) == "string" then
      ok = type_ok(t, k, v)
    else
      for i = 1, #t do if type_ok(t[i], k, v) then ok = true break end end
    end
    if not ok then return fail(path, "expected " .. type_list(t) .. ", got " .. k) end
  end

  if s.const ~= nil and not equal(s.const, v) then
    return fail(path, "must be " .. show(s.const))
  end
  if s.enum ~= nil then
    local found = false
    for i = 1, #s.enum do if equal(s.enum[i], v) then found = true break end end
    if not found then
      local shown = {}
      for i = 1, math.min(#s.enum, 10) do shown[i] = show(s.enum[i]) end
      if #s.enum > 10 then shown[#shown + 1] = "…" end
      return fail(path, "must be one of " .. table.concat(shown, ", "))
    end
  end

  if k == "string" then
    if s.minLength and text_len(v) < s.minLength then
      return fail(path, "must be at least " .. s.minLength .. " characters long")
    end
    if s.maxLength and text_len(v) > s.maxLength then
      return fail(path, "must be at most " .. s.maxLength .. " characters long")
    end
  elseif k == "number" then
    if s.minimum and v < s.minimum then return fail(path, "must be >= " .. show(s.minimum)) end
    if s.maximum and v > s.maximum then return fail(path, "must be <= " .. show(s.maximum)) end
    if s.exclusiveMinimum and v <= s.exclusiveMinimum then
      return fail(path, "must be > " .. show(s.exclusiveMinimum))
    end
    if s.exclusiveMaximum and v >= s.exclusiveMaximum then
      return fail(path, "must be < " .. show(s.exclusiveMaximum))
    end
    local m = s.multipleOf
    if m then
      local ok
      if math.type(v) == "integer" and math.type(m) == "integer" then
        ok = v % m == 0
      else
        local q = v / m
        ok = q == q and math.abs(q - math.floor(q + 0.5)) <= 1e-9 * math.max(1, math.abs(q))
      end
      if not ok then return fail(path, "must be a multiple of " .. show(m)) end
    end
  elseif k == "array" then
    local n = #v
    if s.minItems and n < s.minItems then
      return fail(path, "must hold at least " .. s.minItems .. " items")
    end
    if s.maxItems and n > s.maxItems then
      return fail(path, "must hold at most " .. s.maxItems .. " items")
    end
    local prefix = s.prefixItems
    local np = prefix and #prefix or 0
    for i = 1, n do
      local sub = i <= np and prefix[i] or s.items
      if sub ~= nil then
        local ok, err = validate(root, sub, v[i], path .. "[" .. (i - 1) .. "]", depth + 1)
        if not ok then return nil, err end
      end
    end
    if s.uniqueItems then
      for i = 2, n do
        for j = 1, i - 1 do
          if equal(v[i], v[j]) then
            return fail(path, "items " .. (j - 1) .. " and " .. (i - 1) .. " are equal (must be unique)")
          end
        end
      end
    end
  end
  if k == "object" then
    local req = s.required
    if req then
      for i = 1, #req do
        if v[req[i]] == nil then return fail(key_path(path, req[i]), "required property is missing") end
      end
    end
    local props, extra = s.properties, s.additionalProperties
    local names = {}
    for name in pairs(v) do
      if type(name) ~= "string" then return fail(path, "has a non-string key " .. tostring(name)) end
      names[#names + 1] = name
    end
    table.sort(names)
    if s.minProperties and #names < s.minProperties then
      return fail(path, "must have at least " .. s.minProperties .. " properties")
    end
    if s.maxProperties and #names > s.maxProperties then
      return fail(path, "must have at most " .. s.maxProperties .. " properties")
    end
    for _, name in ipairs(names) do
      local sub = props and props[name]
      local p = key_path(path, name)
      if sub ~= nil then
        local ok, err = validate(root, sub, v[name], p, depth + 1)
        if not ok then return nil, err end
      elseif extra == false then
        return fail(p, "unknown property (not allowed here)")
      elseif extra ~= nil and extra ~= true then
        local ok, err = validate(root, extra, v[name], p, depth + 1)
        if not ok then return nil, err end
      end
    end
  end

  if s.allOf then
    for i = 1, #s.allOf do
      local ok, err = validate(root, s.allOf[i], v, path, depth + 1)
      if not ok then return nil, err end
    end
  end
  if s.anyOf then
    local n, err = branches(root, s.anyOf, v, path, depth)
    if n == 0 then return fail(path, "matches none of the allowed forms (first: " .. err .. ")") end
  end
  if s.oneOf then
    local n, err = branches(root, s.oneOf, v, path, depth)
    if n == 0 then return fail(path, "matches none of the allowed forms (first: " .. err .. ")") end
    if n > 1 then return fail(path, "matches " .. n .. " of the forms where exactly one must match") end
  end
  if s["not"] ~= nil then
    if validate(root, s["not"], v, path, depth + 1) then return fail(path, "matches a form that is not allowed") end
  end
  return true
end

function S.validate(s, v)
  return validate(s, s, v, "$", 0)
end

S.is_array = is_array
S.equal = equal

return S
