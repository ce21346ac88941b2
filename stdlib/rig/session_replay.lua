-- rig.session_replay: a session's journal folded back into loops, open
-- turns and open gates (fold), and r:restore(id), which rebuilds a live
-- session from it.

local core = require "rig.core"
local json = require "rig.json"
local base = require "rig.session_base"
local compaction = require "rig.session_compact"
local turns = require "rig.session_turn"
local delegation = require "rig.delegation"
local handoff = require "rig.handoff"
local resuming = require "rig.session_resume"
local workspace = require "rig.workspace"

local fail, emit, catalog, note_usage = base.fail, base.emit, base.catalog, base.note_usage
local check_options = base.check_options
local new_session, new_usage, add_usage, title_of =
  base.new_session, base.new_usage, base.add_usage, base.title_of
local loop_revisions, ws_hooks = base.loop_revisions, base.ws_hooks
local TERMINAL = base.TERMINAL
local context_of = compaction.context_of
local new_instance, start_primer = turns.new_instance, turns.start_primer

local M = {}

-- Folds the journal into loops, open turns and open gates (no I/O).
local function fold(records)
  local st = { loops = {}, order = {}, gates = {}, gate_order = {}, started = nil,
               last_quiescence = nil, counter = 0, usage = new_usage(), title = nil,
               children = 0, dg = delegation.new_fold(), rs = resuming.new_fold(),
               ho = handoff.new_fold() }
  local function inst(id)
    local l = st.loops[id]
    if not l then
      l = { id = id, history = {}, open_turn = nil }
      st.loops[id] = l
      st.order[#st.order + 1] = id
    end
    return l
  end
  local dfold, rfold, hfold = delegation.fold, resuming.fold, handoff.fold
  for _, r in ipairs(records) do
    if r.kind == "command" then
      local c = json.decode(r.body)
      dfold(st.dg, c, r.seq)
      rfold(st.rs, c, r.seq)
      hfold(st.ho, c)
    elseif r.kind == "event" then
      local ev = json.decode(r.body)
      local t = ev.type
      dfold(st.dg, ev, r.seq)
      rfold(st.rs, ev, r.seq)
      hfold(st.ho, ev)
      if t == "SessionStarted" then
        st.started = st.started or ev
      elseif t == "SessionForked" then
        st.forked_from = ev.forked_from
        st.title = st.title or ev.title
      elseif t == "LoopStarted" then
        local l = inst(ev.loop_id)
        l.loop = ev.loop
        if ev.history then
          -- a fork's loop starts with the origin's history at the cut
          l.history = ev.history
          l.context_tokens = ev.context_tokens
        end
        if ev.parent_loop_id then
          -- a child: the quota counts it
          l.parent, l.depth, l.display = ev.parent_loop_id, ev.depth, ev.name
          st.children = st.children + 1
        end
      elseif t == "TurnStarted" then
        local l = inst(ev.loop_id)
        l.history[#l.history + 1] = ev.message
        l.open_turn = ev.turn_id
        l.open_cause = ev.cause
        if not st.title then st.title = title_of(ev.message) end
      elseif t == "StepDone" then
        local l = inst(ev.loop_id)
        l.history[#l.history + 1] = ev.message
        if ev.results then l.history[#l.history + 1] = ev.results end
        add_usage(st.usage, ev.usage)
        l.context_tokens = context_of(ev.usage)
      elseif t == "CompactionCommitted" then
        -- [summary, retained…]: the tail after the replaced head, as it was
        local l = inst(ev.loop_id)
        local h = { ev.summary }
        table.move(l.history, ev.replaced + 1, #l.history, 2, h)
        l.history = h
        l.context_tokens = nil
        add_usage(st.usage, ev.usage)
      elseif t == "TurnResumed" then
        local l = inst(ev.loop_id)
        l.open_turn = ev.turn_id
        l.open_cause = ev.cause
      elseif t == "TurnFoldedInto" then
        local l = inst(ev.loop_id)
        l.history[#l.history + 1] = ev.message
      elseif TERMINAL[t] then
        inst(ev.loop_id).open_turn = nil
      elseif t == "PermissionRequested" then
        st.gates[ev.gate_id] = ev
        st.gate_order[#st.gate_order + 1] = ev.gate_id
      elseif t == "GateResolved" then
        st.gates[ev.gate_id] = nil
      elseif t == "SessionActive" or t == "SessionIdle" then
        st.last_quiescence = t
      elseif t == "GuardrailTripped" then
        -- nothing of the tripped step was committed; an input trip took the
        -- turn's input back out of the history
        local l = inst(ev.loop_id)
        if ev.history_len and ev.history_len < #l.history then
          for i = #l.history, ev.history_len + 1, -1 do l.history[i] = nil end
        end
        add_usage(st.usage, ev.usage)
      elseif t == "GuardrailChecked" then
        add_usage(st.usage, ev.usage)
      elseif t == "ActiveLoopChanged" then
        -- a handoff: the target's conversation (where input goes: rig.handoff's fold)
        if ev.history then
          local l = inst(ev.to)
          l.history = ev.history
          l.context_tokens = nil
        end
      end
    end
  end
  return st
end

-- The workspace events of a journal, decoded, with their seq.
local function workspace_events(records)
  local out = {}
  for _, r in ipairs(records) do
    if r.kind == "event" and r.body:find("\"Workspace", 1, true) then
      local ev = json.decode(r.body)
      if ev and (ev.type == "WorkspaceCheckpointed" or ev.type == "WorkspaceRestored"
                 or ev.type == "WorkspaceFaulted" or ev.type == "WorkspaceFaultCleared") then
        ev.seq = r.seq
        out[#out + 1] = ev
      end
    end
  end
  return out
end

-- A loop instance of the folded journal (f = st.loops[lid]) with its history:
-- the instance, its loop's name and definition, or nil when the rig no
-- longer defines that loop.
local function rebuild(S, r, f, lid)
  local name = f.loop or lid:match("^[^#]+")
  local def = r:loop(name)
  if not def then return nil end
  local inst = new_instance(S, def, lid, f.parent and { parent_id = f.parent,
    depth = f.depth or 1, display_name = f.display } or nil)
  inst.history = f.history
  inst.context_tokens = f.context_tokens
  return inst, name, def
end

local function restore(r, id, opts)
  if type(id) ~= "string" then fail("restore", "session id must be a string", 2) end
  local accept_drift = false
  if opts ~= nil then
    check_options("restore", opts, "accept_drift", "on_gate")
    accept_drift = opts.accept_drift == true
    local og = opts.on_gate
    if og ~= nil and type(og) ~= "function" and og ~= "approve" and og ~= "deny"
       and og ~= "terminal" then
      fail("restore", "option 'on_gate' must be a function or \"approve\", \"deny\" or "
        .. "\"terminal\"", 2)
    end
  end
  local csess, msg, code = core.session_open(r.store, id)
  if not csess then return nil, msg, code end
  local records, rerr, rcode = core.journal_read(r.store, id, 1, 0)
  if not records then csess:close() return nil, rerr, rcode end
  local st = fold(records)
  local S = new_session(r, csess)
  S.on_gate = opts and opts.on_gate -- the approver s:ask uses (rig.ask)
  if not st.started then
    emit(S, "RestoreErrored", { reason = "the journal has no SessionStarted" })
    csess:close()
    return nil, "session " .. id .. " has no SessionStarted record", "corrupt"
  end
  -- drift: every loop's policy revision against the one it started with
  local now = loop_revisions(r)
  local changed = {}
  for name, rev in pairs(st.started.loops or {}) do
    if now[name] ~= rev then changed[#changed + 1] = name end
  end
  for name in pairs(now) do
    if not (st.started.loops or {})[name] then changed[#changed + 1] = name end
  end
  table.sort(changed)
  if #changed > 0 and not accept_drift then
    local m = "the policy of loop(s) " .. table.concat(changed, ", ") ..
      " changed since the session started (pass { accept_drift = true } to accept)"
    emit(S, "RestoreErrored", { reason = m, drift = json.array(changed) })
    csess:close()
    return nil, m, "drift"
  end
  local ok
  if r.workspace then
    ok, msg, code = workspace.reopen(S, r, workspace_events(records), ws_hooks(S))
    if not ok then
      emit(S, "RestoreErrored", { reason = "workspace: " .. tostring(msg) })
      csess:close()
      return nil, msg, code
    end
  end
  ok, msg, code = emit(S, "RestoreStarted", { drift = json.array(changed),
    accepted = #changed > 0 or nil })
  if not ok then workspace.release(S.ws) csess:close() return nil, msg, code end
  for _, lid in ipairs(st.order) do
    local f = st.loops[lid]
    if rebuild(S, r, f, lid) and f.open_turn then
      local ti = { loop_id = lid, turn_id = f.open_turn, reason = "restored",
        cause = f.open_cause }
      emit(S, "TurnInterrupted", ti, false)
      delegation.fold(st.dg, ti)
      emit(S, "LoopIdle", { loop_id = lid }, false)
    end
  end
  -- the quota recounted; the hand-backs a crash left undelivered
  local handbacks = delegation.restored(S, st.dg, st.children)
  for _, name in ipairs(r.primers) do
    if not S.loops[name] then start_primer(S, r, name, false) end
  end
  for _, gid in ipairs(st.gate_order) do
    local g = st.gates[gid]
    if g then
      S.open_gates[gid] = { gate_id = gid, loop_id = g.loop_id, turn_id = g.turn_id,
        call_id = g.call_id, tool = g.tool, request = g.request, unmet = g.unmet,
        candidates = g.candidates, restored = true }
      S.gate_order[#S.gate_order + 1] = gid
    end
  end
  if st.last_quiescence == "SessionActive" then emit(S, "SessionIdle", {}, false) end
  -- the turns a crash or a shutdown cut that s:resume() can continue
  S.resumable_turns = resuming.restored(S, st.rs)
  S.usage_sum = st.usage
  S.title = st.title
  if st.ho.active and S.loops[st.ho.active] then S.active = st.ho.active end
  S.forked_from = st.forked_from
  -- the workspace at its last checkpoint-or-restore ref, failing closed
  local wstate = "none"
  if S.ws then
    wstate, msg, code = workspace.materialize(S)
    if not wstate then
      emit(S, "RestoreErrored", { reason = "workspace: " .. tostring(msg) })
      workspace.release(S.ws)
      csess:close()
      return nil, msg, code
    end
  end
  ok, msg, code = emit(S, "RestoreDone", { loops = #S.loop_order,
    open_gates = #S.gate_order, workspace = wstate,
    workspace_ref = S.ws and S.ws.current or nil, resumable = resuming.loop_ids(S),
    workspace_fault = S.ws and S.ws.fault or nil })
  if not ok then workspace.release(S.ws) csess:close() return nil, msg, code end
  if S.ws and S.ws.current then catalog(S, { workspace_ref = S.ws.current }) end
  catalog(S, { state = #S.gate_order > 0 and "waiting_on_gate" or "idle", status = "active",
    loop_count = #S.loop_order, title = S.title })
  note_usage(S)
  delegation.redeliver(S, handbacks, turns.runner)
  -- a handoff whose target turn a crash kept from starting starts now
  handoff.redeliver(S, st.ho, turns.runner)
  return S
end

M.fold, M.rebuild, M.restore = fold, rebuild, restore

return M
