"""gunicorn's gthread worker, with no thread spent on a client that has not sent its request head.

gunicorn 27's gthread worker hands each new connection to a pool thread, which waits up to
5 s for a first byte and then reads the request head with a blocking socket and no timeout: 64
half-sent heads (slowloris) hold all 2 × 32 threads for as long as their senders like, and
``/healthz`` waits. gunicorn has no setting that bounds a head read (``timeout`` watches the
worker process, ``keepalive`` only idle kept-alive connections). This worker reads each head in
its event loop instead, without blocking, and gives the connection to a thread only once the
head is complete (an empty line), with the bytes read so far handed to gunicorn's parser. A head
not complete within ``GHOSTLESS_CLIENT_TIMEOUT`` seconds (default 10) is dropped, as is one larger
than gunicorn's own limits allow. Kept-alive connections go the same way for their next request.

Once a head is in, each read of the request body and each write of the response may stall for at
most ``GHOSTLESS_CLIENT_TIMEOUT`` seconds (a socket timeout): a body trickled slower than that, or a
client that stops reading, loses its connection. A body sent steadily but slowly (a byte every few
seconds) still holds its thread up to its size (capped by MAX_CONTENT_LENGTH). Plain HTTP/1 only:
with TLS or HTTP/2 configured it behaves as the stock gthread worker.
"""

from __future__ import annotations

import errno
import os
import selectors
import time
from collections import deque
from functools import partial

from gunicorn.workers.gthread import ThreadWorker

# s a client has to send a complete request head, and may stall at most mid-body or mid-response
# (env GHOSTLESS_CLIENT_TIMEOUT)
CLIENT_TIMEOUT = 10.0


def supported() -> bool:
    """This worker builds on gunicorn 27's gthread internals (its event loop, TConn, deferred and
    pending connections); older gunicorns (pyproject allows >= 22) get the stock gthread worker."""
    import gunicorn

    return tuple(gunicorn.version_info[:2]) >= (27, 0)


def client_timeout() -> float:
    raw = os.environ.get("GHOSTLESS_CLIENT_TIMEOUT")
    try:
        value = float(raw) if raw else CLIENT_TIMEOUT
    except ValueError:
        raise ValueError(f"GHOSTLESS_CLIENT_TIMEOUT must be a number of seconds, got {raw!r}") from None
    if not 0 < value < 3600:
        raise ValueError("GHOSTLESS_CLIENT_TIMEOUT must be within 0..3600 seconds")
    return value


class HeadFirstThreadWorker(ThreadWorker):
    """gthread, reading request heads in the event loop (module docstring)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.client_timeout = client_timeout()
        self.head_conns: deque = deque()  # (deadline, conn) in deadline order
        limit = self.cfg.limit_request_line or 8190
        fields = self.cfg.limit_request_fields or 100
        self.head_max = limit + 4 + fields * ((self.cfg.limit_request_field_size or 8190) + 2) + 2
        self.guarded = not self.cfg.is_ssl and getattr(self.cfg, "http2_cleartext", "off") in (None, "off", "")

    def enqueue_req(self, conn):
        if not self.guarded or _buffered(conn):
            super().enqueue_req(conn)
            return
        conn.head = b""
        conn.sock.setblocking(False)
        self.head_conns.append((time.monotonic() + self.client_timeout, conn))
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_head_readable, conn))

    def _on_head_readable(self, conn, _sock):
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            if e.errno not in (errno.ECONNRESET, errno.ENOTCONN, errno.EPIPE):
                self.log.debug("reading a request head failed: %s", e)
            data = b""
        if not data:  # gone before its head was complete
            self._drop(conn)
            return
        conn.head += data
        if b"\r\n\r\n" in conn.head or b"\n\n" in conn.head or len(conn.head) > self.head_max:
            # Complete (or too large: the parser answers that one with its own error).
            self._forget(conn)
            conn.data_ready = True
            super().enqueue_req(conn)

    def handle(self, conn):
        head = getattr(conn, "head", b"")
        if head:
            conn.head = b""
            conn.sock.setblocking(True)
            conn.init()
            conn.parser.unreader.unread(head)
        return super().handle(conn)

    def handle_request(self, req, conn):
        """The request, with every read of its body and write of its response bounded by the client
        timeout: a client that stalls mid-body (its body then ends early: werkzeug answers 400) or
        stops reading its response for that long loses the connection instead of holding the thread."""
        if self.guarded:
            conn.sock.settimeout(self.client_timeout)
        try:
            return super().handle_request(req, conn)
        except TimeoutError:
            self.log.debug("closing a connection stalled for %gs mid-request", self.client_timeout)
            return False

    def murder_pending(self):
        super().murder_pending()
        now = time.monotonic()
        while self.head_conns and self.head_conns[0][0] <= now:
            _, conn = self.head_conns[0]
            self.log.debug("closing a connection whose request head did not arrive within %gs", self.client_timeout)
            self._drop(conn)

    def _forget(self, conn):
        try:
            self.poller.unregister(conn.sock)
        except (OSError, KeyError, ValueError):
            pass
        for i, (_, c) in enumerate(self.head_conns):
            if c is conn:
                del self.head_conns[i]
                break

    def _drop(self, conn):
        self._forget(conn)
        self.nr_conns -= 1
        conn.close()


def _buffered(conn) -> bool:
    """Read-ahead of the previous request already holds (part of) the next head."""
    parser = getattr(conn, "parser", None)
    return parser is not None and bool(parser.unreader.buf.getvalue())
