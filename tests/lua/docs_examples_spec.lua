-- The runnable examples of the docs: in docs/hooks.md, docs/handoffs.md,
-- docs/budgets.md and docs/sessions.md a ```lua block followed by a ```text block is a whole script;
-- each runs under luarig (a child process, no API key) and must exit 0 with
-- every line of the text block in its output (in any order: parallel tool
-- calls may print in either).

local luarig = os.getenv("LUARIG") or "build/luarig"
local root = os.getenv("LUARIG_ROOT") or "."

local DOCS = { "docs/hooks.md", "docs/handoffs.md", "docs/budgets.md", "docs/sessions.md",
               "docs/media.md" }

-- { { code, expected = { lines }, line } } of one file.
local function examples(path)
  local f = assert(io.open(root .. "/" .. path))
  local text = f:read("a")
  f:close()
  local blocks = {}
  local n = 0
  local lines = {}
  for l in (text .. "\n"):gmatch("(.-)\n") do lines[#lines + 1] = l end
  local i = 1
  while i <= #lines do
    local lang = lines[i]:match("^```(%w*)$")
    if lang and lang ~= "" then
      local start = i
      local body = {}
      i = i + 1
      while i <= #lines and lines[i] ~= "```" do body[#body + 1] = lines[i]; i = i + 1 end
      blocks[#blocks + 1] = { lang = lang, body = body, line = start, after = i }
    end
    i = i + 1
  end
  local out = {}
  for k, b in ipairs(blocks) do
    local nxt = blocks[k + 1]
    if b.lang == "lua" and nxt and nxt.lang == "text" then
      -- only prose between them
      n = n + 1
      out[#out + 1] = { code = table.concat(b.body, "\n") .. "\n", expected = nxt.body, line = b.line }
    end
  end
  return out
end

local function tmpfile(text)
  local p = os.tmpname()
  local f = assert(io.open(p, "w"))
  f:write(text)
  f:close()
  return p
end

for _, doc in ipairs(DOCS) do
  describe(doc, function()
    local list = examples(doc)
    it("has runnable examples", function() expect(#list > 0).to_be(true) end)
    for _, ex in ipairs(list) do
      it("example at line " .. ex.line .. " runs and prints what the text says", function()
        local path = tmpfile(ex.code)
        local r = assert(rig.process.run{ argv = { luarig, path }, timeout = 60,
          env = { ANTHROPIC_API_KEY = false, OPENAI_API_KEY = false, GEMINI_API_KEY = false,
                  GOOGLE_API_KEY = false } })
        os.remove(path)
        if r.code ~= 0 then error("exit " .. tostring(r.code) .. ": " .. r.stderr .. r.stdout) end
        local have = {}
        for l in (r.stdout .. "\n"):gmatch("(.-)\n") do have[l] = true end
        for _, want in ipairs(ex.expected) do
          if not have[want] then
            error("missing line " .. string.format("%q", want) .. " in:\n" .. r.stdout)
          end
        end
      end)
    end
  end)
end
