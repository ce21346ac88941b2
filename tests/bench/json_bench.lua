-- json_bench.lua: rig.json.decode against lua-cjson on one streamed OpenAI
-- chunk and on every JSON line of tests/fixtures, in the same process.
-- Prints BENCH lines (see tests/bench/bench.py); nothing passes or fails.
local json = require "rig.json"
local cjson = require "cjson"

local root = os.getenv("LUARIG_ROOT") or "."
local chunk = '{"id":"chatcmpl-ABfw3Oqj8RD0z6aJiiX37oTjV2HFh","object":"chat.completion.chunk",'
  .. '"created":1727346171,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_7568d46099",'
  .. '"choices":[{"index":0,"delta":{"content":" quick"},"logprobs":null,"finish_reason":null}]}'

-- The best of several rounds of n calls, in nanoseconds per call.
local function per_call(fn, arg, n)
  local best = math.huge
  for _ = 1, 7 do
    local t0 = os.clock()
    for _ = 1, n do fn(arg) end
    best = math.min(best, (os.clock() - t0) / n * 1e9)
  end
  return best
end

local function line(name, value, peer, peer_value)
  print(string.format("BENCH name=%s value=%.6g unit=ns peer=%s peer_value=%.6g ratio=%.3f",
    name, value, peer, peer_value, value / peer_value))
end

line("json_decode_chunk", per_call(json.decode, chunk, 200000), "lua-cjson",
  per_call(cjson.decode, chunk, 200000))

-- Every data line of the recorded streams, decoded in turn.
local docs = {}
for _, f in ipairs { "anthropic_thinking_signature.jsonl", "anthropic_tool_use.sse",
                     "openai_chat_length_truncated.sse", "openai_chat_parallel_tool_calls.sse",
                     "openai_responses_function_call.jsonl" } do
  local h = io.open(root .. "/tests/fixtures/" .. f)
  if h then
    for l in h:lines() do
      local d = l:match("^data: (.*)$") or (l:sub(1, 1) == "{" and l)
      if d and d:sub(1, 1) == "{" then docs[#docs + 1] = d end
    end
    h:close()
  end
end
if #docs > 0 then
  local function all(dec) for i = 1, #docs do dec(docs[i]) end end
  line("json_decode_fixture_line", per_call(all, json.decode, 2000) / #docs, "lua-cjson",
    per_call(all, cjson.decode, 2000) / #docs)
end

local v = cjson.decode(chunk)
line("json_encode_chunk", per_call(json.encode, v, 100000), "lua-cjson",
  per_call(cjson.encode, v, 100000))
