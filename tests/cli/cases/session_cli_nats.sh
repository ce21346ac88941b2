# luarig sessions / log / snapshot --store nats://… against a real
# nats-server -js on a free loopback port (exit 77: skipped without it).
command -v nats-server >/dev/null 2>&1 || exit 77
mkdir js
printf 'listen: "127.0.0.1:-1"\njetstream { store_dir: "%s/js" }\n' "$PWD" > server.conf
nats-server -c server.conf -js --ports_file_dir "$PWD" >/dev/null 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
url=
for _ in $(seq 200); do
	url=$(grep -o 'nats://127\.0\.0\.1:[0-9]*' "nats-server_$pid.ports" 2>/dev/null | head -1)
	[ -n "$url" ] && break
	sleep 0.05
done
[ -n "$url" ] || { echo "nats-server did not start"; exit 1; }
cat > mk.lua <<'LUA'
local core = require "rig.core"
local store = assert(rig.store.nats{ url = arg[1] })
local s = assert(core.session_open(store))
local function e(t, x) return '{"v":1,"type":"' .. t .. '"' .. (x or "") .. '}' end
s:emit(e("SessionStarted", ',"fingerprint":"abc"'), { type = "SessionStarted", enduring = true, id = "e1" })
s:emit(e("TurnStarted"), { type = "TurnStarted", loop_id = "assistant", enduring = true, id = "e2" })
s:emit(e("SessionStopped"), { type = "SessionStopped", enduring = true, id = "e3" })
s:catalog{ title = "over nats", state = "stopped", status = "stopped", input_tokens = 3,
           output_tokens = 4, loop_count = 1 }
s:close()
print(s.id)
LUA
id=$("$LUARIG" mk.lua "$url") || exit 1
clean() { sed -e "s/$id/ID/g" -e 's/[0-9-]*T[0-9:]*Z/TIME/' -e 's/127\.0\.0\.1:[0-9]*/HOST:PORT/g'; }
echo "== sessions"; "$LUARIG" sessions --store "$url" | clean
echo "== log"; "$LUARIG" log --store "$url" "$id" | clean
echo "== log --from 2 --follow (ends at SessionStopped)"; "$LUARIG" log --store="$url" "$id" --from 2 --follow
echo "== show"; "$LUARIG" show --store "$url" "$id" | grep -c '"title": *"over nats"'
echo "== snapshot"; mkdir ws; echo hi > ws/a
ref=$("$LUARIG" snapshot --store "$url" capture ws) || exit 1
"$LUARIG" snapshot --store "$url" restore "$ref" out && cat out/a
echo "== unknown"; "$LUARIG" show --store "$url" 00000000-0000-4000-8000-000000000000; echo "status $?"
echo "== usage"; "$LUARIG" sessions --store "$url" --state st 2>&1 | head -1
"$LUARIG" log --store http://x "$id" 2>&1 | head -1
"$LUARIG" snapshot --store 2>&1 | head -1
echo "== unreachable"; kill $pid; wait $pid 2>/dev/null
out=$("$LUARIG" sessions --store "nats://user:secret@${url#nats://}" 2>&1); echo "status $?"
echo "$out" | clean
