-- The soak storms' own parts (tests/soak, docs/soak.md), kept working by
-- make test: a writer killed mid-turn, then the verifier — which must pass
-- on what the writer acknowledged, and must count an acknowledged event
-- that is not in the journal (or not as acknowledged) as lost.

local luarig = os.getenv("LUARIG") or "build/luarig"
local soak = (os.getenv("LUARIG_ROOT") or ".") .. "/tests/soak/"

local function tmpdir()
  local p = os.tmpname()
  os.remove(p)
  assert(os.execute("mkdir -p '" .. p .. "'"))
  return p
end

local function verify(spec, file, restore, ids)
  local argv = { luarig, soak .. "verify.lua", spec, file, restore and "1" or "0" }
  for _, id in ipairs(ids) do argv[#argv + 1] = id end
  local r = assert(rig.process.run{ argv = argv, timeout = 120 })
  local res = { r.stdout:match("\nRESULT (%d+) (%d+) (%d+) (%d+)\n") }
  expect(#res).to_be(4)
  return tonumber(res[1]), tonumber(res[2]), tonumber(res[3]), tonumber(res[4]), r.stdout
end

describe("make soak's writer and verifier", function()
  it("verify passes on what a killed writer acknowledged, and counts forged events as lost",
    function()
      local dir = tmpdir()
      local spec = "lmdb:" .. dir .. "/store"
      local p = assert(rig.process.spawn{ argv = { luarig, soak .. "writer.lua", spec, "2" },
        stdout = "pipe", stderr = "null" })
      local acked, ids, turns = {}, {}, 0
      for line in p:lines("stdout") do
        local id = line:match("^SESSION (%S+)")
        if id then ids[#ids + 1] = id end
        local sid, seq, ty, eid = line:match("^EV (%S+) (%d+) (%S+) (%S+)$")
        if sid then acked[#acked + 1] = table.concat({ sid, seq, ty, eid }, " ") end
        if ty == "TurnDone" then turns = turns + 1 end
        if turns >= 3 then break end
      end
      p:kill("SIGKILL")
      p:wait(10)
      p:close()
      expect(#ids).to_be(2)
      local file = dir .. "/acked.txt"
      local f = assert(io.open(file, "w"))
      f:write(table.concat(acked, "\n"), "\n")
      f:close()
      local checked, lost, corrupt, rfail = verify(spec, file, true, ids)
      expect(checked).to_be(#acked)
      expect(lost).to_be(0)
      expect(corrupt).to_be(0)
      expect(rfail).to_be(0)
      -- an event id that is not there, and one past the tip
      f = assert(io.open(file, "a"))
      f:write(ids[1], " 2 SessionActive forged.1\n", ids[1], " 99999 TurnDone forged.2\n")
      f:close()
      local _, lost2, _, _, out = verify(spec, file, false, ids)
      expect(lost2).to_be(2)
      expect(out).to_match("BAD " .. ids[1]:gsub("%-", "%%-") .. " acknowledged TurnDone forged.2 at 99999 is missing")
      os.execute("rm -rf '" .. dir .. "'")
    end, { timeout = 120 })
end)
