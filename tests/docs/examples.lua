-- tests/docs/examples.lua: runs the examples of the documentation, so it cannot drift.
--
--   luarig tests/docs/examples.lua FILE.md …
--
-- Every fenced block opened with ```lua in docs/api.md (and docs/examples/*)
-- is an example: it runs as a script of its own (`luarig BLOCK.lua`, cwd a
-- fresh directory, offline: examples use rig.model.script), and must exit 0.
-- When the block is followed (after blank lines only) by a fence opened with
-- ```output, what the example prints must be exactly that text. In other
-- files (the README) only blocks right after a line `<!-- example -->` run:
-- the others show commands that need a server, a key or a network.
-- A FILE.lua argument (docs/examples/) runs as it is, its output compared with
-- FILE.out when that exists. Prints one TAP line per example:
-- ok - FILE:LINE  (the heading above it).

local LUARIG = os.getenv("LUARIG") or "build/luarig"
local ROOT = os.getenv("LUARIG_ROOT") or "."

local function read(path)
  local f = assert(io.open(path))
  local s = f:read("a")
  f:close()
  return s
end

local function sh(cmd)
  local r = assert(rig.process.run{ argv = { "/bin/sh", "-c", cmd } })
  if r.code ~= 0 then error("'" .. cmd .. "' failed: " .. r.stderr, 0) end
  return (r.stdout:gsub("\n$", ""))
end

-- examples(text, all) -> { { line, heading, code, output? } }
local function examples(text, all)
  local out = {}
  local lines = {}
  for l in (text .. "\n"):gmatch("(.-)\n") do lines[#lines + 1] = l end
  local i, heading, marked = 1, "", false
  while i <= #lines do
    local l = lines[i]
    if l:match("^#+ ") then heading = l:gsub("^#+ ", "") end
    if l:match("^```") then
      local info = l:match("^```(.*)$")
      local start = i
      local body = {}
      i = i + 1
      while i <= #lines and not lines[i]:match("^```%s*$") do
        body[#body + 1] = lines[i]
        i = i + 1
      end
      if info == "lua" and (all or marked) then
        local ex = { line = start, heading = heading, code = table.concat(body, "\n") .. "\n" }
        -- an ```output block right after it
        local j = i + 1
        while j <= #lines and lines[j]:match("^%s*$") do j = j + 1 end
        if lines[j] == "```output" then
          local o = {}
          j = j + 1
          while j <= #lines and not lines[j]:match("^```%s*$") do o[#o + 1] = lines[j]; j = j + 1 end
          ex.output = table.concat(o, "\n") .. "\n"
        end
        out[#out + 1] = ex
      end
      marked = false
    elseif l:match("^<!%-%- example %-%->%s*$") then
      marked = true
    elseif not l:match("^%s*$") then
      marked = false
    end
    i = i + 1
  end
  return out
end

local base = sh("mktemp -d")
local run_one -- below
-- `luarig` in an example is the build under test
local bindir = LUARIG:match("^(.*)/[^/]*$") or "."
if bindir:sub(1, 1) ~= "/" then bindir = sh("pwd") .. "/" .. bindir end
-- run_one(ex, n) -> nil (it ran and printed what it says) | why not
function run_one(ex, n)
  local dir = base .. "/" .. n
  sh("mkdir -p '" .. dir .. "'")
  local path = dir .. "/example.lua"
  local f = assert(io.open(path, "w"))
  f:write(ex.code)
  f:close()
  local r = assert(rig.process.run{ argv = { LUARIG, path }, cwd = dir, timeout = 120,
    env = { LUARIG_ROOT = ROOT, NO_COLOR = "1", PATH = bindir .. ":" .. (os.getenv("PATH") or ""),
            ANTHROPIC_API_KEY = false, OPENAI_API_KEY = false, OPENAI_BASE_URL = false,
            GEMINI_API_KEY = false, GOOGLE_API_KEY = false } })
  if r.code ~= 0 or r.timed_out then
    return "exited " .. tostring(r.code) .. (r.timed_out and " (timed out)" or "") .. ": "
      .. (r.stderr ~= "" and r.stderr or r.stdout)
  elseif ex.output and r.stdout ~= ex.output then
    return "printed\n" .. r.stdout .. "-- instead of\n" .. ex.output
  end
end

local failed, total = 0, 0
-- the runner itself: a planted wrong output, a failing example and a README block
-- without the mark must not pass
do
  local planted = examples(table.concat({ "# t", "```lua", 'print("a")', "```", "", "```output",
    "b", "```", "```lua", "error('x')", "```", "```lua", 'print("ok")', "```" }, "\n"), true)
  local unmarked = examples("```lua\nprint(1)\n```\n<!-- example -->\n```lua\nprint(2)\n```\n", false)
  local caught = #planted == 3 and planted[1].output == "b\n" and run_one(planted[1], 0) ~= nil
    and run_one(planted[2], 0) ~= nil and run_one(planted[3], 0) == nil
    and #unmarked == 1 and unmarked[1].code == "print(2)\n"
  total = total + 1
  if caught then
    print("ok - the runner catches a wrong output and a failing example, and runs only marked README blocks")
  else
    failed = failed + 1
    print("not ok - the runner's planted cases")
  end
end
for _, file in ipairs(arg) do
  local all = file:match("docs/api") or file:match("docs/examples/")
  local list
  if file:match("%.lua$") then
    -- a whole example script (docs/examples/): FILE.out, when there, is what it prints
    local fo = io.open((file:gsub("%.lua$", ".out")))
    local abs = file:sub(1, 1) == "/" and file or (sh("pwd") .. "/" .. file)
    list = { { line = 1, heading = "the script", code = "arg[0] = " .. string.format("%q", abs)
      .. "\n" .. read(file), output = fo and fo:read("a") } }
    if fo then fo:close() end
  else
    list = examples(read(file), all)
  end
  if #list == 0 then
    print("not ok - " .. file .. ": no examples found")
    failed = failed + 1
  end
  for _, ex in ipairs(list) do
    total = total + 1
    local name = file .. ":" .. ex.line .. "  (" .. ex.heading .. ")"
    local why = run_one(ex, total)
    if why then
      failed = failed + 1
      print("not ok - " .. name)
      for l in why:gmatch("[^\n]+") do print("#   " .. l) end
    else
      print("ok - " .. name)
    end
  end
end
sh("rm -rf '" .. base .. "'")
print("# " .. total .. " examples, " .. failed .. " failed")
os.exit(failed == 0 and 0 or 1)
