-- Prompt caching (rig.model.cache): the policy, Anthropic's breakpoints,
-- OpenAI's prompt_cache_key, cache usage and its price, for every provider;
-- golden request bodies as each codec sends them.
-- Golden files: tests/model/golden/; UPDATE=1 rewrites them (then READ them).
local json = require "rig.json"
local core = require "rig.core"
local U = dofile((os.getenv("LUARIG_ROOT") or ".") .. "/tests/lua/model_codec_util.lua")
local mock = dofile(U.root .. "/tests/lua/mock_provider.lua")

local KEY_ENV = "LUARIG_TEST_API_KEY"
local FAST = { attempts = 3, delay = 0.01, max_delay = 0.05 }

local function raises(fn, pattern)
  local ok, err = pcall(fn)
  expect(ok).to_be(false)
  expect(tostring(err)).to_match(pattern)
end

local function model(provider, extra)
  local def = { provider = provider, name = "test-model", api_key_env = KEY_ENV, retry = FAST }
  if provider == "openai-compatible" then def.base_url = "http://127.0.0.1:1/v1" end
  for k, v in pairs(extra or {}) do def[k] = v end
  return rig.model(def)
end

-- A long conversation: three user turns, tool calls and results between them.
local function session_request(turns)
  local msgs = { { role = "user", content = "Summarize the three logs." } }
  for i = 1, turns or 3 do
    msgs[#msgs + 1] = { role = "assistant", content = {
      { type = "text", text = "Reading log " .. i .. "." },
      { type = "tool_use", id = "call_" .. i, name = "read", input = { path = "log" .. i } } } }
    msgs[#msgs + 1] = { role = "tool", content = {
      { type = "tool_result", tool_use_id = "call_" .. i, content = "line " .. i } } }
  end
  return {
    system = "You read logs.",
    messages = msgs,
    tools = { { name = "read", description = "Reads a file.",
                schema = { type = "object", properties = { path = { type = "string" } },
                           required = { "path" } } },
              { name = "list", schema = { type = "object", properties = {} } } },
    cache_key = "session-1/assistant",
  }
end

local function marks(body)
  local out = {}
  local function walk(v, path)
    if type(v) ~= "table" then return end
    if v.cache_control then out[#out + 1] = path end
    for k, x in pairs(v) do
      if k ~= "cache_control" then walk(x, path .. "." .. tostring(k)) end
    end
  end
  walk(body, "$")
  table.sort(out)
  return out
end

describe("the cache policy", function()
  it("defaults to auto and validates a tuned one, naming the field", function()
    local m = model("anthropic")
    expect(m.cache).to_equal({ tools = true, system = true, messages = 2, key = true })
    expect(model("anthropic", { cache = "off" }).cache).to_be(false)
    expect(model("anthropic", { cache = { ttl = "1h", messages = 1 } }).cache)
      .to_equal({ tools = true, system = true, messages = 1, key = true, ttl = "1h" })
    raises(function() model("anthropic", { cache = "sometimes" }) end,
      "field 'cache' must be \"auto\", \"off\" or a table %(got 'sometimes'%)")
    raises(function() model("anthropic", { cache = { messages = 5 } }) end, "'cache.messages' must be between 0 and 4")
    raises(function() model("anthropic", { cache = { messages = 3 } }) end,
      "asks for 5 breakpoints %(tools, system and 3 messages%); Anthropic allows 4")
    raises(function() model("anthropic", { cache = { messages = 1.5 } }) end, "integer")
    raises(function() model("anthropic", { cache = { ttl = "2h" } }) end, "'cache.ttl' must be \"5m\" or \"1h\"")
    raises(function() model("openai", { cache = { retention = "forever" } }) end, "cache.retention")
    raises(function() model("openai", { cache = { key = 5 } }) end, "'cache.key' must be a boolean or a string")
    raises(function() model("openai", { cache = { key = "" } }) end, "'cache.key' must be 1 to 64")
    raises(function() model("openai", { cache = { keys = true } }) end, "unknown field 'cache.keys'")
    raises(function() model("openai", { cache = { tools = "yes" } }) end, "'cache.tools' must be a boolean")
  end)

  it("checks request hints and keys", function()
    local m = model("anthropic")
    raises(function() m:encode{ messages = { { role = "user", content = { { type = "text", text = "x",
      cache = "yes" } } } } } end, "request.messages%[1%].content%[1%].cache: must be a boolean")
    raises(function() m:encode{ messages = { { role = "user", content = "x" } }, cache_key = 7 } end,
      "request.cache_key: must be a string")
    raises(function() m:encode{ messages = { { role = "user", content = "x" } },
      cache_key = string.rep("k", 257) } end, "request.cache_key")
  end)
end)

describe("anthropic breakpoints", function()
  it("matches the golden body: last tool, system, the last two user turns", function()
    U.golden_text("request_cache_anthropic", model("anthropic"):encode(session_request(), { indent = 2 }))
    local body = json.decode(model("anthropic"):encode(session_request()))
    expect(marks(body)).to_equal({ "$.messages.5.content.1", "$.messages.7.content.1",
                                   "$.system.1", "$.tools.2" })
  end)

  it("sends nothing with cache = \"off\", hints included", function()
    local req = session_request()
    req.messages[1] = { role = "user", content = { { type = "text", text = "Summarize.", cache = true } } }
    local s = model("anthropic", { cache = "off" }):encode(req)
    expect(s:find("cache_control", 1, true)).to_be_nil()
    expect(json.decode(s).system).to_be("You read logs.")
    expect(s:find("prompt_cache", 1, true)).to_be_nil()
  end)

  it("places hints first, then the policy, in its order, within 4 (golden: 1h)", function()
    local req = session_request()
    req.messages[1] = { role = "user", content = { { type = "text", text = "Summarize.", cache = true } } }
    local m = model("anthropic", { cache = { ttl = "1h" } })
    U.golden_text("request_cache_anthropic_1h_hint", m:encode(req, { indent = 2 }))
    local body = json.decode(m:encode(req))
    -- the hint, the last two turns, the system; the tools' breakpoint did not fit
    expect(marks(body)).to_equal({ "$.messages.1.content.1", "$.messages.5.content.1",
                                   "$.messages.7.content.1", "$.system.1" })
    expect(body.system[1].cache_control).to_equal({ type = "ephemeral", ttl = "1h" })
    -- five hints are more than the API takes
    local many = { messages = {} }
    for i = 1, 5 do
      many.messages[i] = { role = i % 2 == 1 and "user" or "assistant",
                           content = { { type = "text", text = "t" .. i, cache = true } } }
    end
    raises(function() m:encode(many) end, "anthropic: the request holds 5 cache hints %(cache = true%); the API allows 4")
  end)

  it("follows the tuned counts and what the request has", function()
    local req = session_request()
    req.tools = nil
    local body = json.decode(model("anthropic"):encode(req))
    expect(marks(body)).to_equal({ "$.messages.5.content.1", "$.messages.7.content.1", "$.system.1" })
    req.system = nil
    body = json.decode(model("anthropic", { cache = { messages = 4 , system = false, tools = false } }):encode(req))
    expect(marks(body)).to_equal({ "$.messages.1.content.1", "$.messages.3.content.1",
                                   "$.messages.5.content.1", "$.messages.7.content.1" })
    body = json.decode(model("anthropic", { cache = { messages = 0 } }):encode(session_request()))
    expect(marks(body)).to_equal({ "$.system.1", "$.tools.2" })
    -- a system prompt without a breakpoint stays a string
    body = json.decode(model("anthropic", { cache = { system = false } }):encode(session_request()))
    expect(body.system).to_be("You read logs.")
    -- one message (a one-off call, a summary): nothing would read it back; a hint still counts
    body = json.decode(model("anthropic"):encode{ system = "s", messages = { { role = "user", content = "x" } } })
    expect(marks(body)).to_equal({ "$.system.1" })
    body = json.decode(model("anthropic"):encode{ messages = { { role = "user",
      content = { { type = "text", text = "a long document", cache = true } } } } })
    expect(marks(body)).to_equal({ "$.messages.1.content.1" })
    -- a prefill (the request ends with the assistant): the user turns before it
    req = session_request(1)
    req.messages[#req.messages + 1] = { role = "assistant", content = "{" }
    body = json.decode(model("anthropic"):encode(req))
    expect(marks(body)).to_equal({ "$.messages.1.content.1", "$.messages.3.content.1",
                                   "$.system.1", "$.tools.2" })
  end)

  it("makes each step read the prefix the step before wrote", function()
    local m = model("anthropic")
    local prev
    for turns = 1, 6 do
      local body = json.decode(m:encode(session_request(turns)))
      -- the user turns that carry a breakpoint, as the text of their last block
      local marked = {}
      for _, msg in ipairs(body.messages) do
        local last = msg.content[#msg.content]
        if last.cache_control then
          last.cache_control = nil
          marked[#marked + 1] = json.encode(last)
        end
      end
      expect(#marked).to_be(2)
      if prev then expect(marked[1]).to_be(prev) end -- read: the last breakpoint of the step before
      prev = marked[2]                                -- write: this step's whole prefix
    end
  end)
end)

describe("openai prompt_cache_key", function()
  local function hashed(k) return "luarig-" .. core.sha256_hex(k):sub(1, 32) end

  it("matches the golden bodies (Chat Completions and Responses)", function()
    for _, p in ipairs { "openai", "openai-responses", "openai-compatible", "gemini" } do
      U.golden_text("request_cache_" .. p, model(p, { cache = { retention = "24h" } })
        :encode(session_request(1), { indent = 2 }))
    end
  end)

  it("sends the caller's key hashed, or the model's own, never for compatible servers", function()
    local req = session_request(1)
    local function body(p, cache)
      return json.decode(model(p, { cache = cache }):encode(req))
    end
    for _, p in ipairs { "openai", "openai-responses" } do
      local b = body(p)
      expect(b.prompt_cache_key).to_be(hashed("session-1/assistant"))
      expect(b.prompt_cache_retention).to_be_nil()
      expect(body(p, { key = "tenant-7" }).prompt_cache_key).to_be("tenant-7")
      expect(body(p, { key = false }).prompt_cache_key).to_be_nil()
      expect(body(p, "off").prompt_cache_key).to_be_nil()
      expect(body(p, { retention = "in_memory" }).prompt_cache_retention).to_be("in_memory")
    end
    expect(body("openai-compatible").prompt_cache_key).to_be_nil()
    expect(body("openai-compatible", { retention = "24h" }).prompt_cache_retention).to_be_nil()
    req.cache_key = nil
    expect(body("openai").prompt_cache_key).to_be_nil()
    -- no name leaves the machine: the key is a digest
    req.cache_key = "alice's secret project/assistant"
    expect(body("openai").prompt_cache_key:find("alice", 1, true)).to_be_nil()
  end)
end)

-- ---- usage and cost, through the driver ----

-- One reply per wire format with cache reads (and writes where the
-- provider reports them): 100 uncached input, 900 read, 300 written, 20 out.
local function cached_reply(provider)
  if provider == "anthropic" then
    return mock.sse({
      { type = "message_start", message = { id = "m", type = "message", role = "assistant", model = "c",
        content = json.array {}, usage = { input_tokens = 100, output_tokens = 1,
          cache_read_input_tokens = 900, cache_creation_input_tokens = 300 } } },
      { type = "content_block_start", index = 0, content_block = { type = "text", text = "" } },
      { type = "content_block_delta", index = 0, delta = { type = "text_delta", text = "ok" } },
      { type = "message_delta", delta = { stop_reason = "end_turn" }, usage = { output_tokens = 20 } },
      { type = "message_stop" } }, true)
  elseif provider == "openai" then
    return mock.sse({
      { id = "c", object = "chat.completion.chunk", model = "g", choices = json.array {
        { index = 0, delta = { content = "ok" }, finish_reason = "stop" } } },
      { id = "c", object = "chat.completion.chunk", model = "g", choices = json.array {},
        usage = { prompt_tokens = 1000, completion_tokens = 20,
                  prompt_tokens_details = { cached_tokens = 900 } } }, "[DONE]" })
  elseif provider == "openai-responses" then
    return mock.sse({
      { type = "response.output_text.delta", output_index = 0, delta = "ok" },
      { type = "response.completed", response = { model = "g", usage = { input_tokens = 1000,
        output_tokens = 20, input_tokens_details = { cached_tokens = 900 } } } } })
  else
    return mock.sse({ { candidates = json.array { { index = 0, finishReason = "STOP",
      content = { role = "model", parts = json.array { { text = "ok" } } } } },
      usageMetadata = { promptTokenCount = 1000, cachedContentTokenCount = 900,
                        candidatesTokenCount = 20 } } })
  end
end

describe("cache usage and its price", function()
  local prices = { input = 3, output = 15, cache_read = 0.3, cache_write = 3.75 }
  for _, p in ipairs { "anthropic", "openai", "openai-responses", "gemini" } do
    it("reports cache reads and prices them on " .. p, function()
      local srv = mock.start()
      srv:push{ body = cached_reply(p) }
      local m = rig.model{ provider = p, name = "test-model", base_url = srv.url .. "/v1",
                           api_key_env = KEY_ENV, retry = FAST, prices = prices }
      local r = assert(m:invoke{ messages = { { role = "user", content = "x" } } })
      srv:close()
      local u = r.usage
      expect(u.input_tokens).to_be(100)
      expect(u.cache_read_tokens).to_be(900)
      expect(u.output_tokens).to_be(20)
      local written = p == "anthropic" and 300 or 0
      expect(u.cache_creation_tokens).to_be(p == "anthropic" and 300 or nil)
      local want = (100 * 3 + 900 * 0.3 + written * 3.75 + 20 * 15) / 1e6
      expect(math.abs(u.cost - want) < 1e-12).to_be(true)
    end)
  end

  it("prices cache tokens at the input price when the model has no cache prices", function()
    local srv = mock.start()
    srv:push{ body = cached_reply("anthropic") }
    local m = rig.model{ provider = "anthropic", name = "c", base_url = srv.url .. "/v1",
                         api_key_env = KEY_ENV, prices = { input = 2, output = 10 } }
    local r = assert(m:invoke{ messages = { { role = "user", content = "x" } } })
    srv:close()
    expect(math.abs(r.usage.cost - ((100 + 900 + 300) * 2 + 20 * 10) / 1e6) < 1e-12).to_be(true)
  end)

  it("takes cache_creation, the earlier name of cache_write", function()
    expect(model("anthropic", { prices = { input = 1, cache_creation = 1.25 } }).prices)
      .to_equal({ input = 1, cache_write = 1.25 })
    raises(function() model("anthropic", { prices = { cache_creation = 1, cache_write = 2 } }) end,
      "'prices.cache_write' and 'prices.cache_creation' %(its earlier name%) differ")
    raises(function() model("anthropic", { prices = { cache_writes = 1 } }) end, "unknown field 'prices.cache_writes'")
  end)
end)

-- ---- a session: one key per loop of a session, breakpoints moving on ----

local function rig_with(m)
  local read = rig.tool{ name = "read", description = "Reads a log.",
    schema = { type = "object", properties = { path = { type = "string" } }, required = { "path" } },
    prepare = function(a) return { summary = "read " .. a.path, requirements = {} } end,
    run = function(_, _) return string.rep("log line\n", 20) end }
  local g = rig.gate{ access = { ["filesystem.read"] = "allow" }, approver = "headless" }
  local l = rig.loop{ name = "assistant", model = m, system = "You read logs.", tools = { read },
                      gate = g, policy_revision = "t" }
  return rig.define{ loops = { l }, primers = { "assistant" }, store = rig.store.memory() }
end

describe("prompt caching in a session", function()
  it("sends one stable prompt_cache_key per session and loop", function()
    local srv = mock.start()
    for _ = 1, 2 do
      srv:push{ body = mock.reply("openai", nil, { { id = "call_1", name = "read", args = '{"path":"a"}' } }) }
      srv:push{ body = mock.reply("openai", "done") }
    end
    local m = rig.model{ provider = "openai", name = "gpt-test", base_url = srv.url .. "/v1",
                         api_key_env = KEY_ENV, retry = FAST }
    local r = rig_with(m)
    local ids = {}
    for i = 1, 2 do
      local s = assert(r:session())
      ids[i] = s.id
      assert(s:submit("read a"))
      assert(s:wait_idle())
      s:shutdown()
    end
    srv:close()
    expect(#srv.requests).to_be(4)
    local keys = {}
    for i, rq in ipairs(srv.requests) do keys[i] = json.decode(rq.body).prompt_cache_key end
    expect(keys[1]).to_be("luarig-" .. core.sha256_hex(ids[1] .. "/assistant"):sub(1, 32))
    expect(keys[2]).to_be(keys[1])
    expect(keys[3]).to_be("luarig-" .. core.sha256_hex(ids[2] .. "/assistant"):sub(1, 32))
    expect(keys[4]).to_be(keys[3])
    expect(keys[3] ~= keys[1]).to_be(true)
  end)

  it("moves Anthropic's breakpoints along with the history", function()
    local srv = mock.start()
    srv:push{ body = mock.reply("anthropic", nil, { { id = "toolu_1", name = "read", args = '{"path":"a"}' } }) }
    srv:push{ body = mock.reply("anthropic", nil, { { id = "toolu_2", name = "read", args = '{"path":"b"}' } }) }
    srv:push{ body = mock.reply("anthropic", "done") }
    local m = rig.model{ provider = "anthropic", name = "claude-test", base_url = srv.url .. "/v1",
                         api_key_env = KEY_ENV, retry = FAST }
    local s = assert(rig_with(m):session())
    assert(s:submit("read a then b"))
    assert(s:wait_idle())
    s:shutdown()
    srv:close()
    expect(#srv.requests).to_be(3)
    local want = {
      { "$.system.1", "$.tools.1" },
      { "$.messages.1.content.1", "$.messages.3.content.1", "$.system.1", "$.tools.1" },
      { "$.messages.3.content.1", "$.messages.5.content.1", "$.system.1", "$.tools.1" },
    }
    for i, rq in ipairs(srv.requests) do
      local body = json.decode(rq.body)
      expect(marks(body)).to_equal(want[i])
      expect(body.prompt_cache_key).to_be_nil()
    end
  end)
end)

describe("cache settings in cassettes", function()
  it("records the policy and replays with it; older cassettes replay without caching", function()
    local file = os.tmpname()
    local srv = mock.start()
    srv:push{ body = mock.reply("anthropic", "one") }
    local live = rig.model{ provider = "anthropic", name = "c", base_url = srv.url .. "/v1",
                            api_key_env = KEY_ENV, cache = { ttl = "1h", tools = false } }
    local rec = rig.model.record(live, file)
    local req = { system = "s", messages = { { role = "user", content = "x" } } }
    local a = assert(rec:invoke(req))
    srv:close()
    local rp = rig.model.replay(file)
    expect(rp.cache).to_equal({ ttl = "1h", tools = false, system = true, messages = 2, key = true })
    expect(json.encode(assert(rp:invoke(req)))).to_be(json.encode(a))
    -- an older cassette: no "cache" in its header, no breakpoints in its bodies
    local f = assert(io.open(file)); local text = f:read("a"); f:close()
    local header, call = text:match("^([^\n]*)\n([^\n]*)\n")
    local h = json.decode(header)
    h.model.cache = nil
    local c = json.decode(call)
    c.request.body.system = "s"
    c.request.body.messages[1].content[1].cache_control = nil
    f = assert(io.open(file, "w"))
    f:write(json.encode(h), "\n", json.encode(c), "\n")
    f:close()
    local old = rig.model.replay(file)
    expect(old.cache).to_be(false)
    assert(old:invoke(req))
    os.remove(file)
  end)
end)
