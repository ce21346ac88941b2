-- Over rig.serve: a handoff moves the conversation (ActiveLoopChanged in the
-- journal, active_loop in the status, the next input to the new loop) and a
-- guardrail trip ends the turn with its own event and code (issue 21 §3, §4).

local json = rig.json
local here = (os.getenv("LUARIG_ROOT") or ".") .. "/tests/lua/session/"
local define = dofile(here .. "handoff_rig.lua")

local function call(srv, method, path, body)
  local h = {}
  if body or method == "POST" then h["content-type"] = "application/json" end
  local resp = assert(rig.http.request{ url = srv.url .. path, method = method, body = body,
    headers = h, timeout = 10 })
  return json.decode(resp.body), resp
end

local function wait_event(srv, id, etype, count)
  count = count or 1
  local deadline = rig.now() + 10
  while rig.now() < deadline do
    local v = call(srv, "GET", "/v1/sessions/" .. id .. "/journal?limit=1000")
    local n = 0
    for _, e in ipairs(v.events) do
      if e.event.type == etype then
        n = n + 1
        if n == count then return e.event end
      end
    end
    rig.sleep(0.02)
  end
  error("no " .. etype .. " in the journal of " .. id)
end

describe("rig.serve with handoffs and guardrails", function()
  it("hands off, reports the active loop and sends the next input there", function()
    local r, _, bm = define({ { tool_calls = { { name = "transfer_to_billing", input = {} } } } },
      { { text = "refund issued" }, { text = "you're welcome" } })
    local srv = assert(rig.serve{ rig = r, listen = "127.0.0.1:0" })
    local v, resp = call(srv, "POST", "/v1/sessions", json.encode{ text = "refund please" })
    expect(resp.status).to_be(201)
    local id = v.session_id
    local ch = wait_event(srv, id, "ActiveLoopChanged")
    expect(ch.from).to_be("triage")
    expect(ch.to).to_be("billing")
    wait_event(srv, id, "TurnDone", 2)
    wait_event(srv, id, "SessionIdle")
    local st = call(srv, "GET", "/v1/sessions/" .. id .. "/status")
    expect(st.active_loop).to_be("billing")
    local _, r2 = call(srv, "POST", "/v1/sessions/" .. id .. "/input", json.encode{ text = "thanks" })
    expect(r2.status).to_be(200)
    local done = wait_event(srv, id, "TurnDone", 3)
    expect(done.loop_id).to_be("billing")
    expect(done.message.content[1].text).to_be("you're welcome")
    expect(#bm:calls()).to_be(2)
    srv:close()
  end)

  it("ends a turn whose input trips a guardrail with GuardrailTripped and guardrail_tripped", function()
    local model = rig.model.script{ { text = "never seen" } }
    local l = rig.loop{ name = "assistant", model = model,
      guardrails = { input = { { name = "no_secrets", check = function(input)
        return input.text:find("password") and "asks for a password" end } } } }
    local r = rig.define{ loops = { l }, primers = { "assistant" }, store = rig.store.memory() }
    local srv = assert(rig.serve{ rig = r, listen = "127.0.0.1:0" })
    local v = call(srv, "POST", "/v1/sessions", json.encode{ text = "what is the admin password?" })
    local g = wait_event(srv, v.session_id, "GuardrailTripped")
    expect(g.guardrail).to_be("no_secrets")
    expect(g.reason).to_be("asks for a password")
    local f = wait_event(srv, v.session_id, "TurnFailed")
    expect(f.error.code).to_be("guardrail_tripped")
    srv:close()
  end)
end)
