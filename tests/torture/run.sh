#!/bin/sh
# The allocation-failure mode (tests/torture/README.md): for every case
# tests/torture/*.lua, a counting run finds how many allocations the case
# makes (M), then the case runs M more times under ASan, the Nth run with
# its Nth allocation failing. Each run must end one of two ways:
#   raised    exit 1, and stderr names the memory failure ("not enough
#             memory", "out of memory", ENOMEM's text);
#   absorbed  exit 0 and the case printed its last line, "torture: done"
#             (it checks every result it gets, so a wrong result raises).
# Anything else is a failure: a sanitizer report (leak, use after free),
# a signal, another exit code, another error message, an exit 0 that did
# not finish, or a run in which allocation N was never made (the case is
# not deterministic, so N proved nothing). Prints TAP lines and a summary.
#
#   BUILD=build/san sh tests/torture/run.sh [case.lua ...]
#   TORTURE_STEP=k  only every kth N (a quick look; make check uses 1)
#   TORTURE_FIRST=n start at N = n (to look at one failure again)
BUILD=${BUILD:-build/san}
BIN="$PWD/$BUILD/luarig-torture"
STEP=${TORTURE_STEP:-1}
export LUARIG_ROOT="$PWD"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=99
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
[ -x "$BIN" ] || { echo "not ok - torture: $BIN is missing (make torture builds it)"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cases=$*
[ -n "$cases" ] || cases=$(ls tests/torture/*.lua)
passed=0 failed=0

# run N case: one run; sets rc, and leaves $work/err, $work/out, $work/log
run() {
	rm -rf "$work/tmp" "$work/log"
	mkdir "$work/tmp"
	LUARIG_TORTURE=$1 LUARIG_TORTURE_FROM=$from LUARIG_TORTURE_LOG="$work/log" \
		timeout -k 5 120 "$BIN" "$2" "$work/tmp" >"$work/out" 2>"$work/err" </dev/null
	rc=$?
}

for c in $cases; do
	name=$(basename "$c" .lua)
	from=$(sed -n 's/^-- torture: from=\([a-z]*\).*/\1/p' "$c" | head -n 1)
	from=${from:-loop}
	run 0 "$c"
	total=$(sed -n 's/^count //p' "$work/log")
	if [ $rc -ne 0 ] || ! grep -q '^torture: done$' "$work/out" || [ -z "$total" ]; then
		echo "not ok - torture $name: the counting run failed (exit $rc)"
		sed 's/^/#   /' "$work/err" | head -n 20
		failed=$((failed + 1))
		continue
	fi
	raised=0 absorbed=0 bad=0 n=${TORTURE_FIRST:-1}
	while [ $n -le "$total" ]; do
		run $n "$c"
		why=
		if ! grep -q "^fail $n " "$work/log"; then
			why="allocation $n was never made (of $total counted)"
		elif grep -aqE 'Sanitizer|runtime error:' "$work/err"; then
			why="a sanitizer report"
		elif [ $rc -eq 0 ]; then
			if grep -q '^torture: done$' "$work/out"; then
				absorbed=$((absorbed + 1))
			else
				why="exit 0 before the case finished"
			fi
		elif [ $rc -eq 1 ]; then
			if grep -aqiE 'not enough memory|out of memory|cannot allocate memory|ENOMEM' "$work/err"; then
				raised=$((raised + 1))
			else
				why="exit 1 with another error"
			fi
		else
			why="exit $rc"
		fi
		if [ -n "$why" ]; then
			bad=$((bad + 1))
			echo "not ok - torture $name: allocation $n ($(sed -n "s/^fail $n //p" "$work/log")): $why"
			sed 's/^/#   /' "$work/err" | grep -av '^#   *$' | head -n 30
		fi
		n=$((n + STEP))
	done
	if [ $bad -eq 0 ]; then
		echo "ok - torture $name: $total allocations, each failed in turn: $raised raised, $absorbed absorbed"
		passed=$((passed + 1))
	else
		failed=$((failed + 1))
	fi
done
echo "$passed passed, $failed failed, 0 skipped"
[ $failed -eq 0 ]
