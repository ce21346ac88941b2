-- The warm in-process executor, for tests/bench/sandbox_bench.py.
--
--   luarig sandbox_warm.lua WORKSPACE RUNS
--
-- Builds one executor set (profile: the workspace read-write, network off,
-- commands allowed) and, after 3 warm-up runs, times RUNS runs of `true`
-- through executor:run{ argv } and RUNS plain rig.process.run{ argv } (the
-- unconfined fork+exec of the same runtime), alternating. Prints one JSON
-- line: confined_ms and plain_ms, lists of per-run wall milliseconds. From
-- the set's second run on, runs start from its pre-forked helper
-- (docs/sandbox.md, "A warm executor"), so every timed run does.
local ws, runs = arg[1], tonumber(arg[2] or "50")
if not ws or not runs then
  io.stderr:write("usage: sandbox_warm.lua WORKSPACE RUNS\n")
  os.exit(2)
end
local truebin = "/bin/true"
local p = rig.sandbox.profile{
  workspace_root = ws, workspace_read = "allow", workspace_write = "allow",
  host_read = "allow", host_write = "deny", network = "deny", command = "allow",
}
local set <close> = rig.sandbox.executors(p)
local ex = set:get("main")
local function confined()
  local r = assert(ex:run{ argv = { truebin }, timeout = 30 })
  assert(r.code == 0, "confined true exited " .. tostring(r.code) .. ": " .. tostring(r.stderr))
end
local function plain()
  local r = assert(rig.process.run{ argv = { truebin }, timeout = 30 })
  assert(r.code == 0)
end
for _ = 1, 3 do confined() plain() end
local c, u = {}, {}
for i = 1, runs do
  local t = rig.now() confined() c[i] = (rig.now() - t) * 1e3
  t = rig.now() plain() u[i] = (rig.now() - t) * 1e3
end
print(rig.json.encode{ confined_ms = c, plain_ms = u })
