-- rig.http.server, exercised by a real client: curl(1) in a background
-- shell (io.popen would block the loop, and the server could not answer),
-- polled for its exit status with rig.sleep.
local cjson = require "cjson.safe"

local tmp = os.tmpname()
local seq = 0

local function read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

-- Starts `curl -s -S ARGS` in the background; returns a handle whose
-- :wait() yields curl's stdout, exit code and stderr.
local function curl_start(args, pipe)
  seq = seq + 1
  local base = tmp .. "." .. seq
  os.remove(base .. ".rc")
  os.execute(("(curl -s -S %s %s > %s.out 2> %s.err; echo $? > %s.rc.tmp; mv %s.rc.tmp %s.rc) &")
    :format(args, pipe or "", base, base, base, base, base))
  local h = {}
  function h.wait(_, limit)
    local deadline = rig.now() + (limit or 20)
    while rig.now() < deadline do
      local rc = read_file(base .. ".rc")
      if rc then
        local out, err = read_file(base .. ".out"), read_file(base .. ".err")
        os.remove(base .. ".rc"); os.remove(base .. ".out"); os.remove(base .. ".err")
        return out, tonumber(rc), err
      end
      rig.sleep(0.02)
    end
    error("curl " .. args .. " did not finish in time")
  end
  return h
end

local function curl(args, pipe)
  return curl_start(args, pipe):wait()
end

-- Splits `curl -i` output into status, lower-cased headers and body.
local function response(out)
  local head, body = out:match("^(.-)\r\n\r\n(.*)$")
  assert(head, "no header block in: " .. tostring(out))
  local status = tonumber(head:match("^HTTP/1%.%d (%d+)"))
  local headers = {}
  for line in head:gmatch("[^\r\n]+") do
    local k, v = line:match("^([^:]+):%s*(.*)$")
    if k then headers[k:lower()] = v end
  end
  return status, headers, body
end

local function get(url, extra)
  local out, rc, err = curl("-i " .. (extra or "") .. " '" .. url .. "'")
  assert(rc == 0, "curl failed: " .. tostring(err))
  return response(out)
end

local function rss_kib()
  local s = read_file("/proc/self/status") or ""
  return tonumber(s:match("VmRSS:%s*(%d+)")) or 0
end

local function wait_until(pred, limit)
  local deadline = rig.now() + (limit or 5)
  while not pred() do
    if rig.now() > deadline then return false end
    rig.sleep(0.01)
  end
  return true
end

describe("rig.http.server", function()
  it("routes requests with path params, query and headers", function()
    local seen
    local srv <close> = assert(rig.http.server{
      listen = "127.0.0.1:0",
      routes = {
        ["GET /hello/{name}"] = function(req)
          seen = req
          return { status = 200, json = { hi = req.params.name } }
        end,
        ["GET /items/new"] = function() return { body = "literal" } end,
        ["GET /items/{id}"] = function(req) return { body = "param " .. req.params.id } end,
        ["GET /files/*"] = function(req) return { body = req.params["*"] } end,
        ["GET /"] = function() return { body = "root" } end,
      },
    })
    expect(math.type(srv.port)).to_be("integer")
    expect(srv.url).to_be("http://127.0.0.1:" .. srv.port)

    local status, headers, body = get(srv.url .. "/hello/w%20x?a=1&b=two+words&c=%26", "-H 'X-Custom: Yes'")
    expect(status).to_be(200)
    expect(headers["content-type"]).to_be("application/json")
    expect(cjson.decode(body)).to_equal({ hi = "w x" })
    expect(seen.method).to_be("GET")
    expect(seen.path).to_be("/hello/w x")
    expect(seen.query).to_equal({ a = "1", b = "two words", c = "&" })
    expect(seen.headers["x-custom"]).to_be("Yes")
    expect(seen.body).to_be("")
    expect(seen.remote).to_match("^127%.0%.0%.1:%d+$")

    local _, _, b1 = get(srv.url .. "/items/new")
    expect(b1).to_be("literal")
    local _, _, b2 = get(srv.url .. "/items/42")
    expect(b2).to_be("param 42")
    local _, _, b3 = get(srv.url .. "/files/a/b%2Fc.txt")
    expect(b3).to_be("a/b/c.txt")
    local _, _, b4 = get(srv.url .. "/")
    expect(b4).to_be("root")
  end)

  it("answers 404 for unknown paths and 405 with Allow for wrong methods", function()
    local srv <close> = assert(rig.http.server{
      listen = "127.0.0.1:0",
      routes = {
        ["GET /thing"] = function() return { body = "get" } end,
        ["POST /thing"] = function() return { body = "post" } end,
      },
    })
    local status, headers, body = get(srv.url .. "/nothing")
    expect(status).to_be(404)
    expect(headers["content-type"]).to_be("application/json")
    expect(cjson.decode(body).error.code).to_be("not_found")

    status, headers, body = get(srv.url .. "/thing", "-X DELETE")
    expect(status).to_be(405)
    expect(headers["allow"]).to_be("GET, HEAD, POST")
    expect(cjson.decode(body).error.code).to_be("method_not_allowed")

    -- HEAD falls back to the GET route, without a body
    status, headers, body = get(srv.url .. "/thing", "-I")
    expect(status).to_be(200)
    expect(body).to_be("")
  end)

  it("round-trips JSON through req:json() and json = with rig.json ([] stays [], 1 stays 1)", function()
    local json = rig.json
    local seen
    local srv <close> = assert(rig.http.server{
      listen = "127.0.0.1:0",
      routes = {
        ["POST /echo"] = function(req)
          local v = assert(req:json())
          seen = { int = math.type(v.int), empty = json.is_array(v.empty), null = v.null == json.null }
          return { status = 200, json = v }
        end,
      },
    })
    -- keys in bytewise order, as rig.json writes them: the echo must be byte-identical
    local text = '{"big":9007199254740993,"empty":[],"float":1.5,"int":1,'
      .. '"nested":{"list":[1,2],"obj":{}},"null":null,"text":"\\u00e9 caf\\u00e9"}'
    local want = json.encode(assert(json.decode(text)))
    local resp = assert(rig.http.request{ url = srv.url .. "/echo", method = "POST", body = text,
      headers = { ["content-type"] = "application/json" }, timeout = 10 })
    expect(resp.status).to_be(200)
    expect(resp.body).to_be(want)
    expect(resp.body:find('"empty":[]', 1, true) ~= nil).to_be(true)
    expect(resp.body:find('"int":1,', 1, true) ~= nil).to_be(true)
    expect(resp.body:find('"big":9007199254740993', 1, true) ~= nil).to_be(true)
    expect(seen.int).to_be("integer")
    expect(seen.empty).to_be(true)
    expect(seen.null).to_be(true)
  end)

  it("takes JSON in and sends JSON out", function()
    local srv <close> = assert(rig.http.server{
      listen = "127.0.0.1:0",
      routes = {
        ["POST /json"] = function(req)
          local v, msg, code = req:json()
          if v == nil then return { status = 400, json = { code = code, message = msg } } end
          return { status = 201, json = { sum = v.a + v.b, echo = v } }
        end,
        ["POST /echo"] = function(req)
          return { status = 200, headers = { ["content-type"] = "text/plain" }, body = req.body }
        end,
      },
    })
    local status, headers, body = get(srv.url .. "/json", [[-H 'Content-Type: application/json' -d '{"a":2,"b":3}']])
    expect(status).to_be(201)
    expect(headers["content-type"]).to_be("application/json")
    expect(cjson.decode(body)).to_equal({ sum = 5, echo = { a = 2, b = 3 } })

    status, _, body = get(srv.url .. "/json", "-d '{broken'")
    expect(status).to_be(400)
    expect(cjson.decode(body).code).to_be("parse")

    status, _, body = get(srv.url .. "/json", "-X POST")
    expect(status).to_be(400)
    expect(cjson.decode(body).code).to_be("parse")

    local payload = ("0123456789abcdef"):rep(4096) .. "\0tail"
    local f = assert(io.open(tmp .. ".payload", "wb"))
    f:write(payload)
    f:close()
    status, headers, body = get(srv.url .. "/echo", "--data-binary @" .. tmp .. ".payload")
    os.remove(tmp .. ".payload")
    expect(status).to_be(200)
    expect(headers["content-type"]).to_be("text/plain")
    expect(#body).to_be(#payload)
    expect(body == payload).to_be(true)
  end)

  it("answers 413 for bodies over max_body, by Content-Length and by real size", function()
    local calls = 0
    local srv <close> = assert(rig.http.server{
      listen = "127.0.0.1:0",
      max_body = 100,
      routes = { ["POST /up"] = function(req) calls = calls + 1 return { body = tostring(#req.body) } end },
    })
    local status, _, body = get(srv.url .. "/up", "-d " .. ("x"):rep(100))
    expect(status).to_be(200)
    expect(body).to_be("100")
    status = get(srv.url .. "/up", "-d " .. ("x"):rep(101))
    expect(status).to_be(413)
    -- chunked: no Content-Length, the cap applies to what arrives
    status = get(srv.url .. "/up", "-H 'Transfer-Encoding: chunked' -d " .. ("y"):rep(5000))
    expect(status).to_be(413)
    expect(calls).to_be(1)
  end)

  it("turns a handler error into a 500 without internals and logs the traceback", function()
    local srv <close> = assert(rig.http.server{
      listen = "127.0.0.1:0",
      routes = {
        ["GET /boom"] = function() error("secret detail") end,
        ["GET /nothing"] = function() end,
        ["GET /split"] = function(req, res)
          res:start(200, { ["x-a"] = "v\r\nInjected: 1" })
        end,
      },
    })
    local logged = {}
    local real = io.stderr
    io.stderr = { write = function(_, s) logged[#logged + 1] = s end, flush = function() end }
    local ok, err = pcall(function()
      local status, headers, body = get(srv.url .. "/boom")
      expect(status).to_be(500)
      expect(headers["content-type"]).to_be("application/json")
      expect(body).to_be('{"error":{"code":"internal","message":"internal error","retryable":false}}')
      status = get(srv.url .. "/nothing")
      expect(status).to_be(500)
      status, headers = get(srv.url .. "/split")
      expect(status).to_be(500)
      expect(headers["injected"]).to_be_nil()
    end)
    io.stderr = real
    assert(ok, err)
    local log = table.concat(logged)
    expect(log).to_match("luarig: http: handler for 'GET /boom' failed: [^\n]*secret detail")
    expect(log).to_match("stack traceback:")
    expect(log).to_match("handler for 'GET /nothing' failed: it returned no response table")
    expect(log).to_match("handler for 'GET /split' failed: [^\n]*invalid header 'x%-a'")
  end)

  it("streams server-sent events that curl -N reads byte-exact", function()
    local srv <close> = assert(rig.http.server{
      listen = "127.0.0.1:0",
      routes = {
        ["GET /sse"] = function(req, res)
          assert(res:start(200, { ["content-type"] = "text/event-stream" }))
          assert(res:event{ event = "x", data = "line1\nline2", id = "7" })
          assert(res:comment("keepalive"))
          rig.sleep(0.05)
          assert(res:event{ data = "a\r\nb\rc", retry = 1500 })
          assert(res:event{ data = "" })
          assert(res:write("raw bytes"))
          -- returning without res:finish ends the stream
        end,
      },
    })
    local out, rc = curl("-N -D " .. tmp .. ".hdr '" .. srv.url .. "/sse'")
    local hdr = read_file(tmp .. ".hdr")
    os.remove(tmp .. ".hdr")
    expect(rc).to_be(0)
    expect(hdr).to_match("\r\ncontent%-type: text/event%-stream\r\n")
    expect(hdr).to_match("\r\nTransfer%-Encoding: chunked\r\n")
    expect(out).to_be("event: x\nid: 7\ndata: line1\ndata: line2\n\n" ..
                      ": keepalive\n\n" ..
                      "retry: 1500\ndata: a\ndata: b\ndata: c\n\n" ..
                      "data: \n\n" ..
                      "raw bytes")
  end)

  it("rejects bad event fields and misuse of the response", function()
    local errs = {}
    local srv <close> = assert(rig.http.server{
      listen = "127.0.0.1:0",
      routes = {
        ["GET /x"] = function(req, res)
          errs.before = select(2, pcall(res.write, res, "x"))
          res:start(200)
          errs.event = select(2, pcall(res.event, res, { event = "a\nb", data = "" }))
          errs.id = select(2, pcall(res.event, res, { id = "1\r", data = "" }))
          errs.field = select(2, pcall(res.event, res, { dta = "" }))
          errs.twice = select(2, pcall(res.start, res, 200))
          res:finish()
          errs.after = select(2, pcall(res.write, res, "x"))
        end,
      },
    })
    local status = get(srv.url .. "/x")
    expect(status).to_be(200)
    expect(errs.before).to_match("res:start must come first")
    expect(errs.event).to_match("'event' must be one line")
    expect(errs.id).to_match("'id' must be one line")
    expect(errs.field).to_match("unknown field 'dta'")
    expect(errs.twice).to_match("already started")
    expect(errs.after).to_match("already finished")
  end)

  it("makes a writer wait for a slow reader instead of buffering", function()
    local chunk = ("z"):rep(1 << 20)
    local total = 100
    local written, done = 0, false
    local srv <close> = assert(rig.http.server{
      listen = "127.0.0.1:0",
      routes = {
        ["GET /big"] = function(req, res)
          res:start(200, { ["content-type"] = "application/octet-stream" })
          for _ = 1, total do
            assert(res:write(chunk))
            written = written + 1
          end
          done = true
        end,
      },
    })
    collectgarbage()
    local rss0, lua0 = rss_kib(), collectgarbage("count")
    -- curl writes into a pipe nobody reads for 2 s: it stops reading the socket
    local h = curl_start("-N '" .. srv.url .. "/big'", "| (sleep 2; wc -c)")
    rig.sleep(1.2)
    local stalled_at = written
    local rss1, lua1 = rss_kib(), collectgarbage("count")
    expect(done).to_be(false)
    expect(stalled_at).at_most(40)                    -- MiB written while the reader slept
    expect(rss1 - rss0).at_most(80 * 1024)            -- KiB: far below the 100 MiB of the stream
    expect(lua1 - lua0).at_most(16 * 1024)
    local out, rc = h:wait(60)
    expect(rc).to_be(0)
    expect(tonumber(out)).to_be(total * #chunk)
    expect(wait_until(function() return done end)).to_be(true)
  end, { timeout = 90 })

  for _, mode in ipairs({ "writing", "idle after start", "idle before start" }) do
    it("cancels the handler when the client disconnects (" .. mode .. ")", function()
      local task, res_seen
      local srv <close> = assert(rig.http.server{
        listen = "127.0.0.1:0",
        routes = {
          ["GET /forever"] = function(req, res)
            task, res_seen = rig.current(), res
            if mode ~= "idle before start" then res:start(200, { ["content-type"] = "text/plain" }) end
            if mode == "writing" then
              while true do
                res:write(("w"):rep(4096))
                rig.sleep(0.005)
              end
            end
            rig.sleep(60)
          end,
        },
      })
      local _, rc = curl("-N --max-time 0.5 '" .. srv.url .. "/forever'")
      expect(rc).to_be(28) -- curl's own timeout: it hung up
      local t0 = rig.now()
      expect(wait_until(function() return task and task:status() == "cancelled" end, 3)).to_be(true)
      expect(rig.now() - t0).at_most(1.5)
      local a, b, c = task:wait()
      expect(a).to_be_nil()
      expect(c).to_be("cancelled")
      local ok, msg, code = res_seen:write("late")
      expect(ok).to_be_nil()
      expect(msg).to_be("closed")
      expect(code).to_be("closed")
      expect(res_seen:closed()).to_be(true)
    end)
  end

  it("drops the connection on res:abort", function()
    local srv <close> = assert(rig.http.server{
      listen = "127.0.0.1:0",
      routes = {
        ["GET /die"] = function(req, res)
          res:start(200)
          res:write("partial")
          rig.sleep(0.05)
          res:abort()
          local ok, msg = res:write("more")
          assert(ok == nil and msg == "closed")
        end,
      },
    })
    local out, rc = curl("-N '" .. srv.url .. "/die'")
    expect(out).to_be("partial")
    expect(rc ~= 0).to_be(true) -- the transfer ended before the last chunk
  end)

  it("close() cancels running handlers and releases the port", function()
    local task
    local srv = assert(rig.http.server{
      listen = "127.0.0.1:0",
      routes = { ["GET /wait"] = function() task = rig.current() rig.sleep(60) end },
    })
    local port = srv.port
    local h = curl_start("'" .. srv.url .. "/wait'")
    expect(wait_until(function() return task ~= nil end)).to_be(true)

    local again, msg, code = rig.http.server{ listen = "127.0.0.1:" .. port }
    expect(again).to_be_nil()
    expect(msg).to_match("cannot listen")
    expect(code).to_be("EADDRINUSE")

    srv:close()
    srv:close() -- idempotent
    expect(wait_until(function() return task:status() == "cancelled" end, 2)).to_be(true)
    local _, rc = h:wait()
    expect(rc ~= 0).to_be(true) -- the client saw the connection drop

    local srv2 <close> = assert(rig.http.server{
      listen = "127.0.0.1:" .. port,
      routes = { ["GET /"] = function() return { body = "second" } end },
    })
    expect(srv2.port).to_be(port)
    local _, _, body = get(srv2.url .. "/")
    expect(body).to_be("second")
    expect(tostring(srv)).to_match("closed")
  end)

  it("runs two servers in one process", function()
    local a <close> = assert(rig.http.server{
      listen = "127.0.0.1:0",
      routes = { ["GET /who"] = function() rig.sleep(0.2) return { body = "a" } end },
    })
    local b <close> = assert(rig.http.server{
      listen = "127.0.0.1:0",
      routes = { ["GET /who"] = function() rig.sleep(0.2) return { body = "b" } end },
    })
    expect(a.port ~= b.port).to_be(true)
    local ha = curl_start("'" .. a.url .. "/who'")
    local hb = curl_start("'" .. b.url .. "/who'")
    local t0 = rig.now()
    expect((ha:wait())).to_be("a")
    expect((hb:wait())).to_be("b")
    expect(rig.now() - t0).at_most(5)
  end)

  it("listens on IPv6 loopback", function()
    local srv, msg, code = rig.http.server{
      listen = "[::1]:0",
      routes = { ["GET /v6"] = function(req) return { body = req.remote } end },
    }
    if not srv and (code == "EADDRNOTAVAIL" or code == "EAFNOSUPPORT") then return end -- no IPv6 here
    assert(srv, msg)
    expect(srv.url).to_be("http://[::1]:" .. srv.port)
    local _, _, body = get(srv.url .. "/v6", "-g")
    expect(body).to_match("^%[::1%]:%d+$")
    srv:close()
  end)

  it("validates options and routes", function()
    expect(function() rig.http.server{ listen = "127.0.0.1:0", tiemout = 1 } end)
      .to_fail("rig.http.server: unknown option 'tiemout'")
    expect(function() rig.http.server{ listen = "127.0.0.1" } end).to_fail("bad listen address '127.0.0.1'")
    expect(function() rig.http.server{ listen = "127.0.0.1:99999" } end).to_fail("bad listen port")
    expect(function() rig.http.server{ listen = "no.such.host.invalid:0" } end)
      .to_fail("cannot resolve listen host 'no.such.host.invalid'")
    expect(function() rig.http.server{ listen = "127.0.0.1:0", routes = { ["/x"] = function() end } } end)
      .to_fail("bad route '/x'")
    expect(function() rig.http.server{ listen = "127.0.0.1:0", routes = { ["FETCH /x"] = function() end } } end)
      .to_fail("bad route 'FETCH /x'")
    expect(function() rig.http.server{ listen = "127.0.0.1:0", routes = { ["GET /a/*/b"] = function() end } } end)
      .to_fail("route 'GET /a/%*/b': '%*' must be the last segment")
    expect(function() rig.http.server{ listen = "127.0.0.1:0", routes = { ["GET /x"] = "nope" } } end)
      .to_fail("route 'GET /x': the handler must be a function")
    expect(function() rig.http.server{ listen = "127.0.0.1:0", max_body = -1 } end).to_fail("max_body")
  end)
end)

describe("rig.http.server connections", function()
  it("serves several requests on one keep-alive connection, streamed and whole", function()
    local n = 0
    local srv <close> = assert(rig.http.server{
      listen = "127.0.0.1:0",
      routes = {
        ["GET /n"] = function() n = n + 1 return { body = tostring(n) .. "\n" } end,
        ["GET /s"] = function(req, res)
          res:start(200)
          res:write("s\n")
        end,
      },
    })
    local out, rc, err = curl("-v '" .. srv.url .. "/n' '" .. srv.url .. "/s' '" .. srv.url .. "/n'")
    expect(rc).to_be(0)
    expect(out).to_be("1\ns\n2\n")
    expect(err).to_match("Re%-using existing connection")
  end)

  it("can be closed from inside its own handler", function()
    local srv
    srv = assert(rig.http.server{
      listen = "127.0.0.1:0",
      routes = { ["GET /stop"] = function() srv:close() return { body = "bye" } end },
    })
    local _, rc = curl("'" .. srv.url .. "/stop'")
    expect(rc ~= 0).to_be(true) -- the connection went down with the server
    expect(tostring(srv)).to_match("closed")
  end)
end)

-- Sends bytes on a connection of its own (python: rig has no raw TCP client)
-- and returns what the server sent until it closed.
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
  return r.stdout
end

describe("rig.http.server's own HTTP layer", function()
  it("answers what it refuses itself as JSON, counts it, and never calls a handler", function()
    local calls = 0
    local srv <close> = assert(rig.http.server{
      listen = "127.0.0.1:0", max_body = 100, max_headers = 2048,
      routes = { ["POST /up"] = function() calls = calls + 1 return { body = "ok" } end },
    })
    local cases = {
      { "BREW /pot HTCPCP/1.0\r\n\r\n", 400, "malformed_request" },
      { "POST /up HTTP/1.1\r\nHost: x\r\n" .. ("X-Pad: " .. ("p"):rep(100) .. "\r\n"):rep(30) .. "\r\n",
        431, "headers_too_large" },
      { "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 101\r\n\r\n" .. ("x"):rep(101), 413,
        "body_too_large" },
      { "POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n40\r\n" .. ("y"):rep(64) ..
        "\r\n40\r\n" .. ("y"):rep(64) .. "\r\n0\r\n\r\n", 413, "body_too_large" },
      { "POST /up HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\nContent-Length: 1\r\n\r\nx", 417,
        "expectation_failed" },
    }
    for _, c in ipairs(cases) do
      local out = raw(srv, c[1])
      local status = tonumber(out:match("^HTTP/1%.1 (%d+) "))
      expect(status).to_be(c[2])
      expect(out:lower()).to_match("\r\ncontent%-type: application/json\r\n")
      expect(out:lower()).to_match("\r\nconnection: close\r\n")
      local v = cjson.decode(out:match("\r\n\r\n(.*)$"))
      expect(v.error.code).to_be(c[3])
      expect(v.error.retryable).to_be(false)
    end
    expect(calls).to_be(0)
    local n = srv:refusals()
    expect(n).to_equal({ malformed_request = 1, headers_too_large = 1, body_too_large = 2,
                         expectation_failed = 1 })
    -- within the caps, chunked and by length, the handler runs
    local out = raw(srv, "POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" ..
      "3\r\nabc\r\n0\r\nX-Trailer: t\r\n\r\n")
    expect(out).to_match("^HTTP/1%.1 200 OK\r\n")
    expect(calls).to_be(1)
  end)

  it("answers pipelined requests in order, a HEAD stream by its head, then goes on", function()
    local ended = {}
    local srv <close> = assert(rig.http.server{
      listen = "127.0.0.1:0",
      routes = {
        ["GET /n/{x}"] = function(req) rig.sleep(0.02 * (3 - #req.params.x)) return { body = req.params.x } end,
        -- ticks n times (default: for ever, nearly); a HEAD's stream is over once its head is out
        ["GET /stream"] = function(req, res)
          ended[req.method .. " task"] = rig.current()
          res:start(200, { ["content-type"] = "text/event-stream" })
          for _ = 1, tonumber(req.query.n or "100000") do
            if not res:event{ data = "tick" } then
              ended[#ended + 1] = req.method .. " closed"
              return
            end
            rig.sleep(0.01)
          end
          ended[#ended + 1] = req.method .. " done"
        end,
        ["POST /echo"] = function(req) return { body = req.body } end,
      },
    })
    local out = raw(srv, "GET /n/a HTTP/1.1\r\nHost: x\r\n\r\n" ..
      "HEAD /stream HTTP/1.1\r\nHost: x\r\n\r\n" ..
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello" ..
      "GET /n/bb HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    local statuses, bodies = {}, {}
    for s in out:gmatch("HTTP/1%.1 (%d+) ") do statuses[#statuses + 1] = tonumber(s) end
    expect(statuses).to_equal({ 200, 200, 200, 200 })
    expect(out).to_match("\r\n\r\na.-HTTP/1%.1 200 OK.-text/event%-stream.-\r\n\r\nHTTP/1%.1 200 OK.-\r\n\r\nhello" ..
      "HTTP/1%.1 200 OK.-\r\n\r\nbb$")
    expect(out:find("tick", 1, true)).to_be_nil()
    -- its handler is told as if the client had left: cancelled
    local head = ended["HEAD task"]
    expect(wait_until(function() return head:status() == "cancelled" end)).to_be(true)
    -- HTTP/1.0: whole answers keep the connection when asked to, streams end it
    out = raw(srv, "GET /n/c HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /stream?n=2 HTTP/1.0\r\n\r\n")
    expect(out).to_match("^HTTP/1%.1 200 OK\r\n.-Connection: keep%-alive\r\n\r\ncHTTP/1%.1 200 OK\r\n")
    expect(out).to_match("Connection: close\r\n\r\ndata: tick\n\ndata: tick\n\n$")
    expect(ended[1]).to_be("GET done")
  end)

  it("runs before ahead of every route: its answer goes out instead, nil lets the request on", function()
    local seen = {}
    local srv <close> = assert(rig.http.server{
      listen = "127.0.0.1:0",
      before = function(req)
        seen[#seen + 1] = req.method .. " " .. req.path
        if req.headers["x-no"] then return { status = 403, json = { error = { code = "no" } } } end
        if req.headers["x-boom"] then error("before failed on purpose") end
      end,
      routes = { ["GET /a"] = function() return { body = "a" } end },
    })
    local status, _, body = get(srv.url .. "/a")
    expect(status).to_be(200)
    expect(body).to_be("a")
    status, _, body = get(srv.url .. "/a", "-H 'X-No: 1'")
    expect(status).to_be(403)
    expect(cjson.decode(body).error.code).to_be("no")
    status = get(srv.url .. "/nothing", "-X FOO -H 'X-No: 1'")
    expect(status).to_be(403)
    local real = io.stderr
    io.stderr = { write = function() end, flush = function() end }
    status = get(srv.url .. "/a", "-H 'X-Boom: 1'")
    io.stderr = real
    expect(status).to_be(500)
    expect(seen).to_equal({ "GET /a", "GET /a", "FOO /nothing", "GET /a" })
    expect(function() rig.http.server{ listen = "127.0.0.1:0", before = 1 } end)
      .to_fail("option 'before' must be a function")
  end)

  it("keeps the framing fields to itself", function()
    local srv <close> = assert(rig.http.server{
      listen = "127.0.0.1:0",
      routes = { ["GET /x"] = function() return { headers = { ["content-length"] = "1" }, body = "abc" } end },
    })
    local real, logged = io.stderr, {}
    io.stderr = { write = function(_, s) logged[#logged + 1] = s end, flush = function() end }
    local status = get(srv.url .. "/x")
    io.stderr = real
    expect(status).to_be(500)
    expect(table.concat(logged)).to_match("a framing field the server writes itself")
  end)
end)
