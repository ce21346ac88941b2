-- rig.run(loop | rig, text | blocks [, opts]) -> answer, usage | nil, message, code, event
--
-- s:ask (rig.ask) on a throwaway session in memory, the counterpart of an agent
-- SDK's Runner.run: a loop is defined into a rig of its own (with the loops its
-- delegates name as objects); a rig is copied with a memory store. opts as s:ask's,
-- but on_gate defaults to "terminal" when standard input is a terminal and "deny"
-- otherwise (nobody else can answer). The session is shut down before it returns.
-- A module of its own: it needs rig.define, which reaches rig.session, which
-- requires rig.ask (no cycle).

local core = require "rig.core"
local ask_mod = require "rig.ask"
local loop_mod = require "rig.loop"
local define_mod = require "rig.define"
local store_mod = require "rig.store"

return function(target, input, opts)
  opts = ask_mod._check_opts(opts, "rig.run")
  local r
  if loop_mod.is_loop(target) then
    r = define_mod{ loops = { target }, primers = { target.name }, store = store_mod.memory() }
  elseif define_mod.is_rig(target) then
    local p = define_mod._private(target)
    local loops = {}
    for i, l in ipairs(p.loops) do loops[i] = l end
    r = define_mod{ loops = loops, primers = p.primers, active_primer = p.active_primer,
                    store = store_mod.memory(), delegation_limits = p.delegation_limits,
                    workspace = p.workspace, snapshots = p.workspace and p.snapshots or nil }
  else
    error("rig.run: expects a rig.loop or a rig (rig.define), got " .. type(target), 2)
  end
  local s, msg, code = r:session()
  if not s then return nil, msg, code end
  local copy = {}
  for k, v in pairs(opts) do copy[k] = v end
  if copy.on_gate == nil then copy.on_gate = core.isatty(0) and "terminal" or "deny" end
  local res = table.pack(pcall(ask_mod._ask, s, input, copy))
  s:shutdown()
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end
