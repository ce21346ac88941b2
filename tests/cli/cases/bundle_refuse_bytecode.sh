mkdir bundle_refuse_bytecode && cd bundle_refuse_bytecode || exit 9
# A hostile bundle (bytecode): run and inspect refuse it, naming the entry.
python3 "$LUARIG_ROOT/tests/bundle/hostile.py" bytecode x.rig || exit 9
"$LUARIG" run x.rig
echo "run: $?"
"$LUARIG" inspect x.rig
