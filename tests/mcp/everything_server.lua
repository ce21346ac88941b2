-- The rig.mcp.server the MCP conformance suite's server scenarios drive
-- (tests/mcp/conformance.sh): every tool, resource and prompt a scenario expects,
-- the way the official SDKs test themselves with an "everything" server.
--
--   luarig tests/mcp/everything_server.lua http PORTFILE   -- Streamable HTTP on 127.0.0.1:0;
--                                                           -- the URL is written to PORTFILE
--   luarig tests/mcp/everything_server.lua stdio           -- stdin/stdout
local json = rig.json
local mode, portfile = arg[1] or "http", arg[2]

-- a 1x1 red PNG and a WAV of no samples (44 bytes of header)
local PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
local WAV = "UklGRiQAAABXQVZFZm10IBAAAAABAAEARKwAAIhYAQACABAAZGF0YQAAAAA="

local function text(t) return { content = json.array{ { type = "text", text = t } } } end
local none = { type = "object", properties = {} }

local srv = rig.mcp.server{
  name = "luarig-everything", version = "1.0.0", title = "luarig everything server",
  instructions = "The conformance fixture of luarig's MCP server.",
  tools = {
    { name = "test_simple_text", description = "Returns simple text", input_schema = none,
      run = function() return "This is a simple text response for testing." end },
    { name = "test_image_content", description = "Returns an image", input_schema = none,
      run = function()
        return { content = json.array{ { type = "image", data = PNG, mimeType = "image/png" } } }
      end },
    { name = "test_audio_content", description = "Returns audio", input_schema = none,
      run = function()
        return { content = json.array{ { type = "audio", data = WAV, mimeType = "audio/wav" } } }
      end },
    { name = "test_embedded_resource", description = "Returns an embedded resource", input_schema = none,
      run = function()
        return { content = json.array{ { type = "resource", resource = { uri = "test://embedded-resource",
          mimeType = "text/plain", text = "This is an embedded resource content." } } } }
      end },
    { name = "test_multiple_content_types", description = "Returns text, an image and a resource",
      input_schema = none,
      run = function()
        return { content = json.array{
          { type = "text", text = "Multiple content types test:" },
          { type = "image", data = PNG, mimeType = "image/png" },
          { type = "resource", resource = { uri = "test://mixed-content-resource",
            mimeType = "application/json", text = '{"test":"data","value":123}' } } } }
      end },
    { name = "test_tool_with_logging", description = "Logs three messages while it runs",
      input_schema = none,
      run = function(_, ctx)
        ctx.log("info", "Tool execution started")
        rig.sleep(0.05)
        ctx.log("info", "Tool processing data")
        rig.sleep(0.05)
        ctx.log("info", "Tool execution completed")
        return "Logging test completed"
      end },
    { name = "test_error_handling", description = "Always fails", input_schema = none,
      run = function() error("This tool intentionally returns an error for testing", 0) end },
    { name = "test_tool_with_progress", description = "Reports progress 0, 50, 100 of 100",
      input_schema = none,
      run = function(_, ctx)
        ctx.progress(0, 100)
        rig.sleep(0.05)
        ctx.progress(50, 100)
        rig.sleep(0.05)
        ctx.progress(100, 100)
        return "Progress test completed"
      end },
    { name = "test_sampling", description = "Asks the client's model",
      input_schema = { type = "object", properties = { prompt = { type = "string" } },
                       required = json.array{ "prompt" } },
      run = function(args, ctx)
        local r, err = ctx.sample{ messages = json.array{ { role = "user",
          content = { type = "text", text = args.prompt } } }, maxTokens = 100 }
        if not r then return nil, "sampling failed: " .. tostring(err) end
        local c = r.content
        return "LLM response: " .. tostring(type(c) == "table" and c.text or json.encode(c))
      end },
    { name = "test_elicitation", description = "Asks the person on the client's side",
      input_schema = { type = "object", properties = { message = { type = "string" } },
                       required = json.array{ "message" } },
      run = function(args, ctx)
        local r, err = ctx.elicit(args.message, { type = "object", properties = {
          username = { type = "string", description = "User's response" },
          email = { type = "string", description = "User's email address" } },
          required = json.array{ "username", "email" } })
        if not r then return nil, "elicitation failed: " .. tostring(err) end
        return "User response: action=" .. tostring(r.action) .. ", content=" .. json.encode(r.content or {})
      end },
    { name = "test_elicitation_sep1034_defaults", description = "Elicitation with defaults",
      input_schema = none,
      run = function(_, ctx)
        local r, err = ctx.elicit("Please review and update the form fields with defaults", {
          type = "object", properties = {
            name = { type = "string", description = "User name", default = "John Doe" },
            age = { type = "integer", description = "User age", default = 30 },
            score = { type = "number", description = "User score", default = 95.5 },
            status = { type = "string", description = "User status",
                       enum = json.array{ "active", "inactive", "pending" }, default = "active" },
            verified = { type = "boolean", description = "Verification status", default = true } },
          required = json.array{} })
        if not r then return nil, "elicitation failed: " .. tostring(err) end
        return "Elicitation completed: action=" .. tostring(r.action) .. ", content=" .. json.encode(r.content or {})
      end },
    { name = "test_elicitation_sep1330_enums", description = "Elicitation with every enum form",
      input_schema = none,
      run = function(_, ctx)
        local r, err = ctx.elicit("Please select options from the enum fields", {
          type = "object", properties = {
            untitledSingle = { type = "string", enum = json.array{ "option1", "option2", "option3" } },
            titledSingle = { type = "string", oneOf = json.array{
              { const = "value1", title = "First Option" }, { const = "value2", title = "Second Option" },
              { const = "value3", title = "Third Option" } } },
            legacyEnum = { type = "string", enum = json.array{ "opt1", "opt2", "opt3" },
                           enumNames = json.array{ "Option One", "Option Two", "Option Three" } },
            untitledMulti = { type = "array", items = { type = "string",
                              enum = json.array{ "option1", "option2", "option3" } } },
            titledMulti = { type = "array", items = { anyOf = json.array{
              { const = "value1", title = "First Choice" }, { const = "value2", title = "Second Choice" },
              { const = "value3", title = "Third Choice" } } } } },
          required = json.array{} })
        if not r then return nil, "elicitation failed: " .. tostring(err) end
        return "Elicitation completed: action=" .. tostring(r.action) .. ", content=" .. json.encode(r.content or {})
      end },
    { name = "json_schema_2020_12_tool", description = "Tool with JSON Schema 2020-12 features",
      input_schema = { ["$schema"] = "https://json-schema.org/draft/2020-12/schema", type = "object",
        ["$defs"] = { address = { type = "object", properties = { street = { type = "string" },
                                                                   city = { type = "string" } } } },
        properties = { name = { type = "string" }, address = { ["$ref"] = "#/$defs/address" } },
        additionalProperties = false },
      run = function(args) return "Received: " .. json.encode(args) end },
    { name = "test_reconnection", description = "Ends its SSE stream mid-call; the answer comes on resumption",
      input_schema = none,
      run = function(_, ctx)
        rig.sleep(0.05)
        ctx.close_stream()
        rig.sleep(0.2)
        return "Reconnection test completed successfully"
      end },
  },
  resources = {
    { uri = "test://static-text", name = "static-text", description = "A static text resource",
      mime_type = "text/plain", text = "This is the content of the static text resource." },
    { uri = "test://static-binary", name = "static-binary", description = "A static binary resource",
      mime_type = "image/png", blob = PNG },
    { uri = "test://watched-resource", name = "watched-resource", description = "A resource to subscribe to",
      mime_type = "text/plain", text = "Watched resource content." },
  },
  resource_templates = {
    { uri_template = "test://template/{id}/data", name = "template", description = "Data by id",
      mime_type = "application/json",
      read = function(_, vars)
        return json.encode({ id = vars.id, templateTest = true, data = "Data for ID: " .. vars.id })
      end },
  },
  prompts = {
    { name = "test_simple_prompt", description = "A prompt without arguments",
      get = function() return "This is a simple prompt for testing." end },
    { name = "test_prompt_with_arguments", description = "A prompt with two arguments",
      arguments = { { name = "arg1", description = "First test argument", required = true },
                    { name = "arg2", description = "Second test argument", required = true } },
      get = function(a)
        return "Prompt with arguments: arg1='" .. a.arg1 .. "', arg2='" .. a.arg2 .. "'"
      end,
      complete = { arg1 = { "paris", "park", "party", "test", "testing" } } },
    { name = "test_prompt_with_embedded_resource", description = "A prompt embedding a resource",
      arguments = { { name = "resourceUri", description = "URI of the resource to embed", required = true } },
      get = function(a)
        return { messages = json.array{
          { role = "user", content = { type = "resource", resource = { uri = a.resourceUri,
            mimeType = "text/plain", text = "Embedded resource content for testing." } } },
          { role = "user", content = { type = "text", text = "Please process the embedded resource above." } } } }
      end },
    { name = "test_prompt_with_image", description = "A prompt with an image",
      get = function()
        return { messages = json.array{
          { role = "user", content = { type = "image", data = PNG, mimeType = "image/png" } },
          { role = "user", content = { type = "text", text = "Please analyze the image above." } } } }
      end },
  },
}

if mode == "stdio" then
  srv:serve_stdio()
  return
end
local h = assert(srv:serve_http{ listen = "127.0.0.1:0" })
if portfile then
  local f = assert(io.open(portfile .. ".tmp", "w"))
  f:write(h.url, "\n")
  f:close()
  os.rename(portfile .. ".tmp", portfile)
end
io.stderr:write("everything server on ", h.url, "\n")
rig.await_shutdown_signal()
h:close()
