mkdir bundle_refuse_device && cd bundle_refuse_device || exit 9
# A hostile bundle (device): run and inspect refuse it, naming the entry.
python3 "$LUARIG_ROOT/tests/bundle/hostile.py" device x.rig || exit 9
"$LUARIG" run x.rig
echo "run: $?"
"$LUARIG" inspect x.rig
