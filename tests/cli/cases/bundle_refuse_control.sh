mkdir bundle_refuse_control && cd bundle_refuse_control || exit 9
# A hostile bundle (control): run and inspect refuse it, naming the entry.
python3 "$LUARIG_ROOT/tests/bundle/hostile.py" control x.rig || exit 9
"$LUARIG" run x.rig
echo "run: $?"
"$LUARIG" inspect x.rig
