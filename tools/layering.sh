#!/bin/sh
# Checks that dependencies point one way: util -> storage, sandbox -> host -> cli
# -> lua (storage and sandbox are siblings: neither uses the other; cli/ holds
# the commands that run no Lua, which lua/main.c dispatches to). Two checks:
#
# 1. Includes: no file below lua/ includes a Lua header in any spelling
#    ("lua.h", <lua5.4/lua.h>, <lauxlib.h>, "lualib.h", luaconf.h, ...), and
#    no file includes a header of a folder ranked above its own.
# 2. Symbols, from the compiled objects (as `make symbols` does): every symbol
#    an object of a folder leaves undefined must not be defined by an object
#    of a folder ranked above it or beside it, and no object below lua/ may
#    leave a Lua API symbol (lua_*, luaL_*, luaopen_*) undefined. This
#    catches a call to a function of a higher layer declared locally, which
#    no include check can see.
#
#   sh tools/layering.sh BUILD_DIR
set -u
build=${1:-build}
cd "$(dirname "$0")/.." || exit 1
rank() {
	case $1 in
	util) echo 0 ;; storage | sandbox) echo 1 ;; host) echo 2 ;; cli) echo 3 ;; lua) echo 4 ;; *) echo 9 ;;
	esac
}
folders="util storage sandbox host cli lua"
bad=0
say() {
	echo "layering: $*"
	bad=1
}

# 1. includes
for f in util storage sandbox host cli; do
	for src in $f/*.[ch]; do
		[ -f "$src" ] || continue
		grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]([^>"]*/)?(lua|lauxlib|lualib|luaconf|lua5\.[0-9]+)[^/>"]*\.h[>"]' "$src" |
			while IFS= read -r line; do
				echo "layering: $src:${line%%:*}: a Lua header below lua/: ${line#*:}"
			done
	done
done | grep . && bad=1
for f in $folders; do
	r=$(rank "$f")
	for src in $f/*.[ch]; do
		[ -f "$src" ] || continue
		for g in $folders; do
			[ "$g" = "$f" ] && continue
			rg=$(rank "$g")
			if [ "$rg" -gt "$r" ] || { [ "$rg" -eq "$r" ]; }; then
				hit=$(grep -nE "^[[:space:]]*#[[:space:]]*include[[:space:]]*\"(\\.\\./)*$g/" "$src" | head -n 1)
				[ -n "$hit" ] && say "$src:${hit%%:*}: $f/ includes $g/ (${hit#*:})"
			fi
		done
	done
done

# 2. symbols
if ! command -v nm >/dev/null 2>&1; then
	echo "layering: nm not found" >&2
	exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in $folders; do
	set -- "$build/$f"/*.o
	if [ ! -f "$1" ]; then
		echo "layering: no objects in $build/$f/ (build first)" >&2
		exit 1
	fi
	nm --defined-only -g "$@" 2>/dev/null | awk 'NF==3 {print $3}' | sort -u >"$tmp/def.$f"
	nm -u "$@" 2>/dev/null | awk '{print $NF}' | sort -u >"$tmp/undef.$f"
	# which object leaves which symbol undefined, for the message
	for o in "$@"; do
		nm -u "$o" 2>/dev/null | awk -v o="$o" '{print $NF " " o}'
	done | sort >"$tmp/who.$f"
done
for f in $folders; do
	r=$(rank "$f")
	for g in $folders; do
		[ "$g" = "$f" ] && continue
		rg=$(rank "$g")
		[ "$rg" -lt "$r" ] && continue
		comm -12 "$tmp/undef.$f" "$tmp/def.$g" >"$tmp/hit"
		while read -r sym; do
			objs=$(awk -v s="$sym" '$1 == s {print $2}' "$tmp/who.$f" | tr '\n' ' ')
			say "$objs uses $sym, defined in $g/ (a layer above or beside $f/)"
		done <"$tmp/hit"
	done
	if [ "$f" != lua ]; then
		grep -E '^(lua_|luaL_|luaopen_)' "$tmp/undef.$f" >"$tmp/hit"
		while read -r sym; do
			objs=$(awk -v s="$sym" '$1 == s {print $2}' "$tmp/who.$f" | tr '\n' ' ')
			say "$objs calls the Lua API ($sym) below lua/"
		done <"$tmp/hit"
	fi
done
[ "$bad" -eq 0 ] && echo "layering: ok"
exit "$bad"
