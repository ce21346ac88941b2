-- rig.json: JSON through lua-cjson, with the house error convention:
-- decode returns nil, message, "parse" on malformed input instead of raising.

local cjson = require "cjson.safe"

local json = {
  null = cjson.null,
}

function json.encode(value)
  local s, err = cjson.encode(value)
  if s == nil then return nil, "json: " .. tostring(err), "encode" end
  return s
end

function json.decode(text)
  if type(text) ~= "string" then
    error("bad argument #1 to 'decode' (string expected, got " .. type(text) .. ")", 2)
  end
  local v, err = cjson.decode(text)
  if v == nil and err then return nil, "json: " .. tostring(err), "parse" end
  return v
end

return json
