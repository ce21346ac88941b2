-- The luarig side of tests/bench/cache_bench.py.
--
--   luarig cache_session.lua BASE_URL auto|off STEPS
--     One session of one loop (catalog model anthropic/claude-sonnet-4-5 at
--     the mock server BASE_URL, prompt caching as given) runs one turn: the
--     model reads STEPS - 1 pages of a manual through the tool "read_page",
--     one a step, then answers. Prints one JSON line: the session's usage
--     (input, cache read and write, output tokens, cost) and its steps.

local base, mode, steps = arg[1], arg[2], tonumber(arg[3])
if not base or (mode ~= "auto" and mode ~= "off") or not steps then
  io.stderr:write("usage: cache_session.lua BASE_URL auto|off STEPS\n")
  os.exit(2)
end

local json = require "rig.json"

-- a long system prompt, as agent prompts are (~1.6k tokens)
local rules = {}
for i = 1, 40 do
  rules[i] = string.format("%d. When a page mentions a part number, quote it exactly and say which"
    .. " page it came from; never merge two pages into one answer line.", i)
end
local system = "You answer questions about a printer's service manual. Read it with read_page,"
  .. " one page at a time.\n" .. table.concat(rules, "\n")

-- a page of the manual (~700 tokens), the same bytes for the same number
local function page(n)
  local lines = {}
  for i = 1, 28 do
    lines[i] = string.format("p%02d.%02d  Remove the %s cover screw (part %05d) and lift the tray;"
      .. " torque %d.%d Nm on refit.", n, i, (i % 2 == 0) and "left" or "right",
      (n * 131 + i * 17) % 100000, 1 + (n + i) % 3, (n * i) % 10)
  end
  return table.concat(lines, "\n")
end

local read_page = rig.tool{
  name = "read_page", description = "Returns one page of the service manual.",
  schema = { type = "object", properties = { page = { type = "integer" } }, required = { "page" } },
  prepare = function(a) return { summary = "page " .. tostring(a.page), requirements = {} }, a.page end,
  run = function(_, ctx) return page(math.tointeger(ctx.prepared) or 0) end,
}

local model = rig.model{ "anthropic/claude-sonnet-4-5", base_url = base, cache = mode,
                         api_key_env = "CACHE_BENCH_KEY", retry = { attempts = 1 } }
local gate = rig.gate{ access = { ["filesystem.read"] = "allow" }, approver = "headless" }
local loop = rig.loop{ name = "manual", model = model, system = system, tools = { read_page },
                       gate = gate, policy_revision = "bench",
                       limits = { iterations = steps + 1, calls = steps + 1 } }
local r = rig.define{ loops = { loop }, primers = { "manual" }, store = rig.store.memory() }

local s = assert(r:session())
local sub = s:subscribe{ loops = "all" }
assert(s:submit("Read the manual page by page and list every part number."))
local ended
for ev in sub:events() do
  if ev.ends_turn then ended = ev.type; break end
end
local u = s:usage()
io.write(json.encode{ ended = ended, usage = u }, "\n")
s:shutdown()
