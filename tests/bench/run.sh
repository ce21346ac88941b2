#!/bin/sh
# make bench: every figure against a named peer measured in the same run.
BUILD=${BUILD:-build}
LUARIG="$PWD/$BUILD/luarig" exec python3 tests/bench/bench.py "$@"
