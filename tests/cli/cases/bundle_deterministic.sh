mkdir bundle_deterministic && cd bundle_deterministic || exit 9
# Packing the same tree twice gives the same bytes, whatever the mtimes;
# the archive holds regular files only, mtime 0, owner 0, rig.json first.
mkdir -p app/lib/deep
printf 'require "lib.deep.x"\n' > app/main.lua
printf 'return 1\n' > app/lib/deep/x.lua
printf 'return 2\n' > app/lib/a.lua
"$LUARIG" pack app -o one.rig
touch -d '2001-02-03 04:05:06' app/main.lua app/lib/a.lua app/lib
chmod 600 app/lib/a.lua
"$LUARIG" pack app -o two.rig
cmp one.rig two.rig && echo identical
python3 -c '
import tarfile, sys
with tarfile.open("one.rig") as t:
    for m in t:
        print(m.name, "reg" if m.isreg() else m.type, oct(m.mode), m.mtime, m.uid, m.gid, repr(m.uname), repr(m.gname))
with open("one.rig", "rb") as f:
    h = f.read(10)
    print("gzip mtime", int.from_bytes(h[4:8], "little"))
'
