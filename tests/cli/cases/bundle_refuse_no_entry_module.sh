mkdir bundle_refuse_no_entry_module && cd bundle_refuse_no_entry_module || exit 9
# A hostile bundle (no_entry_module): run and inspect refuse it, naming the entry.
python3 "$LUARIG_ROOT/tests/bundle/hostile.py" no_entry_module x.rig || exit 9
"$LUARIG" run x.rig
echo "run: $?"
"$LUARIG" inspect x.rig
