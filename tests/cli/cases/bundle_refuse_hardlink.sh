mkdir bundle_refuse_hardlink && cd bundle_refuse_hardlink || exit 9
# A hostile bundle (hardlink): run and inspect refuse it, naming the entry.
python3 "$LUARIG_ROOT/tests/bundle/hostile.py" hardlink x.rig || exit 9
"$LUARIG" run x.rig
echo "run: $?"
"$LUARIG" inspect x.rig
