-- rig.store: storage backends and workspace snapshots.
--
--   local store = rig.store.memory()              -- or rig.store.lmdb{ root = "/abs/dir" }
--   rig.store.nats{ url = "nats://host:4222" }    -- NATS JetStream, several processes or hosts
--   rig.store.nats{ embedded_dir = "/abs/dir" }   -- starts and owns a local nats-server -js
--     -- exactly one of url and embedded_dir; also user, password, token, creds_file,
--     -- nkey with nkey_seed_file (never printed), namespace (separate streams on one
--     -- server), lease_ttl and timeout (seconds; defaults 10 and 5), replicas (1..5,
--     -- default 1: the copies of each stream it creates on a cluster; url may list
--     -- the cluster's servers comma-separated)
--   local ref, skipped, stats = store:snapshot(dir)
--     -- ref "v1:sha256:<64 hex>"; skipped = { { path = "sock", reason = "socket" }, ... }
--     -- stats = { files, dirs, symlinks, bytes, files_hashed, blobs_written }
--   store:restore(ref, dir)        -- true; dir must be empty or absent
--   store:rewind(ref, dir)         -- { written = n, removed = n }: dir made equal to ref in place
--   store:diff(a, b)               -- { added = { paths }, removed = { ... }, modified = { ... } }
--   store:export(ref, "x.tar")     -- true (GNU tar, deterministic)
--   store:import("x.tar")          -- ref (hostile archives are refused)
--   store:gc{ live refs }          -- { kept = n, deleted = n }
--   store:list()                   -- { { ref, time, files, bytes }, ... } newest first
--   store:root()                   -- the lmdb state root, or nil for a memory store
--   store:close()                  -- also on collection and with <close>
--
-- Every call waits on a worker thread (the loop keeps running) and returns
-- nil, message, code on an expected failure (not found, refused, a file
-- changed while it was read: code "conflict"). Call them inside a task
-- (the script's top level is one). The stat cache of an lmdb store lives
-- in <root>/statcache; a memory store keeps it in memory.
local core = require "rig.core"

local M = {}

function M.memory(opts)
  if opts ~= nil then
    if type(opts) ~= "table" then error("rig.store.memory: options must be a table", 2) end
    for k in pairs(opts) do error("rig.store.memory: unknown option '" .. tostring(k) .. "'", 2) end
  end
  return core.store_memory()
end

function M.lmdb(opts)
  if type(opts) ~= "table" then error("rig.store.lmdb: options must be a table", 2) end
  return core.store_lmdb(opts)
end

function M.nats(opts)
  if type(opts) ~= "table" then error("rig.store.nats: options must be a table", 2) end
  return core.store_nats(opts)
end

return M
