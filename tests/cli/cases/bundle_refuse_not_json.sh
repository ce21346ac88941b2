mkdir bundle_refuse_not_json && cd bundle_refuse_not_json || exit 9
# A hostile bundle (not_json): run and inspect refuse it, naming the entry.
python3 "$LUARIG_ROOT/tests/bundle/hostile.py" not_json x.rig || exit 9
"$LUARIG" run x.rig
echo "run: $?"
"$LUARIG" inspect x.rig
