mkdir snapshot_diff_rewind && cd snapshot_diff_rewind || exit 9
# diff lists A/D/M lines sorted by path (odd names quoted); rewind writes
# only what differs and removes extras.
S="--state $PWD/state"
mkdir -p w/d
printf 'one' > w/d/keep
printf 'two' > w/gone
printf 'three' > w/change
A=$("$LUARIG" snapshot $S capture w)
printf 'THREE' > w/change
rm w/gone
mkdir w/new && printf 'x' > w/new/file
printf 'odd' > "w/new
line"
B=$("$LUARIG" snapshot $S capture w)
"$LUARIG" snapshot $S diff "$A" "$B"
"$LUARIG" snapshot $S rewind "$A" w
"$LUARIG" snapshot $S rewind "$A" w
test "$("$LUARIG" snapshot $S capture w)" = "$A" && echo "back at A"
"$LUARIG" snapshot $S diff "$A" "$A"; echo "empty diff: $?"
