-- rig.serve's flow routes over real HTTP: start a run, its status, journal
-- and events (SSE with resume), an interrupt answered over HTTP (also after
-- the server restarted on the same LMDB store), forks, the graph, and JSON
-- errors with 404 for unknown flows and runs.

local json = rig.json
local root = os.getenv("LUARIG_ROOT") or "."

local function tmpdir()
  local p = os.tmpname()
  os.remove(p)
  assert(os.execute("mkdir -p '" .. p .. "'"))
  return p
end

local function review()
  return rig.flow{
    name = "review",
    channels = { draft = "last", verdict = "last", log = "append" },
    vertices = {
      write = function(s) return { draft = "v1 of " .. tostring(s.draft), log = { "write" } } end,
      approve = function(s, ctx)
        local a = ctx:interrupt({ draft = s.draft })
        return { verdict = a, log = { "approve" } }
      end,
    },
    edges = { { from = "start", to = "write" }, { from = "write", to = "approve" } },
    input = { "draft" },
  }
end

local function serve(store)
  local r = rig.define{ loops = { rig.loop{ name = "a", model = rig.model.script{}, system = "x" } },
    primers = { "a" }, store = store }
  return assert(rig.serve{ rig = r, listen = "127.0.0.1:0", flows = { review() } })
end

local function call(srv, method, path, body)
  local h = {}
  if method == "POST" then h["content-type"] = "application/json" end
  local resp = assert(rig.http.request{ url = srv.url .. path, method = method, body = body,
    headers = h, timeout = 10 })
  return json.decode(resp.body), resp
end

local function expect_error(srv, method, path, body, status, code)
  local v, resp = call(srv, method, path, body)
  expect(resp.status).to_be(status)
  expect(resp.headers["content-type"]).to_be("application/json")
  expect(v.error.code).to_be(code)
  expect(type(v.error.message)).to_be("string")
  return v.error
end

local function wait_status(srv, id, want)
  local deadline = rig.now() + 10
  local v
  while rig.now() < deadline do
    v = call(srv, "GET", "/v1/flows/review/runs/" .. id .. "/status")
    if v.status == want then return v end
    rig.sleep(0.02)
  end
  error("run " .. id .. " did not reach " .. want .. " (last: " .. tostring(v and v.status) .. ")")
end

describe("rig.serve flow routes", function()
  it("lists flows and renders the graph with the run's step", function()
    local srv = serve(rig.store.memory())
    local v, resp = call(srv, "GET", "/v1/flows")
    expect(resp.status).to_be(200)
    expect(v.flows[1].name).to_be("review")
    expect(#v.flows[1].fingerprint).to_be(64)
    local run = call(srv, "POST", "/v1/flows/review/runs", '{"input":{"draft":"x"}}')
    wait_status(srv, run.run_id, "interrupted")
    local _, g = call(srv, "GET", "/v1/flows/review/graph?format=mermaid&run=" .. run.run_id)
    expect(g.status).to_be(200)
    expect(g.body).to_match("class approve current")
    local _, d = call(srv, "GET", "/v1/flows/review/graph?format=dot")
    expect(d.body).to_match('^digraph "review"')
    srv:close()
  end)

  it("starts a run, answers its interrupt and reports the output", function()
    local srv = serve(rig.store.memory())
    local v, resp = call(srv, "POST", "/v1/flows/review/runs", '{"input":{"draft":"doc"}}')
    expect(resp.status).to_be(201)
    local id = v.run_id
    local st = wait_status(srv, id, "interrupted")
    expect(st.live).to_be(true)
    expect(st.interrupts[1].vertex).to_be("approve")
    expect(st.interrupts[1].value.draft).to_be("v1 of doc")
    local a, ar = call(srv, "POST", "/v1/flows/review/runs/" .. id .. "/resume", '{"value":"ship it"}')
    expect(ar.status).to_be(202)
    expect(a.run_id).to_be(id)
    local done = wait_status(srv, id, "done")
    expect(done.output.verdict).to_be("ship it")
    expect(done.output.log[2]).to_be("approve")
    local list = call(srv, "GET", "/v1/flows/review/runs")
    expect(list.runs[1].id).to_be(id)
    local j = call(srv, "GET", "/v1/flows/review/runs/" .. id .. "/journal?from=1&limit=100")
    expect(j.done).to_be(true)
    local types = {}
    for _, e in ipairs(j.events) do types[#types + 1] = e.event.type end
    expect(table.concat(types, " ")).to_match("FlowStarted FlowStep FlowStep FlowInterrupt FlowAnswer FlowStep FlowDone$")
    srv:close()
  end)

  it("streams events and resumes the stream after a given seq", function()
    local srv = serve(rig.store.memory())
    local id = call(srv, "POST", "/v1/flows/review/runs", "{}").run_id
    wait_status(srv, id, "interrupted")
    local st = assert(rig.http.stream{ url = srv.url .. "/v1/flows/review/runs/" .. id .. "/events",
      idle_timeout = 30 })
    local seen = {}
    local resumed = false
    while true do
      local ev = assert(st:next())
      if ev.event == "enduring" then
        local e = json.decode(ev.data)
        seen[#seen + 1] = { id = tonumber(ev.id), type = e.type }
        if e.type == "FlowInterrupt" and not resumed then
          resumed = true
          call(srv, "POST", "/v1/flows/review/runs/" .. id .. "/resume", '{"value":"ok"}')
        end
        if e.type == "FlowDone" then break end
      end
    end
    st:close()
    for i = 2, #seen do expect(seen[i].id > seen[i - 1].id).to_be(true) end
    -- from the middle: only what follows
    local cut = seen[3].id
    local st2 = assert(rig.http.stream{ url = srv.url .. "/v1/flows/review/runs/" .. id .. "/events",
      headers = { ["last-event-id"] = tostring(cut) }, idle_timeout = 30 })
    local first = assert(st2:next())
    expect(tonumber(first.id)).to_be(seen[4].id)
    st2:close()
    srv:close()
  end)

  it("answers an interrupt after the server restarted on the same store (LMDB)", function()
    local dir = tmpdir()
    local id
    do
      local store = rig.store.lmdb{ root = dir }
      local srv = serve(store)
      id = call(srv, "POST", "/v1/flows/review/runs", '{"input":{"draft":"d"}}').run_id
      wait_status(srv, id, "interrupted")
      srv:close() -- lets go of the run's lease
    end
    local store = rig.store.lmdb{ root = dir }
    local srv = serve(store)
    local st = call(srv, "GET", "/v1/flows/review/runs/" .. id .. "/status")
    expect(st.status).to_be("interrupted")
    expect(st.live).to_be(false)
    local _, ar = call(srv, "POST", "/v1/flows/review/runs/" .. id .. "/resume", '{"value":"late"}')
    expect(ar.status).to_be(202)
    expect(wait_status(srv, id, "done").output.verdict).to_be("late")
    srv:close()
  end)

  it("forks a run from a checkpoint with a value changed", function()
    local srv = serve(rig.store.memory())
    local id = call(srv, "POST", "/v1/flows/review/runs", '{"input":{"draft":"a"}}').run_id
    wait_status(srv, id, "interrupted")
    local v, resp = call(srv, "POST", "/v1/flows/review/runs/" .. id .. "/fork",
      '{"at":0,"values":{"draft":"b"}}')
    expect(resp.status).to_be(201)
    expect(v.forked_from.run).to_be(id)
    local st = wait_status(srv, v.run_id, "interrupted")
    expect(st.interrupts[1].value.draft).to_be("v1 of b")
    expect(st.forked_from.step).to_be(0)
    expect_error(srv, "POST", "/v1/flows/review/runs/" .. id .. "/fork", '{"at":42}', 400, "invalid_request")
    srv:close()
  end)

  it("answers JSON errors: 404 for unknown flows and runs, 400 for bad bodies, 409 with no interrupt", function()
    local srv = serve(rig.store.memory())
    expect_error(srv, "GET", "/v1/flows/nope/runs", nil, 404, "flow_not_found")
    expect_error(srv, "POST", "/v1/flows/nope/runs", "{}", 404, "flow_not_found")
    expect_error(srv, "GET", "/v1/flows/review/runs/00000000-0000-4000-8000-000000000000/status", nil,
      404, "run_not_found")
    expect_error(srv, "GET", "/v1/flows/review/runs/not-an-id/events", nil, 404, "run_not_found")
    expect_error(srv, "POST", "/v1/flows/review/runs", "{nope", 400, "invalid_json")
    expect_error(srv, "POST", "/v1/flows/review/runs", '{"colour":1}', 400, "invalid_request")
    local e = expect_error(srv, "POST", "/v1/flows/review/runs", '{"input":{"verdict":"x"}}', 400,
      "invalid_request")
    expect(e.message).to_match("not an input")
    local id = call(srv, "POST", "/v1/flows/review/runs", "{}").run_id
    wait_status(srv, id, "interrupted")
    call(srv, "POST", "/v1/flows/review/runs/" .. id .. "/resume", '{"value":1}')
    wait_status(srv, id, "done")
    expect_error(srv, "POST", "/v1/flows/review/runs/" .. id .. "/resume", '{"value":2}', 409,
      "interrupt_not_open")
    expect_error(srv, "GET", "/v1/flows/review/graph?format=png", nil, 400, "invalid_request")
    srv:close()
  end)
end)
