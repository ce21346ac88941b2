-- rig.flow.repl: the REPL's flow commands (rig.repl_bench mounts them).
--
--   :flows              flow runs: this REPL's, and those in the stores of the
--                       flows defined here (* = attached)
--   :flow ID            attach a run (a unique id start; attaches it from the
--                       store when no process holds it): its steps, interrupts
--                       and end are drawn above the prompt
--   :flow               the attached run's status
--   :flow answer VALUE  answer its open interrupt (VALUE: JSON, else text)
--   :flow steps         its checkpoints
--   :flow fork STEP     fork it at STEP and attach the fork
--   :flow graph [dot]   its graph as Mermaid (or DOT), the current step marked
--
-- A run started in the REPL (f:start, f:run, f:attach, run:fork) is
-- attached as it starts; `run` names the attached one.

local json = require "rig.json"
local flow = require "rig.flow"
local core = require "rig.core"

local M = {}

local state = { attached = nil, follow = nil }
M.state = state

local function describe_event(ev)
  local t = ev.type
  if t == "FlowStep" then
    local pend = {}
    for i, p in ipairs(ev.pending or {}) do pend[i] = p.vertex end
    return string.format("── flow step %d%s", ev.step,
      #pend > 0 and (": next " .. table.concat(pend, ", ")) or ": nothing left")
  elseif t == "FlowInterrupt" then
    return string.format("── flow interrupt at %s: %s (:flow answer VALUE)", tostring(ev.vertex),
      tostring(json.encode(ev.value)))
  elseif t == "FlowAnswer" then
    return "── flow answered " .. tostring(json.encode(ev.value))
  elseif t == "FlowDone" then
    return "── flow done: " .. tostring(json.encode(ev.output))
  elseif t == "FlowFailed" then
    return "── flow failed: " .. tostring(ev.error)
  end
end

function M.install(out, page)
  local function detach()
    local f = state.follow
    state.follow, state.attached = nil, nil
    if f then f.sub:close() end
  end

  local function attach(R, quiet)
    if state.attached == R then return R end
    detach()
    state.attached = R
    _G.run = R
    if not quiet then
      out(string.format("── attached to flow run %s (%s, %s, step %d)", R.id, R.F.name,
        R:status(), R.step))
    end
    if R.sess then
      local sub = R:subscribe()
      state.follow = { sub = sub }
      core.spawn_background(function()
        while true do
          local ev = sub:next()
          if not ev or state.attached ~= R then break end
          local line = describe_event(ev)
          if line then out(line) end
        end
      end)
    end
    for _, it in ipairs(R:interrupts()) do
      out(describe_event({ type = "FlowInterrupt", vertex = it.vertex, value = it.value }))
    end
    return R
  end
  flow.on_run = function(R) attach(R) end

  local function need()
    local R = state.attached
    if not R then error("no flow run attached (run = f:start(…), or :flow ID)", 0) end
    return R
  end

  -- Runs known here: live ones, then index entries of the known flows' stores.
  local function known_runs()
    local rows, seen = {}, {}
    for id, R in pairs(flow.live_runs()) do
      seen[id] = true
      rows[#rows + 1] = { id = id, flow = R.F.name, status = R:status(), step = R.step,
        created_at = R.created_at, R = R }
    end
    for _, F in pairs(flow.known_flows()) do
      for _, e in ipairs(F:runs() or {}) do
        if not seen[e.id] then
          seen[e.id] = true
          rows[#rows + 1] = { id = e.id, flow = e.flow, status = e.status, step = e.step,
            created_at = e.created_at, F = F }
        end
      end
    end
    table.sort(rows, function(a, b) return (a.created_at or 0) > (b.created_at or 0) end)
    return rows
  end

  local function flows_cmd()
    local rows = known_runs()
    if #rows == 0 then return out("no flow runs (define one: f = rig.flow{ … }; f:start(input))") end
    local lines = {}
    for _, r in ipairs(rows) do
      lines[#lines + 1] = string.format("%s%s  %-12s %-11s step %s", (state.attached and
        state.attached.id == r.id) and "*" or " ", r.id:sub(1, 13), r.flow, r.status, tostring(r.step))
    end
    page(lines)
  end

  local function attach_cmd(arg)
    local hits = {}
    for _, r in ipairs(known_runs()) do
      if r.id:sub(1, #arg) == arg then hits[#hits + 1] = r end
    end
    if #hits == 0 then error("no flow run '" .. arg .. "' (:flows lists them)", 0) end
    if #hits > 1 then error("flow run id '" .. arg .. "' is ambiguous: " .. #hits .. " runs start with it", 0) end
    local r = hits[1]
    if r.R then attach(r.R) return end
    local R, msg = r.F:attach(r.id)
    if not R then error("cannot attach " .. r.id .. ": " .. tostring(msg), 0) end
    attach(R)
  end

  local function flow_cmd(arg)
    local verb, rest = arg:match("^(%S+)%s*(.-)%s*$")
    if not verb then
      local R = need()
      local lines = { string.format("flow run %s (%s): %s, step %d", R.id, R.F.name, R:status(), R.step) }
      for _, it in ipairs(R:interrupts()) do
        lines[#lines + 1] = "interrupt at " .. it.vertex .. ": " .. tostring(json.encode(it.value))
      end
      if R:output() then lines[#lines + 1] = "output " .. tostring(json.encode(R:output())) end
      return out(lines)
    end
    if verb == "answer" then
      local R = need()
      local v = json.decode(rest)
      if v == nil then v = rest end
      local ok, msg = R:resume(v)
      if not ok then error("flow answer: " .. tostring(msg), 0) end
      return out("answered")
    elseif verb == "steps" then
      local lines = {}
      for _, c in ipairs(need():checkpoints()) do
        lines[#lines + 1] = string.format("step %-4d seq %-5d next %-24s changed %s", c.step, c.seq,
          #c.pending > 0 and table.concat(c.pending, ",") or "-",
          #c.changed > 0 and table.concat(c.changed, ",") or "-")
      end
      return page(lines)
    elseif verb == "fork" then
      local R = need()
      local at = tonumber(rest)
      if not at or math.type(at) ~= "integer" then error("usage: :flow fork STEP", 0) end
      local N, msg = R:fork{ at = at }
      if not N then error("flow fork: " .. tostring(msg), 0) end
      return out("forked " .. R.id .. " at step " .. at .. " -> " .. N.id)
    elseif verb == "graph" then
      local R = need()
      local lines = {}
      for l in (rest == "dot" and R.F:dot(R) or R.F:mermaid(R)):gmatch("[^\n]+") do lines[#lines + 1] = l end
      return page(lines)
    end
    return attach_cmd(verb)
  end

  return {
    flows = flows_cmd,
    flow = flow_cmd,
  }, {
    ":flows             flow runs (this REPL's, and the stores' of the flows defined here)",
    ":flow ID           attach a flow run (draws its steps and interrupts); :flow its status",
    ":flow answer V     answer the attached run's interrupt (V: JSON, else text)",
    ":flow steps | fork STEP | graph [dot]   its checkpoints, a fork, its graph",
  }
end

return M
