#!/usr/bin/env python3
"""A TCP proxy the tests cut, to partition one process from a server:
tcpcut.py LISTEN_PORT TARGET_HOST:PORT listens on 127.0.0.1:LISTEN_PORT (0: a
free port), says "listening PORT", and forwards every connection to the target.  SIGUSR1 cuts: every connection
through it is closed and new ones are closed as they come; SIGUSR2 lets
them through again."""
import signal
import socket
import sys
import threading

port, target = int(sys.argv[1]), sys.argv[2]
host, tport = target.rsplit(":", 1)
cut = threading.Event()
lock = threading.Lock()
conns = set()


def on_cut(*_):
    cut.set()
    with lock:
        for s in list(conns):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        conns.clear()


def on_heal(*_):
    cut.clear()


def pipe(a, b):
    try:
        while True:
            data = a.recv(65536)
            if not data or cut.is_set():
                break
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
    if cut.is_set():
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
