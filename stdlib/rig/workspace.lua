-- rig.workspace: where a session's workspace lives (its placement) and when
-- it is snapshotted (the policy) — docs/sessions.md, docs/storage.md.
--
--   rig.workspace.exclusive{ root = "/abs/dir" }    -- one canonical root, fenced by the store
--                                                   -- lease "workspace-roots/<sha256(root)>"
--   rig.workspace.per_session{ base = "/abs/dir" }  -- base/<session id>, restored by staging
--                                                   -- then swapping
--   rig.workspace.shared{ root = "/abs/dir" }       -- no lease; checkpoints are "fuzzy"
--   p.kind, p.root (exclusive, shared) or p.base (per_session): canonical, read-only
--
-- On rig.define: workspace = <placement>, snapshots = { trigger = "manual" | "idle" |
-- "turn_done" | "step_done", priority = "best_effort" | "required", timeout = seconds }
-- (default { trigger = "idle", priority = "best_effort", timeout = 60 } with a placement;
-- snapshots without a workspace, required with a shared placement, and a store root that
-- overlaps the workspace are refused). Triggers: idle = the session went idle; turn_done =
-- after each turn's terminal event (done, failed or interrupted); step_done = after each
-- step that ran tools. best_effort never blocks: one capture runs and only the latest
-- edge waits behind it; a failure is retried at the next edge. required holds the
-- boundary (the next step, turn or idle) until the capture commits; a failure or a
-- timeout faults the workspace, journaled as WorkspaceFaulted: new input is refused
-- (code "workspace_faulted") until a capture succeeds (s:checkpoint(), with its own
-- { timeout = s } when the policy's was too short) or the user clears the fault after
-- looking at the tree (s:clear_fault()); either is journaled as WorkspaceFaultCleared.
-- A restore keeps a journaled fault unless it brings the tree back to the last
-- checkpoint (materialized, or attached to an equal tree): then it clears it (by "restore").
--
-- Session side (the runner calls these; users see the Session methods):
--   s.workspace                 -- the absolute canonical root (nil without a placement)
--   s:checkpoint([{ timeout = s }]) -> ref | nil, msg, code  -- a manual capture (any time;
--                               -- fuzzy if busy); timeout: this capture's (default the policy's)
--   s:clear_fault() -> true (a fault was cleared) | false (none)
--   s:rewind(ref) -> { written, removed } | nil, msg, code ("busy" unless idle)
--   s:snapshots() -> { { event = "WorkspaceCheckpointed" | "WorkspaceRestored", ref,
--                        trigger, consistency, seq, created_at }, … } oldest first
-- Events: WorkspaceCheckpointed{ ref, consistency = "quiescent" | "fuzzy", trigger =
-- "seed" | "fork" | "handover" | "manual" | "idle" | "turn_done" | "step_done", loop_id?,
-- turn_id? }, WorkspaceRestored{ ref } (rewind), WorkspaceFaulted{ trigger, code (the
-- capture's: "timeout", "lease_lost", …), message, loop_id?, turn_id? },
-- WorkspaceFaultCleared{ by = "checkpoint" | "user" | "restore", ref? }. RestoreDone carries
-- workspace = "materialized" | "attached" | "diverged" | "none", workspace_ref and, while
-- the fault stands, workspace_fault (its message).
-- An exclusive root at restore: empty -> the last checkpoint-or-restore ref is
-- materialized; equal to it -> "attached"; different -> "diverged" (left as it
-- is), unless the session's last record is a "handover" checkpoint (it gave the
-- root to a fork or to another session, s:shutdown{ hand_over = true }): then
-- the root is rewound in place to it, journaled as WorkspaceRestored{ ref,
-- trigger = "handover", displaced = <snapshot of what was there> }, "materialized".

local core = require "rig.core"

local M = {}

local KINDS = { exclusive = "root", per_session = "base", shared = "root" }
local TRIGGERS = { manual = true, idle = true, turn_done = true, step_done = true }
local PRIORITIES = { best_effort = true, required = true }
local DEFAULT_TIMEOUT = 60

local private = setmetatable({}, { __mode = "k" })

-- ---- paths ----

local function split(path)
  local parts = {}
  for p in path:gmatch("[^/]+") do parts[#parts + 1] = p end
  return parts
end

-- Abs + Clean + EvalSymlinks; a missing tail is kept as written (after its
-- existing ancestor is resolved), refusing "." and ".." in it.
local function canonical(path, where)
  if type(path) ~= "string" or path:sub(1, 1) ~= "/" then
    error(where .. " must be an absolute path", 0)
  end
  local parts = split(path)
  local tail = {}
  while true do
    local probe = "/" .. table.concat(parts, "/")
    local real = core.ws_realpath(probe)
    if real then
      for i = #tail, 1, -1 do
        if tail[i] == "." or tail[i] == ".." then
          error(where .. ": '" .. path .. "' has '" .. tail[i] .. "' in a part that does not exist", 0)
        end
        real = (real == "/" and "" or real) .. "/" .. tail[i]
      end
      return real
    end
    if #parts == 0 then error(where .. ": cannot resolve '" .. path .. "'", 0) end
    tail[#tail + 1] = table.remove(parts)
  end
end
M.canonical = canonical

local function overlaps(a, b)
  if a == b then return true end
  local function under(x, y) return x:sub(1, #y + 1) == (y == "/" and "/" or y .. "/") end
  return under(a, b) or under(b, a)
end

-- ---- placements ----

local placement_mt = {
  __index = function(t, k) return private[t][k] end,
  __newindex = function(_, k)
    error("rig.workspace: a placement is frozen (cannot set '" .. tostring(k) .. "')", 2)
  end,
  __tostring = function(t)
    local p = private[t]
    return "rig.workspace." .. p.kind .. "(" .. (p.root or p.base) .. ")"
  end,
  __metatable = "rig.workspace",
}

local function placement(kind)
  local field = KINDS[kind]
  return function(opts)
    local where = "rig.workspace." .. kind
    if type(opts) ~= "table" then error(where .. ": expects a table { " .. field .. " = … }", 2) end
    for k in pairs(opts) do
      if k ~= field then error(where .. ": unknown option '" .. tostring(k) .. "'", 2) end
    end
    local ok, path = pcall(canonical, opts[field], where .. ": option '" .. field .. "'")
    if not ok then error(path, 2) end
    local t = setmetatable({}, placement_mt)
    private[t] = { kind = kind, [field] = path, path = path }
    return t
  end
end

M.exclusive = placement("exclusive")
M.per_session = placement("per_session")
M.shared = placement("shared")

function M.is_placement(v)
  return type(v) == "table" and getmetatable(v) == "rig.workspace" and private[v] ~= nil
end

-- For rig.define: checks the placement and the policy together; returns the
-- normalized policy (nil without a placement). Raises "field '…' …" messages.
function M.check(ws, snaps, store)
  if ws == nil then
    if snaps ~= nil then error("field 'snapshots' needs a workspace (field 'workspace')", 0) end
    return nil
  end
  if not M.is_placement(ws) then
    error("field 'workspace' must be a rig.workspace placement (exclusive, per_session, shared)", 0)
  end
  local p = private[ws]
  local pol = { trigger = "idle", priority = "best_effort", timeout = DEFAULT_TIMEOUT }
  if snaps ~= nil then
    if type(snaps) ~= "table" then error("field 'snapshots' must be a table", 0) end
    for k, v in pairs(snaps) do
      if k == "trigger" then
        if not TRIGGERS[v] then
          error("field 'snapshots.trigger' must be 'manual', 'idle', 'turn_done' or 'step_done'", 0)
        end
      elseif k == "priority" then
        if not PRIORITIES[v] then
          error("field 'snapshots.priority' must be 'best_effort' or 'required'", 0)
        end
      elseif k == "timeout" then
        if type(v) ~= "number" or v < 0 or v ~= v then
          error("field 'snapshots.timeout' must be a number of seconds (0 means 60)", 0)
        end
        if v == 0 then v = DEFAULT_TIMEOUT end
      else
        error("unknown field 'snapshots." .. tostring(k) .. "'", 0)
      end
      pol[k] = v
    end
  end
  if p.kind == "shared" and pol.priority == "required" then
    error("field 'snapshots.priority': 'required' is refused with a shared workspace " ..
      "(its checkpoints are fuzzy)", 0)
  end
  local sroot = store:root()
  if sroot then
    local ok, real = pcall(canonical, sroot, "the store root")
    if ok and overlaps(real, p.path) then
      error("field 'workspace': the store root '" .. real .. "' overlaps the workspace '" ..
        p.path .. "' (keep the state directory outside the workspace)", 0)
    end
  end
  return pol
end

-- What joins the rig's fingerprint.
function M.identity(ws, pol)
  local p = private[ws]
  return { kind = p.kind, path = p.path },
         { trigger = pol.trigger, priority = pol.priority, timeout = pol.timeout }
end

-- ---- the session side ----

local function is_cancel(e)
  return type(e) == "string" and e:find("^cancelled") ~= nil
end

local function note(S, w, etype, fields, seq)
  w.history[#w.history + 1] = { event = etype, ref = fields.ref, trigger = fields.trigger,
    consistency = fields.consistency, seq = type(seq) == "number" and seq or nil,
    created_at = fields.created_at }
end

local function set_current(w, ref)
  w.current = ref
  w.catalog({ workspace_ref = ref })
end

-- Opens the placement for session S (after its session lease): the root
-- lease of an exclusive root, the directory. hooks = { emit, catalog }.
local function open(S, r, placement_v, pol, hooks)
  local p = private[placement_v]
  local w = { kind = p.kind, policy = pol, store = r.store, history = {}, activity = 0,
              slot = false, cond = core.cond(), emit = hooks.emit, catalog = hooks.catalog }
  w.sid = S.id
  if p.kind == "per_session" then
    w.base = p.base
    w.root = p.base .. "/" .. S.id
  else
    w.root = p.root
  end
  if p.kind == "exclusive" then
    local lease, msg, code = core.lease_acquire(r.store,
      "workspace-roots/" .. core.sha256_hex(w.root))
    if not lease then
      if code == "lease_held" then
        msg = "the workspace '" .. w.root .. "' is in use by another session (" .. msg .. ")"
      end
      return nil, msg, code
    end
    w.lease = lease
  end
  local ok, msg, code = core.ws_mkdirs(w.root)
  if not ok then
    if w.lease then w.lease:release() end
    return nil, msg, code
  end
  return w
end

function M.release(w)
  if w and w.lease then w.lease:release() w.lease = nil end
end

-- At creation: places the workspace and materializes a seed (before anything
-- is journaled, so a failure leaves no session behind but a fence). how:
-- "seed" (default) or "fork" (the checkpoint a fork starts from; nil: empty).
function M.create(S, r, seed, hooks, how)
  local pv, pol = r.workspace, r.snapshots
  if not pv then
    if seed ~= nil then
      return nil, "a seed snapshot needs a workspace (rig.define{ workspace = … })", "refused"
    end
    return true
  end
  local p = private[pv]
  if seed ~= nil and p.kind == "shared" then
    return nil, "a seed snapshot is refused for a shared workspace", "refused"
  end
  local w, msg, code = open(S, r, pv, pol, hooks)
  if not w then return nil, msg, code end
  if how == "fork" and p.kind == "exclusive" then
    -- the root its origin handed over (Session:fork): made equal in place to
    -- the checkpoint at the cut, or emptied when none was in force
    local ok
    if seed ~= nil then
      ok, msg, code = r.store:rewind(seed, w.root)
    else
      ok, msg, code = core.ws_remove_tree(w.root)
      if ok then ok, msg, code = core.ws_mkdirs(w.root) end
    end
    if not ok then
      M.release(w)
      return nil, "fork snapshot '" .. tostring(seed) .. "': " .. tostring(msg), code
    end
    w.seed, w.seed_trigger = seed, how
  elseif seed ~= nil then
    local empty = core.ws_dir_empty(w.root)
    local ok
    if not empty then
      ok, msg, code = nil, "a seed snapshot needs an empty workspace root ('" .. w.root ..
        "' is not empty)", "refused"
    else
      ok, msg, code = r.store:restore(seed, w.root)
    end
    if not ok then
      M.release(w)
      if p.kind == "per_session" then core.ws_remove_tree(w.root) end
      return nil, (how or "seed") .. " snapshot '" .. seed .. "': " .. tostring(msg), code
    end
    w.seed = seed
    w.seed_trigger = how
  end
  S.ws = w
  S.workspace = w.root
  return true
end

-- Right after SessionStarted: journals the seed.
function M.started(S)
  local w = S.ws
  if not (w and w.seed) then return true end
  local f = { ref = w.seed, consistency = "quiescent", trigger = w.seed_trigger or "seed" }
  local seq, msg, code = w.emit("WorkspaceCheckpointed", f)
  if not seq then return nil, msg, code end
  note(S, w, "WorkspaceCheckpointed", f, seq)
  set_current(w, w.seed)
  w.seed = nil
  return true
end

-- The checkpoint, restore and fault events of a journal (decoded bodies, in
-- order): the history, the current ref, the fault standing at the end (or nil).
function M.fold(events)
  local hist, current, fault = {}, nil, nil
  for _, ev in ipairs(events) do
    if ev.type == "WorkspaceCheckpointed" or ev.type == "WorkspaceRestored" then
      hist[#hist + 1] = { event = ev.type, ref = ev.ref, trigger = ev.trigger,
        consistency = ev.consistency, seq = ev.seq, created_at = ev.created_at }
      current = ev.ref
    elseif ev.type == "WorkspaceFaulted" then
      fault = tostring(ev.message)
    elseif ev.type == "WorkspaceFaultCleared" then
      fault = nil
    end
  end
  return hist, current, fault
end

-- Journals the end of a fault (after the capture or decision that ended it).
local function clear(S, w, by, ref)
  if not w.fault then return true end
  w.fault, w.fault_code = nil, nil
  w.last_error = nil
  return w.emit("WorkspaceFaultCleared", { by = by, ref = ref })
end

-- Repairs a half-finished swap of base/<id>: the backup goes back when the
-- root is missing; leftovers are removed.
local function recover_swap(w)
  local staging, backup = w.base .. "/." .. w.sid .. ".staging", w.base .. "/." .. w.sid .. ".old"
  if core.fs_lstat(backup) then
    if not core.fs_lstat(w.root) then
      local ok, msg, code = core.ws_rename(backup, w.root)
      if not ok then return nil, msg, code end
    else
      local ok, msg, code = core.ws_remove_tree(backup)
      if not ok then return nil, msg, code end
    end
  end
  return core.ws_remove_tree(staging)
end

-- Staged verify-then-swap: materialize into staging, rename the root away,
-- rename staging in, remove the backup.
local function swap_in(w, ref)
  local staging, backup = w.base .. "/." .. w.sid .. ".staging", w.base .. "/." .. w.sid .. ".old"
  local ok, msg, code = core.ws_remove_tree(staging)
  if not ok then return nil, msg, code end
  ok, msg, code = w.store:restore(ref, staging)
  if not ok then core.ws_remove_tree(staging) return nil, msg, code end
  if core.fs_lstat(w.root) then
    ok, msg, code = core.ws_rename(w.root, backup)
    if not ok then core.ws_remove_tree(staging) return nil, msg, code end
  end
  ok, msg, code = core.ws_rename(staging, w.root)
  if not ok then return nil, msg, code end
  return core.ws_remove_tree(backup)
end

-- At restore (after the drift check, before RestoreStarted): the placement
-- and its lease. Then M.materialize once the loops are built.
function M.reopen(S, r, events, hooks)
  local pv = r.workspace
  if not pv then return true end
  local w, msg, code = open(S, r, pv, r.snapshots, hooks)
  if not w then return nil, msg, code end
  w.history, w.current, w.fault = M.fold(events)
  if w.kind == "per_session" then
    local ok
    ok, msg, code = recover_swap(w)
    if not ok then M.release(w) return nil, msg, code end
  end
  S.ws = w
  S.workspace = w.root
  return true
end

-- Brings the tree to the last checkpoint-or-restore ref, failing closed.
-- Returns the outcome ("materialized", "attached", "diverged", "none"). A
-- journaled fault ends here when the tree is now that checkpoint.
local materialize
function M.materialize(S)
  local w = S.ws
  local outcome, msg, code = materialize(S)
  if (outcome == "materialized" or outcome == "attached") and w and w.current and w.fault then
    local ok, emsg, ecode = clear(S, w, "restore", w.current)
    if not ok then return nil, emsg, ecode end
  end
  return outcome, msg, code
end

materialize = function(S)
  local w = S.ws
  if not w then return "none" end
  if not w.current then return "attached" end
  if w.kind == "per_session" then
    local ok, msg, code = swap_in(w, w.current)
    if not ok then return nil, "cannot materialize '" .. w.current .. "': " .. tostring(msg), code end
    return "materialized"
  elseif w.kind == "exclusive" then
    if core.ws_dir_empty(w.root) then
      local ok, msg, code = w.store:restore(w.current, w.root)
      if not ok then return nil, "cannot materialize '" .. w.current .. "': " .. tostring(msg), code end
      return "materialized"
    end
    -- attach to what is there, saying whether it is still the checkpoint
    local ref, msg, code = w.store:snapshot(w.root)
    if not ref then return nil, "cannot check the workspace: " .. tostring(msg), code end
    if ref == w.current then return "attached" end
    local last = w.history[#w.history]
    if not (last and last.event == "WorkspaceCheckpointed" and last.trigger == "handover") then
      return "diverged"
    end
    -- the session handed the root over (a fork, the REPL's :attach): its tree
    -- comes back in place; what was there stays in the store as `displaced`
    local stats
    stats, msg, code = w.store:rewind(w.current, w.root)
    if not stats then return nil, "cannot materialize '" .. w.current .. "': " .. tostring(msg), code end
    local f = { ref = w.current, trigger = "handover", displaced = ref }
    local seq, emsg, ecode = w.emit("WorkspaceRestored", f)
    if not seq then return nil, emsg, ecode end
    note(S, w, "WorkspaceRestored", f, seq)
    return "materialized"
  end
  return "attached"
end

-- ---- captures ----

-- One walk, in the slot. held: the caller holds a boundary of its own loop.
-- timeout: this capture's (default the policy's).
local function walk(S, w, trigger, fields, held, timeout)
  timeout = timeout or w.policy.timeout
  if w.lease and w.lease:lost() then
    return nil, "the workspace root lease was lost", "lease_lost"
  end
  local function quiet()
    return w.kind ~= "shared" and S.busy <= (held and 1 or 0)
  end
  local act0, quiet0 = w.activity, quiet()
  local t = core.spawn(function()
    return { w.store:snapshot(w.root) }
  end)
  local res, msg, code = t:wait(timeout)
  if res == nil then
    if code == "timeout" then
      t:cancel()
      return nil, "the workspace capture timed out after " .. timeout .. " s", "timeout"
    end
    return nil, tostring(msg), code
  end
  if res[1] == nil then return nil, tostring(res[2]), res[3] end
  local ref = res[1]
  local consistency = (quiet0 and quiet() and act0 == w.activity) and "quiescent" or "fuzzy"
  if S.closed then return nil, "the session is shut down", "closed" end
  local f = { ref = ref, consistency = consistency, trigger = trigger,
              loop_id = fields and fields.loop_id, turn_id = fields and fields.turn_id }
  local seq, emsg, ecode = w.emit("WorkspaceCheckpointed", f)
  if not seq then return nil, emsg, ecode end
  note(S, w, "WorkspaceCheckpointed", f, seq)
  set_current(w, ref)
  w.last_error = nil
  local ok, cmsg, ccode = clear(S, w, "checkpoint", ref)
  if not ok then return nil, cmsg, ccode end
  return ref
end

-- Waits for the slot (FIFO through the condition), walks, frees the slot.
local function in_slot(S, w, f, ...)
  while w.slot do w.cond:wait() end
  w.slot = true
  local ok, a, b, c = pcall(f, S, w, ...)
  w.slot = false
  w.cond:signal()
  if not ok then return nil, tostring(a), is_cancel(a) and "cancelled" or "error" end
  return a, b, c
end

-- A capture in its own task (a cancelled caller does not cut it short). A
-- required boundary's failure faults the workspace, journaled (a failed
-- append faults the session itself).
local function capture(S, w, trigger, fields, held, timeout)
  local t = core.spawn(in_slot, S, w, walk, trigger, fields, held, timeout)
  local ref, msg, code = t:wait()
  if not ref then
    w.last_error = msg
    if w.policy.priority == "required" and trigger ~= "manual" and trigger ~= "handover"
       and not S.closed then
      w.fault, w.fault_code = msg, code or "error"
      w.emit("WorkspaceFaulted", { trigger = trigger, code = w.fault_code, message = msg,
        loop_id = fields and fields.loop_id, turn_id = fields and fields.turn_id })
    end
  end
  return ref, msg, code
end

local function best_effort(S, w, trigger, fields)
  if w.be_task then
    w.pending = { trigger, fields }   -- the latest edge wins
    return
  end
  w.be_task = core.spawn(function()
    local tr, fl = trigger, fields
    while tr and not S.closed and not w.closing do
      capture(S, w, tr, fl, false)
      local p = w.pending
      w.pending = nil
      if p then tr, fl = p[1], p[2] else tr = nil end
    end
    w.be_task = nil
  end)
end

-- The runner's one hook. trigger: "turn_start" (activity), "step_done",
-- "turn_done", "idle". Returns false when a required capture failed.
function M.edge(S, trigger, fields)
  local w = S.ws
  if not w or w.closing then return true end
  if trigger == "turn_start" then
    w.activity = w.activity + 1
    return true
  end
  if w.policy.trigger ~= trigger then return true end
  if w.policy.priority == "required" then
    return capture(S, w, trigger, fields, true) ~= nil
  end
  best_effort(S, w, trigger, fields)
  return true
end

-- Why new input is refused, or nil.
function M.refusal(S)
  local w = S.ws
  if not w then return nil end
  if w.fault then
    return "the workspace is faulted: the required snapshot failed: " .. tostring(w.fault) ..
      " (a successful s:checkpoint() clears it, s:checkpoint{ timeout = seconds } if it timed "
      .. "out; or s:clear_fault() once you have looked at the tree)", "workspace_faulted"
  end
  if w.rewinding then return "the workspace is being rewound", "busy" end
  return nil
end

-- The failure a turn ends with when its required step capture failed.
function M.failure(S)
  local w = S.ws
  return { code = "workspace_faulted", cause_code = w and w.fault_code,
    message = "the required workspace snapshot failed: " .. tostring(w and w.fault) }
end

function M.checkpoint(S, timeout)
  local w = S.ws
  if not w then return nil, "the rig has no workspace", "refused" end
  return capture(S, w, "manual", nil, false, timeout)
end

-- The user's decision that the tree is fine as it is: the refusal ends,
-- journaled (WorkspaceFaultCleared{ by = "user" }). false: no fault.
function M.clear_fault(S)
  local w = S.ws
  if not w or not w.fault then return false end
  local ok, msg, code = clear(S, w, "user")
  if not ok then return nil, msg, code end
  return true
end


-- Before a session gives its root up (Session:shutdown{ hand_over = true }):
-- a capture of an idle session, journaled with trigger "handover", which a
-- later restore brings back in place (M.materialize) whoever used the root.
function M.hand_over(S)
  local w = S.ws
  if not w then return nil, "the rig has no workspace", "refused" end
  if S.busy > 0 or w.rewinding then
    return nil, "the session is busy (handing its workspace over needs an idle session)", "busy"
  end
  local ref, msg, code = capture(S, w, "handover", nil, false)
  if ref and S.busy > 0 then
    -- input arrived while the capture ran: the session stays live
    return nil, "the session became busy while its workspace was captured", "busy"
  end
  return ref, msg, code
end

function M.rewind(S, ref)
  local w = S.ws
  if not w then return nil, "the rig has no workspace", "refused" end
  if S.busy > 0 then return nil, "the session is busy (rewind needs an idle session)", "busy" end
  if w.rewinding then return nil, "the workspace is being rewound", "busy" end
  w.rewinding = true
  local t = core.spawn(in_slot, S, w, function()
    if S.busy > 0 then return nil, "the session is busy (rewind needs an idle session)", "busy" end
    local stats, msg, code = w.store:rewind(ref, w.root)
    if not stats then return nil, msg, code end
    local f = { ref = ref }
    local seq, emsg, ecode = w.emit("WorkspaceRestored", f)
    if not seq then return nil, emsg, ecode end
    note(S, w, "WorkspaceRestored", f, seq)
    set_current(w, ref)
    return stats
  end)
  local stats, msg, code = t:wait()
  w.rewinding = false
  return stats, msg, code
end

function M.snapshots(S)
  local w = S.ws
  local out = {}
  for i, h in ipairs(w and w.history or {}) do
    local c = {}
    for k, v in pairs(h) do c[k] = v end
    out[i] = c
  end
  return out
end

-- At shutdown: lets a running capture finish (its pending successor is
-- dropped), then releases the root lease.
function M.close(S)
  local w = S.ws
  if not w then return end
  w.closing = true
  w.pending = nil
  if w.be_task then w.be_task:wait(w.policy.timeout + 5) end
  while w.slot do w.cond:wait(w.policy.timeout + 5) end
  M.release(w)
end

return M
