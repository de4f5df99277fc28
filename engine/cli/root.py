"""The ``ghostless`` command (also ``python -m ghostless``): the ``main`` group, its long-running
processes (worker, sweeper, web, demo) and the ``user`` group. ops.py and admin.py add the rest
through ``command``."""

from __future__ import annotations

import functools
import logging
import os
import signal
import threading

import click

from ghostless.cli.common import (
    APP,
    JSON,
    LOG_FORMAT,
    LOG_LEVEL,
    REDIS,
    dump,
    load_engine,
    one_line_errors,
    setup_logging,
)
from ghostless.web.serve import CONNECTIONS, SERVERS


@click.group(name="ghostless", context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ghostless", prog_name="ghostless", message="%(prog)s %(version)s")
def main():
    """ghostless: tasks in Redis that never vanish.

    Every command finds the app's Engine through --app or GHOSTLESS_APP (module:attribute) and
    Redis through --redis-url or GHOSTLESS_REDIS_URL; `ghostless COMMAND -h` lists its options.
    """


def command(name: str, **kw):
    """A ``main`` subcommand with --app, --redis-url and --json, whose errors are one line."""

    def decorate(fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            with one_line_errors():
                return fn(*args, **kwargs)

        return main.command(name, **kw)(APP(REDIS(JSON(run))))

    return decorate


@main.command("worker")
@APP
@REDIS
@click.argument("queues", nargs=-1)
@click.option(
    "--worker-class",
    type=click.Choice(["fork", "simple"]),
    default="fork",
    show_default=True,
    help="fork: each attempt in a work-horse process (isolation); simple: in the worker itself.",
)
@click.option("--burst", is_flag=True, help="Stop when the queues are empty.")
@click.option(
    "--name",
    help="Worker name (default: 16 random hex digits, one per worker; with --concurrency: NAME-1, NAME-2, ...).",
)
@click.option(
    "--concurrency",
    "-c",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    envvar="GHOSTLESS_CONCURRENCY",
    show_envvar=True,
    help="Workers run by this command, each an RQ worker of its own under one supervisor: one "
    "SIGTERM or Ctrl-C stops them all gracefully, a crashed one is started again.",
)
@click.option(
    "--rq-queue",
    "rq_queues",
    multiple=True,
    metavar="NAME",
    help="Also serve this plain RQ queue (repeatable): its jobs run exactly as RQ runs them, after "
    "the ghostless queues in priority (docs/migrating.md).",
)
@click.option(
    "--rq-serializer",
    default="pickle",
    show_default=True,
    help="How the plain RQ queues' jobs were serialized: pickle (RQ's default), json, or module.Class.",
)
@LOG_LEVEL
@LOG_FORMAT
def worker_command(
    app_spec, redis_url, queues, worker_class, burst, name, concurrency, rq_queues, rq_serializer, log_level, log_format
):
    """Run RQ workers for the app's queues (all registered queues by default)."""
    from ghostless.execution.worker import plain_rq_queues, plain_rq_serializer, run_worker, worker_queues

    setup_logging(log_level, log_format)  # before the app loads: its start-up checks log
    engine = load_engine(app_spec, redis_url)
    try:  # refused here, once, not in every worker
        names = worker_queues(engine, list(queues) or None, worker_class)
        legacy = plain_rq_queues(engine, list(rq_queues))
        plain_rq_serializer(rq_serializer)
    except (ValueError, ImportError, AttributeError, NotImplementedError) as e:
        raise click.UsageError(str(e)) from None

    def work(index: int | None = None) -> int:
        engine.data_epoch.watch()  # logs an error if Redis loses its data while this worker runs
        own = f"{name}-{index + 1}" if name and index is not None else name
        run_worker(
            engine,
            names,
            worker_class,
            burst=burst,
            name=own,
            logging_level=log_level,
            rq_queues=legacy,
            rq_serializer=rq_serializer,
        )
        return 0

    if concurrency == 1:
        work()
        return
    from ghostless.execution.supervisor import Supervisor

    raise SystemExit(Supervisor(work, concurrency, burst=burst).run())


@main.command("sweeper")
@APP
@REDIS
@click.option(
    "--interval",
    type=click.FloatRange(min=0.01),
    default=1.0,
    show_default=True,
    help="Longest sleep between ticks (seconds); it wakes earlier for the next deadline.",
)
@click.option("--batch", type=click.IntRange(min=1), default=1000, show_default=True)
@click.option("--name", help="Sweeper name in the sweeper registry (default: <hostname>.<pid>).")
@LOG_LEVEL
@LOG_FORMAT
def sweeper_command(app_spec, redis_url, interval, batch, name, log_level, log_format):
    """Reclaim expired leases, promote due retries, re-dispatch lost jobs, purge old tasks."""
    from ghostless.core.sweep import run_sweeper
    from ghostless.core.sweepers import sweeper_name

    setup_logging(log_level, log_format)  # before the app loads: its start-up checks log
    engine = load_engine(app_spec, redis_url)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    name = name or sweeper_name()
    logging.getLogger("ghostless.sweeper").info(
        "sweeper started: queues %s, name %s", ", ".join(engine.queues()) or "-", name, extra={"sweeper": name}
    )
    run_sweeper(engine, interval, batch, stop, name=name)


@main.command("demo", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.pass_context
def demo_command(ctx):
    """Run everything on a private Redis with demo tasks (--once: until all are done)."""
    from ghostless.demo.run import main as demo_main

    ctx.exit(demo_main(ctx.args))


@main.command("web")
@APP
@REDIS
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="Processes (each with one event stream reader).",
)
@click.option(
    "--server",
    type=click.Choice(SERVERS),
    default="gevent",
    show_default=True,
    help="gunicorn worker class: gevent (an event loop: thousands of open streams per process) "
    "or gthread (a thread per open stream: for debugging).",
)
@click.option(
    "--connections",
    type=click.IntRange(min=1),
    default=CONNECTIONS,
    show_default=True,
    help="Open connections per process (gevent): streams, long-polls and short requests.",
)
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=32,
    show_default=True,
    help="Threads per process (gthread): each open SSE stream or long-poll holds one.",
)
@LOG_LEVEL
@LOG_FORMAT
def web_command(app_spec, redis_url, host, port, workers, threads, server, connections, log_level, log_format):
    """Serve the web app and JSON API (gunicorn gevent workers; Flask's dev server without gunicorn)."""
    from ghostless.web.serve import serve

    setup_logging(log_level, log_format)  # before the app loads: its start-up checks log
    engine = load_engine(app_spec, redis_url)
    if redis_url:
        os.environ["GHOSTLESS_REDIS_URL"] = redis_url  # gunicorn workers load the app again
    # gunicorn's logger (web/accesslog.py) formats its lines and the app's by these, also in the
    # fresh interpreter of the gevent server.
    os.environ["GHOSTLESS_LOG_FORMAT"], os.environ["GHOSTLESS_LOG_LEVEL"] = log_format, log_level.upper()
    try:
        serve(engine, app_spec, host, port, workers, threads, server=server, connections=connections)
    except RuntimeError as e:
        raise click.UsageError(str(e)) from None


@main.group("user")
def user_group():
    """API users and their tokens."""


@user_group.command("add")
@APP
@REDIS
@click.argument("name")
@click.option("--admin", is_flag=True, help="May see and change every user's tasks.")
def user_add(app_spec, redis_url, name, admin):
    """Create NAME (or keep it) and print a new API token: it is shown only this once."""
    try:
        token = load_engine(app_spec, redis_url).users.add(name, admin=admin)
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    click.echo(token)
    click.echo(f"token for {name}{' (admin)' if admin else ''}: store it now, it is not shown again", err=True)


@user_group.command("list")
@APP
@REDIS
@JSON
def user_list(app_spec, redis_url, as_json):
    """Every user, whether admin, and how many tokens they hold."""
    users = load_engine(app_spec, redis_url, quiet=True).users.list()
    if as_json:
        dump([{"name": u.name, "admin": u.admin, "tokens": u.tokens, "created_at": u.created_at} for u in users])
        return
    for user in users:
        click.echo(f"{user.name}\t{'admin' if user.admin else 'user'}\ttokens={user.tokens}")


@user_group.command("login-link")
@APP
@REDIS
@click.argument("name")
@click.option("--base-url", default="http://127.0.0.1:8000", show_default=True)
@click.option("--ttl", type=click.FloatRange(min=1, max=86400), default=600, show_default=True)
def user_login_link(app_spec, redis_url, name, base_url, ttl):
    """Print a one-time link that logs a browser in as NAME (valid once, for --ttl seconds)."""
    try:
        code = load_engine(app_spec, redis_url).users.login_code(name, ttl)
    except ValueError as e:
        raise click.ClickException(str(e)) from None
    click.echo(f"{base_url.rstrip('/')}/login/{code}")


@user_group.command("revoke")
@APP
@REDIS
@click.argument("name")
def user_revoke(app_spec, redis_url, name):
    """Remove NAME and every token of theirs (their sessions end too)."""
    if not load_engine(app_spec, redis_url).users.revoke(name):
        raise click.ClickException(f"no user {name!r}")
    click.echo(f"revoked {name}")
