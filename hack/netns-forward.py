#!/usr/bin/env python3
"""Forward a loopback port of this (the host's) network namespace to a loopback port inside the
network namespace of process NSPID: tests and tools on the host reach the node's API server
through 127.0.0.1 only, and nothing is added to the host's interfaces.

usage: netns-forward.py NSPID TARGET_PORT PORT_FILE
Listens on 127.0.0.1 (a free port, written to PORT_FILE) and connects to 127.0.0.1:TARGET_PORT
inside the namespace, one thread pair per connection. Stops on SIGTERM or when NSPID is gone.
"""

import ctypes
import os
import signal
import socket
import sys
import threading

CLONE_NEWNET = 0x40000000
libc = ctypes.CDLL(None, use_errno=True)


def setns(fd: int) -> None:
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def serve(conn: socket.socket, node_ns: int, host_ns: int, port: int) -> None:
    # setns applies to this thread only: make the socket inside the namespace, then come back.
    setns(node_ns)
    try:
        upstream = socket.socket()
    finally:
        setns(host_ns)
    try:
        upstream.connect(("127.0.0.1", port))
    except OSError:
        conn.close()
        upstream.close()
        return
    threading.Thread(target=pump, args=(upstream, conn), daemon=True).start()
    pump(conn, upstream)


def main() -> None:
    nspid, port, port_file = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    node_ns = os.open(f"/proc/{nspid}/ns/net", os.O_RDONLY)
    host_ns = os.open("/proc/self/ns/net", os.O_RDONLY)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    with open(port_file + ".tmp", "w") as f:
        f.write(f"{listener.getsockname()[1]}\n")
    os.rename(port_file + ".tmp", port_file)

    def watch() -> None:  # the namespace's holder gone: stop
        while os.path.exists(f"/proc/{nspid}"):
            threading.Event().wait(0.5)
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve, args=(conn, node_ns, host_ns, port), daemon=True).start()


if __name__ == "__main__":
    main()
