-- rig.mcp.stdio (transport): an MCP server as a child process speaking
-- newline-delimited JSON-RPC on its stdin and stdout (rig.mcp.client uses it;
-- rig.mcp.stdio{…} is the user-facing constructor, in rig.mcp).
--
--   local t, err, code = stdio.open{ argv = { … }, env = { … }, cwd = …,
--     executor = ex | nil, unconfined = true | nil, max_line = 16 << 20, name = "fs",
--     network = { "host:port" } | nil }
--   t:start(on_message(text), on_oversized(total, head, tail), on_close(message, code))
--   t:send(msg) -> true | nil, message, code
--   t:close([grace]) -- closes stdin, waits up to grace seconds (2), then kills the group
--   t.pid, t:stderr_tail() -> the last 4 KiB the server wrote on stderr
--
-- The child is started through a sandbox executor (executor:spawn: the
-- profile's mount view, Landlock, seccomp, a scrubbed environment, its own
-- process group), or — only when the caller says unconfined = true — as a
-- plain rig.process. Its command is what the rig's author wrote, so it runs
-- with a command grant minted for exactly that line when the profile gates
-- commands (a denied command stays denied). The frames are cut in C
-- (rig.core.mcp_framer, host/mcp_frame.c); a line over max_line is reported
-- through on_oversized and the stream goes on. stderr is drained all the time
-- (a server blocked on a full stderr pipe would hang its answers) and its last
-- 4 KiB are kept for the message when the server dies.

local core = require "rig.core"
local json = require "rig.json"

local M = {}

local STDERR_KEEP = 4096

local T = {}
T.__index = T

function M.open(o)
  local proc, err, code
  if o.executor then
    local grants
    local line = table.concat(o.argv, " ")
    local token = o.executor:grant{ kind = "command.execute", target = line, command = line,
                                    cwd = o.cwd }
    if token then grants = { { token = token, kind = "command.execute", target = line } } end
    -- the network targets the rig's author named: a grant each where the profile gates
    -- the network (a denied network stays denied: the spawn refuses the targets)
    for _, t in ipairs(o.network or {}) do
      local nt = o.executor:grant{ kind = "network", target = t, command = line, cwd = o.cwd }
      if nt then
        grants = grants or {}
        grants[#grants + 1] = { token = nt, kind = "network", target = t }
      end
    end
    proc, err, code = o.executor:spawn{ argv = o.argv, env = o.env, cwd = o.cwd, stdin = "pipe",
                                        stdout = "pipe", stderr = "pipe", grants = grants,
                                        network = o.network }
  elseif o.unconfined then
    proc, err, code = core.process_spawn{ argv = o.argv, env = o.env, cwd = o.cwd, stdin = "pipe",
                                          stdout = "pipe", stderr = "pipe" }
  else
    error("rig.mcp.stdio: internal: neither an executor nor unconfined", 2)
  end
  if not proc then
    return nil, "mcp: server '" .. o.name .. "': cannot start '" .. o.argv[1] .. "': "
      .. tostring(err), code or "refused"
  end
  return setmetatable({ proc = proc, pid = proc.pid, name = o.name,
                        max_line = o.max_line or (16 << 20), stderr_buf = "",
                        closed = false }, T)
end

function T:stderr_tail()
  return self.stderr_buf
end

-- How the process ended, for messages: "exited with code 1", "killed by SIGKILL".
local function ended(st)
  if not st then return "ended" end
  if st.signal then return "was killed by " .. st.signal end
  return "exited with code " .. tostring(st.code)
end

function T:start(on_message, on_oversized, on_close)
  local proc = self.proc
  local fr = core.mcp_framer(self.max_line)
  self.framer = fr
  local function drain()
    while true do
      local line, total, head, tail = fr:pop()
      if line == nil then return end
      if line == false then
        on_oversized(total, head, tail, self.max_line)
      else
        on_message(line)
      end
    end
  end
  self.err_task = core.spawn_background(function()
    while true do
      local chunk = proc:read("stderr")
      if not chunk then return end
      local s = self.stderr_buf .. chunk
      if #s > STDERR_KEEP then s = s:sub(-STDERR_KEEP) end
      self.stderr_buf = s
      if self.on_stderr then pcall(self.on_stderr, chunk) end
    end
  end)
  self.task = core.spawn_background(function()
    local why, code
    while true do
      local ok, chunk, rerr = pcall(proc.read, proc, "stdout")
      if not ok then
        why, code = tostring(chunk), "closed"
        break
      end
      if chunk == nil then
        if rerr then why, code = tostring(rerr), "closed" end
        break
      end
      fr:feed(chunk)
      drain()
    end
    if not why then
      fr:finish()
      drain()
      local ok, st = pcall(proc.wait, proc, 2)
      if ok and st then
        why = "the server " .. ended(st)
      else
        why = "the server closed its stdout"
      end
      code = "closed"
    end
    if self.closed then why = "the client closed the connection" end
    local tail = self.stderr_buf:gsub("%s+$", "")
    if tail ~= "" and not self.closed then
      -- the last lines (a crash's message sits above its last line), as one line
      local last = tail:sub(-600):gsub("%s*\n%s*", " | ")
      why = why .. " (stderr: " .. last .. ")"
    end
    self.dead = why
    on_close(why, code)
  end)
end

function T:send(msg)
  if self.closed then return nil, "the connection is closed", "closed" end
  if self.dead then return nil, self.dead, "closed" end
  local text, err = json.encode(msg)
  if not text then return nil, "cannot encode the message: " .. tostring(err), "encode" end
  local ok, werr, wcode = self.proc:write(text .. "\n")
  if not ok then return nil, "cannot write to the server: " .. tostring(werr), wcode or "closed" end
  return true
end

function T:close(grace)
  if self.closed then return end
  self.closed = true
  local proc = self.proc
  pcall(proc.close_stdin, proc)
  -- the spec's shutdown: stdin closed, then SIGTERM, then SIGKILL
  local ok, st = pcall(proc.wait, proc, grace or 2)
  if not (ok and st) then
    pcall(proc.kill, proc, "TERM")
    ok, st = pcall(proc.wait, proc, 1)
  end
  pcall(proc.close, proc) -- kills the process group, whatever is left of it
  if self.framer then self.framer:close() end
end

return M
