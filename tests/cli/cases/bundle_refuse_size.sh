mkdir bundle_refuse_size && cd bundle_refuse_size || exit 9
# A hostile bundle (size): run and inspect refuse it, naming the entry.
python3 "$LUARIG_ROOT/tests/bundle/hostile.py" size x.rig || exit 9
"$LUARIG" run x.rig
echo "run: $?"
"$LUARIG" inspect x.rig
