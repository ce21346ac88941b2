mkdir bundle_refuse_extra && cd bundle_refuse_extra || exit 9
# A hostile bundle (extra): run and inspect refuse it, naming the entry.
python3 "$LUARIG_ROOT/tests/bundle/hostile.py" extra x.rig || exit 9
"$LUARIG" run x.rig
echo "run: $?"
"$LUARIG" inspect x.rig
