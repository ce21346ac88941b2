mkdir bundle_pack_self && cd bundle_pack_self || exit 9
# Packing the current directory into itself: the previous output is skipped,
# no temporary file is left behind, and the result is the same bytes.
mkdir app && cd app || exit 9
printf 'print("self", ...)\n' > main.lua
"$LUARIG" pack .
cp app-0.0.0.rig ../first.rig
"$LUARIG" pack .
cmp app-0.0.0.rig ../first.rig && echo identical
ls
"$LUARIG" run app-0.0.0.rig ok
