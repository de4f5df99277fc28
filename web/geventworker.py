"""gunicorn's gevent worker, accepting connections in batches when several workers share a socket.

With more than one worker, gunicorn 27 sets its StreamServer's ``max_accept`` to 1, so each
worker takes one connection per turn of its event loop. While the greenlets of a reconnect storm
keep that loop busy (each opening is a few Redis round trips), the kernel's accept queue (the
listen backlog, at most ``net.core.somaxconn``) fills, the handshakes past it are dropped, and
their browsers send the SYN again after 1, 3, 7 and 15 s: the slowest pages of a storm wait that
long for a connection that costs a millisecond to serve. This worker takes up to ACCEPT_BATCH
connections per turn (gevent's own default), so the storm waits in the process, as greenlets,
instead of in the kernel. Both workers are woken for a new connection, so they still share the
load; the per-process stream cap (web/held.py) still bounds what each one serves.
"""

from __future__ import annotations

from gevent.server import StreamServer
from gunicorn.workers import ggevent

ACCEPT_BATCH = 100  # connections a worker accepts per turn of its loop (gevent's StreamServer default)


class BatchAcceptServer(StreamServer):
    """A StreamServer whose ``max_accept`` stays ACCEPT_BATCH: gunicorn's assignment of 1 is ignored."""

    @property
    def max_accept(self) -> int:
        return ACCEPT_BATCH

    @max_accept.setter
    def max_accept(self, value: int) -> None:
        pass


class BatchAcceptGeventWorker(ggevent.GeventWorker):
    """gunicorn's gevent worker serving its sockets with BatchAcceptServer (module docstring)."""

    def run(self) -> None:
        # GeventWorker.run builds its servers from the module's StreamServer name; this process runs
        # one worker, so the name is swapped for the worker's lifetime.
        ggevent.StreamServer = BatchAcceptServer
        super().run()
