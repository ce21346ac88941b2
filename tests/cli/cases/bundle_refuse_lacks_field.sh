mkdir bundle_refuse_lacks_field && cd bundle_refuse_lacks_field || exit 9
# A hostile bundle (lacks_field): run and inspect refuse it, naming the entry.
python3 "$LUARIG_ROOT/tests/bundle/hostile.py" lacks_field x.rig || exit 9
"$LUARIG" run x.rig
echo "run: $?"
"$LUARIG" inspect x.rig
