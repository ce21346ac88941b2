# Usage errors exit 2; work failures exit 1.
"$LUARIG" snapshot; echo "none: $?"
"$LUARIG" snapshot frobnicate; echo "unknown: $?"
"$LUARIG" snapshot restore onlyone; echo "too few: $?"
"$LUARIG" snapshot --state "$PWD/st" list extra; echo "too many: $?"
"$LUARIG" snapshot --state; echo "state value: $?"
"$LUARIG" snapshot --state "$PWD/st" restore v1:sha256:0000000000000000000000000000000000000000000000000000000000000000 out 2>&1 | sed "s|$PWD|PWD|"
mkdir -p snapshot_usage_tree && "$LUARIG" snapshot --state "$PWD/st" capture snapshot_usage_tree >/dev/null; echo "capture: $?"
"$LUARIG" snapshot --state "$PWD/st" restore v1:sha256:0000000000000000000000000000000000000000000000000000000000000000 out; echo "not found: $?"
"$LUARIG" snapshot --state "$PWD/st" capture /nonexistent/dir; echo "no dir: $?"
"$LUARIG" snapshot help | head -n 1
rm -rf "$PWD/st"
