-- rig.mcp: the JSON-RPC peer on its own, real MCP servers from npm (build/npm, from
-- make deps) started confined, fault servers (tests/mcp/fault_server.js), and a
-- scripted model driving a loop through their tools, gated and journaled.
local json = require "rig.json"
local jsonrpc = require "rig.mcp.jsonrpc"
local core = require "rig.core"

local ROOT = assert(core.fs_realpath(os.getenv("LUARIG_ROOT") or "."))
local NM = ROOT .. "/build/npm/node_modules"
local FAULT = ROOT .. "/tests/mcp/fault_server.js"
local function have_npm()
  local f = io.open(NM .. "/@modelcontextprotocol/server-memory/dist/index.js")
  if f then f:close() return true end
  return false
end
local function need_npm()
  if not have_npm() then skip("build/npm has no MCP servers (make deps installs them)") end
end

local function tmpdir(tag)
  local d = os.tmpname()
  os.remove(d)
  assert(os.execute("mkdir -p " .. d .. "-" .. tag))
  return d .. "-" .. tag
end
local dirs = {}
after_all(function() for _, d in ipairs(dirs) do os.execute("rm -rf " .. d) end end)

-- Two peers wired back to back (each one's send is the other's receive, in a task).
local function pair(a_opts, b_opts)
  local a, b
  a_opts.send = function(msg) core.spawn(function() b:receive(json.encode(msg)) end) return true end
  b_opts.send = function(msg) core.spawn(function() a:receive(json.encode(msg)) end) return true end
  a, b = jsonrpc.peer(a_opts), jsonrpc.peer(b_opts)
  return a, b
end

describe("rig.mcp.jsonrpc", function()
  it("answers requests, reports errors and unknown methods with their codes", function()
    local a = pair({ name = "a" }, { name = "b", on_request = function(method, params)
      if method == "add" then return { sum = params.x + params.y } end
      if method == "boom" then error("kaboom") end
      if method == "bad" then return nil, { code = -32602, message = "x must be a number" } end
      return nil, jsonrpc.method_not_found(method)
    end })
    expect(a:request("add", { x = 2, y = 3 }).sum).to_be(5)
    local r, msg, code, e = a:request("nope")
    expect(r).to_be_nil()
    expect(code).to_be("rpc")
    expect(e.code).to_be(-32601)
    expect(msg).to_match("a: nope: method not found: nope %(error %-32601%)")
    r, msg, code, e = a:request("bad")
    expect(e.code).to_be(-32602)
    r, msg, code, e = a:request("boom")
    expect(e.code).to_be(-32603)
    expect(msg).to_match("kaboom")
  end)

  it("times out, and tells the other side the request is cancelled", function()
    local cancelled = core.cond()
    local got
    local a = pair({ name = "a" }, { name = "b", on_request = function()
      rig.sleep(60)
    end, on_notification = function(method, params)
      if method == "notifications/cancelled" then got = params cancelled:signal() end
    end })
    local r, msg, code = a:request("slow", nil, { timeout = 0.2 })
    expect(r).to_be_nil()
    expect(code).to_be("timeout")
    expect(msg).to_match("no answer within 0.2 s")
    if not got then cancelled:wait(5) end
    expect(got.requestId).to_be(1)
  end)

  it("cancelling the waiting task sends notifications/cancelled and cancels the handler", function()
    local handler_cancelled, handler_started = core.cond(), core.cond()
    local seen, started = false, false
    local a = pair({ name = "a" }, { name = "b", on_request = function()
      started = true
      handler_started:signal()
      local ok, err = pcall(rig.sleep, 60)
      if not ok then seen = true handler_cancelled:signal() error(err, 0) end
    end })
    local t = rig.spawn(function() return a:request("slow") end)
    while not started do handler_started:wait() end -- the request reached the handler
    t:cancel()
    local _, _, code = t:wait()
    expect(code).to_be("cancelled")
    if not seen then handler_cancelled:wait(5) end
    expect(seen).to_be(true)
  end)

  it("routes progress to the request and resets its timeout on progress", function()
    local seen = {}
    local a = pair({ name = "a" }, { name = "b", on_request = function(_, _, ctx)
      for i = 1, 4 do rig.sleep(0.15) ctx.progress(i, 4) end
      return { done = true }
    end })
    local r = a:request("work", {}, { timeout = 0.4, on_progress = function(p, total)
      seen[#seen + 1] = p .. "/" .. total
    end })
    expect(r and r.done).to_be(true)
    expect(table.concat(seen, ",")).to_be("1/4,2/4,3/4,4/4")
  end)

  it("survives malformed input: reports it, answers -32600 where it can, drops the rest", function()
    local sent = {}
    local errs = {}
    local p = jsonrpc.peer{ name = "p", send = function(msg) sent[#sent + 1] = msg return true end,
      on_request = function() return {} end,
      on_protocol_error = function(m) errs[#errs + 1] = m end }
    for _, text in ipairs{ "not json", "[]", "42", '{"id":1}', '{"jsonrpc":"1.0","id":7,"method":"x"}',
                           '{"jsonrpc":"2.0","id":8,"method":5}', '{"jsonrpc":"2.0","id":9,"result":1,"error":{}}',
                           '{"jsonrpc":"2.0","id":{},"method":"x"}', '{"jsonrpc":"2.0","method":"x","params":3}' } do
      p:receive(text)
    end
    expect(#errs).to_be(9)
    expect(sent[1].id).to_be(7)
    expect(sent[1].error.code).to_be(-32600)
    expect(sent[2].id).to_be(8)
    expect(p.stats.malformed).to_be(9)
  end)

  it("takes a batch apart and answers it as one array", function()
    local sent
    local p = jsonrpc.peer{ name = "p", send = function(msg) sent = msg return true end,
      on_request = function(method) return { m = method } end }
    p:receive('[{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","method":"n"},{"jsonrpc":"2.0","id":2,"method":"b"}]')
    expect(json.is_array(sent)).to_be(true)
    expect(#sent).to_be(2)
    expect(sent[1].result.m).to_be("a")
    expect(sent[2].id).to_be(2)
  end)

  it("finds the id of an oversized answer at either end and fails that request", function()
    expect(jsonrpc._find_id('{"result":{"conte', 'xx"}]},"jsonrpc":"2.0","id":42}')).to_be(42)
    expect(jsonrpc._find_id('{"jsonrpc":"2.0","id":7,"result":{"x', 'xxxx"}}')).to_be(7)
    expect(jsonrpc._find_id('{"result":1', 'xxxx')).to_be_nil()
  end)
end)

describe("rig.mcp stdio servers", function()
  local function faulty(mode, extra)
    local o = { name = "f_" .. mode, command = "node", args = { FAULT, mode }, unconfined = true }
    for k, v in pairs(extra or {}) do o[k] = v end
    return assert(rig.mcp.stdio(o))
  end

  it("reports a server that crashes mid-call, and starts it again", function()
    local c = faulty("crash")
    local r, msg, code = c:call("go", {})
    expect(r).to_be_nil()
    expect(code).to_be("closed")
    expect(msg).to_match("tools/call: the server exited with code 3")
    expect((c:status())).to_be("dead")
    local r2, msg2 = c:call("go", {})
    expect(r2).to_be_nil()
    expect(msg2).to_match("not running .*c:restart%(%)")
    expect(c:restart()).to_be(true)
    expect((c:status())).to_be("ready")
    expect(#c:list_tools()).to_be(1)
    c:close()
  end)

  it("restart = auto starts a dead server on the next call", function()
    local c = faulty("crash", { restart = "auto" })
    expect(select(3, c:call("go", {}))).to_be("closed")
    expect(c:ping()).to_be(true)
    expect(c.restarts).to_be(1)
    c:close()
  end)

  it("a hung server: the call times out with a clear error and the client goes on", function()
    local c = faulty("hang", { call_timeout = 0.5 })
    local r, msg, code = c:call("go", {})
    expect(r).to_be_nil()
    expect(code).to_be("timeout")
    expect(msg).to_match("server 'f_hang'.*tools/call: no answer within 0.5 s")
    expect(c:ping()).to_be(true)
    c:close()
  end)

  it("a flood of notifications loses nothing and the answer still comes", function()
    local n = 0
    local c = faulty("flood", { on_notification = function(m) if m == "notifications/message" then n = n + 1 end end })
    local r = assert(c:call("go", {}))
    expect(r.content[1].text).to_be("after the flood")
    expect(n).to_be(20000)
    expect(#c:logs()).to_be(100)
    c:close()
  end)

  it("malformed JSON-RPC is counted and dropped; the call is answered", function()
    local c = faulty("malformed")
    local r = assert(c:call("go", {}))
    expect(r.content[1].text).to_be("still here")
    expect(c.protocol_errors >= 5).to_be(true)
    expect(c.peer.stats.unmatched).to_be(1)
    c:close()
  end)

  it("an enormous result is a too_large error for that call, and the next call works", function()
    local c = faulty("huge")
    local r, msg, code = c:call("go", {})
    expect(r).to_be_nil()
    expect(code).to_be("too_large")
    expect(msg).to_match("the answer is too large %(a message of 251658%d+ bytes exceeds the cap of 16777216 bytes%)")
    local r2 = assert(c:call("go", {}))
    expect(r2.content[1].text).to_be("fine")
    c:close()
  end, { timeout = 60 })

  it("progress notifications reach the caller", function()
    local c = faulty("progress")
    local seen = {}
    local r = assert(c:call("go", {}, { on_progress = function(p, t) seen[#seen + 1] = p .. "/" .. t end }))
    expect(r.content[1].text).to_be("progressed")
    expect(table.concat(seen, " ")).to_be("1/3 2/3 3/3")
    c:close()
  end)

  it("refuses misuse naming the field", function()
    expect(function() rig.mcp.stdio{ command = "node" } end).to_fail("give exactly one of 'profile'")
    expect(function() rig.mcp.stdio{ command = "node", unconfined = true, tiemout = 1 } end)
      .to_fail("unknown field 'tiemout'")
    expect(function() rig.mcp.stdio{ name = "9x", command = "node", unconfined = true } end)
      .to_fail("field 'name' must be a letter")
    expect(function() rig.mcp.http{ url = "ftp://x" } end).to_fail("field 'url' must be an http")
    expect(function() rig.mcp.http{ url = "http://127.0.0.1:1/", headers = { ["Mcp-Session-Id"] = "x" } } end)
      .to_fail("may not set 'Mcp%-Session%-Id'")
    local c, msg = rig.mcp.stdio{ name = "nope", command = "/nonexistent/server", unconfined = true }
    expect(c).to_be_nil()
    expect(msg).to_match("mcp: server 'nope': cannot start '/nonexistent/server'")
  end)

  it("server-everything: tools, structured content, images, resources, prompts, roots, sampling, elicitation", function()
    need_npm()
    local asked
    local c = assert(rig.mcp.stdio{ name = "ev", command = "node",
      args = { NM .. "/@modelcontextprotocol/server-everything/dist/index.js" }, unconfined = true,
      roots = { "/srv/project" },
      sampling = { model = rig.model.script{ { text = "a sampled answer" } },
                   gate = rig.gate{ access = { mcp = "allow" }, approver = "headless" } },
      elicitation = function(req) asked = req return { action = "accept", content = {} } end })
    expect(c.server_info.name).to_be("mcp-servers/everything")
    local tools = assert(c:tools())
    local names = {}
    for _, t in ipairs(tools) do names[t.name] = t end
    expect(names["ev__get-structured-content"] ~= nil).to_be(true)
    -- structured content checked against the output schema
    local t = names["ev__get-structured-content"]
    local out = t.run(nil, { prepared = { location = "New York" } })
    expect(out.is_error).to_be(false)
    expect(type(out.details.structured.temperature)).to_be("number")
    -- an image: described in text, kept in details
    out = names["ev__get-tiny-image"].run(nil, { prepared = {} })
    expect(out.text).to_match("%[image: image/png, %d+ bytes%]")
    expect(out.details.content[2].type).to_be("image")
    expect(type(out.details.content[2].data)).to_be("string")
    -- and handed to the model: a media spec the session checks and stores (rig.media)
    expect(out.media[1].type).to_be("image")
    expect(out.media[1].media_type).to_be("image/png")
    local checked = assert(require("rig.media").check(out.media[1]))
    expect(checked.media_type).to_be("image/png")
    -- an embedded resource and resource links
    out = names["ev__get-resource-reference"].run(nil, { prepared = { resourceType = "Text", resourceId = 1 } })
    expect(out.text).to_match("%[resource demo://resource/dynamic/text/1 %(text/plain%)%]")
    out = names["ev__get-resource-links"].run(nil, { prepared = { count = 2 } })
    expect(out.text).to_match("%[resource link: .*<demo://")
    -- resources and prompts
    expect(#assert(c:resources()) > 0).to_be(true)
    local first = c:resources()[1]
    expect(type(assert(c:read(first.uri)).contents[1])).to_be("table")
    expect(c:prompt_text("simple-prompt")).to_match("%S")
    local blocks = assert(c:prompt_input("args-prompt", { city = "Paris" }))
    expect(blocks[1].text).to_match("Paris")
    -- the server asks back: roots, sampling (gated, a rig model), elicitation (defaults)
    expect(c:call("get-roots-list", {}).content[1].text).to_match("file:///srv/project")
    expect(c:call("trigger-sampling-request", { prompt = "hi" }).content[1].text).to_match("a sampled answer")
    local e = c:call("trigger-elicitation-request", {})
    expect(asked.server).to_be("ev")
    expect(json.encode(e)).to_match("accept")
    c:close()
  end, { timeout = 60 })
end)

describe("rig.mcp confined", function()
  it("a confined server's own network is none: a direct connection fails where unconfined it works", function()
    -- a listener on the host's loopback (the sandbox has a loopback of its own)
    local port
    local srv = assert(rig.http.server{ listen = "127.0.0.1:0",
      routes = { ["GET /"] = function() return { body = "hello" } end } })
    port = srv.port
    local NET = ROOT .. "/tests/mcp/net_server.js"
    local open = assert(rig.mcp.stdio{ name = "net_open", command = "node", args = { NET }, unconfined = true })
    local r = assert(open:call("connect", { host = "127.0.0.1", port = port }))
    open:close()
    expect(r.content[1].text).to_be("connected: HTTP/1.1 200 OK") -- positive control: it answers
    local ws = tmpdir("netws")
    dirs[#dirs + 1] = ws
    local p = rig.sandbox.profile{ workspace_root = ws, workspace_write = "allow", network = "deny",
      roots = { { path = ROOT .. "/tests/mcp", read = "allow" } } }
    local boxed = assert(rig.mcp.stdio{ name = "net_boxed", command = "node", args = { NET }, profile = p })
    r = assert(boxed:call("connect", { host = "127.0.0.1", port = port }))
    expect(r.isError).to_be(true)
    expect(r.content[1].text).to_match("^error: E") -- ECONNREFUSED: its loopback is its own
    boxed:close()
    srv:close()
  end, { timeout = 60 })

  it("a confined server reaches what `network` names, through the egress proxy only", function()
    local srv = assert(rig.http.server{ listen = "127.0.0.1:0",
      routes = { ["GET /"] = function() return { body = "hello" } end } })
    local other = assert(rig.http.server{ listen = "127.0.0.1:0",
      routes = { ["GET /"] = function() return { body = "other" } end } })
    local NET = ROOT .. "/tests/mcp/net_server.js"
    local ws = tmpdir("netws2")
    dirs[#dirs + 1] = ws
    local p = rig.sandbox.profile{ workspace_root = ws, workspace_write = "allow", network = "gated",
      roots = { { path = ROOT .. "/tests/mcp", read = "allow" } } }
    local target = "127.0.0.1:" .. srv.port
    local c = assert(rig.mcp.stdio{ name = "net_allowed", command = "node", args = { NET }, profile = p,
                                    network = { target } })
    local r = assert(c:call("fetch", { host = "127.0.0.1", port = srv.port }))
    expect(r.content[1].text).to_be("fetched: HTTP/1.1 200 OK")
    -- the proxy refuses a target the list does not name
    r = assert(c:call("fetch", { host = "127.0.0.1", port = other.port }))
    expect(r.content[1].text:find("200 OK", 1, true)).to_be_nil()
    expect(r.content[1].text).to_match("^fetched: HTTP/1%.1 4%d%d")
    -- and a direct connection, even to the allowed target, goes nowhere
    r = assert(c:call("connect", { host = "127.0.0.1", port = srv.port }))
    expect(r.isError).to_be(true)
    c:close()
    -- a profile that denies the network refuses the targets at the start
    local deny = rig.sandbox.profile{ workspace_root = ws, workspace_write = "allow", network = "deny",
      roots = { { path = ROOT .. "/tests/mcp", read = "allow" } } }
    local none, msg = rig.mcp.stdio{ name = "net_denied", command = "node", args = { NET }, profile = deny,
                                     network = { target } }
    expect(none).to_be_nil()
    expect(msg).to_match("denied by the profile")
    srv:close()
    other:close()
  end, { timeout = 60 })

  it("server-filesystem sees only the workspace: a path outside is refused by the sandbox, not the server", function()
    need_npm()
    local ws = tmpdir("ws")
    local outside = tmpdir("secret")
    dirs[#dirs + 1] = ws
    dirs[#dirs + 1] = outside
    local f = assert(io.open(ws .. "/notes.txt", "w")) f:write("inside\n") f:close()
    f = assert(io.open(outside .. "/secret.txt", "w")) f:write("the secret\n") f:close()
    -- the server itself allows everything ("/"): only the sandbox stands between
    local args = { NM .. "/@modelcontextprotocol/server-filesystem/dist/index.js", "/" }
    -- positive control: unconfined, the same server reads the secret
    local open = assert(rig.mcp.stdio{ name = "fs_open", command = "node", args = args, unconfined = true })
    expect(open:call("read_text_file", { path = outside .. "/secret.txt" }).content[1].text).to_be("the secret\n")
    open:close()
    local p = rig.sandbox.profile{ workspace_root = ws, workspace_read = "allow", workspace_write = "allow",
      host_read = "allow", host_write = "deny", network = "deny", command = "gated",
      roots = { { path = NM, read = "allow" } } }
    local fs = assert(rig.mcp.stdio{ name = "fs", command = "node", args = args, profile = p })
    expect(fs:call("read_text_file", { path = ws .. "/notes.txt" }).content[1].text).to_be("inside\n")
    local r = fs:call("read_text_file", { path = outside .. "/secret.txt" })
    expect(r.isError).to_be(true)
    -- the OS refused (the mount view has no such path; the view's root is not listable)
    expect(r.content[1].text:find("ENOENT") or r.content[1].text:find("EACCES")).to_be_truthy()
    expect(json.encode(r):find("the secret", 1, true)).to_be_nil()
    fs:close()
  end, { timeout = 60 })

  it("a scripted model drives a loop through memory and filesystem tools, gated and journaled with the server", function()
    need_npm()
    local ws = tmpdir("loop")
    local state = tmpdir("perms")
    dirs[#dirs + 1] = ws
    dirs[#dirs + 1] = state
    local f = assert(io.open(ws .. "/todo.txt", "w")) f:write("buy milk\n") f:close()
    local p = rig.sandbox.profile{ workspace_root = ws, workspace_read = "allow", workspace_write = "allow",
      host_read = "allow", host_write = "deny", network = "deny", command = "gated", mcp = "gated",
      roots = { { path = NM, read = "allow" } } }
    local fs = assert(rig.mcp.stdio{ name = "fs", command = "node",
      args = { NM .. "/@modelcontextprotocol/server-filesystem/dist/index.js", ws }, profile = p, roots = true })
    local mem = assert(rig.mcp.stdio{ name = "memory", command = "node",
      args = { NM .. "/@modelcontextprotocol/server-memory/dist/index.js" }, profile = p,
      env = { MEMORY_FILE_PATH = ws .. "/memory.jsonl" } })
    local perms_path = state .. "/perms.json"
    f = assert(io.open(perms_path, "w"))
    f:write('{"version":1,"rules":[{"effect":"allow","kind":"mcp","match":"fs/*"},'
      .. '{"effect":"allow","kind":"mcp","match":"memory/create_entities"},'
      .. '{"effect":"deny","kind":"mcp","match":"memory/delete_entities"}]}')
    f:close()
    os.execute("chmod 600 " .. perms_path)
    local model = rig.model.script{
      { text = "reading", tool_calls = { { name = "fs__read_text_file", input = { path = ws .. "/todo.txt" } } } },
      function(req)
        local last = req.messages[#req.messages].content[1]
        return { text = "remembering", tool_calls = {
          { name = "memory__create_entities", input = { entities = { { name = "todo", entityType = "list",
            observations = { last.content } } } } },
          { name = "memory__delete_entities", input = { entityNames = { "todo" } } } } }
      end,
      { text = "Done." },
    }
    local gate = rig.gate{ access = p, rules = rig.permissions.file(perms_path), approver = "headless" }
    local loop = rig.loop{ name = "assistant", model = model, mcp = { fs, mem }, gate = gate,
                           policy_revision = "mcp-v1" }
    local r = rig.define{ loops = { loop }, primers = { "assistant" }, store = rig.store.memory() }
    local s = r:session()
    s:submit("Remember my todo list.")
    assert(s:wait_idle(30))
    local results, decisions = {}, {}
    for rec in s:journal{} do
      if rec.type == "StepDone" and rec.results then
        for _, b in ipairs(rec.results.content) do results[#results + 1] = b end
      end
      if rec.type == "PermissionDecided" then decisions[#decisions + 1] = rec.verdict .. ":" .. rec.source end
    end
    expect(#results).to_be(3)
    expect(results[1].content).to_be("buy milk\n")
    expect(results[1].details.mcp.server).to_be("fs")
    expect(results[1].details.mcp.tool).to_be("read_text_file")
    expect(results[2].is_error).to_be(false)
    expect(results[2].details.mcp.server).to_be("memory")
    expect(results[3].is_error).to_be(true)
    expect(results[3].content).to_match("a saved rule denies mcp 'memory/delete_entities'")
    expect(table.concat(decisions, " ")).to_be("allow:rule allow:rule deny:rule")
    -- the graph holds what the model put there
    local g = mem:call("read_graph", {})
    expect(g.content[1].text).to_match("buy milk")
    s:shutdown()
    fs:close()
    mem:close()
  end, { timeout = 90 })
end)
