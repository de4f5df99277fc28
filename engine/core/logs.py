"""Log lines for people (``text``) or for log pipelines (``json``: one JSON object a line).

Every long-running command takes ``--log-format text|json`` (env ``GHOSTLESS_LOG_FORMAT``). A JSON
line carries ``time`` (UTC, ISO 8601, ms), ``level``, ``logger`` and ``message``, every field the
call passed with ``extra=`` (the task's log calls pass ``task_id`` and ``attempt``: ``for_task``),
and ``exception`` with the traceback when there is one.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"
# What every LogRecord has: anything else on a record came from the call's ``extra=``.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


def encodable(text: str) -> str:
    """``text`` with what UTF-8 cannot carry escaped (a file name decoded with surrogateescape,
    say): a log line or a stored reason that holds it raw fails where it is written."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class EncodableTracebacks(logging.Filter):
    """On a logger whose records carry a task's exception: its traceback formatted once, escaped as
    ``encodable`` (the message of the exception's last line is the task's own text). Formatters
    reuse it (``exc_text``); the exception itself stays on the record for those that read it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and not record.exc_text:
            record.exc_text = encodable(logging.Formatter().formatException(record.exc_info))
        return True


def for_task(task_id: str | None, attempt: int | None = None, **more) -> dict:
    """``extra=`` of a log call about a task (and attempt): fields of its JSON line."""
    fields = {"task_id": task_id, **more}
    if attempt is not None:
        fields["attempt"] = attempt
    return fields


def failed_for_good(logger: logging.Logger, task_id: str, why: str, attempt: int | None = None, exc_info=None, **more):
    """The one ERROR line of a task failed for good, whichever process recorded it (the runner, a
    fork worker's parent, the sweeper): ``task <id> failed for good[ at attempt <n>]: <why>``, the
    text an alert matches (docs/operations.md)."""
    at = "" if attempt is None else f" at attempt {attempt}"
    logger.error(
        "task %s failed for good%s: %s", task_id, at, why, exc_info=exc_info, extra=for_task(task_id, attempt, **more)
    )


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, the call's extra fields, exception."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update({k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")})
        if record.exc_info:
            line["exception"] = record.exc_text or self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def formatter(fmt: str = "text") -> logging.Formatter:
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {fmt!r}")
    return JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT)


def configure(level: str = "INFO", fmt: str = "text") -> None:
    """Root logging on stderr in ``fmt`` at ``level`` (once: a root that has handlers is kept);
    in json, Python's warnings too."""
    handler = logging.StreamHandler()
    handler.setFormatter(formatter(fmt))
    logging.basicConfig(level=level.upper(), handlers=[handler])
    if fmt == "json":
        logging.captureWarnings(True)  # a Python warning is a line too: logger py.warnings
