"""What every ``ghostless`` command shares: the --app/--redis-url/--json/--by options, loading
the app's Engine, one-line errors with their exit codes, logging set-up, JSON output.

Errors are one line on stderr, never a traceback: exit 2 for a bad argument (malformed JSON,
unknown task type, no app), exit 1 for an unknown task, a refused transition, an unreachable
Redis or a Redis that refused.
"""

from __future__ import annotations

import io
import json
import logging
import sys
from contextlib import contextmanager

import click
import redis

from ghostless.core import logs
from ghostless.core.app import AppError, ignored_url, load_app
from ghostless.core.errors import GhostlessError, IllegalTransition, TaskNotFound
from ghostless.core.keys import parse_task_id
from ghostless.core.logs import LOG_FORMATS

APP = click.option(
    "--app", "app_spec", envvar="GHOSTLESS_APP", show_envvar=True, help="module:attribute of the Engine."
)
REDIS = click.option(
    "--redis-url",
    envvar="GHOSTLESS_REDIS_URL",
    show_envvar=True,
    help="Redis URL: redis://, rediss://, unix://, redis+cluster:// or redis+sentinel:// (else the app's).",
)
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_LEVEL = click.option(
    "--log-level",
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
    default="INFO",
    show_default=True,
    envvar="GHOSTLESS_LOG_LEVEL",
    show_envvar=True,
    help="Least severe log messages shown.",
)
LOG_FORMAT = click.option(
    "--log-format",
    type=click.Choice(LOG_FORMATS, case_sensitive=False),
    default="text",
    show_default=True,
    envvar="GHOSTLESS_LOG_FORMAT",
    show_envvar=True,
    help="text, or json: one JSON object a line (time, level, logger, message, task_id, attempt).",
)
JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
BY = click.option("--by", default="cli", show_default=True, help="Who acts (recorded in the task's history).")


class Failed(click.ClickException):
    """Exit 1 with one line on stderr."""

    exit_code = 1


class BadArgument(click.ClickException):
    """Exit 2 with one line on stderr (click.UsageError would add usage lines)."""

    exit_code = 2


@contextmanager
def one_line_errors():
    """Turn the engine's and Redis's exceptions into Failed / BadArgument."""
    try:
        yield
    except click.ClickException:
        raise
    except AppError as e:
        raise BadArgument(str(e)) from None
    except (redis.ConnectionError, redis.TimeoutError) as e:
        raise Failed(f"cannot reach Redis: {e}") from None
    except TaskNotFound as e:
        raise Failed(str(e)) from None
    except IllegalTransition as e:
        raise Failed(f"refused: {e}") from None
    except ValueError as e:  # also UnknownTaskType, malformed JSON and a malformed --redis-url
        raise BadArgument(str(e)) from None
    except GhostlessError as e:
        raise Failed(str(e)) from None
    except redis.RedisError as e:
        raise Failed(f"Redis refused: {e}") from None


def load_engine(app_spec, redis_url, quiet: bool = False):
    """The app's Engine (``--app``, ``--redis-url``), its failures as one-line errors.

    ``quiet``: for one-shot commands, which print only their answer: the start-up notes of the
    server checks (persistence) belong to the long-running processes' logs and to ``ghostless check``.
    """
    if quiet:
        logger = logging.getLogger("ghostless")
        if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
            logger.addHandler(logging.NullHandler())
    with one_line_errors():
        engine = load_app(app_spec, redis_url)
    ignored = ignored_url(engine, redis_url)
    if ignored:
        click.echo(f"warning: {ignored}", err=True)
    return engine


def progress(length: int, label: str, hidden: bool = False):
    """A progress bar on stderr for a long operation over ``length`` items (``bar.update(n)`` as it
    goes): the share done and the time left. click draws it only on a terminal (a pipe or a log
    gets the label once); ``hidden`` (``--json``) draws nothing."""
    stream = io.StringIO() if hidden else sys.stderr
    return click.progressbar(length=length, label=label, file=stream, show_pos=True)


def setup_logging(level: str, fmt: str = "text") -> None:
    """Log to stderr at ``level`` in ``fmt`` (engine/core/logs.py)."""
    logs.configure(level, fmt)


def checked_task_id(task_id: str) -> str:
    """``task_id`` when it is shaped like one, else Failed (a task that cannot exist is not found)."""
    if parse_task_id(task_id) is None:
        raise Failed(f"task {task_id!r} not found (task ids look like images.0123456789abcdef0123)")
    return task_id


def dump(value) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=True, default=str))
