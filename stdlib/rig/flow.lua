-- rig.flow: durable Pregel-style workflow graphs (docs/flow.md).
--
--   local f = rig.flow{
--     name = "review",                      -- [a-z0-9][a-z0-9_.-]*, at most 64 bytes
--     channels = {                          -- name -> reducer or { reducer = …, default = … }
--       draft = "last",                     -- one write per superstep, replaces the value
--       notes = "append",                   -- a list; a write appends its items (or one value)
--       total = { reducer = function(old, new) return (old or 0) + new end, default = 0 },
--     },
--     vertices = {                          -- name -> function(state, ctx) -> writes | nil
--       write = function(state, ctx) return { draft = "…" } end,
--       check = { run = function(state, ctx) … end, revision = "v2" },
--     },
--     edges = {
--       { from = "start", to = "write" },   -- "start" and "end" are reserved names
--       { from = "write", to = { "check" } },
--       { from = "check", to = function(state) return state.ok and "end" or "write" end,
--         targets = { "write", "end" } },   -- a router; targets (optional) are checked
--     },
--     input = { "draft" },                  -- channels a run's input may set (default: all)
--     output = { "draft", "notes" },        -- channels a run returns (default: all)
--     step_limit = 100,                     -- supersteps a run may take (default 100)
--     store = rig.store.lmdb{ root = … },   -- where runs live (default: a memory store)
--   }
--   f.name, f:fingerprint() -> 64 hex, f:dot([run]) / f:mermaid([run]) -> text
--   f:run(input [, opts]) -> output, run | nil, msg, code, run   (start, then wait)
--   f:start(input [, opts]) -> run | nil, msg, code              (opts: store)
--   f:attach(id [, { accept_drift = true, store = … }]) -> run | nil, msg, code
--     ("held": another process writes the run; "drift": started by a changed graph)
--   f:runs() -> index entries { id, flow, status, step, created_at, … }
--
--   run.id, run:status() -> "running" | "interrupted" | "done" | "failed" | "closed"
--   run:wait([timeout]) -> output | nil, msg, code ("interrupted", "failed",
--     "step_limit", "timeout", "closed")
--   run:subscribe() -> sub (sub:next([timeout]), sub:events([timeout]), sub:close()):
--     the run's events as tables (FlowStep, FlowInterrupt, … and the ephemeral
--     VertexStarted / VertexDone)
--   run:interrupts() -> { { key, vertex, step, value } } open ones
--   run:resume(value [, key]) -> true | nil, msg, code (answers an open interrupt)
--   run:checkpoints() -> { { step, seq, time, pending = { vertex … }, changed = { ch … } } }
--   run:fork{ at = STEP, values = { ch = v } } -> a new run from that checkpoint
--   run:state() -> { step, values, pending }, run:output(), run:close()
--
-- A vertex's ctx: ctx.run, ctx.step, ctx.vertex, ctx.key (the idempotency key:
-- the same when a crash makes the superstep run again), ctx.message (what a
-- ctx:send delivered), ctx:send(vertex, message), ctx:interrupt(value) -> the
-- answer (pauses the run until run:resume), ctx:once(name, fn) -> fn's result,
-- journaled (a re-run gets the recorded one), ctx:turn(rig, text) -> { text,
-- session, message } (an agent turn in a session of that rig), ctx:tool(tool,
-- args) -> the tool's result.
--
-- Durability: a run is a journal with a lease (core.session_open without a
-- catalog entry); every superstep ends in one FlowStep record holding what
-- changed (a last-value channel's new value, an append channel's new items)
-- and the next superstep's messages. An index entry "flows/runs/<id>" in the
-- store's kv lists runs (best effort: the journal is the truth).

local core = require "rig.core"
local json = require "rig.json"

local M = {}

local NAME_PAT = "^[a-z0-9][a-z0-9_.-]*$"
local RESERVED = { start = true, ["end"] = true }
local DEF_FIELDS = { name = true, channels = true, vertices = true, edges = true, input = true,
                     output = true, step_limit = true, store = true, description = true }
local INDEX = "flows/runs/"

local function bad(msg, lvl) error("rig.flow: " .. msg, (lvl or 1) + 1) end

local function fail(fn, msg, lvl) error("rig.flow." .. fn .. ": " .. msg, (lvl or 1) + 1) end

local function sorted_keys(t)
  local ks = {}
  for k in pairs(t) do ks[#ks + 1] = k end
  table.sort(ks)
  return ks
end

local function code_hash(fn)
  local ok, bytes = pcall(string.dump, fn, true)
  if not ok then return "native" end
  return core.sha256_hex(bytes)
end

local function is_list(v)
  return type(v) == "table" and (json.is_array(v) or v[1] ~= nil)
end

local function copy(v)
  if type(v) ~= "table" then return v end
  local t = {}
  for k, x in pairs(v) do t[k] = copy(x) end
  if json.is_array(v) then json.array(t) end
  return t
end

-- ---- definitions ----

local function check_name(what, n)
  if type(n) ~= "string" or #n == 0 or #n > 64 or not n:match(NAME_PAT) then
    bad(what .. " must be a name ([a-z0-9][a-z0-9_.-]*, at most 64 bytes), got " ..
      (type(n) == "string" and ("'" .. n .. "'") or type(n)), 3)
  end
end

local function check_channel(name, spec)
  local c = { name = name }
  local r, default = spec, nil
  if type(spec) == "table" then
    for k in pairs(spec) do
      if k ~= "reducer" and k ~= "default" then
        bad("field 'channels." .. name .. "." .. tostring(k) .. "' is unknown", 3)
      end
    end
    r, default = spec.reducer, spec.default
    if r == nil then r = "last" end
  end
  if r == "last" or r == "append" then
    c.kind = r
  elseif type(r) == "function" then
    c.kind, c.fn, c.code = "reducer", r, code_hash(r)
  else
    bad("field 'channels." .. name .. ".reducer' must be \"last\", \"append\" or a function", 3)
  end
  if default ~= nil then
    local ok, err = json.encode(default)
    if not ok then bad("field 'channels." .. name .. ".default' is not JSON: " .. err, 3) end
    if c.kind == "append" and not is_list(default) and next(default) ~= nil then
      bad("field 'channels." .. name .. ".default' must be a list (an append channel)", 3)
    end
  end
  c.default = default
  return c
end

local function check_names(field, v, known)
  if v == nil then return nil end
  if type(v) ~= "table" then bad("field '" .. field .. "' must be a list of channel names", 3) end
  local out = {}
  for i, n in ipairs(v) do
    if not known[n] then
      bad("field '" .. field .. "[" .. i .. "]' names an unknown channel '" .. tostring(n) .. "'", 3)
    end
    out[i] = n
  end
  return out
end

local function validate(def)
  if type(def) ~= "table" then bad("a definition must be a table", 3) end
  for k in pairs(def) do
    if not DEF_FIELDS[k] then bad("field '" .. tostring(k) .. "' is unknown", 3) end
  end
  check_name("field 'name'", def.name)
  local p = { name = def.name, description = def.description, channels = {}, channel_names = {},
              vertices = {}, vertex_names = {}, edges = {}, out = {} }
  if def.description ~= nil and type(def.description) ~= "string" then
    bad("field 'description' must be a string", 2)
  end
  if type(def.channels) ~= "table" or next(def.channels) == nil then
    bad("field 'channels' must be a table of at least one channel", 2)
  end
  for _, n in ipairs(sorted_keys(def.channels)) do
    check_name("field 'channels' key", n)
    p.channels[n] = check_channel(n, def.channels[n])
    p.channel_names[#p.channel_names + 1] = n
  end
  if type(def.vertices) ~= "table" or next(def.vertices) == nil then
    bad("field 'vertices' must be a table of at least one vertex", 2)
  end
  for _, n in ipairs(sorted_keys(def.vertices)) do
    check_name("field 'vertices' key", n)
    if RESERVED[n] then bad("field 'vertices." .. n .. "': '" .. n .. "' is reserved", 2) end
    local v = def.vertices[n]
    local vx = { name = n }
    if type(v) == "function" then
      vx.run = v
    elseif type(v) == "table" then
      for k in pairs(v) do
        if k ~= "run" and k ~= "revision" then
          bad("field 'vertices." .. n .. "." .. tostring(k) .. "' is unknown", 2)
        end
      end
      if type(v.run) ~= "function" then bad("field 'vertices." .. n .. ".run' must be a function", 2) end
      if v.revision ~= nil and (type(v.revision) ~= "string" or #v.revision == 0 or #v.revision > 128) then
        bad("field 'vertices." .. n .. ".revision' must be a string of 1 to 128 bytes", 2)
      end
      vx.run, vx.revision = v.run, v.revision
    else
      bad("field 'vertices." .. n .. "' must be a function or { run = function }", 2)
    end
    vx.code = vx.revision or code_hash(vx.run)
    p.vertices[n] = vx
    p.vertex_names[#p.vertex_names + 1] = n
  end
  if type(def.edges) ~= "table" then bad("field 'edges' must be a list of edges", 2) end
  local function target(field, t)
    if t ~= "end" and not p.vertices[t] then
      bad("field '" .. field .. "' names an unknown vertex '" .. tostring(t) .. "'", 3)
    end
  end
  local from_start = false
  for i, e in ipairs(def.edges) do
    local f = "edges[" .. i .. "]"
    if type(e) ~= "table" then bad("field '" .. f .. "' must be a table", 2) end
    for k in pairs(e) do
      if k ~= "from" and k ~= "to" and k ~= "targets" then
        bad("field '" .. f .. "." .. tostring(k) .. "' is unknown", 2)
      end
    end
    if e.from ~= "start" and not p.vertices[e.from] then
      bad("field '" .. f .. ".from' names an unknown vertex '" .. tostring(e.from) .. "'", 2)
    end
    if e.from == "start" then from_start = true end
    local ed = { from = e.from }
    if type(e.to) == "function" then
      ed.router, ed.code = e.to, code_hash(e.to)
      if e.targets ~= nil then
        if type(e.targets) ~= "table" then bad("field '" .. f .. ".targets' must be a list", 2) end
        ed.targets = {}
        for j, t in ipairs(e.targets) do
          target(f .. ".targets[" .. j .. "]", t)
          ed.targets[j] = t
        end
      end
    else
      if e.targets ~= nil then bad("field '" .. f .. ".targets' goes with a router (to = function)", 2) end
      local to = type(e.to) == "string" and { e.to } or e.to
      if type(to) ~= "table" or #to == 0 then
        bad("field '" .. f .. ".to' must be a vertex name, a list of them or a function", 2)
      end
      ed.to = {}
      for j, t in ipairs(to) do
        target(f .. ".to" .. (type(e.to) == "table" and "[" .. j .. "]" or ""), t)
        if t == "start" then bad("field '" .. f .. ".to' cannot lead to 'start'", 2) end
        ed.to[j] = t
      end
    end
    p.edges[i] = ed
    p.out[e.from] = p.out[e.from] or {}
    table.insert(p.out[e.from], ed)
  end
  if not from_start then bad("field 'edges' needs an edge from 'start'", 2) end
  local known = {}
  for _, n in ipairs(p.channel_names) do known[n] = true end
  p.input = check_names("input", def.input, known)
  p.output = check_names("output", def.output, known)
  if def.step_limit ~= nil and (math.type(def.step_limit) ~= "integer" or def.step_limit < 1
      or def.step_limit > 1000000) then
    bad("field 'step_limit' must be an integer 1..1000000", 2)
  end
  p.step_limit = def.step_limit or 100
  if def.store ~= nil and tostring(def.store):sub(1, 9) ~= "rig.store" then
    bad("field 'store' must be a rig.store", 2)
  end
  p.store = def.store
  return p
end

local function fingerprint(p)
  local chans, verts, edges = {}, {}, {}
  for i, n in ipairs(p.channel_names) do
    local c = p.channels[n]
    chans[i] = { name = n, kind = c.kind, code = c.code }
  end
  for i, n in ipairs(p.vertex_names) do verts[i] = { name = n, code = p.vertices[n].code } end
  for i, e in ipairs(p.edges) do
    edges[i] = { from = e.from, to = e.to and json.array(e.to) or nil, router = e.code,
                 targets = e.targets and json.array(e.targets) or nil }
  end
  local doc = { v = 1, name = p.name, channels = json.array(chans), vertices = json.array(verts),
                edges = json.array(edges), input = p.input and json.array(p.input) or nil,
                output = p.output and json.array(p.output) or nil, step_limit = p.step_limit }
  return core.sha256_hex(assert(json.encode(doc)))
end

-- ---- channel state ----

local function initial_values(p)
  local vals = {}
  for _, n in ipairs(p.channel_names) do
    local c = p.channels[n]
    if c.kind == "append" then
      vals[n] = json.array(copy(c.default) or {})
    else
      vals[n] = copy(c.default)
    end
  end
  return vals
end

-- Applies one superstep's writes (a list of { vertex, writes } in task
-- order) through the reducers. Returns the changes: set (new values of
-- last/reducer channels) and add (items appended), or nil, message.
local function apply_writes(p, vals, batch, step)
  local by = {}
  for _, w in ipairs(batch) do
    for ch, v in pairs(w.writes) do
      local c = p.channels[ch]
      if not c then
        return nil, "vertex '" .. w.vertex .. "' wrote unknown channel '" .. tostring(ch) .. "'"
      end
      by[ch] = by[ch] or {}
      table.insert(by[ch], { vertex = w.vertex, value = v })
    end
  end
  local set, add, any_set, any_add = {}, {}, false, false
  for _, ch in ipairs(p.channel_names) do
    local ws = by[ch]
    if ws then
      local c = p.channels[ch]
      if c.kind == "last" then
        if #ws > 1 then
          local names = {}
          for i, w in ipairs(ws) do names[i] = "'" .. w.vertex .. "'" end
          return nil, "channel '" .. ch .. "' takes one value per superstep; step " .. step ..
            " got " .. #ws .. " (from " .. table.concat(names, ", ") .. ")"
        end
        vals[ch] = ws[1].value
        set[ch] = ws[1].value == nil and json.null or ws[1].value
        any_set = true
      elseif c.kind == "append" then
        local list = vals[ch]
        local items = json.array({})
        for _, w in ipairs(ws) do
          if is_list(w.value) then
            for _, x in ipairs(w.value) do items[#items + 1] = x list[#list + 1] = x end
          elseif w.value ~= nil then
            items[#items + 1] = w.value
            list[#list + 1] = w.value
          end
        end
        add[ch] = items
        any_add = true
      else
        local v = vals[ch]
        for _, w in ipairs(ws) do
          local ok, nv = pcall(c.fn, v, w.value)
          if not ok then return nil, "the reducer of channel '" .. ch .. "' failed: " .. tostring(nv) end
          v = nv
        end
        vals[ch] = v
        set[ch] = v == nil and json.null or v
        any_set = true
      end
    end
  end
  return { set = any_set and set or nil, add = any_add and add or nil }
end

-- Replays a recorded change onto vals (restore, fork).
local function replay_change(vals, rec)
  if rec.set then
    for ch, v in pairs(rec.set) do
      if v == json.null then vals[ch] = nil else vals[ch] = v end
    end
  end
  if rec.add then
    for ch, items in pairs(rec.add) do
      local list = vals[ch] or json.array({})
      for _, x in ipairs(items) do list[#list + 1] = x end
      vals[ch] = list
    end
  end
end

-- ---- routing ----

-- The next superstep's messages, from the tasks that ran (in order): their
-- static edges and routers (reading the state after the barrier) and sends.
local function route(p, vals, ran)
  local pending, seen = {}, {}
  local function trigger(v, from)
    if v == "end" or v == nil then return true end
    if not p.vertices[v] then
      return nil, "the router of '" .. from .. "' chose unknown vertex '" .. tostring(v) .. "'"
    end
    if not seen[v] then
      seen[v] = true
      pending[#pending + 1] = { vertex = v }
    end
    return true
  end
  for _, t in ipairs(ran) do
    for _, e in ipairs(p.out[t.vertex] or {}) do
      if e.to then
        for _, v in ipairs(e.to) do trigger(v, t.vertex) end
      else
        local ok, r = pcall(e.router, vals)
        if not ok then return nil, "the router of '" .. t.vertex .. "' failed: " .. tostring(r) end
        local list = type(r) == "table" and r or { r }
        for _, v in ipairs(list) do
          if e.targets then
            local allowed = false
            for _, x in ipairs(e.targets) do allowed = allowed or x == v end
            if not allowed then
              return nil, "the router of '" .. t.vertex .. "' chose '" .. tostring(v) ..
                "', which is not among its targets"
            end
          end
          local ok2, err = trigger(v, t.vertex)
          if not ok2 then return nil, err end
        end
      end
    end
    for _, s in ipairs(t.sends or {}) do
      pending[#pending + 1] = { vertex = s.vertex, message = s.message }
    end
  end
  return pending
end

-- ---- the run ----

local Run = {}
Run.__index = Run

local function now() return core.time() end

local function emit(R, etype, fields, enduring)
  fields.v = 1
  fields.type = etype
  -- the journal is the run's own: only FlowStarted names it (bytes per step count)
  if etype == "FlowStarted" then fields.run_id = R.id end
  fields.created_at = fields.created_at or now()
  local text, err = json.encode(fields)
  if not text then return nil, "cannot encode " .. etype .. ": " .. tostring(err), "encode" end
  if not R.sess then return nil, "flow run " .. R.id .. " is closed", "closed" end
  return R.sess:emit(text, { type = etype, enduring = enduring ~= false,
    wait = enduring ~= false })
end

local function index_put_now(R, extra)
  local key = INDEX .. R.id
  for _ = 1, 4 do
    local cur, rev = core.kv_get(R.store, key)
    local doc = cur and json.decode(cur) or { v = 1, id = R.id, flow = R.F.name,
      created_at = R.created_at }
    if type(doc) ~= "table" then doc = { v = 1, id = R.id, flow = R.F.name } end
    doc.status, doc.step, doc.updated_at = R.st, R.step, now()
    doc.fingerprint = R.fingerprint
    for k, v in pairs(extra or {}) do doc[k] = v end
    local ok, _, code = core.kv_put(R.store, key, cur and rev or 0, assert(json.encode(doc)))
    if ok or code ~= "conflict" then return end
  end
end

-- Best effort, as the session catalog is: the journal is the truth.
local function index_put(R, extra)
  local ok, err = pcall(index_put_now, R, extra)
  if not ok and not tostring(err):match("cancelled$") then io.stderr:write("luarig: flow index of run ", R.id, ": ", tostring(err), "\n") end
end

local function wake(R)
  R.cond:signal()
end

local function set_status(R, st)
  if R.st == st then return end
  R.st = st
  wake(R)
end

-- Context handed to a vertex.
local Ctx = {}
Ctx.__index = Ctx

function Ctx:send(vertex, message)
  if not self._R.F._p.vertices[vertex] then
    error("rig.flow: ctx:send to unknown vertex '" .. tostring(vertex) .. "'", 2)
  end
  if message ~= nil then
    local ok, err = json.encode(message)
    if not ok then error("rig.flow: ctx:send's message is not JSON: " .. err, 2) end
  end
  self._sends[#self._sends + 1] = { vertex = vertex, message = message }
end

-- Pauses the run for an answer: the first time, journals FlowInterrupt and
-- ends this vertex (the superstep is not committed); run:resume(value)
-- journals the answer and runs the vertex again, when this call returns it.
function Ctx:interrupt(value)
  local R = self._R
  self._n = self._n + 1
  local ik = self.key .. "#" .. self._n
  local ans = R.answers[ik]
  if ans ~= nil then return ans.value end
  if not R.open[ik] then
    local rec = { key = ik, vertex = self.vertex, step = self.step,
                  value = value == nil and json.null or value }
    local ok, msg, code = emit(R, "FlowInterrupt", rec)
    if not ok then error({ flow_error = msg, code = code }) end
    R.open[ik] = { key = ik, vertex = self.vertex, step = self.step, value = value }
  end
  error({ flow_interrupt = ik })
end

function Ctx:once(name, fn)
  if type(name) ~= "string" then error("rig.flow: ctx:once needs a name", 2) end
  local R = self._R
  local ek = self.key .. ":" .. name
  local got = R.effects[ek]
  if got ~= nil then
    if got == json.null then return nil end
    return got
  end
  local v = fn()
  local ok, msg, code = emit(R, "FlowEffect", { key = ek, value = v == nil and json.null or v })
  if not ok then error({ flow_error = msg, code = code }) end
  R.effects[ek] = v == nil and json.null or v
  return v
end

local function message_text(m)
  if type(m) ~= "table" then return nil end
  if type(m.content) == "string" then return m.content end
  local parts = {}
  for _, b in ipairs(m.content or {}) do
    if type(b) == "table" and b.type == "text" then parts[#parts + 1] = b.text end
  end
  return table.concat(parts)
end

-- One agent turn in a session of rig r: the session id is journaled first
-- (a re-run restores that session), the outcome after the turn ended.
function Ctx:turn(r, text, opts)
  self._t = (self._t or 0) + 1
  local n = self._t
  local s
  local sid = self:once("turn" .. n .. ".session", function()
    s = assert(r:session())
    return s.id
  end)
  return self:once("turn" .. n, function()
    if not s then s = assert(r:restore(sid)) end
    local sub = s:subscribe{ ephemeral = false }
    assert(s:submit(text, opts))
    local last
    for ev in sub:events() do
      if ev.ends_turn then last = ev break end
    end
    sub:close()
    s:shutdown()
    if not last then error("rig.flow: the turn of session " .. sid .. " ended without a terminal", 0) end
    if last.type ~= "TurnDone" then
      error("rig.flow: the turn of session " .. sid .. " ended " .. last.type .. ": " ..
        tostring(last.error and (last.error.message or last.error) or ""), 0)
    end
    return { session = sid, text = message_text(last.message) or "", message = last.message,
             output = last.output }
  end)
end

-- A tool called as application code (no model, no gate): the arguments
-- checked, prepared as the runner prepares them, then run with the
-- vertex's idempotency key.
function Ctx:tool(t, args)
  local tool_mod = require "rig.tool"
  args = args or {}
  local ok, err = t:check_args(args)
  if not ok then error("rig.flow: ctx:tool '" .. t.name .. "': " .. tostring(err), 2) end
  local req, msg = tool_mod.prepare_call(t, args, { flow_run = self.run, vertex = self.vertex })
  if not req then error("rig.flow: ctx:tool '" .. t.name .. "': " .. tostring(msg), 2) end
  local res, rmsg = t.run(tool_mod.run_args(t, args, req), { request = req, args = args,
    idempotency_key = self.key, flow_run = self.run })
  if res == nil and rmsg ~= nil then error("rig.flow: ctx:tool '" .. t.name .. "': " .. tostring(rmsg), 2) end
  return res
end

local function run_task(R, step, i, task)
  local p = R.F._p
  local vx = p.vertices[task.vertex]
  local ctx = setmetatable({ _R = R, _sends = {}, _n = 0, run = R.id, step = step,
    vertex = task.vertex, key = R.id .. "/" .. step .. "/" .. i .. "/" .. task.vertex,
    message = task.message, state = R.values }, Ctx)
  emit(R, "VertexStarted", { step = step, vertex = task.vertex, key = ctx.key }, false)
  local ok, writes = pcall(vx.run, R.values, ctx)
  if not ok then
    if type(writes) == "table" and writes.flow_interrupt then
      return { vertex = task.vertex, interrupted = writes.flow_interrupt }
    end
    if type(writes) == "table" and writes.flow_error then
      return { vertex = task.vertex, error = writes.flow_error, code = writes.code }
    end
    return { vertex = task.vertex, error = tostring(writes), code = "vertex" }
  end
  if writes ~= nil and type(writes) ~= "table" then
    return { vertex = task.vertex, error = "vertex '" .. task.vertex ..
      "' returned a " .. type(writes) .. " (writes are a table of channel values)", code = "vertex" }
  end
  emit(R, "VertexDone", { step = step, vertex = task.vertex, key = ctx.key }, false)
  return { vertex = task.vertex, writes = writes or {}, sends = ctx._sends }
end

local function finish(R, st, fields)
  if R.st == "closed" then return end
  if st == "done" then
    R.out = {}
    for _, ch in ipairs(R.F._p.output or R.F._p.channel_names) do R.out[ch] = R.values[ch] end
    fields.output = R.out
  end
  local etype = st == "done" and "FlowDone" or "FlowFailed"
  fields.step = R.step
  local ok, msg = emit(R, etype, fields)
  if not ok then R.error, R.code = msg, "faulted" end
  local sess = R.sess
  R.sess = nil
  index_put(R, { status = st })
  R.st = st -- after the index: a waiter that sees it may close the store
  if sess then sess:close() end
  wake(R)
end

local function fail_run(R, msg, code)
  R.error, R.code = msg, code
  finish(R, "failed", { error = msg, code = code })
end

-- The superstep loop: runs from R.pending until no message is left.
local function drive(R)
  local p = R.F._p
  while true do
    if #R.pending == 0 then return finish(R, "done", {}) end
    if R.step >= p.step_limit then
      return fail_run(R, "flow run " .. R.id .. " reached its step limit (" .. p.step_limit .. ")",
        "step_limit")
    end
    local step = R.step + 1
    local tasks = R.pending
    -- tasks of this superstep that finished before an interrupt paused it
    -- (in this process) are not run again
    local results = R.partial or {}
    R.partial = nil
    local todo = {}
    for i = 1, #tasks do if not results[i] then todo[#todo + 1] = i end end
    if #todo == 1 then
      results[todo[1]] = run_task(R, step, todo[1], tasks[todo[1]])
    else
      local ts = {}
      for j, i in ipairs(todo) do ts[j] = core.spawn(run_task, R, step, i, tasks[i]) end
      for j, t in ipairs(ts) do
        local res, msg = t:wait()
        results[todo[j]] = res or { vertex = tasks[todo[j]].vertex, error = tostring(msg), code = "vertex" }
      end
    end
    if R.st == "closed" then return end
    local paused = false
    for _, r in ipairs(results) do
      if r.error then
        return fail_run(R, "vertex '" .. r.vertex .. "' failed in step " .. step .. ": " .. r.error,
          r.code)
      end
      paused = paused or r.interrupted ~= nil
    end
    if paused then
      local keep, open = {}, false
      for i, r in ipairs(results) do
        if not r.interrupted then keep[i] = r end
        -- an answer may have come while the vertex ran (resume right after attach)
        if r.interrupted and R.answers[r.interrupted] == nil then open = true end
      end
      if open then
        index_put(R, { status = "interrupted" })
        -- answers given while the index was written (resume saw "running") count too
        open = false
        for _, r in ipairs(results) do
          if r.interrupted and R.answers[r.interrupted] == nil then open = true end
        end
      end
      R.partial = keep
      if open then
        set_status(R, "interrupted")
        return
      end
      -- every question got its answer meanwhile: the loop runs those vertices again
    else
      local change, err = apply_writes(p, R.values, results, step)
      if not change then return fail_run(R, err, "write") end
      local pending, rerr = route(p, R.values, results)
      if not pending then return fail_run(R, rerr, "route") end
      local rec = { step = step, set = change.set, add = change.add, pending = json.array(pending) }
      local seq, msg, code = emit(R, "FlowStep", rec)
      if not seq then return fail_run(R, msg, code) end
      R.step, R.pending = step, pending
      R.cps[#R.cps + 1] = { step = step, seq = seq, time = rec.created_at,
        pending = pending, set = change.set, add = change.add }
    end
  end
end

local function new_run(F, store, id, sess)
  return setmetatable({ F = F, store = store, id = id, sess = sess, st = "running",
    step = 0, values = initial_values(F._p), pending = {}, open = {}, answers = {},
    effects = {}, cps = {}, cond = core.cond(),
    fingerprint = F:fingerprint(), created_at = now() }, Run)
end

-- Runs held by this process and flows defined in it (weak: the REPL lists them).
local live = setmetatable({}, { __mode = "v" })
local known = setmetatable({}, { __mode = "v" })

function M.live_runs()
  local out = {}
  for id, R in pairs(live) do
    if R.sess or R.st == "interrupted" then out[id] = R end
  end
  return out
end

function M.known_flows()
  local out = {}
  for name, F in pairs(known) do out[name] = F end
  return out
end

-- Called with every run started, attached or forked here (the REPL attaches it).
local function announce(R)
  live[R.id] = R
  if M.on_run then
    local ok, err = pcall(M.on_run, R)
    if not ok then io.stderr:write("luarig: flow: ", tostring(err), "\n") end
  end
end

local function start_driver(R)
  R.st = "running"
  R.task = core.spawn_detached(function()
    local ok, err = pcall(drive, R)
    if not ok and R.st ~= "closed" then fail_run(R, tostring(err), "error") end
  end)
end

local function open_sess(store)
  return core.session_open(store, nil, { catalog = false })
end

local function check_input(F, input)
  local p = F._p
  if input == nil then return {} end
  if type(input) ~= "table" then return nil, "a run's input must be a table of channel values" end
  local allowed
  if p.input then
    allowed = {}
    for _, n in ipairs(p.input) do allowed[n] = true end
  end
  for k in pairs(input) do
    if not p.channels[k] then return nil, "input names unknown channel '" .. tostring(k) .. "'" end
    if allowed and not allowed[k] then return nil, "channel '" .. k .. "' is not an input" end
  end
  local ok, err = json.encode(input)
  if not ok then return nil, "the input is not JSON: " .. err end
  return input
end

-- Step 0: the input through the reducers and the edges from start, the
-- first checkpoint.
local function input_step(R, input)
  local p = R.F._p
  local change, err = apply_writes(p, R.values, { { vertex = "start", writes = input or {} } }, 0)
  if not change then return nil, err, "write" end
  local pending, rerr = route(p, R.values, { { vertex = "start" } })
  if not pending then return nil, rerr, "route" end
  local rec = { step = 0, set = change.set, add = change.add, pending = json.array(pending) }
  local seq, msg, code = emit(R, "FlowStep", rec)
  if not seq then return nil, msg, code end
  R.step, R.pending = 0, pending
  R.cps[#R.cps + 1] = { step = 0, seq = seq, time = rec.created_at, pending = pending,
    set = change.set, add = change.add }
  return true
end

-- Starts a run: FlowStarted, then the input step (step 0: the input
-- through the reducers and the edges from start) as the first checkpoint.
local function start(F, input, opts, base)
  local store = opts.store or F._p.store or F:_store()
  local sess, msg, code = open_sess(store)
  if not sess then return nil, msg, code end
  local R = new_run(F, store, sess.id, sess)
  local p = F._p
  local started = { flow = F.name, fingerprint = R.fingerprint, step_limit = p.step_limit }
  if base then
    started.forked_from = base.forked_from
    started.base = { step = base.step, values = base.values, pending = json.array(base.pending) }
  else
    started.input = input
  end
  local ok
  ok, msg, code = emit(R, "FlowStarted", started)
  if not ok then sess:close() return nil, msg, code end
  if base then
    R.values, R.step, R.pending = base.values, base.step, base.pending
    R.forked_from = base.forked_from
    R.cps[1] = { step = base.step, seq = ok, time = started.created_at,
      pending = base.pending }
  else
    ok, msg, code = input_step(R, input)
    if not ok then fail_run(R, msg, code) return nil, msg, code end
  end
  index_put(R, { forked_from = R.forked_from })
  announce(R)
  start_driver(R)
  return R
end

-- ---- reading a run's journal ----

local function read_records(store, id)
  local recs, tip = core.journal_read(store, id, 1, 0)
  if not recs then return nil, tip end
  local out = {}
  for _, r in ipairs(recs) do
    if r.kind == "event" then
      local ev, err = json.decode(r.body)
      if not ev then return nil, "flow run " .. id .. ": record " .. r.seq .. " is not JSON: " .. err, "corrupt" end
      ev.seq = r.seq
      out[#out + 1] = ev
    end
  end
  return out
end

-- Folds a run's records: values and pending as of the last checkpoint (or
-- of step `upto`), the checkpoints, interrupts, answers and effects.
local function fold_raw(p, recs, upto)
  local st = { values = initial_values(p), pending = {}, step = -1, checkpoints = {},
               interrupts = {}, answers = {}, effects = {} }
  for _, ev in ipairs(recs) do
    local t = ev.type
    if t == "FlowStarted" then
      st.started = ev
      if ev.base then
        st.values = ev.base.values or {}
        for _, n in ipairs(p.channel_names) do
          if p.channels[n].kind == "append" and st.values[n] == nil then st.values[n] = json.array({}) end
        end
        st.step, st.pending = ev.base.step, ev.base.pending or {}
        st.checkpoints[1] = { step = ev.base.step, seq = ev.seq, time = ev.created_at,
          pending = st.pending }
      end
    elseif t == "FlowStep" then
      if upto and ev.step > upto then break end
      replay_change(st.values, ev)
      st.step, st.pending = ev.step, ev.pending or {}
      st.checkpoints[#st.checkpoints + 1] = { step = ev.step, seq = ev.seq, time = ev.created_at,
        pending = st.pending, set = ev.set, add = ev.add }
    elseif t == "FlowInterrupt" then
      st.interrupts[ev.key] = { key = ev.key, vertex = ev.vertex, step = ev.step,
        value = ev.value ~= json.null and ev.value or nil }
    elseif t == "FlowAnswer" then
      st.answers[ev.key] = { value = ev.value ~= json.null and ev.value or nil }
    elseif t == "FlowEffect" then
      st.effects[ev.key] = ev.value
    elseif t == "FlowDone" then
      st.done, st.output = true, ev.output
    elseif t == "FlowFailed" then
      st.failed = ev
    elseif t == "FlowResumed" and ev.fingerprint then
      st.accepted = ev.fingerprint
    end
  end
  return st
end

-- The journal is read back as untrusted bytes: a record of the wrong shape
-- is an error naming the run, never a raise from deep inside.
local function fold(p, recs, upto, id)
  local ok, st = pcall(fold_raw, p, recs, upto)
  if not ok then
    return nil, "flow run " .. tostring(id) .. ": a record is malformed (" .. tostring(st) .. ")", "corrupt"
  end
  return st
end

-- ---- the flow object ----

local Flow = {}
local private = setmetatable({}, { __mode = "k" })

local function check_opts(fn, opts, known)
  if opts == nil then return {} end
  if type(opts) ~= "table" then fail(fn, "options must be a table", 3) end
  for k in pairs(opts) do
    if not known[k] then fail(fn, "unknown option '" .. tostring(k) .. "'", 3) end
  end
  return opts
end

function Flow:fingerprint()
  local p = self._p
  p.fingerprint = p.fingerprint or fingerprint(p)
  return p.fingerprint
end

function Flow:_store()
  local p = self._p
  p.default_store = p.default_store or core.store_memory()
  return p.default_store
end

function Flow:start(input, opts)
  opts = check_opts("start", opts, { store = true })
  local inp, err = check_input(self, input)
  if not inp then return nil, err, "invalid_input" end
  return start(self, inp, opts)
end

function Flow:run(input, opts)
  local R, msg, code = self:start(input, opts)
  if not R then return nil, msg, code end
  local out
  out, msg, code = R:wait()
  if out then return out, R end
  return nil, msg, code, R
end

function Flow:attach(id, opts)
  opts = check_opts("attach", opts, { store = true, accept_drift = true })
  if type(id) ~= "string" then fail("attach", "a run id must be a string", 2) end
  local store = opts.store or self._p.store or self:_store()
  local sess, msg, code = core.session_open(store, id, { catalog = false })
  if not sess then return nil, msg, code end
  local recs
  recs, msg, code = read_records(store, id)
  if not recs then sess:close() return nil, msg, code end
  local p = self._p
  local st
  st, msg, code = fold(p, recs, nil, id)
  if not st then sess:close() return nil, msg, code end
  if not st.started then
    sess:close()
    return nil, "flow run " .. id .. " has no FlowStarted (not a flow run)", "not_found"
  end
  if st.started.flow ~= self.name then
    sess:close()
    return nil, "flow run " .. id .. " belongs to flow '" .. tostring(st.started.flow) .. "'", "drift"
  end
  local fp = self:fingerprint()
  local theirs = st.accepted or st.started.fingerprint
  if theirs ~= fp and not opts.accept_drift then
    sess:close()
    return nil, "flow run " .. id .. " was started by a changed graph (fingerprint " ..
      theirs:sub(1, 12) .. "…, this graph " .. fp:sub(1, 12) ..
      "…); attach with accept_drift = true to run it anyway", "drift"
  end
  local R = new_run(self, store, id, sess)
  R.values, R.step, R.pending = st.values, st.step, st.pending
  R.cps, R.answers, R.effects = st.checkpoints, st.answers, st.effects
  R.created_at = st.started.created_at
  R.forked_from = st.started.forked_from
  for k, it in pairs(st.interrupts) do
    if not st.answers[k] then R.open[k] = it end
  end
  if st.done or st.failed then
    R.st = st.done and "done" or "failed"
    R.out = st.output
    if st.failed then R.error, R.code = st.failed.error, st.failed.code end
    R.sess = nil
    sess:close()
    return R
  end
  local ok
  ok, msg, code = emit(R, "FlowResumed", { from_step = st.step, epoch = sess:epoch(),
    fingerprint = theirs ~= fp and fp or nil })
  if not ok then sess:close() return nil, msg, code end
  if st.step < 0 then
    -- cut before its input step was durable: take that step now
    R.step = -1
    ok, msg, code = input_step(R, st.started.input ~= json.null and st.started.input or nil)
    if not ok then fail_run(R, msg, code) return R end
  end
  index_put(R)
  announce(R)
  start_driver(R)
  return R
end

function Flow:runs(opts)
  opts = check_opts("runs", opts, { store = true })
  return M.runs(opts.store or self._p.store or self:_store(), self.name)
end

-- Graphviz DOT text; run (optional) highlights the vertices pending in it.
function Flow:dot(run)
  local p = self._p
  local hot = {}
  for _, t in ipairs(run and run.pending or {}) do hot[t.vertex] = true end
  local out = { "digraph \"" .. p.name .. "\" {", "  rankdir=TB;",
    "  start [shape=circle,label=\"start\"];", "  \"end\" [shape=doublecircle,label=\"end\"];" }
  for _, n in ipairs(p.vertex_names) do
    out[#out + 1] = "  \"" .. n .. "\" [shape=box" ..
      (hot[n] and ",style=filled,fillcolor=gold" or "") .. "];"
  end
  for _, e in ipairs(p.edges) do
    if e.to then
      for _, t in ipairs(e.to) do out[#out + 1] = "  \"" .. e.from .. "\" -> \"" .. t .. "\";" end
    else
      for _, t in ipairs(e.targets or {}) do
        out[#out + 1] = "  \"" .. e.from .. "\" -> \"" .. t .. "\" [style=dashed];"
      end
    end
  end
  out[#out + 1] = "}"
  return table.concat(out, "\n") .. "\n"
end

-- Mermaid flowchart text; the run's pending vertices get class "current".
function Flow:mermaid(run)
  local p = self._p
  local function id(n) return n == "end" and "end_" or n == "start" and "start_" or n end
  local out = { "flowchart TD", "  start_((start))", "  end_(((end)))" }
  for _, n in ipairs(p.vertex_names) do out[#out + 1] = "  " .. id(n) .. "[" .. n .. "]" end
  for _, e in ipairs(p.edges) do
    for _, t in ipairs(e.to or e.targets or {}) do
      out[#out + 1] = "  " .. id(e.from) .. (e.to and " --> " or " -.-> ") .. id(t)
    end
  end
  local hot = {}
  for _, t in ipairs(run and run.pending or {}) do hot[#hot + 1] = id(t.vertex) end
  if #hot > 0 then
    out[#out + 1] = "  classDef current fill:#fc0"
    out[#out + 1] = "  class " .. table.concat(hot, ",") .. " current"
  end
  return table.concat(out, "\n") .. "\n"
end

local flow_mt = {
  __index = function(t, k)
    if k == "name" then return rawget(t, "_p").name end
    if k == "description" then return rawget(t, "_p").description end
    return Flow[k]
  end,
  __newindex = function() error("rig.flow: a flow is frozen", 2) end,
  __tostring = function(t) return "rig.flow(" .. rawget(t, "_p").name .. ")" end,
}

function M.new(def)
  local p = validate(def)
  local F = setmetatable({ _p = p }, flow_mt)
  private[F] = p
  known[p.name] = F
  return F
end

function M.is_flow(v) return getmetatable(v) == flow_mt end

-- ---- the run handle ----

function Run:status() return self.st end

function Run:output() return self.out end

function Run:state()
  local pend = {}
  for i, t in ipairs(self.pending) do pend[i] = { vertex = t.vertex, message = t.message } end
  return { step = self.step, values = copy(self.values), pending = pend }
end

function Run:wait(timeout)
  local deadline = timeout and core.now() + timeout
  while true do
    local st = self.st
    if st == "done" then return self.out end
    if st == "failed" then return nil, self.error, self.code end
    if st == "closed" then return nil, "flow run " .. self.id .. " is closed", "closed" end
    if st == "interrupted" then
      local names = {}
      for _, it in pairs(self.open) do names[#names + 1] = "'" .. it.vertex .. "'" end
      table.sort(names)
      return nil, "flow run " .. self.id .. " waits on an interrupt at " ..
        table.concat(names, ", "), "interrupted"
    end
    local left = deadline and deadline - core.now()
    if left and left <= 0 then return nil, "timeout", "timeout" end
    self.cond:wait(left)
  end
end

function Run:interrupts()
  local out = {}
  for _, it in pairs(self.open) do
    out[#out + 1] = { key = it.key, vertex = it.vertex, step = it.step, value = it.value }
  end
  table.sort(out, function(a, b) return a.key < b.key end)
  return out
end

function Run:resume(value, key)
  if not self.sess then return nil, "flow run " .. self.id .. " is not live here", "closed" end
  local it
  if key ~= nil then
    it = self.open[key]
    if not it then return nil, "flow run " .. self.id .. " has no open interrupt '" .. tostring(key) .. "'", "not_found" end
  else
    local n = 0
    for _, x in pairs(self.open) do it = x n = n + 1 end
    if n == 0 then return nil, "flow run " .. self.id .. " has no open interrupt", "not_found" end
    if n > 1 then return nil, "flow run " .. self.id .. " has " .. n .. " open interrupts: name one by key", "ambiguous" end
  end
  local ok, err = json.encode(value == nil and json.null or value)
  if not ok then return nil, "the answer is not JSON: " .. err, "invalid_input" end
  local seq, msg, code = emit(self, "FlowAnswer", { key = it.key, value = value == nil and json.null or value })
  if not seq then return nil, msg, code end
  self.answers[it.key] = { value = value }
  self.open[it.key] = nil
  if self.st == "interrupted" and next(self.open) == nil then
    start_driver(self)
    index_put(self)
  end
  return true
end

function Run:checkpoints()
  local out = {}
  for i, c in ipairs(self.cps) do
    local pend, changed = {}, {}
    for j, t in ipairs(c.pending or {}) do pend[j] = t.vertex end
    for ch in pairs(c.set or {}) do changed[#changed + 1] = ch end
    for ch in pairs(c.add or {}) do changed[#changed + 1] = ch end
    table.sort(changed)
    out[i] = { step = c.step, seq = c.seq, time = c.time, pending = pend, changed = changed }
  end
  return out
end

-- A new run from checkpoint `at` of run id (its values, with opts.values
-- replacing channels, and its pending messages); the origin is only read.
local function fork_from(F, store, id, opts, fn)
  opts = check_opts(fn, opts, { at = true, values = true, store = true })
  local recs, msg, code = read_records(store, id)
  if not recs then return nil, msg, code end
  local p = F._p
  local all
  all, msg, code = fold(p, recs, nil, id)
  if not all then return nil, msg, code end
  if not all.started then return nil, "flow run " .. id .. " not found", "not_found" end
  local at = opts.at
  if at == nil then at = all.step end
  if math.type(at) ~= "integer" then fail(fn, "option 'at' must be a step number", 3) end
  local found = false
  for _, c in ipairs(all.checkpoints) do found = found or c.step == at end
  if not found then
    return nil, "flow run " .. id .. " has no checkpoint at step " .. at, "not_found"
  end
  local st = assert(fold(p, recs, at, id))
  local vals = st.values
  if opts.values ~= nil then
    if type(opts.values) ~= "table" then fail(fn, "option 'values' must be a table", 3) end
    for k, v in pairs(opts.values) do
      if not p.channels[k] then return nil, "option 'values' names unknown channel '" .. tostring(k) .. "'", "invalid_input" end
      vals[k] = v
    end
  end
  return start(F, nil, { store = opts.store or store },
    { step = at, values = vals, pending = st.pending, forked_from = { run = id, step = at } })
end

function Run:fork(opts)
  return fork_from(self.F, self.store, self.id, opts, "fork")
end

-- Forks run id (any status, held by any process: it is only read).
function Flow:fork(id, opts)
  if type(id) ~= "string" then fail("fork", "a run id must be a string", 2) end
  local store = type(opts) == "table" and opts.store or self._p.store or self:_store()
  return fork_from(self, store, id, opts, "fork")
end

function Run:subscribe()
  if not self.sess then error("rig.flow: flow run " .. self.id .. " is not live here", 2) end
  local c = self.sess:subscribe{ ephemeral = true, buffer = 4096 }
  local sub = { c = c }
  function sub.next(s, timeout)
    local text, seq, code = s.c:next(timeout)
    if not text then return nil, seq, code end
    local ev = json.decode(text)
    if ev then ev.seq = seq ~= 0 and seq or nil end
    return ev
  end
  function sub.events(s, timeout)
    return function() return (s:next(timeout)) end
  end
  function sub.close(s) s.c:close() end
  return setmetatable(sub, { __close = sub.close })
end

function Run:close()
  if self.st ~= "done" and self.st ~= "failed" then self.st = "closed" end
  if self.task then self.task:cancel() self.task = nil end
  local sess = self.sess
  self.sess = nil
  if sess then sess:close() end
  wake(self)
  return true
end
Run.__close = Run.close

function Run:__tostring() return "rig.flow.run(" .. self.id .. ", " .. self.st .. ")" end

-- ---- reading runs without a flow (the CLI, serve) ----

-- Index entries of the runs in store (of flow `name` when given), newest first.
function M.runs(store, name)
  local keys, msg, code = core.kv_keys(store, INDEX)
  if not keys then return nil, msg, code end
  local out = {}
  for _, k in ipairs(keys) do
    local v = core.kv_get(store, k)
    local doc = v and json.decode(v)
    if type(doc) == "table" and (name == nil or doc.flow == name) then out[#out + 1] = doc end
  end
  table.sort(out, function(a, b) return (a.created_at or 0) > (b.created_at or 0) end)
  return out
end

-- A run's journal as event tables (FlowStarted, FlowStep, …).
function M.log(store, id)
  return read_records(store, id)
end

-- A summary of a run read from its journal (no lease, no graph needed).
local function show_raw(store, id)
  local recs, msg, code = read_records(store, id)
  if not recs then return nil, msg, code end
  local s = { id = id, checkpoints = {}, interrupts = {}, status = "running", values = {} }
  local open = {}
  for _, ev in ipairs(recs) do
    if ev.type == "FlowStarted" then
      s.flow, s.fingerprint, s.created_at, s.forked_from = ev.flow, ev.fingerprint, ev.created_at,
        ev.forked_from
      if ev.base then
        s.step = ev.base.step
        for k, v in pairs(ev.base.values or {}) do s.values[k] = v end
        s.checkpoints[#s.checkpoints + 1] = { step = ev.base.step, seq = ev.seq }
      end
    elseif ev.type == "FlowStep" then
      s.step = ev.step
      replay_change(s.values, ev)
      local pend = {}
      for i, t in ipairs(ev.pending or {}) do pend[i] = t.vertex end
      s.pending = pend
      s.checkpoints[#s.checkpoints + 1] = { step = ev.step, seq = ev.seq, pending = pend }
    elseif ev.type == "FlowInterrupt" then
      open[ev.key] = ev
    elseif ev.type == "FlowAnswer" then
      open[ev.key] = nil
    elseif ev.type == "FlowDone" then
      s.status, s.output = "done", ev.output
    elseif ev.type == "FlowFailed" then
      s.status, s.error, s.code = "failed", ev.error, ev.code
    end
  end
  if not s.flow then return nil, "flow run " .. id .. " not found", "not_found" end
  for _, ev in pairs(open) do
    s.interrupts[#s.interrupts + 1] = { key = ev.key, vertex = ev.vertex, step = ev.step,
      value = ev.value }
  end
  table.sort(s.interrupts, function(a, b) return a.key < b.key end)
  if s.status == "running" and #s.interrupts > 0 then s.status = "interrupted" end
  return s
end

function M.show(store, id)
  local ok, s, msg, code = pcall(show_raw, store, id)
  if not ok then
    return nil, "flow run " .. tostring(id) .. ": a record is malformed (" .. tostring(s) .. ")", "corrupt"
  end
  return s, msg, code
end

return setmetatable(M, { __call = function(_, def) return M.new(def) end })
