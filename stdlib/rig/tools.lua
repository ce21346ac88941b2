-- rig.tools: the standard tools (docs/design/tools.md). Each constructor takes its caps
-- and returns a rig.tool; an unknown option raises, naming it.
--
--   tools = { rig.tools.read_file(), rig.tools.write_file(), rig.tools.edit_file(),
--             rig.tools.bash{ executor = ex }, rig.tools.glob(), rig.tools.grep(),
--             rig.tools.fetch() }
--
-- Every file tool works beneath the session's workspace (ctx.workspace, an
-- absolute root; none: "this tool needs a workspace (rig.define{ workspace = … })").
-- A path argument is relative to the workspace or absolute inside it. prepare
-- resolves it lexically (a `..` that leaves the root is refused), then with
-- realpath (a symbolic link that leads out is refused) and names the canonical
-- absolute path in the request; run walks that canonical path again from the
-- root, one component at a time with O_NOFOLLOW, so a symbolic link swapped in
-- after prepare is refused, never followed. Paths in results are relative to
-- the workspace.
--
-- Failures are `nil, message` from run: the runner shows the model
-- "error: <message>". prepare refuses bad input the same way ("error:
-- preparation failed: <message>").
--
-- read_file{ path, start_line = 1, end_line = last }            options: max_bytes, deny
--   requirement { kind = "filesystem.read", scope = match = <abs path> }
--   result: "   N\t<line>" per line (1-based, width 4 or more); a file over the byte
--   cap ends with "[truncated: file exceeds the N-byte read cap]"; lines past
--   end_line are not shown; an empty file reads "(empty file)"; start_line past the
--   end: "(the file has N lines)". A complete read (no cap hit; any line range) records
--   ctx.observations.reads[<abs path>] = sha256 hex of the whole file.
--   max_bytes = 256 KiB. deny = the read guard: workspace-relative paths refused with
--   everything beneath them, default { ".git/objects" } (packed, compressed objects:
--   bytes no model can use, and reads that flood the context); glob and grep skip them.
-- write_file{ path, content }                                    options: max_bytes, deny, protect
--   requirement { kind = "filesystem.write", scope = match = <abs path> }
--   Atomic (temp O_EXCL 0600 + fsync + rename, then fsync of the directory); missing
--   parent directories are made (0755). A new file is created without ever replacing
--   one that appears meanwhile; replacing an existing file keeps its mode and needs an
--   earlier complete read in this loop whose hash still matches the disk (otherwise
--   "stale write: read '<path>' first" / "stale write: '<path>' changed since it was
--   read"). The new content's hash is recorded as read.
--   result: "wrote <path> (N bytes)" or "created <path> (N bytes)".
--   max_bytes = 4 MiB of content. Never writes what the sandbox keeps as it is (the same
--   rules, sandbox/protect.c): a ".git" component at any depth, anything inside a git
--   directory, a HEAD that would make one, and a protected name (.vscode .idea
--   .devcontainer .cursor .claude .mcp.json .envrc .github/workflows, plus protect =
--   { names … }: pass a profile's protect.names) at the top of the workspace or of a
--   repository in it: "'<path>' is protected: <the rule>", checked at prepare and again
--   at run. deny = a write guard of the rig's own (workspace-relative paths, with
--   everything beneath them), default {}.
-- edit_file{ path, old, new, replace_all = false }               options: max_bytes, deny, protect
--   requirement { kind = "filesystem.write", scope = match = <abs path> }
--   Protected paths and deny as write_file.
--   old must be non-empty and differ from new. The file (at most max_bytes = 1 MiB)
--   must have been read completely and be unchanged since (as write_file). 0 matches:
--   "'old' not found in <path>"; several without replace_all: "'old' is ambiguous in
--   <path>: N matches (give more context or set replace_all)".
--   result: "edited <path>: N replacement(s)" and a short diff: for each of the first
--   3 changes, "@@ line L @@" then up to 2 lines of context (" "), the old lines ("-")
--   and the new ones ("+"), each side cut at 12 lines.
-- bash{ command, cwd = ".", timeout = 30 }                       options: executor
--   (required, a rig.sandbox executor), timeout = 30, max_timeout = 120,
--   max_output = 32 KiB
--   request.command = command, request.cwd = <abs cwd>, requirement
--   { kind = "command.execute", scope = match = command }. The command must be one
--   line (the request, the gate's rules and the grant all bind to exactly that line).
--   Runs `/bin/sh -c command` through the executor in cwd (a directory in the
--   workspace). When ctx.approved holds the command.execute requirement (a person
--   approved it at this call's gate, or a saved "approve always" rule settled it),
--   the tool mints ex:grant{ kind =
--   "command.execute", target = command, command =, cwd = } and passes it to that
--   one ex:run. A run
--   invalidates every read this loop recorded (ctx.observations.reads).
--   result: stdout, then "[stderr]\n" and stderr when there is any, then one
--   "[sandbox: '<path>' moved to '<new>': <why>]" per entry the check after the run moved
--   aside (a .git the command made inside a repository), then
--   "[exit code: N]" (or "[killed by signal N]"); over max_output the head and the tail
--   are kept around "[output truncated: omitted X of Y bytes]". A timeout is an error:
--   "command timed out after N s" followed by the output so far.
-- glob{ pattern, root = "." }                                    options: max_results, max_entries, skip, deny
--   requirement { kind = "filesystem.read", scope = match = <abs root> }
--   pattern is matched against paths relative to root: "*" and "?" within one
--   component, "[abc]" / "[!abc]" classes, "**" any number of components.
--   result: the workspace-relative paths, sorted, one per line (directories end in
--   "/"), or "no matches"; more than max_results = 500: the first 500 and
--   "[truncated: more than 500 matches; refine the pattern]". Symbolic links are listed,
--   never followed; skip = { ".git", "node_modules" } (directory names pruned
--   anywhere), the read guard's paths are left out; the walk stops after
--   max_entries = 100000 entries with "[stopped: looked at 100000 entries]".
-- grep{ pattern, path = ".", lua_pattern = false, ignore_case = false }
--                      options: max_matches, max_file_bytes, max_line, timeout, skip, deny
--   requirement { kind = "filesystem.read", scope = match = <abs path> }
--   pattern is a plain string unless lua_pattern is true (then a Lua pattern, at most
--   256 bytes; no regex engine is linked). path is a file or a directory (walked as
--   glob walks it). Files over max_file_bytes = 1 MiB and files with a NUL byte in
--   their first 8 KiB are skipped.
--   result: "<path>:<line>:<text>" per matching line (text cut at max_line = 500 bytes
--   with "…"), or "no matches"; at max_matches = 200: "[truncated: more than 200
--   matches]"; past timeout = 30 s: "[stopped: timed out after 30 s]".
-- fetch{ url, method = "GET", headers = {}, body = nil, timeout = 30 }
--                      options: max_bytes, timeout, max_timeout
--   requirement { kind = "network", scope = "host:port", match = "tcp://host:port" }
--   http and https only; a URL with user:password@ is refused. Methods GET, HEAD, POST,
--   PUT, PATCH, DELETE. Redirects (at most 10) are followed only to the same scheme,
--   host and port; 303, and 301/302 after a POST, continue as GET without a body.
--   Body cap max_bytes = 64 KiB (larger: an error), timeout default 30 s, at most
--   max_timeout = 60 s. Messages never show the query, user info or header values.
--   result: "HTTP <status>", then up to 16 response headers "name: value" (sorted;
--   set-cookie left out), a blank line and the body (a body with NUL bytes is shown
--   as "[binary body: N bytes]").
--
-- prepare returns the request and what it worked out (the resolved path, the
-- content to write, …); the runner hands the latter to run as ctx.prepared. A
-- request's summary carries a short digest of anything it does not show, so the
-- person approving sees what will be written. A call run without its prepare is
-- refused ("permission denied: this call was not prepared").

local core = require "rig.core"
local tool_mod = require "rig.tool"
local json = require "rig.json"

local M = {}

local NEEDS_WS = "this tool needs a workspace (rig.define{ workspace = … })"

-- ---- options ----

local function options(name, opts, defaults, checks)
  if opts == nil then opts = {} end
  if type(opts) ~= "table" then error("rig.tools." .. name .. ": expects a table of options", 3) end
  local out = {}
  for k, v in pairs(opts) do
    if defaults[k] == nil and not (checks and checks[k]) then
      error("rig.tools." .. name .. ": unknown option '" .. tostring(k) .. "'", 3)
    end
    out[k] = v
  end
  for k, d in pairs(defaults) do
    if out[k] == nil then out[k] = d end
    local v = out[k]
    if type(d) == "number" and (math.type(v) ~= "integer" or v < 1) then
      if not (math.type(d) == "float" and type(v) == "number" and v > 0) then
        error("rig.tools." .. name .. ": option '" .. k .. "' must be a positive integer", 3)
      end
    end
    if type(d) == "table" then
      if type(v) ~= "table" then
        error("rig.tools." .. name .. ": option '" .. k .. "' must be a list of strings", 3)
      end
      for i, s in ipairs(v) do
        if type(s) ~= "string" or s == "" or s:sub(1, 1) == "/" or s:find("%.%.") then
          error("rig.tools." .. name .. ": option '" .. k .. "[" .. i
            .. "]' must be a relative path without '..'", 3)
        end
      end
    end
  end
  if checks then
    for k, f in pairs(checks) do
      local msg = f(out[k])
      if msg then error("rig.tools." .. name .. ": option '" .. k .. "' " .. msg, 3) end
    end
  end
  return out
end

-- ---- prepared calls ----

-- What prepare worked out (the resolved path, the content to write, …) goes
-- to run as the runner's ctx.prepared: prepare returns (request, artifact).
local function prepared(req, art)
  local nreq, err = tool_mod.check_request(req)
  if not nreq then return nil, err end
  return nreq, art
end

local NOT_PREPARED = "permission denied: this call was not prepared by this tool"

local function digest(...)
  local parts = table.pack(...)
  for i = 1, parts.n do
    local v = parts[i]
    parts[i] = type(v) == "string" and (#v .. ":" .. v) or tostring(v)
  end
  return core.sha256_hex(table.concat(parts, "\0", 1, parts.n)):sub(1, 12)
end

-- ---- paths ----

local function quote(p) return "'" .. p .. "'" end

local function canonical_root(ws)
  if type(ws) ~= "string" or ws:sub(1, 1) ~= "/" then return nil, NEEDS_WS end
  local r, err = core.fs_realpath(ws)
  if not r then return nil, "workspace: " .. tostring(err) end
  return r
end

local function under(path, root)
  return path == root or (root == "/" and path:sub(1, 1) == "/")
    or path:sub(1, #root + 1) == root .. "/"
end

local function rel_of(abs, root)
  if abs == root then return "" end
  if root == "/" then return abs:sub(2) end
  return abs:sub(#root + 2)
end

local function show(rel) return rel == "" and "." or rel end

-- Resolves a path argument to { abs =, rel =, root = } (canonical) or nil, message.
local function resolve(ws, path)
  local root, rerr = canonical_root(ws)
  if not root then return nil, rerr end
  if type(path) ~= "string" or path == "" then return nil, "the path is empty" end
  if #path > 4000 then return nil, "the path is longer than 4000 bytes" end
  if path:find("[%z\r\n]") then return nil, "the path holds a control character" end
  local full = path:sub(1, 1) == "/" and path or (root .. "/" .. path)
  local parts = {}
  for c in full:gmatch("[^/]+") do
    if c == ".." then
      if #parts == 0 then return nil, quote(path) .. " is outside the workspace" end
      parts[#parts] = nil
    elseif c ~= "." then
      parts[#parts + 1] = c
    end
  end
  local lex = "/" .. table.concat(parts, "/")
  if not under(lex, root) then return nil, quote(path) .. " is outside the workspace" end
  -- canonicalize the longest existing prefix; the rest does not exist yet
  local n = #parts
  local tail = {}
  local canon
  while true do
    local p = "/" .. table.concat(parts, "/", 1, n)
    local r, _, code = core.fs_realpath(p)
    if r then canon = r break end
    if code ~= "ENOENT" and code ~= "ENOTDIR" then
      return nil, quote(path) .. ": cannot resolve (" .. tostring(code) .. ")"
    end
    local st = core.fs_lstat(p)
    if st and st.type == "link" then
      return nil, quote(path) .. " goes through a symbolic link that points nowhere"
    end
    table.insert(tail, 1, parts[n])
    n = n - 1
    if n < 0 then return nil, quote(path) .. ": cannot resolve" end
  end
  local abs = canon
  if #tail > 0 then abs = (canon == "/" and "" or canon) .. "/" .. table.concat(tail, "/") end
  if not under(abs, root) then
    return nil, quote(path) .. " resolves outside the workspace (through a symbolic link)"
  end
  return { abs = abs, rel = rel_of(abs, root), root = root }
end

-- At run: the workspace must still be the one prepare resolved against.
local function check_root(ctx, art)
  local root, err = canonical_root(ctx and ctx.workspace)
  if not root then return nil, err end
  if root ~= art.root then return nil, "the workspace changed since this call was prepared" end
  return true
end

local function guarded(rel, list)
  for _, d in ipairs(list) do
    if rel == d or rel:sub(1, #d + 1) == d .. "/" then return d end
  end
  return nil
end

-- What the sandbox keeps as it is (sandbox/protect.c, the same rules as the
-- mount view): a .git at any depth, the inside of a git directory, a
-- protected name at the top of the workspace or of a repository in it.
local function protected(p, names)
  local why, err = core.protect_path(p.root, p.rel, names)
  if why then
    return quote(p.rel) .. " is protected: " .. why .. " (rig.tools write_file and edit_file "
      .. "never write there; a person can)"
  end
  if err then return "cannot check " .. quote(p.rel) .. " against the protected paths: " .. err end
  return nil
end

-- At run: what prepare worked out (ctx.prepared), once the workspace is
-- still the one it resolved against; or nil and the refusal.
local function prepared_for(ctx)
  local a = ctx and ctx.prepared
  if not a then return nil, NOT_PREPARED end
  local ok, err = check_root(ctx, a.p)
  if not ok then return nil, err end
  return a
end

-- At prepare, for write_file and edit_file: the resolved path of a file the
-- tool may write (not the workspace itself, outside the write guard's deny
-- list, not protected), or nil and the refusal.
local function writable(pctx, path, o)
  local p, err = resolve(pctx and pctx.workspace, path)
  if not p then return nil, err end
  if p.rel == "" then return nil, "the path names the workspace itself" end
  local g = guarded(p.rel, o.deny)
  if g then return nil, quote(p.rel) .. " is refused by the write guard (" .. g .. ")" end
  local why = protected(p, o.protect)
  if why then return nil, why end
  return p
end

-- Messages from the C layer name workspace-relative paths already.
local function fs_message(msg, code)
  msg = tostring(msg)
  if code == "refused" and msg:find("symbolic link") then
    return msg .. " (refused: links are not followed; the path may have changed since it was prepared)"
  end
  return msg
end

local function reads_of(ctx)
  local obs = ctx and ctx.observations
  if type(obs) ~= "table" then return nil end
  obs.reads = obs.reads or {}
  return obs.reads
end

local function count_lines(s, upto)
  local n = 1
  for _ in s:sub(1, upto):gmatch("\n") do n = n + 1 end
  return n
end

-- ---- read_file ----

function M.read_file(opts)
  local o = options("read_file", opts, { max_bytes = 256 << 10, deny = { ".git/objects" } })
  return tool_mod{
    name = "read_file",
    description = "Read a text file in the workspace. Lines come numbered (\"N<tab>line\"). "
      .. "Give start_line and end_line (1-based, inclusive) to read part of a long file. "
      .. "Files larger than " .. o.max_bytes .. " bytes are cut off. A complete read is "
      .. "required before write_file or edit_file may change an existing file.",
    schema = { type = "object", properties = {
      path = { type = "string", description = "relative to the workspace root" },
      start_line = { type = "integer", minimum = 1 },
      end_line = { type = "integer", minimum = 1 },
    }, required = { "path" } },
    prepare = function(args, pctx)
      local p, err = resolve(pctx and pctx.workspace, args.path)
      if not p then return nil, err end
      if p.rel == "" then return nil, "'.' is a directory (the workspace itself)" end
      local g = guarded(p.rel, o.deny)
      if g then return nil, quote(p.rel) .. " is refused by the read guard (" .. g .. ")" end
      local s, e = args.start_line or 1, args.end_line
      if e and e < s then return nil, "end_line is before start_line" end
      local range = (args.start_line or e) and (" lines " .. s .. "-" .. (e or "end")) or ""
      return prepared({
        summary = "read " .. show(p.rel) .. range,
        requirements = { { kind = "filesystem.read", scope = p.abs, match = p.abs } },
      }, { p = p, s = s, e = e })
    end,
    run = function(req, ctx)
      local a, err = prepared_for(ctx)
      if not a then return nil, err end
      local data, truncated, size = core.fs_read_beneath(a.p.root, a.p.rel, o.max_bytes)
      if not data then return nil, fs_message(truncated, size) end
      local reads = reads_of(ctx)
      if reads and not truncated then reads[a.p.abs] = core.sha256_hex(data) end
      if data == "" then return "(empty file)" end
      local out, n = {}, 0
      local last_complete = not truncated or data:sub(-1) == "\n"
      local pos = 1
      local lines = 0
      while pos <= #data do
        local nl = data:find("\n", pos, true)
        local line = data:sub(pos, (nl or #data + 1) - 1)
        pos = (nl or #data) + 1
        lines = lines + 1
        if not nl and not last_complete then break end -- a cut line is not shown
        if lines >= a.s and (not a.e or lines <= a.e) then
          n = n + 1
          out[n] = string.format("%4d\t%s", lines, line)
        end
        if a.e and lines >= a.e then break end
      end
      if n == 0 then
        return "(the file has " .. lines .. " line" .. (lines == 1 and "" or "s")
          .. "; start_line " .. a.s .. " is past the end)"
      end
      local text = table.concat(out, "\n") .. "\n"
      if truncated and (not a.e or lines < a.e) then
        text = text .. "[truncated: file exceeds the " .. o.max_bytes .. "-byte read cap ("
          .. size .. " bytes); read a later range with start_line]\n"
      end
      return text
    end,
  }
end

-- ---- write_file and edit_file ----

local function stale_check(ctx, a, max)
  -- returns the current content ("" and false when absent) or nil, message
  local data, truncated, code = core.fs_read_beneath(a.p.root, a.p.rel, max)
  if not data then
    if code == "ENOENT" then return "", false end
    return nil, fs_message(truncated, code)
  end
  local reads = reads_of(ctx)
  local seen = reads and reads[a.p.abs]
  if not seen then
    return nil, "stale write: read " .. quote(show(a.p.rel)) .. " completely first (read_file)"
  end
  if truncated or core.sha256_hex(data) ~= seen then
    return nil, "stale write: " .. quote(show(a.p.rel))
      .. " changed since it was read; read it again first"
  end
  return data, true
end

function M.write_file(opts)
  local o = options("write_file", opts, { max_bytes = 4 << 20, deny = {}, protect = {} })
  return tool_mod{
    name = "write_file",
    description = "Write a whole file in the workspace (created with its directories if "
      .. "missing). Replacing an existing file needs a complete read_file of it first, and the "
      .. "file must not have changed since. Prefer edit_file for small changes.",
    schema = { type = "object", properties = {
      path = { type = "string", description = "relative to the workspace root" },
      content = { type = "string" },
    }, required = { "path", "content" } },
    sequential = true,
    prepare = function(args, pctx)
      local p, err = writable(pctx, args.path, o)
      if not p then return nil, err end
      if #args.content > o.max_bytes then
        return nil, "the content is larger than " .. o.max_bytes .. " bytes"
      end
      return prepared({
        summary = "write " .. p.rel .. " (" .. #args.content .. " bytes, sha256 "
          .. digest(args.content) .. ")",
        requirements = { { kind = "filesystem.write", scope = p.abs, match = p.abs } },
      }, { p = p, content = args.content })
    end,
    run = function(req, ctx)
      local a, err = prepared_for(ctx)
      if not a then return nil, err end
      local why = protected(a.p, o.protect)
      if why then return nil, why end
      local cur, existed = stale_check(ctx, a, 64 << 20)
      if not cur then return nil, existed end
      local wok, werr, wcode = core.fs_write_beneath(a.p.root, a.p.rel, a.content,
        existed and "replace" or "create")
      if not wok then
        if wcode == "EEXIST" then
          return nil, "stale write: " .. quote(a.p.rel) .. " appeared meanwhile; read it first"
        end
        return nil, fs_message(werr, wcode)
      end
      local reads = reads_of(ctx)
      if reads then reads[a.p.abs] = core.sha256_hex(a.content) end
      return (existed and "wrote " or "created ") .. a.p.rel .. " (" .. #a.content .. " bytes)"
    end,
  }
end

local function split_lines(s)
  local t = {}
  for l in (s .. "\n"):gmatch("(.-)\n") do t[#t + 1] = l end
  if s:sub(-1) == "\n" then t[#t] = nil end
  return t
end

-- A short diff of the first few replacements (old text at byte offsets in cur).
local function edit_diff(cur, old, new, starts)
  local out = {}
  local shift = 0
  for i, at in ipairs(starts) do
    if i > 3 then
      out[#out + 1] = "… " .. (#starts - 3) .. " more replacement(s)"
      break
    end
    local line = count_lines(cur, at - 1)
    out[#out + 1] = "@@ line " .. (line + shift) .. " @@"
    -- up to 2 lines of context before
    local bol = at
    while bol > 1 and cur:sub(bol - 1, bol - 1) ~= "\n" do bol = bol - 1 end
    local before = {}
    local p = bol - 1
    for _ = 1, 2 do
      if p < 1 then break end
      local q = p - 1
      while q >= 1 and cur:sub(q, q) ~= "\n" do q = q - 1 end
      table.insert(before, 1, cur:sub(q + 1, p - 1))
      p = q
    end
    for _, l in ipairs(before) do out[#out + 1] = " " .. l end
    local eol = cur:find("\n", at + #old - 1, true) or (#cur + 1)
    if #old > 0 and cur:sub(at + #old - 1, at + #old - 1) == "\n" then eol = at + #old - 1 end
    local prefix = cur:sub(bol, at - 1)
    local suffix = cur:sub(at + #old, eol - 1)
    local function side(mark, text)
      local ls = split_lines(prefix .. text .. suffix)
      if #ls == 0 then ls = { "" } end
      for k, l in ipairs(ls) do
        if k > 12 then out[#out + 1] = mark .. "… (" .. (#ls - 12) .. " more lines)" break end
        out[#out + 1] = mark .. l
      end
      return #ls
    end
    local nold = side("-", old)
    local nnew = side("+", new)
    shift = shift + nnew - nold
  end
  return table.concat(out, "\n")
end

function M.edit_file(opts)
  local o = options("edit_file", opts, { max_bytes = 1 << 20, deny = {}, protect = {} })
  return tool_mod{
    name = "edit_file",
    description = "Replace text in a file of the workspace: 'old' must occur exactly once "
      .. "(include enough surrounding lines), or set replace_all. The file must have been read "
      .. "completely with read_file and not changed since. Returns a short diff.",
    schema = { type = "object", properties = {
      path = { type = "string", description = "relative to the workspace root" },
      old = { type = "string", description = "the exact text to replace" },
      new = { type = "string", description = "the replacement" },
      replace_all = { type = "boolean" },
    }, required = { "path", "old", "new" } },
    sequential = true,
    prepare = function(args, pctx)
      local p, err = writable(pctx, args.path, o)
      if not p then return nil, err end
      if args.old == "" then return nil, "'old' is empty" end
      if args.old == args.new then return nil, "'old' and 'new' are the same" end
      local all = args.replace_all == true
      return prepared({
        summary = "edit " .. p.rel .. (all and " (every match" or " (one match") .. ", sha256 "
          .. digest(args.old, args.new, all) .. ")",
        requirements = { { kind = "filesystem.write", scope = p.abs, match = p.abs } },
      }, { p = p, old = args.old, new = args.new, all = all })
    end,
    run = function(req, ctx)
      local a, err = prepared_for(ctx)
      if not a then return nil, err end
      local why = protected(a.p, o.protect)
      if why then return nil, why end
      local st = core.fs_lstat(a.p.abs)
      if st and st.type == "file" and st.size > o.max_bytes then
        return nil, quote(a.p.rel) .. " is larger than " .. o.max_bytes .. " bytes (edit_file's cap)"
      end
      local cur, existed = stale_check(ctx, a, o.max_bytes)
      if not cur then return nil, existed end
      if not existed then return nil, quote(a.p.rel) .. " does not exist" end
      local starts = {}
      local from = 1
      while true do
        local s = cur:find(a.old, from, true)
        if not s then break end
        starts[#starts + 1] = s
        from = s + #a.old
      end
      if #starts == 0 then return nil, "'old' not found in " .. quote(a.p.rel) end
      if #starts > 1 and not a.all then
        return nil, "'old' is ambiguous in " .. quote(a.p.rel) .. ": " .. #starts
          .. " matches (give more context or set replace_all)"
      end
      local parts, pos = {}, 1
      for _, s in ipairs(starts) do
        parts[#parts + 1] = cur:sub(pos, s - 1)
        parts[#parts + 1] = a.new
        pos = s + #a.old
      end
      parts[#parts + 1] = cur:sub(pos)
      local text = table.concat(parts)
      local wok, werr, wcode = core.fs_write_beneath(a.p.root, a.p.rel, text, "replace")
      if not wok then return nil, fs_message(werr, wcode) end
      local reads = reads_of(ctx)
      if reads then reads[a.p.abs] = core.sha256_hex(text) end
      return "edited " .. a.p.rel .. ": " .. #starts .. " replacement"
        .. (#starts == 1 and "" or "s") .. "\n" .. edit_diff(cur, a.old, a.new, starts) .. "\n"
    end,
  }
end

-- ---- bash ----

-- Head and tail around a marker, not cutting inside a UTF-8 sequence.
local function head_tail(text, cap)
  if #text <= cap then return text end
  local head = cap // 2
  local tail = cap - head
  while head > 0 and (text:byte(head + 1) or 0) & 0xC0 == 0x80 do head = head - 1 end
  local ts = #text - tail + 1
  while ts <= #text and (text:byte(ts) or 0) & 0xC0 == 0x80 do ts = ts + 1 end
  local h = text:sub(1, head)
  if h ~= "" and h:sub(-1) ~= "\n" then h = h .. "\n" end
  return h .. string.format("[output truncated: omitted %d of %d bytes]\n", ts - head - 1, #text)
    .. text:sub(ts)
end

local function is_executor(v)
  local t = type(v)
  if t ~= "userdata" and t ~= "table" then return false end
  local ok, f = pcall(function() return v.run end)
  return ok and f ~= nil
end

function M.bash(opts)
  local o = options("bash", opts, { timeout = 30, max_timeout = 120, max_output = 32 << 10 },
    { executor = function(v)
        if not is_executor(v) then return "must be a rig.sandbox executor (set:get(key))" end
      end })
  if o.timeout > o.max_timeout then
    error("rig.tools.bash: option 'timeout' is above 'max_timeout'", 2)
  end
  local ex = o.executor
  return tool_mod{
    name = "bash",
    description = "Run one line of shell (/bin/sh -c) in a sandbox, in cwd (a directory of the "
      .. "workspace; default its root). Output over " .. o.max_output .. " bytes keeps its "
      .. "head and tail. timeout in seconds (default " .. o.timeout .. ", at most "
      .. o.max_timeout .. "). Files read before must be read again after a command.",
    schema = { type = "object", properties = {
      command = { type = "string" },
      cwd = { type = "string", description = "relative to the workspace root" },
      timeout = { type = "number", minimum = 1, maximum = o.max_timeout },
    }, required = { "command" } },
    sequential = true,
    prepare = function(args, pctx)
      local cmd = args.command
      if cmd:find("[\r\n%z]") then
        return nil, "the command must be one line (join commands with ';' or '&&', or write a "
          .. "script with write_file and run it)"
      end
      cmd = cmd:match("^%s*(.-)%s*$")
      if cmd == "" then return nil, "the command is empty" end
      if #cmd > 4000 then return nil, "the command is longer than 4000 bytes" end
      local p, err = resolve(pctx and pctx.workspace, args.cwd or ".")
      if not p then return nil, err end
      local timeout = args.timeout or o.timeout
      return prepared({
        summary = "run `" .. (#cmd > 200 and (cmd:sub(1, 200) .. "…") or cmd) .. "` in "
          .. show(p.rel) .. " (timeout " .. timeout .. " s)",
        command = cmd, cwd = p.abs,
        requirements = { { kind = "command.execute", scope = cmd, match = cmd } },
      }, { p = p, cmd = cmd, timeout = timeout })
    end,
    run = function(req, ctx)
      local a, err = prepared_for(ctx)
      if not a then return nil, err end
      local st = core.fs_lstat(a.p.abs)
      if not st or st.type ~= "dir" then
        return nil, "cwd " .. quote(show(a.p.rel)) .. " is not a directory (or it changed)"
      end
      local grants
      for _, r in ipairs(ctx.approved or {}) do
        if r.kind == "command.execute" and r.match == a.cmd then
          local token, gerr = ex:grant{ kind = "command.execute", target = a.cmd, command = a.cmd,
                                        cwd = a.p.abs }
          if not token then return nil, "cannot grant the approved command: " .. tostring(gerr) end
          grants = { { token = token, kind = "command.execute", target = a.cmd } }
        end
      end
      local reads = reads_of(ctx)
      if reads then ctx.observations.reads = {} end
      local r, rerr = ex:run{ command = a.cmd, cwd = a.p.abs, timeout = a.timeout,
                              output_limit = o.max_output, grants = grants }
      if not r then return nil, tostring(rerr) end
      local out = r.stdout or ""
      if (r.stderr or "") ~= "" then
        if out ~= "" and out:sub(-1) ~= "\n" then out = out .. "\n" end
        out = out .. "[stderr]\n" .. r.stderr
      end
      out = head_tail(out, o.max_output)
      if out ~= "" and out:sub(-1) ~= "\n" then out = out .. "\n" end
      for _, line in ipairs(r.moved_aside or {}) do
        out = out .. "[sandbox: " .. line .. "]\n"
      end
      if r.timed_out then
        return nil, "command timed out after " .. a.timeout .. " s" .. (out ~= "" and ("\n" .. out) or "")
      end
      if r.signal and r.signal ~= 0 and r.code == nil then
        return out .. "[killed by signal " .. r.signal .. "]"
      end
      return out .. "[exit code: " .. tostring(r.code) .. "]"
    end,
  }
end

-- ---- glob and grep ----

local function glob_segment(seg)
  local out, i = { "^" }, 1
  while i <= #seg do
    local c = seg:sub(i, i)
    if c == "*" then out[#out + 1] = ".*"
    elseif c == "?" then out[#out + 1] = "."
    elseif c == "[" then
      local j = seg:find("]", i + 2, true)
      if not j then
        out[#out + 1] = "%["
      else
        local body = seg:sub(i + 1, j - 1)
        local neg = body:sub(1, 1) == "!" or body:sub(1, 1) == "^"
        if neg then body = body:sub(2) end
        body = body:gsub("[%%%]%[]", "%%%0"):gsub("%%%-", "-")
        out[#out + 1] = "[" .. (neg and "^" or "") .. body .. "]"
        i = j
      end
    else
      out[#out + 1] = c:gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0")
    end
    i = i + 1
  end
  out[#out + 1] = "$"
  return table.concat(out)
end

local function compile_glob(pattern)
  local segs = {}
  for s in pattern:gmatch("[^/]+") do
    if s == "**" then segs[#segs + 1] = "**"
    elseif s ~= "." then
      local lp = glob_segment(s)
      local ok = pcall(string.find, "", lp)
      if not ok then return nil, "invalid pattern segment '" .. s .. "'" end
      segs[#segs + 1] = lp
    end
  end
  if #segs == 0 then return nil, "the pattern is empty" end
  return segs
end

local function glob_match(segs, parts, si, pi)
  si, pi = si or 1, pi or 1
  while si <= #segs do
    local s = segs[si]
    if s == "**" then
      for k = pi, #parts + 1 do
        if glob_match(segs, parts, si + 1, k) then return true end
      end
      return false
    end
    if pi > #parts or not parts[pi]:find(s) then return false end
    si, pi = si + 1, pi + 1
  end
  return pi > #parts
end

local function yield_now() core.sleep(0) end

-- Walks rel (a directory beneath root) depth first in name order; visit(rel_path,
-- type) returns "stop" to end. Returns the number of entries seen, and whether the
-- entry cap stopped it.
local function walk(root, rel, o, visit)
  local seen = 0
  local skip = {}
  for _, s in ipairs(o.skip) do skip[s] = true end
  local function go(dir)
    local list = core.fs_list_beneath(root, dir)
    if not list then return end
    for _, e in ipairs(list) do
      seen = seen + 1
      if seen > o.max_entries then return "capped" end
      if seen % 512 == 0 then yield_now() end
      local path = dir == "" and e.name or (dir .. "/" .. e.name)
      if not (e.type == "dir" and skip[e.name]) and not guarded(path, o.deny) then
        local v = visit(path, e.type)
        if v then return v end
        if e.type == "dir" then
          v = go(path)
          if v then return v end
        end
      end
    end
  end
  local why = go(rel)
  return seen, why
end

local WALK_DEFAULTS = { skip = { ".git", "node_modules" }, deny = { ".git/objects" },
                        max_entries = 100000 }

function M.glob(opts)
  local d = { max_results = 500 }
  for k, v in pairs(WALK_DEFAULTS) do d[k] = v end
  local o = options("glob", opts, d)
  return tool_mod{
    name = "glob",
    description = "List workspace paths matching a glob pattern, relative to root: '*' and '?' "
      .. "match within one path component, '**' any number of components (e.g. '**/*.lua'). "
      .. ".git and node_modules are skipped. At most " .. o.max_results .. " results.",
    schema = { type = "object", properties = {
      pattern = { type = "string" },
      root = { type = "string", description = "a directory relative to the workspace root" },
    }, required = { "pattern" } },
    prepare = function(args, pctx)
      local p, err = resolve(pctx and pctx.workspace, args.root or ".")
      if not p then return nil, err end
      if #args.pattern > 1000 then return nil, "the pattern is longer than 1000 bytes" end
      if args.pattern:sub(1, 1) == "/" or args.pattern:find("%.%.") then
        return nil, "the pattern must be relative to root, without '..'"
      end
      local segs, perr = compile_glob(args.pattern)
      if not segs then return nil, perr end
      return prepared({
        summary = "glob " .. args.pattern:gsub("[%c]", "?") .. " in " .. show(p.rel),
        requirements = { { kind = "filesystem.read", scope = p.abs, match = p.abs } },
      }, { p = p, segs = segs })
    end,
    run = function(req, ctx)
      local a, err = prepared_for(ctx)
      if not a then return nil, err end
      local list, lerr, lcode = core.fs_list_beneath(a.p.root, a.p.rel)
      if not list then return nil, fs_message(lerr, lcode) end
      local found, more = {}, false
      local base = a.p.rel
      local _, why = walk(a.p.root, base, o, function(path, t)
        local sub = base == "" and path or path:sub(#base + 2)
        local parts = {}
        for c in sub:gmatch("[^/]+") do parts[#parts + 1] = c end
        if glob_match(a.segs, parts) then
          if #found >= o.max_results then more = true return "full" end
          found[#found + 1] = path .. (t == "dir" and "/" or "")
        end
      end)
      table.sort(found)
      local text = #found == 0 and "no matches" or table.concat(found, "\n")
      if more then
        text = text .. "\n[truncated: more than " .. o.max_results
          .. " matches; refine the pattern]"
      elseif why == "capped" then
        text = text .. "\n[stopped: looked at " .. o.max_entries .. " entries]"
      end
      return text .. "\n"
    end,
  }
end

-- Lower-cases a Lua pattern's letters, leaving %-escapes alone.
local function lower_pattern(p)
  return (p:gsub("(%%?)(%a)", function(esc, c) return esc == "" and c:lower() or nil end))
end

function M.grep(opts)
  local d = { max_matches = 200, max_file_bytes = 1 << 20, max_line = 500, timeout = 30 }
  for k, v in pairs(WALK_DEFAULTS) do d[k] = v end
  local o = options("grep", opts, d)
  return tool_mod{
    name = "grep",
    description = "Search file contents in the workspace. pattern is a plain string, or a Lua "
      .. "pattern (not a regular expression: %d digit, %a letter, %s space, . any, * + - ?, "
      .. "^ $ anchors, escape with %) when lua_pattern is true. path is a file or a "
      .. "directory (default the workspace root). Prints path:line:text, at most "
      .. o.max_matches .. " lines.",
    schema = { type = "object", properties = {
      pattern = { type = "string" },
      path = { type = "string", description = "relative to the workspace root" },
      lua_pattern = { type = "boolean" },
      ignore_case = { type = "boolean" },
    }, required = { "pattern" } },
    prepare = function(args, pctx)
      local p, err = resolve(pctx and pctx.workspace, args.path or ".")
      if not p then return nil, err end
      local g = guarded(p.rel, o.deny)
      if g then return nil, quote(show(p.rel)) .. " is refused by the read guard (" .. g .. ")" end
      local pat = args.pattern
      if pat == "" then return nil, "the pattern is empty" end
      local lua = args.lua_pattern == true
      local ic = args.ignore_case == true
      if lua then
        if #pat > 256 then return nil, "a Lua pattern may be at most 256 bytes" end
        local ok, perr = pcall(string.find, "", pat)
        if not ok then return nil, "invalid Lua pattern: " .. tostring(perr):gsub("^.-: ", "") end
      end
      if #pat > 1000 then return nil, "the pattern is longer than 1000 bytes" end
      return prepared({
        summary = "grep " .. (lua and "lua pattern " or "") .. (ic and "ignoring case " or "")
          .. pat:gsub("[%c]", "?") .. " in " .. show(p.rel),
        requirements = { { kind = "filesystem.read", scope = p.abs, match = p.abs } },
      }, { p = p, pat = ic and (lua and lower_pattern(pat) or pat:lower()) or pat, lua = lua,
           ic = ic })
    end,
    run = function(req, ctx)
      local a, err = prepared_for(ctx)
      if not a then return nil, err end
      local st = core.fs_lstat(a.p.abs)
      if not st then return nil, quote(show(a.p.rel)) .. " does not exist" end
      local out, more, timed = {}, false, false
      local deadline = core.now() + o.timeout
      local plain = not a.lua
      local function search(path)
        if core.now() > deadline then timed = true return "timeout" end
        local data = core.fs_read_beneath(a.p.root, path, o.max_file_bytes + 1)
        if not data or #data > o.max_file_bytes or data:sub(1, 8192):find("\0", 1, true) then
          return
        end
        local n = 0
        for line in (data .. "\n"):gmatch("(.-)\n") do
          n = n + 1
          local subject = a.ic and line:lower() or line
          local okf, hit = pcall(string.find, subject, a.pat, 1, plain)
          if okf and hit then
            if #out >= o.max_matches then more = true return "full" end
            if #line > o.max_line then
              local cut = o.max_line
              while cut > 0 and (line:byte(cut + 1) or 0) & 0xC0 == 0x80 do cut = cut - 1 end
              line = line:sub(1, cut) .. "…"
            end
            out[#out + 1] = path .. ":" .. n .. ":" .. line
          end
        end
      end
      if st.type == "file" then
        search(a.p.rel)
      elseif st.type == "dir" then
        walk(a.p.root, a.p.rel, o, function(path, t)
          if t == "file" then return search(path) end
        end)
      else
        return nil, quote(show(a.p.rel)) .. " is not a file or a directory"
      end
      local text = #out == 0 and "no matches" or table.concat(out, "\n")
      if more then text = text .. "\n[truncated: more than " .. o.max_matches .. " matches]" end
      if timed then text = text .. "\n[stopped: timed out after " .. o.timeout .. " s]" end
      return text .. "\n"
    end,
  }
end

-- ---- fetch ----

local METHODS = { GET = true, HEAD = true, POST = true, PUT = true, PATCH = true, DELETE = true }

-- Parses an absolute http(s) URL into { scheme, host, port, target } or nil, message
-- (messages never show the URL: it may hold secrets).
local function parse_url(url)
  if type(url) ~= "string" or #url > 8192 or url:find("[%s%c]") then
    return nil, "the URL is malformed"
  end
  local scheme, rest = url:match("^(%a[%w+.-]*)://(.*)$")
  if not scheme then return nil, "the URL is not absolute (http:// or https://)" end
  scheme = scheme:lower()
  if scheme ~= "http" and scheme ~= "https" then
    return nil, "only http and https URLs are fetched (not " .. scheme .. ")"
  end
  local authority, target = rest:match("^([^/?#]*)(.*)$")
  if authority:find("@", 1, true) then
    return nil, "URLs with credentials (user:password@) are refused"
  end
  local host, port = authority:match("^(%[[%x:.]+%]):?(%d*)$")
  if not host then host, port = authority:match("^([%w.-]+):?(%d*)$") end
  if not host or host == "" then return nil, "the URL has no valid host" end
  host = host:lower()
  port = port ~= "" and tonumber(port) or (scheme == "https" and 443 or 80)
  if port < 1 or port > 65535 then return nil, "the URL's port is out of range" end
  target = target:gsub("#.*$", "")
  if target == "" or target:sub(1, 1) == "?" then target = "/" .. target end
  return { scheme = scheme, host = host, port = port, target = target }
end

local function origin(u) return u.scheme .. "://" .. u.host .. ":" .. u.port end
local function url_of(u)
  local default = (u.scheme == "https" and u.port == 443) or (u.scheme == "http" and u.port == 80)
  return u.scheme .. "://" .. u.host .. (default and "" or (":" .. u.port)) .. u.target
end

-- A Location against the current URL: absolute, scheme-relative, or a path.
local function resolve_location(cur, loc)
  if loc:match("^%a[%w+.-]*://") then return parse_url(loc) end
  if loc:sub(1, 2) == "//" then return parse_url(cur.scheme .. ":" .. loc) end
  if loc:find("[%s%c]") then return nil, "the redirect location is malformed" end
  local t = { scheme = cur.scheme, host = cur.host, port = cur.port }
  if loc:sub(1, 1) == "/" then
    t.target = loc
  else
    local dir = cur.target:gsub("[?#].*$", ""):match("^(.*/)") or "/"
    t.target = dir .. loc
  end
  t.target = t.target:gsub("#.*$", "")
  return t
end

local HIDDEN_HEADERS = { ["set-cookie"] = true }

function M.fetch(opts)
  local o = options("fetch", opts, { max_bytes = 64 << 10, timeout = 30, max_timeout = 60 })
  if o.timeout > o.max_timeout then
    error("rig.tools.fetch: option 'timeout' is above 'max_timeout'", 2)
  end
  local http = require "rig.http"
  return tool_mod{
    name = "fetch",
    description = "Fetch an http(s) URL. Returns the status, some headers and the body "
      .. "(at most " .. o.max_bytes .. " bytes). Redirects are followed only within the same "
      .. "scheme, host and port.",
    schema = { type = "object", properties = {
      url = { type = "string" },
      method = { type = "string", enum = { "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE" } },
      headers = { type = "object", additionalProperties = { type = "string" } },
      body = { type = "string" },
      timeout = { type = "number", minimum = 1, maximum = o.max_timeout },
    }, required = { "url" } },
    prepare = function(args)
      local u, err = parse_url(args.url)
      if not u then return nil, err end
      local method = args.method or "GET"
      if not METHODS[method] then return nil, "method must be one of GET, HEAD, POST, PUT, PATCH, DELETE" end
      local headers, hkeys = {}, {}
      for k, v in pairs(args.headers or {}) do
        if type(k) ~= "string" or not k:match("^[%w!#$%%&'*+.^_`|~-]+$") or #k > 256 then
          return nil, "a header name is not a valid token"
        end
        if type(v) ~= "string" or v:find("[%c]") or #v > 8192 then
          return nil, "the value of header '" .. k .. "' is not one line of text"
        end
        local lk = k:lower()
        if lk == "host" or lk == "content-length" or lk == "transfer-encoding" or lk == "connection" then
          return nil, "header '" .. k .. "' is set by the client"
        end
        headers[k] = v
        hkeys[#hkeys + 1] = k
      end
      table.sort(hkeys)
      local hparts = {}
      for _, k in ipairs(hkeys) do hparts[#hparts + 1] = k .. ":" .. headers[k] end
      local body = args.body
      if body and #body > 1 << 20 then return nil, "the body is larger than 1 MiB" end
      local timeout = args.timeout or o.timeout
      local scope = u.host .. ":" .. u.port
      local shown = url_of(u):gsub("%?.*$", "?…")
      return prepared({
        summary = "fetch " .. method .. " " .. (#shown > 300 and (shown:sub(1, 300) .. "…") or shown)
          .. " (sha256 " .. digest(args.url, method, table.concat(hparts, "\n"), body or "",
            timeout) .. ")",
        requirements = { { kind = "network", scope = scope, match = "tcp://" .. scope } },
      }, { u = u, method = method, headers = headers, body = body, timeout = timeout })
    end,
    run = function(req, ctx)
      local a = ctx and ctx.prepared
      if not a then return nil, NOT_PREPARED end
      local u, method, body = a.u, a.method, a.body
      local deadline = core.now() + a.timeout
      local where = origin(a.u)
      for _ = 0, 10 do
        local left = deadline - core.now()
        if left <= 0 then return nil, "fetch from " .. where .. " timed out after " .. a.timeout .. " s" end
        local resp, _, code = http.request{ url = url_of(u), method = method, headers = a.headers,
          body = body, timeout = left, connect_timeout = math.min(10, left),
          follow_redirects = false, max_body = o.max_bytes }
        if not resp then
          if code == "timeout" then
            return nil, "fetch from " .. where .. " timed out after " .. a.timeout .. " s"
          elseif code == "too_large" then
            return nil, "the response from " .. where .. " is larger than the " .. o.max_bytes
              .. "-byte cap"
          elseif code == "cancelled" then
            error("cancelled", 0)
          end
          return nil, "fetch from " .. where .. " failed (" .. tostring(code) .. ")"
        end
        local s = resp.status
        local loc = resp.headers and resp.headers.location
        if (s == 301 or s == 302 or s == 303 or s == 307 or s == 308) and loc then
          local nu, lerr = resolve_location(u, loc)
          if not nu then return nil, lerr end
          if origin(nu) ~= origin(a.u) then
            return nil, "redirect to another origin refused (from " .. where .. " to "
              .. origin(nu) .. ")"
          end
          if s == 303 or ((s == 301 or s == 302) and method == "POST") then
            method, body = "GET", nil
          end
          u = nu
        else
          local out = { "HTTP " .. s }
          local names = {}
          for k in pairs(resp.headers or {}) do
            if not HIDDEN_HEADERS[k] then names[#names + 1] = k end
          end
          table.sort(names)
          for i, k in ipairs(names) do
            if i > 16 then break end
            out[#out + 1] = k .. ": " .. tostring(resp.headers[k])
          end
          local b = resp.body or ""
          if b:find("\0", 1, true) then b = "[binary body: " .. #b .. " bytes]" end
          return table.concat(out, "\n") .. "\n\n" .. b
        end
      end
      return nil, "too many redirects from " .. where
    end,
  }
end

M._resolve = resolve
M._head_tail = head_tail

return M
