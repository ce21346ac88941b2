mkdir bundle_refuse_empty_component && cd bundle_refuse_empty_component || exit 9
# A hostile bundle (empty_component): run and inspect refuse it, naming the entry.
python3 "$LUARIG_ROOT/tests/bundle/hostile.py" empty_component x.rig || exit 9
"$LUARIG" run x.rig
echo "run: $?"
"$LUARIG" inspect x.rig
