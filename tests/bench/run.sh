#!/bin/sh
# make bench: every figure against a named peer measured in the same run
# (tests/bench/README.md), printed as BENCH lines; then the report, Markdown
# with SVG charts (gnuplot), in $BUILD/bench/report/README.md. Arguments
# pick the benchmarks (bench.py's names: startup rss sse model cache session
# serve sandbox mcp store nats journal snapshot json); none: all of them.
BUILD=${BUILD:-build}
mkdir -p "$BUILD/bench"
BENCH_JSON="$PWD/$BUILD/bench/results.jsonl"
: >"$BENCH_JSON"
export BENCH_JSON
LUARIG="$PWD/$BUILD/luarig" python3 tests/bench/bench.py "$@"
rc=$?
python3 tests/bench/report.py "$BENCH_JSON" "$BUILD/bench/report" || rc=1
exit $rc
