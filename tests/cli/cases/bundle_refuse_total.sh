mkdir bundle_refuse_total && cd bundle_refuse_total || exit 9
# A hostile bundle (total): run and inspect refuse it, naming the entry.
python3 "$LUARIG_ROOT/tests/bundle/hostile.py" total x.rig || exit 9
"$LUARIG" run x.rig
echo "run: $?"
"$LUARIG" inspect x.rig
