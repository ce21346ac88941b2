-- rig.model.catalog: well-known models by id ("provider/name"), with their
-- context window, max output, prices and capabilities (docs/models-catalog.md).
--
--   rig.model{ "anthropic/claude-sonnet-4-5" }                  -- a catalog model
--   rig.model{ "openai/gpt-4.1", max_tokens = 2000 }           -- with overrides
--   rig.model.catalog.get("gemini/gemini-2.5-flash")           -- a copy of the entry, or nil, msg
--   rig.model.catalog.list([provider])                         -- the ids, sorted
--   rig.model.catalog.add{ id = "openai-compatible/llama3.1", base_url = "http://127.0.0.1:11434/v1",
--     context_window = 131072, max_output = 8192, tools = true }  -- adds, or corrects an entry
--   rig.model.catalog.load("models.json")                      -- entries from a JSON file
--   rig.model.catalog.taken                                    -- when the figures were taken
--
-- An entry: id, name (the provider's model id; default: after the slash),
-- context_window, max_output (tokens), prices = { input, output, cache_read,
-- cache_write } ($ per million tokens), tools, images, thinking,
-- structured_output (booleans: what the model can do), base_url, aliases
-- (other names of the same model, such as dated snapshots), note.
--
-- A catalog model is the entry as a definition (provider, name,
-- context_window, prices, tools, structured_output, base_url, max_tokens =
-- the smaller of 4096 and max_output) under the overrides; prices merge
-- field by field. An override may not ask for what the entry says the model
-- cannot do (thinking, tools, structured output), nor for max_tokens above
-- max_output: correct the entry with add when the catalog is wrong.

local json = require "rig.json"
local data = require "rig.model.catalog_data"

local C = {}

C.taken = data.taken

local entries = {}   -- id -> entry
local aliases = {}   -- "provider/alias" -> id

local FIELDS = { id = true, name = true, context_window = true, max_output = true, prices = true,
                 tools = true, images = true, thinking = true, structured_output = true,
                 base_url = true, aliases = true, note = true }
local PRICE_FIELDS = { input = true, output = true, cache_read = true, cache_write = true }
local CAPS = { "tools", "images", "thinking", "structured_output" }

local function providers()
  return require("rig.model")._providers
end

local function copy(v)
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = copy(x) end
  return out
end

-- Validates an entry (merged over `base` when given); raises naming the field.
local function check_entry(where, e, base)
  local function fail(msg) error(where .. ": " .. msg, 0) end
  if type(e) ~= "table" then fail("expects a table of fields") end
  for k in pairs(e) do
    if not FIELDS[k] then fail("unknown field '" .. tostring(k) .. "'") end
  end
  local id = e.id
  if type(id) ~= "string" then fail("field 'id' must be a string \"provider/name\"") end
  local provider, rest = id:match("^([%w-]+)/(.+)$")
  if not provider or rest:find("%c") or #id > 300 then
    fail("field 'id' must be \"provider/name\" (got '" .. id .. "')")
  end
  if not providers()[provider] then
    fail("field 'id' names an unknown provider '" .. provider .. "' (one of "
      .. table.concat(require("rig.model").providers, ", ") .. ")")
  end
  local out = copy(base) or {}
  for k, v in pairs(e) do
    if k == "prices" and type(v) == "table" and type(out.prices) == "table" then
      for pk, pv in pairs(v) do out.prices[pk] = pv end
    else
      out[k] = copy(v)
    end
  end
  out.provider = provider
  if out.name == nil then out.name = rest end
  if type(out.name) ~= "string" or out.name == "" or #out.name > 256 or out.name:find("%c") then
    fail("field 'name' must be a non-empty string (the provider's model id)")
  end
  for _, k in ipairs { "context_window", "max_output" } do
    local v = out[k]
    if v ~= nil and (math.type(v) ~= "integer" and (type(v) ~= "number" or v ~= math.floor(v))
                     or v < 1 or v > 1e9) then
      fail("field '" .. k .. "' must be a whole number of tokens between 1 and 1e9")
    end
    out[k] = v and math.tointeger(v)
  end
  if out.prices ~= nil then
    if type(out.prices) ~= "table" then fail("field 'prices' must be a table") end
    for pk, pv in pairs(out.prices) do
      if not PRICE_FIELDS[pk] then fail("unknown field 'prices." .. tostring(pk) .. "'") end
      if type(pv) ~= "number" or pv ~= pv or pv < 0 or pv == math.huge then
        fail("field 'prices." .. pk .. "' must be a number of dollars per million tokens, 0 or more")
      end
    end
  end
  for _, k in ipairs(CAPS) do
    if out[k] ~= nil and type(out[k]) ~= "boolean" then fail("field '" .. k .. "' must be a boolean") end
  end
  if out.base_url ~= nil and type(out.base_url) ~= "string" then
    fail("field 'base_url' must be a string")
  end
  if out.note ~= nil and type(out.note) ~= "string" then fail("field 'note' must be a string") end
  if out.aliases ~= nil then
    if type(out.aliases) ~= "table" then fail("field 'aliases' must be a list of names") end
    for i, a in ipairs(out.aliases) do
      if type(a) ~= "string" or a == "" or a:find("[%c/]") then
        fail("field 'aliases[" .. i .. "]' must be a model name")
      end
    end
  end
  return out
end

local function register(where, e)
  local base = entries[e.id]
  local entry = check_entry(where, e, base)
  if base then
    for _, a in ipairs(base.aliases or {}) do aliases[entry.provider .. "/" .. a] = nil end
  end
  entries[entry.id] = entry
  for _, a in ipairs(entry.aliases or {}) do aliases[entry.provider .. "/" .. a] = entry.id end
  return entry.id
end

-- the built-in data: one entry per provider of each model
for _, d in ipairs(data.models) do
  for _, p in ipairs(d.providers) do
    local e = {}
    for k, v in pairs(d) do if k ~= "providers" then e[k] = v end end
    e.id = p .. "/" .. d.name
    register("rig.model.catalog", e)
  end
end

-- The entry for an id or alias id, and the name a request sends (the alias
-- itself for an alias); nil when there is none.
local function find(id)
  local e = entries[id]
  if e then return e, e.name end
  local target = aliases[id]
  if target then return entries[target], id:match("^[^/]+/(.+)$") end
  return nil
end

function C.get(id)
  if type(id) ~= "string" then error("rig.model.catalog.get: expects an id \"provider/name\"", 2) end
  local e, name = find(id)
  if not e then return nil, "rig.model.catalog: no entry '" .. id .. "'", "not_found" end
  local out = copy(e)
  out.name = name
  return out
end

function C.list(provider)
  if provider ~= nil and type(provider) ~= "string" then
    error("rig.model.catalog.list: expects a provider name or nothing", 2)
  end
  local ids = {}
  for id, e in pairs(entries) do
    if provider == nil or e.provider == provider then ids[#ids + 1] = id end
  end
  table.sort(ids)
  return ids
end

function C.add(e)
  local ok, res = pcall(register, "rig.model.catalog.add", e)
  if not ok then error(res, 2) end
  return res
end

-- Entries from a JSON file: a list of entries, or { "models": [ … ] }.
-- Returns the number added, or nil, message, code when the file cannot be
-- read or is not JSON; a malformed entry raises naming the file and field.
function C.load(path)
  if type(path) ~= "string" or path == "" then error("rig.model.catalog.load: expects a file name", 2) end
  local f, err = io.open(path, "rb")
  if not f then return nil, "rig.model.catalog.load: cannot read '" .. path .. "': " .. tostring(err), "io" end
  local text = f:read("a")
  f:close()
  local doc, jerr = json.decode(text)
  if doc == nil then
    return nil, "rig.model.catalog.load: '" .. path .. "' is not JSON: " .. tostring(jerr), "invalid"
  end
  local list = doc
  if type(doc) == "table" and not json.is_array(doc) then list = doc.models end
  if type(list) ~= "table" or (next(list) ~= nil and not json.is_array(list)) then
    return nil, "rig.model.catalog.load: '" .. path .. "' holds no list of models (a JSON array,"
      .. " or {\"models\": [ … ]})", "invalid"
  end
  -- all or nothing: check every entry before adding any
  local staged = {}
  for i, e in ipairs(list) do
    local where = "rig.model.catalog.load: " .. path .. ": models[" .. i .. "]"
    local ok, res = pcall(check_entry, where, e, type(e) == "table" and entries[e.id] or nil)
    if not ok then error(res, 2) end
    staged[i] = e
  end
  for _, e in ipairs(staged) do register("rig.model.catalog.load", e) end
  return #staged
end

-- ---- the shorthand ----

local function similar(id)
  local provider, rest = id:match("^([^/]*)/(.*)$")
  local out = {}
  for _, cand in ipairs(C.list()) do
    local p, n = cand:match("^([^/]+)/(.+)$")
    if (rest and n == rest) or (not rest and n == id) or (provider == p and rest
        and (n:find(rest, 1, true) or rest:find(n, 1, true))) then
      out[#out + 1] = cand
    end
  end
  return out
end

-- rig.model{ "provider/name", overrides… } -> a plain definition.
function C.expand(def)
  local where = "rig.model"
  local function fail(msg) error(where .. ": " .. msg, 0) end
  local id = def[1]
  if type(id) ~= "string" then
    fail("the first value must be a catalog id \"provider/name\" (got a " .. type(id) .. ")")
  end
  for k in pairs(def) do
    if math.type(k) == "integer" and k ~= 1 then
      fail("takes one catalog id, then named fields: rig.model{ \"" .. id .. "\", max_tokens = … }")
    end
  end
  if def.provider ~= nil or def.name ~= nil then
    fail("field '" .. (def.provider ~= nil and "provider" or "name") .. "' comes from the catalog id '"
      .. id .. "' (add an entry to name another model)")
  end
  local e, name = find(id)
  if not e then
    local near = similar(id)
    fail("no catalog model '" .. id .. "'" .. (#near > 0 and (" (did you mean '"
      .. table.concat(near, "', '") .. "'?)") or " (rig.model.catalog.list() names them;"
      .. " rig.model.catalog.add{ id = … } adds one)"))
  end
  local out = { provider = e.provider, name = name, context_window = e.context_window,
                base_url = e.base_url, prices = copy(e.prices) }
  if e.tools == false then out.tools = false end
  if e.structured_output ~= nil then out.structured_output = e.structured_output end
  for k, v in pairs(def) do
    if k ~= 1 then
      if k == "prices" and type(v) == "table" and out.prices then
        for pk, pv in pairs(v) do out.prices[pk] = pv end
      else
        out[k] = v
      end
    end
  end
  local function cannot(field, what)
    fail("field '" .. field .. "': the catalog says '" .. id .. "' " .. what .. " (figures of "
      .. C.taken .. "; rig.model.catalog.add{ id = \"" .. e.id .. "\", … } corrects the entry)")
  end
  if def.thinking == true and e.thinking == false then cannot("thinking", "does not think") end
  if def.effort ~= nil and e.thinking == false then cannot("effort", "does not reason") end
  if def.tools == true and e.tools == false then cannot("tools", "takes no tools") end
  if def.structured_output == true and e.structured_output == false then
    cannot("structured_output", "has no native structured output")
  end
  if e.max_output then
    if out.max_tokens == nil then
      out.max_tokens = math.min(4096, e.max_output)
    elseif type(out.max_tokens) == "number" and out.max_tokens > e.max_output then
      fail(string.format("field 'max_tokens' is %s, above the %d tokens '%s' can write"
        .. " (its max output in the catalog)", tostring(out.max_tokens), e.max_output, id))
    end
  end
  -- a 1-hour Anthropic cache write costs twice the input price
  if e.provider == "anthropic" and type(out.cache) == "table" and out.cache.ttl == "1h"
      and out.prices and out.prices.input
      and not (type(def.prices) == "table" and def.prices.cache_write ~= nil) then
    out.prices.cache_write = out.prices.input * 2
  end
  return out
end

return C
