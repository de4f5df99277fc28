"""Admin commands of ``ghostless``: reclaim a stuck task, retry every FAILED of a type, drain a queue."""
from __future__ import annotations

import click

from .cli_ops import BY, BadArgument, _dump, _engine, _task_id, command


@command("reclaim")
@click.argument("task_id")
@BY
def reclaim_command(app_spec, redis_url, as_json, task_id, by):
    """Take a stuck PROCESSING task from its worker now; it runs again at once."""
    engine = _engine(app_spec, redis_url)
    state = engine.reclaim(_task_id(task_id), by=by)
    if as_json:
        _dump({"task": task_id, "status": state.value})
    else:
        click.echo(f"reclaimed {task_id}: now {state.value} (by {by})")


@command("retry-failed")
@click.argument("type_name", metavar="TYPE")
@BY
def retry_failed_command(app_spec, redis_url, as_json, type_name, by):
    """Reopen every FAILED task of TYPE (each retry audited)."""
    engine = _engine(app_spec, redis_url)
    count = engine.retry_failed(type_name, by=by)
    _dump({"type": type_name, "retried": count}) if as_json else click.echo(f"retried {count} {type_name} task(s)")


@command("drain")
@click.argument("queue")
@click.option("--resume", is_flag=True, help="Hand the queue's tasks to workers again.")
def drain_command(app_spec, redis_url, as_json, queue, resume):
    """Stop handing QUEUE's tasks to workers (running and queued ones finish); --resume undoes it."""
    engine = _engine(app_spec, redis_url)
    if queue not in engine.queues():
        raise BadArgument(f"no queue {queue!r} (queues: {', '.join(engine.queues()) or 'none'})")
    engine.drain(queue, not resume)
    if as_json:
        _dump({"queue": queue, "draining": not resume})
    else:
        click.echo(f"{queue}: {'resumed' if resume else 'draining (new and returning tasks wait in PENDING)'}")
