-- The HTTP client (rig.http.request, rig.http.stream) against the project's
-- own server (rig.http.server) on loopback, and the recorded provider
-- streams served back byte for byte.

local cjson = require "cjson"
local http = rig.http

local FIXTURES = os.getenv("LUARIG_FIXTURES") or ((os.getenv("LUARIG_ROOT") or ".") .. "/tests/fixtures")

local function read_fixture(name)
  local f = assert(io.open(FIXTURES .. "/" .. name, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

local function sse_headers()
  return { ["content-type"] = "text/event-stream", ["cache-control"] = "no-store" }
end

-- Handlers that write until the peer is gone record it here. The server
-- notices a disconnect either as a failed write or by cancelling the
-- handler's task (which raises "cancelled" at its next wait).
local gone = {}
-- and the handlers that started (a request in flight), with a condition to wait on
local arrived, arrival = {}, rig.cond()

local function keep_writing(key, res)
  arrived[key] = true
  arrival:signal()
  pcall(function()
    while res:write(": keep-alive\n") do rig.sleep(0.05) end
  end)
  gone[key] = true
end

-- Odd chunk sizes, so that lines and CRLFs split everywhere.
local CHUNKS = { 7, 1, 13, 2, 31, 3, 64, 5 }

local many_sent = 0 -- times GET /many has written all of its events
local srv = http.server{ listen = "127.0.0.1:0", max_body = 1 << 20, routes = {
  ["GET /hello/{name}"] = function(req)
    return { status = 200, json = { hi = req.params.name, q = req.query.q } }
  end,
  ["POST /echo"] = function(req)
    return { status = 201, headers = { ["content-type"] = "text/plain", ["x-got"] = req.headers["x-a"] or "" },
             body = req.method .. " " .. (req.body or "") }
  end,
  ["PUT /echo"] = function(req)
    return { status = 200, headers = { ["content-type"] = "text/plain" }, body = req.method .. " " .. (req.body or "") }
  end,
  ["POST /json"] = function(req)
    local v = req:json()
    return { status = 200, json = { sum = v.a + v.b } }
  end,
  ["GET /notfound"] = function() return { status = 404, json = { error = { message = "no such model" } } } end,
  ["GET /boom"] = function() error("handler failed on purpose") end,
  ["GET /big"] = function() return { status = 200, body = string.rep("x", 100000) } end,
  ["GET /redirect"] = function() return { status = 302, headers = { location = "/hello/redirected" }, body = "" } end,
  ["GET /events"] = function(req, res)
    res:start(200, sse_headers())
    res:write(": a comment first\n\n")
    res:event{ event = "x", data = "line1\nline2", id = "7" }
    res:write("data: crlf\r\ndata: lines\r\n\r\n")
    res:event{ data = "plain" }
    res:write("event: named\nretry: 1500\nid: 8\ndata: {\"k\":1}\n\n")
    res:finish()
  end,
  ["GET /stall-headers"] = function(req, res) rig.sleep(5) end,
  ["GET /stall-mid"] = function(req, res)
    res:start(200, sse_headers())
    res:event{ data = "one" }
    rig.sleep(5)
    res:finish()
  end,
  ["GET /drop"] = function(req, res)
    res:start(200, sse_headers())
    res:event{ data = "one" }
    res:event{ data = "two" }
    res:write("data: half an ev")
    rig.sleep(0.05)
    res:abort()
  end,
  ["GET /hang/{key}"] = function(req, res)
    res:start(200, sse_headers())
    res:event{ data = "first" }
    keep_writing(req.params.key, res)
  end,
  ["GET /slow-body/{key}"] = function(req, res)
    res:start(200, { ["content-type"] = "text/plain" })
    keep_writing(req.params.key, res)
  end,
  ["GET /raw/{name}"] = function(req, res)
    local s = read_fixture(req.params.name)
    res:start(200, sse_headers())
    local i, k = 1, 1
    while i <= #s do
      local n = CHUNKS[k]
      res:write(s:sub(i, i + n - 1))
      i, k = i + n, k % #CHUNKS + 1
    end
    res:finish()
  end,
  ["GET /jsonl/{name}"] = function(req, res)
    res:start(200, sse_headers())
    for line in read_fixture(req.params.name):gmatch("[^\n]+") do
      res:write("data: " .. line .. "\n\n")
    end
    res:finish()
  end,
  ["GET /drip"] = function(req, res)
    -- a valid stream, one byte every 50 ms: never idle, never done
    res:start(200, sse_headers())
    local ev = "data: " .. string.rep("x", 100) .. "\n\n"
    for _ = 1, 100 do
      for i = 1, #ev do
        if not res:write(ev:sub(i, i)) then return end
        rig.sleep(0.05)
      end
    end
    res:finish()
  end,
  ["GET /cut"] = function(req, res)
    res:start(200, sse_headers())
    res:event{ data = "whole" }
    res:write("data: {\"half\":")
    res:finish()
  end,
  ["GET /html"] = function(req, res)
    res:start(200, { ["content-type"] = "text/html; charset=utf-8" })
    res:write("<!DOCTYPE html><html><body>502 Bad Gateway</body></html>\n")
    res:finish()
  end,
  ["GET /many"] = function(req, res)
    res:start(200, sse_headers())
    for i = 1, 2000 do res:event{ data = tostring(i) } end
    res:finish()
    many_sent = many_sent + 1
  end,
  ["GET /bulk"] = function(req, res)
    -- 1000 events of 64 KiB: more than the socket buffers and the client's 1 MiB hold
    res:start(200, sse_headers())
    local ev = "data: " .. string.rep("b", 64 << 10) .. "\n\n"
    pcall(function()
      for _ = 1, 1000 do if not res:write(ev) then return end end
    end)
    res:finish()
  end,
} }

local base = srv.url

-- Runs f in a task of its own and returns the task once it waits inside f:
-- the task signals just before it calls f, and this one runs again only when
-- the task yields (the scheduler is cooperative), that is, blocked in f.
local function blocked_in(f)
  local c, entered = rig.cond(), false
  local t = rig.spawn(function()
    entered = true
    c:signal()
    return f()
  end)
  while not entered do c:wait() end
  return t
end

-- Waits (polling) until f() is true or the deadline passes.
local function eventually(f, secs)
  local deadline = rig.now() + (secs or 2)
  while not f() do
    if rig.now() > deadline then return false end
    rig.sleep(0.02)
  end
  return true
end

describe("rig.http.request", function()
  it("gets a JSON response with status and lower-case headers", function()
    local resp, err = http.request{ url = base .. "/hello/ada?q=1" }
    expect(err).to_be_nil()
    expect(resp.status).to_be(200)
    expect(resp.headers["content-type"]).to_match("json")
    local v = cjson.decode(resp.body)
    expect(v.hi).to_be("ada")
    expect(v.q).to_be("1")
  end)

  it("posts a body with headers (POST is the default with a body)", function()
    local resp = assert(http.request{ url = base .. "/echo", body = "payload", headers = { ["X-A"] = "b" } })
    expect(resp.status).to_be(201)
    expect(resp.body).to_be("POST payload")
    expect(resp.headers["x-got"]).to_be("b")
    resp = assert(http.request{ method = "PUT", url = base .. "/echo", body = "p2" })
    expect(resp.body).to_be("PUT p2")
  end)

  it("round-trips JSON", function()
    local resp = assert(http.request{ url = base .. "/json", method = "POST",
      headers = { ["content-type"] = "application/json" }, body = cjson.encode{ a = 2, b = 3 } })
    expect(cjson.decode(resp.body).sum).to_be(5)
  end)

  it("returns 404 and 500 as responses, not errors", function()
    local resp = assert(http.request{ url = base .. "/notfound" })
    expect(resp.status).to_be(404)
    expect(cjson.decode(resp.body).error.message).to_be("no such model")
    resp = assert(http.request{ url = base .. "/boom" })
    expect(resp.status).to_be(500)
  end)

  it("reuses the connection for sequential requests", function()
    assert(http.request{ url = base .. "/hello/a" })
    local resp = assert(http.request{ url = base .. "/hello/b" })
    expect(resp.reused).to_be(true)
  end)

  it("reports a refused connection with the host", function()
    local resp, err, code = http.request{ url = "http://127.0.0.1:1/x" }
    expect(resp).to_be_nil()
    expect(code).to_be("network")
    expect(err).to_match("connect to '127.0.0.1:1' failed")
  end)

  it("times out waiting for headers, fast", function()
    local t0 = rig.now()
    local resp, err, code = http.request{ url = base .. "/stall-headers", header_timeout = 0.2 }
    expect(resp).to_be_nil()
    expect(code).to_be("timeout")
    expect(err).to_match("no response headers")
    expect(rig.now() - t0).at_most(2)
  end)

  it("honours the overall timeout", function()
    local resp, err, code = http.request{ url = base .. "/stall-headers", timeout = 0.2 }
    expect(resp).to_be_nil()
    expect(code).to_be("timeout")
  end)

  it("caps the response body", function()
    local resp, err, code = http.request{ url = base .. "/big", max_body = 1000 }
    expect(resp).to_be_nil()
    expect(code).to_be("too_large")
    expect(err).to_match("exceeds")
    expect(#assert(http.request{ url = base .. "/big" }).body).to_be(100000)
  end)

  it("does not follow redirects unless asked", function()
    local resp = assert(http.request{ url = base .. "/redirect" })
    expect(resp.status).to_be(302)
    expect(resp.headers.location).to_be("/hello/redirected")
    resp = assert(http.request{ url = base .. "/redirect", follow_redirects = true })
    expect(resp.status).to_be(200)
    expect(cjson.decode(resp.body).hi).to_be("redirected")
  end)

  it("is cancelled within a second and the server sees the disconnect", function()
    local t = rig.spawn(function() return http.request{ url = base .. "/slow-body/req" } end)
    while not arrived.req do arrival:wait() end -- the server is sending the body
    local t0 = rig.now()
    t:cancel()
    local ok, err, code = t:wait()
    expect(ok).to_be_nil()
    expect(code).to_be("cancelled")
    expect(rig.now() - t0).at_most(1)
    expect(eventually(function() return gone.req end)).to_be(true)
  end)

  it("raises on misuse", function()
    expect(function() http.request{ url = base, tiemout = 1 } end).to_fail("unknown option 'tiemout'")
    expect(function() http.request{ url = "ftp://example.com/" } end).to_fail("http:// or https://")
    expect(function() http.request{} end).to_fail("'url'")
    expect(function() http.request{ url = base, timeout = -1 } end).to_fail("'timeout'")
    expect(function() http.request{ url = base, headers = { ["x-a"] = "a\r\nx: y" } } end).to_fail("line break")
    expect(function() http.stream{ url = base, max_line = "big" } end).to_fail("'max_line'")
  end)
end)

describe("rig.http.stream", function()
  it("delivers events with multi-line data, ids, names and comments skipped", function()
    local st = assert(http.stream{ url = base .. "/events" })
    expect(st.status).to_be(200)
    expect(st.headers["content-type"]).to_match("text/event%-stream")
    local evs = {}
    for ev in st:events() do evs[#evs + 1] = ev end
    expect(st:result()).to_be(true)
    expect(#evs).to_be(4)
    expect(evs[1].event).to_be("x"); expect(evs[1].data).to_be("line1\nline2"); expect(evs[1].id).to_be("7")
    expect(evs[2].event).to_be("message"); expect(evs[2].data).to_be("crlf\nlines")
    expect(evs[3].data).to_be("plain")
    expect(evs[4].event).to_be("named"); expect(evs[4].id).to_be("8"); expect(evs[4].retry).to_be(1500)
    expect(cjson.decode(evs[4].data).k).to_be(1)
    expect(st:next()).to_be_nil()  -- stays ended
    st:close()
    expect(function() st:next() end).to_fail("closed")
  end)

  it("returns non-2xx as a failure with the response body", function()
    local st, err, code, resp = http.stream{ url = base .. "/notfound" }
    expect(st).to_be_nil()
    expect(code).to_be("status")
    expect(err).to_match("status 404")
    expect(resp.status).to_be(404)
    expect(cjson.decode(resp.body).error.message).to_be("no such model")
    st, err, code, resp = http.stream{ url = base .. "/boom" }
    expect(code).to_be("status")
    expect(resp.status).to_be(500)
  end)

  it("times out waiting for headers", function()
    local t0 = rig.now()
    local st, err, code = http.stream{ url = base .. "/stall-headers", header_timeout = 0.2 }
    expect(st).to_be_nil()
    expect(code).to_be("timeout")
    expect(rig.now() - t0).at_most(2)
  end)

  it("times out when the stream stalls midway", function()
    local st = assert(http.stream{ url = base .. "/stall-mid", idle_timeout = 0.3 })
    local ev = assert(st:next())
    expect(ev.data).to_be("one")
    local t0 = rig.now()
    local none, err, code = st:next()
    expect(none).to_be_nil()
    expect(code).to_be("timeout")
    expect(err).to_match("no data")
    expect(rig.now() - t0).at_most(2)
    local ok, _, code2 = st:result()
    expect(ok).to_be_nil(); expect(code2).to_be("timeout")
  end)

  it("reports a dropped connection after delivering the events before it", function()
    local st = assert(http.stream{ url = base .. "/drop" })
    local data = {}
    for ev in st:events() do data[#data + 1] = ev.data end
    expect(table.concat(data, ",")).to_be("one,two")
    local ok, err, code = st:result()
    expect(ok).to_be_nil()
    expect(code).to_be("network")
    expect(err).to_match("127%.0%.0%.1")
  end)

  it("reports a refused connection", function()
    local st, err, code = http.stream{ url = "http://127.0.0.1:1/" }
    expect(st).to_be_nil(); expect(code).to_be("network")
  end)

  it("is cancelled within a second while blocked in next()", function()
    local st = assert(http.stream{ url = base .. "/hang/next" })
    expect(st:next().data).to_be("first")
    local t = blocked_in(function() return st:next() end)
    local t0 = rig.now()
    t:cancel()
    local ok, _, code = t:wait()
    expect(ok).to_be_nil(); expect(code).to_be("cancelled")
    expect(rig.now() - t0).at_most(1)
    expect(eventually(function() return gone.next end)).to_be(true)
    st:close()
  end)

  it("close() from another task ends a blocked next() with cancelled", function()
    local st = assert(http.stream{ url = base .. "/hang/close" })
    expect(st:next().data).to_be("first")
    local t = blocked_in(function() return st:next() end)
    st:close()
    local ok, err, code = t:wait(1)
    expect(ok).to_be_nil(); expect(code).to_be("cancelled")
    expect(eventually(function() return gone.close end)).to_be(true)
  end)

  it("aborts the transfer when a to-be-closed stream goes out of scope", function()
    do
      local st <close> = assert(http.stream{ url = base .. "/hang/tbc" })
      expect(st:next().data).to_be("first")
    end
    expect(eventually(function() return gone.tbc end)).to_be(true)
  end)

  it("keeps every event when the reader is slow (backpressure)", function()
    local st = assert(http.stream{ url = base .. "/many" })
    local n, ok_order = 0, true
    for ev in st:events() do
      n = n + 1
      if ev.data ~= tostring(n) then ok_order = false end
      if n % 250 == 0 then rig.sleep(0.02) end
    end
    expect(st:result()).to_be(true)
    expect(n).to_be(2000)
    expect(ok_order).to_be(true)
  end)

  it("ends at its timeout, a deadline that bytes dripping in never push back", function()
    local t0 = rig.now()
    local st = assert(http.stream{ url = base .. "/drip", timeout = 0.6, idle_timeout = 5 })
    local ev, err, code = st:next()
    expect(ev).to_be_nil()
    expect(code).to_be("timeout")
    expect(err).to_match("timed out")
    expect(rig.now() - t0).at_most(10)  -- the whole body would take 4 minutes
    st:close()
  end)

  it("does not pause for a count of events: 2000 small ones left unread past the deadline come whole", function()
    local sent = many_sent
    local t0 = rig.now()
    local st = assert(http.stream{ url = base .. "/many", timeout = 1 })
    expect(st:next().data).to_be("1")
    -- the server wrote all of it (~20 KB: well under the 1 MiB that pauses the
    -- transfer), and the deadline passed with it unread
    expect(eventually(function() return many_sent > sent end, 30)).to_be(true)
    expect(eventually(function() return rig.now() > t0 + 1.2 end, 30)).to_be(true)
    local n = 1
    for ev in st:events() do
      n = n + 1
      if ev.data ~= tostring(n) then break end
    end
    expect(st:result()).to_be(true)
    expect(n).to_be(2000)
  end)

  it("holds its deadline while the reader does not read (paused once 1 MiB waits unread)", function()
    local t0 = rig.now()
    local st = assert(http.stream{ url = base .. "/bulk", timeout = 1 })
    expect(#st:next().data).to_be(64 << 10)
    -- unread until past the deadline
    expect(eventually(function() return rig.now() > t0 + 1.2 end, 30)).to_be(true)
    local n, code = 1, nil
    while true do
      local ev, _, c = st:next()
      if not ev then code = c break end
      n = n + 1
    end
    expect(code).to_be("timeout")
    expect(n < 1000).to_be(true)
  end)

  it("marks a last event the end of the stream cut short", function()
    local st = assert(http.stream{ url = base .. "/cut" })
    local ev = assert(st:next())
    expect(ev.data).to_be("whole")
    expect(ev.unterminated).to_be_nil()
    ev = assert(st:next())
    expect(ev.data).to_be('{"half":')
    expect(ev.unterminated).to_be(true)
    expect(st:next()).to_be_nil()
    local raw = assert(http.stream{ url = base .. "/cut" })
    expect(select("#", raw:read())).to_be(2)
    local data, name, cut = raw:read()
    expect(data).to_be('{"half":'); expect(name).to_be("message"); expect(cut).to_be(true)
  end)

  it("moves events in batches into the caller's table, names shared, the cut one flagged", function()
    local st = assert(http.stream{ url = base .. "/events" })
    local buf, got = { "stale", "stale", "stale", "stale", "stale", "stale" }, {}
    while true do
      local n, cut = st:batch(buf, 3)
      if not n then break end
      expect(n >= 1 and n <= 3).to_be(true)
      expect(cut).to_be_nil()
      expect(buf[2 * n + 1]).to_be_nil()
      for i = 1, n do got[#got + 1] = buf[2 * i] .. "=" .. buf[2 * i - 1] end
    end
    expect(st:result()).to_be(true)
    expect(table.concat(got, "|")).to_be('x=line1\nline2|message=crlf\nlines|message=plain|named={"k":1}')
    expect(st:batch(buf)).to_be_nil()  -- stays ended

    -- a batch waits only for the first event; 2000 come through in order
    local many = assert(http.stream{ url = base .. "/many" })
    local n, ok_order, calls = 0, true, 0
    while true do
      local k = many:batch(buf, 1024)
      if not k then break end
      calls = calls + 1
      for i = 1, k do
        n = n + 1
        if buf[2 * i - 1] ~= tostring(n) then ok_order = false end
      end
    end
    expect(many:result()).to_be(true)
    expect(n).to_be(2000)
    expect(ok_order).to_be(true)
    expect(calls < 2000).to_be(true)

    local cut = assert(http.stream{ url = base .. "/cut" })
    local got_cut, datas = false, {}
    while true do
      local k, c = cut:batch(buf)
      if not k then break end
      for i = 1, k do datas[#datas + 1] = buf[2 * i - 1] end
      if c then got_cut = true end
    end
    expect(table.concat(datas, "|")).to_be('whole|{"half":')
    expect(got_cut).to_be(true)

    expect(function() st:batch() end).to_fail("table expected")
    expect(function() many:batch(buf, 0) end).to_fail("max must be")
    st:close()
    expect(function() st:batch(buf) end).to_fail("closed")
  end)

  it("keeps the first bytes of a 2xx body that is no event stream", function()
    local st = assert(http.stream{ url = base .. "/html" })
    expect(st.headers["content-type"]).to_be("text/html; charset=utf-8")
    expect(st:next()).to_be_nil()
    expect(st:head()).to_be("<!DOCTYPE html><html><body>502 Bad Gateway</body></html>\n")
    local long = assert(http.stream{ url = base .. "/many" })
    for _ in long:events() do end
    expect(#long:head()).to_be(512)
    expect(long:head():sub(1, 9)).to_be("data: 1\n\n")
  end)

  it("caps the event size", function()
    local st = assert(http.stream{ url = base .. "/events", max_event = 4 })
    local ev, err, code = st:next()
    expect(ev).to_be_nil()
    expect(code).to_be("too_large")
  end)
end)

describe("recorded provider streams", function()
  -- The expected events: every data: line of a fixture is one event here.
  local function expected_data(s)
    local out = {}
    for line in (s .. "\n"):gmatch("([^\n]*)\n") do
      local d = line:match("^data: ?(.*)$")
      if d then out[#out + 1] = d end
    end
    return out
  end

  for _, case in ipairs{
    { "anthropic_tool_use.sse", 15, "message_stop" },
    { "openai_chat_parallel_tool_calls.sse", 26, "message" },
    { "openai_chat_length_truncated.sse", 5, "message" },
  } do
    local name, count, last_event = case[1], case[2], case[3]
    it("parses " .. name .. " served in odd-sized chunks", function()
      local want = expected_data(read_fixture(name))
      expect(#want).to_be(count)
      local st = assert(http.stream{ url = base .. "/raw/" .. name })
      local got = {}
      for ev in st:events() do got[#got + 1] = ev end
      expect(st:result()).to_be(true)
      expect(#got).to_be(count)
      for i = 1, count do expect(got[i].data).to_be(want[i]) end
      expect(got[count].event).to_be(last_event)
    end)
  end

  for _, case in ipairs{
    { "anthropic_thinking_signature.jsonl", 22 },
    { "openai_responses_function_call.jsonl", 12 },
  } do
    local name, count = case[1], case[2]
    it("parses " .. name .. " framed as data: lines", function()
      local lines = {}
      for line in read_fixture(name):gmatch("[^\n]+") do lines[#lines + 1] = line end
      expect(#lines).to_be(count)
      local st = assert(http.stream{ url = base .. "/jsonl/" .. name })
      local i = 0
      for ev in st:events() do
        i = i + 1
        expect(ev.data).to_be(lines[i])
        expect(type(cjson.decode(ev.data))).to_be("table")
      end
      expect(st:result()).to_be(true)
      expect(i).to_be(count)
    end)
  end
end)

after_all(function() srv:close() end)
