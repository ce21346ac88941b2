# `luarig sandbox` usage errors exit 2 (the check itself is machine-dependent:
# tests/lua/sandbox_profile_spec.lua checks its structure).
"$LUARIG" sandbox; echo "none: $?"
"$LUARIG" sandbox chek; echo "unknown: $?"
"$LUARIG" sandbox check extra; echo "extra: $?"
"$LUARIG" sandbox help; echo "help: $?"
"$LUARIG" help | grep sandbox
