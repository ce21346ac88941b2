mkdir bundle_refuse_dotdot && cd bundle_refuse_dotdot || exit 9
# A hostile bundle (dotdot): run and inspect refuse it, naming the entry.
python3 "$LUARIG_ROOT/tests/bundle/hostile.py" dotdot x.rig || exit 9
"$LUARIG" run x.rig
echo "run: $?"
"$LUARIG" inspect x.rig
