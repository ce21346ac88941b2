-- mock_provider.lua: a model provider on the project's own HTTP server, for specs.
--
--   local mock = dofile(root .. "/tests/lua/mock_provider.lua")
--   local p = mock.start()                 -- listens on 127.0.0.1, a free port
--   p:push{ status = 200, body = "...", split = "whole"|"bytes"|"random",
--           headers = {…}, content_type = "…", drop_after = n, stall_after = n,
--           end_after = n, drip = s, seed = n }
--   p.url                                   -- base_url for a model
--   p.requests                              -- { { method, path, raw_path, headers, body } … }
--   p.stalled, p.changed                    -- responses gone quiet (stall_after), and a
--                                           -- condition signalled when one does
--   p:close()
--
-- Every request takes the next pushed response (a 500 when none is left) and is
-- recorded. split: the body as one write, one byte per write, or random splits
-- (1–64 bytes, seeded). drop_after = n: after n body bytes the connection is
-- broken; stall_after = n: after n bytes the server goes quiet for a minute;
-- end_after = n: after n bytes the response ends cleanly (a stream cut short,
-- wherever n falls); drip = s: one byte, then s seconds, then the next (a
-- provider that keeps a valid stream alive but never finishes in time).

local json = require "rig.json"
local M = {}

local root = os.getenv("LUARIG_ROOT") or "."
M.root = root

function M.read(path)
  local f = assert(io.open(root .. "/" .. path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

-- A .jsonl fixture (one data payload per line) as an SSE body. With
-- `named`, each event also carries "event: <type>" (as Anthropic sends).
function M.jsonl_to_sse(text, named)
  local out = {}
  for line in text:gmatch("[^\n]+") do
    if named then
      local t = json.decode(line)
      if type(t) == "table" and type(t.type) == "string" then
        out[#out + 1] = "event: " .. t.type .. "\n"
      end
    end
    out[#out + 1] = "data: " .. line .. "\n\n"
  end
  return table.concat(out)
end

function M.fixture(name)
  local text = M.read("tests/fixtures/" .. name)
  if name:match("%.jsonl$") then return M.jsonl_to_sse(text, name:match("^anthropic") ~= nil) end
  return text
end

local function writes(body, split, seed)
  if split == "bytes" then
    local out = {}
    for i = 1, #body do out[i] = body:sub(i, i) end
    return out
  elseif split == "random" then
    local out, i = {}, 1
    local x = seed or 12345
    while i <= #body do
      x = (x * 1103515245 + 12345) % 2147483648
      local n = 1 + (x >> 8) % 64
      out[#out + 1] = body:sub(i, i + n - 1)
      i = i + n
    end
    return out
  end
  return { body }
end

local Provider = {}
Provider.__index = Provider

function Provider:push(r) self.queue[#self.queue + 1] = r end
function Provider:close() self.srv:close() end

function M.start()
  local p = setmetatable({ queue = {}, requests = {}, stalled = 0, changed = rig.cond() },
    Provider)
  local function handle(req, res)
    p.requests[#p.requests + 1] = { method = req.method, path = req.path, headers = req.headers,
                                    body = req.body, raw_path = req.raw_path
                                      .. (req.raw_query and ("?" .. req.raw_query) or "") }
    local r = table.remove(p.queue, 1) or { status = 500, body = '{"error":{"message":"no response queued"}}' }
    local headers = { ["content-type"] = r.content_type or
      ((r.status or 200) == 200 and "text/event-stream" or "application/json") }
    for k, v in pairs(r.headers or {}) do headers[k] = v end
    res:start(r.status or 200, headers)
    local sent = 0
    local body = r.body or ""
    if r.end_after then body = body:sub(1, r.end_after) end
    if r.drip then
      for i = 1, #body do
        if not res:write(body:sub(i, i)) then return end
        rig.sleep(r.drip)
      end
      res:finish()
      return
    end
    for _, piece in ipairs(writes(body, r.split, r.seed)) do
      if r.drop_after and sent + #piece > r.drop_after then
        local keep = r.drop_after - sent
        if keep > 0 then res:write(piece:sub(1, keep)) end
        rig.sleep(0.05)
        res:abort()
        return
      end
      if r.stall_after and sent + #piece > r.stall_after then
        local keep = r.stall_after - sent
        if keep > 0 then res:write(piece:sub(1, keep)) end
        p.stalled = p.stalled + 1
        p.changed:signal()
        rig.sleep(60)
        return
      end
      if not res:write(piece) then return end
      sent = sent + #piece
      -- let the loop send this piece on its own before the next one
      if r.split == "bytes" or r.split == "random" then rig.sleep(0) end
    end
    res:finish()
  end
  p.srv = rig.http.server{ listen = "127.0.0.1:0", routes = {
    ["POST /*"] = handle,
  } }
  p.url = p.srv.url:gsub("/$", "")
  return p
end

-- ---- provider streams for hand-made replies ----

local function sse(events, named)
  local out = {}
  for _, e in ipairs(events) do
    local data = type(e) == "string" and e or assert(json.encode(e))
    if named and type(e) == "table" then out[#out + 1] = "event: " .. e.type .. "\n" end
    out[#out + 1] = "data: " .. data .. "\n\n"
  end
  return table.concat(out)
end
M.sse = sse

-- A reply with optional text and optional tool calls { { id, name, args = "json" } },
-- in the wire format of `provider`.
function M.reply(provider, text, calls)
  calls = calls or {}
  if provider == "anthropic" then
    local ev = { { type = "message_start", message = { id = "msg_1", type = "message",
      role = "assistant", model = "claude-test", content = json.array {},
      usage = { input_tokens = 10, output_tokens = 1 } } } }
    local idx = 0
    if text then
      ev[#ev + 1] = { type = "content_block_start", index = idx, content_block = { type = "text", text = "" } }
      ev[#ev + 1] = { type = "content_block_delta", index = idx, delta = { type = "text_delta", text = text } }
      ev[#ev + 1] = { type = "content_block_stop", index = idx }
      idx = idx + 1
    end
    for _, c in ipairs(calls) do
      ev[#ev + 1] = { type = "content_block_start", index = idx,
        content_block = { type = "tool_use", id = c.id, name = c.name, input = {} } }
      ev[#ev + 1] = { type = "content_block_delta", index = idx,
        delta = { type = "input_json_delta", partial_json = c.args } }
      ev[#ev + 1] = { type = "content_block_stop", index = idx }
      idx = idx + 1
    end
    ev[#ev + 1] = { type = "message_delta", delta = { stop_reason = #calls > 0 and "tool_use" or "end_turn" },
      usage = { output_tokens = 7 } }
    ev[#ev + 1] = { type = "message_stop" }
    return sse(ev, true)
  elseif provider == "gemini" then
    local parts = json.array {}
    if text then parts[#parts + 1] = { text = text } end
    for _, c in ipairs(calls) do
      parts[#parts + 1] = { functionCall = { name = c.name, args = json.decode(c.args) } }
    end
    local usage = { promptTokenCount = 10, candidatesTokenCount = 7, totalTokenCount = 17 }
    return sse({ { candidates = json.array { { content = { role = "model", parts = parts },
      finishReason = "STOP", index = 0 } }, usageMetadata = usage, modelVersion = "gemini-test",
      responseId = "resp1" } })
  elseif provider == "openai-responses" then
    local ev = { { type = "response.created", response = { id = "resp_1", model = "gpt-test",
      status = "in_progress", output = json.array {} } } }
    local idx = 0
    if text then
      ev[#ev + 1] = { type = "response.output_item.added", output_index = idx,
        item = { id = "msg_1", type = "message", role = "assistant", content = json.array {} } }
      ev[#ev + 1] = { type = "response.output_text.delta", output_index = idx, content_index = 0,
        item_id = "msg_1", delta = text }
      ev[#ev + 1] = { type = "response.output_item.done", output_index = idx,
        item = { id = "msg_1", type = "message", role = "assistant",
                 content = json.array { { type = "output_text", text = text } } } }
      idx = idx + 1
    end
    for _, c in ipairs(calls) do
      ev[#ev + 1] = { type = "response.output_item.added", output_index = idx,
        item = { id = "fc_" .. c.id, type = "function_call", call_id = c.id, name = c.name, arguments = "" } }
      ev[#ev + 1] = { type = "response.function_call_arguments.delta", output_index = idx,
        item_id = "fc_" .. c.id, delta = c.args }
      ev[#ev + 1] = { type = "response.output_item.done", output_index = idx,
        item = { id = "fc_" .. c.id, type = "function_call", call_id = c.id, name = c.name,
                 arguments = c.args, status = "completed" } }
      idx = idx + 1
    end
    ev[#ev + 1] = { type = "response.completed", response = { id = "resp_1", model = "gpt-test",
      status = "completed", output = json.array {},
      usage = { input_tokens = 10, output_tokens = 7, input_tokens_details = { cached_tokens = 0 },
                output_tokens_details = { reasoning_tokens = 0 } } } }
    return sse(ev)
  else
    local base = { id = "chatcmpl-1", object = "chat.completion.chunk", created = 1, model = "gpt-test" }
    local function chunk(delta, finish)
      local c = {}
      for k, v in pairs(base) do c[k] = v end
      c.choices = json.array { { index = 0, delta = delta, finish_reason = finish or json.null } }
      return c
    end
    local ev = { chunk { role = "assistant", content = "" } }
    if text then ev[#ev + 1] = chunk { content = text } end
    for i, c in ipairs(calls) do
      ev[#ev + 1] = chunk { tool_calls = json.array { { index = i - 1, id = c.id, type = "function",
        ["function"] = { name = c.name, arguments = "" } } } }
      ev[#ev + 1] = chunk { tool_calls = json.array { { index = i - 1, ["function"] = { arguments = c.args } } } }
    end
    ev[#ev + 1] = chunk({}, #calls > 0 and "tool_calls" or "stop")
    local u = {}
    for k, v in pairs(base) do u[k] = v end
    u.choices = json.array {}
    u.usage = { prompt_tokens = 10, completion_tokens = 7, total_tokens = 17 }
    ev[#ev + 1] = u
    ev[#ev + 1] = "[DONE]"
    return sse(ev)
  end
end

return M
