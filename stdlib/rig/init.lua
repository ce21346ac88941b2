-- rig: the luarig standard library.
--
-- Everything a rig author touches. The stdlib reaches the C runtime through
-- rig.core, which is not part of this table: it is the stdlib's private
-- binding, whose shape changes with the stdlib's needs. What a script needs
-- of it has a name here; areas load on first use (rig.http, rig.process,
-- ...) so that a script that never needs them never pays for them.

local core = require "rig.core"

local rig = {
  version = core.version,
  spawn = core.spawn,   -- rig.spawn(fn, ...) -> task with :wait([timeout]), :cancel(), :status()
  sleep = core.sleep,   -- rig.sleep(seconds): waits without blocking other tasks
  now = core.now,       -- monotonic seconds
  time = core.time,     -- wall-clock seconds since the epoch
  current = core.current,
  cond = core.cond,     -- rig.cond() -> c: c:wait([timeout]) until c:signal() (tasks, not threads)
  -- rig.read_line([max]) -> a line of standard input without its newline (at most max bytes,
  -- default 4096), nil at its end; other tasks run meanwhile. rig.isatty(fd): fd 0, 1 or 2
  read_line = core.read_line,
  isatty = core.isatty,
  -- rig.await_shutdown_signal() -> "SIGTERM" | "SIGINT": the script shuts down its own way
  await_shutdown_signal = core.await_shutdown_signal,
  bundle_read = core.bundle_read, -- rig.bundle_read(path) -> a verified bundle's manifest (docs/bundles.md)
}

-- Waiting inside a user coroutine: the waiting call yields the scheduler
-- marker; these wrappers pass it outward to the task and pass the
-- resumption back in, so coroutines and waiting nest (as in OpenResty).
do
  local marker = core.yield_marker()
  local create, resume, yield, close = coroutine.create, coroutine.resume, coroutine.yield, coroutine.close

  local function pass(co, ok, first, ...)
    if ok and first == marker and select("#", ...) == 0 then
      return pass(co, resume(co, yield(marker)))
    end
    return ok, first, ...
  end

  coroutine.resume = function(co, ...)
    return pass(co, resume(co, ...))
  end

  local function unwrap(co, ok, ...)
    if ok then return ... end
    close(co)
    error((...), 0)
  end

  coroutine.wrap = function(f)
    local co = create(f)
    return function(...)
      return unwrap(co, pass(co, resume(co, ...)))
    end
  end
end

local areas = {
  http = "rig.http",
  process = "rig.process",
  json = "rig.json",
  store = "rig.store",
  workspace = "rig.workspace",
  model = "rig.model",
  sandbox = "rig.sandbox",
  tool = "rig.tool",
  tools = "rig.tools",
  loop = "rig.loop",
  define = "rig.define",
  gate = "rig.gate",
  permissions = "rig.permissions",
  schema = "rig.schema",
  mcp = "rig.mcp",
  flow = "rig.flow",     -- rig.flow{ … }: durable workflow graphs (docs/flow.md)
  ask = "rig.ask",
  serve = function(opts) return require("rig.serve").serve(opts) end, -- rig.serve{…}
  -- rig.run(loop | rig, text [, opts]): a throwaway in-memory session (rig.run); a tail
  -- call, so its errors name the caller's line
  run = function(...) return require("rig.run")(...) end,
}

return setmetatable(rig, {
  __index = function(t, k)
    local name = areas[k]
    if not name then return nil end
    local m = type(name) == "function" and name or require(name)
    rawset(t, k, m)
    return m
  end,
})
