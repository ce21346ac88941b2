-- rig.loop: a Loop definition, validated and frozen (docs/architecture.md).
--
--   local l = rig.loop{
--     name = "assistant",          -- a letter, then up to 63 letters, digits, '_', '.', '-'
--     model = m,                   -- a rig.model (rig.model.script too); required
--     system = "…",                -- the system prompt (default "")
--     tools = { t, … },            -- rig.tool objects, names unique (default none)
--     gate = g,                    -- a rig.gate; required with tools, delegates or mcp
--                                  -- (rig.gate.default() for tools of one's own)
--     policy_revision = "v1",      -- required with a gate: names the gate's policy, which
--                                  -- the loop cannot hash itself (1 to 128 bytes)
--     limits = { iterations = 25, calls = 100, parallel = 8, result_bytes = 32768,
--                max_tokens = nil, max_cost = nil, tool_timeout = nil, gate_timeout = nil },
--     delegates = { "researcher" },-- loops this loop may start: names (resolved by rig.define)
--                                  -- or rig.loop objects (rig.define adds them to the rig)
--     mcp = { client, … },         -- rig.mcp clients: their tools join this loop's
--                                  -- ("SERVER__TOOL"), listed when a session's loop starts
--                                  -- and again after notifications/tools/list_changed
--     description = "…",           -- what a delegating loop reads about this one
--     output_schema = { name = "answer", schema = { type = "object", … },
--                       description = "…"?, strict = true?, repair = 2 },
--                                  -- each turn's final answer is a JSON object valid
--                                  -- against schema (rig.schema's subset): natively when
--                                  -- the model has structured_output, else through the
--                                  -- runner's reserved tool "final_answer"; an answer
--                                  -- that fails goes back to the model with the
--                                  -- validation message (its JSON path) `repair` times
--                                  -- (0 to 10) before the turn fails
--     compaction = { at = 0.8, model = nil, keep = 4, prompt = nil },
--                                  -- at: the share of model.context_window (required then)
--                                  -- the last step's context reaches to compact before the
--                                  -- next model call; false: only s:compact(); model: the
--                                  -- summarizer (default the loop's); keep: the recent
--                                  -- messages kept verbatim (at least; the tail never
--                                  -- starts with tool results); prompt: the summarizer's
--                                  -- system prompt
--     hooks = { before_model = f, after_model = f, before_tool = f, after_tool = f,
--               turn_end = f },   -- functions that act on the turn (rig.hooks, docs/hooks.md)
--     guardrails = { input = { g, … }, output = { g, … } },
--                                  -- g: a function(input, ctx), { name, check = function }
--                                  -- or { name, model = guard, instructions = "…" }: run
--                                  -- beside the model call; a trip ends the turn (rig.hooks)
--     handoffs = { "billing", { loop = "refunds", description = "…", filter = "no_tools" } },
--                                  -- loops of the rig this loop may hand the conversation
--                                  -- to (transfer_to_<loop> tools; rig.handoff,
--                                  -- docs/handoffs.md); filter: "all" (default),
--                                  -- "no_tools", "last_user" or function(history) -> history
--   }
--   l.name, l.model, l.system, l.tools (a new list each read), l.gate, l.limits (a copy,
--   defaults filled), l.delegates (a copy), l.policy_revision, l.description,
--   l.output_schema, l.compaction (deep copies, defaults filled; nil when not given), l.hooks,
--   l.guardrails, l.handoffs (copies; nil when not given): read-only
--   l:tool(name) -> the rig.tool | nil
--   l:revision() -> 64 hex: SHA-256 of the canonical JSON of { name, model identity
--     (provider, name, base_url, effort, max_tokens, temperature, top_p, stop, thinking,
--     tools — no key, no headers), system, tools (name, description, schema, sequential,
--     in order), limits, delegates (sorted), policy_revision, and when given output_schema
--     (with the model's structured_output), compaction (with the summarizer's identity
--     and the model's context_window), the hook points (functions cannot be hashed),
--     the guardrails (names, guard models' identity, instructions) and the handoffs
--     (target, description, filter name or "function") }. Same definition, same
--     revision, in any process; a restore compares it to what the session journaled.
--
-- limits: iterations (model calls per turn, >= 1), calls (tool calls per turn, >= 1),
-- parallel (tool calls at once, >= 1), result_bytes (0 = no cap, else >= 256: longer
-- results keep head and tail), max_tokens (output tokens per turn, or nil), max_cost
-- (dollars per turn, or nil), tool_timeout (seconds one tool call may run, its gate
-- wait not counted; past it the call is cancelled and its result is an error; nil: the
-- tool's own limits only), gate_timeout (seconds a gate waits for a person's answer;
-- past it the call is denied, GateResolved{ action = "deny", source = "timeout" }; nil:
-- it waits). Both up to 86400; they join the revision only when set.

local core = require "rig.core"
local json = require "rig.json"
local tool_mod = require "rig.tool"
local schema_mod = require "rig.schema"
local request_mod = require "rig.model.request"

local M = {}

local fields = { name = true, model = true, system = true, tools = true, gate = true,
                 policy_revision = true, limits = true, delegates = true, description = true,
                 output_schema = true, compaction = true, mcp = true, hooks = true,
                 guardrails = true, handoffs = true }

-- Where a loop's hooks act (rig.hooks runs them; docs/hooks.md).
local HOOK_POINTS = { before_model = true, after_model = true, before_tool = true,
                      after_tool = true, turn_end = true }
M.HOOK_POINTS = HOOK_POINTS
-- The history a handoff gives the next loop, by name (or a function).
local HANDOFF_FILTERS = { all = true, no_tools = true, last_user = true }
M.HANDOFF_FILTERS = HANDOFF_FILTERS

local COMPACTION_DEFAULT = { at = 0.8, keep = 4 }
-- How many times a structured answer that fails its schema goes back to the model.
M.REPAIR_DEFAULT = 2
M.SUMMARY_PROMPT = "You summarize a conversation between a user and an AI assistant so that "
  .. "the assistant can go on working from the summary in place of the earlier messages. Keep "
  .. "every fact, decision, name, path, identifier, result, open question and unfinished task "
  .. "that the rest of the conversation may need; drop pleasantries and repetition. Write plain "
  .. "text, no preamble."


local LIMITS = { iterations = 25, calls = 100, parallel = 8, result_bytes = 32768 }
local limit_fields = { iterations = true, calls = true, parallel = true, result_bytes = true,
                       max_tokens = true, max_cost = true, tool_timeout = true,
                       gate_timeout = true }
local SECONDS_LIMITS = { tool_timeout = true, gate_timeout = true }

local private = setmetatable({}, { __mode = "k" })

local function checked(level, f, ...)
  local ok, a, b = pcall(f, ...)
  if not ok then error(a, level + 1) end
  return a, b
end

local function is_model(v)
  return type(v) == "table" and getmetatable(v) == "rig.model"
end

local function is_gate(v)
  return type(v) == "table" and getmetatable(v) == "rig.gate"
end

local NAME = "^%a[%w_.-]*$"
M.NAME = NAME

local function list_of(v, path, bad)
  if type(v) ~= "table" or getmetatable(v) ~= nil then bad("field '" .. path .. "' must be a list") end
  local n = #v
  for k in pairs(v) do
    if math.type(k) ~= "integer" or k < 1 or k > n then
      bad("field '" .. path .. "' must be a list (found key " .. tostring(k) .. ")")
    end
  end
  return n
end

local function int_limit(v, name, lo, bad)
  if math.type(v) ~= "integer" then
    if type(v) == "number" and v == math.floor(v) and v >= -2^53 and v <= 2^53 then
      v = math.tointeger(v)
    else
      bad("field 'limits." .. name .. "' must be an integer")
    end
  end
  if v < lo then bad("field 'limits." .. name .. "' must be at least " .. lo .. " (got " .. v .. ")") end
  return v
end

-- guardrails.input / guardrails.output: a list of functions or
-- { name, check = function } | { name, model = rig.model, instructions = "…" }.
local function check_guardrails(g, bad)
  if type(g) ~= "table" or getmetatable(g) ~= nil then
    bad("field 'guardrails' must be a table { input = { … }, output = { … } }")
  end
  local out = {}
  for k in pairs(g) do
    if k ~= "input" and k ~= "output" then bad("unknown field 'guardrails." .. tostring(k) .. "'") end
  end
  local seen = {}
  for _, stage in ipairs { "input", "output" } do
    if g[stage] ~= nil then
      local path = "guardrails." .. stage
      local n = list_of(g[stage], path, bad)
      local list = {}
      for i = 1, n do
        local e = g[stage][i]
        local at = path .. "[" .. i .. "]"
        local item
        if type(e) == "function" then
          item = { name = stage .. "_" .. i, check = e }
        elseif type(e) == "table" and getmetatable(e) == nil then
          for k in pairs(e) do
            if k ~= "name" and k ~= "check" and k ~= "model" and k ~= "instructions" then
              bad("unknown field '" .. at .. "." .. tostring(k) .. "'")
            end
          end
          item = { name = e.name, check = e.check, model = e.model, instructions = e.instructions }
          if item.name == nil then item.name = stage .. "_" .. i end
          if type(item.name) ~= "string" or #item.name > 64 or not item.name:match(NAME) then
            bad("field '" .. at .. ".name' must be a letter then up to 63 letters, digits, "
              .. "'_', '.' or '-'")
          end
          if (item.check == nil) == (item.model == nil) then
            bad("field '" .. at .. "' needs exactly one of 'check' (a function) and 'model' "
              .. "(a guard rig.model)")
          end
          if item.check ~= nil and type(item.check) ~= "function" then
            bad("field '" .. at .. ".check' must be a function")
          end
          if item.model ~= nil then
            if not is_model(item.model) then bad("field '" .. at .. ".model' must be a rig.model") end
            if type(item.instructions) ~= "string" or item.instructions == "" then
              bad("field '" .. at .. ".instructions' is required with a guard model (a "
                .. "non-empty string)")
            end
          elseif item.instructions ~= nil then
            bad("field '" .. at .. ".instructions' goes with a guard model only")
          end
        else
          bad("field '" .. at .. "' must be a function or a table { name, check | model }")
        end
        if seen[item.name] then bad("field '" .. at .. "': duplicate guardrail name '"
          .. item.name .. "'") end
        seen[item.name] = true
        list[i] = item
      end
      out[stage] = list
    end
  end
  return out
end

-- handoffs: loop names or { loop, description?, filter = "all" | "no_tools" |
-- "last_user" | function(history) -> history }.
local function check_handoffs(h, bad)
  local n = list_of(h, "handoffs", bad)
  local out, seen = {}, {}
  for i = 1, n do
    local e = h[i]
    local at = "handoffs[" .. i .. "]"
    if type(e) == "string" then e = { loop = e } end
    if type(e) ~= "table" or getmetatable(e) ~= nil then
      bad("field '" .. at .. "' must be a loop name or a table { loop, description, filter }")
    end
    for k in pairs(e) do
      if k ~= "loop" and k ~= "description" and k ~= "filter" then
        bad("unknown field '" .. at .. "." .. tostring(k) .. "'")
      end
    end
    if type(e.loop) ~= "string" or #e.loop > 48 or not e.loop:match("^%a[%w_-]*$") then
      bad("field '" .. at .. ".loop' must be a loop name of letters, digits, '_' or '-' (at "
        .. "most 48 bytes: it names the tool transfer_to_<loop>)")
    end
    if seen[e.loop] then bad("field 'handoffs' lists '" .. e.loop .. "' twice") end
    seen[e.loop] = true
    if e.description ~= nil and type(e.description) ~= "string" then
      bad("field '" .. at .. ".description' must be a string")
    end
    local f = e.filter
    if f == nil then f = "all" end
    if type(f) ~= "function" and not HANDOFF_FILTERS[f] then
      bad("field '" .. at .. ".filter' must be \"all\", \"no_tools\", \"last_user\" or a "
        .. "function(history) -> history")
    end
    out[i] = { loop = e.loop, description = e.description, filter = f }
  end
  return out
end

local function check_loop(def)
  if type(def) ~= "table" then error("rig.loop: expects a table of fields", 0) end
  for k in pairs(def) do
    if not fields[k] then error("rig.loop: unknown field '" .. tostring(k) .. "'", 0) end
  end
  local name = def.name
  if type(name) ~= "string" or #name > 64 or not name:match(NAME) then
    error("rig.loop: field 'name' must be a letter then up to 63 letters, digits, '_', '.' or '-' (got "
      .. (type(name) == "string" and ("'" .. name .. "'") or type(name)) .. ")", 0)
  end
  local function bad(msg) error("rig.loop '" .. name .. "': " .. msg, 0) end
  local p = { name = name }

  if not is_model(def.model) then bad("field 'model' must be a rig.model") end
  p.model = def.model

  if def.system ~= nil and type(def.system) ~= "string" then bad("field 'system' must be a string") end
  p.system = def.system or ""
  if def.description ~= nil and type(def.description) ~= "string" then
    bad("field 'description' must be a string")
  end
  p.description = def.description

  p.tools, p.by_name = {}, {}
  if def.tools ~= nil then
    local n = list_of(def.tools, "tools", bad)
    for i = 1, n do
      local t = def.tools[i]
      if not tool_mod.is_tool(t) then bad("field 'tools[" .. i .. "]' must be a rig.tool") end
      if p.by_name[t.name] then bad("field 'tools[" .. i .. "]': duplicate tool name '" .. t.name .. "'") end
      p.tools[i] = t
      p.by_name[t.name] = t
    end
  end

  if def.gate ~= nil and not is_gate(def.gate) then bad("field 'gate' must be a rig.gate") end
  p.gate = def.gate
  local rev = def.policy_revision
  if rev ~= nil and (type(rev) ~= "string" or rev == "" or #rev > 128 or rev:find("%c")) then
    bad("field 'policy_revision' must be a string of 1 to 128 printable bytes")
  end
  if p.gate and rev == nil then
    bad("field 'policy_revision' is required with a gate (it names the gate's policy in the "
      .. "revision): add policy_revision = \"v1\" and change it when the gate's policy changes")
  end
  p.policy_revision = rev

  local limits = {}
  for k, v in pairs(LIMITS) do limits[k] = v end
  if def.limits ~= nil then
    if type(def.limits) ~= "table" then bad("field 'limits' must be a table") end
    for k, v in pairs(def.limits) do
      if not limit_fields[k] then bad("unknown field 'limits." .. tostring(k) .. "'") end
      if k == "max_cost" then
        if type(v) ~= "number" or v ~= v or v <= 0 or v == math.huge then
          bad("field 'limits.max_cost' must be a positive number of dollars")
        end
        limits.max_cost = v
      elseif SECONDS_LIMITS[k] then
        if type(v) ~= "number" or v ~= v or v <= 0 or v > 86400 then
          bad("field 'limits." .. k .. "' must be a number of seconds above 0, at most 86400")
        end
        limits[k] = v
      else
        limits[k] = int_limit(v, k, k == "result_bytes" and 0 or 1, bad)
      end
    end
    if limits.result_bytes ~= 0 and limits.result_bytes < 256 then
      bad("field 'limits.result_bytes' must be 0 (no cap) or at least 256 (got "
        .. limits.result_bytes .. ")")
    end
  end
  p.limits = limits

  p.delegates = {}
  if def.delegates ~= nil then
    local n = list_of(def.delegates, "delegates", bad)
    local seen = {}
    for i = 1, n do
      local d = def.delegates[i]
      if M.is_loop(d) then
        -- a loop object: rig.define adds it to the rig when it is not listed there
        p.delegate_loops = p.delegate_loops or {}
        p.delegate_loops[#p.delegate_loops + 1] = d
        d = d.name
      end
      if type(d) ~= "string" or #d > 64 or not d:match(NAME) then
        bad("field 'delegates[" .. i .. "]' must be a loop name or a rig.loop")
      end
      if seen[d] then bad("field 'delegates' lists '" .. d .. "' twice") end
      seen[d] = true
      p.delegates[i] = d
    end
  end

  if def.mcp ~= nil then
    local n = list_of(def.mcp, "mcp", bad)
    local mcp_mod = require "rig.mcp"
    local seen = {}
    p.mcp = {}
    for i = 1, n do
      local c = def.mcp[i]
      if not mcp_mod.is_client(c) then bad("field 'mcp[" .. i .. "]' must be a rig.mcp client") end
      if seen[c.name] then bad("field 'mcp' lists two servers named '" .. c.name .. "'") end
      seen[c.name] = true
      p.mcp[i] = c
    end
  end

  -- every call goes through the gate: without one each would be denied mid-turn
  if not p.gate and (#p.tools > 0 or #p.delegates > 0 or p.mcp) then
    local what = #p.tools > 0 and "tools" or #p.delegates > 0 and "delegates" or "mcp servers"
    bad("a loop with " .. what .. " needs a gate (without one every call is denied): add "
      .. "gate = rig.gate.default(), policy_revision = \"v1\"")
  end
  -- a delegate the gate's access denies outright could never be started
  if p.gate then
    for i, d in ipairs(p.delegates) do
      local dec = p.gate:evaluate{ summary = "start " .. d,
        requirements = { { kind = "delegate", scope = d, match = d } } }
      if dec.verdict == "deny" and dec.source == "access" and dec.code ~= "approval_required" then
        bad("field 'delegates[" .. i .. "]': the gate can never allow delegate '" .. d .. "' ("
          .. tostring(dec.reason):gsub("^permission denied: ", "") .. "): give the gate's "
          .. "access delegate = \"allow\" (or \"gated\" with an interactive approver)")
      end
    end
  end

  if def.output_schema ~= nil then
    local o = def.output_schema
    if type(o) ~= "table" then bad("field 'output_schema' must be a table { name, schema }") end
    for k in pairs(o) do
      if k ~= "name" and k ~= "schema" and k ~= "description" and k ~= "strict"
         and k ~= "repair" then
        bad("unknown field 'output_schema." .. tostring(k) .. "'")
      end
    end
    if type(o.name) ~= "string" or #o.name > 64 or not o.name:match("^[%a_][%w_-]*$") then
      bad("field 'output_schema.name' must be a letter or '_' then up to 63 letters, digits, "
        .. "'_' or '-'")
    end
    if type(o.schema) ~= "table" then bad("field 'output_schema.schema' must be a JSON Schema") end
    local ok, copy = pcall(request_mod.copy_schema, o.schema, "output_schema.schema")
    if not ok then
      local msg = tostring(copy):gsub("^rig%.model: ", "")
      local path, rest = msg:match("^(%S+): (.*)$")
      bad(path and ("field '" .. path .. "': " .. rest) or ("field 'output_schema.schema': " .. msg))
    end
    local sok, serr = schema_mod.check(copy)
    if not sok then
      local path, rest = tostring(serr):match("^(%S+): (.*)$")
      bad(path and ("field 'output_schema." .. path .. "': " .. rest)
        or ("field 'output_schema.schema': " .. tostring(serr)))
    end
    if copy.type ~= "object" then bad("field 'output_schema.schema.type' must be \"object\"") end
    if o.description ~= nil and type(o.description) ~= "string" then
      bad("field 'output_schema.description' must be a string")
    end
    if o.strict ~= nil and type(o.strict) ~= "boolean" then
      bad("field 'output_schema.strict' must be a boolean")
    end
    if not p.model.structured_output and not p.model.tools then
      bad("field 'output_schema' needs a model with structured_output or with tools (the "
        .. "final answer tool)")
    end
    local repair = M.REPAIR_DEFAULT
    if o.repair ~= nil then
      if math.type(o.repair) ~= "integer" and not (type(o.repair) == "number"
         and o.repair == math.floor(o.repair)) or o.repair < 0 or o.repair > 10 then
        bad("field 'output_schema.repair' must be an integer from 0 to 10 (the answers that "
          .. "fail the schema the model may correct)")
      end
      repair = math.tointeger(o.repair)
    end
    p.output_schema = { name = o.name, schema = copy, description = o.description,
                        strict = o.strict ~= false, repair = repair }
  end

  if def.hooks ~= nil then
    if type(def.hooks) ~= "table" or getmetatable(def.hooks) ~= nil then
      bad("field 'hooks' must be a table { before_model, after_model, before_tool, after_tool, "
        .. "turn_end }")
    end
    p.hooks = {}
    for k, f in pairs(def.hooks) do
      if not HOOK_POINTS[k] then
        bad("unknown field 'hooks." .. tostring(k) .. "' (before_model, after_model, "
          .. "before_tool, after_tool, turn_end)")
      end
      if type(f) ~= "function" then bad("field 'hooks." .. k .. "' must be a function") end
      p.hooks[k] = f
    end
  end
  if def.guardrails ~= nil then p.guardrails = check_guardrails(def.guardrails, bad) end
  if def.handoffs ~= nil then
    p.handoffs = check_handoffs(def.handoffs, bad)
    for _, h in ipairs(p.handoffs) do
      if h.loop == name then bad("field 'handoffs' names the loop itself ('" .. name .. "')") end
      if p.by_name["transfer_to_" .. h.loop] then
        bad("field 'handoffs': tool 'transfer_to_" .. h.loop .. "' is the handoff's own (rename "
          .. "the tool)")
      end
    end
  end

  if def.compaction ~= nil then
    local c = def.compaction
    if type(c) ~= "table" then bad("field 'compaction' must be a table") end
    for k in pairs(c) do
      if k ~= "at" and k ~= "model" and k ~= "keep" and k ~= "prompt" then
        bad("unknown field 'compaction." .. tostring(k) .. "'")
      end
    end
    local out = { at = COMPACTION_DEFAULT.at, keep = COMPACTION_DEFAULT.keep }
    if c.at == false then
      out.at = false
    elseif c.at ~= nil then
      if type(c.at) ~= "number" or c.at ~= c.at or c.at <= 0 or c.at > 1 then
        bad("field 'compaction.at' must be a share of the context window in (0, 1], or false")
      end
      out.at = c.at
    end
    if out.at and not p.model.context_window then
      bad("field 'compaction.at' needs the model's context_window (rig.model{ context_window "
        .. "= … }), or at = false for manual compaction only")
    end
    if c.model ~= nil and not is_model(c.model) then
      bad("field 'compaction.model' must be a rig.model")
    end
    out.model = c.model
    if c.keep ~= nil then out.keep = int_limit(c.keep, "keep", 1, function(m)
      bad((m:gsub("limits%.keep", "compaction.keep")))
    end) end
    if c.prompt ~= nil and (type(c.prompt) ~= "string" or c.prompt == "") then
      bad("field 'compaction.prompt' must be a non-empty string")
    end
    out.prompt = c.prompt
    p.compaction = out
  end
  return p
end

-- ---- revision ----

local function model_identity(m)
  local id = {}
  for _, k in ipairs { "provider", "name", "base_url", "effort", "max_tokens", "temperature",
                       "top_p", "stop", "thinking", "tools" } do
    local v = m[k]
    if v == nil then v = json.null end
    id[k] = v
  end
  return id
end

local function or_null(v)
  if v == nil then return json.null end
  return v
end

local function revision(p)
  local tools = {}
  for i, t in ipairs(p.tools) do tools[i] = tool_mod._projection(t) end
  local delegates = {}
  for i, d in ipairs(p.delegates) do delegates[i] = d end
  table.sort(delegates)
  local l = p.limits
  local doc = {
    v = 1,
    name = p.name,
    model = model_identity(p.model),
    system = p.system,
    tools = json.array(tools),
    limits = { iterations = l.iterations, calls = l.calls, parallel = l.parallel,
               result_bytes = l.result_bytes, max_tokens = or_null(l.max_tokens),
               max_cost = or_null(l.max_cost), tool_timeout = l.tool_timeout,
               gate_timeout = l.gate_timeout },
    delegates = json.array(delegates),
    policy_revision = or_null(p.policy_revision),
  }
  -- added only when given, so a loop without them keeps its revision
  local o = p.output_schema
  if o then
    doc.output_schema = { name = o.name, schema = o.schema, description = or_null(o.description),
                          strict = o.strict, native = p.model.structured_output == true }
    -- the default keeps the revision loops had before repairs existed
    if o.repair ~= M.REPAIR_DEFAULT then doc.output_schema.repair = o.repair end
  end
  if p.mcp then
    -- the servers by name: their tools are the servers' to change (list_changed)
    local names = {}
    for i, cl in ipairs(p.mcp) do names[i] = cl.name end
    doc.mcp = json.array(names)
  end
  if p.hooks then
    -- functions cannot be hashed: the points they act at can
    local names = {}
    for k in pairs(p.hooks) do names[#names + 1] = k end
    table.sort(names)
    doc.hooks = json.array(names)
  end
  if p.guardrails then
    local g = {}
    for stage, list in pairs(p.guardrails) do
      local names = {}
      for i, item in ipairs(list) do
        names[i] = { name = item.name, model = item.model and model_identity(item.model) or json.null,
                     instructions = or_null(item.instructions) }
      end
      g[stage] = json.array(names)
    end
    doc.guardrails = g
  end
  if p.handoffs then
    local hs = {}
    for i, h in ipairs(p.handoffs) do
      hs[i] = { loop = h.loop, description = or_null(h.description),
                filter = type(h.filter) == "function" and "function" or h.filter }
    end
    doc.handoffs = json.array(hs)
  end
  local c = p.compaction
  if c then
    doc.compaction = { at = c.at, keep = c.keep, prompt = or_null(c.prompt),
                       model = c.model and model_identity(c.model) or json.null,
                       context_window = or_null(p.model.context_window) }
  end
  local text = assert(json.encode(doc))
  return core.sha256_hex(text), text
end

-- ---- the frozen object ----

local Loop = {}

function Loop:tool(name)
  return private[self].by_name[name]
end

function Loop:revision()
  local p = private[self]
  if not p.revision then p.revision, p.canonical = revision(p) end
  return p.revision
end

-- The canonical JSON the revision hashes (for diagnosing drift).
function Loop:canonical()
  self:revision()
  return private[self].canonical
end

local copied = { tools = true, limits = true, delegates = true, mcp = true, hooks = true }

local loop_mt = {
  __index = function(t, k)
    local f = Loop[k]
    if f then return f end
    local p = private[t]
    if copied[k] then
      if p[k] == nil then return nil end
      local out = {}
      for a, b in pairs(p[k]) do out[a] = b end
      return out
    end
    if k == "by_name" or k == "revision" or k == "canonical" or k == "delegate_loops" then
      return nil
    end
    if k == "handoffs" then
      if p.handoffs == nil then return nil end
      local out = {}
      for i, h in ipairs(p.handoffs) do out[i] = { loop = h.loop, description = h.description,
                                                     filter = h.filter } end
      return out
    end
    if k == "guardrails" then
      if p.guardrails == nil then return nil end
      local out = {}
      for stage, list in pairs(p.guardrails) do
        out[stage] = {}
        for i, g in ipairs(list) do
          out[stage][i] = { name = g.name, check = g.check, model = g.model,
                            instructions = g.instructions }
        end
      end
      return out
    end
    if k == "output_schema" or k == "compaction" then
      local v = p[k]
      if v == nil then return nil end
      local out = {}
      for a, b in pairs(v) do out[a] = a == "model" and b or tool_mod._deep_copy(b) end
      return out
    end
    return p[k]
  end,
  __newindex = function(t, k)
    error("rig.loop: loop '" .. private[t].name .. "' is frozen (cannot set '" .. tostring(k)
      .. "')", 2)
  end,
  __tostring = function(t) return "rig.loop(" .. private[t].name .. ")" end,
  __metatable = "rig.loop",
}

-- For rig.define: the delegate loops given as objects (a new list).
function M._delegate_loops(l)
  local out = {}
  for i, d in ipairs(private[l].delegate_loops or {}) do out[i] = d end
  return out
end

function M.is_loop(v)
  return type(v) == "table" and getmetatable(v) == "rig.loop" and private[v] ~= nil
end

return setmetatable(M, {
  __call = function(_, def)
    local p = checked(2, check_loop, def)
    local l = setmetatable({}, loop_mt)
    private[l] = p
    return l
  end,
})
