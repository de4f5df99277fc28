"""One sweeper tick: act on what is due, and only on that.

Each queue's ``due`` script lists, by server time, a batch from each deadline
set; the per-task scripts then act as compare-and-set (NOT_DUE when another
sweeper or the lease holder got there first), so several sweepers may run at once.
Calls for one batch share a pipeline: one round trip per batch, not per task.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from ghostless.core import dependencies as deps, notify, sweepers

from .clock import retry_delay
from .errors import Code, GhostlessError, UnknownTaskType
from .index import route_command, route_of
from .logs import failed_for_good, for_task
from .replies import RESOLVE_MARK
from .states import State
from .steps import Commands
from .text import text, text_or_none

PURGE_ROUTES = 3  # reads of a task's index pages per sweep, each after a submit moved a head (MOVED)
LISTEN_WAIT = 2.0  # s a starting sweeper waits for its wake-up channel before its first look (Wake)
log = logging.getLogger("ghostless.sweeper")


@dataclass
class SweepReport:
    expired: int = 0  # PROCESSING -> TIMEOUT (-> RETRY_WAITING)
    timed_out: int = 0  # of those, ended in TIMEOUT for good
    promoted: int = 0  # RETRY_WAITING -> PENDING
    dispatched: int = 0  # PENDING/QUEUED handed to the executor again
    refreshed: int = 0  # QUEUED whose executor job still exists: checked again later
    purged: int = 0  # terminal tasks past retention, deleted
    resolved: int = 0  # tasks waiting on parents that became ready or were cancelled
    notified: int = 0  # webhook notifications handed to delivery tasks
    overdue: int = 0  # unfinished past their due time: event recorded
    escalated: int = 0  # unfinished past their escalation time: event recorded
    lapsed: int = 0  # not started by their expiry: CANCELLED (expired)
    next_in: float | None = None  # seconds until the earliest deadline of any queue
    reasons: dict = field(default_factory=dict)  # expiry reason -> count

    def progress(self) -> int:
        return (
            self.expired
            + self.promoted
            + self.dispatched
            + self.refreshed
            + self.purged
            + self.overdue
            + self.escalated
            + self.resolved
            + self.notified
            + self.lapsed
        )

    @property
    def acted(self) -> bool:
        return bool(
            self.expired
            or self.promoted
            or self.dispatched
            or self.purged
            or self.overdue
            or self.escalated
            or self.resolved
            or self.notified
            or self.lapsed
        )

    def summary(self) -> str:
        parts = [
            f"{n}={getattr(self, n)}"
            for n in (
                "expired",
                "timed_out",
                "promoted",
                "dispatched",
                "purged",
                "resolved",
                "overdue",
                "escalated",
                "lapsed",
                "notified",
            )
            if getattr(self, n)
        ]
        if self.reasons:
            parts.append("reasons=" + ",".join(f"{k}:{v}" for k, v in sorted(self.reasons.items())))
        return "sweep " + " ".join(parts)


def sweep(engine, batch: int = 1000) -> SweepReport:
    if batch < 1:
        raise ValueError("batch must be at least 1")
    report = SweepReport()
    engine.report_lost_jobs()  # lost jobs whose report Redis refused earlier (engine.job_lost)
    for queue in engine.queues():
        # Another batch only while the last one was full and moved something: due tasks that
        # cannot move (a type this process does not know) must not keep the tick spinning.
        while True:
            before = report.progress()
            full = _sweep_queue(engine, queue, batch, report)
            if not full or report.progress() == before:
                break
    return report


def _run(engine, ids: list[str], call) -> list[list]:
    """``call(task id, pipe)`` (a Scripts wrapper's ``client=pipe`` call) for every id in one
    pipeline; replies in order."""
    if not ids:
        return []
    pipe = engine.scripts.pipeline()
    for task_id in ids:
        call(task_id, pipe)
    return engine.scripts.replies(pipe)


def _sweep_queue(engine, queue: str, batch: int, report: SweepReport) -> bool:
    # Without an executor, PENDING tasks wait for a direct claim: the dispatch set is not work.
    # A draining queue hands nothing to workers: its dispatch set waits until it is resumed.
    dispatching = engine.dispatcher.active and not engine.redis.hget(
        engine.keys.queue_key(queue, "control"), "draining"
    )
    names = ["leases", "retries", "expiry", "watch", "waiting", "start_by"] + (["dispatch"] if dispatching else [])
    lists, next_ms = engine.scripts.due(
        [engine.keys.queue_key(queue, n) for n in names], batch, ended=engine.keys.queue_key(queue, "ended")
    )
    due = dict(zip(names + ["ended"], lists))
    lease_ids, retry_ids, expiry_ids = due["leases"], due["retries"], due["expiry"]
    dispatch_ids = due.get("dispatch", [])
    if next_ms >= 0:
        report.next_in = next_ms / 1000 if report.next_in is None else min(report.next_in, next_ms / 1000)

    scripts, task_keys = engine.scripts, engine.keys.task
    expired = _run(engine, lease_ids, lambda tid, pipe: scripts.expire(task_keys(tid), tid, client=pipe))
    promoted = []  # a lost heartbeat retries at once: expire promotes it in the same call
    for tid, r in zip(lease_ids, expired):
        if r[0] == Code.OK:
            report.expired += 1
            report.timed_out += r[1] == State.TIMEOUT.value
            reason = r[2].split(":")[0]
            report.reasons[reason] = report.reasons.get(reason, 0) + 1
            reclaimed = f"lease reclaimed ({r[2]}); now {r[1]}"
            if r[1] == State.TIMEOUT.value:  # its last attempt
                failed_for_good(log, tid, reclaimed, queue=queue)
            else:
                log.info("task %s: %s", tid, reclaimed, extra=for_task(tid, queue=queue))
            if r[1] == State.PENDING.value:
                promoted.append(tid)
    # Before promotions: a parked task past its expiry ends rather than returns.
    lapses = _run(engine, due["start_by"], lambda tid, pipe: scripts.lapse(task_keys(tid), tid, client=pipe))
    report.lapsed += sum(1 for r in lapses if r[0] == Code.OK)
    if any(r[-1] == RESOLVE_MARK for r in lapses):  # children waiting on a lapsed task: cancelled now
        deps.resolve_due(engine, engine.keys.queue_key(queue, "waiting"))
    promotions = _run(engine, retry_ids, lambda tid, pipe: scripts.promote(task_keys(tid), client=pipe))
    promoted += [tid for tid, r in zip(retry_ids, promotions) if r[0] == Code.OK]
    report.promoted += len(promoted)

    report.purged += _purge(engine, queue, [text(e) for e in due["ended"]], with_entries=True)
    report.purged += _purge(engine, queue, expiry_ids)
    report.resolved += sum(1 for tid in due["waiting"] if deps.resolve(engine, tid))
    for r in _run(engine, due["watch"], lambda tid, pipe: scripts.overdue(task_keys(tid), tid, client=pipe)):
        if r[0] == Code.OK:
            setattr(report, r[1], getattr(report, r[1]) + 1)
    report.notified += notify.hand_off(engine, queue)  # last: this tick's events are in the outbox

    if dispatching:
        seen = set(promoted)
        _redispatch(engine, queue, promoted, report, compare=False)  # this sweeper's own promotions
        _redispatch(engine, queue, [t for t in dispatch_ids if t not in seen], report)
    return any(len(ids) >= batch for ids in lists)


def _purge(engine, queue: str, due: list[str], with_entries: bool = False) -> int:
    """Delete terminal tasks past retention (their index entries too): ``due`` are ids of the
    expiry set or, ``with_entries``, entries of the ended line ('<id> <ended ms>[ <kept until>]')."""
    if not due:
        return 0
    task_ids = [e.split(" ", 1)[0] for e in due] if with_entries else due
    pipe = engine.redis.pipeline(transaction=False)
    for tid in task_ids:
        pipe.hmget(engine.keys.task(tid).task, "owner", "created_at", "listed_at")
    todo = [  # listed at its creation time, or where the clock was behind its indexes at its listed_at
        (tid, text_or_none(owner), text_or_none(listed or created), item)
        for tid, (owner, created, listed), item in zip(task_ids, pipe.execute(), due)
    ]
    purged = 0
    for _ in range(PURGE_ROUTES):  # MOVED: a submit moved a head into a page since the route was read
        reads = [
            route_command(index, at or "0") for _, owner, at, _ in todo for index in _indexes(engine, queue, owner)
        ]
        found = iter(Commands(tuple(reads)).queued(engine.redis.pipeline(transaction=False)).execute())
        pipe = engine.scripts.pipeline()
        for tid, owner, _, item in todo:
            q_page, *o_page = (route_of(index, next(found)) for index in _indexes(engine, queue, owner))
            entry = item if with_entries else None
            engine.scripts.purge(engine.keys.task(tid), tid, q_page, o_page[0] if o_page else None, entry, client=pipe)
        replies = engine.scripts.replies(pipe)
        purged += sum(r[0] == Code.OK for r in replies)
        todo = [row for row, r in zip(todo, replies) if r[0] == Code.MOVED]
        if not todo:
            break
    return purged


def _indexes(engine, queue: str, owner: str | None) -> list[str]:
    """The task indexes a task of ``owner`` is in: its queue's, then its owner's (none without one)."""
    return [engine.keys.queue_index(queue), *([engine.keys.owner_index(queue, owner)] if owner else [])]


def _redispatch(engine, queue: str, task_ids: list[str], report: SweepReport, compare: bool = True) -> None:
    """Dispatch due tasks again (or re-arm the check of a job that still exists).

    With ``compare`` each dispatch is a compare-and-set on the dispatch-set score read here with
    the task: another sweeper that dispatched the task since moved that score, so the task is
    dispatched once, however many sweepers saw it due. A sweeper's own promotions need no compare:
    the promote was the compare-and-set.
    """
    if not task_ids:
        return
    pipe = engine.redis.pipeline(transaction=False)
    dispatch_set = engine.keys.queue_key(queue, "dispatch")
    for tid in task_ids:
        pipe.hmget(engine.keys.task(tid).task, "status", "dispatch_id", "type", "passed")
        pipe.zscore(dispatch_set, tid)
    replies = pipe.execute()
    for tid, row, score in zip(task_ids, replies[::2], replies[1::2]):
        status, dispatch_id, type_name, passed = (text(v) for v in row)
        if compare and score is None:
            continue  # left the dispatch set since the due read: claimed, or dispatched by another sweeper
        if status not in (State.PENDING.value, State.QUEUED.value):
            continue
        try:
            # A task a claim passed over has no job: the one it was made for runs the head of the line.
            waiting = status == State.QUEUED.value and dispatch_id and not passed
            if waiting and engine.dispatcher.job_exists(dispatch_id, queue):
                # The job is still waiting: look again after requeue_after.
                engine.scripts.dispatch(
                    engine.keys.task(tid),
                    engine.keys.queue_key(queue, "control"),
                    tid,
                    dispatch_id,
                    _requeue_ms(engine),
                )
                report.refreshed += 1
            else:
                if engine.dispatch_known(tid, engine.registry.get(type_name), seen_score=score if compare else None):
                    report.dispatched += 1
        except UnknownTaskType:
            _warn_unknown(type_name, tid)  # it waits, PENDING, for a sweeper that knows its type
        except GhostlessError:
            continue  # changed meanwhile (claimed, cancelled)


_warned_types: set[str] = set()


def _warn_unknown(type_name: str, task_id: str) -> None:
    """Once per type and process: a task this sweeper cannot dispatch, as its app lacks the type."""
    if type_name not in _warned_types:
        _warned_types.add(type_name)
        log.warning(
            "task %s of type %r waits: this sweeper's app does not register the type (a sweeper "
            "started before the type was added? restart it with the current app)",
            task_id,
            type_name,
            extra=for_task(task_id),
        )


def _requeue_ms(engine) -> int:
    return int(engine.config.requeue_after * 1000)


class Wake:
    """Wakes a sleeping sweeper when a script sets a deadline sooner than ``config.WAKE_WITHIN``.

    The scripts PUBLISH such a deadline on the channel named after its set (lua/lib/record.lua:
    place); a daemon thread holds one pub/sub connection on those channels' patterns and sets
    ``event``. A message lost while Redis is away costs only the old behaviour: the sweeper's
    next wake-up, at most ``interval`` later. A sweeper that starts waits (up to
    ``LISTEN_WAIT``) until Redis has confirmed every pattern: a deadline announced between its
    first look and its subscription would otherwise wait for its next look.
    """

    def __init__(self, engine, stop: threading.Event):
        self.event = threading.Event()
        self.listening = threading.Event()
        self._stop = stop
        threading.Thread(target=self._listen, args=(engine,), name="ghostless-wake", daemon=True).start()

        def wake_on_stop() -> None:
            stop.wait()
            self.event.set()

        threading.Thread(target=wake_on_stop, name="ghostless-wake-stop", daemon=True).start()
        self.listening.wait(LISTEN_WAIT)

    def _listen(self, engine) -> None:
        errors = 0
        patterns = engine.keys.deadline_channels()
        while not self._stop.is_set():
            pubsub = engine.redis.pubsub()
            try:
                pubsub.psubscribe(*patterns)
                errors = confirmed = 0
                while not self._stop.is_set():
                    message = pubsub.get_message(timeout=0.5)
                    if message is None:
                        continue
                    if message["type"] == "pmessage":
                        self.event.set()
                    elif message["type"] == "psubscribe":
                        confirmed += 1
                        if confirmed == len(patterns):
                            self.listening.set()
            except Exception as e:  # noqa: BLE001 - Redis away: listen again; the sweeper still wakes on time
                errors += 1
                log.debug("sweeper wake-up channel lost (%s); subscribing again", e)
                self._stop.wait(retry_delay(errors, 5.0, doublings=6))
            finally:
                try:
                    pubsub.close()
                except Exception:  # noqa: BLE001
                    pass

    def sleep(self, seconds: float) -> None:
        """Until ``seconds`` have passed, an earlier deadline was announced, or stop."""
        self.event.wait(seconds)
        self.event.clear()


def run_sweeper(engine, interval: float = 1.0, batch: int = 1000, stop=None, log=None, name=None) -> None:
    """Sweep until ``stop`` (a threading.Event) is set.

    Each tick is recorded in the sweeper registry under ``name`` (default ``<hostname>.<pid>``:
    engine/core/sweepers.py), which ``/metrics`` and ``/readyz`` read.

    Between ticks it sleeps until the earliest deadline in its sets, capped by
    ``interval``, and a deadline set sooner while it sleeps (a short retry, a short delay)
    wakes it (``Wake``), so due work is acted on within milliseconds. Redis being
    unreachable is logged and retried; the loop never dies of it. Redis losing its data
    (engine/core/epoch.py) is logged as an error.
    """
    import redis

    log = log or logging.getLogger("ghostless.sweeper")
    stop = stop or threading.Event()
    engine.data_epoch.watch(stop=stop)  # logs an error if Redis loses its data while this runs
    wake = Wake(engine, stop)
    ticks = sweepers.TickRecorder(engine, name)
    errors = 0
    while not stop.is_set():
        try:
            report = sweep(engine, batch)
            ticks.record()
            errors = 0
        except (redis.ConnectionError, redis.TimeoutError) as e:
            errors += 1
            log.warning("sweeper: Redis unreachable (%s); retrying", e)
            stop.wait(retry_delay(errors, interval))
            continue
        except Exception as e:  # e.g. Redis full (OOM under noeviction): the sweeper must outlive it
            errors += 1
            if isinstance(e, redis.exceptions.OutOfMemoryError):  # RedisFull too: no traceback
                log.warning("sweeper: Redis is full, writes refused (%s); retrying", e)
            else:
                log.exception("sweeper: tick failed; retrying")
            stop.wait(retry_delay(errors, max(interval, 1.0)))
            continue
        if report.acted:
            log.info(report.summary())
        wait = interval if report.next_in is None else min(interval, report.next_in)
        wake.sleep(max(wait, 0.001))
    try:
        sweepers.forget(engine, ticks.name)
    except redis.RedisError as e:  # it drops out of the registry on its own
        log.warning("sweeper: could not leave the sweeper registry (%s)", e)
