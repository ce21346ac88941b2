-- torture: from=start
-- The start-up: the loop, the Lua state, the standard libraries, the
-- searchers and require "rig" (lua/main.c), then a trivial main task.
assert(type(rig) == "table")
print("torture: done")
