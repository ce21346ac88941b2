mkdir bundle_refuse_bomb && cd bundle_refuse_bomb || exit 9
# A hostile bundle (bomb): run and inspect refuse it, naming the entry.
python3 "$LUARIG_ROOT/tests/bundle/hostile.py" bomb x.rig || exit 9
"$LUARIG" run x.rig
echo "run: $?"
"$LUARIG" inspect x.rig
