"""Access logs without one-time login codes: ``/login/<code>`` path segments become
``/login/[redacted]`` in every field of a logged request (request line, path, Referer, ...).

A login link's code is a credential until used (and the link may be opened by a mail scanner
first): it must not sit in log files. Used by gunicorn (``RedactingLogger``, both servers) and
by Flask's development server (``RedactLoginCodes`` on the ``werkzeug`` logger).
"""

from __future__ import annotations

import logging
import os
import re

from ghostless.core import logs

_CODE = re.compile(r"(/login/)[^/?#\s\"]+")


def redact(text: str) -> str:
    return _CODE.sub(r"\1[redacted]", text)


class RedactLoginCodes(logging.Filter):
    """A logging filter redacting login codes in a record's message and arguments."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        return True


try:
    from gunicorn.glogging import Logger
except ImportError:  # pragma: no cover - the development server needs only the filter
    Logger = None

if Logger is not None:

    class RedactingLogger(Logger):
        """gunicorn's logger, with login codes redacted from every access-log atom; with
        ``GHOSTLESS_LOG_FORMAT=json`` (set by ``ghostless web --log-format json``) its error and
        access lines, and the app's own, are one JSON object a line (engine/core/logs.py)."""

        def setup(self, cfg):
            super().setup(cfg)
            fmt = os.environ.get("GHOSTLESS_LOG_FORMAT")
            if fmt not in logs.LOG_FORMATS:
                return
            if fmt == "json":
                for logger in (self.error_log, self.access_log):
                    for handler in logger.handlers:
                        handler.setFormatter(logs.JsonFormatter())
            # The gevent server runs in a fresh interpreter: the app's loggers need a root handler.
            logs.configure(os.environ.get("GHOSTLESS_LOG_LEVEL") or "INFO", fmt)

        def atoms(self, resp, req, environ, request_time):
            atoms = super().atoms(resp, req, environ, request_time)
            return {k: redact(v) if isinstance(v, str) else v for k, v in atoms.items()}
