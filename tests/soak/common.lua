-- What the soak storms' processes share: opening a store from a spec
-- string, the rig every process defines (the same loops and policy, so one
-- restores what another wrote), and the lines they print.
--
-- A spec is "lmdb:<dir>" or "nats:<url>|<namespace>|<lease ttl>|<timeout>[|<replicas>]"
-- (the url may list several servers, comma-separated: a cluster).
local C = {}

function C.open(spec)
  local kind, rest = spec:match("^(%w+):(.*)$")
  if kind == "lmdb" then return assert(rig.store.lmdb{ root = rest }) end
  local url, ns, ttl, timeout, replicas = rest:match("^([^|]*)|([^|]*)|([^|]*)|([^|]*)|?(%d*)$")
  assert(kind == "nats" and url, "bad store spec " .. spec)
  local opts = { url = url, namespace = ns, lease_ttl = tonumber(ttl), timeout = tonumber(timeout),
                 replicas = tonumber(replicas) }
  local s, msg, code
  for _ = 1, 100 do -- a server just restarted may refuse for a moment
    s, msg, code = rig.store.nats(opts)
    if s then return s end
    rig.sleep(0.1)
  end
  error("cannot open " .. spec .. ": " .. tostring(code) .. " " .. tostring(msg))
end

local function has_tool_result(msg)
  for _, b in ipairs(msg and type(msg.content) == "table" and msg.content or {}) do
    if b.type == "tool_result" then return true end
  end
  return msg and msg.role == "tool"
end

-- The model: every user turn is one echo tool call (streamed arguments)
-- and then a streamed text answer; small delays so a kill lands anywhere.
local function step(req)
  local last = req.messages[#req.messages]
  if has_tool_result(last) then
    return { text = string.rep("soak ", 24), chunk = 8, chunk_delay = 0.004 }
  end
  return { text = "", delay = 0.01, chunk = 6, chunk_delay = 0.003,
           tool_calls = { { name = "echo", input = { text = "soak" } } } }
end

function C.rig(store)
  local steps = {}
  for i = 1, 100000 do steps[i] = step end
  local model = rig.model.script(steps)
  local echo = rig.tool{ name = "echo", description = "echoes",
    schema = { type = "object", properties = { text = { type = "string" } }, required = { "text" } },
    prepare = function(a) return { summary = "echo " .. a.text, requirements = {} } end,
    run = function(req) rig.sleep(0.01) return "echoed " .. req.summary end }
  local gate = rig.gate{ access = { ["filesystem.read"] = "allow", ["filesystem.write"] = "deny",
    network = "deny", ["command.execute"] = "allow" }, approver = "interactive" }
  local loop = rig.loop{ name = "assistant", model = model, system = "soak",
    tools = { echo }, gate = gate, policy_revision = "soak-v1" }
  return rig.define{ loops = { loop }, primers = { "assistant" }, store = store }
end

-- Restores id, retrying while a dead holder's lease lives (NATS: its TTL)
-- and, for up to a minute, while the store is unreachable (a cluster
-- electing a leader): what a user would do.
local transient = { held = true, network = true, timeout = true, unavailable = true }
function C.restore(r, id)
  local s, msg, code
  local deadline = rig.now() + 60
  repeat
    s, msg, code = r:restore(id)
    if s or not transient[code] then break end
    rig.sleep(0.05)
  until rig.now() > deadline
  return s, msg, code
end

function C.say(fmt, ...)
  io.stdout:write(fmt:format(...), "\n")
  io.stdout:flush()
end

-- Prints "EV <session> <seq> <type> <event id>" for every enduring event
-- of s (delivered only once its append was acknowledged).
function C.watch(s)
  local sub = s:subscribe{ ephemeral = false }
  rig.spawn(function()
    for ev in sub:events() do
      C.say("EV %s %d %s %s", s.id, ev.seq, ev.type, ev.event_id)
    end
  end)
  return sub
end

return C
