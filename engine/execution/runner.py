"""Runs one attempt of a task: claim, heartbeat, the function, then complete or fail.

``run_task(task_id)`` is the RQ job function (the job's only argument is the
task id). The task function comes from the engine's registry, never from the
job: a type this worker does not register is refused by the claim and nothing
is imported.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import threading

from rq import get_current_job
from rq.timeouts import JobTimeoutException

from ghostless.core import tracing
from ghostless.core.errors import (
    REDIS_FAULTS,
    BadArgs,
    IllegalTransition,
    LeaseLost,
    PermanentError,
    RedisUnavailable,
    TaskNotFound,
    UnknownTaskType,
    UpstreamBusy,
    WrongDispatch,
)
from ghostless.core.keys import rq_dispatch_id
from ghostless.core.logs import EncodableTracebacks, encodable, failed_for_good, for_task
from ghostless.core.states import State
from ghostless.execution import runtime

from .context import AttemptReleased, AttemptStopped, TaskContext
from .heartbeat import Heartbeat
from .rq_dispatch import attempt_room

log = logging.getLogger("ghostless.runner")
log.addFilter(EncodableTracebacks())  # a task's exception may carry text UTF-8 cannot
MAX_REASON = 500


class VerificationFailed(Exception):
    """The task type's ``verify`` rejected a result: the attempt fails and is retried."""


class AttemptFailed(Exception):
    """Raised to RQ by the job of an attempt that failed, after ghostless recorded the failure (the
    task waits for its retry, or is FAILED): RQ then shows the job as failed, in its failed job
    registry, with the reason, instead of finished. Nothing more happens to the task.

    What the worker tells RQ's exception handlers of it (engine/execution/worker.py): ``final``,
    the task failed for good; else ``attempts_left``, the attempts it may still make; ``error``,
    once final, the exception the task's function raised, when it raised one."""

    def __init__(self, message: str, final: bool = False, attempts_left: int = 0, error: BaseException | None = None):
        super().__init__(message)
        self.final, self.attempts_left, self.error = final, attempts_left, error


def _verify(tt, result, ctx) -> None:
    if tt.verify is None:
        return
    try:
        ok = tt.verify(result, ctx)
    except Exception as e:  # a check that cannot run is a failed check
        raise VerificationFailed(f"{type(e).__name__}: {e}") from e
    if ok is False:
        raise VerificationFailed("verify() rejected the result")


def run_task(task_id: str) -> None:
    """RQ job entry point: the job was made for ``task_id``, and its claim runs the queue's next
    task, which may be another. Ends quietly when the claim is refused (duplicate delivery,
    cancelled, already done): dispatch is at-least-once, the claim exactly-once per attempt.
    Raises AttemptFailed once a failed attempt is recorded, so that RQ shows the job failed."""
    engine = runtime.engine()
    job = get_current_job()
    worker = runtime.worker()
    name = getattr(worker, "name", None) or f"pid-{os.getpid()}"
    claim_id = getattr(worker, "claim_id", None)
    try:
        dispatch_id = rq_dispatch_id(job.id) if job else ""
        room = attempt_room(job)
        lease = engine.claim(task_id, name, dispatch_id=dispatch_id, claim_id=claim_id, room=room, redispatch=False)
    except UnknownTaskType as e:
        log.error("refused task %s: type %r is not registered in this worker", task_id, e.name, extra=for_task(task_id))
        return
    except (IllegalTransition, WrongDispatch, TaskNotFound) as e:  # claim.lua refuses with no lease code
        log.info("claim of %s refused (%s): nothing to do", task_id, e, extra=for_task(task_id))
        return
    except UpstreamBusy as e:  # its breaker is open, or its rate limit has no start left now
        try:
            state = engine.park(e.task_id, e.wait, e.upstream, e.kind)
            if state == State.FAILED:  # its breaker's policy is to fail fast
                failed_for_good(log, e.task_id, f"{e.kind}: {e.upstream} (its breaker fails fast)")
            else:
                log.info("task %s: %s; parked (%s)", e.task_id, e, state, extra=for_task(e.task_id))
        except (IllegalTransition, TaskNotFound) as refused:
            log.info("task %s changed while parking: %s", e.task_id, refused, extra=for_task(e.task_id))
        return
    # The job's claim took this task, or the head of its queue's line (lua/claim.lua).
    runtime.note_claimed(lease.task_id)
    if lease.passed_over:  # after the note: a parent whose horse dies now reports the task it took
        engine.dispatch_passed(lease.passed_over, dispatch_id)
    log.info("task %s attempt %d started (%s)", lease.task_id, lease.attempt, lease.type, extra=_fields(lease))
    failed = execute(engine, lease, in_horse=bool(worker is not None and getattr(worker, "is_horse", False)))
    if failed:
        try:
            raise failed
        finally:  # not kept by this frame, which its traceback holds: the task's error holds its locals
            failed = None


def execute(engine, lease, in_horse: bool = False, grace: float | None = None) -> AttemptFailed | None:
    """Run the task function under a heartbeat and report its outcome (once, with the lease), in
    the attempt's span when the application traces (engine/core/tracing.py). Returns the failure
    of an attempt that failed, for the job to raise (its message ends ``<kind>: <reason>``), or None
    when it did not fail (it succeeded, or was given back, stopped, or lost its lease)."""
    with tracing.attempt_span(engine, lease, flush=in_horse):
        return _execute(engine, lease, in_horse, grace)


def _execute(engine, lease, in_horse: bool, grace: float | None) -> AttemptFailed | None:
    tt = engine.registry.get(lease.type)
    ctx = TaskContext(engine, lease, lease.checkpoints)  # the claim brought them: no extra round trip
    main = threading.get_ident()
    hb: Heartbeat

    def force_stop(reason: str) -> None:
        if in_horse:
            # A forked work-horse ends here, whatever happens: the parent sees a clean exit and
            # takes the next job; when the release failed (Redis erring), exit 1 makes the parent
            # release the task on the horse's behalf (worker.py: _report_lost).
            code = 0
            try:
                if reason == "release" and not (hb.lost or hb.abandoned):
                    _report(engine.release, lease, "worker shutdown")
            except BaseException:  # nothing may keep this horse alive
                log.exception(
                    "task %s: the release at the end of the grace failed", lease.task_id, extra=_fields(lease)
                )
                code = 1
            finally:
                os._exit(code)
        _raise_in(main, AttemptReleased if reason == "release" else AttemptStopped)

    grace = tt.lease if grace is None else grace
    hb = Heartbeat(engine, ctx, force_stop, grace=max(grace, 1.0))
    hb.start()
    try:
        try:  # bound apart from the call: a TypeError raised inside the function stays retryable
            bound = tt.bind(ctx, lease.args or {})
        except BadArgs as e:  # args that can never fit: no attempt will do better
            raise PermanentError(str(e), kind="bad_args") from None
        result = tt.fn(*bound.args, **bound.kwargs) if bound is not None else tt.fn(ctx, **(lease.args or {}))
        _verify(tt, result, ctx)  # still under the heartbeat: a check may take a while
    except AttemptReleased:
        if not (hb.lost or hb.abandoned):
            _report(engine.release, lease, "worker shutdown")
        return None
    except AttemptStopped:
        log.warning("task %s stopped by force: %s", lease.task_id, ctx.stop_reason, extra=_fields(lease))
        return None
    except (SystemExit, KeyboardInterrupt):
        _report(engine.release, lease, "worker stopped")
        raise
    except LeaseLost as e:
        log.warning("task %s lost its lease while running: %s", lease.task_id, e, extra=_fields(lease))
        return None
    except RedisUnavailable as e:  # the engine's call failed, not the task: no attempt consumed
        log.warning("task %s attempt %d: %s; releasing it", lease.task_id, lease.attempt, e, extra=_fields(lease))
        _release_after_redis_error(hb, engine, lease, e)
        return None
    except PermanentError as e:
        return _failed(hb, engine, lease, e.kind, _reason(e), False, raised=e)
    except VerificationFailed as e:
        return _failed(hb, engine, lease, "verification_failed", _reason(e), True)
    except JobTimeoutException as e:
        return _failed(hb, engine, lease, "timeout", _reason(e) or "job timeout", True, raised=e)
    except Exception as e:  # noqa: BLE001 - the task's own failure: retried with its backoff
        return _failed(hb, engine, lease, type(e).__name__, _reason(e), True, error=e)
    finally:
        hb.stop()
    try:
        _finish(hb, engine.complete, lease, result)
    except ValueError as e:  # not JSON, or too big: fail for good, saying why
        return _failed(hb, engine, lease, "bad_result", _reason(e), False)
    return None


def _failed(
    hb: Heartbeat,
    engine,
    lease,
    kind: str,
    reason: str,
    retryable: bool,
    error: Exception | None = None,
    raised: BaseException | None = None,
) -> AttemptFailed | None:
    """Report a failed attempt; return the job's failure, or None when the failure
    was not recorded because the lease was gone (the sweeper's to retry; RQ then shows the job
    finished, as for any attempt that lost its lease). ``error``: the task's own exception, logged
    in one line before the report, and again with its traceback (as RQ logs a job's) when the task
    has failed for good, so that a bug in a task shows where it is. ``raised``: what the function
    raised otherwise (a PermanentError, RQ's timeout): given to RQ's handlers, its traceback not
    logged (a PermanentError is how a task refuses bad input: any user can raise one). A task
    failed for good gets one ERROR line, whichever way it failed."""
    if error is not None:
        shown = _capped(repr(error))
        log.warning("task %s attempt %d failed: %s", lease.task_id, lease.attempt, shown, extra=_fields(lease))
    state = _finish(hb, engine.fail, lease, kind, reason, retryable)
    if state is None:
        return None
    final, why = state == State.FAILED, f"{kind}: {reason}" if reason else kind
    if final:  # with where its function raised
        failed_for_good(log, lease.task_id, shown if error is not None else why, lease.attempt, exc_info=error)
    return AttemptFailed(
        f"task {lease.task_id} attempt {lease.attempt} failed: {why}",
        final=final,
        attempts_left=0 if final else max(lease.max_attempts - lease.attempt, 1),
        error=(error if error is not None else raised) if final else None,  # only RQ's last handlers read it
    )


def _reason(e: BaseException) -> str:
    """An exception's message as a reason to record: capped, and valid Unicode (a file name decoded
    with surrogateescape, say, could not be sent to Redis, and the outcome would be lost)."""
    return _capped(str(e))


def _capped(text: str) -> str:
    return encodable(text[:MAX_REASON])


def _finish(hb: Heartbeat, report, lease, *args):
    """What ``report`` returned (None: not reported, or refused)."""
    if hb.lost or hb.abandoned:
        log.warning(
            "task %s: not reporting the outcome of an attempt whose lease is gone", lease.task_id, extra=_fields(lease)
        )
        return None
    return _report(report, lease, *args)


def _release_after_redis_error(hb: Heartbeat, engine, lease, e: RedisUnavailable) -> None:
    """Release the attempt (reason ``redis_error: ...``); when Redis cannot take even that, the lease
    lapses and the sweeper reclaims the task."""
    if hb.lost or hb.abandoned:
        return
    try:
        _report(engine.release, lease, "redis_error: " + _reason(e))
    except REDIS_FAULTS as again:
        log.warning(
            "task %s: the release failed too (%s): left to its lease", lease.task_id, again, extra=_fields(lease)
        )


def _report(report, lease, *args):
    try:
        reply = report(lease, *args)
        tracing.outcome(report.__name__, *args)
        log.info("task %s attempt %d: %s", lease.task_id, lease.attempt, report.__name__, extra=_fields(lease))
        return reply
    except LeaseLost as e:
        log.warning("outcome of task %s refused: %s", lease.task_id, e, extra=_fields(lease))
        return None


def _fields(lease) -> dict:
    return for_task(lease.task_id, lease.attempt)


def _raise_in(thread_id: int, exc_type: type[BaseException]) -> None:
    """Raise ``exc_type`` in another thread at its next Python instruction (a function
    blocked in C code sees it only when that call returns)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc_type))


# RQ jobs enqueued before ghostless became one import name store the function path
# "engine.runner.run_task". RQ imports it by name, so the worker (which imports this module before
# it dequeues) answers that name with this module. Remove one release after 0.1.
LEGACY_JOB_FUNC = "engine.runner.run_task"
sys.modules.setdefault(LEGACY_JOB_FUNC.rpartition(".")[0], sys.modules[__name__])
