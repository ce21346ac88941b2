-- Deadlines that hold (issue 17 §1): timeouts.total bounds a streamed call
-- against a provider that drips a valid stream byte by byte (each byte resets
-- the idle timer), across retries too; a stream cut inside an event is
-- "truncated"; a 2xx answer that is no event stream (a proxy's HTML page) is
-- said as such and not retried; too_large; and every wait of a session turn
-- (model, tool, gate) ends with the code "timeout" in its event. All over real
-- HTTP on loopback (tests/lua/mock_provider.lua), for each wire format.

local json = rig.json
local mock = dofile((os.getenv("LUARIG_ROOT") or ".") .. "/tests/lua/mock_provider.lua")

local KEY_ENV = "LUARIG_TEST_API_KEY"
local FAST = { attempts = 5, delay = 0.01, max_delay = 0.05 }
local PROVIDERS = { "openai", "openai-compatible", "anthropic", "openai-responses" }

local function user(text) return { messages = { { role = "user", content = text } } } end

local function wire(provider)
  return provider == "openai-compatible" and "openai" or provider
end

local function model_for(p, provider, extra)
  local def = { provider = provider, name = "test-model", base_url = p.url .. "/v1",
                api_key_env = KEY_ENV, retry = FAST }
  for k, v in pairs(extra or {}) do def[k] = v end
  return rig.model(def)
end

-- A reply long enough that dripping it takes far longer than any deadline here.
local function long_reply(provider)
  return mock.reply(wire(provider), string.rep("slowly ", 40))
end

describe("timeouts.total", function()
  for _, provider in ipairs(PROVIDERS) do
    it("ends a dripping " .. provider .. " stream at the deadline, not when it finishes",
      function()
        local p = mock.start()
        local body = long_reply(provider)
        p:push{ body = body, drip = 0.03 }   -- far longer than the deadline
        local m = model_for(p, provider, { timeouts = { idle = 5, total = 1 } })
        local t0 = rig.now()
        local st = assert(m:stream(user("x")))
        for _ in st:chunks() do end
        local r, msg, code = st:result()
        local took = rig.now() - t0
        p:close()
        expect(r).to_be_nil()
        expect(code).to_be("timeout")
        expect(msg).to_match("did not end within timeouts.total %(1 s%)")
        expect(took).at_most(#body * 0.03 / 3)
        expect(#p.requests).to_be(1)
      end)
  end

  it("bounds invoke the same way", function()
    local p = mock.start()
    p:push{ body = long_reply("anthropic"), drip = 0.03 }
    local m = model_for(p, "anthropic", { timeouts = { idle = 5, total = 1 } })
    local r, _, code = m:invoke(user("x"))
    p:close()
    expect(r).to_be_nil()
    expect(code).to_be("timeout")
  end)

  it("spans the retries: no attempt starts past it", function()
    local p = mock.start()
    for _ = 1, 5 do
      p:push{ status = 503, headers = { ["retry-after"] = "1" },
              body = '{"error":{"message":"down"}}' }
    end
    local m = model_for(p, "openai", { timeouts = { total = 1.5 },
      retry = { attempts = 5, delay = 0.01 } })
    local st, msg, code, detail = m:stream(user("x"))
    p:close()
    expect(st).to_be_nil()
    -- the first failure, then one retry after Retry-After; the third would start past 1.5 s
    expect(#p.requests).to_be(2)
    expect(code).to_be("server")
    expect(detail.status).to_be(503)
    expect(msg).to_match("not retried: attempt 3 would start past timeouts.total")
  end)

  it("bounds the wait for the headers too", function()
    local srv = rig.http.server{ listen = "127.0.0.1:0", routes = {
      ["POST /*"] = function() rig.sleep(20) return { status = 500, body = "late" } end } }
    local late = model_for({ url = srv.url:gsub("/$", "") }, "openai",
      { timeouts = { total = 0.5, header = 60 }, retry = { attempts = 3, delay = 0.01 } })
    local t0 = rig.now()
    local st, msg, code = late:stream(user("x"))
    local took = rig.now() - t0
    srv:close()
    expect(st).to_be_nil()
    expect(code).to_be("timeout")
    expect(msg).to_match("did not end within timeouts.total %(0.5 s%)")
    expect(took).at_most(10)
  end)
end)

describe("a stream cut short", function()
  for _, provider in ipairs(PROVIDERS) do
    it("inside an event is truncated on " .. provider, function()
      local p = mock.start()
      local body = mock.reply(wire(provider), "some text first")
      -- the answer ends cleanly in the middle of its last JSON event
      local last = 1
      while true do
        local i = body:find("data: {", last + 1, true)
        if not i then break end
        last = i
      end
      p:push{ body = body, end_after = last + 15 }
      local st = assert(model_for(p, provider):stream(user("x")))
      local n = 0
      for _ in st:chunks() do n = n + 1 end
      local r, msg, code = st:result()
      p:close()
      expect(n > 0).to_be(true)
      expect(r).to_be_nil()
      expect(code).to_be("truncated")
      expect(msg).to_match("the stream ended inside an event")
      expect(#p.requests).to_be(1)   -- content came: never retried
    end)
  end

  it("inside an event records and replays as truncated", function()
    local p = mock.start()
    local body = mock.reply("openai", "recorded")
    p:push{ body = body, end_after = #body - 30 }
    local file = os.tmpname()
    local rec = rig.model.record(model_for(p, "openai"), file)
    local _, _, code = rec:invoke(user("x"))
    p:close()
    expect(code).to_be("truncated")
    local r, msg, code2 = rig.model.replay(file):invoke(user("x"))
    os.remove(file)
    expect(r).to_be_nil()
    expect(code2).to_be("truncated")
    expect(msg).to_match("ended inside an event")
  end)

  it("before any content is retried as truncated", function()
    local p = mock.start()
    local body = mock.reply("anthropic", "second")
    p:push{ body = body, end_after = 30 }
    p:push{ body = body }
    local r = assert(model_for(p, "anthropic"):invoke(user("x")))
    p:close()
    expect(r.attempts).to_be(2)
    expect(r.message.content[1].text).to_be("second")
  end)
end)

describe("a 2xx answer that is no event stream", function()
  local HTML = "<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head>"
    .. "<body><center>nginx</center></body></html>\n"

  for _, provider in ipairs(PROVIDERS) do
    it("says what came on " .. provider .. ", once (not retried)", function()
      local p = mock.start()
      for _ = 1, 5 do p:push{ status = 200, content_type = "text/html; charset=utf-8", body = HTML } end
      local r, msg, code = model_for(p, provider):invoke(user("x"))
      p:close()
      expect(r).to_be_nil()
      expect(code).to_be("protocol")
      expect(msg).to_match("HTTP 200 answered with content type 'text/html; charset=utf%-8', "
        .. "not an event stream")
      expect(msg).to_match("the body starts: '<!DOCTYPE html><html><head><title>502 Bad Gateway")
      expect(msg:find("final event", 1, true)).to_be_nil()
      expect(#p.requests).to_be(1)
    end)
  end

  it("shows a JSON error sent with status 200", function()
    local p = mock.start()
    p:push{ status = 200, content_type = "application/json",
            body = '{"error":{"message":"quota exceeded for this key"}}' }
    local r, msg, code = model_for(p, "openai"):invoke(user("x"))
    p:close()
    expect(r).to_be_nil()
    expect(code).to_be("protocol")
    expect(msg).to_match("application/json")
    expect(msg).to_match("quota exceeded for this key")
  end)

  it("an empty event stream is truncated, with what came", function()
    local p = mock.start()
    p:push{ body = ": just a comment\n\n" }
    local r, msg, code = model_for(p, "openai", { retry = { attempts = 1 } }):invoke(user("x"))
    p:close()
    expect(r).to_be_nil()
    expect(code).to_be("truncated")
    expect(msg).to_match("ended before its final event %(HTTP 200, content type "
      .. "'text/event%-stream'; the body starts: ': just a comment")
  end)
end)

describe("too_large", function()
  it("is the code of an event line over the cap", function()
    local p = mock.start()
    p:push{ body = "data: " .. string.rep("x", (1 << 20) + 16) .. "\n\n" }
    local r, msg, code = model_for(p, "openai"):invoke(user("x"))
    p:close()
    expect(r).to_be_nil()
    expect(code).to_be("too_large")
    expect(msg).to_match("cap")
  end)
end)

-- ---- every wait of a session turn ----

local function allow_all()
  return rig.gate{ access = { ["filesystem.read"] = "allow", ["filesystem.write"] = "allow",
    network = "allow", ["command.execute"] = "allow" }, approver = "headless" }
end

local function session_for(model, opts)
  opts = opts or {}
  local loop = rig.loop{ name = "assistant", model = model, tools = opts.tools or {},
    gate = opts.gate or allow_all(), policy_revision = "v1", limits = opts.limits }
  local r = rig.define{ loops = { loop }, primers = { "assistant" }, store = rig.store.memory() }
  return assert(r:session())
end

local function run_turn(s, input)
  local sub = s:subscribe{}
  assert(s:submit(input or "go"))
  local evs = {}
  for ev in sub:events(30) do
    evs[#evs + 1] = ev
    if ev.ends_turn then break end
  end
  sub:close()
  return evs
end

local function of_type(evs, ty)
  for _, e in ipairs(evs) do if e.type == ty then return e end end
end

describe("a session turn", function()
  it("with a dripping provider ends TurnFailed code timeout within the total", function()
    local p = mock.start()
    local body = long_reply("openai")
    p:push{ body = body, drip = 0.03 }
    local m = model_for(p, "openai-compatible", { timeouts = { idle = 5, total = 1.5 } })
    local s = session_for(m)
    local t0 = rig.now()
    local evs = run_turn(s)
    local took = rig.now() - t0
    local last = evs[#evs]
    expect(last.type).to_be("TurnFailed")
    expect(last.error.code).to_be("timeout")
    expect(last.error.message).to_match("timeouts.total %(1.5 s%)")
    expect(took).at_most(#body * 0.03 / 3)
    s:shutdown()
    p:close()
  end)

  it("cancels a tool call past limits.tool_timeout and goes on", function()
    local slow = rig.tool{ name = "slow", description = "sleeps",
      schema = { type = "object", properties = {} },
      prepare = function() return { summary = "slow", requirements = {} } end,
      run = function() rig.sleep(60) return "woke" end }
    local m = rig.model.script{ { tool_calls = { { name = "slow", input = {} } } },
                                { text = "went on" } }
    local s = session_for(m, { tools = { slow }, limits = { tool_timeout = 0.3 } })
    local t0 = rig.now()
    local evs = run_turn(s)
    expect(rig.now() - t0).at_most(20)
    expect(evs[#evs].type).to_be("TurnDone")
    local done = of_type(evs, "ToolCallCompleted")
    expect(done.code).to_be("timeout")
    expect(done.is_error).to_be(true)
    local step = of_type(evs, "StepDone")
    local res = step.results.content[1]
    expect(res.is_error).to_be(true)
    expect(res.content).to_match("^error: timeout: tool 'slow' did not finish within 0.3 s")
    s:shutdown()
  end)

  it("denies a gate nobody answers within limits.gate_timeout and goes on", function()
    local net = rig.tool{ name = "net", description = "needs the network",
      schema = { type = "object", properties = {} },
      prepare = function()
        return { summary = "reach example.com", requirements = {
          { kind = "network", scope = "example.com:443", match = "tcp://example.com:443" } } }
      end,
      run = function() return "reached" end }
    local gate = rig.gate{ access = { network = "gated" }, approver = "interactive" }
    local m = rig.model.script{ { tool_calls = { { name = "net", input = {} } } },
                                { text = "no answer, went on" } }
    local s = session_for(m, { tools = { net }, gate = gate, limits = { gate_timeout = 0.3 } })
    local evs = run_turn(s)
    expect(evs[#evs].type).to_be("TurnDone")
    expect(of_type(evs, "GateOpened")).to_be_truthy()
    local resolved = of_type(evs, "GateResolved")
    expect(resolved.action).to_be("deny")
    expect(resolved.source).to_be("timeout")
    expect(resolved.code).to_be("timeout")
    local res = of_type(evs, "StepDone").results.content[1]
    expect(res.content).to_match("nobody answered within 0.3 s %(limits.gate_timeout%)")
    expect(#s:gates()).to_be(0)
    -- journaled like any resolution
    local seen
    for rec in s:journal() do if rec.type == "GateResolved" then seen = rec end end
    expect(seen.source).to_be("timeout")
    s:shutdown()
  end)

  it("checks the new limits and keeps old revisions", function()
    local m = rig.model.script{ steps = {} }
    expect(function() rig.loop{ name = "a", model = m, limits = { tool_timeout = 0 } } end)
      .to_fail("limits.tool_timeout")
    expect(function() rig.loop{ name = "a", model = m, limits = { gate_timeout = "1" } } end)
      .to_fail("limits.gate_timeout")
    local a = rig.loop{ name = "a", model = m }
    local b = rig.loop{ name = "a", model = m, limits = { tool_timeout = 5 } }
    expect(a:revision() ~= b:revision()).to_be(true)
    expect(b.limits.tool_timeout).to_be(5)
    expect(json.encode(a.limits)).to_be(json.encode(rig.loop{ name = "a", model = m }.limits))
  end)
end)
