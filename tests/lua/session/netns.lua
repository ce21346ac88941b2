-- A network namespace joined to this one by a veth pair, for partition
-- tests (tests/lua/store_nats_cluster_spec.lua, tests/soak/storm.lua):
--   local netns = dofile(".../netns.lua")
--   local n, why = netns.new()      -- nil and a reason without root or ip
--   n.prefix  -- argv prefix running a program inside: { "ip", "netns", "exec", name }
--   n.host    -- this side's address, which the inside reaches this host at
--   n:cut()   -- this side's end down: every packet either way is dropped,
--               connections inside stay open and retransmit (a partition)
--   n:heal()  -- back up: held data flows again
--   n:sockets() -- TCP sockets inside not yet closed for good (0: everything
--               it sent was delivered or given up; TIME-WAIT counts as closed)
--   n:unsent()  -- bytes sent inside that the other end has not acknowledged
--   n:close()
-- netem (a delay instead of a cut) is not available everywhere; a cut is.
local M = {}
local N = {}
N.__index = N

local function sh(cmd)
  local r = rig.process.run{ argv = { "sh", "-c", cmd .. " 2>&1" } }
  return r and r.code == 0, r and r.stdout or ""
end

function M.new()
  if not sh("command -v ip >/dev/null") then return nil, "ip (iproute2) is not installed" end
  local id = ("%06d"):format(math.random(0, 999999))
  -- a /30 no other namespace of ours uses now (tests and make soak may run at once)
  local _, addrs = sh("ip -4 -o addr show")
  local k
  for _ = 1, 1000 do
    k = math.random(0, 255)
    if not addrs:find(("10.213.%d."):format(k), 1, true) then break end
  end
  local n = setmetatable({ name = "lrns" .. id, a = "lra" .. id, b = "lrb" .. id,
    host = ("10.213.%d.1"):format(k), inside = ("10.213.%d.2"):format(k) }, N)
  local ok, out = sh("ip netns add " .. n.name)
  if not ok then return nil, "cannot make a network namespace: " .. out:gsub("%s+$", "") end
  n.prefix = { "ip", "netns", "exec", n.name }
  local x = "ip netns exec " .. n.name .. " "
  for _, cmd in ipairs{
    "ip link add " .. n.a .. " type veth peer name " .. n.b,
    "ip link set " .. n.b .. " netns " .. n.name,
    "ip addr add " .. n.host .. "/30 dev " .. n.a,
    "ip link set " .. n.a .. " up",
    x .. "ip addr add " .. n.inside .. "/30 dev " .. n.b,
    x .. "ip link set " .. n.b .. " up",
    x .. "ip link set lo up",
  } do
    ok, out = sh(cmd)
    if not ok then
      n:close()
      return nil, cmd .. ": " .. out:gsub("%s+$", "")
    end
  end
  return n
end

function N:cut() assert(sh("ip link set " .. self.a .. " down")) end
function N:heal() assert(sh("ip link set " .. self.a .. " up")) end

function N:sockets()
  local _, out = sh("ip netns exec " .. self.name .. " ss -tanH")
  local k = 0
  for line in out:gmatch("[^\n]+") do
    -- TIME-WAIT: closed, everything sent acknowledged
    if not line:match("^LISTEN") and not line:match("^TIME%-WAIT") then k = k + 1 end
  end
  return k
end

-- bytes sent inside and not yet acknowledged by the other end (all sockets)
function N:unsent()
  local _, out = sh("ip netns exec " .. self.name .. " ss -tanH")
  local k = 0
  for line in out:gmatch("[^\n]+") do
    local q = line:match("^%S+%s+%d+%s+(%d+)")
    if q then k = k + tonumber(q) end
  end
  return k
end

function N:close()
  sh("ip link del " .. self.a)
  sh("ip netns del " .. self.name)
end

return M
