#!/bin/sh
# CLI golden tests. Each case is tests/cli/cases/NAME.sh: a shell snippet
# run from the repository root with $LUARIG set. Its standard output and
# standard error (merged) and exit status must equal NAME.out, whose last
# line is "exit N". A case that exits 77 is skipped (a missing tool).
# Set UPDATE=1 to rewrite the golden files.
cd "$(dirname "$0")/../.." || exit 1
LUARIG=${LUARIG:-$PWD/build/luarig}
export LUARIG
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for c in tests/cli/cases/*.sh; do
	name=$(basename "$c" .sh)
	(cd "$tmp" && LUARIG_ROOT="$OLDPWD" sh "$OLDPWD/$c" </dev/null >"$tmp/$name.actual" 2>&1; echo "exit $?" >>"$tmp/$name.actual")
	if [ "$(tail -n 1 "$tmp/$name.actual")" = "exit 77" ]; then
		echo "ok - cli $name # SKIP $(tail -n 2 "$tmp/$name.actual" | head -n 1)"
		continue
	fi
	if [ "${UPDATE:-0}" = 1 ]; then
		cp "$tmp/$name.actual" "tests/cli/cases/$name.out"
	fi
	if cmp -s "$tmp/$name.actual" "tests/cli/cases/$name.out"; then
		echo "ok - cli $name"
	else
		echo "not ok - cli $name"
		diff -u "tests/cli/cases/$name.out" "$tmp/$name.actual" | sed 's/^/#   /'
	fi
done
