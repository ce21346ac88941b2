-- rig.cli_args: the command line of luarig's commands written in Lua
-- (`luarig serve`, `luarig mcp serve`, `luarig flow …`), parsed one way, as
-- cli/cli.c does for the C ones: a usage error is "luarig: MESSAGE" on
-- stderr, then a hint or the usage text, and exit status 2. Internal to the
-- stdlib: not an area of `rig`.
--
--   cli_args.usage(after, fmt, ...)   never returns
--   cli_args.HINT                     the usual after: "luarig: try 'luarig help'\n"
--   cli_args.parse(args, first, spec) -> opts, positional
--     Reads args[first], args[first + 1], … . spec.values maps an option
--     that takes a value to its key in opts ("--listen" = "listen"), given
--     as "--listen ADDR" or "--listen=ADDR"; a key ending in "[]" gathers
--     every use into a list ("--allow-host" = "hosts[]", always a table).
--     spec.switches maps an option without a value to its key (true when
--     given). Anything else starting with "-" is an unknown option; the rest
--     are positional, at most spec.positional of them (default 1). Messages
--     start with spec.prefix ("serve: '--listen' needs a value"); spec.after
--     follows them (default HINT).
--   cli_args.token_file(path, prefix) -> { token = … }   (raises "PREFIX: …")
--     The bearer token in a file: one line of at least 16 bytes, no spaces
--     or control bytes; trailing white space is dropped.
--   cli_args.load_rig(path, prefix) -> rig, …   (raises "PREFIX: …")
--     Runs the script at path, which returns a rig (and what else the
--     command reads: serve's flows); its errors are raised as they are.

local M = {}

M.HINT = "luarig: try 'luarig help'\n"

function M.usage(after, fmt, ...)
  io.stderr:write("luarig: ", string.format(fmt, ...), "\n", after or M.HINT)
  io.stderr:flush()
  os.exit(2)
end

function M.parse(args, first, spec)
  local values, switches = spec.values or {}, spec.switches or {}
  local max = spec.positional or 1
  local pre = spec.prefix and spec.prefix .. ": " or ""
  local function usage(fmt, ...) M.usage(spec.after, pre .. fmt, ...) end
  local opts, positional = {}, {}
  for _, key in pairs(values) do
    local list = key:match("^(.*)%[%]$")
    if list then opts[list] = {} end
  end
  local i = first
  while args[i] ~= nil do
    local a = args[i]
    local name, inline = a:match("^(%-%-[%w%-]+)=(.*)$")
    name = name or a
    local key = values[name]
    if key then
      local v = inline
      if not v then
        i = i + 1
        v = args[i]
        if v == nil then usage("'%s' needs a value", a) end
      end
      local list = key:match("^(.*)%[%]$")
      if list then
        opts[list][#opts[list] + 1] = v
      else
        opts[key] = v
      end
    elseif switches[a] then
      opts[switches[a]] = true
    elseif a:sub(1, 1) == "-" then
      usage("unknown option '%s'", a)
    elseif #positional < max then
      positional[#positional + 1] = a
    else
      usage("unexpected argument '%s'", a)
    end
    i = i + 1
  end
  return opts, positional
end

function M.token_file(path, prefix)
  local f, e = io.open(path, "rb")
  if not f then error(prefix .. ": cannot read the token file: " .. tostring(e), 0) end
  local t = f:read("a")
  f:close()
  t = t:gsub("%s+$", "")
  if #t < 16 or t:find("[%c ]") then
    error(prefix .. ": the token in '" .. path .. "' must be one line of at least 16 bytes", 0)
  end
  return { token = t }
end

function M.load_rig(path, prefix)
  local chunk, lerr = loadfile(path, "t")
  if not chunk then error(lerr, 0) end
  -- called through xpcall, not as the caller of a tail call: a definition
  -- error in `return rig.define{…}` names no line rather than this one
  local res = table.pack(xpcall(chunk, function(m)
    return type(m) == "string" and debug.traceback(m, 2) or m
  end))
  if not res[1] then error(res[2], 0) end
  local r = res[2]
  if type(r) ~= "table" or type(r.session) ~= "function" then
    error(prefix .. ": '" .. path .. "' must return a rig (rig.define{…})", 0)
  end
  return table.unpack(res, 2, res.n)
end

return M
