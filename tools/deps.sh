#!/bin/sh
# Installs the Debian 12 packages luarig needs to build, test and benchmark.
# Idempotent: prints nothing when everything is already installed. gnuplot-nox draws
# the charts of the benchmark report (make bench, tests/bench/report.py); graphviz's dot
# renders a flow's graph as SVG (luarig flow dot --svg, docs/flow.md).
set -e
pkgs="build-essential pkg-config clang libclang-rt-14-dev cppcheck
liblua5.4-dev lua5.4 lua-cjson lua-cjson-dev
libevent-dev libcurl4-openssl-dev libarchive-dev libjansson-dev libedit-dev
libssl-dev liblmdb-dev libsqlite3-dev libseccomp-dev libnats-dev
tmux curl python3 nats-server hyperfine nodejs git bubblewrap passwd iproute2 chromium wrk
man-db groff-base gnuplot-nox graphviz"
missing=""
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
# npm (the sandbox suite's npm-through-the-proxy case, the bench's srt peer): Debian ships
# it apart from nodejs; NodeSource's nodejs bundles it (and conflicts with Debian's npm).
command -v npm >/dev/null 2>&1 || missing="$missing npm"
# The npm packages the MCP tests and benchmarks use (tests/mcp/package.json, pinned by its
# package-lock.json), installed into build/npm once per lock file: nothing is fetched when the
# stamp matches, so a machine without the registry still passes once it has them.
npm_deps() {
	lock=tests/mcp/package-lock.json
	[ -f "$lock" ] || return 0
	want=$(sha256sum "$lock" | cut -d' ' -f1)
	[ -f build/npm/.stamp ] && [ "$(cat build/npm/.stamp)" = "$want" ] && return 0
	command -v npm >/dev/null 2>&1 || { echo "deps: npm is missing (run make deps as root)" >&2; return 1; }
	echo "deps: installing the MCP test packages into build/npm"
	mkdir -p build/npm
	cp tests/mcp/package.json "$lock" build/npm/
	(cd build/npm && npm ci --no-audit --no-fund --loglevel=error >/dev/null) ||
		{ echo "deps: npm ci in build/npm failed" >&2; return 1; }
	echo "$want" >build/npm/.stamp
}
# LangGraph.js, the peer of rig.flow's benchmark (tests/flow/package.json, pinned by its
# lock file), in build/npm/flow: its own node_modules, so the two installs never meet.
# better-sqlite3 compiles SQLite when no prebuilt binary is reachable (minutes).
flow_npm_deps() {
	lock=tests/flow/package-lock.json
	[ -f "$lock" ] || return 0
	want=$(sha256sum "$lock" | cut -d' ' -f1)
	[ -f build/npm/flow/.stamp ] && [ "$(cat build/npm/flow/.stamp)" = "$want" ] && return 0
	command -v npm >/dev/null 2>&1 || { echo "deps: npm is missing (run make deps as root)" >&2; return 1; }
	echo "deps: installing LangGraph.js (the flow benchmark's peer) into build/npm/flow"
	mkdir -p build/npm/flow
	cp tests/flow/package.json "$lock" build/npm/flow/
	(cd build/npm/flow && npm ci --no-audit --no-fund --loglevel=error >/dev/null) ||
		{ echo "deps: npm ci in build/npm/flow failed" >&2; return 1; }
	echo "$want" >build/npm/flow/.stamp
}
# LangGraph.js is only the benchmark's peer, and its SQLite checkpointer compiles
# SQLite from source when no prebuilt binary can be fetched (minutes): plain
# `make deps` (CI, `make demo`) leaves it out; `make bench` asks for it ("bench").
peers() { [ "${1:-}" = bench ] && flow_npm_deps || return 0; }
if [ -z "$missing" ]; then
	npm_deps && peers "${1:-}"
	exit $?
fi
if [ "$(id -u)" != 0 ]; then
	echo "deps: missing packages:$missing" >&2
	echo "deps: run 'make deps' as root (or: sudo apt-get install$missing)" >&2
	exit 1
fi
echo "deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# nodejs may come from another repository with its own package name; it is only a benchmark peer.
apt-get install -y -qq --no-install-recommends $missing >/dev/null || {
	apt-get install -y -qq --no-install-recommends $(echo "$missing" | sed 's/ nodejs//; s/ npm//') >/dev/null
}
npm_deps && peers "${1:-}"
