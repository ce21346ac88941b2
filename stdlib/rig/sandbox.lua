-- rig.sandbox: confinement of the commands an agent runs.
--
--   local set = rig.sandbox.executors(profile, { scratch_root = nil, max = 16 })
--   local ex = set:get("session-1")  -- one per key, its own HOME and TMPDIR
--   local r, err, code = ex:run{ argv = { "make", "test" } | command = "make test",
--     cwd = nil, env = nil, stdin = nil, timeout = nil, output_limit = 1 << 20,
--     grants = nil, network = nil }
--   -- r = { code, signal, stdout, stderr, truncated, timed_out, report }
--   local p = ex:spawn{ ... , stdout = "pipe", stderr = "pipe", stdin = "pipe" }
--   ex:report(); ex:grant{ kind =, target =, command =, cwd =, ttl = }; set:close()
local core = require "rig.core"
require "rig.process" -- spawned handles are rig.process handles (p:lines)

local M = {
  executors = core.sandbox_executors,
}

return M
