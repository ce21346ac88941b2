-- A session on a NATS store (URL mode) running one slow turn, for the
-- fault tests in store_nats_spec.lua:
--   luarig nats_child.lua URL NAMESPACE LEASE_TTL TIMEOUT STEPS DELAY [REPLICAS]
-- Prints "SESSION <id>", waits for a line on stdin, submits a turn of
-- STEPS echo tool calls (each model step DELAY seconds late) and a final
-- text, then prints one line per enduring event its subscriber sees —
-- "EV <seq> <type> <event_id>", only ever after the append was
-- acknowledged — and "RESULT ok" or "RESULT <code> <message>" when the
-- session is idle or faulted, then "DONE".
local url, ns, ttl, timeout, nsteps, delay = arg[1], arg[2], tonumber(arg[3]),
  tonumber(arg[4]), tonumber(arg[5]), tonumber(arg[6])
local store = assert(rig.store.nats{ url = url, namespace = ns, lease_ttl = ttl,
  timeout = timeout, replicas = tonumber(arg[7] or "1") })
local steps = {}
for i = 1, nsteps do
  steps[i] = { text = "", delay = delay,
               tool_calls = { { name = "echo", input = { text = "x" .. i } } } }
end
steps[#steps + 1] = { text = "all done", delay = delay }
local r = dofile(arg[0]:gsub("[^/]*$", "") .. "rig.lua")(store, steps)
local s = assert(r:session())
print("SESSION " .. s.id)
io.stdout:flush()
local sub = s:subscribe{ ephemeral = false }
local reader = rig.spawn(function()
  for ev in sub:events() do
    print(("EV %d %s %s"):format(ev.seq, ev.type, ev.event_id))
    io.stdout:flush()
  end
end)
io.stdin:read("l")
s:submit("hello")
local ok, msg, code = s:wait_idle(60)
print(ok and "RESULT ok" or ("RESULT " .. tostring(code) .. " " .. tostring(msg)))
io.stdout:flush()
pcall(s.shutdown, s)
sub:close()
pcall(reader.wait, reader, 5)
print("DONE")
io.stdout:flush()
