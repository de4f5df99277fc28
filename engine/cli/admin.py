"""Admin commands of ``ghostless``: reclaim a stuck task, retry every FAILED of a type, drain a queue,
set a user's submit quota, delete other releases' Lua libraries."""

from __future__ import annotations

from contextlib import ExitStack

import click

from ghostless.cli.common import (
    APP,
    BY,
    JSON,
    REDIS,
    BadArgument,
    checked_task_id,
    dump,
    load_engine,
    one_line_errors,
    progress,
)
from ghostless.cli.root import command, user_group
from ghostless.core.quota import FIELDS


@command("reclaim")
@click.argument("task_id")
@BY
def reclaim_command(app_spec, redis_url, as_json, task_id, by):
    """Take a stuck PROCESSING task from its worker now; it runs again at once."""
    engine = load_engine(app_spec, redis_url, quiet=True)
    state = engine.reclaim(checked_task_id(task_id), by=by)
    if as_json:
        dump({"task": task_id, "status": state.value})
    else:
        click.echo(f"reclaimed {task_id}: now {state.value} (by {by})")


@command("retry-failed")
@click.argument("type_name", metavar="TYPE")
@BY
def retry_failed_command(app_spec, redis_url, as_json, type_name, by):
    """Reopen every FAILED task of TYPE (each retry audited)."""
    engine = load_engine(app_spec, redis_url, quiet=True)
    with ExitStack() as stack:
        bars = []

        def start(total: int) -> None:
            bars.append(stack.enter_context(progress(total, f"retrying {total} FAILED {type_name}", hidden=as_json)))

        count = engine.retry_failed(type_name, by=by, on_total=start, on_each=lambda _id: bars[0].update(1))
    dump({"type": type_name, "retried": count}) if as_json else click.echo(f"retried {count} {type_name} task(s)")


@command("drain")
@click.argument("queue")
@click.option("--resume", is_flag=True, help="Hand the queue's tasks to workers again.")
def drain_command(app_spec, redis_url, as_json, queue, resume):
    """Stop handing QUEUE's tasks to workers (running and queued ones finish); --resume undoes it."""
    engine = load_engine(app_spec, redis_url, quiet=True)
    if queue not in engine.queues():
        raise BadArgument(f"no queue {queue!r} (queues: {', '.join(engine.queues()) or 'none'})")
    engine.drain(queue, not resume)
    if as_json:
        dump({"queue": queue, "draining": not resume})
    else:
        click.echo(f"{queue}: {'resumed' if resume else 'draining (new and returning tasks wait in PENDING)'}")


@command("prune-scripts")
def prune_scripts_command(app_spec, redis_url, as_json):
    """Delete the Lua function libraries of other ghostless releases from Redis (run after an
    upgrade, once no process of the older release runs; one that still does loads its own again)."""
    engine = load_engine(app_spec, redis_url, quiet=True)
    deleted = engine.scripts.prune_libraries()
    if as_json:
        dump({"deleted": deleted})
    else:
        click.echo(f"deleted {len(deleted)} librar{'y' if len(deleted) == 1 else 'ies'} of other releases")


def _limit(kind, text):
    """A quota option's value: a number, or ``none`` for no limit."""
    if text is None or text.lower() == "none":
        return None if text is None else "none"
    try:
        return kind(text)
    except ValueError:
        raise BadArgument(f"a quota limit must be a number or 'none', got {text!r}") from None


def _quota_options(fn):
    for name in reversed(FIELDS):
        fn = click.option(
            f"--{name.replace('_', '-')}",
            name,
            metavar="N|none",
            help="Seconds of the rate's window." if name == "per" else None,
        )(fn)
    return fn


@user_group.command("quota")
@APP
@REDIS
@JSON
@click.argument("name")
@_quota_options
@click.option("--clear", is_flag=True, help="Forget NAME's own limits: the web app's defaults apply.")
def user_quota_command(app_spec, redis_url, as_json, name, clear, **limits):
    """Show or set NAME's own submit limits (per queue; 'none' = no limit); unset ones keep the web
    app's defaults. A web process sees a change within GHOSTLESS_QUOTA_CACHE seconds."""
    with one_line_errors():
        users = load_engine(app_spec, redis_url, quiet=True).users
        if users.get(name) is None:
            raise BadArgument(f"no user {name!r}")
        given = {k: _limit(float if k == "per" else int, v) for k, v in limits.items() if v is not None}
        if clear or given:
            current = {} if clear else users.quota_overrides(name)
            current.update({k: None if v == "none" else v for k, v in given.items()})
            users.set_quota(name, current)
        quota = users.quota_overrides(name)
    if as_json:
        dump(quota)
    else:
        click.echo(
            f"{name}: "
            + (
                ", ".join(f"{k}={'none' if v is None else v}" for k, v in sorted(quota.items()))
                or "the web app's defaults"
            )
        )
