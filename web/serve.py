"""Serving the app: gunicorn with threaded (gthread) workers when installed, else Flask's
threaded development server with a warning; or gunicorn's gevent workers (``--server gevent``).

gthread: each SSE stream or long-poll holds one worker thread while it is open. gevent: each
connection is a greenlet (``connections`` per process), for many open streams (bench/sse.py
measures both). Either way every process runs one stream reader (web/broker.py) whatever the
number of streams. Workers build their app after the fork (no preload), so no Redis connection or
thread crosses a fork.

Under abuse: streams and long-polls together may hold at most ``held_cap(threads)`` (gthread) or
``held_cap(connections)`` (gevent) per process (web/held.py; env ``GHOSTLESS_HELD_MAX``
overrides), so short requests always find a thread; gthread reads request heads without a thread
(web/threadworker.py), gevent bounds a head read by ``keepalive``; idle kept-alive connections
close after KEEPALIVE seconds; access logs redact login codes (web/accesslog.py).
"""

from __future__ import annotations

import logging
import os
import sys

log = logging.getLogger("ghostless.web")
KEEPALIVE = 2  # s an idle kept-alive connection stays open (gevent: also the bound on reading a request head)


def held_cap(slots: int) -> int:
    """Streams and long-polls one process may hold out of ``slots`` threads (or connections):
    a quarter (at least 2) stays free for short requests such as /healthz."""
    return max(1, slots - max(2, slots // 4))


def _cap_held(slots: int) -> None:
    os.environ.setdefault("GHOSTLESS_HELD_MAX", str(held_cap(slots)))  # the workers' create_app reads it


def gunicorn_available() -> bool:
    try:
        import gunicorn.app.base  # noqa: F401
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
    server: str = "gthread",
    connections: int = 1000,
) -> None:
    """Run the web app until interrupted. ``engine`` is the already loaded app (the dev
    server serves it; gunicorn workers load ``app_spec`` again, each in its own process).

    Raises RuntimeError when ``server="gevent"`` cannot run (no gunicorn or gevent, no app_spec),
    or when several processes would start without a shared secret key.
    """
    if server == "gevent" or gunicorn_available():
        require_shared_secret(workers)
    if server == "gevent":
        _gevent(app_spec, host, port, workers, connections)
        return
    if gunicorn_available():
        if app_spec:
            os.environ["GHOSTLESS_APP"] = app_spec
        _cap_held(threads)
        _gunicorn(host, port, workers, threads)
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


def _gunicorn(host: str, port: int, workers: int, threads: int) -> None:
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

            return create_app()

    App().run()


def _gevent(app_spec: str | None, host: str, port: int, workers: int, connections: int) -> None:
    """Replace this process with gunicorn's gevent workers in a fresh interpreter: gevent must
    patch the standard library before anything (redis, ssl, threading) is imported, and this
    process has already loaded the app. The broker's reader thread becomes a greenlet."""
    try:
        import gevent  # noqa: F401
    except ImportError:
        raise RuntimeError("--server gevent needs gevent: pip install 'ghostless[gevent]'") from None
    if not gunicorn_available() or not app_spec:
        raise RuntimeError("--server gevent needs gunicorn and --app (or GHOSTLESS_APP)")
    os.environ["GHOSTLESS_APP"] = app_spec
    _cap_held(connections)
    package = __name__.rsplit(".", 1)[0]
    args = [
        sys.executable,
        "-m",
        "gunicorn",
        "--worker-class",
        "gevent",
        "--workers",
        str(workers),
        "--worker-connections",
        str(connections),
        "--bind",
        f"{host}:{port}",
        "--timeout",
        "30",
        "--graceful-timeout",
        "5",
        "--keep-alive",
        str(KEEPALIVE),
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
