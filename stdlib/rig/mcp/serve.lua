-- rig.mcp.serve: a rig as an MCP server — `luarig mcp serve RIG.lua [--http
-- HOST:PORT]` (docs/mcp.md "luarig mcp serve"). Built on rig.mcp.server.
--
--   local srv = require("rig.mcp.serve").server(r [, { name = "…" }])  -> a rig.mcp.server
--
-- Tools: one per primer loop, named after it. Arguments: message (the input), and
-- optionally session_id (continue that session: live in this process, or restored
-- from the store) and background = true (start the turn, answer the session id at
-- once). A call runs one turn of the loop in a session of the rig — journaled as
-- any session is, every tool call of the turn through the loop's gate — and answers
-- the turn's final text, with structuredContent { session_id, text, output? }. While
-- it runs, a gate the loop opens (a person must approve a tool call) and a question
-- an MCP server of the rig asks (elicitation) go to the person on the client's side
-- as elicitation/create; a client without elicitation cannot answer: the gate is
-- denied, the question declined. Each finished step is a progress notification; a
-- cancelled call interrupts the turn.
-- Resources: luarig://sessions/{id} — each session of the rig's store (catalog entry,
-- and the loop's conversation when the session is live here), listed by
-- resources/list.

local core = require "rig.core"
local json = require "rig.json"
local server_mod = require "rig.mcp.server"

local M = {}

local function text_of(message)
  if type(message) ~= "table" then return "" end
  local c = message.content
  if type(c) == "string" then return c end
  local parts = {}
  for _, b in ipairs(type(c) == "table" and c or {}) do
    if b.type == "text" and type(b.text) == "string" then parts[#parts + 1] = b.text end
  end
  return table.concat(parts)
end

local DECISIONS = json.array{ "approve", "approve_always", "deny" }

-- A gate of the session, put to the client's person; the answer goes to the session.
local function relay_gate(s, ev, ctx)
  local gate
  for _, g in ipairs(s:gates()) do if g.gate_id == ev.gate_id then gate = g end end
  if not gate then return end
  local ans = ctx.elicit("The agent wants to run the tool '" .. tostring(ev.tool) .. "': "
    .. tostring(ev.summary or ""), { type = "object", properties = {
      decision = { type = "string", title = "Decision", enum = DECISIONS,
                   description = "approve this call, approve it always, or deny it" } },
      required = json.array{ "decision" } })
  local action = "deny"
  if type(ans) == "table" and ans.action == "accept" and type(ans.content) == "table" then
    local d = ans.content.decision
    if d == "approve" or d == "approve_always" then action = d end
  end
  s:respond_gate(ev.gate_id, action)
end

local function relay_input(s, ev, ctx)
  local ans = ctx.elicit(("[" .. tostring(ev.server) .. "] ") .. tostring(ev.message),
                         type(ev.schema) == "table" and ev.schema or nil)
  if type(ans) ~= "table" then ans = { action = "decline" } end
  local action = ans.action
  if action ~= "accept" and action ~= "decline" and action ~= "cancel" then action = "cancel" end
  s:respond_input(ev.input_id, action, action == "accept" and type(ans.content) == "table"
    and ans.content or nil)
end

function M.server(r, opts)
  opts = opts or {}
  local live = {}
  -- f(...) in a task of its own, waited for: a session opened, or a turn submitted,
  -- from the task of an MCP request would be that task's child, and die with it when
  -- the client cancels the request (the session must outlive it; the turn is then
  -- interrupted on purpose, and journaled so)
  local function detached(f, ...)
    local args = table.pack(...)
    local out, done = nil, core.cond()
    core.spawn_detached(function()
      out = table.pack(pcall(f, table.unpack(args, 1, args.n)))
      done:signal()
    end)
    while not out do done:wait() end
    if not out[1] then error(out[2], 0) end
    return table.unpack(out, 2, out.n)
  end
  local function session(id)
    if id == nil then
      local s = detached(r.session, r)
      live[s.id] = s
      return s
    end
    if live[id] then return live[id] end
    local s, err = detached(r.restore, r, id)
    if not s then return nil, err end
    live[id] = s
    return s
  end

  local tools = {}
  for _, name in ipairs(r.primers) do
    local loop = r:loop(name)
    local tname = name:gsub("[^%w_%-%.]", "_")
    tools[#tools + 1] = {
      name = tname, title = "luarig loop " .. name,
      description = "Runs one turn of the agent loop '" .. name .. "' of this luarig rig and "
        .. "answers its final text. Give session_id to continue a conversation; "
        .. "background = true answers the session id at once while the turn runs."
        .. (loop and loop.description and (" " .. tostring(loop.description)) or ""),
      input_schema = { type = "object", properties = {
        message = { type = "string", description = "the input for the loop" },
        session_id = { type = "string", description = "continue this session (from an earlier answer)" },
        background = { type = "boolean", description = "start the turn and answer the session id at once" } },
        required = json.array{ "message" }, additionalProperties = false },
      output_schema = { type = "object", properties = { session_id = { type = "string" },
        text = { type = "string" }, command_id = { type = "string" } }, required = json.array{ "session_id" } },
      run = function(args, ctx)
        if type(args.message) ~= "string" or args.message == "" then
          return nil, "message must be a non-empty string"
        end
        if args.session_id ~= nil and type(args.session_id) ~= "string" then
          return nil, "session_id must be a string"
        end
        local s, serr = session(args.session_id)
        if not s then return nil, "cannot open session '" .. tostring(args.session_id) .. "': " .. tostring(serr) end
        local sub = s:subscribe{ loops = "all", ephemeral = false }
        local cid, cerr = detached(s.submit, s, args.message, { loop = name })
        if not cid then
          sub:close()
          return nil, "the session refused the input: " .. tostring(cerr)
        end
        if args.background then
          sub:close()
          return { content = json.array{ { type = "text", text = "started session " .. s.id } },
                   structuredContent = { session_id = s.id, command_id = cid } }
        end
        local steps = 0
        local result
        local ok, err = pcall(function()
          for ev in sub:events() do
            local mine = type(ev.cause) == "table" and ev.cause.command_id == cid
            if ev.type == "GateOpened" then
              core.spawn_detached(function() relay_gate(s, ev, ctx) end)
            elseif ev.type == "UserInputRequested" then
              core.spawn_detached(function() relay_input(s, ev, ctx) end)
            elseif ev.type == "StepDone" and ev.loop_id == name then
              steps = steps + 1
              ctx.progress(steps, nil, "step " .. steps)
            elseif mine and ev.type == "TurnDone" then
              local text = text_of(ev.message)
              result = { content = json.array{ { type = "text", text = text } },
                         structuredContent = { session_id = s.id, text = text, command_id = cid } }
              return
            elseif mine and (ev.type == "TurnFailed" or ev.type == "TurnInterrupted"
                             or ev.type == "TurnRejected" or ev.type == "InputCancelled") then
              local why = ev.error and ev.error.message or ev.reason or ev.type
              result = { content = json.array{ { type = "text", text = "the turn did not finish ("
                .. ev.type .. "): " .. tostring(why) } }, isError = true,
                structuredContent = { session_id = s.id, command_id = cid } }
              return
            end
          end
        end)
        sub:close()
        if not ok or not result then
          -- the call was cancelled (or the connection went): the turn stops too, from a
          -- task of its own (a cancelled task's every wait raises at once)
          core.spawn_detached(function() pcall(s.interrupt, s) end)
          if not ok then error(err, 0) end
          if ctx.cancelled() then error("cancelled", 0) end
          return nil, "the session ended before the turn did"
        end
        return result
      end,
    }
  end

  local function session_entry(e)
    return { uri = "luarig://sessions/" .. e.id, name = "session " .. e.id:sub(1, 8),
             description = (e.title and e.title ~= "") and e.title or "a session of this rig",
             mimeType = "application/json" }
  end

  local srv = server_mod.new{
    name = opts.name or "luarig",
    title = "luarig rig", instructions = "A luarig rig: each tool runs a turn of one of its agent loops.",
    tools = tools,
    -- every call is the loop's own business: its gate decides each tool call of the turn
    gate = require("rig.gate"){ access = { mcp = "allow" }, approver = "headless" },
    resource_templates = {
      { uri_template = "luarig://sessions/{id}", name = "session", mime_type = "application/json",
        description = "A session of this rig: its catalog entry and, when live here, its conversation",
        list = function()
          local out = {}
          for _, e in ipairs(r:sessions() or {}) do out[#out + 1] = session_entry(e) end
          return out
        end,
        read = function(_, vars)
          local entry
          for _, e in ipairs(r:sessions() or {}) do
            if e.id == vars.id then entry = e end
          end
          if not entry then return nil, "no session '" .. vars.id .. "'" end
          local doc = { session = entry }
          local s = live[vars.id]
          if s then doc.history = s:history() end
          return json.encode(doc)
        end },
    },
  }
  srv.live = live
  function srv.shutdown()
    for id, s in pairs(live) do
      pcall(s.shutdown, s)
      live[id] = nil
    end
  end
  return srv
end

-- `luarig mcp serve RIG.lua [--http HOST:PORT] [--auth-token-file FILE]
--  [--insecure-public-bind] [--allow-host NAME]... [--name NAME]`
function M.cli(...)
  local cli_args = require "rig.cli_args"
  local args = { ... }
  local usage = function(...) cli_args.usage(nil, ...) end
  if args[1] == nil then usage("mcp needs a command: luarig mcp serve RIG.lua [--http HOST:PORT]") end
  if args[1] ~= "serve" then
    usage("mcp: unknown command '%s' (luarig mcp serve RIG.lua [--http HOST:PORT])", tostring(args[1]))
  end
  local opts, pos = cli_args.parse(args, 2, {
    prefix = "mcp serve",
    values = { ["--http"] = "listen", ["--auth-token-file"] = "token_file",
               ["--allow-host"] = "hosts[]", ["--name"] = "name" },
    switches = { ["--insecure-public-bind"] = "insecure" },
  })
  local path, listen, token_file, insecure, name, hosts = pos[1], opts.listen, opts.token_file,
    opts.insecure, opts.name, opts.hosts
  if not path then usage("mcp serve needs a rig script (RIG.lua returns a rig)") end
  if token_file and not listen then usage("mcp serve: --auth-token-file goes with --http") end
  local auth = token_file and cli_args.token_file(token_file, "mcp serve")
  -- stdio: stdout is the protocol's; what the rig prints goes to stderr from the start
  local saved_print = print
  if not listen then
    print = function(...) -- luacheck: ignore
      local parts = {}
      for k = 1, select("#", ...) do parts[k] = tostring((select(k, ...))) end
      io.stderr:write(table.concat(parts, "\t"), "\n")
    end
  end
  local r = cli_args.load_rig(path, "mcp serve")
  local srv = M.server(r, { name = name })
  if not listen then
    print = saved_print -- luacheck: ignore
    srv:serve_stdio()
    srv.shutdown()
    return
  end
  local h, msg, code = srv:serve_http{ listen = listen, auth = auth, insecure_public_bind = insecure,
                                        allowed_hosts = #hosts > 0 and hosts or nil }
  if not h and code == "refused" then
    msg = "refusing to listen on '" .. listen .. "' without authentication: it is not a loopback "
      .. "address (give --auth-token-file FILE, or --insecure-public-bind when an "
      .. "authenticating proxy is in front)"
  end
  if not h then error("mcp serve: " .. tostring(msg), 0) end
  io.stderr:write("luarig: mcp serving on " .. h.url .. (auth and " (bearer token required)" or "") .. "\n")
  io.stderr:flush()
  local sig = core.await_shutdown_signal()
  io.stderr:write("luarig: mcp serve: " .. tostring(sig) .. ": shutting down\n")
  h:close()
  srv.shutdown()
end

return M
