"""``submit``, written once as steps (engine/core/steps.py): ``Engine.submit`` and
``AsyncEngine.submit`` run this one body. ``engine`` is the sync Engine whose registry, keys,
config and dispatcher it uses."""

from __future__ import annotations

import hashlib
import json

from ghostless.core import dependencies as deps, notify, priority as priority_mod, tracing

from . import plans
from .config import ms
from .errors import Code
from .keys import new_task_id
from .models import Task
from .plans import SubmitArgs
from .quota import Quota
from .states import State
from .steps import Blocking, Call
from .task_calls import require
from .validate import submit_times, text as _text


def submit(
    engine,
    type: str,
    args: dict | None = None,
    *,
    owner: str,
    idempotency_key: str | None = None,
    priority: int = 0,
    delay: float = 0,
    due_in: float | None = None,
    escalate_in: float | None = None,
    expires_in: float | None = None,
    depends_on: list[str] | None = None,
    notify_url: str | None = None,
    quota: Quota | None = None,
    internal: bool = False,
) -> Call[Task]:
    """Create a task in PENDING (or return the one its idempotency key names).

    Args:
        type: a registered task type (not an internal one, unless ``internal``: engine code).
        args: a JSON object (<= Config.max_args_bytes) that fits the type's function.
        owner: who owns the task; idempotency keys are scoped to the owner.
        delay: seconds before it may be dispatched.
        due_in / escalate_in: seconds from now by which the task should have ended; the
            sweeper records an ``overdue`` (then ``escalated``) event once if it has not.
        expires_in: seconds from now within which the task must start (be claimed), else it
            ends CANCELLED, reason ``expired`` (by the sweeper then, or by a later claim).
        depends_on: ids of tasks (in the same queue) that must all end in SUCCESS first
            (engine/core/dependencies.py).
        notify_url: webhook for this task's notifications (else its owner's default, if any;
            engine/core/notify.py; needs enable_notifications).
        quota: the owner's limits in the type's queue (engine/core/quota.py), checked atomically
            with the creation; None (the default) is no limit.

    Returns: the new Task, or the existing one for a replayed idempotency key.

    Raises: UnknownTaskType, BadArgs (a ValueError: args that do not fit the function),
        ValueError (bad input), IdempotencyConflict (same key, other args), UnknownParent (a
        ValueError: depends_on names a task that does not exist), QuotaExceeded, RedisFull
        (Redis at maxmemory refused the write; nothing changed).

    Redis keys: the task's keys, its queue's sets/stream/counters, the idempotency key, the
    owner's submit-rate key (with a quota).
    """
    tt = engine.registry.submittable(type, internal)
    args_json = engine._args_json({} if args is None else args, tt, quota)
    owner = _text("owner", owner)
    if idempotency_key is not None:
        idempotency_key = _text("idempotency_key", idempotency_key)
    priority = priority_mod.check(priority)
    delay_ms, due_ms, escalate_ms, expires_ms = submit_times(delay, due_in, escalate_in, expires_in)
    parent_ids, parents = deps.parents(engine, tt.queue, depends_on)
    if notify_url is None and notify.TYPE in engine.registry:  # the owner's default: a read (cached 10 s)
        notify_url = yield Blocking(notify.submit_url, (engine, tt.name, owner, None))
    else:
        notify_url = notify.submit_url(engine, tt.name, owner, notify_url)
    task_id = new_task_id(tt.queue)
    if tt.queue not in engine._known_queues:  # once per queue and process
        yield Blocking(engine._remember_queue, (tt.queue,))
    digest = hashlib.sha256(f"{tt.name}\0{args_json}".encode()).hexdigest()[:32]
    reply = yield plans.submit(
        engine.keys.task(task_id),
        engine.keys.owner_index_keys(tt.queue, owner, task_id),
        SubmitArgs(
            task_id=task_id,
            type_name=tt.name,
            owner=owner,
            args_json=args_json,
            digest=digest,
            max_attempts=tt.max_attempts,
            lease_ms=ms(tt.lease),
            timeout_ms=ms(tt.timeout),
            priority=priority,
            delay_ms=delay_ms,
            backoff=tt.backoff.spec(),
            idempotency_ttl_ms=ms(engine.config.idempotency_ttl),
            idempotency_key=idempotency_key or "",
            queue=tt.queue,
            due_ms=due_ms,
            escalate_ms=escalate_ms,
            notify_url=notify_url or "",
            quota=quota.spec() if quota else "",
            expires_ms=expires_ms,
            traceparent=tracing.traceparent(),
            parent_ids=tuple(parent_ids),
        ),
        parents,
        engine.keys.submit_rate(tt.queue, owner) if quota else None,
        engine.keys.idempotency(tt.queue, owner, idempotency_key) if idempotency_key else None,
    )
    if reply[0] == Code.REPLAYED:
        task = yield from require(engine, reply[1])
        task.replayed = True
        return task
    now = int(reply[2]) / 1000
    # Built from what was sent (no read back): the times are the script's, from Redis TIME.
    task = Task(
        id=task_id,
        type=tt.name,
        queue=tt.queue,
        owner=owner,
        status=State.PENDING,
        max_attempts=tt.max_attempts,
        args=json.loads(args_json),
        created_at=now,
        updated_at=now,
        version=1,
        priority=priority,
        idempotency_key=idempotency_key or "",
        parents=parent_ids,
        due_at=now + due_ms / 1000 if due_ms else None,
        escalate_at=now + escalate_ms / 1000 if escalate_ms else None,
        expires_at=(int(reply[2]) + expires_ms) / 1000 if expires_ms else None,
        notify_url=notify_url or "",
        waiting=reply[3] == "waiting",
    )
    if reply[3] == "resolve":  # a parent had already failed: cancelled now, not in a minute
        yield Blocking(deps.resolve, (engine, task_id))
        return (yield from require(engine, task_id))
    if reply[3] == "waiting":
        return task
    # The RQ enqueue is sync redis-py: the AsyncEngine runs it in a worker thread.
    if delay_ms == 0 and engine.dispatcher.active and (yield Blocking(engine.dispatch_known, (task_id, tt))):
        task.status, task.version = State.QUEUED, 2
    return task
