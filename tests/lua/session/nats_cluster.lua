-- A nats-server cluster on loopback for the tests (tests/lua/store_nats_cluster_spec.lua)
-- and the soak storms (tests/soak/storm.lua):
--   local cluster = dofile(".../nats_cluster.lua")
--   local c = cluster.start(dir, 3, { host = "0.0.0.0" })  -- c.url: every node's, comma-separated
--   c:kill(i [, signal]); c:up(i); c:leader(stream) -> i; c:healthy(timeout) -> bool; c:stop()
-- Each node: JetStream storing in dir/n<i>, its client port on host (default
-- 127.0.0.1; "0.0.0.0" to be reached from another network namespace), its
-- route port on 127.0.0.1, its monitoring port (for /healthz) on 127.0.0.1, its log in dir/n<i>/server.log. With one node
-- there is no cluster block (a single server).
local M = {}
local C = {}
C.__index = C

local function free_port()
  -- a port the kernel just gave out and took back
  local r = assert(rig.process.run{ argv = { "python3", "-c",
    "import socket;s=socket.socket();s.bind(('127.0.0.1',0));print(s.getsockname()[1])" } })
  return assert(tonumber(r.stdout:match("%d+")))
end

local function listening(port)
  local r = rig.process.run{ argv = { "python3", "-c",
    ("import socket;socket.create_connection(('127.0.0.1',%d),0.5).close()"):format(port) } }
  return r and r.code == 0
end

function M.start(dir, n, opts)
  opts = opts or {}
  local c = setmetatable({ dir = dir, nodes = {}, host = opts.host or "127.0.0.1" }, C)
  for i = 1, n do
    c.nodes[i] = { name = "n" .. i, port = free_port(), cport = n > 1 and free_port() or nil,
                   hport = free_port() }
  end
  local urls = {}
  for i = 1, n do urls[i] = "nats://127.0.0.1:" .. c.nodes[i].port end
  c.url = table.concat(urls, ",")
  for i = 1, n do c:up(i) end
  return c
end

-- The URL list with another host (how a process in another namespace reaches them).
function C:url_via(host)
  local urls = {}
  for i, node in ipairs(self.nodes) do urls[i] = "nats://" .. host .. ":" .. node.port end
  return table.concat(urls, ",")
end

function C:up(i)
  local node = self.nodes[i]
  local d = self.dir .. "/" .. node.name
  assert(os.execute("mkdir -p '" .. d .. "'"))
  local f = assert(io.open(d .. "/server.conf", "w"))
  f:write(('server_name: %s\nlisten: "%s:%d"\nmax_payload: 8MB\nhttp: "127.0.0.1:%d"\n')
    :format(node.name, self.host, node.port, node.hport))
  f:write(('jetstream { store_dir: "%s/js" }\n'):format(d))
  if node.cport then
    local routes = {}
    for _, o in ipairs(self.nodes) do
      if o ~= node then routes[#routes + 1] = ('"nats-route://127.0.0.1:%d"'):format(o.cport) end
    end
    f:write(('cluster { name: lrtest, listen: "127.0.0.1:%d", routes: [%s] }\n')
      :format(node.cport, table.concat(routes, ", ")))
  end
  f:close()
  node.p = assert(rig.process.spawn{ argv = { "nats-server", "-c", d .. "/server.conf",
    "-l", d .. "/server.log" }, stdout = "null", stderr = "null" })
  for _ = 1, 600 do
    if listening(node.port) then return end
    rig.sleep(0.05)
  end
  error("nats-server " .. node.name .. " did not start (see " .. d .. "/server.log)")
end

function C:kill(i, sig)
  local node = self.nodes[i]
  if not node.p then return end
  node.p:kill(sig or "SIGKILL")
  node.p:wait(10)
  node.p:close()
  node.p = nil
end

function C:stop()
  for i = 1, #self.nodes do self:kill(i, "SIGTERM") end
end

-- Waits until every node answers its /healthz with "ok" (JetStream up, in
-- contact with the meta leader, its streams current): a node just restarted
-- has rejoined and caught up. False when `timeout` seconds pass first.
function C:healthy(timeout)
  local deadline = rig.now() + (timeout or 60)
  for _, node in ipairs(self.nodes) do
    while true do
      local r = node.p and rig.http.request{ url = ("http://127.0.0.1:%d/healthz"):format(node.hport),
        timeout = 2 }
      if r and r.status == 200 and r.body:find('"ok"', 1, true) then break end
      if rig.now() > deadline then return false end
      rig.sleep(0.1)
    end
  end
  return true
end

-- The node that last became the leader of stream (a node logs its own election).
function C:leader(stream)
  local best, at
  local pat = "new stream leader for '%$G > " .. stream:gsub("%p", "%%%0") .. "'"
  for i, node in ipairs(self.nodes) do
    local f = io.open(self.dir .. "/" .. node.name .. "/server.log")
    if f then
      for line in f:lines() do
        if line:find(pat) then
          local t = line:match("(%d%d%d%d/%d%d/%d%d %d%d:%d%d:%d%d%.%d+)")
          if t and (not at or t > at) then best, at = i, t end
        end
      end
      f:close()
    end
  end
  return best
end

return M
