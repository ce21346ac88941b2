-- rig.repl: the Lua half of the interactive prompt (lua/repl.c drives the
-- terminal): compiling what was typed, running it and printing its values,
-- the pretty-printer, and tab-completion candidates.
--
-- Nothing here calls a function of the user's while printing or
-- completing: fields are read with rawget/next, and only an __index that
-- is itself a table, or a function of the rig library, is followed.

local M = {}

local MAX_DEPTH = 4     -- deeper tables print as { … }
local MAX_ENTRIES = 50  -- per table, then "… N more"
local WIDTH = 72        -- a table longer than this on one line is split

local keywords = {
  "and", "break", "do", "else", "elseif", "end", "false", "for", "function",
  "goto", "if", "in", "local", "nil", "not", "or", "repeat", "return", "then",
  "true", "until", "while",
}
local is_keyword = {}
for _, k in ipairs(keywords) do is_keyword[k] = true end

local function is_ident(s)
  return type(s) == "string" and s:match("^[%a_][%w_]*$") ~= nil and not is_keyword[s]
end

local escapes = { ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t" }

local function quote(s)
  return '"' .. s:gsub('[%c"\\]', function(c)
    return escapes[c] or string.format("\\%03d", c:byte())
  end) .. '"'
end

-- Keys sort numbers first (by value), then strings, then everything else
-- by type name and tostring, so the output is stable between runs.
local type_rank = { number = 1, string = 2, boolean = 3 }
local function key_less(a, b)
  local ta, tb = type(a), type(b)
  local ra, rb = type_rank[ta] or 4, type_rank[tb] or 4
  if ra ~= rb then return ra < rb end
  if ta == "number" or ta == "string" then return a < b end
  if ta == "boolean" then return (not a) and b end
  if ta ~= tb then return ta < tb end
  return tostring(a) < tostring(b)
end

local function has_tostring(v)
  local mt = debug.getmetatable(v)
  return mt ~= nil and rawget(mt, "__tostring") ~= nil
end

local function scalar(v)
  local t = type(v)
  if t == "string" then return quote(v) end
  -- tostring may call a __tostring: the only user function the printer runs,
  -- and the same one print() would run; a failure prints the raw address.
  local ok, s = pcall(tostring, v)
  if ok and type(s) == "string" then return s end
  return t .. ": ?"
end

local format_value

-- The identity of a table, even when its metatable has __tostring or __name.
local function address(v)
  return string.format("%s: %p", type(v), v)
end

local function format_table(t, depth, path, indent)
  if path[t] then return "<cycle: " .. address(t) .. ">" end
  if has_tostring(t) then return scalar(t) end
  if next(t) == nil then return "{}" end
  if depth >= MAX_DEPTH then return "{ … }" end
  path[t] = true

  local items, n = {}, 0
  -- The sequence part first, without keys.
  local seq = 0
  while rawget(t, seq + 1) ~= nil do seq = seq + 1 end
  local keys = {}
  for k in next, t do
    if not (math.type(k) == "integer" and k >= 1 and k <= seq) then keys[#keys + 1] = k end
  end
  table.sort(keys, key_less)
  local total = seq + #keys
  local sub_indent = indent .. "  "
  for i = 1, seq do
    if n >= MAX_ENTRIES then break end
    n = n + 1
    items[n] = format_value(rawget(t, i), depth + 1, path, sub_indent)
  end
  for _, k in ipairs(keys) do
    if n >= MAX_ENTRIES then break end
    n = n + 1
    local ks = is_ident(k) and k or "[" .. format_value(k, MAX_DEPTH, path, sub_indent) .. "]"
    items[n] = ks .. " = " .. format_value(rawget(t, k), depth + 1, path, sub_indent)
  end
  if total > n then items[n + 1] = "… " .. (total - n) .. " more" end
  path[t] = nil

  local one = "{ " .. table.concat(items, ", ") .. " }"
  if #one <= WIDTH and not one:find("\n", 1, true) then return one end
  -- Short items (numbers, short strings) share lines; others get one each.
  local lines, cur, short = {}, nil, true
  for i = 1, #items do
    if #items[i] > 16 or items[i]:find("\n", 1, true) then short = false break end
  end
  for i = 1, #items do
    local item = items[i] .. (i < #items and "," or "")
    if short and cur and #cur + 1 + #item <= WIDTH then
      cur = cur .. " " .. item
    else
      if cur then lines[#lines + 1] = cur end
      cur = item
    end
  end
  lines[#lines + 1] = cur
  return "{\n" .. sub_indent .. table.concat(lines, "\n" .. sub_indent) .. "\n" .. indent .. "}"
end

format_value = function(v, depth, path, indent)
  if type(v) == "table" then return format_table(v, depth, path, indent) end
  return scalar(v)
end

-- M.pretty(v) -> string: how the REPL shows one value.
function M.pretty(v)
  return format_value(v, 0, {}, "")
end

-- Compiles what was typed: first as an expression ("return " .. src, as
-- lua.c does), then as a statement. Returns the function; or nil when the
-- input is incomplete (more lines may finish it); or nil, message.
function M.compile(src)
  if src:match("^%s*:%a") then
    return require("rig.repl_bench").command((src:gsub("^%s+", "")))
  end
  local chat = require("rig.repl_bench").chat_line(src) -- chat mode: the line is input
  if chat then return chat end
  local inspect = require("rig.repl_bench").inspect(src) -- s:history() and the like, pretty
  if inspect then return inspect end
  local fn = load("return " .. src, "=stdin", "t")
  if fn then return fn end
  local err
  fn, err = load(src, "=stdin", "t")
  if fn then return fn end
  if err:sub(-5) == "<eof>" then return nil end
  return nil, err
end

-- Replaced by lua/repl.c: true with --debug or LUARIG_DEBUG=1.
M.debug = false

-- True when an error message starts at a line of the rig library: a bug in
-- luarig rather than a mistake in what was typed (as lua/state.c decides).
local function internal(msg)
  if msg:find("^stdlib/rig/") then return true end
  local dir = (os.getenv("LUARIG_PATH") or ""):gsub("/+$", "")
  return dir ~= "" and msg:sub(1, #dir + 5) == dir .. "/rig/"
end
M.internal = internal

-- The error as shown: the message alone (one line for a mistake), or with
-- the traceback, without the REPL's own frames, under --debug or for an
-- error inside the library.
local function handler(e)
  if type(e) == "table" and type(rawget(e, "repl_plain")) == "string" then
    return e.repl_plain -- a command's refusal: its message, no traceback
  end
  if type(e) ~= "string" then
    if has_tostring(e) then
      local ok, s = pcall(tostring, e)
      e = ok and s or "(error object is a " .. type(e) .. " value)"
    else
      e = "(error object is a " .. type(e) .. " value)"
    end
  end
  if not M.debug and not internal(e) then return e end
  local tb = debug.traceback(e, 2)
  local out = {}
  for line in tb:gmatch("[^\n]+") do
    if line:find("in function 'xpcall'", 1, true) or line:find("rig/repl.lua", 1, true) then break end
    out[#out + 1] = line
  end
  if out[#out] == "stack traceback:" then out[#out] = nil end
  return table.concat(out, "\n")
end

-- Replaced by lua/repl.c: true while Ctrl-C cancels the running chunk, so
-- the error that unwinds it is expected and the prompt says "interrupted".
function M.interrupting() return false end

-- Replaced by lua/repl.c on a terminal (rig.repl_bench uses them):
-- key_mode(on) -> true when the next key will go to rig.repl_bench.on_key;
-- columns() -> the terminal's width or nil; turn_busy(on): Ctrl-C
-- interrupts the attached session's turn while on.
function M.key_mode() return false end
function M.columns() return nil end
function M.turn_busy() end
-- rows() -> the terminal's height or nil; set_prompt([prefix]): the prompt
-- becomes prefix .. "> " (the attached session's budget), nil: "> ".
function M.rows() return nil end
function M.set_prompt() end
-- quit(): the REPL ends once the running chunk returns (as Ctrl-D).
function M.quit() end

-- Called by lua/repl.c: a key while key_mode is on; Ctrl-C while turn_busy.
function M.on_key(k) return require("rig.repl_bench").on_key(k) end
function M.interrupt_turn() return require("rig.repl_bench").interrupt_turn() end

-- M.run(fn [, quiet]): runs one chunk inside its task and prints its values
-- (unless quiet) or its error. Never raises. quiet is the script given to
-- `luarig repl FILE`: its values go to rig.repl_bench.loaded (a rig is bound to r).
function M.run(fn, quiet)
  local r = table.pack(xpcall(fn, handler))
  if r[1] and quiet then
    local ok, err = xpcall(require("rig.repl_bench").loaded, handler,
      type(arg) == "table" and arg[0] or "?", table.unpack(r, 2, r.n))
    if not ok then print("error: " .. tostring(err)) end
  elseif r[1] then
    if not quiet and r.n > 1 then
      local parts = {}
      for i = 2, r.n do parts[#parts + 1] = M.pretty(r[i]) end
      print(table.concat(parts, "\t"))
    end
  elseif not M.interrupting() then
    print("error: " .. tostring(r[2]))
  end
end

-- Completion. The text is the word before the cursor: a plain path of
-- identifiers with "." and at most one final ":". The path is resolved
-- with rawget, __index tables, and __index functions of the rig library
-- itself (rig's own objects: a rig, a loop, a model, …), never a user's.
-- Names behind an __index function are read from the tables it closes over
-- (its upvalues, one function deep), as nothing can list them otherwise.
-- Metatables are read with debug.getmetatable: a __metatable field (which
-- rig's objects set to their kind's name) hides nothing here.

local function lib_dir()
  local dir = (os.getenv("LUARIG_PATH") or ""):gsub("/+$", "")
  return dir
end

-- A function of the rig library (embedded, or from $LUARIG_PATH/rig/).
local function lib_fn(f)
  local info = debug.getinfo(f, "S")
  local src = info and info.source or ""
  if src:find("^@stdlib/rig/") then return true end
  local dir = lib_dir()
  return dir ~= "" and src:sub(1, #dir + 6) == "@" .. dir .. "/rig/"
end

local function meta_index(v)
  local mt = debug.getmetatable(v)
  if type(mt) ~= "table" then return nil end
  return rawget(mt, "__index")
end

local function field(v, k)
  for _ = 1, 8 do -- a bounded walk down __index tables
    if type(v) == "table" then
      local x = rawget(v, k)
      if x ~= nil then return x end
    end
    local idx = meta_index(v)
    if type(idx) == "function" then
      if not lib_fn(idx) then return nil end
      local ok, x = pcall(idx, v, k)
      if ok then return x end
      return nil
    end
    if type(idx) ~= "table" then return nil end
    v = idx
  end
  return nil
end

local function callable(x)
  if type(x) == "function" then return true end
  local mt = debug.getmetatable(x)
  return type(mt) == "table" and rawget(mt, "__call") ~= nil
end

-- The tables an __index function closes over, and those of the functions
-- it closes over (one level): where its names come from.
local function closed_tables(f, out, depth, seen)
  for i = 1, 255 do
    local name, x = debug.getupvalue(f, i)
    if not name then break end
    if name ~= "_ENV" and x ~= _G and not seen[x] then
      if type(x) == "table" then
        seen[x] = true
        out[#out + 1] = x
      elseif type(x) == "function" and depth > 0 then
        seen[x] = true
        closed_tables(x, out, depth - 1, seen)
      end
    end
  end
  return out
end

-- Names starting with "_" (internals, metamethods) are offered only when
-- the typed prefix starts with "_" too.
local function wanted(k, prefix, seen)
  return type(k) == "string" and k:sub(1, #prefix) == prefix and is_ident(k) and not seen[k]
    and (prefix:sub(1, 1) == "_" or k:sub(1, 1) ~= "_")
end

local function add_keys(v, prefix, want_fn, seen, out)
  for _ = 1, 8 do
    if type(v) == "table" then
      for k, x in next, v do
        if wanted(k, prefix, seen) and (not want_fn or callable(x)) then
          seen[k] = true
          out[#out + 1] = k
        end
      end
    end
    local idx = meta_index(v)
    if type(idx) == "function" then
      -- the names the function's tables hold, and the record a table of
      -- them keeps for this very object (rig's objects keep their fields
      -- in a private table keyed by the object)
      local names, values = {}, {}
      local function note(k, x)
        if wanted(k, prefix, seen) then names[#names + 1] = k; values[#names] = x end
      end
      for _, t in ipairs(closed_tables(idx, {}, 1, {})) do
        for k, x in next, t do note(k, x) end
        local rec = rawget(t, v)
        if type(rec) == "table" then
          for k, x in next, rec do note(k, x) end
        end
      end
      -- the library's own __index says which of them it answers; a user's
      -- is not called: the value found beside the name stands for it
      local trusted = lib_fn(idx)
      for i, k in ipairs(names) do
        local keep = not seen[k]
        if keep and trusted then
          local ok, x = pcall(idx, v, k)
          keep = ok and x ~= nil and (not want_fn or callable(x))
        elseif keep then
          keep = not want_fn or callable(values[i])
        end
        if keep then
          seen[k] = true
          out[#out + 1] = k
        end
      end
      return
    end
    if type(idx) ~= "table" then return end
    v = idx
  end
end

-- A ':' command and its arguments (rig.repl_bench knows them).
local function complete_command(word, before)
  local bench = require "rig.repl_bench"
  local out = {}
  if before:match("^%s*$") and word:match("^:%a*$") then
    for _, name in ipairs(bench.command_names()) do
      if (":" .. name):sub(1, #word) == word then out[#out + 1] = ":" .. name end
    end
    return out
  end
  local cmd = before:match("^%s*:(%a+)%s+$")
  if cmd then return bench.complete_argument(cmd, word) end
  return nil
end

-- M.complete(word [, before]) -> sorted list of full replacements for word;
-- before is the line up to the word (nil when lua/repl.c does not know it).
function M.complete(word, before)
  if before then
    local cmd = complete_command(word, before)
    if cmd then table.sort(cmd) return cmd end
  elseif word:match("^:%a*$") then
    local cmd = complete_command(word, "")
    table.sort(cmd)
    return cmd
  end
  local out, seen = {}, {}
  local head, sep, last = word:match("^(.*)([.:])([%w_]*)$")
  if not head then
    if not word:match("^[%a_]?[%w_]*$") then return out end
    add_keys(_G, word, false, seen, out)
    for _, k in ipairs(keywords) do
      if k:sub(1, #word) == word and not seen[k] then seen[k] = true; out[#out + 1] = k end
    end
    table.sort(out)
    return out
  end
  if not head:match("^[%a_][%w_]*$") and not head:match("^[%a_][%w_]*[.%w_]*[%w_]$") then return out end
  if head:find("..", 1, true) then return out end
  local v = _G
  for name in head:gmatch("[^.]+") do
    v = field(v, name)
    if v == nil then return out end
  end
  if type(v) ~= "table" and type(v) ~= "userdata" and type(v) ~= "string" then return out end
  if type(v) == "string" then v = string; sep = ":" end
  local names = {}
  add_keys(v, last, sep == ":", seen, names)
  table.sort(names)
  for i, k in ipairs(names) do out[i] = head .. (word:sub(#head + 1, #head + 1)) .. k end
  return out
end

return M
