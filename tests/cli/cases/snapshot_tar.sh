mkdir snapshot_tar && cd snapshot_tar || exit 9
# export then import (into another state root) gives the same ref; import
# refuses hostile archives and writes nothing outside.
mkdir -p w/sub
printf 'data' > w/sub/f
ln -s f w/sub/l
A=$("$LUARIG" snapshot --state "$PWD/s1" capture w)
"$LUARIG" snapshot --state "$PWD/s1" export "$A" w.tar; echo "export: $?"
B=$("$LUARIG" snapshot --state "$PWD/s2" import w.tar)
test "$A" = "$B" && echo "same ref after import"
python3 -c '
import tarfile, io
def add(t, name, typ, data=b"", link=""):
    ti = tarfile.TarInfo(name); ti.type = typ; ti.linkname = link; ti.size = len(data)
    t.addfile(ti, io.BytesIO(data))
for n, es in {"abs": [("/tmp/evil", tarfile.REGTYPE, b"x")],
              "dotdot": [("../evil", tarfile.REGTYPE, b"x")],
              "escape": [("up", tarfile.SYMTYPE, b"", "../..")],
              "hard": [("a", tarfile.REGTYPE, b"x"), ("b", tarfile.LNKTYPE, b"", "a")],
              "dev": [("null", tarfile.CHRTYPE)],
              "dup": [("a", tarfile.REGTYPE, b"x"), ("a", tarfile.REGTYPE, b"y")]}.items():
    with tarfile.open(n + ".tar", "w", format=tarfile.GNU_FORMAT) as t:
        for e in es: add(t, *e)
'
for t in abs dotdot escape hard dev dup; do
	"$LUARIG" snapshot --state "$PWD/s2" import $t.tar; echo "$t: $?"
done
ls .. | grep -c evil
"$LUARIG" snapshot --state "$PWD/s2" import missing.tar; echo "missing: $?"
