# Reads never create state: sessions, show, log and the snapshot reads on a
# state root with no store say so (exit 1) and leave nothing behind.
mkdir read_no_store && cd read_no_store || exit 9
id=00000000-0000-4000-8000-000000000000
ref=v1:sha256:0000000000000000000000000000000000000000000000000000000000000000
run() { out=$("$@" 2>&1); st=$?; echo "$out" | sed "s|$PWD|PWD|; s|$ref|REF|g"; }
for cmd in "sessions" "sessions --json" "show $id" "log $id" "log 0000"; do
	run "$LUARIG" $cmd --state "$PWD/typo"; echo "$cmd: $st"
done
mkdir tree
for cmd in "list" "diff $ref $ref" "export $ref out.tar" "restore $ref tree" "rewind $ref tree"; do
	run "$LUARIG" snapshot --state "$PWD/typo" $cmd; echo "snapshot $(echo "$cmd" | sed "s|$ref|REF|g"): $st"
done
test -e typo && echo "typo was created" || echo "typo: not created"
test -e out.tar && echo "out.tar was written" || echo "out.tar: not written"
# the default root: named, with a word on how to pick another
XDG_STATE_HOME="$PWD/xdg" run "$LUARIG" sessions; echo "default root: $st"
test -e xdg && echo "xdg was created" || echo "xdg: not created"
# a directory that holds no store is not one either
mkdir notastore
run "$LUARIG" sessions --state notastore; echo "empty directory: $st"
ls notastore
# a write makes the store; reads work on it from then on
"$LUARIG" snapshot --state "$PWD/typo" capture tree >/dev/null; echo "capture: $?"
"$LUARIG" sessions --state "$PWD/typo"; echo "sessions after a write: $?"
