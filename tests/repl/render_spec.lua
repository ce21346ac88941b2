-- rig.repl_render: the workbench's drawing of session events, without a terminal.
local render = require "rig.repl_render"

local function all(rd, evs)
  local out = {}
  for _, ev in ipairs(evs) do
    for _, l in ipairs(rd:event(ev)) do out[#out + 1] = l end
  end
  for _, l in ipairs(rd:flush()) do out[#out + 1] = l end
  return out
end

local function delta(text, kind)
  return { type = "TokenDelta", delta = { type = kind or "text", text = text } }
end

local function no_escapes(lines)
  for _, l in ipairs(lines) do
    if l:find("\27", 1, true) then return false end
  end
  return true
end

local function fits(lines, w)
  for _, l in ipairs(lines) do
    if (utf8.len(l) or #l) > w then return false, l end
  end
  return true
end

describe("rig.repl_render", function()
  it("shows streamed text a line at a time, the rest at the next event", function()
    local rd = render.new{ color = false, width = 80 }
    expect(#rd:event(delta("hel"))).to_be(0)
    expect(rd:event(delta("lo\nwor"))).to_equal({ "  hello" })
    expect(rd:event({ type = "TurnDone", usage = { input_tokens = 5, output_tokens = 2, cost = 0.0012 } }))
      .to_equal({ "  wor", "── done · 5 in / 2 out tokens · $0.0012" })
  end)

  it("dims thinking only with color, and marks it either way", function()
    local plain = all(render.new{ color = false }, { delta("hmm", "thinking"), delta("yes") })
    expect(plain).to_equal({ "  ┊ hmm", "  yes" })
    local colored = all(render.new{ color = true }, { delta("hmm", "thinking") })
    expect(colored[1]).to_be("\27[2m  ┊ hmm\27[0m")
  end)

  it("draws tool calls, previews and errors in full with NO_COLOR", function()
    local rd = render.new{ color = false, width = 60 }
    local lines = all(rd, {
      { type = "ToolCallStarted", tool = "bash", summary = "sh test.sh" },
      { type = "ToolCallCompleted", preview = "a\nb\nc\nd\ne\nf" },
      { type = "ToolCallCompleted", preview = "error: boom", is_error = true },
      { type = "TurnFailed", error = { code = "model_error", message = string.rep("x", 150) } },
      { type = "TurnInterrupted", reason = "interrupted" },
    })
    expect(no_escapes(lines)).to_be(true)
    expect(lines[1]).to_be("  → bash sh test.sh")
    expect(lines[2]).to_be("    │ a")
    expect(lines[5]).to_be("    │ d")
    expect(lines[6]).to_be("    │ …")
    expect(lines[7]).to_be("    ✗ error: boom")
    -- the failure's message is wrapped, not cut: all 150 x are there
    local xs = 0
    for i = 8, #lines do local _, n = lines[i]:gsub("x", "") xs = xs + n end
    expect(xs).to_be(150)
    expect(lines[8]).to_match("^── failed: xxx")
    expect(lines[#lines]).to_be("── interrupted (interrupted)")
    expect(fits(lines, 60)).to_be(true)
  end)

  it("keeps every line within a narrow terminal", function()
    local rd = render.new{ color = false, width = function() return 24 end }
    local lines = all(rd, {
      delta(string.rep("word ", 20) .. "\n"),
      { type = "ToolCallStarted", tool = "read_file", summary = "read a/very/long/path/to/a/file.txt" },
      { type = "ToolCallCompleted", preview = string.rep("y", 100) },
      { type = "PermissionRequested", gate_id = "g1", unmet = { { kind = "network", match = "tcp://example.org:443" } },
        candidates = { { effect = "allow", kind = "network", match = "tcp://example.org:443" } } },
      { type = "GateOpened", gate_id = "g1", tool = "fetch", summary = "fetch example.org" },
    })
    local ok, bad = fits(lines, 24)
    expect(bad).to_be_nil()
    expect(ok).to_be(true)
    expect(rd:width()).to_be(24)
    -- narrower than 20 is drawn at 20
    expect(render.new{ width = 5 }:width()).to_be(20)
  end)

  it("asks a gate with the rule approve-always saves, and details on request", function()
    local rd = render.new{ color = false, width = 100 }
    rd:event({ type = "PermissionRequested", gate_id = "g1", request = { summary = "fetch x" },
      unmet = { { kind = "network", match = "tcp://x:443" } },
      candidates = { { effect = "allow", kind = "network", match = "tcp://x:443" } } })
    local lines = rd:event({ type = "GateOpened", gate_id = "g1", tool = "fetch", summary = "fetch x",
      loop_id = "a", turn_id = "t1" })
    expect(lines).to_equal({
      "? allow fetch: fetch x",
      "  needs: network tcp://x:443",
      "  [y] approve · [a] always (saves allow network tcp://x:443) · [n] deny · [?] details",
    })
    local d = rd:gate_lines({ gate_id = "g1", tool = "fetch", loop_id = "a", turn_id = "t1" }, { details = true })
    expect(d[3]).to_be('  request: { summary = "fetch x" }')
    expect(d[4]).to_be("  gate g1 · loop a · turn t1")
    expect(rd:event({ type = "GateResolved", gate_id = "g1", action = "approve_always" }))
      .to_equal({ "  ✓ approved always" })
    expect(rd.requests.g1).to_be_nil()
  end)

  it("refuses unknown options", function()
    local ok, err = pcall(render.new, { colour = true })
    expect(ok).to_be(false)
    expect(err).to_match("unknown option 'colour'")
  end)
end)
