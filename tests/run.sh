#!/bin/sh
# Runs every suite and prints one summary line: "N passed, N failed, N skipped".
# Each suite prints TAP-style lines, "ok - name" or "not ok - name"; this
# script counts them. "ok - name # SKIP reason" is a skip, counted apart:
# a case that did not run proved nothing. BUILD names the build folder (build, build/san).
BUILD=${BUILD:-build}
export LUARIG="$PWD/$BUILD/luarig"
export LUARIG_ROOT="$PWD"
# a made-up key for the model specs: it must reach the mock provider and nothing else
export LUARIG_TEST_API_KEY=sk-luarig-test-0123456789abcdef
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

suite() { # name command...
	name=$1
	shift
	printf '== %s\n' "$name"
	"$@" >"$out/$name.log" 2>&1
	rc=$?
	grep -E '^(not )?ok - ' "$out/$name.log" >"$out/$name.tap"
	if [ ! -s "$out/$name.tap" ] || [ $rc -ne 0 ] && ! grep -q '^not ok - ' "$out/$name.tap"; then
		echo "not ok - $name: the suite exited $rc without reporting a failure" >>"$out/$name.tap"
	fi
	if grep -q '^not ok - ' "$out/$name.tap"; then
		sed 's/^/   | /' "$out/$name.log" | tail -n 60
	fi
	skips=$(grep -ciE "$SKIP_RE" "$out/$name.tap")
	oks=$(grep -c '^ok - ' "$out/$name.tap")
	printf '   %s passed, %s failed' $((oks - skips)) "$(grep -c '^not ok - ' "$out/$name.tap")"
	if [ "$skips" -gt 0 ]; then
		printf ', %s skipped\n' "$skips"
		grep -iE "$SKIP_RE" "$out/$name.tap" | sed 's/^/   | /'
	else
		printf '\n'
	fi
	cat "$out/$name.tap" >>"$out/all.tap"
}

SKIP_RE='^ok - .*# *skip'
: >"$out/all.tap"
for t in "$BUILD"/tests/unit/*_test; do
	[ -x "$t" ] && suite "unit-$(basename "$t")" "$t"
done
for f in tests/lua/*_spec.lua; do
	[ -f "$f" ] && suite "lua-$(basename "$f" .lua)" "$LUARIG" tests/lua/runner.lua "$f"
done
suite cli sh tests/cli/run.sh
suite docs sh tests/docs/run.sh
# every example of the API reference (and the README's marked ones) runs, printing what it says
suite docs-examples "$LUARIG" tests/docs/examples.lua docs/api.md docs/examples/small_agent.lua README.md docs/flow.md
[ -f tests/repl/run.sh ] && suite repl sh tests/repl/run.sh
[ -f tests/repl/fork.sh ] && suite repl-fork sh tests/repl/fork.sh
[ -f tests/repl/resume.sh ] && suite repl-resume sh tests/repl/resume.sh
[ -f tests/repl/flow.sh ] && suite repl-flow sh tests/repl/flow.sh
[ -f tests/repl/elicit.sh ] && suite repl-elicit sh tests/repl/elicit.sh
[ -f tests/sandbox/run.sh ] && suite sandbox sh tests/sandbox/run.sh
[ -f tests/examples/run.sh ] && suite examples sh tests/examples/run.sh
# the web console in headless Chromium (a missing chromium is a failure: tools/deps.sh installs it)
# the official MCP conformance suite against the client (build/npm from make deps)
[ -f tests/mcp/conformance.sh ] && suite mcp-conformance sh tests/mcp/conformance.sh
[ -f tests/console/console_test.py ] && suite console python3 tests/console/console_test.py
[ -f tests/console/delegation_test.py ] && suite console-delegation python3 tests/console/delegation_test.py
[ -f tests/console/edges_test.py ] && suite console-edges python3 tests/console/edges_test.py
[ -f tests/console/flow_test.py ] && suite console-flow python3 tests/console/flow_test.py
[ -f tests/console/elicit_test.py ] && suite console-elicit python3 tests/console/elicit_test.py
[ -f tests/console/media_test.py ] && suite console-media python3 tests/console/media_test.py
for r in "$BUILD"/tests/fuzz/*_replay; do
	[ -x "$r" ] || continue
	n=$(basename "$r" _fuzz_replay)
	suite "fuzz-$n" "$r" tests/fuzz/corpus/"$n"
done

grep '^not ok - ' "$out/all.tap" | sed 's/^/FAILED: /'
skipped=$(grep -ciE "$SKIP_RE" "$out/all.tap")
passed=$(($(grep -c '^ok - ' "$out/all.tap") - skipped))
failed=$(grep -c '^not ok - ' "$out/all.tap")
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
