"""Serving the app: gunicorn's gevent workers by default (each connection a greenlet, up to
``connections`` per process: thousands of open streams; accepting in batches, so a reconnect
storm waits in the process rather than overflowing the kernel's accept queue:
web/geventworker.py); gunicorn's threaded (gthread) workers
with ``server="gthread"`` (each stream or long-poll holds a thread: for debugging); Flask's
threaded development server, with a warning, only when gunicorn is not installed.

gevent needs an app spec (``--app`` / ``GHOSTLESS_APP``): it re-executes gunicorn in a fresh
interpreter, which loads the app again. Without a spec (``serve(engine, None, ...)`` from
Python), or without gevent installed, it serves with gthread workers (forked copies of
``engine``), with a warning. Every process runs one stream reader (web/broker.py) whatever the
number of streams, and Redis through a small bounded pool (web/pool.py). Workers build their
app after the fork (no preload), so no Redis connection or thread crosses a fork.

Under abuse: streams and long-polls together may hold at most ``held_cap(threads)`` (gthread) or
``held_cap(connections)`` (gevent) per process (web/held.py; env ``GHOSTLESS_HELD_MAX``
overrides), so short requests always find a thread; gthread reads request heads without a thread
(web/threadworker.py), gevent bounds a head read (and an idle kept-alive connection) by the same
GHOSTLESS_CLIENT_TIMEOUT; gthread's idle kept-alive connections close after KEEPALIVE seconds;
access logs redact login codes (web/accesslog.py).
"""

from __future__ import annotations

import logging
import os
import sys

log = logging.getLogger("ghostless.web")
# The listen queue: gunicorn's default is 2,048; the kernel caps what is asked at net.core.somaxconn
# (4,096 by default since Linux 5.4). The pages of a reconnect storm past it wait 1-15 s for their
# SYN retries: at 10,000 pages, 42,280 handshakes dropped with 2,048 and 13,084 with 4,096 with the
# stock worker; with batched accepts (web/geventworker.py) 0-1,795 (bench/watchers.py counts them).
BACKLOG = 65535
KEEPALIVE = 2  # s an idle kept-alive connection stays open (gevent: also the bound on reading a request head)
# gevent connections per process: 11,000 streams (held_cap) and 1,000 short requests, within a
# 20,000 open-files limit with room for Redis, logs and the listener (FD_SPARE).
CONNECTIONS = 12000
FD_SPARE = 64
SERVERS = ("gevent", "gthread")


def held_cap(slots: int) -> int:
    """Streams and long-polls one process may hold out of ``slots`` threads (or connections):
    a quarter (at least 2, at most 1,000) stays free for short requests such as /healthz."""
    return max(1, slots - max(2, min(slots // 4, 1000)))


def _cap_held(slots: int) -> None:
    os.environ.setdefault("GHOSTLESS_HELD_MAX", str(held_cap(slots)))  # the workers' create_app reads it


def gunicorn_available() -> bool:
    try:
        import gunicorn.app.base  # noqa: F401
    except ImportError:
        return False
    return True


def gevent_available() -> bool:
    try:
        import gevent  # noqa: F401
    except ImportError:
        return False
    return True


def serve(
    engine,
    app_spec: str | None,
    host: str,
    port: int,
    workers: int,
    threads: int,
    server: str = "gevent",
    connections: int = CONNECTIONS,
) -> None:
    """Run the web app until interrupted. ``engine`` is the already loaded app (the dev server
    and gthread without ``app_spec`` serve it; otherwise gunicorn workers load ``app_spec`` again,
    each in its own process).

    Raises RuntimeError for an unknown ``server``, or when several processes would start
    without a shared secret key.
    """
    if server not in SERVERS:
        raise RuntimeError(f"unknown server {server!r}: one of {', '.join(SERVERS)}")
    if gunicorn_available():
        require_shared_secret(workers)
        if server == "gevent" and app_spec and gevent_available():
            _gevent(app_spec, host, port, workers, connections)
            return
        if server == "gevent":
            log.warning(
                "serving with gthread workers (%d streams per process at most): the gevent server needs %s",
                held_cap(threads),
                "gevent (pip install gevent)" if app_spec else "an app spec (--app or GHOSTLESS_APP)",
            )
        if app_spec:
            os.environ["GHOSTLESS_APP"] = app_spec
        _cap_held(threads)
        _gunicorn(host, port, workers, threads, None if app_spec else engine)
        return
    log.warning(
        "gunicorn is not installed: serving with Flask's development server (one process, "
        "threaded); pip install gunicorn for production"
    )
    from .accesslog import RedactLoginCodes
    from .app import create_app

    werkzeug_log = logging.getLogger("werkzeug")
    if not any(isinstance(f, RedactLoginCodes) for f in werkzeug_log.filters):
        werkzeug_log.addFilter(RedactLoginCodes())
    create_app({"GHOSTLESS_ENGINE": engine}).run(host=host, port=port, threaded=True)


def require_shared_secret(workers: int) -> None:
    """Several processes need one session key: each would otherwise make its own random key
    and refuse the cookies the others signed (a login that works every other request)."""
    if workers > 1 and not os.environ.get("GHOSTLESS_SECRET_KEY"):
        raise RuntimeError(
            f"--workers {workers} needs GHOSTLESS_SECRET_KEY (the same in every process, e.g. "
            "from `openssl rand -hex 32`) so that a login works in all of them; or use --workers 1"
        )


def _gunicorn(host: str, port: int, workers: int, threads: int, engine=None) -> None:
    from gunicorn.app.base import BaseApplication

    from .accesslog import RedactingLogger
    from .threadworker import HeadFirstThreadWorker, client_timeout, supported

    try:
        client_timeout()  # a bad GHOSTLESS_CLIENT_TIMEOUT is refused here, not by each worker at boot
    except ValueError as e:
        raise RuntimeError(str(e)) from None
    worker_class = HeadFirstThreadWorker if supported() else "gthread"
    if not supported():
        log.warning(
            "gunicorn < 27: stock gthread workers, in which each half-sent request head holds a "
            "thread; install gunicorn >= 27 (requirements.txt pins it)"
        )

    class App(BaseApplication):
        def load_config(self):
            # gthread accepts no more than worker_connections at once (default 1000), streams
            # included: leave room for every thread's stream plus short requests.
            settings = {
                "bind": f"{host}:{port}",
                "workers": workers,
                "threads": threads,
                "worker_class": worker_class,
                "worker_connections": max(1000, threads * 2),
                "timeout": 30,
                "graceful_timeout": 5,
                "keepalive": KEEPALIVE,
                "accesslog": "-",
                "errorlog": "-",
                "logger_class": RedactingLogger,
            }
            # gunicorn >= 27's control socket has one default path per user: two servers on
            # one host would contend for it, and nothing here uses it.
            if "control_socket_disable" in self.cfg.settings:
                settings["control_socket_disable"] = True
            for key, value in settings.items():
                self.cfg.set(key, value)

        def load(self):
            from .app import create_app

            return create_app({"GHOSTLESS_ENGINE": engine} if engine is not None else None)

    App().run()


def raise_open_files(need: int) -> int:
    """Raise this process's soft open-files limit (RLIMIT_NOFILE) to ``need``, as far as the hard
    limit allows (the exec'd gunicorn and its workers inherit it); returns the soft limit now."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        soft = need if hard == resource.RLIM_INFINITY else min(hard, need)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return soft


def _gevent(app_spec: str, host: str, port: int, workers: int, connections: int) -> None:
    """Replace this process with gunicorn's gevent workers in a fresh interpreter: gevent must
    patch the standard library before anything (redis, ssl, threading) is imported, and this
    process has already loaded the app. The broker's reader thread becomes a greenlet."""
    import resource

    from .threadworker import client_timeout

    try:
        # A request head must be in within the client timeout, as with gthread (gunicorn's gevent
        # worker bounds it by keepalive). Not 2 s: in a reconnect storm a saturated process may
        # not read a head that arrived at once for seconds, and would drop it (a reset).
        head_timeout = client_timeout()
    except ValueError as e:
        raise RuntimeError(str(e)) from None
    limit = raise_open_files(connections + FD_SPARE)
    if limit != resource.RLIM_INFINITY and limit < connections + FD_SPARE:
        log.warning(
            "open-files limit %d is below --connections %d + %d: connections past it will be refused "
            "(raise the hard limit: ulimit -Hn, or the container's nofile)",
            limit,
            connections,
            FD_SPARE,
        )
    os.environ["GHOSTLESS_APP"] = app_spec
    _cap_held(connections)
    package = __name__.rsplit(".", 1)[0]
    args = [
        sys.executable,
        "-m",
        "gunicorn",
        "--worker-class",
        f"{package}.geventworker.BatchAcceptGeventWorker",
        "--workers",
        str(workers),
        "--worker-connections",
        str(connections),
        "--bind",
        f"{host}:{port}",
        "--backlog",
        str(BACKLOG),
        "--timeout",
        "30",
        "--graceful-timeout",
        "5",
        "--keep-alive",
        f"{head_timeout:g}",
        "--access-logfile",
        "-",
        "--error-logfile",
        "-",
        "--logger-class",
        f"{package}.accesslog.RedactingLogger",
        "--no-control-socket",
        f"{package}:create_app()",
    ]
    os.execv(sys.executable, args)
