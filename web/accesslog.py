"""Access logs without one-time login codes: ``/login/<code>`` path segments become
``/login/[redacted]`` in every field of a logged request (request line, path, Referer, ...).

A login link's code is a credential until used (and the link may be opened by a mail scanner
first): it must not sit in log files. Used by gunicorn (``RedactingLogger``, both servers) and
by Flask's development server (``RedactLoginCodes`` on the ``werkzeug`` logger).
"""

from __future__ import annotations

import logging
import re

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
        """gunicorn's logger, with login codes redacted from every access-log atom."""

        def atoms(self, resp, req, environ, request_time):
            atoms = super().atoms(resp, req, environ, request_time)
            return {k: redact(v) if isinstance(v, str) else v for k, v in atoms.items()}
