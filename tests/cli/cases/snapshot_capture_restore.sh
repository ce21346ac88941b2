mkdir snapshot_capture_restore && cd snapshot_capture_restore || exit 9
# Capture prints skipped entries on stderr and the ref alone on its last
# stdout line; the same tree always gives the same ref; restore refuses a
# non-empty directory; list shows the refs with their file counts.
S="--state $PWD/state"
mkdir -p w/sub w/empty
printf 'hello\n' > w/sub/a.txt
printf '#!/bin/sh\n' > w/run.sh && chmod 755 w/run.sh
ln -s sub/a.txt w/link
mkfifo w/pipe
"$LUARIG" snapshot $S capture w > ref.txt 2> err.txt; echo "capture: $?"
cat err.txt
REF=$(tail -n 1 ref.txt)
echo "$REF"
"$LUARIG" snapshot $S restore "$REF" out; echo "restore: $?"
rm w/pipe
diff -r --no-dereference w out && echo "restored tree equal"
ls -l out/run.sh | cut -c1-10
"$LUARIG" snapshot $S capture out 2>&1
"$LUARIG" snapshot $S restore "$REF" out; echo "restore again: $?"
"$LUARIG" snapshot $S list | sed 's/  [0-9T:Z-]*  /  TIME  /'
