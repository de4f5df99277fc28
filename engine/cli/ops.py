"""Operator commands of ``ghostless``: submit, show, cancel, edit, retry, tail, stats, check, scheduler.

They hang on the ``main`` group of engine/cli/root.py (``command``). Each prints a table for people,
or JSON with ``--json`` for scripts. Errors are one line on stderr, never a traceback
(engine/cli/common.py): exit 2 for a bad argument (malformed JSON, unknown task type, no app),
exit 1 for an unknown task, a refused transition, an unreachable Redis or violated invariants.
cancel, edit and retry act as an admin and record ``--by`` (default ``cli``) in the history.
"""

from __future__ import annotations

import json
import logging
import sys

import click

from ghostless.cli.common import (
    BY,
    LOG_FORMAT,
    LOG_LEVEL,
    BadArgument,
    checked_task_id,
    dump,
    load_engine,
    progress,
    setup_logging,
)
from ghostless.cli.format import event_line, history_table, stats_tables, task_block, task_table, when
from ghostless.cli.root import command
from ghostless.core import check as check_mod
from ghostless.core.clock import server_ms
from ghostless.core.errors import TaskNotFound
from ghostless.core.index import count as index_count
from ghostless.core.server import persistence_notes
from ghostless.core.states import State


def _args(text: str) -> dict:
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:  # RecursionError: nested too deep
        raise BadArgument(f"--args is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise BadArgument(f"--args must be a JSON object, got {type(value).__name__}")
    return value


def _get(engine, task_id):
    task = engine.get(checked_task_id(task_id))
    if task is None:
        raise TaskNotFound(task_id)
    return task


# -- task commands --------------------------------------------------------------------------------
@command("submit")
@click.argument("type_name", metavar="TYPE")
@click.option("--args", "args_json", default="{}", show_default=True, help="Task arguments: a JSON object.")
@click.option("--owner", default="cli", show_default=True, help="Owner of the task.")
@click.option("--idempotency-key", help="Submitting again with the same key returns the same task.")
@click.option("--priority", type=int, default=0, show_default=True)
@click.option("--delay", type=float, default=0, show_default=True, help="Seconds before it may be dispatched.")
@click.option("--depends-on", multiple=True, help="A task (same queue) that must succeed first; repeatable.")
@click.option("--due-in", type=float, help="Seconds by which it should have ended (else: overdue).")
@click.option("--escalate-in", type=float, help="Seconds after which an unfinished task escalates.")
@click.option("--expires-in", type=float, help="Seconds within which it must start, else it is cancelled (expired).")
@click.option("--notify-url", help="Webhook for its notifications (the app must enable them).")
@click.option(
    "--from-file",
    type=click.File("r"),
    help="Submit one task per line of this file ('-': stdin), each line a JSON object of arguments; "
    "the other options apply to every task (--idempotency-key K: line N gets the key K:N).",
)
def submit_command(
    app_spec,
    redis_url,
    as_json,
    type_name,
    args_json,
    owner,
    idempotency_key,
    priority,
    delay,
    depends_on,
    due_in,
    escalate_in,
    expires_in,
    notify_url,
    from_file,
):
    """Submit a task of a registered TYPE (or one per line of --from-file)."""
    if from_file is not None and args_json != "{}":
        raise BadArgument("give --args or --from-file, not both")
    lines = _lines(from_file) if from_file is not None else [(0, _args(args_json))]
    engine = load_engine(app_spec, redis_url, quiet=True)
    options = dict(
        owner=owner,
        priority=priority,
        delay=delay,
        depends_on=list(depends_on) or None,
        due_in=due_in,
        escalate_in=escalate_in,
        expires_in=expires_in,
        notify_url=notify_url,
    )
    if from_file is None:
        task = engine.submit(type_name, lines[0][1], idempotency_key=idempotency_key, **options)
        dump(task.to_dict()) if as_json else click.echo(_submitted(task))
        return
    tasks = []
    with progress(len(lines), f"submitting {len(lines)} {type_name}", hidden=as_json) as bar:
        for number, args in lines:
            key = f"{idempotency_key}:{number}" if idempotency_key else None
            try:
                tasks.append(engine.submit(type_name, args, idempotency_key=key, **options))
            except ValueError as e:  # this line's arguments: the lines before it are submitted
                raise BadArgument(f"line {number}: {e} ({len(tasks)} submitted before it)") from None
            bar.update(1)
    if as_json:
        dump([t.to_dict() for t in tasks])
    else:
        click.echo("\n".join(_submitted(t) for t in tasks) or "nothing to submit (no lines)")


def _submitted(task) -> str:
    return f"submitted {task.id} ({task.type}, {task.status.value}, owner {task.owner})"


def _lines(stream) -> list[tuple[int, dict]]:
    """(line number, arguments) of each non-blank line; every line checked before any is submitted."""
    out = []
    for number, line in enumerate(stream, start=1):
        if line.strip():
            try:
                out.append((number, _args(line)))
            except BadArgument as e:
                raise BadArgument(f"line {number}: {e.message.replace('--args', 'the line')}") from None
    return out


@command("show")
@click.argument("task_id")
def show_command(app_spec, redis_url, as_json, task_id):
    """A task and its history."""
    engine = load_engine(app_spec, redis_url, quiet=True)
    task = _get(engine, task_id)
    history = engine.history(task_id)
    if as_json:
        dump({"task": task.to_dict(), "history": [e.to_dict() for e in history]})
        return
    click.echo(task_block(task))
    click.echo(f"\nhistory ({len(history)} {'entry' if len(history) == 1 else 'entries'}, oldest first)")
    click.echo(history_table(history))


@command("list")
@click.option("--status", type=click.Choice([s.value for s in State], case_sensitive=False), help="Only this state.")
@click.option("--type", "type_name", help="Only tasks of this type.")
@click.option("--queue", help="Only this queue's tasks.")
@click.option("--owner", help="Only this owner's tasks (default: every owner's).")
@click.option("--limit", type=click.IntRange(1, 500), default=50, show_default=True, help="Tasks on a page.")
@click.option("--cursor", help="The next page: the cursor the previous page printed.")
def list_command(app_spec, redis_url, as_json, status, type_name, queue, owner, limit, cursor):
    """Tasks, newest first, with filters; one page at a time (--cursor for the next)."""
    engine = load_engine(app_spec, redis_url, quiet=True)
    tasks, next_cursor = engine.list_tasks(
        owner=owner, status=status and status.upper(), type=type_name, queue=queue, limit=limit, cursor=cursor
    )
    if as_json:
        dump({"tasks": [t.to_dict() for t in tasks], "next_cursor": next_cursor})
        return
    if not tasks:
        click.echo("no tasks")
    else:
        click.echo(task_table(tasks))
    if next_cursor:
        click.echo(f"\nmore: --cursor {next_cursor}")


@command("cancel")
@click.argument("task_id")
@BY
@click.option("--reason", default="", help="Why (default: cancelled by <by>).")
def cancel_command(app_spec, redis_url, as_json, task_id, by, reason):
    """Cancel a task that has not ended (as an admin)."""
    engine = load_engine(app_spec, redis_url, quiet=True)
    before = _get(engine, task_id)
    engine.cancel(task_id, by=by, admin=True, reason=reason)
    task = _get(engine, task_id)
    if as_json:
        dump(task.to_dict())
    elif before.status == task.status:
        click.echo(f"{task_id} was already {task.status.value}")
    else:
        click.echo(f"cancelled {task_id}: {before.status.value} -> {task.status.value} (by {by})")


@command("edit")
@click.argument("task_id")
@click.option("--args", "args_json", required=True, help="The new arguments: a JSON object.")
@BY
def edit_command(app_spec, redis_url, as_json, task_id, args_json, by):
    """Replace a task that has not ended by a new one with other arguments (one atomic step)."""
    args = _args(args_json)
    engine = load_engine(app_spec, redis_url, quiet=True)
    new = engine.edit(checked_task_id(task_id), args, by=by, admin=True)
    if as_json:
        dump({"old": _get(engine, task_id).to_dict(), "new": new.to_dict()})
    else:
        click.echo(f"edited {task_id}: CANCELLED, superseded by {new.id} ({new.status.value}, by {by})")


@command("retry")
@click.argument("task_id")
@BY
def retry_command(app_spec, redis_url, as_json, task_id, by):
    """Reopen a FAILED or TIMEOUT task with fresh attempts (audited)."""
    engine = load_engine(app_spec, redis_url, quiet=True)
    before = _get(engine, task_id)
    engine.retry(task_id, by=by, admin=True)
    task = _get(engine, task_id)
    if as_json:
        dump(task.to_dict())
    else:
        click.echo(f"retried {task_id}: {before.status.value} -> {task.status.value} (by {by})")


# -- watching -------------------------------------------------------------------------------------
@command("tail")
@click.option(
    "--since",
    default="$",
    show_default=True,
    help="Stream id to start after: $ for new events only, 0 for every event still kept.",
)
@click.option("--task", "task_id", help="Only this task's events; ends after its terminal state.")
@click.option(
    "--follow/--no-follow",
    default=True,
    show_default=True,
    help="Keep waiting for new events (XREAD BLOCK) or stop at the end of the streams.",
)
def tail_command(app_spec, redis_url, as_json, since, task_id, follow):
    """Print queue events as they happen, one line each (Ctrl-C stops)."""
    from .tail import Tail

    engine = load_engine(app_spec, redis_url, quiet=True)
    tail = Tail(engine, since=since, task_id=checked_task_id(task_id) if task_id else None)
    if task_id and _get(engine, task_id).terminal:
        follow = False  # print what the streams still hold about it, then stop
    if follow:
        click.echo(f"following {tail.describe()} (Ctrl-C to stop)", err=True)
    try:
        for ev in tail.events(follow=follow):
            click.echo(json.dumps(ev, sort_keys=True) if as_json else event_line(ev))
    except KeyboardInterrupt:
        pass  # Ctrl-C is how a follow ends: a clean exit, not an error


@command("stats")
def stats_command(app_spec, redis_url, as_json):
    """Counts per queue and state, time in state and stage, failures by kind (no scan)."""
    stats = load_engine(app_spec, redis_url, quiet=True).stats()
    if as_json:
        dump(stats)
    elif not stats:
        click.echo("no queues yet")
    else:
        click.echo(stats_tables(stats))


@command("check")
@click.pass_context
def check_command(ctx, app_spec, redis_url, as_json):
    """Verify the invariants on every task (a scan); exit 1 when any is violated."""
    engine = load_engine(app_spec, redis_url, quiet=True)
    queues = engine.queues()
    total = sum(index_count(engine.redis, engine.keys.queue_index(q)) for q in queues)
    show_bar = sys.stderr.isatty() and total > check_mod.CHUNK
    with click.progressbar(length=total, label="checking tasks", file=sys.stderr, hidden=not show_bar) as bar:
        problems = check_mod.check(engine, progress=lambda queue, n: bar.update(n))
    lost = engine.data_epoch.problem(queues)  # never writes the marker: a check cannot adopt a loss
    problems = ([lost] if lost else []) + problems
    epoch, since_ms = engine.data_epoch.current()
    notes = [msg for _, msg in persistence_notes(engine.redis)]
    if epoch:
        notes.append(
            f"data epoch {epoch} since {when(since_ms / 1000) if since_ms else '?'}: a loss of data "
            "before then is not visible here"
        )
    if as_json:
        dump(
            {
                "healthy": not problems,
                "violations": problems,
                "queues": queues,
                "tasks": total,
                "server": notes,
                "data_epoch": epoch,
            }
        )
    else:
        for note in notes:
            click.echo(f"redis: {note}")
        for p in problems:
            click.echo(f"VIOLATION {p}")
        verdict = f"{len(problems)} invariant violation(s)" if problems else "healthy: every invariant holds"
        click.echo(
            f"{verdict} ({len(queues)} queue(s), {total} task(s) checked at {when(server_ms(engine.redis) / 1000)})"
        )
    ctx.exit(1 if problems else 0)


# -- periodic tasks -------------------------------------------------------------------------------
@command("scheduler")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.05),
    default=1.0,
    show_default=True,
    help="Seconds between ticks (a period starts at most this late).",
)
@click.option("--burst", is_flag=True, help="Run one tick (fire what is due now) and exit.")
@click.option("--list", "list_only", is_flag=True, help="Print the schedules and their periods, then exit.")
@LOG_LEVEL
@LOG_FORMAT
def scheduler_command(app_spec, redis_url, as_json, interval, burst, list_only, log_level, log_format):
    """Fire the app's periodic tasks, exactly once per period (run any number of copies)."""
    from ghostless.periodic.schedules import describe, schedules

    if not list_only:
        setup_logging(log_level, log_format)  # before the app loads: its start-up checks log what Redis would lose
    engine = load_engine(app_spec, redis_url, quiet=list_only)
    if not schedules(engine) and list_only:
        dump([]) if as_json else click.echo("no periodic tasks in the app")
        return
    if not schedules(engine):
        raise BadArgument("no periodic tasks in the app: register them with engine.periodic(name, cron=...)")
    if list_only:
        rows = describe(engine)
        if as_json:
            dump(rows)
            return
        for r in rows:
            click.echo(
                f"{r['name']}  cron {r['cron']!r}  type {r['type']}  owner {r['owner']}  "
                f"next {r['next_period']}  last fired {r['last_fired'] or '-'} ({r['last_task'] or '-'})"
            )
        return
    from ghostless.periodic.scheduler import run_scheduler

    log = logging.getLogger("ghostless.scheduler")
    for r in describe(engine):
        log.info(
            "schedule %s: cron %r (UTC), type %s, next period %s", r["name"], r["cron"], r["type"], r["next_period"]
        )
    run_scheduler(engine, interval, burst=burst)
