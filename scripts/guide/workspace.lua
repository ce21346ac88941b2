-- guide/workspace.lua: "Give an agent a workspace" — the four pieces.
--
--   build/luarig scripts/guide/workspace.lua [DIR]
--
--   1. tool definitions on the loop (the read guard lives in the file tools);
--   2. an access profile and its OS executor (bash runs through it);
--   3. an access gate on the loop (the profile is its access source, saved
--      rules in one explicit permission file, an approver);
--   4. a workspace placement and a snapshot policy on the rig.
--
-- Then a turn on a scripted model: a read, a read the guard refuses, an edit
-- and a command (both gated: this script approves them, as a person would),
-- the snapshot after the turn, a second session refused by the exclusive
-- root's lease, and a rewind to the snapshot taken before the edit. Last,
-- per-session placement: each session gets its own copy of a seed snapshot.

local function sh(cmd)
  local r = assert(rig.process.run{ argv = { "/bin/sh", "-c", cmd } })
  assert(r.code == 0, cmd .. ": " .. r.stderr)
  return (r.stdout:gsub("\n$", ""))
end
local function put(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end
local function get(path)
  local f = assert(io.open(path))
  local t = f:read("a")
  f:close()
  return t
end

local base = arg[1] or sh("mktemp -d")
local root, state = base .. "/workspace", base .. "/state"
sh("mkdir -p '" .. root .. "/private' '" .. state .. "' && rm -rf '" .. base .. "/scratch'")
put(root .. "/notes.txt", "shopping: tea\n")
put(root .. "/private/token", "not for models\n")

-- 1. Tools. The read guard (deny) is enforced inside the file tools.
local tools = {
  rig.tools.read_file{ deny = { ".git/objects", "private" }, max_bytes = 64 * 1024 },
  rig.tools.write_file(), rig.tools.edit_file(),
}

-- 2. A profile sets every capability; the executor enforces it on each command.
local profile = rig.sandbox.profile{
  workspace_root = root, workspace_read = "allow", workspace_write = "gated",
  host_read = "allow", host_write = "deny", network = "deny", command = "gated",
  home = "isolated", isolation = "sandboxed",
}
local set <close> = rig.sandbox.executors(profile, { scratch_root = base .. "/scratch", max = 8 })
tools[#tools + 1] = rig.tools.bash{ executor = assert(set:get("workspace-assistant")) }

-- 3. One gate for the loop: the profile decides allow / gated / deny per
-- requirement, saved rules settle gated ones, the approver asks the rest.
local gate = rig.gate{ access = profile, rules = rig.permissions.file(base .. "/permissions.json"),
                       approver = "interactive" }

local model = rig.model.script{
  { text = "Reading the notes.", tool_calls = {
      { name = "read_file", input = { path = "notes.txt" } },
      { name = "read_file", input = { path = "private/token" } } } },
  { text = "Adding milk.", tool_calls = {
      { name = "edit_file", input = { path = "notes.txt", old = "tea", new = "tea, milk" } } } },
  { tool_calls = { { name = "bash", input = { command = "cat notes.txt" } } } },
  { text = "Done: the list is now tea and milk." },
}
local assistant = rig.loop{ name = "workspace-assistant", model = model,
  system = "Help with files in the assigned workspace.", tools = tools, gate = gate,
  policy_revision = "workspace-policy-v1" }

-- 4. The placement and the snapshot policy.
local store <close> = rig.store.lmdb{ root = state }
local r = rig.define{
  loops = { assistant }, primers = { "workspace-assistant" }, store = store,
  workspace = rig.workspace.exclusive{ root = root },
  snapshots = { trigger = "turn_done", priority = "best_effort", timeout = 60 },
}
print("placement: " .. tostring(r.workspace) .. ", snapshots on " .. r.snapshots.trigger)

local s = assert(r:session())
local before = assert(s:checkpoint()) -- a manual snapshot before the turn
print("checkpoint before the turn: " .. before:sub(1, 24) .. "…")
local sub = s:subscribe{ loops = "all", ephemeral = true }
s:submit("add milk to my shopping list")
local turn_ref
for ev in sub:events() do
  if ev.type == "GateOpened" then
    print("gate: " .. ev.tool .. " — " .. ev.summary .. " → approve")
    s:respond_gate(ev.gate_id, "approve")
  elseif ev.type == "PermissionDecided" then
    print("gate: " .. ev.tool .. " — " .. ev.verdict .. " (" .. ev.source .. ")")
  elseif ev.type == "TurnDone" then
    print("answer: " .. ev.message.content[1].text)
  elseif ev.type == "WorkspaceCheckpointed" and ev.trigger == "turn_done" then
    turn_ref = ev.ref
    print("snapshot after the turn: " .. ev.ref:sub(1, 24) .. "… (" .. ev.consistency .. ")")
    break
  end
end
sub:close()
-- what the model was shown: every tool result of the turn
local names = {}
for _, m in ipairs(s:history()) do
  for _, b in ipairs(m.content) do
    if b.type == "tool_use" then names[b.id] = b.name .. " " .. (b.input.path or b.input.command or "") end
    if b.type == "tool_result" then
      print("  " .. names[b.tool_use_id] .. " -> " .. (b.content:gsub("\n+$", ""):gsub("\n", " ⏎ ")))
    end
  end
end
print("notes.txt now: " .. get(root .. "/notes.txt"):gsub("\n", ""))

-- An exclusive root is fenced by a lease: a second session cannot take it.
local s2, err = r:session()
print("second session on the same root: " .. (s2 and "opened?!" or ("refused — " .. tostring(err))))

-- Rewind (idle sessions only): the tree and the session's pointer move together.
local moved = assert(s:rewind(before))
print(string.format("rewound to the first checkpoint: %d written, %d removed; notes.txt: %s",
  moved.written, moved.removed, (get(root .. "/notes.txt"):gsub("\n", ""))))
for _, e in ipairs(s:snapshots()) do
  print("  " .. e.event .. " " .. e.ref:sub(1, 24) .. "… " .. tostring(e.trigger or ""))
end
assert(turn_ref, "no snapshot after the turn")
s:shutdown()

-- Per-session placement: base/<session id>, each populated from a seed snapshot.
local seed = assert(store:snapshot(root))
local per = rig.define{ loops = { rig.loop{ name = "a", model = rig.model.script{} } },
  primers = { "a" }, store = store, workspace = rig.workspace.per_session{ base = base .. "/sessions" } }
local a, b = assert(per:session{ seed = seed }), assert(per:session{ seed = seed })
print("per-session workspaces from one seed:")
print("  " .. a.workspace .. "/notes.txt: " .. get(a.workspace .. "/notes.txt"):gsub("\n", ""))
print("  " .. b.workspace .. "/notes.txt: " .. get(b.workspace .. "/notes.txt"):gsub("\n", ""))
a:shutdown()
b:shutdown()
