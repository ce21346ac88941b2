"""A tiny npm registry for tests/sandbox/run.sh: one package, lr-sbx-demo
1.0.0, its packument and tarball (made here, with shasum and integrity),
served on HOST:PORT. Usage: npm_registry.py HOST PORT. Logs requests to
stderr."""
import base64, hashlib, http.server, io, json, sys, tarfile
host, port = sys.argv[1], int(sys.argv[2])
NAME, VER = "lr-sbx-demo", "1.0.0"
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w:gz") as t:
    for fn, body in (("package/package.json", json.dumps({"name": NAME, "version": VER, "main": "index.js"})),
                     ("package/index.js", "module.exports = 'lr-sbx-demo ok';\n")):
        data = body.encode()
        ti = tarfile.TarInfo(fn); ti.size = len(data); ti.mode = 0o644
        t.addfile(ti, io.BytesIO(data))
TGZ = buf.getvalue()
base = f"http://{host}:{port}"
DOC = json.dumps({"name": NAME, "dist-tags": {"latest": VER}, "versions": {VER: {
    "name": NAME, "version": VER, "main": "index.js",
    "dist": {"tarball": f"{base}/{NAME}/-/{NAME}-{VER}.tgz",
             "shasum": hashlib.sha1(TGZ).hexdigest(),
             "integrity": "sha512-" + base64.b64encode(hashlib.sha512(TGZ).digest()).decode()}}}}).encode()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        path = self.path.split("://", 1)[-1]
        path = path[path.find("/"):] if "://" in self.path else path
        if path == f"/{NAME}":
            body, ctype = DOC, "application/json"
        elif path == f"/{NAME}/-/{NAME}-{VER}.tgz":
            body, ctype = TGZ, "application/octet-stream"
        else:
            self.send_error(404); return
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        sys.stderr.write("reg: " + (a[0] % a[1:]) + "\n")
http.server.ThreadingHTTPServer((host, port), H).serve_forever()
