-- rig.serve at its edges, over real HTTP: the browser checks (a Host that
-- names another server, as DNS rebinding sends it; an Origin from another
-- page; a POST that is not JSON, as a no-cors fetch sends it), with and
-- without a token; and what a client sends never being a 500: ids that name
-- no session, the HTTP layer's own refusals as JSON, and a seeded run of
-- random requests (SERVE_FUZZ_SEED, SERVE_FUZZ_COUNT to vary it).

local json = rig.json
local luarig = os.getenv("LUARIG") or "build/luarig"
local root = os.getenv("LUARIG_ROOT") or "."
local rig_file = root .. "/tests/lua/serve/rig.lua"

local function start(opts)
  opts = opts or {}
  opts.rig = opts.rig or dofile(rig_file)
  opts.listen = opts.listen or "127.0.0.1:0"
  return assert(rig.serve(opts))
end

-- One request with exactly these headers (a POST gets no Content-Type unless given).
local function send(srv, method, path, headers, body)
  return assert(rig.http.request{ url = srv.url .. path, method = method, headers = headers or {},
    body = body, timeout = 10 })
end

local JSON = { ["content-type"] = "application/json" }

local function with(base, extra)
  local t = {}
  for k, v in pairs(base or {}) do t[k] = v end
  for k, v in pairs(extra or {}) do t[k] = v end
  return t
end

local function expect_error(resp, status, code)
  expect(resp.status).to_be(status)
  expect(resp.headers["content-type"]).to_be("application/json")
  local v = json.decode(resp.body)
  expect(type(v) == "table" and type(v.error) == "table").to_be(true)
  expect(v.error.code).to_be(code)
  expect(type(v.error.message)).to_be("string")
  expect(type(v.error.retryable)).to_be("boolean")
  return v.error
end

local function new_session(srv, text, headers)
  local resp = send(srv, "POST", "/v1/sessions", with(JSON, headers),
    text and json.encode{ text = text } or "{}")
  expect(resp.status).to_be(201)
  return json.decode(resp.body).session_id
end

local function wait_event(srv, id, etype, headers)
  local deadline = rig.now() + 10
  while rig.now() < deadline do
    local resp = send(srv, "GET", "/v1/sessions/" .. id .. "/journal?limit=1000", headers)
    for _, e in ipairs(json.decode(resp.body).events) do
      if e.event.type == etype then return e end
    end
    rig.sleep(0.02)
  end
  error("no " .. etype .. " in the journal of " .. id)
end

local function count_sessions(srv, headers)
  return #json.decode(send(srv, "GET", "/v1/sessions", headers).body).sessions
end

local function refusals(srv, headers)
  local body = send(srv, "GET", "/metrics", headers).body
  local out = {}
  for code, n in body:gmatch('\nluarig_http_refusals_total{code="([%w_]+)"} (%d+)') do
    out[code] = tonumber(n)
  end
  return out
end

-- Sends bytes on a connection of its own and returns what the server sent
-- until it closed (python: rig has no raw TCP client); status and JSON body.
local RAW = [[
import socket, sys
data = sys.stdin.buffer.read()
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.settimeout(15)
try:
    s.sendall(data)
except (BrokenPipeError, ConnectionResetError):
    pass
out = b""
try:
    while True:
        d = s.recv(65536)
        if not d:
            break
        out += d
except (socket.timeout, ConnectionResetError):
    pass
sys.stdout.buffer.write(out)
]]
local function raw(srv, bytes)
  local r = assert(rig.process.run{ argv = { "python3", "-c", RAW, tostring(srv.port) }, stdin = bytes,
    timeout = 30 })
  local out = r.stdout
  local head, body = out:match("^(.-)\r\n\r\n(.*)$")
  local status = head and tonumber(head:match("^HTTP/1%.1 (%d%d%d) "))
  local headers = {}
  for k, v in (head or ""):gmatch("\r\n([^:\r\n]+):%s*([^\r\n]*)") do headers[k:lower()] = v end
  return { status = status, headers = headers, body = body or "", raw = out }
end

describe("rig.serve against browsers: Host", function()
  it("refuses a Host that is not its address, localhost or an allowed name, with its port", function()
    local srv = start()
    local port = srv.port
    for _, h in ipairs({ "127.0.0.1:" .. port, "localhost:" .. port, "LOCALHOST:" .. port }) do
      expect(send(srv, "GET", "/v1/capabilities", { host = h }).status).to_be(200)
    end
    for _, h in ipairs({ "attacker.example:" .. port, "attacker.example", "127.0.0.1",
                         "127.0.0.1:" .. (port == 65535 and 1 or port + 1), "localhost.:" .. port,
                         "127.0.0.2:" .. port, "[::1]:" .. port, "127.0.0.1:" .. port .. "@x",
                         "127.0.0.1:0" .. port, "" }) do
      local e = expect_error(send(srv, "GET", "/v1/capabilities", { host = h }), 403, "host_not_allowed")
      expect(e.message).to_match("Host")
    end
    -- HTTP/1.0 without a Host names nothing
    local r = raw(srv, "GET /v1/capabilities HTTP/1.0\r\n\r\n")
    expect_error(r, 403, "host_not_allowed")
    srv:shutdown()
  end)

  it("keeps a rebinding page (Host: attacker.example) from reading transcripts or answering a gate", function()
    local srv = start()
    local evil = { host = "attacker.example:" .. srv.port }
    local id = new_session(srv, "gate me")
    local pr = wait_event(srv, id, "PermissionRequested")
    local gid = pr.event.gate_id
    -- every route, the SSE stream and the console's files included
    for _, p in ipairs({ { "GET", "/v1/sessions" }, { "GET", "/v1/sessions/" .. id .. "/journal" },
                         { "GET", "/v1/sessions/" .. id .. "/status" }, { "GET", "/metrics" },
                         { "GET", "/v1/sessions/" .. id .. "/events?from=0" }, { "GET", "/" },
                         { "GET", "/console.js" }, { "OPTIONS", "/v1/sessions" },
                         { "POST", "/v1/sessions/" .. id .. "/interrupt" } }) do
      expect_error(send(srv, p[1], p[2], with(JSON, evil)), 403, "host_not_allowed")
    end
    expect_error(send(srv, "POST", "/v1/sessions/" .. id .. "/gates/" .. gid, with(JSON, evil),
      '{"action":"approve_always"}'), 403, "host_not_allowed")
    -- the gate is still open, nothing was answered
    local st = json.decode(send(srv, "GET", "/v1/sessions/" .. id .. "/status").body)
    expect(st.state).to_be("waiting_on_gate")
    expect(st.open_gates[1].gate_id).to_be(gid)
    local resp = send(srv, "POST", "/v1/sessions/" .. id .. "/gates/" .. gid, JSON, '{"action":"deny"}')
    expect(resp.status).to_be(202)
    srv:shutdown()
  end)

  it("answers to the names in allowed_hosts, with its port or none (a proxy in front)", function()
    local srv = start{ allowed_hosts = { "rig.test", "Other.Test" } }
    for _, h in ipairs({ "rig.test:" .. srv.port, "rig.test", "other.test:" .. srv.port, "OTHER.test" }) do
      expect(send(srv, "GET", "/v1/capabilities", { host = h }).status).to_be(200)
    end
    expect_error(send(srv, "GET", "/v1/capabilities", { host = "rig.test:1" }), 403, "host_not_allowed")
    expect_error(send(srv, "GET", "/v1/capabilities", { host = "evil.test:" .. srv.port }), 403,
      "host_not_allowed")
    -- a page served under that name may call it
    expect(send(srv, "GET", "/v1/capabilities", { host = "rig.test", origin = "https://rig.test" }).status)
      .to_be(200)
    srv:shutdown()
    local r = dofile(rig_file)
    expect(function() rig.serve{ rig = r, listen = "127.0.0.1:0", allowed_hosts = "rig.test" } end)
      .to_fail("option 'allowed_hosts' must be a list of host names")
    expect(function() rig.serve{ rig = r, listen = "127.0.0.1:0", allowed_hosts = { "rig.test:80" } } end)
      .to_fail("entry 1 must be a host name without a port")
    expect(function() rig.serve{ rig = r, listen = "127.0.0.1:0", allowed_hosts = { "a b" } } end)
      .to_fail("entry 1 must be a host name")
  end)

  it("on a wildcard bind takes any address of the machine, with its port, and names only if allowed", function()
    local token = "0123456789abcdef-token"
    local srv = start{ listen = "0.0.0.0:0", auth = { token = token } }
    local auth = { authorization = "Bearer " .. token }
    for _, h in ipairs({ "127.0.0.1:" .. srv.port, "10.1.2.3:" .. srv.port, "[::1]:" .. srv.port,
                         "localhost:" .. srv.port }) do
      expect(send(srv, "GET", "/v1/capabilities", with(auth, { host = h })).status).to_be(200)
    end
    expect_error(send(srv, "GET", "/v1/capabilities", with(auth, { host = "attacker.example:" .. srv.port })),
      403, "host_not_allowed")
    srv:close()
  end)
end)

describe("rig.serve against browsers: Origin and Content-Type", function()
  it("refuses a request from another origin on every route, SSE included", function()
    local srv = start()
    local id = new_session(srv)
    local port = srv.port
    for _, o in ipairs({ "http://127.0.0.2:" .. port, "http://127.0.0.1:" .. (port + 1), "null",
                         "https://127.0.0.1:" .. port, "http://attacker.example",
                         "http://127.0.0.1:" .. port .. "/x", "file://" }) do
      for _, p in ipairs({ { "GET", "/v1/sessions" }, { "GET", "/v1/sessions/" .. id .. "/events" },
                           { "POST", "/v1/sessions/" .. id .. "/input", '{"text":"x"}' },
                           { "OPTIONS", "/v1/sessions" }, { "GET", "/" } }) do
        expect_error(send(srv, p[1], p[2], with(JSON, { origin = o }), p[3]), 403, "origin_not_allowed")
      end
    end
    -- its own origin, under either of its names
    for _, o in ipairs({ "http://127.0.0.1:" .. port, "http://localhost:" .. port }) do
      expect(send(srv, "GET", "/v1/sessions", { origin = o }).status).to_be(200)
      expect(send(srv, "POST", "/v1/sessions/" .. id .. "/input", with(JSON, { origin = o }),
        '{"text":"x"}').status).to_be(200)
    end
    srv:shutdown()
  end)

  it("takes a POST only as application/json: a no-cors text/plain body creates nothing", function()
    local srv = start()
    local before = count_sessions(srv)
    for _, ct in ipairs({ "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
                          "multipart/form-data; boundary=x", "application/jsonx", "text/json", false }) do
      local h = ct and { ["content-type"] = ct } or {}
      expect_error(send(srv, "POST", "/v1/sessions", h, '{"text":"from the page"}'), 415,
        "unsupported_media_type")
    end
    expect(count_sessions(srv)).to_be(before)
    for _, ct in ipairs({ "application/json", "application/json; charset=utf-8", "Application/JSON",
                          "application/json ;charset=UTF-8" }) do
      expect(send(srv, "POST", "/v1/sessions", { ["content-type"] = ct }, '{}').status).to_be(201)
    end
    -- a POST without a body too: it must still say JSON
    local id = new_session(srv)
    expect_error(send(srv, "POST", "/v1/sessions/" .. id .. "/interrupt"), 415, "unsupported_media_type")
    expect(send(srv, "POST", "/v1/sessions/" .. id .. "/interrupt", JSON).status).to_be(200)
    srv:shutdown()
  end)

  it("makes none of it optional with a token, and counts every refusal in /metrics", function()
    local token = "0123456789abcdef-token"
    local srv = start{ auth = { token = token } }
    local auth = { authorization = "Bearer " .. token }
    local zero = refusals(srv, auth)
    for _, code in ipairs({ "host_not_allowed", "origin_not_allowed", "unsupported_media_type",
                            "malformed_request", "headers_too_large", "body_too_large",
                            "expectation_failed" }) do
      expect(zero[code]).to_be(0)
    end
    expect_error(send(srv, "GET", "/v1/sessions", with(auth, { host = "attacker.example:" .. srv.port })),
      403, "host_not_allowed")
    expect_error(send(srv, "GET", "/v1/sessions", with(auth, { origin = "http://127.0.0.2:" .. srv.port })),
      403, "origin_not_allowed")
    expect_error(send(srv, "GET", "/v1/sessions", with(auth, { origin = "http://127.0.0.2:" .. srv.port })),
      403, "origin_not_allowed")
    expect_error(send(srv, "POST", "/v1/sessions", with(auth, { ["content-type"] = "text/plain" }), "{}"),
      415, "unsupported_media_type")
    -- a refused request is refused before the token is looked at: no 401 to learn from
    expect_error(send(srv, "GET", "/v1/sessions", { host = "attacker.example:" .. srv.port }), 403,
      "host_not_allowed")
    expect_error(raw(srv, "BREW /pot HTTP/1.1\r\n\r\n"), 400, "malformed_request")
    local n = refusals(srv, auth)
    expect(n.host_not_allowed).to_be(2)
    expect(n.origin_not_allowed).to_be(2)
    expect(n.unsupported_media_type).to_be(1)
    expect(n.malformed_request).to_be(1)
    srv:shutdown()
  end)
end)

describe("rig.serve: what a client sent is a 4xx, never a 500", function()
  it("answers 404 session_not_found for any id that is not a session, on every route", function()
    local srv = start()
    local live = new_session(srv)
    -- (no "..": the client would resolve it away before sending)
    local ids = { "nonexistent", "a.b", "...", "x", live:upper(), live .. "0", live:sub(2),
                  "00000000-0000-4000-8000-00000000000g", "%00", "%ff%fe", string.rep("a", 200),
                  "00000000-0000-4000-8000-000000000000" }
    for _, id in ipairs(ids) do
      for _, p in ipairs({ { "POST", "/input", '{"text":"x"}' }, { "POST", "/interrupt" },
                           { "POST", "/gates/g1", '{"action":"approve"}' }, { "GET", "/status" },
                           { "GET", "/journal" }, { "GET", "/events" }, { "POST", "/restore" } }) do
        local e = expect_error(send(srv, p[1], "/v1/sessions/" .. id .. p[2], JSON, p[3]), 404,
          "session_not_found")
        expect(e.message).to_match("^no session '[\32-\126]*'$")
      end
    end
    srv:shutdown()
  end)

  it("answers the HTTP layer's own refusals as JSON: a 10 MB body, a 100 KB header, a bad method or line", function()
    local srv = start()
    local id = new_session(srv)
    -- over the cap by Content-Length, as curl sends it (Expect: 100-continue) and as a raw client does
    local big = string.rep("a", 10 << 20)
    local e = expect_error(send(srv, "POST", "/v1/sessions/" .. id .. "/input", JSON, big), 413,
      "body_too_large")
    expect(e.message).to_match("over 1048576 bytes")
    local r = raw(srv, "POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1:" .. srv.port ..
      "\r\nContent-Type: application/json\r\nContent-Length: " .. #big .. "\r\n\r\n" .. big)
    expect_error(r, 413, "body_too_large")
    expect(r.headers.connection).to_be("close")
    -- chunked, over the cap as it arrives
    r = raw(srv, "POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1:" .. srv.port ..
      "\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" ..
      string.rep("100000\r\n" .. string.rep("b", 0x100000) .. "\r\n", 2) .. "0\r\n\r\n")
    expect_error(r, 413, "body_too_large")
    -- a 100 KB header
    local resp = send(srv, "GET", "/v1/capabilities", { ["x-big"] = string.rep("h", 100 << 10) })
    expect_error(resp, 431, "headers_too_large")
    -- methods no route has: 405 with Allow, JSON
    for _, m in ipairs({ "FOO", "TRACE", "CONNECT", "M-SEARCH" }) do
      r = raw(srv, m .. " /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1:" .. srv.port .. "\r\nConnection: close\r\n\r\n")
      expect_error(r, 405, "method_not_allowed")
      expect(r.headers.allow).to_match("GET")
    end
    -- malformed request lines and heads
    for _, bad in ipairs({ "GARBAGE\r\n\r\n", "GET /\r\n\r\n", "GET / HTTP/2.0\r\n\r\n",
                           "GET  / HTTP/1.1\r\n\r\n", "GET http://x/ HTTP/1.1\r\nHost: x\r\n\r\n",
                           "G\0T / HTTP/1.1\r\n\r\n", "GET / HTTP/1.1\rHost: x\r\n\r\n",
                           "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
                           "GET / HTTP/1.1\r\n\r\n",
                           "GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n",
                           "GET / HTTP/1.1\r\nHost : x\r\n\r\n",
                           "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
                           "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
                           "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
                           "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n",
                           "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n" }) do
      r = raw(srv, bad)
      expect_error(r, 400, "malformed_request")
    end
    expect_error(raw(srv, "POST / HTTP/1.1\r\nHost: x\r\nExpect: 103-later\r\nContent-Length: 2\r\n\r\nab"),
      417, "expectation_failed")
    -- the server still serves
    expect(send(srv, "GET", "/v1/capabilities").status).to_be(200)
    srv:shutdown()
  end, { timeout = 90 })
end)

-- A deterministic PRNG (xorshift), independent of math.random's state.
local function prng(seed)
  local x = seed ~ 0x2545F4914F6CDD1D
  if x == 0 then x = 1 end
  local rnd = {}
  function rnd.next()
    x = x ~ (x << 13)
    x = x ~ (x >> 7)
    x = x ~ (x << 17)
    return x
  end
  function rnd.int(n) return (rnd.next() >> 1) % n + 1 end -- 1..n
  function rnd.pick(t) return t[rnd.int(#t)] end
  function rnd.chance(p) return rnd.int(1000) <= p * 1000 end
  return rnd
end

describe("rig.serve: random requests", function()
  it("never answers 5xx and always answers JSON, whatever the id, path, method, headers and body", function()
    local seed = tonumber(os.getenv("SERVE_FUZZ_SEED") or "") or 161702
    local count = tonumber(os.getenv("SERVE_FUZZ_COUNT") or "") or 300
    local rnd = prng(seed)
    local srv = start{ max_body = 4096, max_headers = 8192 }
    local port = srv.port
    local real = { new_session(srv), new_session(srv, "gate me") }
    wait_event(srv, real[2], "PermissionRequested")

    local hex = "0123456789abcdef"
    local function uuid()
      local t = {}
      for i = 1, 36 do
        local k = rnd.int(16)
        t[i] = (i == 9 or i == 14 or i == 19 or i == 24) and "-" or hex:sub(k, k)
      end
      return table.concat(t)
    end
    local function junk(n, set)
      set = set or "abcXYZ019-._~%!$&'()*+,;=:@"
      local t = {}
      for i = 1, n do local k = rnd.int(#set) t[i] = set:sub(k, k) end
      return table.concat(t)
    end
    local function bytes(n)
      local t = {}
      for i = 1, n do t[i] = string.char(rnd.int(256) - 1) end
      return table.concat(t)
    end
    local function id()
      return rnd.pick({
        function() return rnd.pick(real) end, uuid, function() return uuid():upper() end,
        function() return "nonexistent" end, function() return "a.b" end, function() return ".." end,
        function() return "%2e%2e" end, function() return "%00" end, function() return "%ff%c3%28" end,
        function() return junk(rnd.int(80)) end, function() return uuid() .. junk(3) end,
        function() return "" end, function() return string.rep("9", rnd.int(300)) end,
      })()
    end
    local function query()
      if rnd.chance(0.5) then return "" end
      local parts = {}
      for _ = 1, rnd.int(3) do
        parts[#parts + 1] = rnd.pick({ "from", "limit", "skip", "x", junk(3) }) .. "=" ..
          rnd.pick({ "0", "1", "-1", "1000", "1001", "x", "", "99999999999999999999", "1e3", "%00",
                     tostring(rnd.next()) })
      end
      return "?" .. table.concat(parts, "&")
    end
    local ASSETS = { ["/"] = true, ["/console.js"] = true, ["/console.css"] = true, ["/metrics"] = true }
    local function path()
      local sid = id()
      local p = rnd.pick({
        "/v1/sessions/" .. sid .. "/input", "/v1/sessions/" .. sid .. "/status",
        "/v1/sessions/" .. sid .. "/journal", "/v1/sessions/" .. sid .. "/interrupt",
        "/v1/sessions/" .. sid .. "/restore", "/v1/sessions/" .. sid .. "/events",
        "/v1/sessions/" .. sid .. "/gates/" .. rnd.pick({ "g1", junk(rnd.int(70)), "%00", "" }),
        "/v1/sessions", "/v1/capabilities", "/v1/sessions/" .. sid, "/v1/sessions/" .. sid .. "/" .. junk(5),
        -- (no "." in these: the client would resolve "/." to "/", the console's page)
        "/" .. junk(rnd.int(20), "abcXYZ019-_~%!$&'()*+,;=:@"), "/v1/" .. junk(4) .. "/" .. junk(4), "//v1//sessions", "/v1/sessions/",
        "/console.map", "/v1/capabilities/",
      })
      return p, sid
    end
    local function json_text()
      return rnd.pick({
        '{"text":"' .. junk(rnd.int(40), "abc \\\"/u0123456789") .. '"}',
        '{"text":"\\ud800"}', '{"text":"\\udc00x"}', '{"text":' .. rnd.int(100) .. '}', '{"text":null}',
        '{"blocks":[{"type":"text","text":"hi"}]}', '{"blocks":[]}', '{"blocks":[{"type":"image"}]}',
        '{"blocks":' .. string.rep("[", 300) .. string.rep("]", 300) .. '}',
        '{"action":"' .. rnd.pick({ "approve", "approve_always", "deny", "maybe", "" }) .. '"}',
        '{"action":"approve","values":' .. rnd.pick({ "{}", "[]", "1", '{"a":[1,{"b":null}]}' }) .. '}',
        '{"' .. junk(5) .. '":1}', "[1,2,3]", "{}", "", "null", "1e400", '"str"', "{" .. junk(20),
        string.rep("[", 2000), '{"text":"x"}' .. junk(3), '{"text":"' .. string.rep("z", 5000) .. '"}',
      })
    end
    local function body(method)
      if method ~= "POST" and rnd.chance(0.8) then return nil end
      return rnd.pick({ json_text, json_text, json_text, function() return bytes(rnd.int(300)) end,
                        function() return nil end })()
    end
    local function headers(method)
      local h = {}
      h.host = rnd.chance(0.9) and rnd.pick({ "127.0.0.1:" .. port, "localhost:" .. port })
        or rnd.pick({ "attacker.example:" .. port, "127.0.0.1", junk(10), "[::1]:" .. port, "127.0.0.1:1" })
      if rnd.chance(0.15) then
        h.origin = rnd.pick({ "http://127.0.0.1:" .. port, "http://127.0.0.2:" .. port, "null", junk(8),
                              "http://localhost:" .. port, "https://x" })
      end
      if method == "POST" or rnd.chance(0.2) then
        if rnd.chance(0.85) then
          h["content-type"] = rnd.pick({ "application/json", "application/json; charset=utf-8",
                                         "APPLICATION/JSON;x=y" })
        elseif rnd.chance(0.7) then
          h["content-type"] = rnd.pick({ "text/plain", "", junk(12), "application/jso", ";" })
        end
      end
      if rnd.chance(0.2) then h["last-event-id"] = rnd.pick({ "0", "-1", "x", tostring(rnd.next()), "" }) end
      if rnd.chance(0.2) then h["idempotency-key"] = junk(rnd.pick({ 1, 10, 255, 256, 400 })) end
      if rnd.chance(0.1) then h.authorization = rnd.pick({ "Bearer " .. junk(20), "Basic x", junk(5) }) end
      if rnd.chance(0.2) then h["x-" .. junk(4, "abcdef")] = junk(rnd.int(100), "abc 123\t!~") end
      return h
    end

    local statuses = {}
    for i = 1, count do
      local method = rnd.pick({ "GET", "GET", "GET", "POST", "POST", "POST", "POST", "PUT", "DELETE",
                                "PATCH", "OPTIONS", "HEAD", "FOO", "M-SEARCH" })
      local p, sid = path()
      local q = query()
      local h = headers(method)
      local b = body(method)
      local stream = method == "GET" and p:find("/events$") and (sid == real[1] or sid == real[2])
      local what = ("request %d (seed %d): %s %s%s headers %s body %q"):format(i, seed, method, p, q,
        json.encode(h) or "?", b and b:sub(1, 80) or "(none)")
      if os.getenv("SERVE_FUZZ_TRACE") then io.stderr:write(what, "\n") end
      if stream then
        -- a live session's stream does not end: it must start as SSE or be refused as JSON
        local st, msg, code, resp = rig.http.stream{ url = srv.url .. p .. q, headers = h, timeout = 10 }
        if st then
          assert(st.status == 200 and st.headers["content-type"] == "text/event-stream", what)
          st:close()
        else
          assert(code == "status" and resp and resp.status < 500, what .. ": " .. tostring(msg))
          assert(type(json.decode(resp.body)) == "table", what .. ": not JSON: " .. resp.body:sub(1, 200))
        end
      elseif not ASSETS[p] or method ~= "GET" and method ~= "HEAD" then
        local resp, msg = rig.http.request{ url = srv.url .. p .. q, method = method, headers = h, body = b,
          timeout = 10 }
        assert(resp, what .. ": " .. tostring(msg))
        statuses[resp.status] = (statuses[resp.status] or 0) + 1
        assert(resp.status < 500, what .. ": status " .. resp.status .. " " .. resp.body:sub(1, 300))
        if method ~= "HEAD" then
          local v = json.decode(resp.body)
          assert(type(v) == "table", what .. ": not JSON: " .. resp.body:sub(1, 200))
          if resp.status >= 400 then
            assert(type(v.error) == "table" and type(v.error.code) == "string", what .. ": " .. resp.body)
          end
          assert(resp.headers["content-type"] == "application/json", what)
        end
      end
    end
    -- the run reached past the checks: some requests were served, some refused each way
    expect((statuses[200] or 0) + (statuses[201] or 0) > 0).to_be(true)
    for _, s in ipairs({ 400, 403, 404, 405, 415 }) do
      expect((statuses[s] or 0) > 0).to_be(true)
    end
    srv:shutdown()
  end, { timeout = 180 })
end)

describe("luarig serve --allow-host", function()
  it("adds a name the server answers to, and refuses a name with a port", function()
    local p = assert(rig.process.spawn{ argv = { luarig, "serve", rig_file, "--listen", "127.0.0.1:0",
      "--allow-host", "rig.test", "--allow-host=second.test" }, stdout = "null", stderr = "pipe" })
    local line = p:lines("stderr")()
    local url = assert(line and line:match("serving on (http://%S+)"), line)
    local port = url:match(":(%d+)$")
    local srv = { url = url, port = tonumber(port) }
    expect(send(srv, "GET", "/v1/capabilities", { host = "rig.test:" .. port }).status).to_be(200)
    expect(send(srv, "GET", "/v1/capabilities", { host = "second.test" }).status).to_be(200)
    expect_error(send(srv, "GET", "/v1/capabilities", { host = "third.test:" .. port }), 403,
      "host_not_allowed")
    p:kill("SIGTERM")
    p:wait(10)
    p:close()
    local r = assert(rig.process.run{ argv = { luarig, "serve", rig_file, "--allow-host", "rig.test:80" },
      timeout = 10 })
    expect(r.code).to_be(2)
    expect(r.stderr).to_match("%-%-allow%-host wants a host name without a port")
  end)
end)
