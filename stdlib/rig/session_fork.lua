-- rig.session_fork: s:fork{ at = SEQ } — a new live session of the same
-- rig whose history is this one's up to a cut point of its journal and
-- whose workspace is the checkpoint in force there.

local core = require "rig.core"
local json = require "rig.json"
local base = require "rig.session_base"
local turns = require "rig.session_turn"
local replay = require "rig.session_replay"
local delegation = require "rig.delegation"
local workspace = require "rig.workspace"

local fail, check_open, emit, catalog, note_usage =
  base.fail, base.check_open, base.emit, base.catalog, base.note_usage
local check_options = base.check_options
local new_session, ws_hooks = base.new_session, base.ws_hooks
local TERMINAL = base.TERMINAL
local start_primer = turns.start_primer
local fold, rebuild = replay.fold, replay.rebuild

local M = {}

-- Records that start activity: a checkpoint journaled after the cut but
-- before the next of these still shows the tree as the cut left it.
local ACTIVITY = { TurnStarted = true, TurnResumed = true, StepDone = true,
                   TurnFoldedInto = true, WorkspaceRestored = true }

-- The cut points of a journal: a StepDone or a turn's terminal with no
-- other loop's turn in flight, and the end of a fork's seed (its last
-- LoopStarted carrying a history). Returns them, the tip, and why `at` is
-- not one.
local function cut_points(records, at)
  local evs, seed_end = {}, nil
  for i, r in ipairs(records) do
    if r.kind == "event" then
      local ev = json.decode(r.body)
      evs[i] = ev
      if ev.type == "LoopStarted" and ev.history then seed_end = r.seq end
    end
  end
  local open, cuts, why = {}, {}, nil
  local tip = records[#records] and records[#records].seq or 0
  local ENDS = "the end of a step or turn (StepDone, TurnDone, TurnFailed, TurnInterrupted)"
  for i, r in ipairs(records) do
    local ev = evs[i]
    if ev then
      local t = ev.type
      if t == "TurnStarted" or t == "TurnResumed" then open[ev.loop_id] = ev.turn_id end
      if TERMINAL[t] then open[ev.loop_id] = nil end
      local busy
      for lid, tid in pairs(open) do
        if lid ~= ev.loop_id then busy = busy or { lid, tid } end
      end
      local ends = t == "StepDone" or TERMINAL[t] or r.seq == seed_end
      if ends and not busy then cuts[#cuts + 1] = r.seq end
      if r.seq == at then
        if not ends then
          why = "seq " .. at .. " is a " .. tostring(t) .. " record, not " .. ENDS
        elseif busy then
          why = "at seq " .. at .. " loop '" .. busy[1] .. "' has turn " .. tostring(busy[2]) ..
            " in flight: it cannot be cut there"
        end
      end
    elseif r.seq == at then
      why = "seq " .. at .. " is a " .. r.kind .. " record, not " .. ENDS
    end
  end
  return cuts, tip, why
end

-- The workspace ref in force at the cut: the last checkpoint or restore at
-- or before it, or a checkpoint the cut's own edge took after it (before the
-- next activity).
local function ref_at(records, at)
  local ref
  for _, r in ipairs(records) do
    if r.kind == "event" and (r.seq <= at or r.body:find("\"Workspace", 1, true)
        or r.body:find("\"Turn", 1, true) or r.body:find("\"StepDone\"", 1, true)) then
      local ev = json.decode(r.body)
      local t = ev.type
      if r.seq > at and ACTIVITY[t] then break end
      if t == "WorkspaceCheckpointed" or (t == "WorkspaceRestored" and r.seq <= at) then
        ref = ev.ref
      end
    end
  end
  return ref
end

local FORK_REFUSED = {
  shared = "the rig's workspace is shared (one live root, no lease, fuzzy checkpoints): " ..
    "no fork can be given a tree of its own or be fenced from its origin in it " ..
    "(a fork needs a per_session or exclusive workspace)",
}

-- s:fork{ at = SEQ } -> a new live session (same rig) whose history is this
-- one's up to the committed step or turn ending at journal seq SEQ (default:
-- the last one) and whose workspace is the checkpoint in force there.
function M.fork(self, opts)
  check_open(self, "fork")
  local at
  if opts ~= nil then
    check_options("fork", opts, "at")
    at = opts.at
    if at ~= nil and (math.type(at) ~= "integer" or at < 1) then
      fail("fork", "option 'at' must be a positive integer (a journal seq)", 2)
    end
  end
  local r = self.rig
  local pv = r.workspace
  if pv and FORK_REFUSED[pv.kind] then
    return nil, "cannot fork session " .. self.id .. ": " .. FORK_REFUSED[pv.kind], "refused"
  end
  local records, rerr, rcode = core.journal_read(r.store, self.id, 1, 0)
  if not records then return nil, rerr, rcode end
  local cuts, tip, why = cut_points(records, at)
  if at == nil then
    at = cuts[#cuts]
    if not at then
      return nil, "cannot fork session " .. self.id .. ": it has no committed step yet",
        "invalid_request"
    end
  elseif at > tip then
    return nil, "cannot fork session " .. self.id .. " at seq " .. at ..
      ": it is beyond the journal's tip (" .. tip .. ")", "invalid_request"
  elseif why then
    return nil, "cannot fork session " .. self.id .. ": " .. why, "invalid_request"
  end
  local prefix = {}
  for _, rec in ipairs(records) do
    if rec.seq <= at then prefix[#prefix + 1] = rec end
  end
  local st = fold(prefix)
  local ref = pv and ref_at(records, at) or nil
  local origin = { session = self.id, at = at }
  -- an exclusive root holds one live session's tree: the origin (idle) is
  -- checkpointed and shut down, handing the root (and its lease) to the fork
  local handover, after
  if pv and pv.kind == "exclusive" and self.ws then
    local href, hmsg, hcode = self:shutdown{ hand_over = true }
    if not href then
      return nil, "cannot fork session " .. self.id .. ": " .. tostring(hmsg), hcode
    end
    handover = { session = self.id, ref = href }
    after = function(m)
      return "cannot fork session " .. self.id .. ": " .. tostring(m) .. " (session " .. self.id ..
        " was checkpointed and shut down first: r:restore('" .. self.id .. "') brings it back)"
    end
  end
  local function failed(m, c)
    return nil, after and after(m) or m, c
  end
  -- the new session: its lease, its workspace with the checkpoint's tree
  local csess, msg, code = core.session_open(r.store, nil)
  if not csess then return failed(msg, code) end
  local S = new_session(r, csess)
  local ok
  if pv then
    ok, msg, code = workspace.create(S, r, ref, ws_hooks(S), "fork")
    if not ok then csess:close() return failed(msg, code) end
  end
  local function undo(_, m, c)
    workspace.release(S.ws)
    csess:close()
    return failed(m, c)
  end
  ok, msg, code = emit(S, "SessionForked", { forked_from = origin, title = st.title,
    workspace_ref = ref })
  if ok then ok, msg, code = base.emit_started(S, r) end
  if ok and S.ws then ok, msg, code = workspace.started(S) end
  if not ok then return undo(nil, msg, code) end
  for i, lid in ipairs(st.order) do
    local f = st.loops[lid]
    local inst, name, def = rebuild(S, r, f, lid)
    if inst then
      ok, msg, code = emit(S, "LoopStarted", { loop_id = lid, loop = name,
        revision = def:revision(), parent_loop_id = f.parent, depth = f.parent and f.depth or nil,
        name = f.display, history = json.array(f.history), context_tokens = f.context_tokens },
        i == #st.order)
      if not ok then return undo(nil, msg, code) end
    end
  end
  for _, name in ipairs(r.primers) do
    if not S.loops[name] then
      ok, msg, code = start_primer(S, r, name)
      if not ok then return undo(nil, msg, code) end
    end
  end
  -- the loop a handoff made active at the cut stays active here
  local active = st.ho and st.ho.active
  if active and active ~= S.active and S.loops[active] then
    ok, msg, code = emit(S, "ActiveLoopChanged", { from = S.active, to = active, reason = "fork" })
    if not ok then return undo(nil, msg, code) end
    S.active = active
  end
  -- the delegation quota counts the children the fork inherited; requests
  -- still open at the cut are the origin's, not handed back here
  delegation.restored(S, delegation.new_fold(), st.children)
  S.title = st.title
  S.forked_from = origin
  S.handover = handover
  catalog(S, { state = "idle", status = "active", loop_count = #S.loop_order,
    title = S.title or "", forked_from = origin, workspace_ref = ref })
  note_usage(S)
  return S
end

return M
