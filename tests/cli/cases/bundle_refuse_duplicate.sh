mkdir bundle_refuse_duplicate && cd bundle_refuse_duplicate || exit 9
# A hostile bundle (duplicate): run and inspect refuse it, naming the entry.
python3 "$LUARIG_ROOT/tests/bundle/hostile.py" duplicate x.rig || exit 9
"$LUARIG" run x.rig
echo "run: $?"
"$LUARIG" inspect x.rig
