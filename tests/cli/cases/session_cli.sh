# luarig sessions / show / log over a store written through rig.core.
cat > mk.lua <<'LUA'
local core = require "rig.core"
local store = assert(core.store_lmdb{ root = os.getenv("PWD") .. "/state" })
local s = assert(core.session_open(store))
local function e(t, x) return '{"v":1,"type":"' .. t .. '","session_id":"SID"' .. (x or "") .. '}' end
s:emit(e("SessionStarted", ',"fingerprint":"abc"'), { type = "SessionStarted", enduring = true, id = "e1" })
s:emit(e("TokenDelta", ',"text":"hi"'), { type = "TokenDelta" })
s:emit('{"type":"Submit","command_id":"c1"}', { type = "Submit", kind = "command", id = "c1" })
s:emit('{"type":"GatePrepared","gate_id":"g1"}', { type = "GatePrepared", kind = "gate_prepared", id = "g1" })
s:emit(e("TurnStarted"), { type = "TurnStarted", loop_id = "assistant", enduring = true, id = "e2" })
s:emit('{}', { type = "Empty", enduring = true, id = "e3" })
s:emit(e("SessionStopped"), { type = "SessionStopped", enduring = true, id = "e4" })
s:catalog{ title = "hello\tworld", state = "stopped", status = "stopped", input_tokens = 120,
           output_tokens = 30, cost = 0.0125, loop_count = 1 }
s:close()
print(s.id)
LUA
id=$("$LUARIG" mk.lua) || exit 1
clean() { sed -e "s/$id/ID/g" -e 's/[0-9-]*T[0-9:]*Z/TIME/' -e 's/"\(created_at\|last_active_at\)":[0-9.e+]*/"\1":T/g'; }
echo "== sessions"; "$LUARIG" sessions --state state | clean
echo "== sessions --json"; "$LUARIG" sessions --state=state --json | clean
echo "== show"; "$LUARIG" show --state state "$id" | clean
echo "== log"; "$LUARIG" log --state state "$id"
echo "== log --from 5 --follow (ends at SessionStopped)"; "$LUARIG" log --state state "$id" --from 5 --follow; echo "status $?"
echo "== unknown"; "$LUARIG" show --state state 00000000-0000-4000-8000-000000000000; echo "status $?"
"$LUARIG" log --state state 00000000-0000-4000-8000-000000000000; echo "status $?"
echo "== no store"; "$LUARIG" sessions --state empty 2>&1 | sed "s|$PWD|PWD|"; test -e empty || echo "(nothing created)"
echo "== empty store"; mkdir -p session_cli_tree; "$LUARIG" snapshot --state empty capture session_cli_tree >/dev/null
"$LUARIG" sessions --state empty; echo "status $?"
echo "== usage"; "$LUARIG" show --state state; echo "status $?"
"$LUARIG" log --state state "$id" --from 0 2>&1 | head -1; "$LUARIG" sessions --bogus 2>&1 | head -1
"$LUARIG" show --state state NOT-AN-ID 2>&1 | head -1
