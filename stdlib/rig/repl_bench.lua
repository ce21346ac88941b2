-- rig.repl_bench: the REPL as a workbench for live sessions.
--
--   luarig repl FILE.lua     -- a file returning a rig binds it to `r`
--   s = r:session()          -- or r:restore(id), :attach ID: the session is attached
--
-- The attached session's events are drawn above the prompt (rig.repl_render);
-- a gate it opens takes one key (y approve, a approve always, n deny,
-- ? details); gates of other live sessions of this REPL are announced and
-- listed by :gates, never dropped. Ctrl-C while the attached session runs a
-- turn interrupts that turn (lua/repl.c asks interrupt_turn()).
--
-- Commands (a line starting with ':'): :help, :reload, :sessions, :attach ID,
-- :detach, :gates, :interrupt, :resume [LOOP], :compact, :checkpoint, :rewind REF, :snapshots,
-- :log [FROM] (the journal, then follows it live until Ctrl-C), :journal [FROM],
-- :history [LOOP], :usage (paged; `s:history()` and the like typed alone too:
-- M.inspect), :fork [SEQ] (s:fork{ at = SEQ }, which in the REPL attaches the
-- fork; :sessions shows forks under their origin; with an exclusive root the
-- origin hands it over, and :attach of a session whose root another live one
-- holds here hands it back the same way: checkpointed, shut down, restorable). The prompt shows the
-- attached session's per-turn budget left when its loop has limits.max_tokens
-- or max_cost (M.show_budget).
--
-- lua/repl.c sets on rig.repl: key_mode(on) (the next key goes to on_key),
-- columns() (the terminal width), turn_busy(on) (what Ctrl-C should do),
-- rows() (the height, for the pager), set_prompt(prefix) (the budget).

local core = require "rig.core"
local render = require "rig.repl_render"
local define = require "rig.define"

local M = {}

local repl -- rig.repl, set on first use (it requires this module)
local function R()
  repl = repl or require "rig.repl"
  return repl
end

local state = {
  path = nil,        -- the rig file
  r = nil,           -- the rig it returned
  live = {},         -- id -> session opened in this process
  watched = setmetatable({}, { __mode = "k" }),  -- session -> true (a gate watcher runs)
  attached = nil,    -- the attached session
  follow = nil,      -- { sub, task, rd }
  queue = {},        -- gates waiting for a key: { S, g }
  asking = nil,      -- the gate the next key answers
}
M.state = state

local function out(lines)
  if type(lines) == "string" then lines = { lines } end
  if #lines == 0 then return end
  state.printed = (state.printed or 0) + 1
  print(table.concat(lines, "\n"))
end

local function color()
  local nc = os.getenv("NO_COLOR")
  return core.isatty(1) and (nc == nil or nc == "") and os.getenv("TERM") ~= "dumb"
end

local function columns()
  local f = R().columns
  local w = f and f() or nil
  return (w and w > 0) and w or 80
end

local function new_renderer()
  return render.new{ color = color(), width = columns }
end
M.new_renderer = new_renderer

local function busy_now()
  local S = state.attached
  return S ~= nil and not S.closed and (S.busy or 0) > 0
end

local function note_busy()
  local f = R().turn_busy
  if f then f(busy_now()) end
end

-- ---- gates ----

local ask_next

local function key_mode(on)
  local f = R().key_mode
  return f and f(on) or false
end

local function gate_candidates(S, g)
  local inst = S.loops and S.loops[g.loop_id]
  if not (inst and inst.gate and g.request) then return {} end
  local ok, d = pcall(inst.gate.evaluate, inst.gate, g.request)
  return ok and d and d.candidates or {}
end

ask_next = function()
  if state.asking then return end
  while #state.queue > 0 do
    local item = table.remove(state.queue, 1)
    local S, g, q = item.S, item.g, item.q
    if q and not S.closed and S.open_inputs and S.open_inputs[q.input_id]
       and not S.open_inputs[q.input_id].answer then
      state.asking = item
      if not key_mode(true) then
        out("  (no terminal: answer with :answer " .. q.input_id .. " accept FIELD=VALUE …)")
        state.asking = nil
        state.queue = {}
      end
      return
    end
    if g and not S.closed and S.open_gates[g.gate_id] and not S.open_gates[g.gate_id].answer then
      state.asking = item
      if item.announce then
        local rd = state.follow and state.follow.rd or new_renderer()
        out(rd:gate_lines(g))
      end
      if not key_mode(true) then
        out("  (no terminal: answer with s:respond_gate(\"" .. g.gate_id .. "\", \"approve\"))")
        state.asking = nil
        state.queue = {}
      end
      return
    end
  end
end

local ACTION = { y = "approve", a = "approve_always", n = "deny" }

-- repl.c hands the key pressed while key_mode is on. Returns true when the
-- key was used (the mode stays on while another gate waits).
function M.on_key(k)
  if state.pager then return M.pager_key(k) end
  local item = state.asking
  if not item then key_mode(false) return true end
  local S, g = item.S, item.g
  k = k:lower()
  if item.q then
    -- an MCP server's question: y accepts (the schema's defaults fill the fields),
    -- n declines, c cancels; :answer fills fields (the key mode is left for it)
    local q = item.q
    local act = ({ y = "accept", n = "decline", c = "cancel" })[k]
    if not act then
      if k:match("^[%g ]$") and not item.hinted then
        item.hinted = true
        out("  y, n or c (answering " .. q.input_id .. "); :answer " .. q.input_id .. " accept FIELD=VALUE …")
        state.asking = nil
        key_mode(false)
      end
      return true
    end
    state.asking = nil
    key_mode(false)
    local ok, msg = S:respond_input(q.input_id, act, act == "accept" and {} or nil)
    if not ok then out("  could not answer " .. q.input_id .. ": " .. tostring(msg)) end
    ask_next()
    return true
  end
  if k == "?" then
    local rd = state.follow and state.follow.rd or new_renderer()
    out(rd:gate_lines(g, { details = true }))
    return true
  end
  local action = ACTION[k]
  if not action then
    if k:match("^[%g ]$") and not item.hinted then
      item.hinted = true -- once: a line typed meanwhile should not flood the screen
      out("  y, a, n or ? (answering gate " .. g.gate_id .. ")")
    end
    return true
  end
  state.asking = nil
  key_mode(false)
  -- a restored gate's answer is journaled (it waits): answer in a task
  core.spawn_detached(function()
    local ok, msg = S:respond_gate(g.gate_id, action)
    if not ok then out("  could not answer gate " .. g.gate_id .. ": " .. tostring(msg)) end
  end)
  ask_next()
  return true
end

local function gate_resolved(gate_id, input_id)
  local function is(item)
    if gate_id then return item.g and item.g.gate_id == gate_id end
    return item.q and item.q.input_id == input_id
  end
  if state.asking and is(state.asking) then
    state.asking = nil
    key_mode(false)
  end
  for i = #state.queue, 1, -1 do
    if is(state.queue[i]) then table.remove(state.queue, i) end
  end
  ask_next()
end

-- ---- following the attached session ----

local function follower(S, sub, rd)
  for ev in sub:events() do
    if state.attached ~= S then break end
    local lines = rd:event(ev)
    M.note_budget(S, ev)
    if ev.type == "GateOpened" then
      local req = rd.requests[ev.gate_id] or {}
      state.queue[#state.queue + 1] = { S = S, g = { gate_id = ev.gate_id, tool = ev.tool,
        summary = ev.summary, loop_id = ev.loop_id, turn_id = ev.turn_id, request = req.request,
        unmet = req.unmet, candidates = req.candidates } }
      out(lines)
      ask_next()
    elseif ev.type == "UserInputRequested" then
      state.queue[#state.queue + 1] = { S = S, q = { input_id = ev.input_id, server = ev.server,
        message = ev.message, schema = ev.schema } }
      out(lines)
      ask_next()
    else
      out(lines)
      if ev.type == "GateResolved" then gate_resolved(ev.gate_id) end
      if ev.type == "UserInputResolved" then gate_resolved(nil, ev.input_id) end
    end
    if ev.type == "TurnStarted" or ev.type == "TurnResumed" or ev.ends_turn
      or ev.type == "SessionIdle" or ev.type == "SessionActive" then
      note_busy()
    end
  end
  out(rd:flush())
end

-- Other live sessions: their gates are announced (and kept open).
local function watcher(S, sub)
  for ev in sub:events() do
    if ev.type == "GateOpened" and state.attached ~= S then
      out(string.format("── gate %s open in session %s: %s %s (:attach %s to answer)",
        tostring(ev.gate_id), S.id, tostring(ev.tool), tostring(ev.summary or ""), S.id))
    end
    if ev.type == "UserInputRequested" and state.attached ~= S then
      out(string.format("── %s asks in session %s: %s (:attach %s to answer)",
        tostring(ev.server), S.id, tostring(ev.message or ""), S.id))
    end
  end
end

local function watch(S)
  if state.watched[S] then return end
  state.watched[S] = true
  local sub = S:subscribe{ loops = "all", ephemeral = false }
  core.spawn_detached(watcher, S, sub)
end

function M.detach()
  local f = state.follow
  state.follow = nil
  state.attached = nil
  if f then f.sub:close() end
  if state.asking then state.asking = nil; key_mode(false) end
  state.queue = {}
  note_busy()
  M.show_budget()
end

function M.attach(S, quiet)
  if state.attached == S then return S end
  M.detach()
  state.live[S.id] = S
  watch(S)
  local rd = new_renderer()
  local sub = S:subscribe{ loops = "all", ephemeral = true }
  state.attached = S
  state.follow = { sub = sub, rd = rd }
  state.follow.task = core.spawn_detached(follower, S, sub, rd)
  if not quiet then
    out(rd:dim("── attached to session " .. S.id .. " (" .. #S.loop_order .. " loop"
      .. (#S.loop_order == 1 and "" or "s") .. ": " .. table.concat(S.loop_order, ", ") .. ")"))
  end
  -- gates that were open before
  for _, g in ipairs(S:gates()) do
    g.candidates = gate_candidates(S, g)
    state.queue[#state.queue + 1] = { S = S, g = g, announce = true }
  end
  ask_next()
  note_busy()
  M.show_budget()
  _G.s = S
  return S
end

-- r:session() and r:restore() attach what they open (installed once, in the REPL).
local hooked = false
local function hook_sessions()
  if hooked then return end
  hooked = true
  local sm = require "rig.session"
  local methods = sm.rig_methods
  for _, name in ipairs { "session", "restore" } do
    local orig = methods[name]
    methods[name] = function(...)
      local S, msg, code = orig(...)
      if S then M.attach(S) end
      if S and name == "restore" then M.resume_hint(S) end
      return S, msg, code
    end
  end
  M.hook_fork(sm.Session)
end

-- ---- resuming ----

-- After a restore: the turns a crash or a shutdown cut, and how to go on.
function M.resume_hint(S)
  local rd = state.follow and state.follow.rd or new_renderer()
  for _, e in ipairs(S:resumable()) do
    local at = e.step_id and string.format(" at a step with %d tool call%s (%d done)", e.calls,
      e.calls == 1 and "" or "s", e.done) or ""
    out(rd:yellow("── turn " .. tostring(e.turn_id) .. " of " .. e.loop_id .. " was cut by "
      .. (e.reason == "shutdown" and "a shutdown" or "a crash") .. at .. ": :resume continues it"))
  end
end

local function resume_cmd(arg)
  local S = state.attached
  if not S then error("no session attached (s = r:session(), or :attach ID)", 0) end
  local loop = arg ~= "" and arg or nil
  if loop and not S.loops[loop] then error("no loop '" .. loop .. "' in this session", 0) end
  local ok, msg = S:resume(loop)
  if not ok then error("resume: " .. tostring(msg), 0) end
end

-- ---- forking ----

-- s:fork{ … } in the REPL says what it made and attaches the fork (as
-- r:session() does). Installed once, with the session hooks.
function M.hook_fork(Session)
  local orig = Session.fork
  if state.fork_hooked then return end
  state.fork_hooked = true
  Session.fork = function(S, ...)
    local refusal, empty = M.fork_refusal(S, ...)
    if refusal then return nil, refusal, "refused" end
    local F, msg, code = orig(S, ...)
    if F then
      out("forked " .. S.id .. " at " .. tostring(F.forked_from.at) .. " -> " .. F.id)
      if empty then out(empty) end
      if F.handover then M.handed_over(S.id) end
      M.attach(F)
    end
    return F, msg, code
  end
end

-- The workspace ref in force at journal seq `cut` (Session:fork's rule):
-- the last checkpoint or restore at or before it, or a checkpoint the cut's
-- own edge took after it, before the next activity. recs: the journal.
local TERMINAL = { TurnDone = true, TurnFailed = true, TurnInterrupted = true }
local ACTIVITY = { TurnStarted = true, StepDone = true, TurnFoldedInto = true,
                   WorkspaceRestored = true }
local function ref_in_force(recs, cut)
  local ref
  for _, rec in ipairs(recs) do
    if not rec.kind then -- an event
      local t = rec.type
      if rec.seq > cut and ACTIVITY[t] then break end
      if t == "WorkspaceCheckpointed" or (t == "WorkspaceRestored" and rec.seq <= cut) then
        ref = rec.ref
      end
    end
  end
  return ref
end

-- A fork of a session whose rig has a workspace, at a cut with no
-- checkpoint in force, would start from an empty tree while its history
-- says the work was done: with an exclusive root (the origin's files leave
-- the root for an empty one) the REPL refuses, saying the way out; with a
-- per_session one (the origin keeps its own) it forks and warns. Returns
-- the refusal, or nil and the warning to print after the fork, or nil
-- (Session:fork decides the rest).
function M.fork_refusal(S, opts)
  local pv = S.rig and S.rig.workspace
  if not (pv and (pv.kind == "exclusive" or pv.kind == "per_session")) then return nil end
  local at = type(opts) == "table" and opts.at or nil
  if at ~= nil and math.type(at) ~= "integer" then return nil end
  local ok, recs = pcall(function()
    local t = {}
    for rec in S:journal{} do t[#t + 1] = rec end
    return t
  end)
  if not ok then return nil end
  local cuts = {}
  for _, rec in ipairs(recs) do
    if not rec.kind and (rec.type == "StepDone" or TERMINAL[rec.type]) then cuts[#cuts + 1] = rec.seq end
  end
  local cut = at or cuts[#cuts]
  local is_cut = false
  for _, c in ipairs(cuts) do is_cut = is_cut or c == cut end
  if not is_cut or ref_in_force(recs, cut) then return nil end -- (a bad seq: fork says why)
  local later
  for _, c in ipairs(cuts) do
    if c > cut and ref_in_force(recs, c) then later = c break end
  end
  local way = ":checkpoint now and :fork at the last step"
  if later then way = "fork at seq " .. later .. " (the next step end with one), or " .. way end
  if pv.kind == "per_session" then
    return nil, "── the fork's workspace is empty: no checkpoint was in force at seq " .. cut ..
      " (its history says the work was done); for its files " .. way
  end
  return "cannot fork at seq " .. cut .. ": no workspace checkpoint is in force there, so the " ..
    "fork would start with an empty root while its history says the work was done; " .. way
end

-- What became of a session that handed an exclusive root over (a fork, :attach).
function M.handed_over(id)
  local short = id:sub(1, 8)
  out("exclusive workspace root: " .. short .. " was checkpointed and shut down; :attach " ..
    short .. " restores it")
end

-- :fork [SEQ]: forks the attached session at SEQ (default: its last
-- committed step) and attaches the fork.
local function fork_cmd(arg)
  local S = state.attached
  if not S then error("no session attached (s = r:session(), or :attach ID)", 0) end
  local at
  if arg ~= "" then
    at = math.tointeger(tonumber(arg))
    if not at or at < 1 then error("usage: :fork [SEQ] (SEQ: a journal seq, see :log)", 0) end
  end
  local F, msg = S:fork{ at = at }
  if not F then error("fork: " .. tostring(msg), 0) end
end
M.fork_cmd = fork_cmd

-- The catalog in family order: each fork right under its origin (origins
-- in the list's order). Returns the entries, and a function giving an
-- entry's id cell: the id's first 13 characters (a prefix :attach takes;
-- the table fits 80 columns), a fork's indented under its origin with
-- "└ " and "@SEQ", the origin's journal seq it was cut at.
function M.fork_tree(list)
  local byid, kids, roots = {}, {}, {}
  for _, e in ipairs(list) do byid[e.id] = e end
  for _, e in ipairs(list) do
    local o = e.forked_from and e.forked_from.session
    if o and byid[o] and o ~= e.id then
      kids[o] = kids[o] or {}
      kids[o][#kids[o] + 1] = e
    else
      roots[#roots + 1] = e
    end
  end
  local out, depth, seen = {}, {}, {}
  local function walk(e, d)
    if seen[e] then return end
    seen[e] = true
    out[#out + 1] = e
    depth[e] = d
    for _, k in ipairs(kids[e.id] or {}) do walk(k, d + 1) end
  end
  for _, e in ipairs(roots) do walk(e, 0) end
  for _, e in ipairs(list) do walk(e, 0) end -- a cycle's members (a broken catalog)
  return out, function(e)
    local d = depth[e] or 0
    local id = tostring(e.id)
    if #id > 13 then id = id:sub(1, 13) .. "…" end
    if d == 0 or not e.forked_from then return id end
    return string.rep("  ", d - 1) .. "└ " .. id .. " @" .. tostring(e.forked_from.at)
  end
end

-- ---- Ctrl-C ----

-- Called by repl.c on Ctrl-C while turn_busy was on: interrupts the turn.
function M.interrupt_turn()
  local S = state.attached
  if not (S and not S.closed) then return false end
  local any = S:interrupt()
  if any then out(state.follow.rd:yellow("── interrupting the turn (Ctrl-C again within 1 s cancels the running chunk)")) end
  return any
end

-- ---- loading a rig ----

local function describe(r, path)
  local lines = {}
  local names = {}
  for _, l in ipairs(r.loops) do names[#names + 1] = l.name .. " (" .. l:revision():sub(1, 12) .. ")" end
  lines[1] = "r = " .. tostring(r) .. " from " .. path
  lines[2] = "  loops      " .. table.concat(names, ", ")
  lines[3] = "  primers    " .. table.concat(r.primers, ", ") .. " (active " .. tostring(r.active_primer) .. ")"
  local st = r.store
  local root = st and st.root and st:root()
  lines[4] = "  store      " .. (root and ("lmdb " .. root) or "memory")
  local ws = r.workspace
  lines[5] = "  workspace  " .. (ws and tostring(ws) or "none")
  lines[6] = "  try        s = r:session(); s:submit(\"hello\")   (:help for commands)"
  return lines
end

-- repl.c runs FILE as the first chunk; its values come here.
function M.loaded(path, ...)
  local v = ...
  if not define.is_rig(v) then return end
  hook_sessions()
  state.path, state.r = path, v
  _G.r = v
  out(describe(v, path))
end

-- every loop's policy revision by name (what a restore checks for drift)
local revisions = require("rig.session_base").loop_revisions

local function reload()
  if not state.path then return out("nothing to reload: start with `luarig repl FILE.lua`") end
  local fn, err = loadfile(state.path, "t")
  if not fn then return out("error: " .. tostring(err)) end
  local v = fn()
  if not define.is_rig(v) then return out("error: " .. state.path .. " did not return a rig") end
  local old, new = state.r and revisions(state.r) or {}, revisions(v)
  local lines, names = {}, {}
  for n in pairs(old) do names[n] = true end
  for n in pairs(new) do names[n] = true end
  local sorted = {}
  for n in pairs(names) do sorted[#sorted + 1] = n end
  table.sort(sorted)
  for _, n in ipairs(sorted) do
    local a, b = old[n], new[n]
    if not a then lines[#lines + 1] = "  + " .. n .. " (new loop)"
    elseif not b then lines[#lines + 1] = "  - " .. n .. " (removed)"
    elseif a ~= b then lines[#lines + 1] = "  ~ " .. n .. ": revision " .. a:sub(1, 12) .. " -> " .. b:sub(1, 12)
    else lines[#lines + 1] = "  = " .. n .. " unchanged" end
  end
  state.r = v
  _G.r = v
  table.insert(lines, 1, "reloaded " .. state.path .. " (new sessions use it; live ones keep theirs)")
  out(lines)
end

-- ---- commands ----

local function need_session()
  local S = state.attached
  if not S then error("no session attached (s = r:session(), or :attach ID)", 0) end
  return S
end

local function ago(t)
  if type(t) ~= "number" then return "?" end
  local d = math.floor(math.max(0, core.time() - t))
  if d < 60 then return string.format("%ds ago", d) end
  if d < 3600 then return string.format("%dm ago", d // 60) end
  if d < 86400 then return string.format("%dh ago", d // 3600) end
  return string.format("%dd ago", d // 86400)
end

local function table_lines(rows, head)
  local widths = {}
  for _, row in ipairs({ head, table.unpack(rows) }) do
    for i, c in ipairs(row) do widths[i] = math.max(widths[i] or 0, utf8.len(c) or #c) end
  end
  local lines = {}
  for _, row in ipairs({ head, table.unpack(rows) }) do
    local cells = {}
    for i, c in ipairs(row) do cells[i] = c .. string.rep(" ", widths[i] - (utf8.len(c) or #c)) end
    lines[#lines + 1] = (table.concat(cells, "  "):gsub("%s+$", ""))
  end
  return lines
end

local function sessions_cmd()
  local r = state.r or error("no rig loaded (luarig repl FILE.lua)", 0)
  local list, msg = r:sessions()
  if not list then error(msg, 0) end
  table.sort(list, function(a, b) return (a.last_active_at or 0) > (b.last_active_at or 0) end)
  state.catalog_ids = {}
  for i, e in ipairs(list) do state.catalog_ids[i] = e.id end
  local rows = {}
  local tree, id_cell = M.fork_tree(list)
  for _, e in ipairs(tree) do
    local title = tostring(e.title or "")
    if (utf8.len(title) or #title) > 30 then title = title:sub(1, 29) .. "…" end
    local mark = (state.attached and state.attached.id == e.id) and "*" or " "
    rows[#rows + 1] = { mark .. id_cell(e), title, tostring(e.state or e.status or "?"),
      ago(e.last_active_at), string.format("%d/%d", e.input_tokens or 0, e.output_tokens or 0),
      string.format("$%.4f", e.cost or 0) }
  end
  if #rows == 0 then return out("no sessions in this store") end
  out(table_lines(rows, { " id", "title", "state", "last active", "tokens in/out", "cost" }))
end

local function find_id(prefix)
  local r = state.r or error("no rig loaded (luarig repl FILE.lua)", 0)
  if state.live[prefix] then return prefix end
  local list = r:sessions() or {}
  local hits = {}
  for _, e in ipairs(list) do
    if e.id == prefix then return e.id end
    if e.id:sub(1, #prefix) == prefix then hits[#hits + 1] = e.id end
  end
  if #hits > 1 then
    table.sort(hits)
    local shown = table.concat(hits, ", ", 1, math.min(#hits, 4)) .. (#hits > 4 and ", …" or "")
    error("session id '" .. prefix .. "' is ambiguous: " .. #hits .. " sessions start with it (" ..
      shown .. ")", 0)
  end
  return hits[1] or prefix
end
M.find_id = find_id

local function attach_cmd(arg)
  if arg == "" then error("usage: :attach ID", 0) end
  local id = find_id(arg)
  local S = state.live[id]
  if S and not S.closed then M.attach(S) return end
  local r = state.r
  -- an exclusive root holds one live session's tree: the one holding it here
  -- hands it over (checkpointed, shut down) so the restore can take it
  local pv = r.workspace
  if pv and pv.kind == "exclusive" then
    for lid, L in pairs(state.live) do
      if lid ~= id and not L.closed and L.ws and L.ws.lease and L.ws.root == pv.root then
        local ok, msg = L:shutdown{ hand_over = true }
        if not ok then error("cannot attach " .. id .. ": " .. lid .. " holds the workspace root " ..
          "and cannot hand it over: " .. tostring(msg), 0) end
        if state.attached == L then M.detach() end
        M.handed_over(lid)
      end
    end
  end
  local res, msg = r:restore(id) -- attaches through the hook
  if not res then error("cannot attach " .. id .. ": " .. tostring(msg), 0) end
end

local function gates_cmd()
  local rows = {}
  for id, S in pairs(state.live) do
    if not S.closed then
      for _, g in ipairs(S:gates()) do
        rows[#rows + 1] = { (state.attached == S and "*" or " ") .. id, g.gate_id, tostring(g.tool),
          tostring(g.request and g.request.summary or "") }
      end
    end
  end
  if #rows == 0 then return out("no open gates") end
  table.sort(rows, function(a, b) return a[2] < b[2] end)
  out(table_lines(rows, { " session", "gate", "tool", "request" }))
end

local function rec_line(rd, rec)
  return rd:record_line(rec)
end
M.rec_line = rec_line

local function log_cmd(arg)
  local S = need_session()
  local from = tonumber(arg) or 1
  local rd = new_renderer()
  local last = from - 1
  for rec in S:journal{ from = from } do
    out(rec_line(rd, rec))
    last = rec.seq
  end
  out(rd:dim("── following the journal (Ctrl-C stops)"))
  local sub <close> = S:subscribe{ loops = "all", ephemeral = false }
  for ev in sub:events() do
    if ev.seq and ev.seq > last then out(rec_line(rd, ev)); last = ev.seq end
  end
end

local function snapshots_cmd()
  local S = need_session()
  M.page(new_renderer():snapshot_lines(S:snapshots() or {}))
end

local function resolve_ref(S, arg)
  local list = S:snapshots() or {}
  local n = tonumber(arg)
  if n and list[n] then return list[n].ref end
  for _, sn in ipairs(list) do
    if sn.ref == arg then return arg end
  end
  local hit
  for _, sn in ipairs(list) do
    if tostring(sn.ref):find(arg, 1, true) then
      if hit and hit ~= sn.ref then error("snapshot '" .. arg .. "' is ambiguous", 0) end
      hit = sn.ref
    end
  end
  return hit or arg
end

local HELP = {
  ":sessions          the store's sessions (* = attached, forks under their origin)",
  ":attach ID         attach a session (a unique id prefix is enough; restores it if needed)",
  ":detach            stop drawing the attached session's events",
  ":gates             open gates of this REPL's sessions",
  ":interrupt         interrupt the attached session's turn (also Ctrl-C while it runs)",
  ":compact           compact the attached session's history",
  ":checkpoint        snapshot the workspace now",
  ":snapshots         the workspace checkpoints",
  ":rewind REF        rewind the workspace (REF: a ref, a part of one, or a :snapshots number)",
  ":log [FROM]        the journal from FROM, then follow it live (Ctrl-C stops)",
  ":journal [FROM]    the journal from FROM (default 1), paged",
  ":history [LOOP]    the conversation as the model sees it, paged",
  ":usage             the attached session's tokens and cost",
  "                   (s:history(), s:usage(), s:snapshots(), s:journal{...} typed alone print the same)",
  ":mcp [NAME]        the MCP servers (or one server's tools); :mcp restart NAME",
  ":answer ID ACTION [FIELD=VALUE …]  answer an MCP server's question (accept, decline, cancel)",
  "pager: space = next page, Enter = next line, q = stop",
  ":reload            run the rig file again (new sessions use it)",
  ":resume [LOOP]     continue the turns a crash or a shutdown cut (after :attach / r:restore)",
  ":fork [SEQ]        fork the attached session at journal seq SEQ (default: its last step)",
  "                   (an exclusive workspace root passes to the fork: the origin is",
  "                   checkpointed and shut down, and :attach restores it)",
}

local COMMANDS = {
  help = function() out(HELP) end,
  reload = reload,
  sessions = sessions_cmd,
  attach = attach_cmd,
  detach = function() M.detach() out("detached") end,
  gates = gates_cmd,
  interrupt = function()
    local S = need_session()
    out(S:interrupt() and "interrupted" or "nothing to interrupt")
  end,
  compact = function()
    local S = need_session()
    local res, msg = S:compact()
    if not res then error("compact: " .. tostring(msg), 0) end
    out(string.format("compacted: %d messages summarized, %d kept", res.replaced or 0, res.retained or 0))
  end,
  checkpoint = function()
    local S = need_session()
    local ref, msg = S:checkpoint()
    if not ref then error("checkpoint: " .. tostring(msg), 0) end
    out("checkpoint " .. tostring(type(ref) == "table" and (ref.ref or R().pretty(ref)) or ref))
  end,
  snapshots = snapshots_cmd,
  rewind = function(arg)
    local S = need_session()
    if arg == "" then error("usage: :rewind REF", 0) end
    local ref = resolve_ref(S, arg)
    local res, msg = S:rewind(ref)
    if not res then error("rewind: " .. tostring(msg), 0) end
    out("rewound to " .. ref)
  end,
  log = log_cmd,
  journal = function(arg) M.inspect_journal(need_session(), tonumber(arg) or 1) end,
  history = function(arg) M.page(new_renderer():history_lines(need_session():history(arg ~= "" and arg or nil))) end,
  usage = function() M.page(new_renderer():usage_lines(need_session():usage())) end,
  fork = fork_cmd,
  -- :mcp                 the MCP servers of this process: name, state, protocol, tools
  -- :mcp NAME            that server's tools as loops see them (NAME__TOOL: description)
  -- :mcp restart NAME    starts a dead server again
  mcp = function(arg)
    local mcp = require "rig.mcp"
    local verb, name = arg:match("^(%S+)%s+(%S+)$")
    if verb ~= "restart" then name = arg ~= "" and arg or nil end
    local lines = {}
    for _, c in ipairs(mcp.clients()) do
      if not name then
        local st, why = c:status()
        local n = c.tool_cache and #c.tool_cache or "?"
        lines[#lines + 1] = string.format("%-16s %-6s %-5s %-10s %s tools%s", c.name, c.kind or "?",
          st, c.protocol_version or "-", tostring(n), why and ("  (" .. why .. ")") or "")
      elseif c.name == name then
        if verb == "restart" then
          local ok, err = c:restart()
          out(ok and ("restarted " .. name) or ("restart " .. name .. ": " .. tostring(err)))
          return
        end
        local list, err = c:tools()
        if not list then error("mcp: " .. tostring(err), 0) end
        for _, t in ipairs(list) do
          lines[#lines + 1] = t.name .. ": " .. (t.description:gsub("%s+", " "))
        end
      end
    end
    if #lines == 0 then
      out(name and ("no MCP server named '" .. name .. "'") or "no MCP servers")
      return
    end
    M.page(lines)
  end,
  resume = resume_cmd,
  -- :answer ID accept|decline|cancel [FIELD=VALUE …]: an MCP server's question
  -- (typed as the schema says: a string field takes the text, an array field
  -- VALUE,VALUE; otherwise numbers, true and false are typed, anything else a string)
  answer = function(arg)
    local S = need_session()
    local id, action, rest = arg:match("^(%S+)%s+(%a+)%s*(.-)%s*$")
    if not id then error("usage: :answer ID accept|decline|cancel [FIELD=VALUE …]", 0) end
    if action ~= "accept" and action ~= "decline" and action ~= "cancel" then
      error("answer: the action must be accept, decline or cancel", 0)
    end
    local content = {}
    local q = S.open_inputs and S.open_inputs[id]
    local props = q and type(q.schema) == "table" and type(q.schema.properties) == "table"
      and q.schema.properties or {}
    for k, v in rest:gmatch("([%w_%-]+)=(%S+)") do
      local p = props[k]
      if type(p) == "table" and p.type == "array" then
        -- a multiple choice: VALUE,VALUE
        local list = {}
        for item in v:gmatch("[^,]+") do list[#list + 1] = item end
        content[k] = require("rig.json").array(list)
      elseif type(p) == "table" and p.type == "string" then content[k] = v
      elseif v == "true" then content[k] = true
      elseif v == "false" then content[k] = false
      elseif math.tointeger(tonumber(v)) then content[k] = math.tointeger(tonumber(v))
      elseif tonumber(v) then content[k] = tonumber(v)
      else content[k] = (v:gsub("^\"(.*)\"$", "%1")) end
    end
    local ok, msg = S:respond_input(id, action, action == "accept" and content or nil)
    if not ok then error("answer: " .. tostring(msg), 0) end
  end,
}

-- :flows and :flow (rig.flow's runs: stdlib/rig/flow/repl.lua)
do
  local cmds, help = require("rig.flow.repl").install(out, function(lines) M.page(lines) end)
  for k, f in pairs(cmds) do COMMANDS[k] = f end
  for _, l in ipairs(help) do HELP[#HELP + 1] = l end
end

-- ---- chat mode, and leaving ----
--
-- :chat enters chat mode: each line typed (one that does not start with
-- ':') is submitted to the attached session as input, and the prompt comes
-- back when the session is idle again; the turn is drawn as it streams (the
-- follower) and a gate takes its one key meanwhile. With a rig loaded and
-- no session attached, the first line starts one (r:session()). :chat
-- again (or :lua) goes back to Lua; `:chat TEXT` sends one line without
-- entering the mode. The prompt says "chat> " while the mode is on.

state.chat = false

local function chat_send(text)
  local S = state.attached
  if not S or S.closed then
    if not state.r then error("no session to talk to: load a rig (luarig repl FILE.lua) or attach one", 0) end
    local F, msg = state.r:session() -- attaches through the hook
    if not F then error("cannot start a session: " .. tostring(msg), 0) end
    S = F
  end
  -- submitted from a task of its own: the turn it starts is not a child of
  -- this chunk, so cancelling the wait (Ctrl-C twice) leaves the turn alone
  -- files given with :file go with this line as image or document blocks
  local input = text
  if state.pending_media and #state.pending_media > 0 then
    input = { { type = "text", text = text } }
    for _, spec in ipairs(state.pending_media) do input[#input + 1] = spec end
    state.pending_media = nil
  end
  local t = core.spawn_detached(function() return S:submit(input) end)
  local cid, msg = t:wait()
  if not cid then error("submit: " .. tostring(msg), 0) end
  local ok, werr, wcode = S:wait_idle()
  -- a failed or interrupted turn was drawn with its events already
  if not ok and wcode ~= "turn_failed" and wcode ~= "interrupted" then error(tostring(werr), 0) end
end
M.chat_send = chat_send

local function set_chat(on)
  state.chat = on
  M.show_budget()
end

-- rig.repl.compile asks here first: in chat mode a line that is not a
-- ':' command is chat input. Returns the chunk's function, or nil.
function M.chat_line(src)
  if not state.chat or src:match("^%s*:%a") then return nil end
  return function() chat_send(src) end
end

COMMANDS.chat = function(arg)
  if arg ~= "" then return chat_send(arg) end
  if state.chat then
    set_chat(false)
    return out("── Lua again (:chat talks to the session)")
  end
  if not state.attached and not state.r then
    error("no session to talk to: load a rig (luarig repl FILE.lua) or attach one", 0)
  end
  set_chat(true)
  out("── chat with " .. (state.attached and ("session " .. state.attached.id:sub(1, 8))
    or "a new session") .. ": each line is its input (:chat again for Lua)")
end
-- :file PATH [PATH …]: images (PNG, JPEG, WebP, GIF) or documents (PDF,
-- .txt) for the next chat line; checked now (type and size, rig.media).
COMMANDS.file = function(arg)
  if arg == "" then
    local n = state.pending_media and #state.pending_media or 0
    return out(n == 0 and "no files for the next line (:file PATH …)"
      or (n .. " file(s) go with the next line"))
  end
  local media = require "rig.media"
  for path in arg:gmatch("%S+") do
    local spec
    for _, t in ipairs { "image", "document" } do
      local b = media.check({ type = t, path = path })
      if b then spec = { type = t, path = path, name = b.name } out(string.format(
        "── %s %s (%s, %d bytes) goes with the next chat line", t, b.name, b.media_type, b.size))
        break
      end
    end
    if not spec then
      local _, why = media.check({ type = "image", path = path }, path)
      local _, dwhy = media.check({ type = "document", path = path }, path)
      error("file: " .. ((why or ""):find("cannot read", 1, true) and why or dwhy), 0)
    end
    state.pending_media = state.pending_media or {}
    state.pending_media[#state.pending_media + 1] = spec
  end
end
COMMANDS.lua = function()
  if state.chat then set_chat(false) end
  out("── Lua")
end
COMMANDS.quit = function()
  local q = R().quit
  if q then q() end
end

for _, line in ipairs {
  ":chat [TEXT]       chat mode: each line is input to the attached session (TEXT: one line);",
  "                   :chat again or :lua goes back to Lua",
  ":file PATH …       images or documents (PNG, JPEG, WebP, GIF, PDF, .txt) for the next chat line",
  ":quit              leave the REPL (Ctrl-D on an empty line does the same)",
} do HELP[#HELP + 1] = line end

-- The commands' names, for completion (rig.repl.complete).
function M.command_names()
  local names = {}
  for name in pairs(COMMANDS) do names[#names + 1] = name end
  table.sort(names)
  return names
end

-- Completion of a command's argument: session ids for :attach (the
-- catalog's and this REPL's live ones), loop names for :history.
function M.complete_argument(cmd, word)
  local out, seen = {}, {}
  local function add(v)
    v = tostring(v)
    if v:sub(1, #word) == word and not seen[v] then seen[v] = true; out[#out + 1] = v end
  end
  if cmd == "attach" or cmd == "resume" then
    -- completion runs outside any task, where the catalog cannot be read:
    -- the ids of the last read, which a task refreshes for the next Tab
    for id in pairs(state.live) do add(id) end
    for _, id in ipairs(state.catalog_ids or {}) do add(id) end
    local r = state.r
    if r and not state.catalog_reading then
      state.catalog_reading = true
      core.spawn_detached(function()
        local list = r:sessions()
        state.catalog_reading = false
        if list then
          local ids = {}
          for _, e in ipairs(list) do ids[#ids + 1] = e.id end
          state.catalog_ids = ids
        end
      end)
    end
  elseif cmd == "history" and state.attached then
    for _, lid in ipairs(state.attached.loop_order or {}) do add(lid) end
  end
  return out
end

-- ---- budgets in the prompt ----
--
-- A loop's limits.max_tokens / max_cost are per turn (rig.session fails the
-- turn once its input + output tokens or its cost reach them). The prompt
-- shows what is left of that per-turn budget for the attached session's
-- loop that ran last: "ID [tokens 12.3k/20k left, $0.42/$0.50 left]> ".
-- While a turn runs the figures drop after each step; after it they say what
-- that turn left (the next turn starts with the whole budget again); before
-- any turn, the whole budget. A session whose loops have no such limits
-- keeps the plain "> ".

local function short_num(n)
  n = math.max(0, n)
  if n < 1000 then return string.format("%d", math.floor(n)) end
  if n < 1e6 then return (string.format("%.1fk", n / 1e3):gsub("%.0k$", "k")) end
  return (string.format("%.1fM", n / 1e6):gsub("%.0M$", "M"))
end

local function money(v)
  v = math.max(0, v)
  local s = string.format("%.4f", v):gsub("0+$", "")
  if s:match("%.%d$") then s = s .. "0" elseif s:match("%.$") then s = s .. "00" end
  return "$" .. s
end

-- budget_text(limits, used) -> "tokens 12.3k/20k left, $0.42/$0.50 left" | nil (no limits)
function M.budget_text(limits, used)
  if not limits or not (limits.max_tokens or limits.max_cost) then return nil end
  used = used or {}
  local parts = {}
  if limits.max_tokens then
    -- every token read or written counts, as the runner counts them (rig.budget)
    local left = limits.max_tokens - ((used.input_tokens or 0) + (used.output_tokens or 0)
      + (used.cache_read_tokens or 0) + (used.cache_creation_tokens or 0))
    parts[#parts + 1] = "tokens " .. short_num(left) .. "/" .. short_num(limits.max_tokens) .. " left"
  end
  if limits.max_cost then
    parts[#parts + 1] = money(limits.max_cost - (used.cost or 0)) .. "/" .. money(limits.max_cost) .. " left"
  end
  return table.concat(parts, ", ")
end

local function add_used(sum, u)
  if type(u) ~= "table" then return end
  sum.input_tokens = (sum.input_tokens or 0) + (tonumber(u.input_tokens) or 0)
  sum.output_tokens = (sum.output_tokens or 0) + (tonumber(u.output_tokens) or 0)
  sum.cache_read_tokens = (sum.cache_read_tokens or 0) + (tonumber(u.cache_read_tokens) or 0)
  sum.cache_creation_tokens = (sum.cache_creation_tokens or 0)
    + (tonumber(u.cache_creation_tokens) or 0)
  sum.cost = (sum.cost or 0) + (tonumber(u.cost) or 0)
end

function M.show_budget()
  local set = R().set_prompt
  if not set then return end
  local S = state.attached
  local b = state.budget
  local function with_chat(p)
    if not state.chat then return p end
    return (p and p .. " " or "") .. "chat"
  end
  if not S or S.closed then state.budget = nil; return set(with_chat(nil)) end
  if not b or b.S ~= S then
    local rig = S.rig or {}
    b = { S = S, loop_id = S.active or rig.active_primer or (rig.primers and rig.primers[1])
      or S.loop_order[1], used = {} }
    state.budget = b
  end
  local inst = S.loops and S.loops[b.loop_id]
  local text = inst and M.budget_text(inst.limits, b.used)
  set(with_chat(text and (S.id:sub(1, 8) .. (#S.loop_order > 1 and (" " .. b.loop_id) or "") .. " [" .. text .. "]") or nil))
end

-- The follower hands each event of the attached session here.
function M.note_budget(S, ev)
  local b = state.budget
  if not b or b.S ~= S then return end
  local t = ev.type
  if t == "TurnStarted" or t == "TurnResumed" then
    -- a resumed turn goes on with what its committed steps used
    b.loop_id, b.turn_id, b.used = ev.loop_id or b.loop_id, ev.turn_id, {}
    add_used(b.used, ev.usage)
  elseif t == "StepDone" and ev.turn_id == b.turn_id then
    add_used(b.used, ev.usage)
  elseif ev.ends_turn and ev.turn_id == b.turn_id and type(ev.usage) == "table" then
    b.used = {}
    add_used(b.used, ev.usage)
  elseif t == "ActiveLoopChanged" and ev.to and ev.to ~= b.loop_id then
    -- a handoff: the prompt follows the conversation to its new loop
    b.loop_id, b.turn_id, b.used = ev.to, nil, {}
  elseif t == "SessionStopped" then
    local set = R().set_prompt
    if set then set(state.chat and "chat" or nil) end -- a shut-down session has no budget to show
    return
  else
    return
  end
  M.show_budget()
end

-- ---- the pager ----
--
-- M.page(lines): prints lines; longer than the terminal, a screenful at a
-- time with "-- more (N lines) --", waiting (in the running chunk's task, the
-- loop goes on) for one key through key_mode: space = next page, Enter =
-- next line, q = stop. Without a terminal everything is printed.

local function page_rows()
  local f = R().rows
  local h = f and f() or nil
  return (h and h > 2) and h - 1 or 23
end

function M.pager_key(k)
  local pg = state.pager
  if pg.key then return true end -- answered; the pager's task has not run yet
  if k == "q" or k == "Q" then pg.key = "q"
  elseif k == " " then pg.key = "page"
  elseif k == "\r" or k == "\n" then pg.key = "line"
  else return true end
  -- the answer is in: what is typed next belongs to the line editor, not to
  -- this pager (under load the next line arrives before the task resumes and
  -- its first key was swallowed); the pager turns the mode on again per page
  key_mode(false)
  pg.cond:signal()
  return true
end

function M.page(lines)
  local per = page_rows()
  local total = #lines
  if total <= per or state.pager then return out(lines) end
  local pg = { cond = core.cond() }
  state.pager = pg
  local ok, err = pcall(function()
    local i, n = 1, per
    while i <= total do
      local stop = math.min(total, i + n - 1)
      out(table.move(lines, i, stop, 1, {}))
      i = stop + 1
      if i > total then break end
      if not key_mode(true) then out(table.move(lines, i, total, 1, {})) break end
      out("-- more (" .. (total - i + 1) .. " lines) --")
      local mark = state.printed
      pg.key = nil
      while pg.key == nil do pg.cond:wait() end
      if state.printed == mark then io.write("\27[1A\r\27[2K") io.flush() end -- the more line goes
      if pg.key == "q" then break end
      n = pg.key == "line" and 1 or per
    end
  end)
  state.pager = nil
  if not state.asking then key_mode(false) end
  if not ok then error(err, 0) end
end

-- ---- inspecting: s:history(), s:usage(), s:snapshots(), s:journal{…} ----

local JOURNAL_MAX = 100000

function M.inspect_journal(S, from)
  local rd = new_renderer()
  local lines = {}
  for rec in S:journal{ from = from } do
    lines[#lines + 1] = rd:record_line(rec)
    if #lines >= JOURNAL_MAX then lines[#lines + 1] = "… (stopped at " .. JOURNAL_MAX .. " records)" break end
  end
  if #lines == 0 then lines[1] = "no records from " .. tostring(from) end
  M.page(lines)
end

local INSPECT = { history = true, usage = true, snapshots = true, journal = true }

-- rig.repl.compile asks here first: a line that is only `NAME:history(…)`,
-- `NAME:usage()`, `NAME:snapshots()` or `NAME:journal{…}`/`(…)` on a session
-- is pretty-printed (paged) instead of printed as a Lua value. Returns the
-- chunk's function, or nil for anything else.
function M.inspect(src)
  local name, method, args = src:match("^%s*([%a_][%w_]*)%s*:%s*([%a_]+)%s*(.-)%s*;?%s*$")
  if not name or not INSPECT[method] then return nil end
  if not (args:match("^%b()$") or args:match("^%b{}$") or args:match('^"[^"]*"$')) then return nil end
  local call = load("return " .. name .. ":" .. method .. args, "=stdin", "t")
  if not call then return nil end
  return function()
    local S = rawget(_G, name)
    local sm = package.loaded["rig.session"]
    if not (sm and getmetatable(S) == sm.Session) then return call() end -- not a session: as typed
    local rd = new_renderer()
    if method == "journal" then
      local lines = {}
      for rec in call() do lines[#lines + 1] = rd:record_line(rec) end
      if #lines == 0 then lines[1] = "no records" end
      return M.page(lines)
    end
    local v = call()
    if method == "history" then return M.page(rd:history_lines(v)) end
    if method == "usage" then return M.page(rd:usage_lines(v)) end
    return M.page(rd:snapshot_lines(v))
  end
end

-- rig.repl.compile hands ":name args" here: the function to run, or nil, message.
function M.command(line)
  local name, arg = line:match("^:(%a+)%s*(.-)%s*$")
  local f = name and COMMANDS[name]
  if not f then
    return nil, "unknown command '" .. (line:match("^:%S*") or line) .. "' (:help lists them)"
  end
  -- A command's own refusal (raised at level 0: no "file:line:" in front) is
  -- shown as its message alone; a bug in a command keeps its traceback, and a
  -- cancellation passes through as it is.
  return function()
    local ok, e = pcall(f, arg)
    if ok then return end
    if type(e) == "string" and not e:find("^cancelled") and not e:find("^[^%s:]+:%d+: ") then
      error({ repl_plain = e }, 0)
    end
    error(e, 0)
  end
end

return M
