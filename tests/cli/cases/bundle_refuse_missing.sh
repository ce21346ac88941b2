mkdir bundle_refuse_missing && cd bundle_refuse_missing || exit 9
# A hostile bundle (missing): run and inspect refuse it, naming the entry.
python3 "$LUARIG_ROOT/tests/bundle/hostile.py" missing x.rig || exit 9
"$LUARIG" run x.rig
echo "run: $?"
"$LUARIG" inspect x.rig
