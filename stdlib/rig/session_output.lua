-- rig.session_output: a loop's structured output (its output_schema), as
-- the runner asks for it and checks the final answer: natively in the
-- request, or through the reserved final tool.

local json = require "rig.json"

local M = {}

-- The reserved tool a loop's output_schema goes through when its model has no
-- native structured output (rig.tool refuses the name).
local FINAL_TOOL = "final_answer"
M.FINAL_TOOL = FINAL_TOOL

-- The definition's output_schema and compaction, read once per instance.
local function out_setup(inst)
  if inst.out_ready then return end
  inst.out_ready = true
  local def = inst.def
  local output = def.output_schema
  inst.output = output
  inst.output_native = output ~= nil and inst.model.structured_output == true
  inst.compaction = def.compaction
  inst.context_window = inst.model.context_window
end

-- ---- structured output ----

local schema_mod = require "rig.schema"

local function invalid_output(inst, msg)
  return { code = "invalid_output", schema = inst.output.name,
           message = "the final answer does not match output schema '" .. inst.output.name
             .. "': " .. msg }
end

-- Checks a decoded final answer. Returns the value, or nil and the failure.
local function check_output(inst, value)
  if type(value) ~= "table" or json.is_array(value) then
    return nil, invalid_output(inst, "it is not a JSON object")
  end
  local ok, err = schema_mod.validate(inst.output.schema, value)
  if not ok then return nil, invalid_output(inst, err) end
  return value
end

-- A native answer: the message's text is the JSON.
local function native_output(inst, message)
  local parts = {}
  for _, b in ipairs(message.content) do
    if b.type == "text" then parts[#parts + 1] = b.text end
    if b.type == "refusal" then
      local e = invalid_output(inst, "the model refused: " .. tostring(b.text))
      e.refused = true -- not repaired: asking again does not fix a refusal
      return nil, e
    end
  end
  local text = table.concat(parts)
  local value, err = json.decode(text)
  if value == nil then return nil, invalid_output(inst, "not JSON: " .. tostring(err)) end
  return check_output(inst, value)
end

-- What the request carries natively (the model takes no `repair`).
function M.request_schema(inst)
  local o = inst.output
  if not inst.output_request then
    inst.output_request = { name = o.name, schema = o.schema, description = o.description,
                            strict = o.strict }
  end
  return inst.output_request
end

-- The user message that sends a failed answer back to the model (a repair).
function M.repair_text(inst, oerr, attempt)
  local how = inst.output_native and "Answer again with only a JSON object that matches it."
    or ("Call " .. FINAL_TOOL .. " again, alone, with arguments that match it.")
  return "[output repair " .. attempt .. " of " .. inst.output.repair .. "] " .. oerr.message
    .. ". " .. how
end

M.out_setup, M.invalid_output, M.check_output, M.native_output =
  out_setup, invalid_output, check_output, native_output

return M
