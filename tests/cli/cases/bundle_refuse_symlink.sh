mkdir bundle_refuse_symlink && cd bundle_refuse_symlink || exit 9
# A hostile bundle (symlink): run and inspect refuse it, naming the entry.
python3 "$LUARIG_ROOT/tests/bundle/hostile.py" symlink x.rig || exit 9
"$LUARIG" run x.rig
echo "run: $?"
"$LUARIG" inspect x.rig
