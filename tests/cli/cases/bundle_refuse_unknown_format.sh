mkdir bundle_refuse_unknown_format && cd bundle_refuse_unknown_format || exit 9
# A hostile bundle (unknown_format): run and inspect refuse it, naming the entry.
python3 "$LUARIG_ROOT/tests/bundle/hostile.py" unknown_format x.rig || exit 9
"$LUARIG" run x.rig
echo "run: $?"
"$LUARIG" inspect x.rig
