-- rig.sandbox: confinement profiles and what this machine can enforce
-- (lua/sandbox.c over sandbox/; docs/sandbox.md).
--
--   local p = rig.sandbox.profile{
--     workspace_root = ".",          -- required; canonicalized (realpath)
--     workspace_read = "allow", workspace_write = "gated",
--     host_read = "allow", host_write = "deny",
--     network = "gated", command = "gated",   -- each "deny" | "gated" | "allow"
--     delegate = "gated",            -- starting/messaging a delegate loop: the gate's
--                                    -- access only (nothing for the OS to enforce)
--     mcp = "gated",                 -- calling an MCP server's tool (and answering its
--                                    -- sampling requests): the gate's access only
--     home = "isolated",             -- or "real"
--     isolation = "sandboxed",       -- or "unconfined" (every filesystem and
--                                    -- network field allow, ack_unconfined = true)
--     roots = { { path = "/opt/tool", read = "allow", write = "deny" } },
--     ack_unconfined = false,
--   }
--   -- the values shown are the defaults; an unknown field raises, naming it
--   p.workspace_write --> "gated"     fields are readable; the profile is frozen
--   p:fingerprint()   --> 64 hex digits, stable; grants are bound to it
--   p:access_for(kind, scope) --> "deny" | "gated" | "allow"
--     kind: "filesystem.read" | "filesystem.write" (scope: a path, relative
--     to the workspace, symlinks followed), "network" (scope "host:port"),
--     "command.execute" (scope a command line), "delegate" (scope a delegate
--     loop's name: the profile's `delegate` for every name), "mcp" (scope
--     "SERVER/TOOL" or "SERVER:sampling": the profile's `mcp` for every one); an
--     unknown kind raises
--   rig.sandbox.restrict(a, b) --> the intersection, never wider than a or b
--   rig.sandbox.check([profile]) --> {
--     tier = "A" | "B" | "none", why = "what is missing", cgroup = "the layout",
--     ok = true | false, error = "why the profile is refused" (when not ok),
--     guarantees = { read_boundary = { enforced = true, required = true, how = "..." },
--                    ... = { enforced = false, required = ..., missing = "..." } },
--     order = { "read_boundary", "write_boundary", "network_boundary",
--               "target_network", "process_boundary", "resource_limits", "env_scrub" },
--     caps = { userns, mountns, pidns, netns, mount_api, seccomp, cgroup, landlock_abi },
--   }   -- without a profile: the defaults on the current directory
--
--   local set = rig.sandbox.executors(profile, { scratch_root = nil, max = 16 })
--     -- scratch_root must not exist: the set makes it (0700) and removes it on close
--   local ex = set:get("session-1")  -- one per key ([A-Za-z0-9_.-]{1,64}), own HOME and TMPDIR
--   local r, err, code = ex:run{ argv = { "make", "test" } | command = "make test" (via /bin/sh -c),
--     cwd = nil (the workspace; relative to it), env = { NAME = "v" | false },
--     stdin = nil, timeout = nil, output_limit = 1 << 20 (per stream, head + tail),
--     grants = { { token =, kind =, target = } }, network = { "host:port" } | false }
--   -- r = { code, signal, stdout, stderr, truncated, timed_out, report }
--   local p = ex:spawn{ ..., stdin = "pipe" | data, stdout = "pipe" | "inherit" | "null",
--     stderr = same }  -- a rig.process handle: read, write, lines, wait, kill, close
--   ex:report()  -- the guarantee table; ex.key, ex.home, ex.tmpdir, ex.id
--   ex:grant{ kind =, target =, command =, cwd =, ttl = 60 } --> a single-use token
--   ex:close(); set:close()  -- end their runs and spawned trees; close removes the scratch root

local core = require "rig.core"
require "rig.process" -- spawned handles are rig.process handles (p:lines)

return {
  profile = core.sandbox_profile,
  restrict = core.sandbox_restrict,
  check = core.sandbox_check,
  executors = core.sandbox_executors,
}
