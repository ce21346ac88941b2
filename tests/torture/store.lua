-- torture: from=loop
-- rig.store's bindings (lua/store.c): a memory and an LMDB store made
-- (push_store: the handle first, then the store), operations on the worker
-- pool (sop_new, sop_start, sop_k), and closing. Every result is checked:
-- an expected failure (nil, message) raises its message. arg[1] is an
-- empty scratch directory.
local core = require("rig.core")
local dir = assert(arg[1])

local mem <close> = assert(core.store_memory())
assert(mem:kind() == "memory")
local ok, existed = assert(mem:blob_put("k", "some bytes"))
assert(ok == true and existed == false)
assert(assert(mem:blob_get("k")) == "some bytes")

local db <close> = assert(core.store_lmdb({ root = dir .. "/db" }))
assert(db:root() == dir .. "/db")
assert(db:blob_put("b", "x"))
assert(assert(db:blob_get("b")) == "x")
local ws = dir .. "/ws"
assert(os.execute("mkdir -p '" .. ws .. "' && printf hi > '" .. ws .. "/f'"))
local ref, skipped, st = assert(db:snapshot(ws))
assert(#skipped == 0 and st.files == 1)
local list = assert(db:list())
assert(#list == 1 and list[1].ref == ref)
local gc = assert(db:gc({ ref }))
assert(gc.deleted == 0, "gc deleted a live snapshot")
db:close()
assert(not pcall(db.kind, db))
print("torture: done")
