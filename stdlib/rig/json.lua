-- rig.json: the JSON codec (lua/json.c), with the house error convention.
--
--   json.encode(v [, { indent = n }]) -> text | nil, message, "encode"
--     object keys sorted bytewise; a table is an array when marked with
--     json.array() or when its keys are exactly 1..n (n > 0); an unmarked
--     empty table is {}; json.null -> null; json.raw(s) -> s verbatim;
--     integers as integers, floats shortest round-trip (integral floats keep
--     ".0"); the message names the path of what failed ("$.tools[1].run",
--     indexes count from 1 as in Lua).
--   json.decode(text [, skip]) -> value | nil, message, "parse"
--     strict RFC 8259; arrays come back marked, null as json.null; the
--     message says where ("json: unexpected character 'x' at byte 7").
--     skip: a set of keys left out of a top-level object (their values are
--     still checked), for decoders that read a few fields of many documents;
--     with skip the text must hold an object, so the result is always a table.
--   json.array(t) -> t, json.is_array(v) -> boolean, json.null
--
-- require "cjson" stays available for code that wants lua-cjson itself.

local core = require "rig.core"

local json = {
  encode = core.json_encode,
  decode = core.json_decode,
  raw = core.json_raw,
  array = core.json_array,
  is_array = core.json_is_array,
  null = core.json_null,
}

return json
