# make install into a DESTDIR: the binary, luarig(1) and the bash completion
# where PREFIX says; the installed binary runs; the page renders with no
# groff warning and names every command, option and variable of
# `luarig help` (and the session and snapshot helps), as docs/cli.md does;
# make uninstall takes the files away again.
mkdir install && cd install || exit 9
command -v make >/dev/null 2>&1 || { echo "no make"; exit 77; }
command -v man >/dev/null 2>&1 && command -v groff >/dev/null 2>&1 || { echo "no man-db/groff (tools/deps.sh)"; exit 77; }
d=$PWD/stage
# -o: the binary under test is installed as it is, never rebuilt here (a
# sanitized build/san/luarig would be remade without its flags)
mk() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -C "$LUARIG_ROOT" BUILD="$(dirname "$LUARIG")" \
	-o "$(dirname "$LUARIG")/luarig" "$@" >make.log 2>&1 || { cat make.log; exit 1; }; }
mk install DESTDIR="$d"
(cd "$d" && find . | sort)
stat -c '%a %n' "$d/usr/local/bin/luarig" "$d/usr/local/share/man/man1/luarig.1" \
	"$d/usr/local/share/bash-completion/completions/luarig" | sed "s|$d||"
echo "== the installed binary"
"$d/usr/local/bin/luarig" --version | sed 's/luarig [0-9.]*/luarig X/'
"$d/usr/local/bin/luarig" -e 'print(rig.version ~= nil)'
echo "== the manual page"
groff -man -Tutf8 -ww -z "$d/usr/local/share/man/man1/luarig.1" 2>&1; echo "groff warnings: $?"
MANWIDTH=80 man -l "$d/usr/local/share/man/man1/luarig.1" 2>&1 >page.txt; echo "man -l: $?"
grep -E '^[A-Z][A-Z ]+$' page.txt
# every word of the helps that names a command, option or variable is in the page
{ "$LUARIG" help; "$LUARIG" sessions help; "$LUARIG" snapshot help; "$LUARIG" sandbox help; } >help.txt
words=$( { grep -oE -- '--[a-z][a-z-]+|[[ ]-[a-zA-Z]([] ]|$)|[A-Z][A-Z_]{3,}' help.txt | tr -d ' []';
	sed -n 's/^ *\(usage: \)\{0,1\}luarig \(\[[A-Z]*\] \)\{0,1\}\([a-z][a-z]*\).*/\3/p' help.txt
	sed -n 's/.*luarig snapshot .*URL\] \([a-z]*\).*/\1/p; s/.*luarig sandbox \([a-z]*\).*/\1/p' help.txt; } |
	grep -vE '^(OPTIONS|SCRIPT|ARGS|CHUNK|BUNDLE|REF|FILE|DIR|HOST|PORT|CMD|SIZE|URL|ID|RIG)$' | sort -u)
for w in $words; do
	grep -qF -- "$w" page.txt || echo "not in the page: $w"
	grep -qF -- "$w" "$LUARIG_ROOT/docs/cli.md" || echo "not in docs/cli.md: $w"
done
echo "checked $(echo "$words" | wc -l | tr -d ' ') words"
echo "== README's commands, spelled luarig, with the installed one on PATH"
(
	PATH="$d/usr/local/bin:$PATH"
	export PATH
	luarig -e 'print(type(rig.now()))'
	luarig help | head -n 1
	printf 'quickstart = nil\nprint(r ~= nil)\n:quit\n' |
		(cd "$LUARIG_ROOT/tests/repl/fixtures" && BENCH_STATE="$OLDPWD/bench" NO_COLOR=1 luarig repl bench_rig.lua) |
		sed -n '1p;$p' | sed "s|$PWD|PWD|"
	luarig sessions --state "$PWD/bench" | sed -n 1p
)
echo "== PREFIX"
mk install DESTDIR="$d" PREFIX=/opt/luarig
test -x "$d/opt/luarig/bin/luarig" && echo "/opt/luarig/bin/luarig"
echo "== uninstall"
mk uninstall DESTDIR="$d"
mk uninstall DESTDIR="$d" PREFIX=/opt/luarig
(cd "$d" && find . -type f | sort)
echo "files left: $(find "$d" -type f | wc -l | tr -d ' ')"
