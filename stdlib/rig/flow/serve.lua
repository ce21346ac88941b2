-- rig.flow.serve: a server's flow routes, which rig.serve mounts when it
-- is given flows (rig.serve{ rig = r, flows = { f, … } }; `luarig serve
-- RIG.lua` when the script returns the rig and then a list of flows).
--
--   GET  /v1/flows                               -> {flows: [{name, fingerprint, vertices, channels}]}
--   GET  /v1/flows/{flow}/graph?format=dot|mermaid|json&run=ID  -> text (the run's step
--                                                highlighted); json: {vertices, edges, pending}
--   POST /v1/flows/{flow}/runs         {input?}  -> 201 {run_id, status}
--   GET  /v1/flows/{flow}/runs                   -> {runs: [index entries]}
--   GET  /v1/flows/{flow}/runs/{id}/status       -> {run_id, live, status, step, pending,
--                                                    interrupts, values, output?, error?}
--   GET  /v1/flows/{flow}/runs/{id}/journal?from&limit -> {events[{seq, kind, event}], next_seq, done}
--   GET  /v1/flows/{flow}/runs/{id}/events       SSE; Last-Event-ID or ?from=SEQ resumes after SEQ
--   POST /v1/flows/{flow}/runs/{id}/resume  {value, key?} -> 202 {run_id, status}: answers an
--        open interrupt (attaching the run first when no process holds it: after a restart)
--   POST /v1/flows/{flow}/runs/{id}/fork    {at?, values?} -> 201 {run_id, forked_from}
--
-- Errors have the server's shape and codes: flow_not_found and run_not_found
-- (404), interrupt_not_open, run_held, drift (409), invalid_json and
-- invalid_request (400), storage (503).

local core = require "rig.core"
local json = require "rig.json"
local flow_mod = require "rig.flow"

local M = {}

local SSE_HEADERS = { ["content-type"] = "text/event-stream", ["cache-control"] = "no-store",
                      ["x-accel-buffering"] = "no" }

local function valid_id(s)
  return type(s) == "string" and #s == 36 and s:match("^[0-9a-f-]+$") ~= nil
end

-- flows: a list or a name -> flow table. h: the server's helpers
-- { err, ok, log, shown, store, heartbeat, page_params }. Returns the routes.
function M.routes(flows, h)
  local by_name = {}
  for k, f in pairs(flows) do
    if not flow_mod.is_flow(f) then
      error("rig.serve: option 'flows' entry " .. tostring(k) .. " is not a rig.flow", 4)
    end
    by_name[f.name] = f
  end
  local err, ok, log, shown = h.err, h.ok, h.log, h.shown
  local live = {}

  local function store_of(f) return f._p.store or h.store end

  local function flow_of(req)
    local f = by_name[req.params.flow]
    if not f then return nil, err("flow_not_found", "no flow '" .. shown(req.params.flow) .. "'") end
    return f
  end

  local function body(req, known)
    if req.body == "" then return {} end
    local v, msg = json.decode(req.body)
    if v == nil then return nil, err("invalid_json", msg) end
    if type(v) ~= "table" or json.is_array(v) then
      return nil, err("invalid_request", "the body must be a JSON object")
    end
    for k in pairs(v) do
      if not known[k] then return nil, err("invalid_request", "unknown field '" .. shown(k) .. "'") end
    end
    return v
  end

  local function run_error(msg, code, id)
    if code == "held" then return err("run_held", "flow run '" .. id .. "' is held by another process") end
    if code == "drift" then return err("drift", msg) end
    if code == "not_found" then return err("run_not_found", "no flow run '" .. shown(id) .. "'") end
    if code == "invalid_input" or code == "write" or code == "route" then
      return err("invalid_request", msg)
    end
    log("flow run '%s': %s (%s)", shown(id), tostring(msg), tostring(code))
    return err("storage", "the flow store failed")
  end

  -- A run this server holds, or nil when it ended or another holds it.
  local function held(id)
    local R = live[id]
    if R and R.sess == nil and R:status() ~= "interrupted" then live[id] = nil end
    return live[id]
  end

  -- The run's summary from its journal (any process may hold it).
  local function shown_run(f, id)
    if not valid_id(id) then return nil, err("run_not_found", "no flow run '" .. shown(id) .. "'") end
    local s, msg, code = flow_mod.show(store_of(f), id)
    if not s then
      if code == "not_found" or msg == nil then return nil, err("run_not_found", "no flow run '" .. id .. "'") end
      return nil, run_error(msg, code, id)
    end
    if s.flow ~= f.name then return nil, err("run_not_found", "no flow run '" .. id .. "' of '" .. f.name .. "'") end
    return s
  end

  local function list_flows()
    local out = {}
    for _, name in ipairs((function()
      local ks = {}
      for k in pairs(by_name) do ks[#ks + 1] = k end
      table.sort(ks)
      return ks
    end)()) do
      local f = by_name[name]
      out[#out + 1] = { name = name, fingerprint = f:fingerprint(), description = f.description,
        vertices = json.array(f._p.vertex_names), channels = json.array(f._p.channel_names) }
    end
    return ok(200, { flows = json.array(out) })
  end

  local function graph(req)
    local f, e = flow_of(req)
    if not f then return e end
    local fmt = req.query.format or "mermaid"
    if fmt ~= "dot" and fmt ~= "mermaid" and fmt ~= "json" then
      return err("invalid_request", "format must be \"dot\", \"mermaid\" or \"json\"")
    end
    local view
    if req.query.run then
      local s, se = shown_run(f, req.query.run)
      if not s then return se end
      view = { pending = {} }
      for i, v in ipairs(s.pending or {}) do view.pending[i] = { vertex = v } end
    end
    if fmt == "json" then
      -- what the console draws: vertices, edges (a router's to its targets), the next step
      local edges = {}
      for _, e in ipairs(f._p.edges) do
        for _, t in ipairs(e.to or e.targets or {}) do
          edges[#edges + 1] = { from = e.from, to = t, conditional = e.to == nil }
        end
      end
      local pending = {}
      for i, t in ipairs(view and view.pending or {}) do pending[i] = t.vertex end
      return ok(200, { name = f.name, vertices = json.array(f._p.vertex_names),
        edges = json.array(edges), pending = json.array(pending) })
    end
    local text = fmt == "dot" and f:dot(view) or f:mermaid(view)
    return { status = 200, body = text, headers = { ["content-type"] = "text/plain; charset=utf-8",
      ["cache-control"] = "no-store" } }
  end

  local function start_run(req)
    local f, e = flow_of(req)
    if not f then return e end
    local b, be = body(req, { input = true })
    if not b then return be end
    if b.input ~= nil and (type(b.input) ~= "table" or json.is_array(b.input)) then
      return err("invalid_request", "field 'input' must be an object of channel values")
    end
    local R, msg, code = f:start(b.input, { store = store_of(f) })
    if not R then return run_error(msg, code, "(new)") end
    live[R.id] = R
    return ok(201, { run_id = R.id, status = R:status() })
  end

  local function list_runs(req)
    local f, e = flow_of(req)
    if not f then return e end
    local list, msg = flow_mod.runs(store_of(f), f.name)
    if not list then
      log("flow runs of '%s': %s", f.name, tostring(msg))
      return err("storage", "the flow store failed")
    end
    for _, r in ipairs(list) do r.live = held(r.id) ~= nil end
    return ok(200, { runs = json.array(list) })
  end

  local function status(req)
    local f, e = flow_of(req)
    if not f then return e end
    local id = req.params.id
    local s, se = shown_run(f, id)
    if not s then return se end
    local R = held(id)
    local out = { run_id = id, flow = f.name, live = R ~= nil, status = R and R:status() or s.status,
      step = s.step, pending = json.array(s.pending or {}), interrupts = json.array(s.interrupts),
      values = s.values, output = s.output, error = s.error, code = s.code,
      forked_from = s.forked_from, checkpoints = json.array(s.checkpoints) }
    return ok(200, out)
  end

  local function journal(req)
    local f, e = flow_of(req)
    if not f then return e end
    local id = req.params.id
    local _, se = shown_run(f, id)
    if se then return se end
    local from, limit = h.page_params(req.query, "from", 1)
    if not from then return err("invalid_request", limit) end
    local recs, tip = core.journal_read(store_of(f), id, from, limit)
    if not recs then
      log("journal read of flow run '%s' failed: %s", id, tostring(tip))
      return err("storage", "the flow store failed")
    end
    local events = {}
    for i, rec in ipairs(recs) do
      local ev = rec.kind == "fence" and { type = "Fence", epoch = rec.epoch } or json.raw(rec.body)
      events[i] = { seq = rec.seq, kind = rec.kind, event = ev }
    end
    local next_seq = #recs > 0 and recs[#recs].seq + 1 or from
    return ok(200, { events = json.array(events), next_seq = next_seq, done = next_seq > tip })
  end

  -- The journal after `last`, then (while this server holds the run) the
  -- live events: C pipes them (host/session_pipe.c), skipping what was sent.
  local function events(req, res)
    local f, e = flow_of(req)
    if not f then return e end
    local id = req.params.id
    local _, se = shown_run(f, id)
    if se then return se end
    local cursor = req.headers["last-event-id"] or req.query.from
    local last = 0
    if cursor ~= nil then
      last = tonumber(cursor)
      if not last or math.type(last) ~= "integer" or last < 0 then
        return err("invalid_request", "Last-Event-ID or 'from' must be a sequence number")
      end
    end
    local R = held(id)
    local sub = R and R.sess and R.sess:subscribe{ ephemeral = true, buffer = 1024 }
    local _ <close> = setmetatable({}, { __close = function() if sub then sub:close() end end })
    if not res:start(200, SSE_HEADERS) then return end
    local store = store_of(f)
    local from = last + 1
    while true do
      local recs, tip = core.journal_read(store, id, from, 256)
      if not recs then break end
      for _, rec in ipairs(recs) do
        if rec.kind == "event" then
          if not res:event{ event = "enduring", id = rec.seq, data = rec.body } then return end
        end
        last = rec.seq
      end
      if #recs == 0 then break end
      from = recs[#recs].seq + 1
      if from > tip then break end
    end
    if sub then sub:pipe(res, { last = last, heartbeat = h.heartbeat }) end
    if not res:closed() then res:finish() end
  end

  local function resume(req)
    local f, e = flow_of(req)
    if not f then return e end
    local id = req.params.id
    local s, se = shown_run(f, id)
    if not s then return se end
    local b, be = body(req, { value = true, key = true })
    if not b then return be end
    if b.key ~= nil and type(b.key) ~= "string" then return err("invalid_request", "field 'key' must be a string") end
    local R = held(id)
    if not R then
      if #s.interrupts == 0 then
        return err("interrupt_not_open", "flow run '" .. id .. "' has no open interrupt")
      end
      local msg, code
      R, msg, code = f:attach(id, { store = store_of(f) })
      if not R then return run_error(msg, code, id) end
      live[id] = R -- its superstep runs again and finds the answer given below
    end
    local done, msg, code = R:resume(b.value, b.key)
    if not done then
      if code == "not_found" or code == "ambiguous" or code == "closed" then
        return err("interrupt_not_open", msg)
      end
      return run_error(msg, code, id)
    end
    return ok(202, { run_id = id, status = R:status() })
  end

  local function fork(req)
    local f, e = flow_of(req)
    if not f then return e end
    local id = req.params.id
    local _, se = shown_run(f, id)
    if se then return se end
    local b, be = body(req, { at = true, values = true })
    if not b then return be end
    if b.at ~= nil and math.type(b.at) ~= "integer" then return err("invalid_request", "field 'at' must be a step number") end
    if b.values ~= nil and (type(b.values) ~= "table" or json.is_array(b.values)) then
      return err("invalid_request", "field 'values' must be an object of channel values")
    end
    local N, msg, code = f:fork(id, { at = b.at, values = b.values, store = store_of(f) })
    if not N then
      if code == "not_found" then return err("invalid_request", msg) end
      return run_error(msg, code, id)
    end
    live[N.id] = N
    return ok(201, { run_id = N.id, forked_from = N.forked_from })
  end

  return {
    ["GET /v1/flows"] = list_flows,
    ["GET /v1/flows/{flow}/graph"] = graph,
    ["POST /v1/flows/{flow}/runs"] = start_run,
    ["GET /v1/flows/{flow}/runs"] = list_runs,
    ["GET /v1/flows/{flow}/runs/{id}/status"] = status,
    ["GET /v1/flows/{flow}/runs/{id}/journal"] = journal,
    ["GET /v1/flows/{flow}/runs/{id}/events"] = events,
    ["POST /v1/flows/{flow}/runs/{id}/resume"] = resume,
    ["POST /v1/flows/{flow}/runs/{id}/fork"] = fork,
  }, live
end

return M
