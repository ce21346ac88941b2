# The model demo runs offline on the scripted model when no key is set.
env -u ANTHROPIC_API_KEY -u OPENAI_API_KEY "$LUARIG" "$LUARIG_ROOT"/scripts/model.lua | sed 's/[0-9][0-9]:[0-9][0-9]/HH:MM/g'
