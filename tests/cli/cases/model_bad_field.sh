# A misspelt model field is an error naming it, at the caller's line.
"$LUARIG" -e 'rig.model{ provider = "anthropic", name = "claude-sonnet-4-5", max_token = 10 }' 2>&1 | head -n 1
"$LUARIG" -e 'rig.model{ provider = "openai", name = "gpt-4o", base_url = "http://api.example.com/v1" }' 2>&1 | head -n 1
