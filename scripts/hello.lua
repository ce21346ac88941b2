-- hello.lua: a first luarig script. Tasks run concurrently on one event
-- loop; each rig.sleep lets the others go on.

local started = rig.now()

local function worker(name, delay)
  rig.sleep(delay)
  return string.format("%s finished after %.2fs", name, rig.now() - started)
end

local tasks = {}
for i, delay in ipairs { 0.3, 0.1, 0.2 } do
  tasks[i] = rig.spawn(worker, "task " .. i, delay)
end

print("hello from luarig " .. rig.version .. " on " .. _VERSION)
for _, t in ipairs(tasks) do
  print(t:wait())
end
print(string.format("three tasks, %.2fs in all: they ran side by side", rig.now() - started))
