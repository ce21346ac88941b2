# show and log take a unique prefix of a session id (as the REPL's :attach
# does); no match and several matches are errors that name what matched.
mkdir session_id_prefix && cd session_id_prefix || exit 9
cat > mk.lua <<'LUA'
local core = require "rig.core"
local store = assert(core.store_lmdb{ root = os.getenv("PWD") .. "/state" })
for i = 1, 17 do -- 17 ids: two of them share a first hex digit
  local s = assert(core.session_open(store))
  s:emit('{"v":1,"type":"SessionStarted"}', { type = "SessionStarted", enduring = true, id = "e1" })
  s:catalog{ title = "session " .. i, state = "stopped", status = "stopped" }
  s:close()
  print(s.id)
end
LUA
"$LUARIG" mk.lua >ids || exit 1
# a digit two ids or more start with, and one of those ids
d=$(cut -c1 ids | sort | uniq -d | head -n 1)
one=$(grep "^$d" ids | head -n 1)
mask() {
	sed -e "s/$one/ONE/g" -e "s/'$d'/'D'/" -e 's/[0-9] sessions start/N sessions start/' \
		-e "s/[0-9a-f]\{8\}-[0-9a-f]\{4\}-[0-9a-f]\{4\}-[0-9a-f]\{4\}-[0-9a-f]\{12\}/ID/g" \
		-e 's/(\(ONE\|ID\)\(, \(ONE\|ID\)\)*\(, …\)\{0,1\})/(ONE, ID…)/'
}
# the error lists at most four of the matches, so with five or more ONE may
# not be among them: any list of ids reads the same
run() { out=$("$@" 2>&1); st=$?; echo "$out" | mask; echo "status $st"; }
echo "== show by a unique prefix"
run sh -c "\"\$LUARIG\" show --state state $(echo "$one" | cut -c1-13) | sed 's/,.*//'"
echo "== log by a unique prefix"
run "$LUARIG" log --state state "$(echo "$one" | cut -c1-10)"
echo "== an ambiguous prefix lists the matches"
run "$LUARIG" show --state state "$d"
run "$LUARIG" log --state state "$d"
echo "== no match"
for c in 0 1 2 3 4 5 6 7 8 9 a b c d e f; do grep -q "^$c" ids || { free=$c; break; }; done
if [ -n "$free" ]; then
	run "$LUARIG" show --state state "${free}0" | sed "s/'${free}0'/'X0'/"
else
	printf "luarig: no session id starts with 'X0'\nstatus 1\n" # every digit taken: the same words
fi
echo "== a full id is taken as given"
run "$LUARIG" show --state state 00000000-0000-4000-8000-000000000000
