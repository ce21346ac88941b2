mkdir bundle_refuse_backslash && cd bundle_refuse_backslash || exit 9
# A hostile bundle (backslash): run and inspect refuse it, naming the entry.
python3 "$LUARIG_ROOT/tests/bundle/hostile.py" backslash x.rig || exit 9
"$LUARIG" run x.rig
echo "run: $?"
"$LUARIG" inspect x.rig
