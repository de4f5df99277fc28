"""Serving the app: gunicorn with threaded (gthread) workers when installed, else Flask's
threaded development server with a warning.

Each SSE stream or long-poll holds one worker thread while it is open, so the number of
concurrent streams per process is ``threads``; every process runs one stream reader
thread (web/broker.py) whatever the number of streams. Workers build their app after the
fork (no preload), so no Redis connection or thread crosses a fork.
"""
from __future__ import annotations

import logging
import os

log = logging.getLogger("ghostless.web")


def gunicorn_available() -> bool:
    try:
        import gunicorn.app.base  # noqa: F401
    except ImportError:
        return False
    return True


def serve(engine, app_spec: str | None, host: str, port: int, workers: int, threads: int) -> None:
    """Run the web app until interrupted. ``engine`` is the already loaded app (the dev
    server serves it; gunicorn workers load ``app_spec`` again, each in its own process)."""
    if gunicorn_available():
        if app_spec:
            os.environ["GHOSTLESS_APP"] = app_spec
        _gunicorn(host, port, workers, threads)
        return
    log.warning("gunicorn is not installed: serving with Flask's development server (one process, "
                "threaded); pip install gunicorn for production")
    from . import create_app

    create_app({"GHOSTLESS_ENGINE": engine}).run(host=host, port=port, threaded=True)


def _gunicorn(host: str, port: int, workers: int, threads: int) -> None:
    from gunicorn.app.base import BaseApplication

    class App(BaseApplication):
        def load_config(self):
            settings = {"bind": f"{host}:{port}", "workers": workers, "threads": threads,
                        "worker_class": "gthread", "timeout": 30, "graceful_timeout": 5,
                        "accesslog": "-", "errorlog": "-"}
            # gunicorn >= 27's control socket has one default path per user: two servers on
            # one host would contend for it, and nothing here uses it.
            if "control_socket_disable" in self.cfg.settings:
                settings["control_socket_disable"] = True
            for key, value in settings.items():
                self.cfg.set(key, value)

        def load(self):
            from . import create_app

            return create_app()

    App().run()
