-- Images and documents: checked by their bytes and size (rig.media), stored
-- once in the session's store and referenced from the journal, encoded per
-- provider (golden request bodies for anthropic, openai, openai-responses and
-- gemini), and sent over real HTTP to a provider on loopback from a session.

local json = rig.json
local U = dofile((os.getenv("LUARIG_ROOT") or ".") .. "/tests/lua/model_codec_util.lua")
local mock = dofile(U.root .. "/tests/lua/mock_provider.lua")
local media = require "rig.media"
local core = require "rig.core"

local KEY_ENV = "LUARIG_TEST_API_KEY"
local PNG = "\137PNG\r\n\26\n" .. "\0\0\0\rIHDR-a-small-test-image"
local JPEG = "\255\216\255\224" .. "jpeg-bytes"
local GIF = "GIF89a" .. "gif-bytes"
local WEBP = "RIFF\0\0\0\0WEBPVP8 " .. "webp-bytes"
local PDF = "%PDF-1.4\n% a test document\n"


-- Waits for the session to go idle; a turn that failed or was interrupted is
-- what these cases look at, so only a fault or a timeout is an error.
local function idle(s, t)
  local ok, msg, code = s:wait_idle(t or 10)
  if not ok and code ~= "turn_failed" and code ~= "interrupted" then error(msg, 2) end
  return true
end

local function tmpfile(bytes, ext)
  local p = os.tmpname() .. (ext or "")
  local f = assert(io.open(p, "wb"))
  f:write(bytes)
  f:close()
  return p
end

describe("core.base64", function()
  it("encodes and decodes the RFC 4648 vectors, strictly", function()
    local v = { [""] = "", f = "Zg==", fo = "Zm8=", foo = "Zm9v", foob = "Zm9vYg==", fooba = "Zm9vYmE=",
                foobar = "Zm9vYmFy" }
    for plain, enc in pairs(v) do
      expect(core.base64_encode(plain)).to_be(enc)
      expect(core.base64_decode(enc)).to_be(plain)
    end
    local all = {}
    for i = 0, 255 do all[#all + 1] = string.char(i) end
    all = table.concat(all)
    expect(core.base64_decode(core.base64_encode(all))).to_be(all)
    for _, bad in ipairs { "Zg=", "Zg=a", "Z===", "Zm9v\n", "Zm 9", "Zm9-", "====" } do
      local d, err = core.base64_decode(bad)
      expect(d).to_be_nil()
      expect(err).to_match("^base64: ")
    end
  end)
end)

describe("rig.media checks", function()
  it("knows each type by its bytes", function()
    expect(media.sniff(PNG)).to_be("image/png")
    expect(media.sniff(JPEG)).to_be("image/jpeg")
    expect(media.sniff(GIF)).to_be("image/gif")
    expect(media.sniff(WEBP)).to_be("image/webp")
    expect(media.sniff(PDF)).to_be("application/pdf")
    expect(media.sniff("hello")).to_be_nil()
  end)

  it("takes a path, bytes, base64 and a URL; refuses what does not match", function()
    local p = tmpfile(PNG, ".png")
    local b = assert(media.check{ type = "image", path = p })
    expect(b.media_type).to_be("image/png")
    expect(b.size).to_be(#PNG)
    expect(b.name).to_be(p:match("[^/]+$"))
    os.remove(p)
    b = assert(media.check{ type = "image", base64 = core.base64_encode(JPEG) })
    expect(b.media_type).to_be("image/jpeg")
    expect(b.data).to_be(JPEG)
    b = assert(media.check{ type = "document", data = "plain notes", media_type = "text/plain" })
    expect(b.media_type).to_be("text/plain")
    b = assert(media.check{ type = "image", url = "https://example.com/cat.webp" })
    expect(b.media_type).to_be("image/webp")
    local function refused(spec, pat)
      local ok, err = media.check(spec, "input[1]")
      expect(ok).to_be_nil()
      expect(err).to_match(pat)
    end
    refused({ type = "image", data = PDF }, "^input%[1%]: not an image this runtime takes %(PNG, JPEG, WebP or GIF; the bytes are application/pdf%)")
    refused({ type = "image", data = PNG, media_type = "image/jpeg" }, "media_type says image/jpeg but the bytes are image/png")
    refused({ type = "document", data = "\0\1binary" }, "not a document this runtime takes")
    refused({ type = "document", data = "\255\254", media_type = "text/plain" }, "must be UTF%-8 text")
    refused({ type = "image", data = PNG, url = "https://a/b.png" }, "exactly one of path, data, base64, url and blob")
    refused({ type = "image", path = "/nonexistent/x.png" }, "cannot read '/nonexistent/x.png'")
    refused({ type = "image", url = "ftp://a/b.png" }, "must be an http or https URL")
    refused({ type = "image", url = "https://a/b" }, "needs a media_type")
    refused({ type = "image", base64 = "!!!!" }, "base64: bad byte")
    refused({ type = "video", data = "x" }, "type must be \"image\" or \"document\"")
    refused({ type = "image", data = PNG, colour = 1 }, "unknown field 'colour'")
    refused({ type = "image", data = PNG .. string.rep("x", media.LIMITS.image) },
      "the image is 5%.0 MiB, over the limit of 5%.0 MiB")
    local big = tmpfile(PNG .. string.rep("x", 6 * 1024 * 1024), ".png")
    refused({ type = "image", path = big }, "the image is 6%.0 MiB, over the limit of 5%.0 MiB")
    os.remove(big)
  end)
end)

-- ---- the request each provider gets ----

local function conversation(blobs)
  return {
    system = "Look closely.",
    blobs = blobs,
    messages = {
      { role = "user", content = {
        { type = "text", text = "What is in these?" },
        { type = "image", media_type = "image/png", data = PNG },
        { type = "document", media_type = "application/pdf", data = PDF, name = "report.pdf" },
        { type = "document", media_type = "text/plain", data = "meeting notes", name = "notes.txt" },
        { type = "image", media_type = "image/jpeg", url = "https://example.com/cat.jpg" },
      } },
      { role = "assistant", content = { { type = "tool_use", id = "call_1", name = "screenshot", input = {} } } },
      { role = "tool", content = { { type = "tool_result", tool_use_id = "call_1", content = {
        { type = "text", text = "the screen" },
        { type = "image", media_type = "image/png", blob = core.sha256_hex(PNG), size = #PNG },
      } } } },
    },
    tools = { { name = "screenshot", description = "takes one", schema = { type = "object", properties = {} } } },
  }
end

local function model(provider)
  return rig.model{ provider = provider, name = "test-model", api_key_env = KEY_ENV,
                    base_url = "http://127.0.0.1:9/v1", cache = "off" }
end

describe("media in provider requests", function()
  local function blobs(hex)
    if hex == core.sha256_hex(PNG) then return PNG end
    return nil, "no such blob"
  end
  for _, p in ipairs { "anthropic", "openai", "openai-responses", "gemini" } do
    it("encodes images and documents for " .. p .. " (golden)", function()
      local body = json.decode(model(p):encode(conversation(blobs)))
      U.golden("media_" .. p:gsub("-", "_"), body)
      -- the blob came back as the same base64 as the inline bytes
      local text = json.encode(body)
      local b64 = core.base64_encode(PNG)
      local _, n = text:gsub(b64:gsub("%p", "%%%0"), "")
      expect(n).to_be(2)
    end)
  end

  it("a blob the request cannot read is refused before anything is sent", function()
    local m = model("anthropic")
    local st, msg, code = m:stream(conversation(function() return nil, "gone" end))
    expect(st).to_be_nil()
    expect(code).to_be("invalid_request")
    expect(msg).to_match("cannot be read: gone")
  end)
end)

-- ---- a session: stored once, referenced from the journal, sent over HTTP ----

local function text_reply(text)
  local evs = {
    { type = "message_start", message = { id = "m1", type = "message", role = "assistant", content = {},
      model = "test-model", usage = { input_tokens = 10, output_tokens = 1 } } },
    { type = "content_block_start", index = 0, content_block = { type = "text", text = "" } },
    { type = "content_block_delta", index = 0, delta = { type = "text_delta", text = text } },
    { type = "content_block_stop", index = 0 },
    { type = "message_delta", delta = { stop_reason = "end_turn" }, usage = { output_tokens = 3 } },
    { type = "message_stop" },
  }
  local out = {}
  for _, e in ipairs(evs) do
    out[#out + 1] = "event: " .. e.type .. "\ndata: " .. json.encode(e) .. "\n\n"
  end
  return table.concat(out)
end

describe("media in a session", function()
  it("stores an image once, journals a reference and sends its bytes to the provider", function()
    local srv = mock.start()
    srv:push{ body = text_reply("a test image") }
    srv:push{ body = text_reply("the same image") }
    local m = rig.model{ provider = "anthropic", name = "test-model", base_url = srv.url .. "/v1",
                         api_key_env = KEY_ENV, retry = { attempts = 1 } }
    local store = rig.store.memory()
    local l = rig.loop{ name = "assistant", model = m }
    local r = rig.define{ loops = { l }, primers = { "assistant" }, store = store }
    local s = assert(r:session())
    local p = tmpfile(PNG, ".png")
    assert(s:submit{ { type = "text", text = "what is this?" }, { type = "image", path = p } })
    idle(s, 10)
    assert(s:submit{ { type = "text", text = "and again" }, { type = "image", data = PNG } })
    idle(s, 10)
    os.remove(p)
    srv:close()
    local hex = core.sha256_hex(PNG)
    -- the store holds the bytes under their hash
    expect(store:blob_get("media/sha256/" .. hex)).to_be(PNG)
    -- the journal holds references, never the bytes
    local b64 = core.base64_encode(PNG)
    local started = 0
    for rec in s:journal() do
      local text = json.encode(rec)
      expect(text:find(b64, 1, true)).to_be_nil()
      expect(text:find("IHDR", 1, true)).to_be_nil()
      if rec.type == "TurnStarted" then
        started = started + 1
        local img = rec.message.content[2]
        expect(img.type).to_be("image")
        expect(img.blob).to_be(hex)
        expect(img.size).to_be(#PNG)
        expect(img.media_type).to_be("image/png")
      end
    end
    expect(started).to_be(2)
    -- each request carried the image's bytes as base64, both images in the second
    local b1 = json.decode(srv.requests[1].body)
    expect(b1.messages[1].content[2].source.data).to_be(b64)
    expect(b1.messages[1].content[2].source.media_type).to_be("image/png")
    local b2 = srv.requests[2].body
    local _, n = b2:gsub(b64:gsub("%p", "%%%0"), "")
    expect(n).to_be(2)
    -- a restore reads the same references back
    local id = s.id
    s:shutdown()
    local s2 = assert(r:restore(id))
    expect(s2:history()[1].content[2].blob).to_be(hex)
    s2:shutdown()
  end)

  it("a tool's result carries an image to the model", function()
    local shot = rig.tool{ name = "screenshot", description = "takes a screenshot",
      schema = { type = "object", properties = {} },
      prepare = function() return { summary = "screenshot", requirements = {} } end,
      run = function() return rig.tool.result{ text = "the screen", media = { { type = "image", data = PNG } } } end }
    local model = rig.model.script{ { tool_calls = { { name = "screenshot", input = {} } } }, { text = "I see it" } }
    local l = rig.loop{ name = "assistant", model = model, tools = { shot },
      gate = rig.gate{ access = { network = "allow" }, approver = "headless" }, policy_revision = "v1" }
    local store = rig.store.memory()
    local r = rig.define{ loops = { l }, primers = { "assistant" }, store = store }
    local s = assert(r:session())
    s:submit("look")
    idle(s, 10)
    local step
    for rec in s:journal() do if rec.type == "StepDone" and rec.results then step = rec end end
    local c = step.results.content[1].content
    expect(c[1].text).to_be("the screen")
    expect(c[2].type).to_be("image")
    expect(c[2].blob).to_be(core.sha256_hex(PNG))
    -- the model's second request holds the reference; its codec reads the bytes
    local seen = model:calls()[2].messages
    expect(seen[#seen].content[1].content[2].blob).to_be(core.sha256_hex(PNG))
    s:shutdown()
  end)

  it("refuses an over-size or mistyped file with a clear error, losing nothing", function()
    local model = rig.model.script{ { text = "never" } }
    local r = rig.define{ loops = { rig.loop{ name = "assistant", model = model } }, primers = { "assistant" },
      store = rig.store.memory() }
    local s = assert(r:session())
    local cid, msg, code = s:submit{ { type = "text", text = "x" }, { type = "image", data = PDF } }
    expect(cid).to_be_nil()
    expect(code).to_be("invalid_request")
    expect(msg).to_match("^submit: input%[2%]: not an image")
    cid, msg, code = s:submit{ { type = "document", data = string.rep("a", 10) .. "\0" } }
    expect(code).to_be("invalid_request")
    -- nothing was journaled, and the session still takes input
    for rec in s:journal() do expect(rec.type ~= "UserInput").to_be(true) end
    assert(s:submit("fine"))
    idle(s, 10)
    s:shutdown()
  end)
end)

-- One short text reply per wire format.
local function reply(provider)
  if provider == "anthropic" then return text_reply("seen") end
  if provider == "openai" then
    return mock.sse({
      { id = "c", object = "chat.completion.chunk", model = "g", choices = json.array {
        { index = 0, delta = { content = "seen" }, finish_reason = "stop" } } },
      { id = "c", object = "chat.completion.chunk", model = "g", choices = json.array {},
        usage = { prompt_tokens = 50, completion_tokens = 2 } }, "[DONE]" })
  elseif provider == "openai-responses" then
    return mock.sse({
      { type = "response.output_text.delta", output_index = 0, delta = "seen" },
      { type = "response.completed", response = { model = "g", usage = { input_tokens = 50,
        output_tokens = 2 } } } })
  end
  return mock.sse({ { candidates = json.array { { index = 0, finishReason = "STOP",
    content = { role = "model", parts = json.array { { text = "seen" } } } } },
    usageMetadata = { promptTokenCount = 50, candidatesTokenCount = 2 } } })
end

describe("media from a session to every provider over HTTP", function()
  for _, p in ipairs { "anthropic", "openai", "openai-responses", "gemini" } do
    it(p .. " gets the stored image's bytes; the journal keeps the reference", function()
      local srv = mock.start()
      srv:push{ body = reply(p) }
      local m = rig.model{ provider = p, name = "test-model", base_url = srv.url .. "/v1",
                           api_key_env = KEY_ENV, retry = { attempts = 1 } }
      local r = rig.define{ loops = { rig.loop{ name = "assistant", model = m } },
        primers = { "assistant" }, store = rig.store.memory() }
      local s = assert(r:session())
      assert(s:submit{ { type = "text", text = "see?" }, { type = "image", data = PNG },
                       { type = "document", data = PDF, name = "r.pdf" } })
      idle(s, 10)
      srv:close()
      local body = srv.requests[1].body
      for _, bytes in ipairs { PNG, PDF } do
        local b64 = core.base64_encode(bytes)
        expect(body:find(b64, 1, true) ~= nil).to_be(true)
        for rec in s:journal() do
          expect(json.encode(rec):find(b64, 1, true)).to_be_nil()
        end
      end
      local done
      for rec in s:journal() do if rec.type == "TurnDone" then done = rec end end
      expect(done.message.content[1].text).to_be("seen")
      s:shutdown()
    end)
  end
end)

describe("media over rig.serve", function()
  local function call(srv, method, path, body)
    local resp = assert(rig.http.request{ url = srv.url .. path, method = method, body = body,
      headers = { ["content-type"] = "application/json" }, timeout = 10 })
    return json.decode(resp.body), resp
  end

  it("uploads once, refers by blob, takes base64 in a block and refuses a path", function()
    local model = rig.model.script{ { text = "a png" }, { text = "again" } }
    local store = rig.store.memory()
    local r = rig.define{ loops = { rig.loop{ name = "assistant", model = model } },
      primers = { "assistant" }, store = store }
    local srv = assert(rig.serve{ rig = r, listen = "127.0.0.1:0" })
    local caps = call(srv, "GET", "/v1/capabilities")
    expect(table.concat(caps.features, ",")).to_match("media")
    local b64 = core.base64_encode(PNG)
    local up, resp = call(srv, "POST", "/v1/media", json.encode{ type = "image", base64 = b64 })
    expect(resp.status).to_be(201)
    expect(up.blob).to_be(core.sha256_hex(PNG))
    expect(up.media_type).to_be("image/png")
    expect(up.size).to_be(#PNG)
    local v
    v, resp = call(srv, "POST", "/v1/sessions", json.encode{ blocks = {
      { type = "text", text = "what is it?" },
      { type = "image", blob = up.blob, media_type = up.media_type } } })
    expect(resp.status).to_be(201)
    local id = v.session_id
    local deadline = rig.now() + 10
    local started
    while rig.now() < deadline and not started do
      local j = call(srv, "GET", "/v1/sessions/" .. id .. "/journal?limit=100")
      for _, e in ipairs(j.events) do if e.event.type == "TurnDone" then started = true end end
      if not started then rig.sleep(0.02) end
    end
    expect(started).to_be(true)
    expect(model:calls()[1].messages[1].content[2].blob).to_be(up.blob)
    -- base64 in the block itself
    v, resp = call(srv, "POST", "/v1/sessions/" .. id .. "/input", json.encode{ blocks = {
      { type = "image", base64 = b64 } } })
    expect(resp.status).to_be(200)
    -- a PDF said to be an image, and a path, are refused with what is wrong
    v, resp = call(srv, "POST", "/v1/sessions/" .. id .. "/input", json.encode{ blocks = {
      { type = "image", base64 = core.base64_encode(PDF) } } })
    expect(resp.status).to_be(400)
    expect(v.error.code).to_be("invalid_request")
    expect(v.error.message).to_match("input%[1%]: not an image this runtime takes")
    v, resp = call(srv, "POST", "/v1/sessions/" .. id .. "/input", json.encode{ blocks = {
      { type = "image", path = "/etc/hostname" } } })
    expect(resp.status).to_be(400)
    expect(v.error.message).to_match("unknown field 'path'")
    srv:close()
  end)
end)
