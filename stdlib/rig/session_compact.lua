-- rig.session_compact: compaction — a loop's older history replaced by one
-- summary message (CompactionCommitted), on request (s:compact) or
-- automatically before a model call that would reach `compaction.at` of
-- the model's window.

local json = require "rig.json"
local base = require "rig.session_base"
local output = require "rig.session_output"

local emit, add_usage = base.emit, base.add_usage
local out_setup = output.out_setup

local M = {}

-- ---- compaction ----

local loop_mod = require "rig.loop"
local SUMMARY_HEAD = "[summary of the earlier conversation]\n\n"
M.SUMMARY_HEAD = SUMMARY_HEAD
-- The marker that replaces the oldest messages when their summary failed.
local OMITTED_HEAD = "[earlier conversation omitted]\n\n"
M.OMITTED_HEAD = OMITTED_HEAD
local COMPACTION_DEFAULT = { at = false, keep = 4 }
local CLIP = 2000

-- What the last step's context held: the next request holds at least this.
local function context_of(u)
  if not u or not u.input_tokens then return nil end
  return u.input_tokens + (u.cache_read_tokens or 0) + (u.cache_creation_tokens or 0)
    + (u.output_tokens or 0)
end

local function is_summary(msg)
  local b = msg and msg.role == "user" and msg.content[1]
  return b and b.type == "text" and (b.text:sub(1, #SUMMARY_HEAD) == SUMMARY_HEAD
    or b.text:sub(1, #OMITTED_HEAD) == OMITTED_HEAD) or false
end

local function clip(s, n)
  if #s <= n then return s end
  local cut = n
  while cut > 0 and (s:byte(cut + 1) or 0) & 0xC0 == 0x80 do cut = cut - 1 end
  return s:sub(1, cut) .. " […" .. (#s - cut) .. " bytes cut]"
end

-- The older messages as one plain-text transcript (provider neutral: no tool
-- blocks reach the summarizer; tool input and results cut to 2000 bytes).
local function transcript(h, last)
  local out = {}
  for i = 1, last do
    local m = h[i]
    for _, b in ipairs(m.content) do
      local t = b.type
      if t == "text" then
        out[#out + 1] = "[" .. m.role .. "]\n" .. b.text
      elseif t == "refusal" then
        out[#out + 1] = "[assistant refused]\n" .. b.text
      elseif t == "image" or t == "document" then
        out[#out + 1] = "[" .. m.role .. " attached " .. t .. " " .. tostring(b.name or b.media_type) .. "]"
      elseif t == "thinking" then
        out[#out + 1] = "[assistant thinking omitted]"
      elseif t == "tool_use" then
        local args = b.input_json or json.encode(b.input or {}) or "{}"
        out[#out + 1] = "[assistant calls tool " .. tostring(b.name) .. " (" .. tostring(b.id)
          .. ")]\n" .. clip(args, CLIP)
      elseif t == "tool_result" then
        local c = b.content
        if type(c) == "table" then
          local parts = {}
          for k, x in ipairs(c) do
            parts[k] = x.text or ("[" .. tostring(x.type) .. " " .. tostring(x.name or x.media_type)
              .. "]")
          end
          c = table.concat(parts, "\n")
        end
        out[#out + 1] = "[tool " .. (b.is_error and "error" or "result") .. " for "
          .. tostring(b.tool_use_id) .. "]\n" .. clip(tostring(c), CLIP)
      end
    end
  end
  return table.concat(out, "\n\n")
end

-- The first retained index: at least `keep` recent messages, and the tail
-- never starts with tool results (their assistant message stays with them).
local function compaction_cut(h, keep)
  local cut = #h - keep + 1
  if cut < 1 then cut = 1 end
  while cut > 1 and h[cut].role == "tool" do cut = cut - 1 end
  return cut
end

-- Replaces the older part of the loop's history with a summary and commits
-- CompactionCommitted. Returns { replaced, retained, summary } or nil,
-- message, code ("nothing_to_compact", the summarizer's failure code,
-- "empty_summary", or the journal's code with the session faulted).
-- fallback: when the summary fails (after the summarizer model's own
-- retries), the same older part is dropped instead and a marker message
-- stands in for it (CompactionCommitted{ fallback = "truncated", error }),
-- so the loop can always take its next step; the result then has
-- fallback = "truncated" and error.
local function compact(S, inst, trigger, turn, fallback)
  out_setup(inst)
  local cfg = inst.compaction or COMPACTION_DEFAULT
  local h = inst.history
  local cut = compaction_cut(h, cfg.keep)
  if cut <= 1 or (cut == 2 and is_summary(h[1])) then
    return nil, "nothing to compact in loop '" .. inst.id .. "' (" .. #h .. " messages, "
      .. cfg.keep .. " kept)", "nothing_to_compact"
  end
  local model = cfg.model or inst.model
  local resp, err, code = model:invoke{
    system = cfg.prompt or loop_mod.SUMMARY_PROMPT,
    messages = { { role = "user", content = "Summarize the conversation below; your summary "
      .. "will replace it.\n\n<conversation>\n" .. transcript(h, cut - 1)
      .. "\n</conversation>" } },
  }
  local text, failed
  if not resp then
    if code == "cancelled" then error("cancelled", 0) end
    failed = { code = code or "model", message = "the summary failed: " .. tostring(err) }
  else
    local parts = {}
    for _, b in ipairs(resp.message.content) do
      if b.type == "text" then parts[#parts + 1] = b.text end
    end
    text = table.concat(parts)
    if not text:find("%S") then
      failed = { code = "empty_summary", message = "the summary model returned no text" }
    end
  end
  if failed and not fallback then
    return nil, failed.message .. " (s:compact(loop, { fallback = \"truncate\" }) drops the "
      .. "oldest messages instead)", failed.code
  end
  if h ~= inst.history then error("rig.session: internal: the history changed while compacting", 0) end
  local summary
  if failed then
    local n = cut - 1
    summary = { role = "user", content = json.array({ { type = "text", text = OMITTED_HEAD ..
      string.format("%d earlier message%s of this conversation %s dropped because the summary "
        .. "failed; %s content is no longer available.", n, n == 1 and "" or "s",
        n == 1 and "was" or "were", n == 1 and "its" or "their") } }) }
  else
    summary = { role = "user",
                content = json.array({ { type = "text", text = SUMMARY_HEAD .. text } }) }
  end
  local new = { summary }
  table.move(h, cut, #h, 2, new)
  local fields = { loop_id = inst.id, turn_id = turn and turn.id, trigger = trigger,
    summary = summary, replaced = cut - 1, retained = #h - cut + 1,
    context_tokens = inst.context_tokens, usage = resp and resp.usage, model = resp and resp.model }
  if failed then
    fields.fallback = "truncated"
    fields.error = { code = "compaction_failed", cause_code = failed.code,
                     message = failed.message }
  end
  -- a new table: the request cache keys on the list
  inst.history = new
  inst.context_tokens = nil
  add_usage(S.usage_sum, resp and resp.usage)
  local ok, msg, ecode = emit(S, "CompactionCommitted", fields)
  if not ok then
    S.faulted_msg = S.faulted_msg or S.core:faulted() or "the journal append failed"
    return nil, msg, ecode or "faulted"
  end
  return { replaced = fields.replaced, retained = fields.retained, summary = summary,
           fallback = fields.fallback, error = fields.error }
end

-- Before a model call: compacts when the last step's context reached `at` of
-- the model's window; a failed summary falls back to dropping the oldest
-- messages (journaled), so the turn goes on. Returns true, or nil, message,
-- code when the journal failed.
local function auto_compact(S, inst, turn)
  local cfg = inst.compaction
  local used = inst.context_tokens
  if not cfg or not cfg.at or not used or not inst.context_window
     or used < cfg.at * inst.context_window then
    return true
  end
  local res, msg, code = compact(S, inst, "automatic", turn, true)
  if res then return true end
  if code == "nothing_to_compact" then
    inst.context_tokens = nil
    return true
  end
  return nil, msg, code
end

M.context_of, M.compact, M.auto_compact = context_of, compact, auto_compact

return M
