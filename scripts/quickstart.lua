-- quickstart.lua: a workspace assistant, end to end.
--
--   build/luarig scripts/quickstart.lua [--yes] [--dir DIR] [TASK…]
--
-- It creates a small demo project (a shell script with a bug and its test) in
-- DIR/workspace, keeps sessions and snapshots in an LMDB store in DIR/state
-- (DIR defaults to $TMPDIR/luarig-quickstart, or /tmp/…), and runs one
-- session of an assistant with the standard tools: read_file, write_file,
-- edit_file, glob, grep and bash, every command confined by the OS sandbox.
-- Reading is allowed; edits and commands wait for your approval on the
-- terminal (y = once, a = always: saved in DIR/permissions.json, n = no).
-- --yes approves everything (for runs without a terminal, as `make demo`);
-- without a terminal and without --yes every approval is denied. The
-- workspace is snapshotted after each turn.
--
-- The model: ANTHROPIC_API_KEY set -> Anthropic (LUARIG_MODEL or
-- claude-sonnet-4-5); else OPENAI_BASE_URL set -> any OpenAI-compatible
-- server (Ollama, vLLM, llama.cpp; LUARIG_MODEL names the model, key from
-- OPENAI_API_KEY when set); else OPENAI_API_KEY -> OpenAI (gpt-4o-mini);
-- else GEMINI_API_KEY or GOOGLE_API_KEY -> Gemini (gemini-2.5-flash);
-- else a scripted model that plays the assistant offline and really calls
-- the tools. With a real model on a terminal you can go on typing tasks.
--
-- In the REPL (`luarig repl scripts/quickstart.lua`) it sets up the same
-- workspace, store and rig, and returns the rig instead of running a session:
-- the REPL binds it to `r`, and `s = r:session()` starts one there (gates
-- take one key; README "The REPL as a workbench").

-- ---- arguments ----

local auto_yes, base = false, nil
local words = {}
local argv = arg or {}
local i = 1
while i <= #argv do
  local a = argv[i]
  if a == "--yes" or a == "-y" then
    auto_yes = true
  elseif a == "--dir" then
    i = i + 1
    base = argv[i] or error("--dir needs a directory", 0)
  elseif a == "--help" or a == "-h" then
    print("usage: luarig scripts/quickstart.lua [--yes] [--dir DIR] [TASK…]")
    return
  elseif a:sub(1, 2) == "--" then
    error("unknown option '" .. a .. "' (--yes, --dir DIR)", 0)
  else
    words[#words + 1] = a
  end
  i = i + 1
end
base = base or ((os.getenv("TMPDIR") or "/tmp") .. "/luarig-quickstart")
if base:sub(1, 1) ~= "/" then
  local r = assert(rig.process.run{ argv = { "pwd" } })
  base = r.stdout:gsub("\n$", "") .. "/" .. base
end
local tty_in, tty_out = rig.isatty(0), rig.isatty(1)
-- `luarig repl` loads rig.repl before it runs this file
local in_repl = package.loaded["rig.repl"] ~= nil

-- ---- the look of the transcript ----

local color = tty_out and (os.getenv("NO_COLOR") or "") == "" and os.getenv("TERM") ~= "dumb"
local function paint(code)
  return function(s) return color and ("\27[" .. code .. "m" .. s .. "\27[0m") or s end
end
local dim, bold, yellow = paint("2"), paint("1"), paint("33")

local at_line_start = true
local function out(s)
  io.write(s)
  io.flush()
  if #s > 0 then at_line_start = s:sub(-1) == "\n" end
end
local function line(s)
  if not at_line_start then out("\n") end
  out(s .. "\n")
end


-- ---- the demo workspace and the state directory ----

local function sh(cmd)
  local r = assert(rig.process.run{ argv = { "/bin/sh", "-c", cmd } })
  if r.code ~= 0 then error("'" .. cmd .. "' failed: " .. r.stderr, 0) end
  return r.stdout
end
local function q(s) return "'" .. s:gsub("'", "'\\''") .. "'" end
local function put(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

local ws, state = base .. "/workspace", base .. "/state"
local scratch = base .. "/scratch"
sh("mkdir -p " .. q(ws) .. " " .. q(state) .. " && rm -rf " .. q(scratch))
-- the project, as it was before the assistant's fix (a rerun starts over)
put(ws .. "/README.md", "# greet\n\n`sh greet.sh NAME` greets NAME. `sh test.sh` checks it.\n")
put(ws .. "/greet.sh", '#!/bin/sh\n# greet.sh NAME: prints a greeting\necho "Helo, ${1:-world}!"\n')
put(ws .. "/test.sh", [[#!/bin/sh
# test.sh: checks greet.sh
got=$(sh greet.sh rig)
if [ "$got" = "Hello, rig!" ]; then
	echo "ok - greet.sh greets"
else
	echo "not ok - greet.sh greets: expected 'Hello, rig!', got '$got'"
	exit 1
fi
]])

-- ---- the model ----

local TASK = "The test in this project fails. Find out why, fix it and run the tests again."

local function scripted()
  -- Plays the assistant: each call looks at the conversation so far and
  -- decides the next step from the real tool results.
  local function results(req)
    local out_ = {}
    for _, m in ipairs(req.messages) do
      if m.role == "tool" then
        for _, b in ipairs(m.content) do out_[#out_ + 1] = b end
      end
    end
    return out_
  end
  local function step(text, calls)
    return { text = text, chunk = 6, chunk_delay = 0.01, tool_calls = calls }
  end
  local function brain(req)
    local got = results(req)
    local last = got[#got]
    if last and last.is_error then
      return step("I could not go on: " .. tostring(last.content):gsub("^error: ", "")
        .. ". Nothing else was changed.")
    end
    local n = #got
    local said = req.messages[#req.messages]
    if n >= 6 and said.role == "user" then -- a question after the fix (in the REPL)
      return step("I changed one line: greet.sh printed \"Helo\", now it prints \"Hello\". "
        .. "test.sh passes; nothing else was touched.")
    end
    if n == 0 then
      return step("Let me see what is in the workspace.",
        { { name = "glob", input = { pattern = "**" } } })
    elseif n == 1 then
      return step("There is a test script. I'll run it to see what fails.",
        { { name = "bash", input = { command = "sh test.sh" } } })
    elseif n == 2 then
      return step("The greeting is wrong. Let me read the script and its test.",
        { { name = "read_file", input = { path = "greet.sh" } },
          { name = "read_file", input = { path = "test.sh" } } })
    elseif n == 4 then
      if not got[3].content:find("Helo", 1, true) then
        return step("greet.sh does not look like what I expected; I'll leave it as it is.")
      end
      return step("Found it: greet.sh prints \"Helo\" where the test expects \"Hello\". Fixing the typo.",
        { { name = "edit_file", input = { path = "greet.sh", old = "Helo", new = "Hello" } } })
    elseif n == 5 then
      return step("Now the tests again.", { { name = "bash", input = { command = "sh test.sh" } } })
    end
    local verdict = last.content:match("[^\n]*") or ""
    return step("Fixed. `greet.sh` had a typo (\"Helo\"); it now prints \"Hello, NAME!\" and the "
      .. "test passes:\n\n    " .. verdict .. "\n\nThe change is one line in greet.sh, and the "
      .. "workspace was snapshotted after this turn, so it can be rewound.")
  end
  local steps = {}
  for k = 1, 12 do steps[k] = brain end
  return rig.model.script{ steps = steps, name = "quickstart-script" }, "a scripted model (no API key set)"
end

local function pick_model()
  local name = os.getenv("LUARIG_MODEL")
  if os.getenv("ANTHROPIC_API_KEY") then
    name = name or "claude-sonnet-4-5"
    return rig.model{ provider = "anthropic", name = name, api_key_env = "ANTHROPIC_API_KEY",
                      max_tokens = 4096 }, "anthropic " .. name
  elseif os.getenv("OPENAI_BASE_URL") then
    name = name or "llama3.1"
    local url = os.getenv("OPENAI_BASE_URL")
    return rig.model{ provider = "openai-compatible", name = name, base_url = url,
                      api_key_env = os.getenv("OPENAI_API_KEY") and "OPENAI_API_KEY" or nil,
                      max_tokens = 4096 }, name .. " at " .. url
  elseif os.getenv("OPENAI_API_KEY") then
    name = name or "gpt-4o-mini"
    return rig.model{ provider = "openai", name = name, api_key_env = "OPENAI_API_KEY",
                      max_tokens = 4096 }, "openai " .. name
  elseif os.getenv("GEMINI_API_KEY") or os.getenv("GOOGLE_API_KEY") then
    name = name or "gemini-2.5-flash"
    return rig.model{ provider = "gemini", name = name, max_tokens = 4096 }, "gemini " .. name
  end
  return scripted()
end
local model, model_desc = pick_model()
local live = model_desc:find("scripted", 1, true) == nil

-- ---- the rig: tools, sandbox, gate, placement, snapshots ----

local profile = rig.sandbox.profile{
  workspace_root = ws,
  workspace_read = "allow", workspace_write = "gated",   -- file edits ask first
  host_read = "allow", host_write = "deny",
  network = "deny", command = "gated",                   -- every command asks first
  home = "isolated", isolation = "sandboxed",
}
local check = rig.sandbox.check(profile)
if not check.ok then
  error("this machine cannot confine commands as the profile asks: " .. tostring(check.error)
    .. " (see `luarig sandbox check`)", 0)
end
local executors = rig.sandbox.executors(profile, { scratch_root = scratch })
local close_executors <close> = not in_repl and executors or nil
local executor = assert(executors:get("workspace-assistant"))

local gate = rig.gate{
  access = profile,                                           -- decision and enforcement agree
  rules = rig.permissions.file(base .. "/permissions.json"),  -- what "always" saves
  approver = "interactive",
}

local assistant = rig.loop{
  name = "workspace-assistant",
  model = model,
  system = "You help with the files in your workspace, a small project. Use the tools to look "
    .. "before you change anything, keep changes small, and run the project's tests after a "
    .. "change. Answer briefly.",
  tools = {
    rig.tools.read_file(), rig.tools.write_file(), rig.tools.edit_file(),
    rig.tools.glob(), rig.tools.grep(),
    rig.tools.bash{ executor = executor, timeout = 60 },
  },
  gate = gate,
  policy_revision = "quickstart-v1",
  limits = { iterations = 20, max_tokens = 400000 },     -- per turn: the REPL's prompt shows what is left
}

local store = rig.store.lmdb{ root = state }
local close_store <close> = not in_repl and store or nil
local r = rig.define{
  loops = { assistant },
  primers = { "workspace-assistant" },
  store = store,
  workspace = rig.workspace.exclusive{ root = ws },
  snapshots = { trigger = "turn_done", priority = "best_effort", timeout = 60 },
}

if in_repl then
  -- the REPL keeps these for its whole life (their __gc would close them)
  quickstart = { executors = executors, store = store, workspace = ws, state = state, task = TASK }
  line(bold("luarig quickstart") .. dim(" — a workspace assistant"))
  line(dim("  model      ") .. model_desc)
  line(dim("  sandbox    ") .. "tier " .. check.tier .. ", network denied, commands need approval")
  line(dim("  start      ") .. "s = r:session(); s:submit(quickstart.task)")
  return r
end

-- ---- the session and its transcript ----

line(bold("luarig quickstart") .. dim(" — a workspace assistant"))
line(dim("  model      ") .. model_desc)
line(dim("  workspace  ") .. ws)
line(dim("  state      ") .. state .. " (LMDB)")
line(dim("  sandbox    ") .. "tier " .. check.tier .. ", network denied, commands need approval")
if auto_yes then
  line(dim("  approvals  ") .. yellow("automatic (--yes): every gated call is approved"))
elseif tty_in then
  line(dim("  approvals  ") .. "asked here: y = once, a = always, n = no")
else
  line(dim("  approvals  ") .. yellow("denied: no terminal to ask on (pass --yes to approve)"))
end

local s = assert(r:session())
line(dim("  session    ") .. s.id)

-- who answers a gate: --yes, the person at the terminal, or nobody (denied)
local on_gate = auto_yes and function() return "approve", "--yes" end
  or tty_in and "terminal"
  or function() return "deny", "no terminal to ask on; pass --yes" end
local transcript = rig.ask.printer()  -- one for the whole run: it numbers the turns

-- One turn, drawn as it streams (and the snapshot after it): s:ask does it all.
local function turn(text)
  line("")
  line(bold("you> ") .. text)
  line("")
  local answer, msg = s:ask(text, { print = transcript, on_gate = on_gate })
  return answer ~= nil, msg
end

local first = #words > 0 and table.concat(words, " ") or TASK
local done, why = turn(first)
if live and tty_in then
  while true do
    line("")
    out(bold("you> ") .. dim("(another task, or an empty line to stop) "))
    local text = rig.read_line()
    if not text or text:match("^%s*$") then break end
    done, why = turn(text)
  end
end

local u = s:usage()
line("")
line(bold("Session ") .. s.id .. dim(string.format(" · %d in / %d out tokens", u.input_tokens or 0,
  u.output_tokens or 0)))
s:shutdown()
line("  list the sessions:    luarig sessions --state " .. state)
line("  replay its journal:   luarig log --state " .. state .. " " .. s.id)
line("  the workspace:        " .. ws)
if not done then error("the last turn did not finish: " .. tostring(why), 0) end
