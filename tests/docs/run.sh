#!/bin/sh
# tests/docs/run.sh — the documentation refers only to what the repository has:
# every relative link in README.md and docs/ resolves, every docs/… path named
# in code or tests exists, and nothing points at team material outside the
# repository (../shared, DESIGN §, SANDBOX.md, SESSIONS.md, HELPERS-MODELS.md,
# NOTES.md). Run from the repository root.
cd "${LUARIG_ROOT:-.}" || exit 1
n=0
ok() { n=$((n + 1)); echo "ok - $n $1"; }
bad() { n=$((n + 1)); echo "not ok - $n $1"; }

files=$(git ls-files 2>/dev/null)
[ -n "$files" ] || files=$(find . -path ./build -prune -o -path ./.git -prune -o -type f -print | sed 's|^\./||')

# 1. relative links in Markdown resolve (anchors and URLs are not files)
missing=$(for f in $(echo "$files" | grep -E '(^README\.md$|^docs/.*\.md$|^tests/.*README\.md$)'); do
	d=$(dirname "$f")
	grep -oE '\]\([^)#[:space:]]+' "$f" | sed 's/^](//' | while read -r l; do
		case "$l" in http:*|https:*|mailto:*) continue ;; esac
		[ -e "$d/$l" ] || echo "$f -> $l"
	done
done)
if [ -z "$missing" ]; then ok "every relative Markdown link resolves"; else
	bad "Markdown links to missing files"; echo "$missing" | sed 's/^/# /'; fi

# 2. docs/… paths named in code and docs exist (tests/ names workspace files of its own)
missing=$(echo "$files" | grep -vE '^tests/' | while read -r f; do
	[ -f "$f" ] || continue
	grep -oE 'docs/[A-Za-z0-9_./-]+\.(md|png|svg)' "$f" 2>/dev/null | sort -u | while read -r p; do
		[ -e "$p" ] || echo "$f -> $p"
	done
done)
if [ -z "$missing" ]; then ok "every docs/ path named in the tree exists"; else
	bad "docs/ paths that do not exist"; echo "$missing" | sed 's/^/# /'; fi

# 3. nothing refers to documents a clone does not have
pat='\.\./shared/|DESIGN §|DESIGN section|DESIGN\.md|SANDBOX\.md|SESSIONS\.md|HELPERS-MODELS\.md|NOTES\.md|NOTES "'
hits=$(echo "$files" | grep -vE '^tests/docs/' | while read -r f; do
	[ -f "$f" ] && grep -nE "$pat" "$f" /dev/null 2>/dev/null
done)
if [ -z "$hits" ]; then ok "no reference to documents outside the repository"; else
	bad "references to documents outside the repository"; echo "$hits" | sed 's/^/# /'; fi

# 4. the checks can fail: a planted bad link and a planted reference are found
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
team=shared # spelled apart so this file names no outside document itself
printf 'see [x](nowhere.md) and ../%s/DESIGN.md\n' "$team" >"$tmp/t.md"
if grep -oE '\]\([^)#[:space:]]+' "$tmp/t.md" | grep -q nowhere && grep -qE "$pat" "$tmp/t.md"; then
	ok "the patterns catch a planted bad link and reference"
else bad "the patterns miss a planted bad link or reference"; fi
echo "1..$n"
