"""A TCP proxy on loopback in front of one server, whose link a test can cut (a network partition).

While cut, no byte passes either way: open connections stay open and silent, new ones are
accepted and hang, and what was sent waits in socket buffers (TCP keeps retransmitting through a
real partition); ``restore()`` lets it all flow again. Every thread ends within 0.1 s of ``close()``.
"""

from __future__ import annotations

import socket
import threading

TICK = 0.1  # how long a thread blocks before it looks at the flags again


class CutProxy:
    def __init__(self, port: int, host: str = "127.0.0.1"):
        self.target = (host, port)
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(TICK)
        self.port = self._listener.getsockname()[1]
        self._threads = [threading.Thread(target=self._accept, name="cut-proxy-accept", daemon=True)]
        self._threads[0].start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def cut(self) -> None:
        self._flowing.clear()

    def restore(self) -> None:
        self._flowing.set()

    def close(self) -> None:
        self._closed.set()
        self._flowing.set()
        self._listener.close()
        with self._lock:
            for s in self._sockets:
                s.close()
        for t in list(self._threads):
            t.join(5)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:  # closed
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                t = threading.Thread(target=self._pump, args=(src, dst), name="cut-proxy-pump", daemon=True)
                self._threads.append(t)
                t.start()

    def _wait_flowing(self) -> bool:
        """Block while cut; False once the proxy is closed."""
        while not self._flowing.wait(TICK):
            pass
        return not self._closed.is_set()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        src.settimeout(TICK)
        while self._wait_flowing():
            try:
                data = src.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            if not data or not self._wait_flowing():  # a cut while reading: hold the bytes
                break
            try:
                dst.sendall(data)
            except OSError:
                break
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
