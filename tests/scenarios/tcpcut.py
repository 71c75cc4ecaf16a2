#!/usr/bin/env python3
"""A TCP proxy the tests cut, to partition one process from a server:
tcpcut.py LISTEN_PORT TARGET_HOST:PORT [drop] listens on 127.0.0.1:LISTEN_PORT
(0: a free port), says "listening PORT", and forwards every connection to the
target.  SIGUSR1 cuts: every connection through it is closed and new ones
are closed as they come; with drop, what is sent is dropped instead and
the connections stay open, new ones too, as when packets are lost (a
request then waits its whole timeout).  SIGUSR2 lets them through again
(after drop, the connections open then are closed first)."""
import signal
import socket
import sys
import threading

port, target = int(sys.argv[1]), sys.argv[2]
drop = len(sys.argv) > 3 and sys.argv[3] == "drop"
host, tport = target.rsplit(":", 1)
cut = threading.Event()
lock = threading.Lock()
conns = set()


def close_all():
    with lock:
        for s in list(conns):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        conns.clear()


def on_cut(*_):
    cut.set()
    if not drop:
        close_all()


def on_heal(*_):
    if drop:
        close_all()
    cut.clear()


def pipe(a, b):
    try:
        while True:
            data = a.recv(65536)
            if not data or (cut.is_set() and not drop):
                break
            if not cut.is_set():
                b.sendall(data)
    except OSError:
        pass
    for s in (a, b):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


signal.signal(signal.SIGUSR1, on_cut)
signal.signal(signal.SIGUSR2, on_heal)
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", port))
srv.listen(64)
print("listening", srv.getsockname()[1], flush=True)
while True:
    c, _ = srv.accept()
    if cut.is_set() and not drop:
        c.close()
        continue
    try:
        u = socket.create_connection((host, int(tport)))
    except OSError:
        c.close()
        continue
    with lock:
        conns.update((c, u))
    threading.Thread(target=pipe, args=(c, u), daemon=True).start()
    threading.Thread(target=pipe, args=(u, c), daemon=True).start()
