-- runner.lua: runs one spec file under luarig and prints TAP-style lines.
--
--   describe("area", function() it("does x", function() expect(1 + 1).to_be(2) end) end)
--
-- Each `it` runs as its own task with a deadline, so specs can wait (sleep,
-- HTTP, processes) and a hung case fails instead of hanging the suite.
-- `after_all(fn)` registers teardown that runs once after every case, even
-- when cases failed (a failing teardown is reported as its own failure).
-- `skip(reason)` inside a case ends it as "ok - name # SKIP reason", which
-- tests/run.sh counts apart from passes.
local file = assert(arg[1], "usage: luarig tests/lua/runner.lua SPEC.lua")

local cases, prefix, teardown = {}, {}, {}

-- Every os.tmpname() of the run is removed (with whatever a case made of
-- it: a directory, a store) once the cases and teardowns are done, so a
-- spec leaves nothing in /tmp; a case that needs a path kept past its run
-- has no way to, by design.
local tmpnames, real_tmpname = {}, os.tmpname
os.tmpname = function()
  local p = real_tmpname()
  tmpnames[#tmpnames + 1] = p
  return p
end
local function remove_tmpnames()
  for i = 1, #tmpnames, 64 do
    local args = {}
    for j = i, math.min(i + 63, #tmpnames) do
      local p = tmpnames[j]
      -- mkstemp's names: /tmp/lua_ and six letters or digits, nothing to quote
      if p:match("^/[%w/_.-]+$") then args[#args + 1] = "'" .. p .. "'" end
    end
    if #args > 0 then os.execute("rm -rf -- " .. table.concat(args, " ")) end
  end
end
local env = setmetatable({}, { __index = _G })
local SKIP = {}

function env.after_all(fn)
  teardown[#teardown + 1] = { name = table.concat(prefix, " "), fn = fn }
end

function env.skip(reason)
  error(setmetatable({ reason = tostring(reason) }, SKIP), 0)
end

function env.describe(name, fn)
  prefix[#prefix + 1] = name
  fn()
  prefix[#prefix] = nil
end

function env.it(name, fn, opts)
  cases[#cases + 1] = { name = table.concat(prefix, " ") .. " " .. name, fn = fn,
                        timeout = opts and opts.timeout or 30 }
end

local function fmt(v)
  if type(v) == "string" then return string.format("%q", v) end
  return tostring(v)
end

local function deep_equal(a, b)
  if a == b then return true end
  if type(a) ~= "table" or type(b) ~= "table" then return false end
  for k, v in pairs(a) do if not deep_equal(v, b[k]) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end

function env.expect(v)
  local e = {}
  function e.to_be(x) if v ~= x then error("expected " .. fmt(x) .. ", got " .. fmt(v), 2) end end
  function e.to_equal(x) if not deep_equal(v, x) then error("expected tables to be equal, got " .. fmt(v), 2) end end
  function e.to_be_truthy() if not v then error("expected a true value, got " .. fmt(v), 2) end end
  function e.to_be_nil() if v ~= nil then error("expected nil, got " .. fmt(v), 2) end end
  function e.to_match(p)
    if type(v) ~= "string" or not v:find(p) then error("expected " .. fmt(v) .. " to match " .. fmt(p), 2) end
  end
  function e.to_fail(p)  -- v is a function; it must raise an error matching p
    local ok, err = pcall(v)
    if ok then error("expected an error", 2) end
    if p and not tostring(err):find(p) then error("error " .. fmt(err) .. " does not match " .. fmt(p), 2) end
  end
  function e.at_least(x) if not (v >= x) then error("expected >= " .. fmt(x) .. ", got " .. fmt(v), 2) end end
  function e.at_most(x) if not (v <= x) then error("expected <= " .. fmt(x) .. ", got " .. fmt(v), 2) end end
  return e
end

local chunk = assert(loadfile(file, "t", env))
chunk()

local failed = 0
for _, c in ipairs(cases) do
  local t = rig.spawn(function()
    return xpcall(c.fn, function(e)
      if getmetatable(e) == SKIP then return e end
      return debug.traceback(e)
    end)
  end)
  -- wait() returns xpcall's results, or nil, message, code when the task itself failed
  local ok, err, code = t:wait(c.timeout)
  if ok == nil then
    t:cancel()
    print("not ok - " .. c.name)
    print("#   " .. (code == "timeout" and ("timed out after " .. c.timeout .. "s") or tostring(err)))
    failed = failed + 1
  elseif ok == false and getmetatable(err) == SKIP then
    print("ok - " .. c.name .. " # SKIP " .. err.reason)
  elseif ok == false then
    print("not ok - " .. c.name)
    print("#   " .. (tostring(err):gsub("\n", "\n#   ")))
    failed = failed + 1
  else
    print("ok - " .. c.name)
  end
end
for i = #teardown, 1, -1 do
  local td = teardown[i]
  local t = rig.spawn(function() return xpcall(td.fn, debug.traceback) end)
  local ok, err = t:wait(30)
  if not ok then
    t:cancel()
    print("not ok - " .. td.name .. " (after_all)")
    print("#   " .. (tostring(err):gsub("\n", "\n#   ")))
    failed = failed + 1
  end
end
remove_tmpnames()
print(string.format("# %d cases, %d failed", #cases, failed))
os.exit(failed == 0 and 0 or 1)
