mkdir bundle_refuse_big_entry && cd bundle_refuse_big_entry || exit 9
# A hostile bundle (big_entry): run and inspect refuse it, naming the entry.
python3 "$LUARIG_ROOT/tests/bundle/hostile.py" big_entry x.rig || exit 9
"$LUARIG" run x.rig
echo "run: $?"
"$LUARIG" inspect x.rig
