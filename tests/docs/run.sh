#!/bin/sh
# tests/docs/run.sh — the documentation refers only to what the repository has:
# every relative link in README.md and docs/ resolves, every docs/… path named
# in code or tests exists, every Markdown file named anywhere is in the
# repository, and nothing points at the team's material outside it (the
# documents `pat` below lists, which a user's clone does not have). Then the
# same checks run on a planted tree with one fault of each kind and must
# report each of them. Run from the repository root.
cd "${LUARIG_ROOT:-.}" || exit 1
n=0
ok() { n=$((n + 1)); echo "ok - $n $1"; }
bad() { n=$((n + 1)); echo "not ok - $n $1"; }

# Each check reads the list of files ($files, paths relative to the current
# folder) and prints one line per fault, nothing when there is none.

# 1. relative links in Markdown resolve (anchors and URLs are not files)
check_links() {
	for f in $(echo "$files" | grep -E '(^README\.md$|^docs/.*\.md$|^tests/.*README\.md$)'); do
		d=$(dirname "$f")
		grep -oE '\]\([^)#[:space:]]+' "$f" | sed 's/^](//' | while read -r l; do
			case "$l" in http:*|https:*|mailto:*) continue ;; esac
			[ -e "$d/$l" ] || echo "$f -> $l"
		done
	done
}

# 2. docs/… paths named in code and docs exist (tests/ names workspace files of its own)
check_docs_paths() {
	echo "$files" | grep -vE '^tests/' | while read -r f; do
		[ -f "$f" ] || continue
		grep -oE 'docs/[A-Za-z0-9_./-]+\.(md|png|svg)' "$f" 2>/dev/null | sort -u | while read -r p; do
			[ -e "$p" ] || echo "$f -> $p"
		done
	done
}

# 3. a Markdown file named outside tests/ is in the repository: a bare name
#    (FOO.md) under that name somewhere, a path (a/b.md) whose first folder is
#    one of the repository's at its place (a path into something else, such as
#    a bundle's prompts/x.md, is an example, not a reference)
check_md_names() {
	names=$(echo "$files" | sed 's|.*/||' | sort -u)
	tops=$(echo "$files" | grep / | sed 's|/.*||' | sort -u)
	echo "$files" | grep -vE '^tests/' | while read -r f; do
		[ -f "$f" ] || continue
		grep -oE '[A-Za-z0-9_./-]*[A-Za-z0-9_-]+\.md\b' "$f" 2>/dev/null | sort -u | while read -r p; do
			p=${p#./}
			case "$p" in
			*/*)
				top=${p%%/*}
				echo "$tops" | grep -qxF "$top" || continue
				[ -e "$p" ] || [ -e "$(dirname "$f")/$p" ] || echo "$f -> $p"
				;;
			*) echo "$names" | grep -qxF "$p" || echo "$f -> $p" ;;
			esac
		done
	done
}

# 4. nothing refers to documents a clone does not have
# (spelled in pieces, so that this file names none of those documents itself)
team_d=DES""IGN team_n=NO""TES
pat="\\.\\./sh""ared/|$team_d §|$team_d section|$team_d\\.md|SAND""BOX\\.md|SES""SIONS\\.md|HELPERS-MO""DELS\\.md|$team_n\\.md|$team_n \""
check_outside() {
	echo "$files" | grep -vE '^tests/docs/' | while read -r f; do
		[ -f "$f" ] && grep -nE "$pat" "$f" /dev/null 2>/dev/null
	done
}

run_checks() { # prefix: "" for the repository, "planted: " for the planted tree
	for c in "links:every relative Markdown link resolves" \
		"docs_paths:every docs/ path named in the tree exists" \
		"md_names:every Markdown file named in the tree is in it" \
		"outside:no reference to documents outside the repository"; do
		out=$(check_${c%%:*})
		if [ -z "$out" ]; then ok "$1${c#*:}"; else
			bad "$1${c#*:}"; echo "$out" | sed 's/^/# /'; fi
	done
}

files=$(git ls-files 2>/dev/null)
[ -n "$files" ] || files=$(find . -path ./build -prune -o -path ./.git -prune -o -type f -print | sed 's|^\./||')
run_checks ""

# 5. the checks can fail: a planted tree with one fault of each kind, each reported
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
team=shared # spelled apart so this file names no outside document itself
mkdir -p "$tmp/docs" "$tmp/host"
printf '# t\nsee [x](nowhere.md) and [y](design/gone.md)\n' >"$tmp/docs/t.md"
printf '/* see docs/missing.md */\n' >"$tmp/host/a.c"
printf '/* as ARCHITECTURE.md says */\n' >"$tmp/host/b.c"
printf '/* ../%s/DESIGN.md */\n' "$team" >"$tmp/host/c.c"
found=$(cd "$tmp" && files=$(find . -type f | sed 's|^\./||') &&
	{ check_links; check_docs_paths; check_md_names; check_outside; })
for want in "docs/t.md -> nowhere.md" "docs/t.md -> design/gone.md" "host/a.c -> docs/missing.md" \
	"host/b.c -> ARCHITECTURE.md" "host/c.c:1:"; do
	if echo "$found" | grep -qF "$want"; then ok "a planted fault is reported: $want"; else
		bad "a planted fault is missed: $want"; echo "$found" | sed 's/^/# /'; fi
done
echo "1..$n"
