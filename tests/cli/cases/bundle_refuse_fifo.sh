mkdir bundle_refuse_fifo && cd bundle_refuse_fifo || exit 9
# A hostile bundle (fifo): run and inspect refuse it, naming the entry.
python3 "$LUARIG_ROOT/tests/bundle/hostile.py" fifo x.rig || exit 9
"$LUARIG" run x.rig
echo "run: $?"
"$LUARIG" inspect x.rig
