-- wrk script for tests/bench/serve_bench.py: alternates POST input and GET
-- status over the sessions in SERVE_BENCH_IDS (comma-separated), or only
-- GET status when SERVE_BENCH_MODE=status. wrk runs it under LuaJIT.
local ids = {}
for id in (os.getenv("SERVE_BENCH_IDS") or ""):gmatch("[^,]+") do ids[#ids + 1] = id end
local status_only = os.getenv("SERVE_BENCH_MODE") == "status"
local headers = { ["Content-Type"] = "application/json" }
local body = '{"text":"hello"}'
local n = 0

request = function()
  n = n + 1
  local id = ids[math.floor(n / 2) % #ids + 1]
  if status_only or n % 2 == 0 then
    return wrk.format("GET", "/v1/sessions/" .. id .. "/status")
  end
  return wrk.format("POST", "/v1/sessions/" .. id .. "/input", headers, body)
end
