-- rig.process: running programs.
--
--   local r, err, code = rig.process.run{ argv = { "ls", "-l" }, cwd = nil, env = nil,
--     env_clear = false, stdin = nil, timeout = nil, output_limit = 1 << 20 }
--   -- r = { code, signal, stdout, stderr, truncated, timed_out, pid }
--
--   local p = rig.process.spawn{ argv = { ... }, stdin = "pipe" | "data" | nil,
--     stdout = "pipe" | "inherit" | "null", stderr = same, timeout = nil }
--   p.pid; p:write(s); p:close_stdin(); p:read("stdout"); p:lines("stdout")
--   p:wait([timeout]); p:kill([signal]); p:close()
--
-- Every child leads its own process group: timeouts, kill, cancellation and
-- close reach everything it started. run() and close() also end what a
-- command left running in its group after it exited (start it with setsid
-- to detach on purpose). env adds to the current environment (a value of
-- false removes a name) or, with env_clear = true, replaces it. Programs are
-- searched in the host's PATH.
--
-- spawn() buffers at most 64 KiB per output pipe and then stops reading
-- until the script reads: a child that writes a lot blocks, as with any
-- pipe, so read its output (or pass stdout = "null") before p:wait().
-- An exited child stays a zombie until p:close() (or collection), so its
-- process-group id cannot be reused while the handle exists. A handle does
-- not keep the script running: when the script ends, open handles are
-- collected and their process groups killed.
local core = require "rig.core"

local M = {
  run = core.process_run,
  spawn = core.process_spawn,
}

local methods = core.process_methods

-- p:lines([stream]): iterates the lines of a pipe as they arrive, without
-- their "\n"; a last line without a newline is returned too. A read error raises.
function methods.lines(p, stream)
  stream = stream or "stdout"
  local buf, pos, eof = "", 1, false
  return function()
    while true do
      local nl = buf:find("\n", pos, true)
      if nl then
        local line = buf:sub(pos, nl - 1)
        pos = nl + 1
        return line
      end
      if eof then
        if pos <= #buf then
          local line = buf:sub(pos)
          buf, pos = "", 1
          return line
        end
        return nil
      end
      local chunk, err = p:read(stream)
      if chunk then
        buf, pos = buf:sub(pos) .. chunk, 1
      elseif err then
        error(err, 2)
      else
        eof = true
      end
    end
  end
end

return M
