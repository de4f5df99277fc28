"""The two questions every open stream must keep asking, asked for all of them at once.

Has its client gone, and is its credential still good? Asked per stream, 10,000 idle streams
woke 20,000 times a second and sent Redis 10,000 reads a second, and that was what made delivery
late (bench/watchers.py). One guard thread per process asks instead: every CLIENT_CHECK seconds
one poll of the operating system over every stream's socket (web/held.py ``gone_sockets``), and
every CREDENTIAL_EVERY seconds one batch of reads for every distinct credential (the tokens in
two pipelined round trips, ``Users.valid_digests``; the sessions in one). A stream whose client
left or whose token was revoked or session logged out is ended through its subscriber
(``Subscriber.end``), so an idle stream costs nothing until its keep-alive; a revoked one ends
within CREDENTIAL_EVERY plus a round, under the 2 s web/sse.py promises.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time

import redis

from .held import CLIENT_CHECK, gone_sockets

log = logging.getLogger("ghostless.web.guard")
CREDENTIAL_EVERY = 1.0  # s between two looks at every open stream's credential
BATCH = 1000  # commands per pipeline


class Watched:
    __slots__ = ("credential", "fd", "sub")

    def __init__(self, sub, fd: int | None, credential: tuple[str, str | None]):
        self.sub, self.fd, self.credential = sub, fd, credential


class StreamGuard:
    """Watches open streams: ``watch(sub, environ, (token digest, session key or None))`` ->
    a handle for ``unwatch``. The thread starts with the first stream."""

    def __init__(self, engine, client_every: float = CLIENT_CHECK, credential_every: float = CREDENTIAL_EVERY):
        self.engine, self.client_every, self.credential_every = engine, client_every, credential_every
        self._watched: dict[int, Watched] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, sub, environ: dict, credential: tuple[str, str | None]) -> int:
        sock = environ.get("gunicorn.socket") or environ.get("werkzeug.socket")
        try:
            fd = sock.fileno() if sock is not None else None
        except OSError:
            fd = None
        handle = next(self._ids)
        with self._lock:
            self._watched[handle] = Watched(sub, fd, credential)
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._run, name="ghostless-stream-guard", daemon=True)
                self._thread.start()
        return handle

    def unwatch(self, handle: int) -> None:
        with self._lock:
            self._watched.pop(handle, None)

    def watching(self) -> int:
        with self._lock:
            return len(self._watched)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    # -- the thread ---------------------------------------------------------------------------------
    def _run(self) -> None:
        credentials_due = 0.0
        while not self._stop.wait(self.client_every):
            try:
                self.check_clients()
                if time.monotonic() >= credentials_due:
                    credentials_due = time.monotonic() + self.credential_every
                    self.check_credentials()
            except redis.RedisError as e:  # the streams' own reads notice too; look again next round
                log.warning("stream credential check failed: %s", e)
            except Exception:  # the one guard must outlive a bad round
                log.exception("stream guard error")

    def _snapshot(self) -> list[Watched]:
        with self._lock:
            return list(self._watched.values())

    def check_clients(self) -> int:
        """End the streams whose client has gone; how many."""
        by_fd = {w.fd: w for w in self._snapshot() if w.fd is not None}
        gone = gone_sockets(list(by_fd))
        for fd in gone:
            by_fd[fd].sub.end()
        return len(gone)

    def check_credentials(self) -> int:
        """End the streams whose token was revoked or whose session ended; how many."""
        watched = self._snapshot()
        if not watched:
            return 0
        digests = {w.credential[0] for w in watched}
        sessions = sorted({w.credential[1] for w in watched if w.credential[1]})
        valid = set()
        for chunk in _chunks(sorted(digests)):
            valid |= self.engine.users.valid_digests(chunk)
        live_sessions = set()
        for chunk in _chunks(sessions):
            pipe = self.engine.redis.pipeline(transaction=False)
            for key in chunk:
                pipe.exists(key)
            live_sessions |= {key for key, n in zip(chunk, pipe.execute()) if n}
        ended = 0
        for w in watched:
            digest, session = w.credential
            if digest not in valid or (session is not None and session not in live_sessions):
                w.sub.end()
                ended += 1
        return ended


def _chunks(items: list) -> list[list]:
    return [items[i : i + BATCH] for i in range(0, len(items), BATCH)]
