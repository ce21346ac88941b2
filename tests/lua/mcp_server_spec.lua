-- rig.mcp.server and `luarig mcp serve`: luarig's own client against luarig's server
-- over Streamable HTTP and stdio, the gate on every call, a rig's turns journaled,
-- the HTTP rules (Host, Origin, token, sessions). The conformance suite's server
-- scenarios are in tests/mcp/conformance.sh.
local json = require "rig.json"
local core = require "rig.core"

local ROOT = assert(core.fs_realpath(os.getenv("LUARIG_ROOT") or "."))
local LUARIG = os.getenv("LUARIG") or (ROOT .. "/build/luarig")
local EVERYTHING = ROOT .. "/tests/mcp/everything_server.lua"
local SERVE_RIG = ROOT .. "/tests/mcp/serve_rig.lua"

local function tmpdir(tag)
  local d = os.tmpname()
  os.remove(d)
  assert(os.execute("mkdir -p " .. d .. "-" .. tag))
  return d .. "-" .. tag
end
local dirs = {}
after_all(function() for _, d in ipairs(dirs) do os.execute("rm -rf " .. d) end end)

local function notes_server(extra)
  local updated = {}
  local o = {
    name = "notes", version = "0.1.0", page_size = 2,
    tools = {
      { name = "add", description = "adds", input_schema = { type = "object",
          properties = { a = { type = "number" }, b = { type = "number" } } },
        run = function(a) return { content = json.array{ { type = "text", text = tostring(a.a + a.b) } },
                                   structuredContent = { sum = a.a + a.b } } end },
      { name = "fails", description = "fails", run = function() return nil, "it broke" end },
      { name = "raises", description = "raises", run = function() error("kaboom", 0) end },
      { name = "slow", description = "reports progress and logs",
        run = function(_, ctx)
          for i = 1, 3 do ctx.progress(i, 3, "step " .. i) end
          ctx.log("warning", "a warning")
          ctx.log("debug", "a debug line")
          return "slow done"
        end },
      rig.tool{ name = "write", description = "writes a file (gated)",
        schema = { type = "object", properties = { path = { type = "string" } }, required = { "path" } },
        prepare = function(a)
          return { summary = "write " .. a.path, requirements = { { kind = "filesystem.write", scope = a.path } } }
        end,
        run = function(req) return "wrote " .. req.requirements[1].scope end },
    },
    resources = { { uri = "notes://readme", name = "readme", mime_type = "text/plain", text = "hello notes" } },
    resource_templates = { { uri_template = "notes://n/{id}", name = "note",
      read = function(_, v) if v.id == "missing" then return nil, "no such note" end return "note " .. v.id end,
      complete = { id = { "alpha", "alps", "beta" } } } },
    prompts = { { name = "review", description = "review a file",
      arguments = { { name = "file", required = true } },
      get = function(a) return "Review " .. a.file end } },
    gate = rig.gate{ access = { mcp = "allow", ["filesystem.write"] = "gated" }, approver = "interactive" },
  }
  for k, v in pairs(extra or {}) do o[k] = v end
  return rig.mcp.server(o), updated
end

describe("rig.mcp.server over Streamable HTTP", function()
  it("lists in pages, calls, maps errors, reads, completes, reports progress and logs", function()
    local srv = notes_server()
    local h = assert(srv:serve_http{ listen = "127.0.0.1:0" })
    local logs = {}
    local c = assert(rig.mcp.http{ name = "notes", url = h.url, legacy = false,
      on_notification = function(m, p) if m == "notifications/message" then logs[#logs + 1] = p.level end end })
    expect(c.server_info.name).to_be("notes")
    local tools = assert(c:list_tools())
    expect(#tools).to_be(5) -- three pages of two
    expect(tools[5].name).to_be("write")
    local r = assert(c:call("add", { a = 2, b = 3 }))
    expect(r.content[1].text).to_be("5")
    expect(r.structuredContent.sum).to_be(5)
    r = assert(c:call("fails", {}))
    expect(r.isError).to_be(true)
    expect(r.content[1].text).to_be("it broke")
    r = assert(c:call("raises", {}))
    expect(r.isError).to_be(true)
    expect(r.content[1].text).to_match("kaboom")
    local _, msg, code = c:call("nope", {})
    expect(code).to_be("rpc")
    expect(msg).to_match("unknown tool: nope")
    local steps = {}
    assert(c:set_log_level("info"))
    r = assert(c:call("slow", {}, { on_progress = function(p, total) steps[#steps + 1] = p .. "/" .. total end }))
    expect(table.concat(steps, " ")).to_be("1/3 2/3 3/3")
    expect(table.concat(logs, " ")).to_be("warning") -- debug is below the level
    expect(c:read_text("notes://readme")).to_be("hello notes")
    expect(c:read_text("notes://n/42")).to_be("note 42")
    _, msg = c:read("notes://n/missing")
    expect(msg).to_match("no such note")
    expect(c:prompt_text("review", { file = "a.c" })).to_be("Review a.c")
    local comp = assert(c:request("completion/complete", { ref = { type = "ref/resource",
      uri = "notes://n/{id}" }, argument = { name = "id", value = "al" } }))
    expect(table.concat(comp.completion.values, ",")).to_be("alpha,alps")
    c:close()
    h:close()
  end, { timeout = 60 })

  it("passes each call through the gate: gated asks the client's person, who may refuse", function()
    local calls = {}
    local srv = notes_server({ on_call = function(rec) calls[#calls + 1] = rec.tool .. ":" .. rec.verdict end })
    local h = assert(srv:serve_http{ listen = "127.0.0.1:0" })
    local answer = "accept"
    local asked = {}
    local c = assert(rig.mcp.http{ name = "notes", url = h.url, legacy = false,
      elicitation = function(req)
        asked[#asked + 1] = req.message
        if answer == "accept" then return { action = "accept", content = { approve = true } } end
        return { action = "decline" }
      end })
    local r = assert(c:call("write", { path = "/tmp/x" }))
    expect(r.content[1].text).to_be("wrote /tmp/x")
    expect(asked[1]).to_match("Allow the tool 'write'%? write /tmp/x")
    answer = "decline"
    r = assert(c:call("write", { path = "/tmp/y" }))
    expect(r.isError).to_be(true)
    expect(r.content[1].text).to_match("permission denied")
    c:close()
    -- a client without elicitation cannot approve: refused without asking
    local c2 = assert(rig.mcp.http{ name = "notes2", url = h.url, legacy = false })
    r = assert(c2:call("write", { path = "/tmp/z" }))
    expect(r.isError).to_be(true)
    expect(#asked).to_be(2)
    r = assert(c2:call("add", { a = 1, b = 1 }))
    expect(r.isError).to_be_nil()
    c2:close()
    expect(table.concat(calls, " ")).to_be("write:allow write:deny write:deny add:allow")
    h:close()
  end, { timeout = 60 })

  it("takes rig tools as they are: no prepare runs, needs_approval asks through the default gate", function()
    local ran = {}
    local srv = rig.mcp.server{ name = "plain", tools = {
      rig.tool{ name = "hello", description = "says hello",
        schema = { type = "object", properties = { who = { type = "string" } }, required = { "who" } },
        run = function(args) ran[#ran + 1] = args.who return "hello " .. args.who end },
      rig.tool{ name = "careful", description = "needs a person", needs_approval = true,
        run = function() ran[#ran + 1] = "careful" return "done carefully" end },
    } }
    local h = assert(srv:serve_http{ listen = "127.0.0.1:0" })
    local answers = { true, false }
    local c = assert(rig.mcp.http{ name = "plain", url = h.url, legacy = false,
      elicitation = function() return { action = "accept", content = { approve = table.remove(answers, 1) } } end })
    expect(c:call("hello", { who = "Ada" }).content[1].text).to_be("hello Ada")
    local r = assert(c:call("hello", {}))
    expect(r.isError).to_be(true)
    expect(r.content[1].text).to_match("^invalid arguments")
    expect(c:call("careful", {}).content[1].text).to_be("done carefully")
    r = assert(c:call("careful", {}))
    expect(r.isError).to_be(true)
    expect(table.concat(ran, " ")).to_be("Ada careful")
    c:close()
    h:close()
  end, { timeout = 60 })

  it("answers malformed input with a clear refusal and goes on", function()
    local srv = notes_server()
    local h = assert(srv:serve_http{ listen = "127.0.0.1:0" })
    local hd = { ["content-type"] = "application/json", accept = "application/json, text/event-stream" }
    local function post(body)
      return core.http_request{ url = h.url, method = "POST", headers = hd, body = body, timeout = 10 }
    end
    local r = post("{not json")
    expect(r.status).to_be(400)
    expect(json.decode(r.body).error.code).to_be(-32700)
    r = post('[{"jsonrpc":"2.0","id":1,"method":"ping"}]')
    expect(r.status).to_be(400)
    expect(json.decode(r.body).error.message).to_match("batches")
    -- and the server still serves
    local c = assert(rig.mcp.http{ name = "notes", url = h.url, legacy = false })
    expect(c:call("add", { a = 1, b = 1 }).content[1].text).to_be("2")
    c:close()
    h:close()
    -- over stdio: a line that is not JSON-RPC is answered or dropped, the next request served
    local p = assert(core.process_spawn{ argv = { LUARIG, EVERYTHING, "stdio" }, stdin = "pipe", stdout = "pipe",
                                         stderr = "pipe" })
    p:write('garbage\n{"jsonrpc":"1.0","id":7,"method":"ping"}\n{"jsonrpc":"2.0","id":8,"method":"ping"}\n')
    local got = ""
    while not got:find('"id":8', 1, true) do
      local chunk = p:read("stdout")
      if not chunk then break end
      got = got .. chunk
    end
    expect(got).to_match('"id":7')       -- answered -32600
    expect(got).to_match('%-32600')
    expect(got).to_match('{"id":8,"jsonrpc":"2.0","result":{}}')
    p:close_stdin()
    expect(p:wait(10).code).to_be(0)
  end, { timeout = 60 })

  it("sends resources/updated to subscribers only, and ends sessions on DELETE", function()
    local srv = notes_server()
    local h = assert(srv:serve_http{ listen = "127.0.0.1:0" })
    local got = core.cond()
    local seen = {}
    local c = assert(rig.mcp.http{ name = "notes", url = h.url, legacy = false })
    local other = assert(rig.mcp.http{ name = "other", url = h.url, legacy = false,
      on_notification = function(m) if m == "notifications/resources/updated" then seen.other = true end end })
    assert(c:subscribe("notes://readme", function(uri) seen[#seen + 1] = uri got:signal() end))
    srv:resource_updated("notes://readme")
    got:wait(10)
    expect(seen[1]).to_be("notes://readme")
    expect(seen.other).to_be_nil()
    expect(#srv:sessions()).to_be(2)
    c:close() -- DELETE
    other:close()
    local deadline = core.now() + 10
    while #srv:sessions() > 0 and core.now() < deadline do core.sleep(0.02) end
    expect(#srv:sessions()).to_be(0)
    h:close()
  end, { timeout = 60 })

  it("keeps the rules of luarig serve: Host, Origin, Content-Type, token; a session id is required", function()
    local srv = notes_server()
    local token = "0123456789abcdef-token"
    local h = assert(srv:serve_http{ listen = "127.0.0.1:0", auth = { token = token } })
    local init = json.encode({ jsonrpc = "2.0", id = 1, method = "initialize", params = {
      protocolVersion = "2025-06-18", capabilities = {}, clientInfo = { name = "t", version = "1" } } })
    local base = { ["content-type"] = "application/json", accept = "application/json, text/event-stream",
                   authorization = "Bearer " .. token }
    local function post(headers, body)
      local hd = {}
      for k, v in pairs(base) do hd[k] = v end
      for k, v in pairs(headers) do hd[k] = v or nil end
      for k, v in pairs(headers) do if v == false then hd[k] = nil end end
      return core.http_request{ url = h.url, method = "POST", headers = hd, body = body or init, timeout = 10 }
    end
    expect(post({ host = "evil.example.com" }).status).to_be(403)
    expect(post({ origin = "http://evil.example.com" }).status).to_be(403)
    expect(post({ ["content-type"] = "text/plain" }).status).to_be(415)
    expect(post({ authorization = false }).status).to_be(401)
    expect(post({ authorization = "Bearer wrong-token-wrong-token" }).status).to_be(401)
    expect(post({ ["mcp-protocol-version"] = "1999-01-01" }).status).to_be(400)
    local ping = json.encode({ jsonrpc = "2.0", id = 2, method = "ping" })
    expect(post({}, ping).status).to_be(400)
    expect(post({ ["mcp-session-id"] = "no-such-session" }, ping).status).to_be(404)
    local ok = post({})
    expect(ok.status).to_be(200)
    expect(#(ok.headers["mcp-session-id"] or "")).to_be(32)
    -- and with the token, our own client works
    local c = assert(rig.mcp.http{ name = "notes", url = h.url, legacy = false,
      headers = { Authorization = "Bearer " .. token } })
    expect(c:call("add", { a = 1, b = 2 }).content[1].text).to_be("3")
    c:close()
    h:close()
    -- sessions are capped: an initialize beyond max_sessions is 503, one ended makes room
    local h3 = assert(srv:serve_http{ listen = "127.0.0.1:0", max_sessions = 1 })
    local first = assert(rig.mcp.http{ name = "one", url = h3.url, legacy = false })
    local second, smsg = rig.mcp.http{ name = "two", url = h3.url, legacy = false }
    expect(second).to_be_nil()
    expect(smsg).to_match("503")
    first:close()
    second = assert(rig.mcp.http{ name = "two", url = h3.url, legacy = false })
    second:close()
    h3:close()
    -- off loopback without a token: refused
    local h2, msg, code = srv:serve_http{ listen = "0.0.0.0:0" }
    expect(h2).to_be_nil()
    expect(code).to_be("refused")
    expect(msg).to_match("without authentication")
  end, { timeout = 60 })
end)

describe("rig.mcp.server over stdio", function()
  it("serves the conformance fixture to luarig's stdio client", function()
    local c = assert(rig.mcp.stdio{ name = "everything", command = LUARIG,
      args = { EVERYTHING, "stdio" }, unconfined = true })
    expect(c.server_info.name).to_be("luarig-everything")
    local names = {}
    for _, t in ipairs(assert(c:list_tools())) do names[#names + 1] = t.name end
    expect(table.concat(names, " ")).to_match("test_simple_text")
    local r = assert(c:call("test_simple_text", {}))
    expect(r.content[1].text).to_be("This is a simple text response for testing.")
    local steps = 0
    assert(c:call("test_tool_with_progress", {}, { on_progress = function() steps = steps + 1 end }))
    expect(steps).to_be(3)
    expect(c:read_text("test://template/7/data")).to_match('"id":"7"')
    c:close()
    expect(c:status()).to_be("closed")
  end, { timeout = 60 })
end)

describe("luarig mcp serve", function()
  it("runs a turn per call over stdio; a gate goes to the client's person; the journal has it all", function()
    local state = tmpdir("mcpserve")
    dirs[#dirs + 1] = state
    local asked = {}
    local c = assert(rig.mcp.stdio{ name = "rig", command = LUARIG, args = { "mcp", "serve", SERVE_RIG },
      unconfined = true, env = { MCP_SERVE_STATE = state },
      elicitation = function(req)
        asked[#asked + 1] = req.message
        return { action = "accept", content = { decision = "approve" } }
      end })
    local tools = assert(c:list_tools())
    expect(#tools).to_be(1)
    expect(tools[1].name).to_be("assistant")
    local r = assert(c:call("assistant", { message = "hello" }))
    expect(r.content[1].text).to_be("echo: hello")
    local sid = r.structuredContent.session_id
    r = assert(c:call("assistant", { message = "note: milk", session_id = sid }))
    expect(r.content[1].text).to_be("noted: saved")
    expect(r.structuredContent.session_id).to_be(sid)
    expect(asked[1]).to_match("the tool 'note': save the note 'milk'")
    local res = assert(c:resources())
    expect(res[1].uri).to_be("luarig://sessions/" .. sid)
    local doc = json.decode(assert(c:read_text(res[1].uri)))
    expect(#doc.history).to_be(4 + 2) -- two turns, the second with a tool call and its result
    c:close()
    -- the journal, read by the CLI after the server exited
    local out = assert(core.process_run{ argv = { LUARIG, "log", "--state", state, sid }, timeout = 30 })
    local types = {}
    for line in out.stdout:gmatch("[^\n]+") do
      local ev = json.decode(line)
      if ev and ev.type then types[#types + 1] = ev.type end
    end
    local all = table.concat(types, " ")
    expect(all).to_match("UserInput")
    expect(all).to_match("GateOpened")
    expect(all).to_match("GateResolved")
    expect(all).to_match("TurnDone.*TurnDone")
  end, { timeout = 90 })

  it("over HTTP: a turn per call, a denied gate, background sessions", function()
    local p = assert(core.process_spawn{ argv = { LUARIG, "mcp", "serve", SERVE_RIG, "--http", "127.0.0.1:0" },
      stdout = "pipe", stderr = "pipe" })
    local url
    local buf = ""
    while not url do
      local chunk = p:read("stderr")
      if not chunk then break end
      buf = buf .. chunk
      url = buf:match("mcp serving on (http://%S+)")
    end
    expect(url).to_be_truthy()
    local c = assert(rig.mcp.http{ name = "rig", url = url, legacy = false,
      elicitation = function() return { action = "accept", content = { decision = "deny" } } end })
    local r = assert(c:call("assistant", { message = "note: eggs" }))
    expect(r.content[1].text).to_match("noted: .*permission denied")
    r = assert(c:call("assistant", { message = "hi", background = true }))
    expect(r.structuredContent.session_id).to_be_truthy()
    expect(r.content[1].text).to_match("^started session ")
    c:close()
    p:kill("TERM")
    local st = p:wait(10)
    expect(st.code).to_be(143) -- 128 + SIGTERM, as luarig serve: a graceful shutdown by signal
  end, { timeout = 90 })

  it("relays a question of the rig's own MCP server to the client; a cancelled call interrupts the turn", function()
    local state = tmpdir("mcpserve2")
    dirs[#dirs + 1] = state
    local asked = {}
    -- the rig of tests/repl/elicit.sh: its loop calls a tool whose server asks the person
    local c = assert(rig.mcp.stdio{ name = "rig", command = LUARIG,
      args = { "mcp", "serve", ROOT .. "/tests/repl/fixtures/elicit_rig.lua" }, unconfined = true,
      env = { LUARIG = LUARIG, LUARIG_ROOT = ROOT, ELICIT_STATE = state },
      elicitation = function(req)
        asked[#asked + 1] = req.message
        return { action = "accept", content = { name = "Grace" } }
      end })
    local r = assert(c:call("assistant", { message = "go" }))
    expect(asked[1]).to_be("[ev] Please review and update the form fields with defaults")
    expect(r.content[1].text).to_match('action=accept, content={"age":30,"name":"Grace"')
    c:close()
    -- cancelling: the client gives up on a slow turn (notifications/cancelled)
    local state2 = tmpdir("mcpserve3")
    dirs[#dirs + 1] = state2
    local c2 = assert(rig.mcp.stdio{ name = "rig2", command = LUARIG, args = { "mcp", "serve", SERVE_RIG },
      unconfined = true, env = { MCP_SERVE_STATE = state2 } })
    local started = core.now()
    local _, msg, code = c2:call("assistant", { message = "slow please" }, { timeout = 1 })
    expect(code).to_be("timeout")
    local sid
    local deadline = core.now() + 20
    local doc
    while core.now() < deadline do
      local list = c2:resources()
      if list and list[1] then
        doc = json.decode(assert(c2:read_text(list[1].uri)))
        if doc.session.state ~= "running" then break end
      end
      core.sleep(0.05)
    end
    expect(doc.session.state ~= "running").to_be(true)
    expect(core.now() - started < 20).to_be(true) -- not the model's 30 s
    sid = doc.session.id
    c2:close()
    local out = assert(core.process_run{ argv = { LUARIG, "log", "--state", state2, sid }, timeout = 30 })
    expect(out.stdout).to_match('"type":"TurnInterrupted"')
  end, { timeout = 90 })

  it("over HTTP with --auth-token-file: no token, no session", function()
    local dir = tmpdir("mcptoken")
    dirs[#dirs + 1] = dir
    local token = "mcp-serve-test-token-0123456789"
    local f = assert(io.open(dir .. "/token", "w")) f:write(token, "\n") f:close()
    local p = assert(core.process_spawn{ argv = { LUARIG, "mcp", "serve", SERVE_RIG, "--http", "127.0.0.1:0",
      "--auth-token-file", dir .. "/token" }, stdout = "pipe", stderr = "pipe" })
    local url, buf = nil, ""
    while not url do
      local chunk = p:read("stderr")
      if not chunk then break end
      buf = buf .. chunk
      url = buf:match("mcp serving on (http://%S+) %(bearer token required%)")
    end
    expect(url).to_be_truthy()
    local none, msg = rig.mcp.http{ name = "anon", url = url, legacy = false }
    expect(none).to_be_nil()
    expect(msg).to_match("401")
    local c = assert(rig.mcp.http{ name = "rig", url = url, legacy = false,
                                   headers = { Authorization = "Bearer " .. token } })
    expect(c:call("assistant", { message = "hi" }).content[1].text).to_be("echo: hi")
    c:close()
    p:kill("TERM")
    p:wait(10)
  end, { timeout = 60 })

  it("refuses misuse with a usage error", function()
    local out = core.process_run{ argv = { LUARIG, "mcp", "serve" }, timeout = 10 }
    expect(out.code).to_be(2)
    expect(out.stderr).to_match("mcp serve needs a rig script")
    out = core.process_run{ argv = { LUARIG, "mcp", "nope" }, timeout = 10 }
    expect(out.code).to_be(2)
    out = core.process_run{ argv = { LUARIG, "mcp", "serve", SERVE_RIG, "--bogus" }, timeout = 10 }
    expect(out.code).to_be(2)
    expect(out.stderr).to_match("unknown option '%-%-bogus'")
  end, { timeout = 30 })
end)
