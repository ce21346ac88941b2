-- GET /v1/sessions says a live session's live state, as /status does: the
-- catalog's state is written at turn edges (waiting_on_gate when a gate
-- opens, nothing when it is answered), so the console's sidebar said
-- waiting_on_gate (or idle) while the session ran. Issue 19 §6.

local json = rig.json

local release = rig.cond()
local released = false

local function rig_under_test()
  local function reply(req)
    local last = req.messages[#req.messages]
    if last.role == "tool" then return { text = "done" } end
    return { text = "", tool_calls = { { name = "slow", input = {} } } }
  end
  local steps = {}
  for i = 1, 20 do steps[i] = reply end
  local slow = rig.tool{ name = "slow", description = "waits until the case lets it go",
    schema = { type = "object", properties = {} },
    prepare = function() return { summary = "slow", requirements = {
      { kind = "network", match = "tcp://example.org:443" } } } end,
    run = function()
      while not released do release:wait() end
      return "ran"
    end }
  local gate = rig.gate{ access = { network = "gated" }, approver = "interactive" }
  local loop = rig.loop{ name = "a", model = rig.model.script(steps), tools = { slow }, gate = gate,
    policy_revision = "list-v1" }
  return rig.define{ loops = { loop }, primers = { "a" }, store = rig.store.memory() }
end

local function call(srv, method, path, body)
  local resp = assert(rig.http.request{ url = srv.url .. path, method = method, body = body,
    headers = body and { ["content-type"] = "application/json" } or nil, timeout = 10 })
  return json.decode(resp.body), resp
end

local function listed_state(srv, id)
  local v = call(srv, "GET", "/v1/sessions")
  for _, e in ipairs(v.sessions) do
    if e.id == id then return e.state end
  end
end

local function wait_for(what, f)
  local deadline = rig.now() + 10
  while rig.now() < deadline do
    local v = f()
    if v then return v end
    rig.sleep(0.02)
  end
  error("timed out waiting for " .. what)
end

describe("GET /v1/sessions", function()
  it("lists a live session's live state: waiting on its gate, then running once answered", function()
    local srv = assert(rig.serve{ rig = rig_under_test(), listen = "127.0.0.1:0" })
    local v = call(srv, "POST", "/v1/sessions", json.encode{ text = "go" })
    local id = v.session_id
    local gate = wait_for("the gate", function()
      local st = call(srv, "GET", "/v1/sessions/" .. id .. "/status")
      return st.open_gates[1] and st.open_gates[1].gate_id
    end)
    expect(listed_state(srv, id)).to_be("waiting_on_gate")
    local _, resp = call(srv, "POST", "/v1/sessions/" .. id .. "/gates/" .. gate, json.encode{ action = "approve" })
    expect(resp.status).to_be(202)
    -- the tool now runs (and waits): the catalog still says waiting_on_gate
    wait_for("the gate to close", function()
      local st = call(srv, "GET", "/v1/sessions/" .. id .. "/status")
      return #st.open_gates == 0 and st.state == "running"
    end)
    expect(listed_state(srv, id)).to_be("running")
    released = true
    release:signal()
    wait_for("the turn's end", function() return listed_state(srv, id) == "idle" end)
    expect(listed_state(srv, id)).to_be("idle")
    srv:close()
  end)
end)
