"""The task type of the chaos soak (tests/chaos/soak.py), run by real fork workers
(``--app tests.chaos.app:worker_engine``).

Environment: ``GHOSTLESS_REDIS_URL`` (one Redis, a ``redis+cluster://`` or ``redis+sentinel://``
URL), ``GHOSTLESS_CHAOS_NS`` (namespace), ``GHOSTLESS_CHAOS_LOG`` (the side-effect log file of the
run), ``GHOSTLESS_CHAOS_LEASE`` (seconds), ``GHOSTLESS_CHAOS_REQUEUE`` (Config.requeue_after,
seconds), ``GHOSTLESS_CHAOS_QUEUES`` (comma-separated queues, default ``chaos``),
``GHOSTLESS_CHAOS_WAIT`` (Config.wait_replicas, default 0).

Every execution appends lines to the side-effect log, one ``write`` each (O_APPEND: lines from
concurrent processes never interleave): ``<event> <task id> <token> <attempt> <pid> <unix time>
<claim id>`` with event one of ``start`` (entered the function), ``done`` (about to return a result:
a completed execution), ``stopped`` (noticed cancellation or a lost lease and gave up), ``error``
(raised), ``acked`` (the worker's ``complete`` of this claim returned: Redis acknowledged the
success, after the replicas did with ``wait_replicas``). The log lives outside Redis, so it survives
a Redis restart or failover and records what really ran.
"""

from __future__ import annotations

import os
import time

from ghostless import Backoff, Config, Engine, LeaseLost, PermanentError, State

NS = os.environ.get("GHOSTLESS_CHAOS_NS", "chaos")
LEASE = float(os.environ.get("GHOSTLESS_CHAOS_LEASE", "2.0"))
REQUEUE = float(os.environ.get("GHOSTLESS_CHAOS_REQUEUE", "10"))
QUEUES = tuple(q for q in os.environ.get("GHOSTLESS_CHAOS_QUEUES", "chaos").split(",") if q)
WAIT = int(os.environ.get("GHOSTLESS_CHAOS_WAIT", "0"))
WAIT_TIMEOUT = 0.5  # Config.wait_timeout: well below the 2 s lease (a heartbeat waits too)
LOG = os.environ.get("GHOSTLESS_CHAOS_LOG", "")
MAX_ATTEMPTS = 5
STAGES = {"prepare": 10, "render": 3, "upload": 10}  # render: a 3 s stage deadline ("overrun" tasks pass it)

_log = {"pid": None, "fd": None}


def type_name(base: str, queue: str) -> str:
    """The soak's type ``base`` (soak, soak_short) on ``queue``: ``soak`` on the default queue."""
    return base if queue == "chaos" else f"{base}:{queue}"


def note(event: str, lease) -> None:
    if not LOG:
        return
    if _log["pid"] != os.getpid():  # a forked work-horse opens its own descriptor
        _log["fd"] = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        _log["pid"] = os.getpid()
    line = f"{event} {lease.task_id} {lease.token} {lease.attempt} {os.getpid()} {time.time():.6f} {lease.claim_id}\n"
    os.write(_log["fd"], line.encode())


def _work(ctx, seconds: float) -> bool:
    """Sleep in short slices; False when the task was cancelled or its lease lost meanwhile."""
    end = time.monotonic() + seconds
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return not ctx.cancelled
        if ctx.wait(min(0.05, left)):
            return False


def soak(ctx, steps, mode="ok", fail_attempts=0):
    """steps: [[stage, seconds], ...]. mode: ok | transient (raises on attempts <= fail_attempts) |
    permanent (PermanentError) | always (raises on every attempt) | overrun (render outlives its
    stage deadline). Steps finished in an earlier attempt are skipped (checkpoints)."""
    note("start", ctx.lease)
    try:
        done = ctx.checkpoints
        for i, (stage, seconds) in enumerate(steps):
            if done.get(f"step{i}"):
                continue
            ctx.stage(stage)
            if mode == "overrun" and stage == "render":
                seconds = STAGES["render"] + 2
            if not _work(ctx, seconds):
                note("stopped", ctx.lease)
                return None
            ctx.progress((i + 1) / len(steps), f"{stage} done")
            ctx.checkpoint(f"step{i}", True)
        if mode == "permanent":
            raise PermanentError("input rejected", kind="bad_input")
        if mode == "always" or (mode == "transient" and ctx.attempt <= fail_attempts):
            raise ConnectionError(f"upstream hiccup on attempt {ctx.attempt}")
    except LeaseLost:
        note("stopped", ctx.lease)
        raise
    except BaseException:
        note("error", ctx.lease)
        raise
    note("done", ctx.lease)
    return {"token": ctx.lease.token, "claim": ctx.lease.claim_id, "pid": os.getpid()}


def register(target: Engine, lease: float, queues: tuple[str, ...] = ("chaos",)) -> Engine:
    """Register the soak's task types on ``target`` (the workers' engine, or the driver's), on each
    of ``queues``."""
    for queue in queues:
        common = dict(
            queue=queue,
            lease=lease,
            timeout=60,
            backoff=Backoff.fixed([0.2, 0.5, 1.0, 1.0]),
            stages=STAGES,
            permanent_errors=("bad_input",),
        )
        target.task(type_name("soak", queue), max_attempts=MAX_ATTEMPTS, **common)(soak)
        # Overrun tasks: two attempts, so a task that always outlives its stage deadline ends in TIMEOUT soon.
        target.task(type_name("soak_short", queue), max_attempts=2, **common)(soak)
    return target


def _noting_acks(engine: Engine) -> Engine:
    """Log ``acked`` once the engine acknowledged a worker's complete: the checker then finds
    acknowledged successes that a failover undid (the work ran again)."""
    complete = engine.complete

    def acked_complete(lease, result=None):
        state = complete(lease, result)
        if state == State.SUCCESS:
            note("acked", lease)
        return state

    engine.complete = acked_complete  # type: ignore[method-assign]  # the runner calls engine.complete
    return engine


def worker_engine() -> Engine:
    """The workers' engine (``--app tests.chaos.app:worker_engine``; built on call, so importing this
    module connects nowhere -- without GHOSTLESS_REDIS_URL, from_url would pick the shared 6379)."""
    config = Config(requeue_after=REQUEUE, wait_replicas=WAIT, wait_timeout=WAIT_TIMEOUT)
    return _noting_acks(register(Engine.from_url(namespace=NS, config=config), LEASE, QUEUES))
