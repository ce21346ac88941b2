mkdir bundle_dofile_loadfile && cd bundle_dofile_loadfile || exit 9
# dofile and loadfile in a bundle read the files it ships (by their path in
# the bundle, with or without "./" or the "app.rig/" of its chunk names) and
# nothing else: not a planted file in the current directory, not an
# absolute path, not "../", not standard input.
mkdir -p app/lib sub
printf 'return 42\n' > app/lib/data.lua
printf 'return x * 2\n' > app/lib/env.lua
printf 'rig.sleep(0)\nreturn "waited"\n' > app/lib/wait.lua
cat > app/main.lua <<'LUA'
local function try(label, f, ...)
  local r = table.pack(pcall(f, ...))
  for i = 1, r.n do r[i] = type(r[i]) == "function" and "function" or tostring(r[i]) end
  print(label, (table.concat(r, "  "):gsub(arg[1]:gsub("%p", "%%%0"), "<abs>")))
end
local function call(name, ...)
  local f, err = loadfile(name, ...)
  if not f then return nil, err end
  return f()
end
try("dofile", dofile, "lib/data.lua")
try("dofile ./", dofile, "./lib/data.lua")
try("loadfile", call, "lib/data.lua")
try("env", call, "lib/env.lua", "t", { x = 21 })
local here = debug.getinfo(1, "S").source:sub(2):match("^(.*/)")
try("chunk name " .. here, dofile, here .. "lib/data.lua")
try("yields", dofile, "lib/wait.lua")
try("mode", loadfile, "lib/data.lua", "b")
try("missing", loadfile, "lib/nothere.lua")
try("missing", dofile, "lib/nothere.lua")
try("planted", loadfile, "planted.lua")
try("planted", dofile, "planted.lua")
try("absolute", call, arg[1])
try("absolute", dofile, arg[1])
try("dotdot", call, "../planted.lua")
try("dotdot", call, "lib/../../planted.lua")
try("stdin", loadfile)
try("stdin", dofile)
LUA
"$LUARIG" pack app -o app.rig >/dev/null
printf 'print("PLANTED planted.lua ran") return "planted"\n' > planted.lua
"$LUARIG" run app.rig "$PWD/planted.lua"
echo "run: $?"
cd sub && "$LUARIG" run ../app.rig "$PWD/../planted.lua" 2>&1 | grep -e dotdot -e 'chunk name'
