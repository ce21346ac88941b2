mkdir bundle_refuse_newer_luarig && cd bundle_refuse_newer_luarig || exit 9
# A hostile bundle (newer_luarig): run and inspect refuse it, naming the entry.
python3 "$LUARIG_ROOT/tests/bundle/hostile.py" newer_luarig x.rig || exit 9
"$LUARIG" run x.rig
echo "run: $?"
"$LUARIG" inspect x.rig
