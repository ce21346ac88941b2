-- rig.serve over real HTTP: every route and error status, idempotency,
-- bearer auth and the public-bind refusal, the body cap, SSE resume after a
-- dropped connection checked against the journal, 200 subscribers on one
-- session, a subscriber that stops reading, and `luarig serve` as a child
-- process (usage, refusal, the token file, SIGTERM mid-stream).

local core = require "rig.core" -- the stdlib's private binding: what the public API does not show

local json = rig.json
local luarig = os.getenv("LUARIG") or "build/luarig"
local root = os.getenv("LUARIG_ROOT") or "."
local rig_file = root .. "/tests/lua/serve/rig.lua"
local define = function() return dofile(rig_file) end

local function tmpdir()
  local p = os.tmpname()
  os.remove(p)
  assert(os.execute("mkdir -p '" .. p .. "'"))
  return p
end

local function start(opts)
  opts = opts or {}
  opts.rig = opts.rig or define()
  opts.listen = opts.listen or "127.0.0.1:0"
  return assert(rig.serve(opts))
end

-- One request; the decoded JSON body (or nil) and the response. A POST says
-- it is JSON (the server refuses any other), unless headers say otherwise.
local function call(srv, method, path, body, headers)
  local h = headers or {}
  if (body or method == "POST") and h["content-type"] == nil then h["content-type"] = "application/json" end
  if h["content-type"] == false then h["content-type"] = nil end
  local resp = assert(rig.http.request{ url = srv.url .. path, method = method, body = body,
    headers = h, timeout = 10 })
  return json.decode(resp.body), resp
end

local function expect_error(srv, method, path, body, status, code, headers)
  local v, resp = call(srv, method, path, body, headers)
  expect(resp.status).to_be(status)
  expect(resp.headers["content-type"]).to_be("application/json")
  expect(type(v) == "table" and type(v.error) == "table").to_be(true)
  expect(v.error.code).to_be(code)
  expect(type(v.error.message)).to_be("string")
  expect(type(v.error.retryable)).to_be("boolean")
  return v.error
end

local function new_session(srv, text)
  local v, resp = call(srv, "POST", "/v1/sessions", text and json.encode{ text = text } or nil)
  expect(resp.status).to_be(201)
  return v.session_id, v.command_id
end

-- Waits for the journal of id to hold an event of type etype (from seq 1).
local function wait_event(srv, id, etype, count)
  count = count or 1
  local deadline = rig.now() + 10
  while rig.now() < deadline do
    local v = call(srv, "GET", "/v1/sessions/" .. id .. "/journal?limit=1000")
    local n = 0
    for _, e in ipairs(v.events) do
      if e.event.type == etype then
        n = n + 1
        if n == count then return e end
      end
    end
    rig.sleep(0.02)
  end
  error("no " .. etype .. " in the journal of " .. id)
end

-- The seqs of the journal's event records after seq `after`.
local function journal_event_seqs(srv, id, after)
  local v = call(srv, "GET", "/v1/sessions/" .. id .. "/journal?from=" .. (after + 1) .. "&limit=1000")
  local out = {}
  for _, e in ipairs(v.events) do
    if e.kind == "event" then out[#out + 1] = e.seq end
  end
  return out
end

local function open_stream(srv, id, headers, query)
  return assert(rig.http.stream{ url = srv.url .. "/v1/sessions/" .. id .. "/events" .. (query or ""),
    headers = headers or {}, idle_timeout = 30 })
end

-- Reads a stream until an enduring event of type etype; returns the enduring ids seen.
local function read_until(st, etype, ids, texts)
  ids = ids or {}
  while true do
    local ev, msg = st:next()
    if not ev then error("the stream ended before " .. etype .. ": " .. tostring(msg)) end
    if ev.event == "enduring" then
      expect(ev.id).to_be_truthy()
      ids[#ids + 1] = tonumber(ev.id)
      local e = json.decode(ev.data)
      if texts then texts[#texts + 1] = ev.data end
      if e.type == etype then return ids, e end
    else
      expect(ev.event).to_be("ephemeral") -- (the client keeps the last id: WHATWG)
    end
  end
end

describe("rig.serve routes", function()
  it("answers capabilities, creates sessions, takes input, pages the catalog and the journal", function()
    local srv = start()
    local v, resp = call(srv, "GET", "/v1/capabilities")
    expect(resp.status).to_be(200)
    expect(v.protocol).to_be("luarig.serve")
    expect(v.version).to_be(1)
    expect(table.concat(v.features, ",")).to_match("sse_resume")

    local id, cid = new_session(srv, "hello")
    expect(id).to_match("^%x+%-")
    expect(cid).to_be_truthy()
    local done = wait_event(srv, id, "TurnDone")
    expect(done.event.message.content[1].text).to_be("you said: hello")
    expect(done.event.cause.command_id).to_be(cid)

    local id2, cid2 = new_session(srv)
    expect(cid2).to_be_nil()
    v, resp = call(srv, "POST", "/v1/sessions/" .. id2 .. "/input",
      json.encode{ blocks = { { type = "text", text = "via blocks" } } })
    expect(resp.status).to_be(200)
    expect(v.command_id).to_be_truthy()
    wait_event(srv, id2, "TurnDone")

    v, resp = call(srv, "GET", "/v1/sessions/" .. id .. "/status")
    expect(resp.status).to_be(200)
    expect(v.live).to_be(true)
    expect(v.state).to_be("idle")
    expect(v.title).to_be("hello")
    expect(v.usage.output_tokens > 0).to_be(true)
    expect(v.last_seq > 5).to_be(true)

    -- a third session; pages of one
    new_session(srv)
    local seen = {}
    local skip = 0
    repeat
      v, resp = call(srv, "GET", "/v1/sessions?skip=" .. skip .. "&limit=1")
      expect(resp.status).to_be(200)
      expect(#v.sessions <= 1).to_be(true)
      for _, e in ipairs(v.sessions) do seen[#seen + 1] = e.id; expect(e.live).to_be(true) end
      skip = v.next_skip
    until v.done
    expect(#seen).to_be(3)

    -- the journal in pages, seqs consecutive from 1
    local from, seqs = 1, {}
    repeat
      v = call(srv, "GET", "/v1/sessions/" .. id .. "/journal?from=" .. from .. "&limit=4")
      expect(#v.events <= 4).to_be(true)
      for _, e in ipairs(v.events) do seqs[#seqs + 1] = e.seq end
      from = v.next_seq
    until v.done
    for i, s in ipairs(seqs) do expect(s).to_be(i) end
    expect(#seqs > 8).to_be(true)

    -- curl sees the same surface
    local out = assert(rig.process.run{ argv = { "curl", "-s", "-S", "-X", "POST", "-d", '{"text":"from curl"}',
      "-H", "Content-Type: application/json",
      "-w", "\n%{http_code}", srv.url .. "/v1/sessions/" .. id .. "/input" }, timeout = 10 })
    expect(out.code).to_be(0)
    expect(out.stdout).to_match('^{"command_id":"c[%d.]+"}\n200$')
    wait_event(srv, id, "TurnDone", 2)
    srv:shutdown()
  end)

  it("restores a session that is not live, answers gates and interrupts", function()
    local srv = start()
    local id = new_session(srv)
    -- shut it down behind the server's back: now it is in the catalog but not live
    srv.live[id]:shutdown()
    expect_error(srv, "POST", "/v1/sessions/" .. id .. "/input", '{"text":"x"}', 409, "session_not_live")
    local v, resp = call(srv, "GET", "/v1/sessions/" .. id .. "/status")
    expect(resp.status).to_be(200)
    expect(v.live).to_be(false)
    v, resp = call(srv, "POST", "/v1/sessions/" .. id .. "/restore")
    expect(resp.status).to_be(200)
    expect(v.session_id).to_be(id)
    v, resp = call(srv, "POST", "/v1/sessions/" .. id .. "/restore") -- already live: same answer
    expect(resp.status).to_be(200)
    wait_event(srv, id, "RestoreDone")

    -- a gate opens, the status shows it, an answer resolves it
    call(srv, "POST", "/v1/sessions/" .. id .. "/input", '{"text":"gate me"}')
    local pr = wait_event(srv, id, "PermissionRequested")
    local gid = pr.event.gate_id
    v = call(srv, "GET", "/v1/sessions/" .. id .. "/status")
    expect(v.state).to_be("waiting_on_gate")
    expect(v.open_gates[1].gate_id).to_be(gid)
    expect_error(srv, "POST", "/v1/sessions/" .. id .. "/gates/" .. gid, '{"action":"maybe"}', 400,
      "invalid_request")
    v, resp = call(srv, "POST", "/v1/sessions/" .. id .. "/gates/" .. gid, '{"action":"approve"}')
    expect(resp.status).to_be(202)
    local done = wait_event(srv, id, "TurnDone")
    expect(done.event.message.content[1].text).to_be("tool said: fetched")
    -- answered: no longer open
    expect_error(srv, "POST", "/v1/sessions/" .. id .. "/gates/" .. gid, '{"action":"deny"}', 409,
      "gate_not_open")

    -- interrupt a slow turn
    call(srv, "POST", "/v1/sessions/" .. id .. "/input", '{"text":"slow 20"}')
    wait_event(srv, id, "TurnStarted", 2)
    rig.sleep(0.2)
    v, resp = call(srv, "POST", "/v1/sessions/" .. id .. "/interrupt")
    expect(resp.status).to_be(200)
    expect(v.interrupted).to_be(true)
    wait_event(srv, id, "TurnInterrupted")
    v = call(srv, "POST", "/v1/sessions/" .. id .. "/interrupt")
    expect(v.interrupted).to_be(false)
    srv:shutdown()
  end)

  it("resumes a turn a shutdown cut: restore, status says resumable, POST …/resume", function()
    local srv = start()
    local id = new_session(srv, "gate me")
    wait_event(srv, id, "GateOpened")
    srv.live[id]:shutdown() -- behind the server's back, as a crash would: the turn is cut
    expect_error(srv, "POST", "/v1/sessions/" .. id .. "/resume", nil, 409, "session_not_live")
    call(srv, "POST", "/v1/sessions/" .. id .. "/restore")
    local done = wait_event(srv, id, "RestoreDone")
    expect(table.concat(done.event.resumable, ",")).to_be("assistant")
    local v = call(srv, "GET", "/v1/sessions/" .. id .. "/status")
    expect(table.concat(v.resumable, ",")).to_be("assistant")
    expect_error(srv, "POST", "/v1/sessions/" .. id .. "/resume", "[", 400, "invalid_json")
    expect_error(srv, "POST", "/v1/sessions/" .. id .. "/resume", "[1]", 400, "invalid_request")
    expect_error(srv, "POST", "/v1/sessions/" .. id .. "/resume", '{"loop":"nope"}', 400, "invalid_request")
    expect_error(srv, "POST", "/v1/sessions/" .. id .. "/resume", '{"when":1}', 400, "invalid_request")
    local resp
    v, resp = call(srv, "POST", "/v1/sessions/" .. id .. "/resume", '{"loop":"assistant"}')
    expect(resp.status).to_be(202)
    expect(table.concat(v.resumed, ",")).to_be("assistant")
    -- the cut step's call asks its gate again (the shutdown cancelled the first)
    local pr = wait_event(srv, id, "GateOpened", 2)
    v = call(srv, "GET", "/v1/sessions/" .. id .. "/status")
    expect(#v.resumable).to_be(0)
    expect(v.state).to_be("waiting_on_gate")
    call(srv, "POST", "/v1/sessions/" .. id .. "/gates/" .. pr.event.gate_id, '{"action":"approve"}')
    local td = wait_event(srv, id, "TurnDone")
    expect(td.event.message.content[1].text).to_be("tool said: fetched")
    local tr = wait_event(srv, id, "TurnResumed")
    expect(td.event.turn_id).to_be(tr.event.turn_id)
    local e = expect_error(srv, "POST", "/v1/sessions/" .. id .. "/resume", nil, 409, "nothing_to_resume")
    expect(e.retryable).to_be(false)
    v = call(srv, "GET", "/v1/capabilities")
    expect(table.concat(v.features, ",")).to_match("resume")
    srv:shutdown()
  end)

  it("honours Idempotency-Key on session creation", function()
    local srv = start()
    local h = function() return { ["idempotency-key"] = "key-1" } end
    local a, ra = call(srv, "POST", "/v1/sessions", '{"text":"once"}', h())
    local b, rb = call(srv, "POST", "/v1/sessions", '{"text":"once"}', h())
    expect(ra.status).to_be(201)
    expect(rb.status).to_be(201)
    expect(b.session_id).to_be(a.session_id)
    expect(b.command_id).to_be(a.command_id)
    expect_error(srv, "POST", "/v1/sessions", '{"text":"twice"}', 409, "idempotency_conflict", h())
    expect_error(srv, "POST", "/v1/sessions", '{}', 400, "invalid_request",
      { ["idempotency-key"] = string.rep("k", 256) })
    -- concurrent requests with one key make one session
    local tasks = {}
    for i = 1, 5 do
      tasks[i] = rig.spawn(function()
        return (call(srv, "POST", "/v1/sessions", "", { ["idempotency-key"] = "key-2" })).session_id
      end)
    end
    local first = tasks[1]:wait()
    for i = 2, 5 do expect(tasks[i]:wait()).to_be(first) end
    local list = call(srv, "GET", "/v1/sessions")
    expect(#list.sessions).to_be(2)
    srv:shutdown()
  end)

  it("answers each error with its status and the one error shape", function()
    local srv = start{ max_body = 1024 }
    local id = new_session(srv)
    local unknown = "00000000-0000-4000-8000-000000000000"
    for _, p in ipairs({ { "POST", "/input", '{"text":"x"}' }, { "POST", "/interrupt" },
                         { "POST", "/gates/g1", '{"action":"approve"}' }, { "GET", "/status" },
                         { "GET", "/journal" }, { "GET", "/events" }, { "POST", "/restore" } }) do
      expect_error(srv, p[1], "/v1/sessions/" .. unknown .. p[2], p[3], 404, "session_not_found")
    end
    expect_error(srv, "GET", "/v1/sessions/..%2f/status", nil, 404, "session_not_found")
    expect_error(srv, "GET", "/v2/nothing", nil, 404, "not_found")
    expect_error(srv, "DELETE", "/v1/sessions", nil, 404, "not_found")
    expect_error(srv, "POST", "/v1/sessions/" .. id .. "/gates/g9", '{"action":"approve"}', 409, "gate_not_open")
    local e = expect_error(srv, "POST", "/v1/sessions/" .. id .. "/input", '{"text": tru}', 400, "invalid_json")
    expect(e.message).to_match("byte")
    e = expect_error(srv, "POST", "/v1/sessions/" .. id .. "/input", '{"txt":"x"}', 400, "invalid_request")
    expect(e.message).to_match("unknown field 'txt'")
    expect_error(srv, "POST", "/v1/sessions/" .. id .. "/input", '{}', 400, "invalid_request")
    expect_error(srv, "POST", "/v1/sessions/" .. id .. "/input", '[1]', 400, "invalid_request")
    expect_error(srv, "POST", "/v1/sessions/" .. id .. "/input", '', 400, "invalid_json")
    expect_error(srv, "POST", "/v1/sessions/" .. id .. "/input",
      '{"blocks":[{"type":"image","text":"x"}]}', 400, "invalid_request")
    expect_error(srv, "GET", "/v1/sessions?limit=0", nil, 400, "invalid_request")
    expect_error(srv, "GET", "/v1/sessions?limit=1001", nil, 400, "invalid_request")
    expect_error(srv, "GET", "/v1/sessions/" .. id .. "/journal?from=x", nil, 400, "invalid_request")
    expect_error(srv, "GET", "/v1/sessions/" .. id .. "/events?from=-1", nil, 400, "invalid_request")
    -- the body cap: ours between the cap and 4x, evhttp's 413 far above
    expect_error(srv, "POST", "/v1/sessions/" .. id .. "/input",
      json.encode{ text = string.rep("a", 2000) }, 413, "body_too_large")
    local _, resp = call(srv, "POST", "/v1/sessions/" .. id .. "/input",
      json.encode{ text = string.rep("a", 200000) })
    expect(resp.status).to_be(413)
    -- just under the cap is fine
    _, resp = call(srv, "POST", "/v1/sessions/" .. id .. "/input",
      json.encode{ text = string.rep("a", 1000) })
    expect(resp.status).to_be(200)
    srv:shutdown()
  end)

  it("requires the bearer token when one is set, and refuses a public bind without one", function()
    local token = "0123456789abcdef-token"
    local srv = start{ auth = { token = token } }
    expect_error(srv, "GET", "/v1/capabilities", nil, 401, "unauthorized")
    local e, resp = call(srv, "GET", "/v1/sessions", nil, { authorization = "Bearer wrong-token-0123456789" })
    expect(resp.status).to_be(401)
    expect(resp.headers["www-authenticate"]).to_be("Bearer")
    expect(e.error.code).to_be("unauthorized")
    expect_error(srv, "POST", "/v1/sessions", nil, 401, "unauthorized", { authorization = "Basic " .. token })
    local v
    v, resp = call(srv, "GET", "/v1/capabilities", nil, { authorization = "Bearer " .. token })
    expect(resp.status).to_be(200)
    expect(v.protocol).to_be("luarig.serve")
    srv:shutdown()

    local r = define()
    local s, msg, code = rig.serve{ rig = r, listen = "0.0.0.0:0" }
    expect(s).to_be_nil()
    expect(code).to_be("refused")
    expect(msg).to_match("without authentication")
    s = assert(rig.serve{ rig = r, listen = "0.0.0.0:0", auth = { token = token } })
    s:close()
    s = assert(rig.serve{ rig = r, listen = "0.0.0.0:0", insecure_public_bind = true })
    s:close()
    expect(function() rig.serve{ rig = r, listen = "127.0.0.1:0", auth = { token = "short" } } end)
      .to_fail("at least 16 bytes")
    expect(function() rig.serve{ rig = r, lisen = "127.0.0.1:0" } end).to_fail("unknown option 'lisen'")
  end)

  it("answers 503 over the request cap", function()
    local srv = start{ max_connections = 2 }
    local id = new_session(srv)
    local a = open_stream(srv, id)
    local b = open_stream(srv, id)
    expect_error(srv, "GET", "/v1/capabilities", nil, 503, "over_capacity")
    a:close()
    b:close()
    local deadline = rig.now() + 5
    local resp
    repeat
      rig.sleep(0.05)
      resp = select(2, call(srv, "GET", "/v1/capabilities"))
    until resp.status == 200 or rig.now() > deadline
    expect(resp.status).to_be(200)
    srv:shutdown()
  end)
end)

describe("rig.serve events", function()
  it("streams with SSE headers and resumes after a dropped connection with no gap and no duplicate", function()
    local srv = start()
    local id = new_session(srv)
    local st = open_stream(srv, id, nil, "?from=0")
    expect(st.headers["content-type"]).to_be("text/event-stream")
    expect(st.headers["cache-control"]).to_be("no-store")
    call(srv, "POST", "/v1/sessions/" .. id .. "/input", '{"text":"one"}')
    local ids, texts = {}, {}
    read_until(st, "TurnDone", ids, texts)
    st:close() -- the connection drops
    -- work goes on while nobody listens; a turn is under way when we come back
    call(srv, "POST", "/v1/sessions/" .. id .. "/input", '{"text":"two"}')
    call(srv, "POST", "/v1/sessions/" .. id .. "/input", '{"text":"slow 3"}')
    wait_event(srv, id, "TurnDone", 2)
    local st2 = open_stream(srv, id, { ["last-event-id"] = tostring(ids[#ids]) })
    local _, last = read_until(st2, "TurnDone", ids, texts)
    -- the slow turn may have ended in the replay; then wait for its end live
    while not (last.type == "TurnDone" and last.message.content[1].text:find("^s")) do
      _, last = read_until(st2, "TurnDone", ids, texts)
    end
    call(srv, "POST", "/v1/sessions/" .. id .. "/input", '{"text":"three"}')
    read_until(st2, "TurnDone", ids, texts)
    st2:close()
    -- every journal event up to the last TurnDone, each once, in order
    local want = journal_event_seqs(srv, id, 0)
    expect(#want >= #ids).to_be(true)
    for i = 1, #ids do expect(ids[i]).to_be(want[i]) end
    expect(ids[#ids]).to_be(wait_event(srv, id, "TurnDone", 4).seq)
    -- the bytes are the journal's
    local v = call(srv, "GET", "/v1/sessions/" .. id .. "/journal?limit=1000")
    local by_seq = {}
    for _, e in ipairs(v.events) do by_seq[e.seq] = e.event.event_id end
    for i, t in ipairs(texts) do expect(json.decode(t).event_id).to_be(by_seq[ids[i]]) end
    srv:shutdown()
  end)

  it("resumes again and again while events keep coming, each event once", function()
    local srv = start()
    local id = new_session(srv)
    local writer = rig.spawn(function()
      for i = 1, 40 do
        call(srv, "POST", "/v1/sessions/" .. id .. "/input", '{"text":"n' .. i .. '"}')
        rig.sleep(0.005)
      end
    end)
    local ids, last = {}, 0
    for round = 1, 30 do
      local st = open_stream(srv, id, { ["last-event-id"] = tostring(last) })
      for _ = 1, 1 + round % 4 do
        local ev = st:next()
        while ev and ev.event ~= "enduring" do ev = st:next() end
        if not ev then break end
        ids[#ids + 1] = tonumber(ev.id)
        last = ids[#ids]
      end
      st:close()
    end
    writer:wait()
    local want = journal_event_seqs(srv, id, 0)
    expect(#ids <= #want).to_be(true)
    for i = 1, #ids do expect(ids[i]).to_be(want[i]) end
    srv:shutdown()
  end)

  it("sends live events only without a cursor, ephemeral ones without an id", function()
    local srv = start()
    local id = new_session(srv, "before")
    wait_event(srv, id, "TurnDone")
    local tip = (call(srv, "GET", "/v1/sessions/" .. id .. "/status")).last_seq
    local st = open_stream(srv, id)
    call(srv, "POST", "/v1/sessions/" .. id .. "/input", '{"text":"after"}')
    local deltas, ids = 0, {}
    while true do
      local ev = assert(st:next())
      if ev.event == "ephemeral" then
        if json.decode(ev.data).type == "TokenDelta" then deltas = deltas + 1 end
      else
        ids[#ids + 1] = tonumber(ev.id)
        if json.decode(ev.data).type == "TurnDone" then break end
      end
    end
    expect(deltas > 0).to_be(true)
    expect(ids[1] > tip).to_be(true)
    local want = journal_event_seqs(srv, id, tip)
    for i = 1, #ids do expect(ids[i]).to_be(want[i]) end
    st:close()
    srv:shutdown()
  end)

  it("sends a heartbeat comment when quiet", function()
    local srv = start{ heartbeat = 0.2 }
    local id = new_session(srv)
    local resp = assert(rig.process.run{ argv = { "curl", "-s", "-N", "--max-time", "1",
      srv.url .. "/v1/sessions/" .. id .. "/events" }, timeout = 10 })
    expect(resp.stdout).to_match("^: ping\n\n: ping\n\n")
    -- raw framing: enduring events carry an id, ephemeral ones none
    -- (a turn streams text deltas only when a subscriber wants them as it starts)
    local keep = open_stream(srv, id)
    call(srv, "POST", "/v1/sessions/" .. id .. "/input", '{"text":"slow 2"}')
    resp = assert(rig.process.run{ argv = { "curl", "-s", "-N", "--max-time", "1",
      srv.url .. "/v1/sessions/" .. id .. "/events?from=0" }, timeout = 10 })
    expect(resp.stdout).to_match("^event: enduring\nid: 2\ndata: {[^\n]*\"type\":\"SessionStarted\"")
    expect(resp.stdout).to_match("\n\nevent: ephemeral\ndata: {[^\n]*\"type\":\"TokenDelta\"")
    expect(resp.stdout:find("event: ephemeral\nid:", 1, true)).to_be_nil()
    keep:close()
    srv:shutdown()
  end)

  it("feeds 200 subscribers of one session the same events", function()
    local srv = start()
    local id = new_session(srv)
    local streams = {}
    for i = 1, 200 do streams[i] = open_stream(srv, id, nil, "?from=0") end
    call(srv, "POST", "/v1/sessions/" .. id .. "/input", '{"text":"to everyone"}')
    local tasks = {}
    for i = 1, 200 do
      tasks[i] = rig.spawn(function() return table.concat(read_until(streams[i], "TurnDone"), ",") end)
    end
    local first = tasks[1]:wait(20)
    local want = journal_event_seqs(srv, id, 0)
    expect(table.concat(want, ","):sub(1, #first)).to_be(first)
    expect(first).to_match("," .. wait_event(srv, id, "TurnDone").seq .. "$")
    for i = 2, 200 do expect(tasks[i]:wait(20)).to_be(first) end
    for i = 1, 200 do streams[i]:close() end
    srv:shutdown()
  end)

  it("does not let a subscriber that stops reading stall the others", function()
    local srv = start()
    local id = new_session(srv)
    -- a client that sends its request and never reads
    local port = srv.port
    local slow = assert(rig.process.spawn{ argv = { "python3", "-c", ([[
import socket, sys, time
s = socket.create_connection(("127.0.0.1", %d))
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
s.sendall(b"GET /v1/sessions/%s/events?from=0 HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n")
print("sent", flush=True)
time.sleep(60)
]]):format(port, id, port) }, stdout = "pipe", stderr = "null" })
    expect(slow:lines("stdout")()).to_be("sent")
    rig.sleep(0.2)
    local st = open_stream(srv, id, nil, "?from=0")
    local t0 = rig.now()
    for i = 1, 8 do
      call(srv, "POST", "/v1/sessions/" .. id .. "/input", '{"text":"big 512"}')
      read_until(st, "TurnDone")
    end
    -- 8 turns of 512 KiB each reached the reader while the other stopped
    expect(rig.now() - t0 < 25).to_be(true)
    st:close()
    slow:kill()
    slow:close()
    srv:shutdown()
  end)

  it("catches a client that fell a whole buffer behind up from the journal, no gap, no duplicate", function()
    -- a 4-event buffer: a client that stops reading while 8 turns of ~1.5 MiB of
    -- frames each run overflows it once the kernel's buffers and the 1 MiB
    -- backpressure mark are full; when it reads again the stream catches up from
    -- the journal and goes on live. (No small SO_RCVBUF here: a window below the
    -- loopback MSS stalls the reader until a zero-window probe, seconds later.)
    local srv = start{ sse_buffer = 4 }
    local id = new_session(srv)
    local turns = 8
    local client = assert(rig.process.spawn{ argv = { "python3", "-c", ([[
import json, socket, sys
s = socket.create_connection(("127.0.0.1", %d))
s.sendall(b"GET /v1/sessions/%s/events?from=0 HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n")
print("sent", flush=True)
sys.stdin.readline()
s.settimeout(10)
buf, body, ids, done = b"", b"", [], 0
def more():
    global buf
    try:
        d = s.recv(1 << 20)
    except socket.timeout:
        d = b""
    if not d:  # ended or stalled: show what came
        print(",".join(ids), flush=True)
        sys.exit(0)
    buf += d
while b"\r\n\r\n" not in buf:
    more()
buf = buf.split(b"\r\n\r\n", 1)[1]
while done < %d:
    while True:  # de-chunk
        i = buf.find(b"\r\n")
        if i < 0:
            break
        n = int(buf[:i], 16)
        if len(buf) < i + n + 4:
            break
        body += buf[i + 2:i + 2 + n]
        buf = buf[i + n + 4:]
    while b"\n\n" in body:
        frame, body = body.split(b"\n\n", 1)
        f = dict(l.split(b": ", 1) for l in frame.split(b"\n") if not l.startswith(b":"))
        if f.get(b"event") == b"enduring":
            ids.append(f[b"id"].decode())
            if json.loads(f[b"data"])["type"] == "TurnDone":
                done += 1
    if done < %d:
        more()
print(",".join(ids), flush=True)
]]):format(srv.port, id, srv.port, turns, turns) }, stdin = "pipe", stdout = "pipe", stderr = "pipe" })
    local out = client:lines("stdout")
    expect(out()).to_be("sent")
    rig.sleep(0.2)
    for i = 1, turns do
      call(srv, "POST", "/v1/sessions/" .. id .. "/input", '{"text":"big 512"}')
      wait_event(srv, id, "TurnDone", i)
    end
    client:write("go\n")
    local got = out()
    expect(got).to_be_truthy()
    local want = journal_event_seqs(srv, id, 0)
    local ids = {}
    for n in got:gmatch("%d+") do ids[#ids + 1] = tonumber(n) end
    expect(#ids > turns * 5).to_be(true)
    for i = 1, #ids do expect(ids[i]).to_be(want[i]) end
    -- the catch-up path ran (the metric counts it)
    local resp = assert(rig.http.request{ url = srv.url .. "/metrics", timeout = 10 })
    expect(tonumber(resp.body:match("\nluarig_sse_catch_ups_total (%d+)\n")) >= 1).to_be(true)
    client:kill()
    client:close()
    srv:shutdown()
  end)
end)

describe("rig.serve events, a client that leaves", function()
  local function subscribers(srv)
    local resp = assert(rig.http.request{ url = srv.url .. "/metrics", timeout = 10 })
    return tonumber(resp.body:match("\nluarig_sse_subscribers (%d+)\n"))
  end

  it("stops counting a quiet stream whose client closed, with no write to it", function()
    local srv = start{ heartbeat = 3600 } -- no ping: nothing is written after the headers
    local id = new_session(srv)
    local p = assert(rig.process.spawn{ argv = { "python3", "-c", ([[
import socket, sys
s = socket.create_connection(("127.0.0.1", %d))
s.sendall(b"GET /v1/sessions/%s/events HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n")
head = b""
while b"\r\n\r\n" not in head:
    head += s.recv(4096)
print(head.split(b"\r\n")[0].decode(), flush=True)
sys.stdin.readline()
s.close()
print("closed", flush=True)
sys.stdin.readline()
]]):format(srv.port, id, srv.port) }, stdin = "pipe", stdout = "pipe", stderr = "null" })
    local lines = p:lines("stdout")
    expect(lines()).to_be("HTTP/1.1 200 OK")
    expect(subscribers(srv)).to_be(1)
    p:write("close\n")
    expect(lines()).to_be("closed")
    local t0 = rig.now()
    while subscribers(srv) ~= 0 do
      if rig.now() - t0 > 1 then error("the stream still counts 1 s after its client closed") end
      rig.sleep(0.02)
    end
    -- the session still serves, and a new stream counts from zero
    local st = open_stream(srv, id)
    expect(subscribers(srv)).to_be(1)
    st:close()
    p:write("exit\n")
    p:wait(5)
    p:close()
    srv:shutdown()
  end)
end)

-- Parses a /metrics body strictly: every line a HELP, a TYPE or a sample
-- `name{labels} value` of a family with both. Returns name -> labels -> value.
local function parse_metrics(body)
  local help, typ, out = {}, {}, {}
  expect(body:sub(-1)).to_be("\n")
  for line in body:gmatch("([^\n]*)\n") do
    local hn = line:match("^# HELP ([%a_:][%w_:]*) %S")
    local tn, tk = line:match("^# TYPE ([%a_:][%w_:]*) (%a+)$")
    if hn then
      expect(help[hn]).to_be_nil()
      help[hn] = true
    elseif tn then
      expect(help[tn]).to_be(true) -- HELP first
      expect(tk == "counter" or tk == "gauge").to_be(true)
      typ[tn] = tk
      out[tn] = {}
    else
      local name, labels, value = line:match("^([%a_:][%w_:]*)(%b{}) (%-?%d+)$")
      if not name then
        name, value = line:match("^([%a_:][%w_:]*) (%-?%d+)$")
        labels = ""
      end
      if not name then error("not a metrics line: '" .. line .. "'") end
      expect(typ[name]).to_be_truthy() -- a sample of a declared family
      if typ[name] == "counter" then expect(name).to_match("_total$") end
      if labels ~= "" then
        local inner = labels:sub(2, -2)
        expect(inner).to_match('^[%a_][%w_]*="[^"\\]*"$')
        labels = inner
      end
      expect(out[name][labels]).to_be_nil()
      out[name][labels] = tonumber(value)
    end
  end
  return out
end

local function get_metrics(srv, headers)
  local resp = assert(rig.http.request{ url = srv.url .. "/metrics", headers = headers or {},
    timeout = 10 })
  expect(resp.status).to_be(200)
  expect(resp.headers["content-type"]).to_match("^text/plain; version=0%.0%.4")
  return parse_metrics(resp.body), resp.body
end

describe("rig.serve metrics", function()
  it("counts turns, tool calls, gates, tokens, appends and streams from what happened", function()
    local srv = start()
    local m = get_metrics(srv)
    expect(m.luarig_turns_total['outcome="done"']).to_be(0)
    expect(m.luarig_tool_calls_total[""]).to_be(0)
    expect(m.luarig_sse_subscribers[""]).to_be(0)
    expect(m.luarig_model_errors_total).to_be_truthy()

    -- a plain turn
    local a = new_session(srv, "hello")
    wait_event(srv, a, "TurnDone")
    -- a turn with a tool call behind a gate, approved
    local b = new_session(srv)
    local st = call(srv, "GET", "/v1/sessions/" .. b .. "/status")
    local b_tip = st.last_seq
    call(srv, "POST", "/v1/sessions/" .. b .. "/input", '{"text":"gate me"}')
    local pr = wait_event(srv, b, "PermissionRequested")
    m = get_metrics(srv)
    expect(m.luarig_sessions['state="waiting_on_gate"']).to_be(1)
    local _, resp = call(srv, "POST", "/v1/sessions/" .. b .. "/gates/" .. pr.event.gate_id,
      '{"action":"approve"}')
    expect(resp.status).to_be(202)
    wait_event(srv, b, "TurnDone")
    -- an interrupted turn, with a stream open
    local c = new_session(srv, "slow 5")
    local stream = open_stream(srv, c)
    wait_event(srv, c, "TurnStarted")
    local v = call(srv, "POST", "/v1/sessions/" .. c .. "/interrupt")
    expect(v.interrupted).to_be(true)
    wait_event(srv, c, "TurnInterrupted")

    -- the counters follow the events (asynchronously): wait until they settle
    local deadline, body = rig.now() + 10
    local b_events, appends_base
    while true do
      m, body = get_metrics(srv)
      b_events = #journal_event_seqs(srv, b, b_tip)
      if m.luarig_turns_total['outcome="done"'] == 2 and m.luarig_turns_total['outcome="interrupted"'] == 1
        and m.luarig_sse_subscribers[""] == 1 then break end
      if rig.now() > deadline then error("the metrics did not settle:\n" .. body) end
      rig.sleep(0.02)
    end
    expect(m.luarig_turns_total['outcome="failed"']).to_be(0)
    expect(m.luarig_tool_calls_total[""]).to_be(1)
    expect(m.luarig_gate_decisions_total['action="approve"']).to_be(1)
    expect(m.luarig_gate_decisions_total['action="deny"']).to_be(0)
    expect(m.luarig_sessions['state="idle"']).to_be(3)
    expect(m.luarig_sessions['state="not_live"']).to_be(0)
    expect(next(m.luarig_model_errors_total)).to_be_nil()
    local input, output = 0, 0
    for _, id in ipairs({ a, b, c }) do
      local s = call(srv, "GET", "/v1/sessions/" .. id .. "/status")
      input, output = input + s.usage.input_tokens, output + s.usage.output_tokens
    end
    expect(output > 0).to_be(true)
    expect(m.luarig_model_tokens_total['direction="input"']).to_be(input)
    expect(m.luarig_model_tokens_total['direction="output"']).to_be(output)
    -- session b's events after its creation are all counted (and a, c add more)
    expect(m.luarig_journal_appends_total[""] > b_events).to_be(true)
    appends_base = m.luarig_journal_appends_total[""]

    -- one more idle-to-idle turn on b: appends grow by exactly its event records
    local tip2 = call(srv, "GET", "/v1/sessions/" .. b .. "/status").last_seq
    call(srv, "POST", "/v1/sessions/" .. b .. "/input", '{"text":"again"}')
    wait_event(srv, b, "TurnDone", 2)
    deadline = rig.now() + 10
    while true do
      m = get_metrics(srv)
      local st2 = call(srv, "GET", "/v1/sessions/" .. b .. "/status")
      local n = #journal_event_seqs(srv, b, tip2)
      if st2.state == "idle" and m.luarig_journal_appends_total[""] == appends_base + n then break end
      if rig.now() > deadline then error("appends did not match the journal") end
      rig.sleep(0.02)
    end
    expect(m.luarig_turns_total['outcome="done"']).to_be(3)

    stream:close()
    srv:shutdown()
  end)

  it("needs the token when the server has one, and counts catalog sessions not live", function()
    local token = "0123456789abcdef-token"
    local r = define()
    local srv = start{ rig = r, auth = { token = token } }
    local resp = assert(rig.http.request{ url = srv.url .. "/metrics", timeout = 10 })
    expect(resp.status).to_be(401)
    local auth = { authorization = "Bearer " .. token }
    local v = call(srv, "POST", "/v1/sessions", nil, auth)
    expect(v.session_id).to_be_truthy()
    local m = get_metrics(srv, auth)
    expect(m.luarig_sessions['state="idle"']).to_be(1)
    srv:shutdown()
    -- a second server on the same store holds nothing live
    local srv2 = start{ rig = r, auth = { token = token } }
    m = get_metrics(srv2, auth)
    expect(m.luarig_sessions['state="idle"']).to_be(0)
    expect(m.luarig_sessions['state="not_live"']).to_be(1)
    srv2:shutdown()
  end)
end)

describe("luarig serve", function()
  local function spawn(args, env)
    local argv = { luarig, "serve" }
    for _, a in ipairs(args) do argv[#argv + 1] = a end
    return assert(rig.process.spawn{ argv = argv, stdout = "null", stderr = "pipe", env = env })
  end

  local function url_of(p)
    local line = p:lines("stderr")()
    return line and line:match("serving on (http://%S+)"), line
  end

  it("refuses a public bind without a token, and usage errors exit 2", function()
    local r = assert(rig.process.run{ argv = { luarig, "serve", rig_file, "--listen", "0.0.0.0:0" }, timeout = 10 })
    expect(r.code).to_be(1)
    expect(r.stderr).to_match("refusing to listen on '0.0.0.0:0' without authentication")
    r = assert(rig.process.run{ argv = { luarig, "serve", rig_file, "--bogus" }, timeout = 10 })
    expect(r.code).to_be(2)
    expect(r.stderr).to_match("unknown option '%-%-bogus'")
    r = assert(rig.process.run{ argv = { luarig, "serve" }, timeout = 10 })
    expect(r.code).to_be(2)
  end)

  it("serves a public bind with a token file and answers 401 without it", function()
    local dir = tmpdir()
    local f = assert(io.open(dir .. "/token", "w"))
    f:write("s3cret-token-for-the-test\n")
    f:close()
    local p = spawn({ rig_file, "--listen", "0.0.0.0:0", "--auth-token-file", dir .. "/token" })
    local url = assert(url_of(p))
    local port = url:match(":(%d+)$")
    local resp = assert(rig.http.request{ url = "http://127.0.0.1:" .. port .. "/v1/capabilities" })
    expect(resp.status).to_be(401)
    resp = assert(rig.http.request{ url = "http://127.0.0.1:" .. port .. "/v1/capabilities",
      headers = { authorization = "Bearer s3cret-token-for-the-test" } })
    expect(resp.status).to_be(200)
    p:kill("SIGTERM")
    local w = p:wait(10)
    expect(w.code or 128 + 15).to_be(143)
    p:close()
  end)

  it("on SIGTERM ends SSE streams cleanly, finishes, and shuts the sessions down", function()
    local dir = tmpdir()
    local p = spawn({ rig_file, "--listen", "127.0.0.1:0" }, { SERVE_STORE = dir })
    local url = assert(url_of(p))
    local srv = { url = url }
    local id = new_session(srv)
    local st = open_stream(srv, id, nil, "?from=0")
    call(srv, "POST", "/v1/sessions/" .. id .. "/input", '{"text":"slow 30"}')
    read_until(st, "TurnStarted")
    local t0 = rig.now()
    p:kill("SIGTERM")
    -- the stream ends as a clean end of stream, not a reset
    while st:next() do end
    expect(st:result()).to_be(true)
    local w = p:wait(10)
    expect(rig.now() - t0 < 10).to_be(true)
    expect(w.code).to_be(143)
    local err = p:read("stderr") or ""
    p:close()
    expect(err).to_match("SIGTERM: shutting down")
    -- the journal ends with the interrupted turn and SessionStopped
    local store = rig.store.lmdb{ root = dir }
    local recs = assert(core.journal_read(store, id, 1, 0))
    local types = {}
    for _, r in ipairs(recs) do
      if r.kind == "event" then types[#types + 1] = json.decode(r.body).type end
    end
    local t = table.concat(types, " ")
    expect(t).to_match("TurnInterrupted")
    expect(t).to_match("SessionStopped$")
  end)
end)

describe("rig.serve web console", function()
  it("serves the page and its two files without the token, with a strict CSP; the API still wants it", function()
    local srv = start{ auth = { token = "console-spec-token-0123456789" } }
    local _, resp = call(srv, "GET", "/")
    expect(resp.status).to_be(200)
    expect(resp.headers["content-type"]).to_be("text/html; charset=utf-8")
    expect(resp.headers["content-security-policy"]).to_match("^default%-src 'none'; script%-src 'self';")
    expect(resp.headers["x-content-type-options"]).to_be("nosniff")
    expect(resp.body).to_match('<script src="/console.js"></script>')
    -- nothing from elsewhere: every src/href is local (or data:)
    for attr, v in resp.body:gmatch('(%w+)="([^"]*)"') do
      if attr == "src" or attr == "href" then expect(v).to_match("^[/d]") end
    end
    local _, js = call(srv, "GET", "/console.js")
    expect(js.status).to_be(200)
    expect(js.headers["content-type"]).to_be("text/javascript; charset=utf-8")
    expect(js.body).to_match("Last%-Event%-ID")
    local _, css = call(srv, "GET", "/console.css")
    expect(css.headers["content-type"]).to_be("text/css; charset=utf-8")
    -- the SVG namespace is a name, not an address: it is the one URL allowed
    local js_urls = js.body:gsub("'http://www%.w3%.org/2000/svg'", "")
    expect(js_urls:find("https?://") == nil and css.body:find("https?://") == nil).to_be(true)
    expect_error(srv, "GET", "/console.map", nil, 401, "unauthorized")
    expect_error(srv, "GET", "/v1/sessions", nil, 401, "unauthorized")
    -- the embedded files are not modules
    expect(pcall(require, "rig.console.index.html")).to_be(false)
    expect(core.asset("rig/console/console.css")).to_be(css.body)
    expect(core.asset("rig/console/none.js")).to_be(nil)
    expect(function() core.asset("../etc/passwd") end).to_fail()
    srv:close()
  end)
end)
