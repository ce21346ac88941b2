-- rig.http: placeholder until the HTTP client lands (branch `http`); the
-- lead merges both. The server lives in rig.http_server.
local http = {}
http.server = require "rig.http_server"
return http
