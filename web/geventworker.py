"""gunicorn's gevent worker, fitted to thousands of streams: batched accepts, rarer GC, one-send writes.

With more than one worker, gunicorn 27 sets its StreamServer's ``max_accept`` to 1, so each
worker takes one connection per turn of its event loop. While the greenlets of a reconnect storm
keep that loop busy (each opening is a few Redis round trips), the kernel's accept queue (the
listen backlog, at most ``net.core.somaxconn``) fills, the handshakes past it are dropped, and
their browsers send the SYN again after 1, 3, 7 and 15 s: the slowest pages of a storm wait that
long for a connection that costs a millisecond to serve. This worker takes up to ACCEPT_BATCH
connections per turn (gevent's own default), so the storm waits in the process, as greenlets,
instead of in the kernel. Both workers are woken for a new connection, so they still share the
load; the per-process stream cap (web/held.py) still bounds what each one serves.

Its garbage collector runs less often (``tune_gc``): a broadcast makes and drops a few objects per
subscriber per event, and at CPython's default (a collection per 700 net new objects) a thousand
streams' objects in flight were collected every ~30 ms, the survivors promoted until a full
collection of every stream's objects paused the whole process for 50-100 ms, a few times a minute.

Its connections' ``sendall`` tries one plain send first (QuickSendSocket): an SSE message is a few
hundred bytes that the kernel takes whole, and gevent's own sendall spends a ``getsockopt`` call
on each, and a timer when the socket has a timeout (a broadcast makes one per subscriber per event:
bench/sse.py).
"""

from __future__ import annotations

import gc

from gevent.server import StreamServer
from gevent.socket import socket as GeventSocket
from gunicorn.workers import ggevent

ACCEPT_BATCH = 100  # connections a worker accepts per turn of its loop (gevent's StreamServer default)
GC_GEN0_THRESHOLD = 20_000  # net new objects between two young collections (CPython's default: 700)


def tune_gc() -> None:
    """Collect what loading the app left, freeze the rest (the app's modules and objects live as
    long as the process: no collection looks at them again) and collect the young generation
    every GC_GEN0_THRESHOLD objects instead of 700; the older generations' ratios stay as they are."""
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)


class QuickSendSocket(GeventSocket):
    """A gevent socket whose ``sendall`` first hands the kernel the data in one non-blocking send;
    only what that leaves (a full send buffer: a slow reader) goes through gevent's sendall,
    which waits, under the socket's timeout, for the rest."""

    __slots__ = ()

    def sendall(self, data, flags: int = 0) -> None:
        view = memoryview(data).cast("B")
        try:
            sent = self._sock.send(view, flags)
        except OSError:  # the buffer is full, or an error: gevent's sendall raises it as it always has
            sent = 0
        if sent < view.nbytes:
            super().sendall(view[sent:], flags)


class BatchAcceptServer(StreamServer):
    """A StreamServer whose ``max_accept`` stays ACCEPT_BATCH (gunicorn's assignment of 1 is
    ignored), and whose connections are QuickSendSockets."""

    @property
    def max_accept(self) -> int:
        return ACCEPT_BATCH

    @max_accept.setter
    def max_accept(self, value: int) -> None:
        pass

    def do_read(self):
        try:
            fd, address = self.socket._accept()
        except BlockingIOError:
            if not self.socket.timeout:
                return None
            raise
        listener = self.socket
        return QuickSendSocket(listener.family, listener.type, listener.proto, fileno=fd), address


class BatchAcceptGeventWorker(ggevent.GeventWorker):
    """gunicorn's gevent worker serving its sockets with BatchAcceptServer (module docstring)."""

    def run(self) -> None:
        # GeventWorker.run builds its servers from the module's StreamServer name; this process runs
        # one worker, so the name is swapped for the worker's lifetime.
        ggevent.StreamServer = BatchAcceptServer
        tune_gc()  # the app is loaded: gunicorn loads it in the worker, before run
        super().run()
