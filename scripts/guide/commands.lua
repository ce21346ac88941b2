-- guide/commands.lua: "Confine commands with the OS" — one profile, two layers.
--
--   build/luarig scripts/guide/commands.lua [DIR]
--
-- The gate answers whether a command may run; the sandbox limits what the
-- process can read, write, execute and reach. Both read the same
-- rig.sandbox.profile, so a decision and its enforcement cannot drift. This
-- script shows what this machine can enforce, a profile's decisions, the
-- executor refusing a gated command until a single-use grant opens exactly
-- that spawn, the boundaries a running command meets, and restrict().
-- (There is no sandbox.Init() to call: luarig re-executes itself as the
-- confinement helper, and that is handled before any script runs.)

local function sh(cmd)
  local r = assert(rig.process.run{ argv = { "/bin/sh", "-c", cmd } })
  assert(r.code == 0, cmd .. ": " .. r.stderr)
  return (r.stdout:gsub("\n$", ""))
end
local base = arg[1] or sh("mktemp -d")
local ws = base .. "/workspace"
sh("mkdir -p '" .. ws .. "' && rm -rf '" .. base .. "/scratch'")

-- What the OS here can guarantee (the same as `luarig sandbox check`).
local machine = rig.sandbox.check()
print("confinement tier " .. machine.tier .. (machine.tier ~= "A" and (" — " .. tostring(machine.why)) or ""))
for _, k in ipairs(machine.order) do
  local g = machine.guarantees[k]
  print(string.format("  %-17s %s", k, g.enforced and ("yes: " .. g.how) or ("NO: " .. tostring(g.missing))))
end

-- A profile chooses deny, gated or allow for each capability; no presets.
local profile = rig.sandbox.profile{
  workspace_root = ws,
  workspace_read = "allow", workspace_write = "allow",
  host_read = "allow", host_write = "deny",
  network = "deny", command = "gated",
  home = "isolated", isolation = "sandboxed",
}
local check = rig.sandbox.check(profile)
if not check.ok then error("this machine cannot enforce the profile: " .. tostring(check.error), 0) end
print("profile " .. profile:fingerprint():sub(1, 16) .. "…")
for _, q in ipairs{ { "filesystem.write", "notes.txt" }, { "filesystem.write", "/etc/passwd" },
                    { "network", "example.org:443" }, { "command.execute", "make test" } } do
  print(string.format("  %-16s %-16s -> %s", q[1], q[2], profile:access_for(q[1], q[2])))
end

-- The gate routes each requirement to the same profile.
local request = { summary = "run `echo hi`",
  requirements = { { kind = "command.execute", scope = "echo hi", match = "echo hi" } } }
print("gate, interactive: " .. rig.gate{ access = profile, approver = "interactive" }:evaluate(request).verdict)
print("gate, headless:    " .. rig.gate{ access = profile, approver = "headless" }:evaluate(request).reason)

-- The executor enforces it: a gated command stays blocked without a grant ...
local set <close> = rig.sandbox.executors(profile, { scratch_root = base .. "/scratch" })
local ex = assert(set:get("guide"))
local r, err = ex:run{ command = "echo hi" }
print("run without a grant: " .. (r and ("exit " .. r.code) or ("refused — " .. tostring(err))))
-- ... and an approval becomes a single-use grant for exactly that spawn.
local token = assert(ex:grant{ kind = "command.execute", target = "echo hi", command = "echo hi", cwd = ws })
local grant = { { token = token, kind = "command.execute", target = "echo hi" } }
r = assert(ex:run{ command = "echo hi", grants = grant })
print("run with the grant:  exit " .. r.code .. ", stdout \"" .. r.stdout:gsub("\n", "\\n") .. "\"")
r, err = ex:run{ command = "echo hi", grants = grant }
print("the same grant again: " .. (r and ("exit " .. r.code) or ("refused — " .. tostring(err))))

-- What a running command meets (commands allowed here, to look around).
local open_profile = rig.sandbox.profile{ workspace_root = ws, workspace_read = "allow",
  workspace_write = "allow", host_read = "allow", host_write = "deny", network = "deny",
  command = "allow" }
local open_set <close> = rig.sandbox.executors(open_profile, { scratch_root = base .. "/scratch2" })
local box = assert(open_set:get("look"))
local function try(label, command)
  local res = assert(box:run{ command = command, timeout = 20 })
  local text = (res.stdout .. res.stderr):gsub("%s+$", ""):gsub("\n", " ⏎ ")
  print(string.format("  %-28s exit %d  %s", label, res.code, text:sub(1, 90)))
end
print("inside the sandbox:")
try("write in the workspace", "echo draft > draft.txt && cat draft.txt")
try("write outside (host_write)", "echo x > /etc/luarig-guide-test")
try("HOME is the executor's own", "echo $HOME")
try("processes it can see", "ps -e 2>/dev/null | wc -l || ls /proc | grep -c '^[0-9]'")
try("network (denied)", "getent hosts example.org || echo no network")

-- restrict: a role below the selected profile, never wider than either.
local ceiling = rig.sandbox.profile{ workspace_root = ws, workspace_write = "deny", network = "deny",
  command = "allow" }
local role = rig.sandbox.restrict(open_profile, ceiling)
print(string.format("restrict(open, ceiling): workspace_write=%s network=%s command=%s",
  role.workspace_write, role.network, role.command))
