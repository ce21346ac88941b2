-- guide/storage.lua: "Choose durable storage" — memory and LMDB stores.
--
--   build/luarig scripts/guide/storage.lua [DIR]
--
-- A memory store forgets everything with the process; an LMDB store keeps
-- the journals, the catalog, leases and snapshots on disk, so a session can
-- be listed, replayed and restored by a later process. The store root must
-- stay outside every workspace the rig snapshots. Runs offline on a scripted
-- model; DIR (default: a new temporary directory) holds the state.

local function sh(cmd)
  local r = assert(rig.process.run{ argv = { "/bin/sh", "-c", cmd } })
  assert(r.code == 0, cmd .. ": " .. r.stderr)
  return (r.stdout:gsub("\n$", ""))
end
local base = arg[1] or sh("mktemp -d")
local state = base .. "/state"

-- The same assistant in every process: a rig's loops must be defined the
-- same way for a restore to accept the journal (their revisions match).
local function assistant(model)
  return rig.loop{ name = "assistant", model = model, system = "Remember what you are told." }
end
local function remembering_model()
  -- answers from the whole conversation it is sent, as a real model would
  return rig.model.script{ steps = { function(req)
    local said = {}
    for _, m in ipairs(req.messages) do
      if m.role == "user" then said[#said + 1] = m.content[1].text end
    end
    return { text = "You have told me " .. #said .. " thing(s): " .. table.concat(said, " / ") }
  end } }
end

local function one_turn(s, text)
  local sub = s:subscribe{ loops = "all" }
  s:submit(text)
  for ev in sub:events() do
    if ev.ends_turn then
      sub:close()
      local blocks = ev.message and ev.message.content or {}
      return ev.type, blocks[1] and blocks[1].text
    end
  end
end

-- 1. Memory: fine for tests; gone with the process.
do
  local store <close> = rig.store.memory()
  local r = rig.define{ loops = { assistant(remembering_model()) }, primers = { "assistant" },
                        store = store }
  local s = assert(r:session())
  print("memory store:  session " .. s.id)
  print("  " .. select(2, one_turn(s, "the code word is 'heron'")))
  s:shutdown()
  print("  sessions in this store: " .. #assert(r:sessions()) .. " (and none once the process ends)")
end

-- 2. LMDB: one process writes ...
local id
do
  local store <close> = rig.store.lmdb{ root = state }
  local r = rig.define{ loops = { assistant(remembering_model()) }, primers = { "assistant" },
                        store = store }
  local s = assert(r:session())
  id = s.id
  print("lmdb store:    " .. state)
  print("  session " .. id)
  print("  " .. select(2, one_turn(s, "the code word is 'kestrel'")))
  s:shutdown()
end -- the store closes here, as if the process ended

-- ... and a later one (here: the same script, with the store opened afresh)
-- finds the session in the catalog, reads its journal and restores it.
do
  local store <close> = rig.store.lmdb{ root = state }
  local r = rig.define{ loops = { assistant(remembering_model()) }, primers = { "assistant" },
                        store = store }
  for _, e in ipairs(assert(r:sessions())) do
    print(string.format("  catalog: %s  state=%s  title=%q  tokens=%d", e.id, tostring(e.state),
      tostring(e.title), (e.input_tokens or 0) + (e.output_tokens or 0)))
  end
  local s = assert(r:restore(id))
  local types = {}
  for rec in s:journal{ from = 1 } do types[#types + 1] = rec.seq .. ":" .. rec.type end
  print("  journal: " .. table.concat(types, " "))
  print("  restored with " .. #s:history() .. " messages of history")
  print("  " .. select(2, one_turn(s, "and what was the code word?")))
  s:shutdown()

  -- 3. The store root must not overlap a workspace: writing the journal
  -- would change the tree being snapshotted.
  local ok, err = pcall(rig.define, { loops = { assistant(remembering_model()) },
    primers = { "assistant" }, store = store,
    workspace = rig.workspace.exclusive{ root = state .. "/workspace" } })
  print("overlap refused: " .. tostring(not ok) .. " — " .. tostring(err):gsub("^.-rig%.define", "rig.define"))
end

print("from the shell:  luarig sessions --state " .. state)
print("                 luarig log --state " .. state .. " " .. id)
