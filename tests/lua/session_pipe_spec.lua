-- sub:pipe (lua/session.c over host/session_pipe.c): a session subscription
-- forwarded to a streamed HTTP response as SSE frames in C, read by curl.
local core = require "rig.core"

local function ev(t, extra)
  return '{"v":1,"type":"' .. t .. '"' .. (extra or "") .. "}"
end

local function curl(url, max_time, extra)
  return rig.spawn(function()
    local argv = { "curl", "-s", "-N", "--max-time", tostring(max_time or 10), url }
    if extra then table.insert(argv, 2, extra) end
    return assert(rig.process.run{ argv = argv, timeout = 20, output_limit = 16 << 20 })
  end)
end

local function wait_for(f)
  local deadline = rig.now() + 10
  while not f() do
    if rig.now() > deadline then error("timed out") end
    rig.sleep(0.01)
  end
end

-- A server whose GET /e pipes a new subscription of s with opts; st records what happened.
local function serve(s, opts, st)
  return assert(rig.http.server{ listen = "127.0.0.1:0", routes = {
    ["GET /e"] = function(_, res)
      st.res = res
      st.sub = s:subscribe{ loops = "all", ephemeral = true }
      assert(res:start(200, { ["content-type"] = "text/event-stream" }))
      for _, e in ipairs(st.before or {}) do assert(s:emit(e[1], e[2])) end
      st.why, st.last = st.sub:pipe(res, opts)
      st.ended = true
      if not res:closed() then res:finish() end
    end,
  } })
end

describe("rig.session sub:pipe", function()
  it("sends the frames res:event would, skipping enduring seqs up to last", function()
    local s = assert(core.session_open(core.store_memory()))
    local st = { before = { { ev("A"), { type = "A", enduring = true } },    -- seq 2: skipped
                            { ev("B"), { type = "B", enduring = true } } } } -- seq 3
    local srv <close> = serve(s, { last = 2, heartbeat = 3600 }, st)
    local client = curl(srv.url .. "/e")
    wait_for(function() return st.sub end)
    rig.sleep(0.1)
    -- a body with raw line breaks is split into data lines as res:event splits them
    assert(s:emit('{"t":"a\r\nb\rc"}', { type = "C", loop_id = "assistant" }))
    assert(s:emit(ev("D"), { type = "D", enduring = true }))                -- seq 4
    assert(s:emit(ev("E"), { type = "E" }))
    rig.sleep(0.1)
    st.sub:close() -- the pipe ends: "closed"
    local out = client:wait(20)
    expect(out.stdout).to_be(
      "event: enduring\nid: 3\ndata: " .. ev("B") .. "\n\n" ..
      "event: ephemeral\ndata: {\"t\":\"a\ndata: b\ndata: c\"}\n\n" ..
      "event: enduring\nid: 4\ndata: " .. ev("D") .. "\n\n" ..
      "event: ephemeral\ndata: " .. ev("E") .. "\n\n")
    wait_for(function() return st.ended end)
    expect(st.why).to_be("closed")
    expect(st.last).to_be(4)
    s:close()
  end)

  it("frames without chunks for an HTTP/1.0 client, and a frame bigger than a send", function()
    local s = assert(core.session_open(core.store_memory()))
    local big = ev("Big", ',"x":"' .. string.rep("y", 3 << 20) .. '"')
    local st = {}
    local srv <close> = serve(s, {}, st)
    local client = curl(srv.url .. "/e", 10, "--http1.0")
    wait_for(function() return st.sub end)
    rig.sleep(0.05)
    assert(s:emit(ev("A"), { type = "A", enduring = true }))
    assert(s:emit(big, { type = "Big" }))
    assert(s:emit(ev("B"), { type = "B", enduring = true }))
    rig.sleep(0.2)
    st.sub:close()
    local out = client:wait(20).stdout
    local want = "event: enduring\nid: 2\ndata: " .. ev("A") .. "\n\n" ..
      "event: ephemeral\ndata: " .. big .. "\n\n" ..
      "event: enduring\nid: 3\ndata: " .. ev("B") .. "\n\n"
    expect(#out).to_be(#want)
    expect(out == want).to_be(true)
    s:close()
  end)

  it("ends with the last seq when the session closes", function()
    local s = assert(core.session_open(core.store_memory()))
    local st = {}
    local srv <close> = serve(s, { last = 0 }, st)
    local client = curl(srv.url .. "/e")
    wait_for(function() return st.sub end)
    rig.sleep(0.05)
    assert(s:emit(ev("A"), { type = "A", enduring = true }))
    rig.sleep(0.05)
    s:close()
    wait_for(function() return st.ended end)
    expect(st.why).to_be("closed")
    expect(st.last).to_be(2)
    expect(client:wait(20).stdout).to_be("event: enduring\nid: 2\ndata: " .. ev("A") .. "\n\n")
  end)

  it("pings when quiet", function()
    local s = assert(core.session_open(core.store_memory()))
    local st = {}
    local srv <close> = serve(s, { heartbeat = 0.1 }, st)
    local client = curl(srv.url .. "/e")
    wait_for(function() return st.sub end)
    rig.sleep(0.35)
    st.sub:close()
    expect(client:wait(20).stdout).to_match("^: ping\n\n: ping\n\n")
    s:close()
  end)

  it("stops when the client leaves, and the subscription is usable again", function()
    local s = assert(core.session_open(core.store_memory()))
    local st = {}
    local srv <close> = serve(s, {}, st)
    local client = curl(srv.url .. "/e", 0.3)
    client:wait(20)
    wait_for(function() return st.res and st.res:closed() end)
    rig.sleep(0.05)
    expect(st.ended).to_be_nil() -- the handler was cancelled in the pipe
    assert(s:emit(ev("A"), { type = "A", enduring = true }))
    expect(st.sub:next(1)).to_be(ev("A"))
    st.sub:close()
    s:close()
  end)

  it("raises on misuse", function()
    local s = assert(core.session_open(core.store_memory()))
    local errs = {}
    local srv <close> = assert(rig.http.server{ listen = "127.0.0.1:0", routes = {
      ["GET /e"] = function(_, res)
        local sub = s:subscribe{}
        errs.unstarted = select(2, pcall(sub.pipe, sub, res))
        res:start(200)
        errs.field = select(2, pcall(sub.pipe, sub, res, { lats = 1 }))
        errs.last = select(2, pcall(sub.pipe, sub, res, { last = -1 }))
        errs.beat = select(2, pcall(sub.pipe, sub, res, { heartbeat = 0 }))
        errs.res = select(2, pcall(sub.pipe, sub, {}))
        local writer = rig.spawn(function()
          rig.sleep(0.05)
          errs.write = select(2, pcall(res.write, res, "x"))
          errs.event = select(2, pcall(res.event, res, { data = "x" }))
          errs.twice = select(2, pcall(sub.pipe, sub, res))
          sub:close()
        end)
        errs.why = sub:pipe(res)
        writer:wait()
        res:finish()
      end,
    } })
    curl(srv.url .. "/e"):wait(20)
    expect(errs.unstarted).to_match("must be a started stream")
    expect(errs.field).to_match("unknown option 'lats'")
    expect(errs.last).to_match("'last'")
    expect(errs.beat).to_match("'heartbeat'")
    expect(errs.res).to_match("http response")
    expect(errs.write).to_match("another task is writing")
    expect(errs.event).to_match("another task is writing")
    expect(errs.twice).to_match("another task")
    expect(errs.why).to_be("closed")
    s:close()
  end)
end)
