-- The graph the flow crash tests share between the child that is killed and
-- the process that resumes its run. Every vertex appends "<vertex> <key>" to
-- the effects file before it returns, so the parent can count executions.
-- store (optional) is the flow's own store.
return function(effects, crash, store)
  crash = crash or function() end
  local function effect(ctx)
    local f = assert(io.open(effects, "a"))
    f:write(ctx.vertex, " ", ctx.key, "\n")
    f:close()
  end
  return rig.flow{
    name = "crashy",
    store = store,
    channels = { n = { default = 0 }, items = "append", verdict = "last" },
    vertices = {
      count = function(s, ctx)
        effect(ctx)
        crash("vertex", ctx)
        return { n = s.n + 1, items = { s.n + 1 } }
      end,
      fan = function(_, ctx) for i = 1, 3 do ctx:send("work", i) end end,
      work = function(_, ctx)
        effect(ctx)
        crash("work", ctx)
        return { items = { ctx.message * 10 } }
      end,
      ask = function(s, ctx)
        local v = ctx:interrupt({ items = #s.items })
        effect(ctx)
        return { verdict = v }
      end,
    },
    edges = {
      { from = "start", to = "count" },
      { from = "count", to = function(s) return s.n < 6 and "count" or "fan" end,
        targets = { "count", "fan" } },
      { from = "work", to = "ask" },
      { from = "ask", to = "end" },
    },
  }
end
