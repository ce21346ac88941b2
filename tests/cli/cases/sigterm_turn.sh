# SIGTERM while Lua runs in a task nobody waits for, and in a session turn
# (the code signals its own process, so the signal lands there every time):
# one clean line and exit 143, never "unhandled error in task … interrupted"
# with a traceback (the interrupted task ends cancelled, like the others).
"$LUARIG" -e '
rig.spawn(function()
  os.execute("kill -TERM $PPID")
  local x = 0
  for i = 1, 1e7 do x = x + i end
end)
rig.sleep(30)'
echo "background task: exit $?"
"$LUARIG" -e '
local kill = rig.tool{ name = "kill", description = "signals luarig",
  schema = { type = "object", properties = {} },
  prepare = function() return { summary = "kill", requirements = {} } end,
  run = function()
    os.execute("kill -TERM $PPID")
    local x = 0
    for i = 1, 1e7 do x = x + i end
    return "survived"
  end }
local model = rig.model.script{ { tool_calls = { { name = "kill", input = {} } } }, { text = "done" } }
local gate = rig.gate{ access = {}, approver = "headless" }
local loop = rig.loop{ name = "a", model = model, tools = { kill }, gate = gate, policy_revision = "v1" }
local r = rig.define{ loops = { loop }, primers = { "a" }, store = rig.store.memory() }
local s = assert(r:session())
s:submit("go")
s:wait_idle()
print("not reached")'
echo "session turn: exit $?"
