mkdir bundle_refuse_hash && cd bundle_refuse_hash || exit 9
# A hostile bundle (hash): run and inspect refuse it, naming the entry.
python3 "$LUARIG_ROOT/tests/bundle/hostile.py" hash x.rig || exit 9
"$LUARIG" run x.rig
echo "run: $?"
"$LUARIG" inspect x.rig
