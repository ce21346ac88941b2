mkdir bundle_run_syntax && cd bundle_run_syntax || exit 9
# A bundle built elsewhere (pack refuses this one) verifies, but its module
# with a syntax error fails at require, naming the file inside the bundle
# and the line; inspect does not compile.
python3 "$LUARIG_ROOT/tests/bundle/hostile.py" syntax x.rig || exit 9
"$LUARIG" run x.rig 2>&1 | head -2
"$LUARIG" inspect x.rig | tail -1
