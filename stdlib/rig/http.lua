-- rig.http: an HTTP client with server-sent events, and the HTTP server
-- (rig.http.server, from stdlib/rig/http_server.lua).
--
--   local resp, err, code = rig.http.request{ url = "http://…", method =, headers =, body =,
--     timeout = 30, connect_timeout = 10, header_timeout =, idle_timeout =,
--     follow_redirects = false, max_body = 64 << 20 }
--   resp = { status =, headers = { lower-case names; repeats joined with ", " }, body =, reused = }
--   Any HTTP status is a response; transport failures, timeouts, cancellation and caps give
--   nil, message, code ("network", "timeout", "cancelled", "too_large").
--
--   local st, err, code, resp = rig.http.stream{ same fields, plus max_line = 1 << 20,
--     max_event = 16 << 20, events = "sse" }   -- timeout none, idle_timeout 300 s by default
--   timeout is a deadline from the call to the end of the stream (paused or not; bytes
--   arriving slowly never push it back): past it the stream fails with "timeout".
--   events = "auto": only a 2xx text/event-stream response is framed as events; any other 2xx
--   body is read whole (max_body) and the stream comes back ended with st.body set (MCP's
--   Streamable HTTP answers a POST with JSON or with an event stream)
--   Returns once the headers arrived; a non-2xx status gives nil, "http: status N from 'host'",
--   "status", resp (body up to 64 KiB).
--   st.status, st.headers; st:next() -> { event =, data =, id =, retry =, unterminated = }
--   | nil | nil, msg, code (unterminated = true: the last event, which the end of the stream
--   cut short before its blank line); st:read() -> data, event [, unterminated];
--   for ev in st:events() do … end; st:result() -> true | nil, msg, code; st:close();
--   st:head() -> the body's first bytes (up to 512, events or not)
--   Back-pressure is in bytes: once 1 MiB received waits unread the transfer pauses until the
--   script has read it all (events are framed out of those bytes only as they are read).

local core = require "rig.core"

local http = {
  request = core.http_request,
  stream = core.http_stream,
}
http.server = require "rig.http_server"

return http
