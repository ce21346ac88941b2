mkdir bundle_refuse_dot && cd bundle_refuse_dot || exit 9
# A hostile bundle (dot): run and inspect refuse it, naming the entry.
python3 "$LUARIG_ROOT/tests/bundle/hostile.py" dot x.rig || exit 9
"$LUARIG" run x.rig
echo "run: $?"
"$LUARIG" inspect x.rig
