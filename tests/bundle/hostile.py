#!/usr/bin/env python3
"""Builds bundles, good and hostile, independently of luarig's own packer.

usage: hostile.py KIND OUT.rig      one bundle
       hostile.py --corpus DIR      the small ones, as fuzz seeds

Every bundle starts from the same small app (main.lua requiring
lib/util.lua) with a correct manifest; KIND then breaks one thing.
"""
import gzip
import hashlib
import io
import json
import os
import sys
import tarfile

MAIN = b'local util = require "lib.util"\nprint(util.greet(...))\n'
UTIL = b'return { greet = function(who) return "hello " .. tostring(who) end }\n'


def manifest(files, **over):
    m = {
        "format": 1, "name": "app", "version": "1.0.0", "entry": "main",
        "luarig": "0.1.0",
        "files": [{"path": p, "size": len(d), "sha256": hashlib.sha256(d).hexdigest()}
                  for p, d in sorted(files.items())],
    }
    m.update(over)
    return {k: v for k, v in m.items() if v is not None}


class Zeros(io.RawIOBase):
    """n zero bytes without holding them."""

    def __init__(self, n):
        self.left = n

    def readable(self):
        return True

    def readinto(self, b):
        k = min(len(b), self.left)
        b[:k] = bytes(k)
        self.left -= k
        return k


def build(out, entries, level=9):
    """entries: list of (name, kind, payload); kind reg|sym|hard|chr|fifo|dir|zeros."""
    with open(out, "wb") as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=level, mtime=0) as gz:
            with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as t:
                for name, kind, payload in entries:
                    ti = tarfile.TarInfo(name)
                    ti.mtime = 0
                    ti.mode = 0o644
                    f = None
                    if kind == "reg":
                        ti.size = len(payload)
                        f = io.BytesIO(payload)
                    elif kind == "zeros":
                        ti.size = payload
                        f = io.BufferedReader(Zeros(payload))
                    elif kind == "sym":
                        ti.type, ti.linkname = tarfile.SYMTYPE, payload
                    elif kind == "hard":
                        ti.type, ti.linkname = tarfile.LNKTYPE, payload
                    elif kind == "chr":
                        ti.type = tarfile.CHRTYPE
                    elif kind == "fifo":
                        ti.type = tarfile.FIFOTYPE
                    elif kind == "dir":
                        ti.type, ti.mode = tarfile.DIRTYPE, 0o755
                    t.addfile(ti, f)


def app(files=None, extra=(), man=None, first=None):
    files = dict(files if files is not None else {"main.lua": MAIN, "lib/util.lua": UTIL})
    m = man if man is not None else json.dumps(manifest(files), indent=2).encode()
    entries = [("rig.json", "reg", m)] if first is None else first
    entries += [(p, "reg", d) for p, d in sorted(files.items())]
    return entries + list(extra)


def kinds():
    base = {"main.lua": MAIN, "lib/util.lua": UTIL}
    k = {}
    k["ok"] = lambda: app()
    k["ok_dirs"] = lambda: [("rig.json", "reg", json.dumps(manifest(base)).encode()),
                            ("lib/", "dir", None), ("lib/util.lua", "reg", UTIL),
                            ("main.lua", "reg", MAIN)]
    k["ok_init"] = lambda: app({"app/cli/init.lua": b'print("cli", ...)\n'},
                               man=json.dumps(manifest({"app/cli/init.lua": b'print("cli", ...)\n'},
                                                       entry="app.cli")).encode())
    k["absolute"] = lambda: app(extra=[("/etc/evil.lua", "reg", b"x")])
    k["dotdot"] = lambda: app(extra=[("../evil.lua", "reg", b"x")])
    k["dot"] = lambda: app(extra=[("./main.lua", "reg", MAIN)])
    k["empty_component"] = lambda: app(extra=[("lib//x.lua", "reg", b"x")])
    k["backslash"] = lambda: app(extra=[("lib\\evil.lua", "reg", b"x")])
    k["control"] = lambda: app(extra=[("evil\x1b[2J.lua", "reg", b"x")])
    k["symlink"] = lambda: app(extra=[("link.lua", "sym", "/etc/passwd")])
    k["hardlink"] = lambda: app(extra=[("hard.lua", "hard", "main.lua")])
    k["device"] = lambda: app(extra=[("dev.lua", "chr", None)])
    k["fifo"] = lambda: app(extra=[("pipe.lua", "fifo", None)])
    k["duplicate"] = lambda: app(extra=[("main.lua", "reg", MAIN)])
    k["extra"] = lambda: app(extra=[("extra.lua", "reg", b"return 1\n")])
    k["missing"] = lambda: app(man=json.dumps(manifest(dict(base, **{"lib/gone.lua": b"x"}))).encode())
    k["hash"] = lambda: app(man=json.dumps(manifest(dict(base, **{"main.lua": MAIN.replace(b"util", b"UTIL")}))).encode())
    k["size"] = lambda: app(man=json.dumps(manifest(dict(base, **{"main.lua": MAIN + b"\n"}))).encode())
    bc = b"\x1bLuaT\x00\x19\x93\r\n\x1a\n"
    k["bytecode"] = lambda: app(dict(base, **{"lib/util.lua": bc}))
    # Verifies (pack would refuse it): a syntax error is reported at run, naming file:line.
    k["syntax"] = lambda: app(dict(base, **{"lib/util.lua": b"return {\n  greet = = 1,\n}\n"}))
    k["not_json"] = lambda: app(man=b"{ this is not json")
    k["lacks_field"] = lambda: app(man=json.dumps(manifest(base, entry=None)).encode())
    k["unknown_format"] = lambda: app(man=json.dumps(manifest(base, format=2)).encode())
    k["newer_luarig"] = lambda: app(man=json.dumps(manifest(base, luarig="99.0.0")).encode())
    k["no_entry_module"] = lambda: app(man=json.dumps(manifest(base, entry="cli")).encode())
    k["manifest_not_first"] = lambda: app(first=[("main.lua", "reg", MAIN),
                                                 ("rig.json", "reg", json.dumps(manifest(base)).encode())])
    k["no_manifest"] = lambda: [("main.lua", "reg", MAIN)]
    # The caps: these are big on disk (tens of MiB); not fuzz seeds.
    k["big_entry"] = lambda: _big_entry()
    k["total"] = lambda: _total()
    k["bomb"] = lambda: _bomb(15 << 20)
    k["small_bomb"] = lambda: _bomb(200 << 10)
    return k


def _big_entry():
    # The manifest claims a small file: the archive's own header must be caught.
    data = os.urandom((16 << 20) + 1)
    files = {"main.lua": MAIN, "lib/util.lua": UTIL}
    m = manifest(dict(files, **{"big.bin": b"small"}))
    return [("rig.json", "reg", json.dumps(m).encode()), ("big.bin", "reg", data)] + \
        [(p, "reg", d) for p, d in sorted(files.items())]


def _total():
    files = {"main.lua": MAIN, "lib/util.lua": UTIL}
    for i in range(5):
        files["blob%d.bin" % i] = os.urandom(27 << 19)  # 13.5 MiB each, 67.5 MiB in all
    return app(files)


def _bomb(n):
    zeros_hash = hashlib.sha256(bytes(n)).hexdigest()
    files = {"main.lua": MAIN, "lib/util.lua": UTIL}
    m = manifest(files)
    m["files"].insert(0, {"path": "bomb.bin", "size": n, "sha256": zeros_hash})
    return [("rig.json", "reg", json.dumps(m).encode()), ("bomb.bin", "zeros", n)] + \
        [(p, "reg", d) for p, d in sorted(files.items())]


BIG = {"big_entry", "total", "bomb"}


def main(argv):
    k = kinds()
    if len(argv) == 3 and argv[1] == "--corpus":
        os.makedirs(argv[2], exist_ok=True)
        for name, f in sorted(k.items()):
            if name not in BIG:
                build(os.path.join(argv[2], name + ".rig"), f())
        return 0
    if len(argv) != 3 or argv[1] not in k:
        sys.stderr.write("usage: hostile.py KIND OUT.rig | --corpus DIR\nkinds: %s\n"
                         % " ".join(sorted(k)))
        return 2
    build(argv[2], k[argv[1]](), level=1 if argv[1] in ("big_entry", "total") else 9)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
