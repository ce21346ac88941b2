mkdir bundle_read_api && cd bundle_read_api || exit 9
# rig.bundle: the running bundle's manifest and its files' bytes, read from
# the verified archive; nil outside a bundle. The rig library, its lazy areas
# and the built-in C modules load as usual.
mkdir -p app/prompts
printf '{ "name": "reader", "version": "1.0.0", "description": "reads" }\n' > app/rig.json
printf 'You are terse.\n' > app/prompts/system.md
cat > app/main.lua <<'LUA'
local b = rig.bundle
print(b.name, b.version, b.entry, b.description, b.format, b.path, b.luarig == rig.version)
for _, f in ipairs(b.files) do print(f.path, f.size, #f.sha256) end
io.write(b.read("prompts/system.md"))
print(b.read("./prompts/system.md") == b.read(b.path .. "/prompts/system.md"))
print(b.read("prompts/nothere.md"))
print(b.read("/etc/passwd"))
print(b.read("rig.json"))
print(pcall(b.read))
print(rig.json.encode({ 1 }), require("cjson").encode({ 2 }))
LUA
"$LUARIG" pack app >/dev/null
"$LUARIG" run reader-1.0.0.rig
echo "run: $?"
"$LUARIG" -e 'print(rig.bundle)'
