-- rig.core sessions (docs/design/sessions.md): emit and subscribe, the fault
-- latch, overflow, conditions, journal_read, the catalog, held leases, close.
local core = require "rig.core"

local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  assert(os.execute("mkdir -p " .. d))
  return d
end

local function lit(s) return (s:gsub("%p", "%%%0")) end

local function ev(t, extra)
  return '{"v":1,"type":"' .. t .. '"' .. (extra or "") .. "}"
end

describe("rig.core sessions", function()
  it("opens a new session with its fence and emits in order", function()
    local store = core.store_memory()
    local s = assert(core.session_open(store))
    expect(s.id).to_match("^%x+%-%x+%-4%x+%-%x+%-%x+$")
    expect(s:epoch()).at_least(1)
    expect(s:tip()).to_be(1)
    local sub = s:subscribe{ loops = "all", ephemeral = true }
    local dur = s:subscribe{ ephemeral = false }
    expect(s:emit(ev("TurnStarted"), { type = "TurnStarted", enduring = true, wait = false })).to_be(true)
    expect(s:emit(ev("TokenDelta"), { type = "TokenDelta", loop_id = "assistant" })).to_be(true)
    expect(s:emit('{"type":"Cmd"}', { type = "Cmd", kind = "command", id = "c1" })).to_be(3)
    expect(s:emit(ev("StepDone"), { type = "StepDone", enduring = true, id = "e3" })).to_be(4)
    -- the same id and bytes again: the original seq, not delivered twice
    expect(s:emit(ev("StepDone"), { type = "StepDone", enduring = true, id = "e3" })).to_be(4)
    local j, seq = sub:next(1)
    expect(j).to_be(ev("TurnStarted")); expect(seq).to_be(2)
    j, seq = sub:next(1)
    expect(j).to_be(ev("TokenDelta")); expect(seq).to_be_nil()
    j, seq = sub:next(1)
    expect(j).to_be(ev("StepDone")); expect(seq).to_be(4)
    local ok, msg, code = sub:next(0.05)
    expect(ok).to_be_nil(); expect(code).to_be("timeout")
    expect(dur:next(0)).to_be(ev("TurnStarted"))
    expect(dur:next(0)).to_be(ev("StepDone"))
    expect(s:tip()).to_be(4)
    expect(s:faulted()).to_be_nil()
    s:close()
    expect(s.id).to_match("%x")
    ok, msg, code = sub:next()
    expect(ok).to_be_nil(); expect(code).to_be("closed")
    expect(function() s:emit("{}", { type = "X" }) end).to_fail("closed rig.session")
    expect(s:close()).to_be(true) -- idempotent
  end)

  it("raises on misuse", function()
    local store = core.store_memory()
    expect(function() core.session_open(store, "nope") end).to_fail("invalid session id")
    local s = assert(core.session_open(store))
    expect(function() s:emit("{}", { type = "X", enduring = true, tiemout = 1 }) end).to_fail("unknown option 'tiemout'")
    expect(function() s:emit("{}", { enduring = true }) end).to_fail("'type'")
    expect(function() s:emit("{}", { type = "X", kind = "fence" }) end).to_fail("'kind'")
    expect(function() s:subscribe{ loops = 3 } end).to_fail("'loops'")
    expect(function() s:catalog{ state = "sleeping" } end).to_fail("'state'")
    expect(function() s:catalog{ colour = "red" } end).to_fail("unknown option 'colour'")
    s:close()
  end)

  it("emit_event takes an event's options as arguments: the results and messages of emit", function()
    local store = core.store_memory()
    local s = assert(core.session_open(store))
    local sub = s:subscribe{ loops = "all", ephemeral = true }
    expect(s:emit_event(ev("TurnStarted"), "TurnStarted", "assistant", true, "e1", false)).to_be(true)
    expect(s:emit_event(ev("TokenDelta"), "TokenDelta", "assistant", false, nil, false)).to_be(true)
    expect(s:emit_event(ev("StepDone"), "StepDone", nil, true, "e2", true)).to_be(3)
    -- the same id and bytes again: the original seq
    expect(s:emit_event(ev("StepDone"), "StepDone", nil, true, "e2", true)).to_be(3)
    -- wait counts only for an enduring event
    expect(s:emit_event(ev("TokenDelta"), "TokenDelta", nil, false, nil, true)).to_be(true)
    expect(sub:next(1)).to_be(ev("TurnStarted"))
    expect(sub:next(1)).to_be(ev("TokenDelta"))
    expect(sub:next(1)).to_be(ev("StepDone"))
    expect(sub:next(1)).to_be(ev("TokenDelta"))
    expect(s:tip()).to_be(3)
    local function msg(f, ...)
      local ok, m = pcall(f, s, ...)
      expect(ok).to_be(false)
      return m
    end
    local long = string.rep("x", 257)
    local cases = {
      { { "{}", { enduring = true } }, { "{}", nil, nil, true, nil, true },
        "rig.session.emit: option 'type' must be a string" },
      { { "{}", { type = "X", loop_id = 3 } }, { "{}", "X", 3, false, nil, false },
        "rig.session.emit: option 'loop_id' must be a string" },
      { { "{}", { type = "X", enduring = "yes" } }, { "{}", "X", nil, "yes", nil, false },
        "rig.session.emit: option 'enduring' must be a boolean" },
      { { "{}", { type = "X", id = 7 } }, { "{}", "X", nil, true, 7, false },
        "rig.session.emit: option 'id' must be a string" },
      { { "{}", { type = "X", id = "a\tb" } }, { "{}", "X", nil, true, "a\tb", false },
        "rig.session.emit: option 'id' must be printable ASCII" },
      { { "{}", { type = "X", id = long } }, { "{}", "X", nil, true, long, false },
        "rig.session.emit: option 'id' is longer than 256 bytes or holds NUL" },
      { { "{}", { type = "X", wait = 1 } }, { "{}", "X", nil, true, nil, 1 },
        "rig.session.emit: option 'wait' must be a boolean" },
    }
    for _, c in ipairs(cases) do
      expect(msg(s.emit, table.unpack(c[1], 1, 2))).to_be(c[3])
      expect(msg(s.emit_event, table.unpack(c[2], 1, 6))).to_be(c[3])
    end
    s:close()
    expect(function() s:emit_event("{}", "X", nil, false, nil, false) end).to_fail("closed rig.session")
  end)

  it("rig.session_base's emit: json.encode's bytes, ids from the epoch, encode failures raise at its caller", function()
    local json = require "rig.json"
    local base = require "rig.session_base"
    local store = core.store_memory()
    local s = assert(core.session_open(store))
    local sub = s:subscribe{ loops = "all", ephemeral = true }
    local S = { id = s.id, epoch = s:epoch(), counter = 0, core = s }
    local ev = { loop_id = "assistant", turn_id = "t1", text = "caf\u{e9}\n\"q\"", n = 3, f = 0.25,
                 nested = { b = true, a = json.array({ 1, "two", { z = 1, y = json.null } }) },
                 empty = json.array({}), raw = json.raw('{"k": [1, 2]}') }
    local seq = assert(base.emit(S, "StepDone", ev))
    expect(ev.event_id).to_be("e" .. s:epoch() .. ".1")
    local recs = assert(core.journal_read(store, s.id, seq, 0))
    expect(recs[1].body).to_be(json.encode(ev)) -- the journal holds exactly the encoder's bytes
    expect(sub:next(1)).to_be(json.encode(ev))
    local td = { loop_id = "assistant", delta = "x" }
    expect(select("#", base.emit(S, "TokenDelta", td))).to_be(1)
    expect(td.event_id).to_be("e" .. s:epoch() .. ".2")
    expect(sub:next(1)).to_be(json.encode(td))
    S.epoch = S.epoch + 1 -- a new epoch makes new heads
    expect(base.next_id(S, "s")).to_be("s" .. (s:epoch() + 1) .. ".3")
    for e = 1, 70 do -- past the shared cache's 64 epochs: it starts over, the ids stay right
      local T = { epoch = e, counter = e }
      expect(base.next_id(T, "c")).to_be("c" .. e .. "." .. (e + 1))
      expect(base.next_id(T, "c")).to_be("c" .. e .. "." .. (e + 2))
    end
    local tip = s:tip()
    local ok, msg = pcall(function()
      base.emit(S, "StepDone", { bad = function() end }) -- this line
    end)
    expect(ok).to_be(false)
    expect(msg).to_match("^[^:]*session_core_spec%.lua:%d+: rig%.session: internal: cannot encode "
      .. "StepDone: json: cannot encode a function at %$%.bad$")
    ok, msg = pcall(base.emit, S, "TokenDelta", { x = { [1] = 1, [3] = 3 } })
    expect(ok).to_be(false)
    expect(msg).to_match("cannot encode TokenDelta: json: cannot encode a sparse array at %$%.x$")
    expect(s:tip()).to_be(tip) -- nothing emitted
    expect(sub:next(0.05)).to_be_nil()
    s:close()
  end)

  it("filters by loop and counts dropped ephemeral events", function()
    local store = core.store_memory()
    local s = assert(core.session_open(store))
    local sub = s:subscribe{ loops = { "assistant" }, buffer = 2 }
    s:emit(ev("A"), { type = "A", loop_id = "other" })
    s:emit(ev("B"), { type = "B", loop_id = "assistant#1" })
    s:emit(ev("C"), { type = "C" })
    s:emit(ev("D"), { type = "D", loop_id = "assistant" })
    expect(sub:dropped()).to_be(1)
    expect(sub:next(0)).to_be(ev("B"))
    expect(sub:next(0)).to_be(ev("C"))
    sub:close()
    expect(function() sub:next() end).to_fail("closed")
    s:close()
  end)

  it("ends a subscription an enduring event does not fit", function()
    local store = core.store_memory()
    local s = assert(core.session_open(store))
    local sub = s:subscribe{ buffer = 1 }
    s:emit(ev("E1"), { type = "E1", enduring = true })
    s:emit(ev("E2"), { type = "E2", enduring = true })
    expect(sub:next(0)).to_be(ev("E1"))
    local ok, msg, code = sub:next(0)
    expect(ok).to_be_nil(); expect(code).to_be("overflow")
    expect(msg).to_match("from seq 3")
    s:close()
  end)

  it("latches the fault after an injected failure", function()
    local store = core.store_memory()
    local s = assert(core.session_open(store))
    core.store_inject_failure(store, "append", 1)
    expect(s:emit(ev("E1"), { type = "E1", enduring = true })).to_be(2)
    local ok, msg, code = s:emit(ev("E2"), { type = "E2", enduring = true })
    expect(ok).to_be_nil(); expect(code).to_be("faulted")
    expect(msg).to_match("session " .. lit(s.id) .. " is faulted: .*injected failure")
    core.store_inject_failure(store, "append", -1)
    ok, msg, code = s:emit(ev("T"), { type = "T" })
    expect(ok).to_be_nil(); expect(code).to_be("faulted")
    expect(s:faulted()).to_match("is faulted")
    s:close()
  end)

  it("reports a failure of a wait = false emit at the next call", function()
    local store = core.store_memory()
    local s = assert(core.session_open(store))
    core.store_inject_failure(store, "append", 0)
    expect(s:emit(ev("E1"), { type = "E1", enduring = true, wait = false })).to_be(true)
    rig.sleep(0.05)
    local ok, msg, code = s:emit(ev("E2"), { type = "E2", enduring = true, wait = false })
    expect(ok).to_be_nil(); expect(code).to_be("faulted")
    s:close()
  end)

  it("lets a cancelled emit-wait land anyway", function()
    local store = core.store_memory()
    local s = assert(core.session_open(store))
    -- a body over 512 KiB goes to a blob on the pool: the wait is long enough to cancel
    local big = ev("E", ',"pad":"' .. string.rep("x", 600 * 1024) .. '"')
    local started = false
    local t = rig.spawn(function()
      started = true
      return s:emit(big, { type = "E", enduring = true })
    end)
    while not started do rig.sleep(0) end
    expect(t:status()).to_be("waiting")
    t:cancel()
    local _, _, code = t:wait(1)
    expect(code).to_be("cancelled")
    s:close()
    local recs, tip = assert(core.journal_read(store, s.id, 1, 0))
    expect(tip).to_be(2)
    expect(recs[2].body).to_be(big)
  end)

  it("reads the journal and the catalog", function()
    local store = core.store_memory()
    local s = assert(core.session_open(store))
    s:emit(ev("SessionStarted"), { type = "SessionStarted", enduring = true, id = "e1" })
    s:emit('{"type":"Submit"}', { type = "Submit", kind = "command", id = "c1" })
    s:emit('{"gate":1}', { type = "GatePrepared", kind = "gate_prepared", id = "g1" })
    s:catalog{ title = "hello", state = "running", input_tokens = 10, output_tokens = 5,
               cache_read_tokens = 1, cost = 0.25, loop_count = 1 }
    local recs, tip = assert(core.journal_read(store, s.id, 1, 0))
    expect(tip).to_be(4)
    expect(#recs).to_be(4)
    expect(recs[1].kind).to_be("fence"); expect(recs[1].epoch).to_be(s:epoch()); expect(recs[1].body).to_be_nil()
    expect(recs[2].kind).to_be("event"); expect(recs[2].id).to_be("e1"); expect(recs[2].seq).to_be(2)
    expect(recs[3].kind).to_be("command"); expect(recs[3].body).to_be('{"type":"Submit"}')
    expect(recs[4].kind).to_be("gate_prepared")
    local part = assert(core.journal_read(store, s.id, 3, 1))
    expect(#part).to_be(1); expect(part[1].seq).to_be(3)
    s:catalog{ state = "idle" }
    s:close()
    local e = assert(core.catalog_get(store, s.id))
    expect(e.id).to_be(s.id); expect(e.title).to_be("hello"); expect(e.state).to_be("idle")
    expect(e.input_tokens).to_be(10); expect(e.cost).to_be(0.25); expect(e.last_seq).to_be(4)
    expect(e.status).to_be("active"); expect(e.loop_count).to_be(1)
    local all = core.catalog_list(store)
    expect(#all).to_be(1); expect(all[1].id).to_be(s.id)
    local ok, msg, code = core.catalog_get(store, "00000000-0000-4000-8000-000000000000")
    expect(ok).to_be_nil(); expect(code).to_be("not_found")
    ok, msg, code = core.session_open(store, "00000000-0000-4000-8000-000000000000")
    expect(ok).to_be_nil(); expect(code).to_be("not_found")
    local none, t0 = core.journal_read(store, "00000000-0000-4000-8000-000000000000", 1, 0)
    expect(#none).to_be(0); expect(t0).to_be(0)
  end)

  it("refuses a session another handle holds, and reopens it after close", function()
    local dir = tmpdir()
    local a = assert(core.store_lmdb{ root = dir })
    local b = assert(core.store_lmdb{ root = dir })
    local s = assert(core.session_open(a))
    s:emit(ev("E"), { type = "E", enduring = true })
    local ok, msg, code = core.session_open(b, s.id)
    expect(ok).to_be_nil(); expect(code).to_be("held")
    expect(msg).to_match(lit(s.id))
    local ep = s:epoch()
    s:close()
    local s2 = assert(core.session_open(b, s.id))
    expect(s2:epoch()).at_least(ep + 1)
    expect(s2:tip()).to_be(3)
    s2:close()
    a:close(); b:close()
    os.execute("rm -rf " .. dir)
  end)
end)

describe("rig.core.cond", function()
  it("wakes every waiter on signal", function()
    local c = core.cond()
    local woke = 0
    local ts = {}
    for i = 1, 3 do ts[i] = rig.spawn(function() expect(c:wait()).to_be(true); woke = woke + 1 end) end
    rig.sleep(0.01)
    expect(c:signal()).to_be(3)
    for i = 1, 3 do ts[i]:wait() end
    expect(woke).to_be(3)
    expect(c:signal()).to_be(0)
  end)

  it("times out", function()
    local c = core.cond()
    local ok, msg, code = c:wait(0.02)
    expect(ok).to_be_nil(); expect(msg).to_be("timeout"); expect(code).to_be("timeout")
    expect(c:signal()).to_be(0)
  end)

  it("lets a waiting task be cancelled cleanly", function()
    local c = core.cond()
    local t = rig.spawn(function() c:wait() end)
    rig.sleep(0.01)
    t:cancel()
    local ok, msg, code = t:wait(1)
    expect(code).to_be("cancelled")
    expect(c:signal()).to_be(0)
  end)
end)
