#!/usr/bin/env python3
"""A TCP proxy the NATS fault tests control: one luarig process connects to
the nats-server through it, so its connection alone can be cut.

  tcp_proxy.py HOST PORT     prints "PORT <n>" (it listens on 127.0.0.1:<n>)

Commands on stdin, one per line (each answered "OK <command>"):

  freeze        stop forwarding both ways: the bytes wait in the proxy (and
                the kernel), as on a partitioned network that later heals
  thaw          forward again, delivering what waited
  freeze_at P   freeze the next time the client sends a message (PUB or
                HPUB) on a subject starting with P, that message held in
                the proxy (prints "FROZEN")
  withhold S P  the next time the client sends a message (PUB or HPUB) on a
                subject starting with P, forward it, then hold everything the
                server sends back for S seconds: the publish is stored, its
                acknowledgement arrives late (prints "WITHHELD" when it
                starts holding, "RELEASED" when it lets go)
"""
import socket
import sys
import threading
import time

lock = threading.Condition()
frozen = False
hold_until = 0.0
arm = None  # (seconds, subject prefix bytes)
freeze_at = None  # subject prefix bytes


def say(line):
    with lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def gate(server_to_client):
    """Waits while this direction may not forward."""
    with lock:
        while frozen or (server_to_client and time.monotonic() < hold_until):
            lock.wait(0.02)


def pump(src, dst, client_to_server):
    global hold_until, arm, frozen, freeze_at
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            if client_to_server:
                with lock:
                    a, f = arm, freeze_at
                if a and (b"PUB " + a[1]) in data:
                    # hold the way back before the server can see the message
                    with lock:
                        arm = None
                        hold_until = time.monotonic() + a[0]
                    say("WITHHELD")
                    threading.Thread(target=release_later, args=(a[0],), daemon=True).start()
                if f and (b"PUB " + f) in data:
                    with lock:
                        freeze_at = None
                        frozen = True
                    say("FROZEN")
            gate(not client_to_server)
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def release_later(seconds):
    time.sleep(seconds)
    with lock:
        lock.notify_all()
    say("RELEASED")


def serve(ls, host, port):
    while True:
        c, _ = ls.accept()
        try:
            u = socket.create_connection((host, port))
        except OSError:
            c.close()
            continue
        for s in (c, u):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=pump, args=(c, u, True), daemon=True).start()
        threading.Thread(target=pump, args=(u, c, False), daemon=True).start()


def main():
    global frozen, arm, freeze_at
    host, port = sys.argv[1], int(sys.argv[2])
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0))
    ls.listen(16)
    threading.Thread(target=serve, args=(ls, host, port), daemon=True).start()
    say("PORT %d" % ls.getsockname()[1])
    for line in sys.stdin:
        w = line.split()
        if not w:
            continue
        with lock:
            if w[0] == "freeze":
                frozen = True
            elif w[0] == "thaw":
                frozen = False
            elif w[0] == "freeze_at" and len(w) == 2:
                freeze_at = w[1].encode()
            elif w[0] == "withhold" and len(w) == 3:
                arm = (float(w[1]), w[2].encode())
            lock.notify_all()
        say("OK " + w[0])


if __name__ == "__main__":
    main()
