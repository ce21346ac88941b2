-- The serve script of the console's flow test: a rig (serve needs one) and,
-- as its second return value, the flows served: a review graph whose
-- approve vertex interrupts, on the LMDB store in FLOW_STORE.
local store = rig.store.lmdb{ root = assert(os.getenv("FLOW_STORE")) }
local loop = rig.loop{ name = "assistant", model = rig.model.script{}, system = "unused" }
local r = rig.define{ loops = { loop }, primers = { "assistant" }, store = store }
local review = rig.flow{
  name = "review",
  channels = { draft = "last", verdict = "last", notes = "append" },
  vertices = {
    write = function(s) return { draft = "notes for " .. tostring(s.draft), notes = { "written" } } end,
    approve = function(s, ctx) return { verdict = ctx:interrupt({ draft = s.draft }) } end,
    publish = function(s) return { notes = { "published: " .. tostring(s.verdict) } } end,
  },
  edges = {
    { from = "start", to = "write" },
    { from = "write", to = "approve" },
    { from = "approve", to = function(s) return s.verdict == "yes" and "publish" or "write" end,
      targets = { "publish", "write" } },
  },
  store = store,
}
return r, { review }
