#!/bin/sh
# The official MCP conformance suite (@modelcontextprotocol/conformance 0.1.12, installed
# by make deps into build/npm) against luarig's client: tests/mcp/conformance_client.lua.
# One TAP line per scenario; the suite's own summary line is kept for the notes.
# Scenarios: the client ones that need no OAuth (initialize, tools_call, SEP-1034
# elicitation defaults, SEP-1699 SSE retry). Every auth/* scenario needs an OAuth client
# (discovery, registration, token exchange) and is not run (docs/mcp.md): the one that
# passes without OAuth, auth/resource-mismatch, passes even when the client never runs,
# so it proves nothing here.
ROOT=$(pwd)
LUARIG=${LUARIG:-build/luarig}
case $LUARIG in /*) ;; *) LUARIG="$ROOT/$LUARIG" ;; esac
CONF="$ROOT/build/npm/node_modules/.bin/conformance"
if [ ! -x "$CONF" ]; then
	echo "not ok - mcp conformance: build/npm has no conformance suite (run make deps)"
	exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for sc in initialize tools_call elicitation-sep1034-client-defaults sse-retry; do
	log="$work/$(echo "$sc" | tr / _).log"
	(cd "$work" && timeout 120 node "$CONF" client --command "$LUARIG $ROOT/tests/mcp/conformance_client.lua" \
		--scenario "$sc" >"$log" 2>&1)
	rc=$?
	summary=$(grep -E '^Passed: ' "$log" | tail -n 1)
	if [ $rc -eq 0 ] && grep -q 'OVERALL: PASSED' "$log"; then
		echo "ok - conformance client $sc ($summary)"
	else
		echo "not ok - conformance client $sc (exit $rc; $summary)"
		sed 's/^/#   /' "$log" | tail -n 30
	fi
done
