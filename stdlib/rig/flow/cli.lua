-- rig.flow.cli: `luarig flow runs|show|log|dot|mermaid` — flow runs from
-- the shell, on the LMDB store under the state root (--state DIR; default
-- $XDG_STATE_HOME/luarig or ~/.local/state/luarig, as `luarig sessions`) or
-- on NATS JetStream (--store nats://HOST:PORT).
--
--   luarig flow runs [--state DIR | --store URL] [--json]
--   luarig flow show [--state DIR | --store URL] ID [--json]
--   luarig flow log  [--state DIR | --store URL] ID       (one JSON event per line)
--   luarig flow dot FLOW.lua [--svg] [--run ID [--state DIR | --store URL]]
--   luarig flow mermaid FLOW.lua [--run ID …]   (the script returns a rig.flow; with
--     --run, the vertices of the run's next superstep are marked)
--
-- ID is a run id or a unique start of one. A read never creates a store.
-- Exit codes: 0 ok, 1 the work failed, 2 usage.

local json = require "rig.json"
local flow = require "rig.flow"
local cli_args = require "rig.cli_args"

local M = {}

local USAGE = [=[
usage: luarig flow runs [--state DIR | --store URL] [--json]
       luarig flow show [--state DIR | --store URL] ID [--json]
       luarig flow log [--state DIR | --store URL] ID
       luarig flow dot FLOW.lua [--svg] [--run ID [--state DIR | --store URL]]
       luarig flow mermaid FLOW.lua [--run ID [--state DIR | --store URL]]
(ID: a run id, or the start of one that no other run shares)
]=]

local function usage(fmt, ...) cli_args.usage(USAGE, fmt, ...) end

local function die(fmt, ...)
  io.stderr:write("luarig: ", string.format(fmt, ...), "\n")
  os.exit(1)
end

local function state_root(opt)
  local root = opt
  if not root then
    local xdg, home = os.getenv("XDG_STATE_HOME"), os.getenv("HOME")
    if xdg and xdg:sub(1, 1) == "/" then root = xdg .. "/luarig"
    elseif home and home:sub(1, 1) == "/" then root = home .. "/.local/state/luarig"
    else die("no state directory: pass --state DIR or --store URL, or set XDG_STATE_HOME or HOME") end
  end
  if root:sub(1, 1) ~= "/" then root = (os.getenv("PWD") or ".") .. "/" .. root end
  return root
end

local function open_store(state, url)
  if url then
    local ok, s = pcall(rig.store.nats, { url = url })
    if not ok or not s then die("cannot open the store at '%s': %s", url, tostring(s)) end
    return s
  end
  local root = state_root(state)
  local f = io.open(root .. "/data.mdb")
  if not f then
    die("no store at '%s'%s", root, state and "" or
      " (nothing has been saved there yet; --state DIR names another)")
  end
  f:close()
  return rig.store.lmdb{ root = root }
end

local function resolve(store, id)
  if #id == 36 then return id end
  local list = assert(flow.runs(store))
  local found
  for _, r in ipairs(list) do
    if r.id:sub(1, #id) == id then
      if found then die("run id '%s' is ambiguous (%s, %s, …)", id, found, r.id) end
      found = r.id
    end
  end
  if not found then die("no flow run '%s'", id) end
  return found
end

local function when(t)
  return t and os.date("!%Y-%m-%dT%H:%M:%SZ", math.floor(t)) or "-"
end

local function render(cmd, path, svg, view)
  local chunk, err = loadfile(path)
  if not chunk then die("%s", err) end
  local ok, f = pcall(chunk)
  if not ok then die("%s: %s", path, tostring(f)) end
  if not flow.is_flow(f) then die("%s does not return a rig.flow", path) end
  local text = cmd == "dot" and f:dot(view) or f:mermaid(view)
  if not svg then io.write(text) return end
  local p, err = rig.process.run{ argv = { "dot", "-Tsvg" }, stdin = text }
  if not p then die("--svg needs Graphviz's dot on PATH (Debian: graphviz): %s", tostring(err)) end
  if p.code ~= 0 then die("dot -Tsvg failed: %s", p.stderr) end
  io.write(p.stdout)
end

function M.cli(...)
  local args = { ... }
  local cmd = args[1]
  if cmd == nil or cmd == "help" or cmd == "--help" then io.write(USAGE) return 0 end
  local opts, pos = cli_args.parse(args, 2, {
    prefix = "flow " .. cmd, after = USAGE,
    values = { ["--state"] = "state", ["--store"] = "url", ["--run"] = "run_id" },
    switches = { ["--json"] = "as_json", ["--svg"] = "svg" },
  })
  local state, url, as_json, svg, id, run_id = opts.state, opts.url, opts.as_json, opts.svg,
    pos[1], opts.run_id
  if state and url then usage("flow %s: give one of '--state' and '--store'", cmd) end
  if cmd == "dot" or cmd == "mermaid" then
    if not id then usage("flow %s needs a script that returns a rig.flow", cmd) end
    if svg and cmd ~= "dot" then usage("flow mermaid: unknown option '--svg'") end
    local view
    if run_id then
      local store = open_store(state, url)
      local sh, msg = flow.show(store, resolve(store, run_id))
      if not sh then die("%s", msg) end
      view = { pending = {} }
      for i, v in ipairs(sh.pending or {}) do view.pending[i] = { vertex = v } end
    end
    render(cmd, id, svg, view)
    return 0
  end
  if cmd ~= "runs" and cmd ~= "show" and cmd ~= "log" then usage("unknown flow command '%s'", cmd) end
  if cmd == "runs" and id then usage("flow runs: unexpected argument '%s'", id) end
  if cmd ~= "runs" and not id then usage("flow %s needs a run id", cmd) end
  local store = open_store(state, url)
  if cmd == "runs" then
    local list, msg = flow.runs(store)
    if not list then die("%s", msg) end
    if as_json then
      io.write(assert(json.encode(json.array(list))), "\n")
    else
      for _, r in ipairs(list) do
        io.write(string.format("%s  %-12s %-11s step %-5s %s\n", r.id, r.flow or "?",
          r.status or "?", tostring(r.step or "-"), when(r.created_at)))
      end
    end
    return 0
  end
  id = resolve(store, id)
  if cmd == "show" then
    local s, msg = flow.show(store, id)
    if not s then die("%s", msg) end
    if as_json then io.write(assert(json.encode(s)), "\n") return 0 end
    io.write("run       ", s.id, "\n", "flow      ", s.flow, "\n", "status    ", s.status, "\n",
      "step      ", tostring(s.step), "\n", "started   ", when(s.created_at), "\n")
    if s.forked_from then
      io.write("forked    from ", s.forked_from.run, " at step ", tostring(s.forked_from.step), "\n")
    end
    if s.pending and #s.pending > 0 then io.write("pending   ", table.concat(s.pending, ", "), "\n") end
    for _, it in ipairs(s.interrupts) do
      io.write("interrupt ", it.key, " (", it.vertex, "): ", assert(json.encode(it.value)), "\n")
    end
    if s.error then io.write("error     ", s.error, "\n") end
    io.write("values    ", assert(json.encode(s.values)), "\n")
    io.write("checkpoints ", #s.checkpoints, ":")
    for _, c in ipairs(s.checkpoints) do io.write(" ", c.step, "@", c.seq) end
    io.write("\n")
    return 0
  end
  local recs, msg = flow.log(store, id)
  if not recs then die("%s", msg) end
  if #recs == 0 then die("no flow run '%s'", id) end
  for _, ev in ipairs(recs) do io.write(assert(json.encode(ev)), "\n") end
  return 0
end

return M
