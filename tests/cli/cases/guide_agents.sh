# The seed guide's "more agents" example runs on its scripted model.
"$LUARIG" "$LUARIG_ROOT"/scripts/guide/agents.lua
