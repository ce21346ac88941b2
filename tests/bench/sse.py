#!/usr/bin/env python3
"""SSE framing benchmark: a 100 MB text/event-stream built from a recorded
provider stream (shared fixture openai_chat_parallel_tool_calls.sse, ~300
bytes an event, repeated) is served on loopback by a sendfile() server, so
the server is never the bottleneck. luarig reads it with rig.http.stream and
touches every event's data in Lua, in two shapes: st:batch (events moved
into a reused table as data, name pairs, no table per event: sse_100mb,
sse_per_event) and st:events (a table per event: sse_per_event_table). The
peer is `curl -N` writing the same stream to /dev/null. All are timed as
whole processes in the same run, in rounds (batch, curl, table),
SSE_BENCH_ROUNDS (BENCH_RUNS, 5) times: medians with min-max.
sse_per_event_cpu is sse_per_event in CPU time (user + system, from the
children's rusage) rather than wall time, against curl's: steadier than
wall time on a loaded machine.
"""
import http.server
import os
import resource
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time

LUARIG = os.environ.get("LUARIG", "build/luarig")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIZE = int(os.environ.get("SSE_BENCH_BYTES", 100 * 1000 * 1000))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

ROUNDS = int(os.environ.get("SSE_BENCH_ROUNDS", benchlib.RUNS))


def fixture():
    for base in (os.path.join(ROOT, "tests", "fixtures"),):
        p = os.path.join(base, "openai_chat_parallel_tool_calls.sse")
        if os.path.exists(p):
            with open(p, "rb") as f:
                return f.read()
    # A synthetic stream of the same shape if the fixture is not beside us.
    ev = b'data: {"id":"chatcmpl-x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hello"}}]}\n\n'
    return ev * 20


class Handler(http.server.BaseHTTPRequestHandler):
    path_file = None

    def do_GET(self):
        size = os.path.getsize(self.path_file)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(size))
        self.end_headers()
        with open(self.path_file, "rb") as f:
            self.wfile.flush()
            self.connection.sendfile(f)

    def log_message(self, *a):
        pass


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


CPU = {}  # argv[0] -> the CPU seconds (user + system) of each run, in order


def timed(argv):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.setdefault(argv[0], []).append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
    if out.returncode != 0:
        sys.stderr.write(f"sse bench: {argv[0]} failed: {out.stderr}\n")
        return None, out.stdout
    return dt, out.stdout


def main():
    block = fixture()
    if not block.endswith(b"\n\n"):
        block += b"\n\n" if not block.endswith(b"\n") else b"\n"
    events_per_block = block.count(b"\n\ndata:") + 1
    reps = max(1, SIZE // len(block))
    with tempfile.NamedTemporaryFile(suffix=".sse", delete=False) as f:
        for _ in range(reps):
            f.write(block)
        path = f.name
    total = reps * len(block)
    nevents = reps * events_per_block
    Handler.path_file = path
    srv = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/stream"
    chunk = ("local st = assert(rig.http.stream{ url = arg[1], idle_timeout = 30 }) "
             "local n, bytes = 0, 0 "
             "for ev in st:events() do n = n + 1 bytes = bytes + #ev.data end "
             "assert(st:result()) print(n)")
    batch = ("local st = assert(rig.http.stream{ url = arg[1], idle_timeout = 30 }) "
             "local n, bytes, buf = 0, 0, {} "
             "while true do local k = st:batch(buf, 256) if not k then break end "
             "for i = 1, 2 * k, 2 do n = n + 1 bytes = bytes + #buf[i] end end "
             "assert(st:result()) print(n)")

    def ours_run(code):
        dt, out = timed([LUARIG, "-e", code, url])
        if dt is not None and int(out.strip()) != nevents:
            sys.stderr.write(f"sse bench: luarig saw {out.strip()} events, expected {nevents}\n")
            return None
        return dt

    ours, table, peer, ours_cpu, peer_cpu = [], [], [], [], []
    try:
        for _ in range(ROUNDS):
            dt = ours_run(batch)
            if dt is None:
                return
            ours.append(dt)
            ours_cpu.append(CPU[LUARIG][-1])
            dt, _ = timed(["curl", "-sS", "-N", "-o", "/dev/null", url])
            if dt is None:
                return
            peer.append(dt)
            peer_cpu.append(CPU["curl"][-1])
            dt = ours_run(chunk)
            if dt is None:
                return
            table.append(dt)
    finally:
        srv.shutdown()
        os.unlink(path)
    benchlib.line("sse_100mb", ours, "s", "curl-N", peer)
    benchlib.line("sse_per_event", [x / nevents * 1e9 for x in ours], "ns", "curl-N",
                  [x / nevents * 1e9 for x in peer])
    benchlib.line("sse_per_event_table", [x / nevents * 1e9 for x in table], "ns", "curl-N",
                  [x / nevents * 1e9 for x in peer])
    benchlib.line("sse_per_event_cpu", [x / nevents * 1e9 for x in ours_cpu], "ns", "curl-N",
                  [x / nevents * 1e9 for x in peer_cpu])
    o, p = benchlib.median(ours), benchlib.median(peer)
    print(f"# {total / 1e6:.0f} MB, {nevents} events of ~{total // nevents} bytes; "
          f"luarig {total / o / 1e6:.0f} MB/s, curl {total / p / 1e6:.0f} MB/s (medians)", flush=True)


if __name__ == "__main__":
    main()
