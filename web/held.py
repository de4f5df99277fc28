"""Caps on held requests: open SSE streams and waiting long-polls, per user and per process.

A held request keeps its server thread (gthread) or connection (gevent) while it is open, so
one user must not hold them all: each user may hold ``GHOSTLESS_STREAMS_PER_USER`` streams
and ``GHOSTLESS_LONGPOLLS_PER_USER`` long-polls per process, and all users together
``GHOSTLESS_HELD_MAX`` (set by web/serve.py below the server's threads or connections, so
short requests such as /healthz always find one free). Counts are per process: each gunicorn
worker counts its own. A slot is taken when the request is accepted and given back when it
ends, however it ends (the response's close, a ``finally``).

Also: ``client_gone(environ)``, telling whether the client of a held request has closed its
connection, so a long-poll (and an idle stream) ends without waiting to write to it.
"""

from __future__ import annotations

import _socket
import select
import socket
import sys
import threading

from flask import current_app, request

DEFAULTS = {
    "GHOSTLESS_STREAMS_PER_USER": 8,
    "GHOSTLESS_LONGPOLLS_PER_USER": 8,
    "GHOSTLESS_HELD_MAX": 200,
    "GHOSTLESS_BUSY_RETRY_MS": 10000,
}
STREAM, LONGPOLL = "stream", "longpoll"
KINDS = {STREAM: "GHOSTLESS_STREAMS_PER_USER", LONGPOLL: "GHOSTLESS_LONGPOLLS_PER_USER"}
CLIENT_CHECK = 0.5  # s: a held request looks this often whether its client has gone away


class Held:
    """Counts of held requests per (kind, user) and in all, under caps read from the app config."""

    def __init__(self, config):
        self.config = config
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], int] = {}
        self.total = 0

    def acquire(self, kind: str, user: str):
        """A release function when ``user`` may hold one more ``kind`` request, else None."""
        with self._lock:
            mine = self._counts.get((kind, user), 0)
            if mine >= self.config[KINDS[kind]] or self.total >= self.config["GHOSTLESS_HELD_MAX"]:
                return None
            self._counts[(kind, user)] = mine + 1
            self.total += 1
        released = []

        def release() -> None:
            with self._lock:
                if released:
                    return  # idempotent: a response's close and a finally may both call it
                released.append(True)
                left = self._counts[(kind, user)] - 1
                if left:
                    self._counts[(kind, user)] = left
                else:
                    del self._counts[(kind, user)]
                self.total -= 1

        return release

    def count(self, kind: str, user: str | None = None) -> int:
        """Held ``kind`` requests of ``user`` (None: of everyone)."""
        with self._lock:
            return sum(n for (k, u), n in self._counts.items() if k == kind and user in (None, u))


def held() -> Held:
    return current_app.extensions["ghostless.held"]


def init_app(app) -> None:
    app.extensions["ghostless.held"] = Held(app.config)


def busy_retry_ms() -> int:
    return int(current_app.config["GHOSTLESS_BUSY_RETRY_MS"])


def client_gone(environ=None) -> bool:
    """True once the request's client has closed its connection (EOF or reset on its socket):
    ``gone_sockets`` of its one socket. Without a socket to look at (the test client, an unknown
    server) it says False."""
    environ = request.environ if environ is None else environ
    sock = environ.get("gunicorn.socket") or environ.get("werkzeug.socket")
    if sock is None:
        return False
    try:
        fd = sock.fileno()
    except OSError:  # closed under us
        return True
    return fd < 0 or bool(gone_sockets([fd]))


def _os_poll():
    """The operating system's ``select.poll``: poll, not select, because a process holding
    thousands of streams has descriptors past select's 1024 (FD_SETSIZE); and the unpatched one
    under gevent, whose cooperative poll reports readiness only after a turn of its loop. A poll
    with a zero timeout never blocks, so it is safe in an event loop."""
    gevent_monkey = sys.modules.get("gevent.monkey")
    if gevent_monkey is not None and gevent_monkey.is_object_patched("select", "poll"):
        return gevent_monkey.get_original("select", "poll")
    return select.poll


def gone_sockets(fds: list[int]) -> list[int]:
    """Those of the sockets ``fds`` whose client has closed its connection (EOF, reset or a closed
    descriptor): one poll of the operating system for all of them, then a look (``MSG_PEEK``, never
    a read) at the readable ones only; a socket with a pipelined request waiting is not gone."""
    if not fds:
        return []
    poller = _os_poll()()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    gone = []
    for fd, events in poller.poll(0):
        if events & (select.POLLERR | select.POLLNVAL):
            gone.append(fd)
            continue
        try:
            peek = _socket.socket(fileno=fd)  # the C socket: never gevent's, which would wait on EAGAIN
        except OSError:
            gone.append(fd)
            continue
        try:
            if peek.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"":
                gone.append(fd)
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            gone.append(fd)
        finally:
            peek.detach()  # the descriptor stays the server's
    return gone
