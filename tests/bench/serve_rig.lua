-- The rig tests/bench/serve_bench.py serves with `luarig serve`: a scripted
-- model that answers at once with a short text and fixed usage (no request
-- encoding for a usage estimate), one loop, no tools, a memory store (its
-- appends complete at once, so the SSE figure is the fan-out path).
local function reply(req)
  local last = req.messages[#req.messages]
  local text = last.content[1].text or ""
  return { text = "ok: " .. text, usage = { input_tokens = 10, output_tokens = 2 } }
end
local steps = {}
for i = 1, tonumber(os.getenv("SERVE_BENCH_STEPS") or "100000") do steps[i] = reply end
local loop = rig.loop{ name = "assistant", model = rig.model.script(steps), system = "serve bench",
  policy_revision = "serve-bench-v1" }
return rig.define{ loops = { loop }, primers = { "assistant" }, store = rig.store.memory() }
