-- rig.model.catalog: the built-in entries, the rig.model{ "provider/name" }
-- shorthand, adding and correcting entries (from Lua and from a file).
local json = require "rig.json"
local mock = dofile((os.getenv("LUARIG_ROOT") or ".") .. "/tests/lua/mock_provider.lua")
local catalog = rig.model.catalog

local KEY_ENV = "LUARIG_TEST_API_KEY"

local function raises(fn, pattern)
  local ok, err = pcall(fn)
  expect(ok).to_be(false)
  expect(tostring(err)).to_match(pattern)
end

local function tmpfile(text)
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
  return path
end

describe("the built-in catalog", function()
  it("holds well-known models of every wire format but openai-compatible", function()
    local seen = {}
    for _, id in ipairs(catalog.list()) do seen[id:match("^[^/]+")] = true end
    for _, p in ipairs { "anthropic", "openai", "openai-responses", "gemini" } do
      expect(seen[p]).to_be(true)
      expect(#catalog.list(p) >= 5).to_be(true)
    end
    expect(seen["openai-compatible"]).to_be_nil()
    expect(catalog.taken).to_match("^20%d%d%-%d%d$")
    local ids = catalog.list()
    local sorted = { table.unpack(ids) }
    table.sort(sorted)
    expect(ids).to_equal(sorted)
  end)

  it("builds a valid model from every entry, with its figures", function()
    for _, id in ipairs(catalog.list()) do
      local e = assert(catalog.get(id))
      local m = rig.model{ id }
      expect(m.provider .. "/" .. m.name).to_be(id)
      expect(m.context_window).to_be(e.context_window)
      expect(m.max_tokens <= e.max_output).to_be(true)
      expect(m.prices.input).to_be(e.prices.input)
      expect(m.prices.output).to_be(e.prices.output)
      expect(m.prices.cache_read).to_be(e.prices.cache_read)
      expect(m.structured_output).to_be(e.structured_output)
      expect(e.prices.cache_read == nil or e.prices.cache_read < e.prices.input).to_be(true)
      if e.provider == "anthropic" then
        -- a 5-minute write costs 1.25 × input
        expect(math.abs(e.prices.cache_write - 1.25 * e.prices.input) < 1e-9).to_be(true)
      else
        expect(e.prices.cache_write).to_be_nil()
      end
      for _, cap in ipairs { "tools", "images", "thinking", "structured_output" } do
        expect(type(e[cap])).to_be("boolean")
      end
    end
  end)

  it("knows the figures of a few models", function()
    local s = rig.model{ "anthropic/claude-sonnet-4-5" }
    expect(s.max_tokens).to_be(4096)
    expect(s.context_window).to_be(200000)
    expect(s.prices).to_equal({ input = 3, output = 15, cache_read = 0.3, cache_write = 3.75 })
    local g = rig.model{ "openai/gpt-4.1" }
    expect(g.context_window).to_be(1047576)
    local r = rig.model{ "openai-responses/gpt-5" }
    expect(r.provider).to_be("openai-responses")
    expect(r.base_url).to_be("https://api.openai.com/v1")
    local f = rig.model{ "gemini/gemini-2.5-flash" }
    expect(f.api_key_env).to_be("GEMINI_API_KEY")
    expect(f.context_window).to_be(1048576)
    -- an entry whose max output is below 4096 would cap the default; a pinned alias
    local h = rig.model{ "anthropic/claude-3-5-haiku-20241022" }
    expect(h.name).to_be("claude-3-5-haiku-20241022")
    expect(h.prices.input).to_be(0.8)
    expect(assert(catalog.get("anthropic/claude-3-5-haiku-20241022")).name).to_be("claude-3-5-haiku-20241022")
  end)
end)

describe("rig.model{ \"provider/name\", … }", function()
  it("applies overrides over the entry; prices merge", function()
    local m = rig.model{ "openai/gpt-4.1", max_tokens = 2000, temperature = 0.3,
                         prices = { input = 1.9 }, cache = "off" }
    expect(m.max_tokens).to_be(2000)
    expect(m.temperature).to_be(0.3)
    expect(m.prices).to_equal({ input = 1.9, output = 8, cache_read = 0.5 })
    expect(m.cache).to_be(false)
    local t = rig.model{ "anthropic/claude-sonnet-4-5", thinking = true, effort = "low", max_tokens = 8192,
                         structured_output = false }
    expect(t.thinking).to_be(true)
    expect(t.structured_output).to_be(false)
    -- a 1-hour cache writes at twice the input price, unless the prices say otherwise
    expect(rig.model{ "anthropic/claude-sonnet-4-5", cache = { ttl = "1h" } }.prices.cache_write).to_be(6)
    expect(rig.model{ "anthropic/claude-sonnet-4-5", cache = { ttl = "1h" },
                      prices = { cache_write = 5 } }.prices.cache_write).to_be(5)
    -- the entry is not changed by an override
    expect(assert(catalog.get("openai/gpt-4.1")).prices.input).to_be(2)
  end)

  it("refuses what the entry says the model cannot do, and bad shorthands", function()
    raises(function() rig.model{ "openai/gpt-4.1", thinking = true } end,
      "field 'thinking': the catalog says 'openai/gpt%-4%.1' does not think")
    raises(function() rig.model{ "gemini/gemini-2.0-flash", effort = "high" } end, "'effort'")
    raises(function() rig.model{ "anthropic/claude-3-5-haiku-latest", structured_output = true } end,
      "native structured output")
    raises(function() rig.model{ "openai/gpt-4o", max_tokens = 20000 } end,
      "field 'max_tokens' is 20000, above the 16384 tokens 'openai/gpt%-4o' can write")
    raises(function() rig.model{ "openai/gpt-4.2" } end, "no catalog model 'openai/gpt%-4%.2'")
    raises(function() rig.model{ "claude-sonnet-4-5" } end, "did you mean 'anthropic/claude%-sonnet%-4%-5'")
    raises(function() rig.model{ "anthropic/claude-sonnet-4-5", provider = "openai" } end,
      "field 'provider' comes from the catalog id")
    raises(function() rig.model{ "anthropic/claude-sonnet-4-5", name = "x" } end, "field 'name'")
    raises(function() rig.model{ "anthropic/claude-sonnet-4-5", "openai/gpt-4.1" } end, "takes one catalog id")
    raises(function() rig.model{ 42 } end, "must be a catalog id")
    raises(function() rig.model{ "anthropic/claude-sonnet-4-5", tiemout = 3 } end, "unknown field 'tiemout'")
    raises(function() rig.model{ "anthropic/claude-sonnet-4-5", temperature = 1.5 } end, "temperature")
  end)

  it("prices a streamed reply with the catalog's figures", function()
    local p = mock.start()
    p:push{ body = mock.sse({
      { type = "message_start", message = { id = "m", type = "message", role = "assistant",
        model = "claude-sonnet-4-5", content = json.array {}, usage = { input_tokens = 1000,
        output_tokens = 1, cache_read_input_tokens = 20000, cache_creation_input_tokens = 4000 } } },
      { type = "content_block_start", index = 0, content_block = { type = "text", text = "" } },
      { type = "content_block_delta", index = 0, delta = { type = "text_delta", text = "hi" } },
      { type = "message_delta", delta = { stop_reason = "end_turn" }, usage = { output_tokens = 500 } },
      { type = "message_stop" } }, true) }
    local m = rig.model{ "anthropic/claude-sonnet-4-5", base_url = p.url .. "/v1", api_key_env = KEY_ENV }
    local r = assert(m:invoke{ messages = { { role = "user", content = "x" } } })
    p:close()
    local want = (1000 * 3 + 20000 * 0.3 + 4000 * 3.75 + 500 * 15) / 1e6
    expect(math.abs(r.usage.cost - want) < 1e-12).to_be(true)
  end)
end)

describe("adding and correcting entries", function()
  it("adds a model, then serves it by id", function()
    local id = catalog.add{ id = "openai-compatible/llama3.1", base_url = "http://127.0.0.1:11434/v1",
      context_window = 131072, max_output = 8192, tools = true, thinking = false,
      structured_output = false, prices = { input = 0, output = 0 }, note = "a local Ollama" }
    expect(id).to_be("openai-compatible/llama3.1")
    local m = rig.model{ "openai-compatible/llama3.1" }
    expect(m.base_url).to_be("http://127.0.0.1:11434/v1")
    expect(m.context_window).to_be(131072)
    expect(m.structured_output).to_be(false)
    expect(catalog.list("openai-compatible")).to_equal({ "openai-compatible/llama3.1" })
  end)

  it("corrects an entry field by field; get returns a copy", function()
    catalog.add{ id = "openai/gpt-4o-mini", prices = { input = 0.2 } }
    local e = assert(catalog.get("openai/gpt-4o-mini"))
    expect(e.prices).to_equal({ input = 0.2, output = 0.6, cache_read = 0.075 })
    expect(e.context_window).to_be(128000)
    e.prices.input = 99
    expect(assert(catalog.get("openai/gpt-4o-mini")).prices.input).to_be(0.2)
    expect(rig.model{ "openai/gpt-4o-mini" }.prices.input).to_be(0.2)
    -- an entry says a model thinks now: the shorthand follows
    catalog.add{ id = "openai/gpt-4o-mini", thinking = true }
    expect(rig.model{ "openai/gpt-4o-mini", thinking = true }.thinking).to_be(true)
    -- new aliases replace the old ones
    catalog.add{ id = "openai/gpt-4o-mini", aliases = { "gpt-4o-mini-test" } }
    expect(rig.model{ "openai/gpt-4o-mini-test" }.name).to_be("gpt-4o-mini-test")
    expect(catalog.get("openai/gpt-4o-mini-2024-07-18")).to_be_nil()
  end)

  it("validates entries, naming the field", function()
    raises(function() catalog.add{ id = "llama" } end, "rig.model.catalog.add: field 'id' must be \"provider/name\"")
    raises(function() catalog.add{ id = "bedrock/x" } end, "unknown provider 'bedrock'")
    raises(function() catalog.add{ id = "openai/x", contxt = 1 } end, "unknown field 'contxt'")
    raises(function() catalog.add{ id = "openai/x", context_window = 1.5 } end, "'context_window' must be a whole number")
    raises(function() catalog.add{ id = "openai/x", max_output = 0 } end, "'max_output'")
    raises(function() catalog.add{ id = "openai/x", prices = { input = -1 } } end, "'prices.input' must be a number")
    raises(function() catalog.add{ id = "openai/x", prices = { inptu = 1 } } end, "unknown field 'prices.inptu'")
    raises(function() catalog.add{ id = "openai/x", tools = "yes" } end, "'tools' must be a boolean")
    raises(function() catalog.add{ id = "openai/x", aliases = { "a/b" } } end, "'aliases%[1%]'")
    raises(function() catalog.add("x") end, "expects a table")
    expect(catalog.get("openai/x")).to_be_nil()
    -- the definition an entry makes is checked like any other
    catalog.add{ id = "openai-compatible/remote", base_url = "http://example.com/v1" }
    raises(function() rig.model{ "openai-compatible/remote" } end, "must use https://")
  end)

  it("loads entries from a JSON file, all or nothing", function()
    local good = tmpfile(json.encode{ models = json.array {
      { id = "gemini/gemini-9-test", context_window = 2000000, max_output = 65536,
        prices = { input = 1, output = 2, cache_read = 0.1 }, thinking = true, tools = true },
      { id = "anthropic/claude-sonnet-4-5", prices = { input = 2.5 } } } })
    expect(catalog.load(good)).to_be(2)
    expect(rig.model{ "gemini/gemini-9-test" }.context_window).to_be(2000000)
    expect(rig.model{ "anthropic/claude-sonnet-4-5" }.prices.input).to_be(2.5)
    catalog.add{ id = "anthropic/claude-sonnet-4-5", prices = { input = 3 } }
    local bad = tmpfile(json.encode(json.array {
      { id = "gemini/gemini-10-test" }, { id = "gemini/gemini-11-test", max_output = -5 } }))
    raises(function() catalog.load(bad) end,
      "rig.model.catalog.load: " .. bad:gsub("%p", "%%%0") .. ": models%[2%]: field 'max_output'")
    expect(catalog.get("gemini/gemini-10-test")).to_be_nil()
    local r, msg, code = catalog.load("/nonexistent/models.json")
    expect(r).to_be_nil(); expect(code).to_be("io"); expect(msg).to_match("cannot read")
    local notjson = tmpfile("{ nope")
    r, msg, code = catalog.load(notjson)
    expect(r).to_be_nil(); expect(code).to_be("invalid"); expect(msg).to_match("is not JSON")
    local nolist = tmpfile('{"model": []}')
    r, _, code = catalog.load(nolist)
    expect(r).to_be_nil(); expect(code).to_be("invalid")
    for _, f in ipairs { good, bad, notjson, nolist } do os.remove(f) end
  end)
end)
