# docs/repl.md names every command :help lists (and :lua), and the README's
# REPL paragraph points at it: the help and the page cannot drift apart.
mkdir repl_docs && cd repl_docs || exit 9
printf ':help\n' | "$LUARIG" repl >help.txt
cmds=$( (grep -oE '^:[a-z]+' help.txt; echo ":lua") | sort -u)
for c in $cmds; do
	grep -qE -- "\`$c( |\`)" "$LUARIG_ROOT/docs/repl.md" || echo "not in docs/repl.md: $c"
done
echo "checked $(echo "$cmds" | wc -l | tr -d ' ') commands"
grep -c 'docs/repl.md' "$LUARIG_ROOT/README.md" | sed 's/^[1-9][0-9]*$/README links docs\/repl.md/'
