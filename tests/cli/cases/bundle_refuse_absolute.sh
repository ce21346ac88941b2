mkdir bundle_refuse_absolute && cd bundle_refuse_absolute || exit 9
# A hostile bundle (absolute): run and inspect refuse it, naming the entry.
python3 "$LUARIG_ROOT/tests/bundle/hostile.py" absolute x.rig || exit 9
"$LUARIG" run x.rig
echo "run: $?"
"$LUARIG" inspect x.rig
