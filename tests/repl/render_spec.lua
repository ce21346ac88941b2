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

-- Issue 8 item 5: the pretty-printers behind s:history(), s:usage(),
-- s:snapshots(), s:journal{} and :log, with NO_COLOR and 40 columns.
describe("rig.repl_render inspecting", function()
  local HISTORY = {
    { role = "user", content = { { type = "text", text = "please fix the failing test in this small project of ours" } } },
    { role = "assistant", content = {
      { type = "thinking", thinking = "look first" },
      { type = "thinking", thinking = "", signature = "c2ln", source = "gemini" },
      { type = "text", text = "Running the tests." },
      { type = "tool_use", id = "c1", name = "bash", input = { command = "sh test.sh && echo a long tail of words" } } } },
    { role = "tool", content = { { type = "tool_result", tool_use_id = "c1", content = "1\n2\n3\n4\n5\n6\n7\n8" } } },
    { role = "tool", content = { { type = "tool_result", tool_use_id = "c2", content = "error: denied", is_error = true } } },
  }

  it("draws the history a block per message, wrapped to 40 columns, without escapes", function()
    local lines = render.new{ color = false, width = 40 }:history_lines(HISTORY)
    expect(no_escapes(lines)).to_be(true)
    local ok, bad = fits(lines, 40)
    expect(bad).to_be_nil()
    expect(ok).to_be(true)
    expect(lines[1]).to_be("[1] user")
    expect(lines[2]).to_be("  please fix the failing test in this")
    expect(lines[3]).to_be("  small project of ours")
    expect(lines[4]).to_be("[2] assistant")
    expect(lines[5]).to_be("  ┊ look first")
    expect(lines[6]).to_be("  Running the tests.")
    expect(lines[7]).to_be('  → bash {"command":"sh test.sh && echo…')
    expect(lines[8]).to_be("[3] tool")
    expect(lines[9]).to_be("  ← 1")
    expect(lines[14]).to_be("    6")
    expect(lines[15]).to_be("    … 2 more lines")
    expect(lines[16]).to_be("[4] tool")
    expect(lines[17]).to_be("  ✗ error: denied")
    expect(#lines).to_be(17)
    expect(render.new{ color = false }:history_lines({})).to_equal({ "(no messages)" })
  end)

  it("colors only with color on: the header bold, thinking dim, errors red", function()
    local lines = render.new{ color = true, width = 40 }:history_lines(HISTORY)
    expect(lines[1]).to_be("\27[1m[1] user\27[0m")
    expect(lines[5]).to_be("\27[2m  ┊ look first\27[0m")
    expect(lines[17]).to_be("\27[31m  ✗ error: denied\27[0m")
  end)

  it("draws usage one counter a line, aligned, cost last", function()
    local lines = render.new{ color = false, width = 40 }:usage_lines{
      input_tokens = 12000, output_tokens = 2000, cache_read_tokens = 0, cost = 0.16, web_searches = 2 }
    expect(lines).to_equal({
      "input tokens         12000",
      "output tokens         2000",
      "cache read tokens        0",
      "web searches             2",
      "cost               $0.1600",
    })
  end)

  it("draws snapshots as a table, each ref under its row when 40 columns are too few", function()
    local list = {
      { event = "WorkspaceCheckpointed", ref = "v1:sha256:" .. string.rep("ab", 32), trigger = "manual",
        consistency = "quiescent", seq = 14 },
      { event = "WorkspaceRestored", ref = "v1:sha256:" .. string.rep("cd", 32), seq = 25 },
    }
    local narrow = render.new{ color = false, width = 40 }:snapshot_lines(list)
    expect(narrow[1]).to_be("#  seq  event     trigger  consistency")
    expect(narrow[2]).to_be("1  14   snapshot  manual   quiescent")
    expect(narrow[3]).to_be("   v1:sha256:ababababababababababababab…")
    expect(narrow[4]).to_be("2  25   rewound   -        -")
    expect(fits(narrow, 40)).to_be(true)
    local wide = render.new{ color = false, width = 200 }:snapshot_lines(list)
    expect(#wide).to_be(3)
    expect(wide[2]).to_be("1  14   snapshot  manual   quiescent    v1:sha256:" .. string.rep("ab", 32))
    expect(render.new{ color = false }:snapshot_lines({})).to_equal({ "no snapshots" })
  end)

  it("draws a journal record on one line: seq, type, ids first, messages as their text", function()
    local rd = render.new{ color = false, width = 120 }
    local rec = { v = 1, seq = 17, type = "StepDone", session_id = "x", event_id = "e1", created_at = 1,
      loop_id = "main", turn_id = "t1.2", finish_reason = "tool_use",
      message = { role = "assistant", content = { { type = "text", text = "writing\nit" },
        { type = "tool_use", id = "1", name = "note", input = {} } } } }
    expect(rd:record_line(rec)).to_be(
      '   17 StepDone  loop_id=main turn_id=t1.2 message=assistant:"writing it" +1 call finish_reason=tool_use')
    local narrow = render.new{ color = false, width = 40 }:record_line(rec)
    expect(narrow).to_be("   17 StepDone  loop_id=main turn_id=t1…")
    expect(render.new{ color = true, width = 40 }:record_line({ seq = 3, type = "SessionIdle" }))
      .to_be("\27[1m    3 SessionIdle\27[0m")
  end)

  it("words the budget left in the prompt (rig.repl_bench.budget_text)", function()
    local bt = require("rig.repl_bench").budget_text
    expect(bt({ max_tokens = 20000, max_cost = 0.5 }, {})).to_be("tokens 20k/20k left, $0.50/$0.50 left")
    expect(bt({ max_tokens = 20000, max_cost = 0.5 }, { input_tokens = 7000, output_tokens = 700, cost = 0.0825 }))
      .to_be("tokens 12.3k/20k left, $0.4175/$0.50 left")
    expect(bt({ max_tokens = 1500000 }, { input_tokens = 2000000 })).to_be("tokens 0/1.5M left")
    expect(bt({ max_cost = 2 }, { cost = 0.5 })).to_be("$1.50/$2.00 left")
    -- cache reads and writes count as the runner counts them (rig.budget)
    expect(bt({ max_tokens = 20000 }, { input_tokens = 1000, output_tokens = 500, cache_read_tokens = 8000,
      cache_creation_tokens = 500 })).to_be("tokens 10k/20k left")
    expect(bt({ iterations = 25 }, {})).to_be_nil()
    expect(bt(nil, {})).to_be_nil()
  end)
end)

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

-- Issue 17 §3: the workspace fault events and a compaction that fell back.
describe("rig.repl_render faults", function()
  it("draws WorkspaceFaulted, WorkspaceFaultCleared and a truncating compaction", function()
    local rd = render.new{ color = false, width = 60 }
    local lines = all(rd, {
      { type = "WorkspaceFaulted", code = "timeout", trigger = "turn_done",
        message = "the workspace capture timed out after 60 s" },
      { type = "WorkspaceFaultCleared", by = "checkpoint", ref = "v1:sha256:ab" },
      { type = "CompactionCommitted", fallback = "truncated", replaced = 6, retained = 4 },
    })
    expect(no_escapes(lines)).to_be(true)
    expect(fits(lines, 60)).to_be(true)
    expect(lines[1]).to_be("── workspace faulted (timeout): the workspace capture timed")
    expect(lines[2]).to_be("   out after 60 s")
    expect(lines[3]).to_be("── workspace fault cleared (checkpoint)")
    expect(lines[4]).to_be("── compacted: the summary failed; 6 older messages dropped,…")
  end)
end)

-- Issue 21 §3 and §4: hook decisions, guardrail trips, handoffs.
describe("rig.repl_render hooks, guardrails and handoffs", function()
  it("draws a hook's deny and rewrite, a trip and a handoff; continue and allow stay quiet", function()
    local rd = render.new{ color = false, width = 60 }
    local lines = all(rd, {
      { type = "HookDecided", hook = "before_tool", action = "allow", tool = "echo" },
      { type = "HookDecided", hook = "before_tool", action = "deny", tool = "bash",
        message = "no deleting" },
      { type = "HookDecided", hook = "after_tool", action = "rewrite", tool = "echo" },
      { type = "HookDecided", hook = "before_model", action = "continue" },
      { type = "GuardrailTripped", stage = "input", guardrail = "no_homework",
        reason = "asks for homework answers" },
      { type = "ActiveLoopChanged", from = "triage", to = "billing", reason = "handoff" },
      { type = "ActiveLoopChanged", from = "triage", to = "billing", reason = "fork" },
    })
    expect(no_escapes(lines)).to_be(true)
    expect(fits(lines, 60)).to_be(true)
    expect(lines).to_equal({
      "  ⚑ hook before_tool: deny bash — no deleting",
      "  ⚑ hook after_tool: rewrite echo",
      "── guardrail no_homework tripped on the input: asks for",
      "   homework answers",
      "── triage hands the conversation to billing",
      "── triage hands the conversation to billing (fork)",
    })
  end)
end)

-- Issue 21 §1: images and documents in the history.
describe("rig.repl_render media", function()
  it("draws an image and a document as one line each, in messages and tool results", function()
    local rd = render.new{ color = false, width = 70 }
    local lines = rd:history_lines{
      { role = "user", content = { { type = "text", text = "look" },
        { type = "image", media_type = "image/png", blob = string.rep("a", 64), size = 2048, name = "shot.png" },
        { type = "document", media_type = "application/pdf", url = "https://example.com/r.pdf" } } },
      { role = "tool", content = { { type = "tool_result", tool_use_id = "c1", content = {
        { type = "text", text = "the screen" },
        { type = "image", media_type = "image/jpeg", blob = string.rep("b", 64), size = 99 } } } } },
    }
    expect(no_escapes(lines)).to_be(true)
    expect(lines[3]).to_be("  [image shot.png: image/png, 2.0 KiB, blob aaaaaaaaaaaa]")
    expect(lines[4]).to_be("  [document: application/pdf, https://example.com/r.pdf]")
    local all_text = table.concat(lines, "\n")
    expect(all_text).to_match("%[image: image/jpeg, 99 bytes, blob bbbbbbbbbbbb%]")
  end)
end)
