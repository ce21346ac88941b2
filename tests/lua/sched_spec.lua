-- The scheduler: tasks, waiting, cancellation, coroutines, errors.

describe("rig.spawn", function()
  it("runs tasks side by side and returns their results", function()
    local t0 = rig.now()
    local a = rig.spawn(function(x) rig.sleep(0.2); return x, "a" end, 1)
    local b = rig.spawn(function(x) rig.sleep(0.2); return x, "b" end, 2)
    local x1, y1 = a:wait()
    local x2, y2 = b:wait()
    expect(x1).to_be(1); expect(y1).to_be("a")
    expect(x2).to_be(2); expect(y2).to_be("b")
    expect(rig.now() - t0).at_most(0.35)  -- ran concurrently, not 0.4s in sequence
  end)

  it("passes any number of arguments to a task", function()
    local args = {}
    for i = 1, 300 do args[i] = i end
    local t = rig.spawn(function(...) return select("#", ...), (select(300, ...)) end,
      table.unpack(args))
    local n, last = t:wait()
    expect(n).to_be(300)
    expect(last).to_be(300)
  end)

  it("starts a task on the next loop round, not inside spawn", function()
    local ran = false
    local t = rig.spawn(function() ran = true end)
    expect(ran).to_be(false)
    expect(t:status()).to_be("pending")
    t:wait()
    expect(ran).to_be(true)
    expect(t:status()).to_be("done")
  end)

  it("keeps a failing task from killing its siblings", function()
    local bad = rig.spawn(function() rig.sleep(0.01); error("boom") end)
    local good = rig.spawn(function() rig.sleep(0.05); return "fine" end)
    local ok, msg, code = bad:wait()
    expect(ok).to_be_nil()
    expect(msg).to_match("boom")
    expect(msg).to_match("stack traceback")
    expect(code).to_be("error")
    expect(good:wait()).to_be("fine")
    expect(bad:status()).to_be("failed")
  end)

  it("waits with a timeout", function()
    local t = rig.spawn(function() rig.sleep(5) end)
    local ok, msg, code = t:wait(0.05)
    expect(ok).to_be_nil(); expect(code).to_be("timeout")
    expect(t:status()).to_be("waiting")
    t:cancel()
  end)

  it("refuses to wait for itself", function()
    local t
    t = rig.spawn(function() return pcall(t.wait, t) end)
    local ok, err = t:wait()
    expect(ok).to_be(false)
    expect(err).to_match("itself")
  end)

  it("returns results of a task that already finished", function()
    local t = rig.spawn(function() return 42 end)
    rig.sleep(0.01)
    expect(t:status()).to_be("done")
    expect(t:wait()).to_be(42)
  end)
end)

describe("cancellation", function()
  it("stops a sleeping task at once", function()
    local t0 = rig.now()
    local t = rig.spawn(function() rig.sleep(60) end)
    rig.sleep(0.01)
    expect(t:cancel()).to_be(true)
    local ok, msg, code = t:wait()
    expect(ok).to_be_nil(); expect(code).to_be("cancelled")
    expect(rig.now() - t0).at_most(0.5)
    expect(t:cancel()).to_be(false)  -- already finished
  end)

  it("reaches the tasks a task started", function()
    local child
    local parent = rig.spawn(function()
      child = rig.spawn(function() rig.sleep(60) end)
      rig.sleep(60)
    end)
    rig.sleep(0.01)
    parent:cancel()
    parent:wait()
    expect(child:status()).to_be("cancelled")
  end)

  it("cancels a task that never started", function()
    local ran = false
    local t = rig.spawn(function() ran = true end)
    t:cancel()
    local _, _, code = t:wait()
    expect(code).to_be("cancelled")
    expect(ran).to_be(false)
  end)

  it("keeps a cancelled task cancelled even if it catches the error", function()
    local caught
    local t = rig.spawn(function()
      caught = select(2, pcall(rig.sleep, 60))
      -- every later wait fails again
      local ok = pcall(rig.sleep, 0)
      return ok
    end)
    rig.sleep(0.01)
    t:cancel()
    local _, _, code = t:wait()
    expect(code).to_be("cancelled")
    expect(caught).to_match("cancelled")
  end)

  it("lets a to-be-closed task variable cancel on scope exit", function()
    local t
    do
      local inner <close> = rig.spawn(function() rig.sleep(60) end)
      t = inner
      rig.sleep(0.01)
    end
    rig.sleep(0.01)
    expect(t:status()).to_be("cancelled")
  end)
end)

describe("coroutines", function()
  it("can wait inside coroutine.wrap", function()
    local gen = coroutine.wrap(function()
      for i = 1, 3 do
        rig.sleep(0.001)
        coroutine.yield(i)
      end
    end)
    expect(gen()).to_be(1); expect(gen()).to_be(2); expect(gen()).to_be(3)
  end)

  it("can wait inside nested coroutine.resume", function()
    local inner = coroutine.create(function(a)
      rig.sleep(0.001)
      local b = coroutine.yield(a + 1)
      rig.sleep(0.001)
      return b * 2
    end)
    local outer = coroutine.create(function()
      local ok, v = coroutine.resume(inner, 1)
      assert(ok and v == 2)
      local ok2, w = coroutine.resume(inner, 21)
      return ok2 and w
    end)
    local ok, r = coroutine.resume(outer)
    expect(ok).to_be(true); expect(r).to_be(42)
  end)

  it("propagates errors out of coroutine.wrap", function()
    local f = coroutine.wrap(function() rig.sleep(0); error("inside") end)
    expect(function() f() end).to_fail("inside")
  end)

  it("can wait inside pcall", function()
    local ok, v = pcall(function() rig.sleep(0.001); return "v" end)
    expect(ok).to_be(true); expect(v).to_be("v")
  end)
end)

describe("time", function()
  it("sleeps about as long as asked", function()
    local t0 = rig.now()
    rig.sleep(0.05)
    local dt = rig.now() - t0
    expect(dt).at_least(0.045)
  end)

  it("gives wall-clock time", function()
    expect(math.abs(rig.time() - os.time())).at_most(2)
  end)

  it("rejects a negative sleep", function()
    expect(function() rig.sleep(-1) end).to_fail("non%-negative")
  end)

  it("says why it cannot wait inside require", function()
    package.preload["spec.sleepy"] = function() rig.sleep(0) end
    local ok, err = pcall(require, "spec.sleepy")
    expect(ok).to_be(false)
    expect(err).to_match("cannot wait here")
  end)
end)
