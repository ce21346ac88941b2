-- rig.sandbox: confinement profiles and what this machine can enforce
-- (lua/sandbox.c over sandbox/; DESIGN §8).
--
--   local p = rig.sandbox.profile{
--     workspace_root = ".",          -- required; canonicalized (realpath)
--     workspace_read = "allow", workspace_write = "gated",
--     host_read = "allow", host_write = "deny",
--     network = "gated", command = "gated",   -- each "deny" | "gated" | "allow"
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
--     "command.execute" (scope a command line); an unknown kind raises
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

local core = require "rig.core"

return {
  profile = core.sandbox_profile,
  restrict = core.sandbox_restrict,
  check = core.sandbox_check,
}
