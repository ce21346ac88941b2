mkdir bundle_refuse_manifest_not_first && cd bundle_refuse_manifest_not_first || exit 9
# A hostile bundle (manifest_not_first): run and inspect refuse it, naming the entry.
python3 "$LUARIG_ROOT/tests/bundle/hostile.py" manifest_not_first x.rig || exit 9
"$LUARIG" run x.rig
echo "run: $?"
"$LUARIG" inspect x.rig
