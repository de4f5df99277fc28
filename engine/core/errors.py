"""Script return codes and the typed exceptions they become.

Scripts return ``{code, ...}``. Codes >= 0 are successes; negative codes are
refusals. The loader hands ``Code`` to Lua as constants, so the numbers live
only here.
"""

from __future__ import annotations

import contextlib
import enum

import redis


class Code(enum.IntEnum):
    OK = 0
    REPLAYED = 1  # the same call already took effect (idempotent repeat)
    NOT_DUE = 2  # sweeper compare-and-set lost: nothing to do now
    NOT_FOUND = -1
    ILLEGAL_TRANSITION = -2
    LEASE_LOST = -3  # stale fencing token, or the lease was taken away
    CANCELLED = -4  # the task was cancelled under the lease holder
    IDEMPOTENCY_CONFLICT = -5
    WRONG_DISPATCH = -6  # a delivery of a dispatch that is no longer current
    UNKNOWN_TYPE = -7  # the worker does not run this task type
    BREAKER_OPEN = -8  # the upstream's circuit breaker is open: park the task
    UNKNOWN_PARENT = -9  # submit: a task it depends on does not exist
    QUOTA_EXCEEDED = -10  # submit, edit: the owner's quota refuses another task (engine/core/quota.py)
    ATTEMPT_ENDED = -11  # heartbeat: the attempt of this token has already reported its outcome
    RATE_LIMITED = -12  # claim: the upstream's rate limit has no start left in its window: park the task
    EXPIRED = -13  # claim: the task was not started before its expiry: the claim cancelled it instead
    MOVED = 3  # claim: the head of the ready line comes first: claim again with its keys; purge: a
    # submit moved an index head into a page since the sweeper found its pages: route again


#: Redis failing for its own reasons (unreachable, hung, restarting, loading, full under noeviction,
#: a read-only replica after a failover): nobody's fault but the server's, and it passes.
REDIS_FAULTS = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.exceptions.OutOfMemoryError,
    redis.exceptions.ReadOnlyError,
)


class GhostlessError(Exception):
    """Base of every error the engine raises on purpose."""


class UnknownTaskType(GhostlessError, ValueError):
    def __init__(self, name: str):
        self.name = name
        super().__init__(f"unknown task type {name!r} (not registered with this engine)")


class BadArgs(GhostlessError, ValueError):
    """A task's args do not fit its function's parameters (checked at submit, edit and claim)."""

    def __init__(self, type_name: str, missing=(), unexpected=(), accepted=(), detail: str = ""):
        self.type, self.missing, self.unexpected = type_name, list(missing), list(unexpected)
        parts = [
            f"missing {_names(self.missing)}" if self.missing else "",
            f"unexpected {_names(self.unexpected)}" if self.unexpected else "",
        ]
        why = "; ".join(p for p in parts if p) or detail
        takes = _names(accepted, quote=False) or "no arguments"
        super().__init__(f"args do not fit task type {type_name!r}: {why} (it takes: {takes})")


def _names(names, quote: bool = True, most: int = 5) -> str:
    """A short list of (user-given, maybe long) names for a message."""
    shown = [repr(n[:64]) if quote else n[:64] for n in list(names)[:most]]
    more = len(names) - most
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


class TaskNotFound(GhostlessError, LookupError):
    def __init__(self, task_id: str):
        self.task_id = task_id
        super().__init__(f"task {task_id!r} not found")


class IllegalTransition(GhostlessError):
    def __init__(self, task_id: str, state: str, verb: str):
        self.task_id, self.state, self.verb = task_id, state, verb
        super().__init__(f"cannot {verb} task {task_id!r} in state {state}")


class TaskExpired(IllegalTransition):
    """The claim found the task past its expiry (``submit(..., expires_in=)``) and not yet started:
    it cancelled it (reason ``expired``) instead of starting it."""

    def __init__(self, task_id: str):
        super().__init__(task_id, "CANCELLED (expired)", "claim")


class LeaseLost(GhostlessError):
    """The caller no longer holds the task's lease; it must stop the work."""

    def __init__(self, task_id: str, token: int | None, state: str = "", reason: str = "lease lost"):
        self.task_id, self.token, self.state = task_id, token, state
        super().__init__(f"{reason}: task {task_id!r} token {token} (task is {state or 'gone'})")


class TaskCancelled(LeaseLost):
    """The task was cancelled (or superseded by an edit) while leased."""

    def __init__(self, task_id: str, token: int | None):
        super().__init__(task_id, token, "CANCELLED", reason="task cancelled")


class AttemptEnded(LeaseLost):
    """A heartbeat that arrived after its own attempt's outcome (one still in flight when the
    attempt ended): not a stale holder, so neither counted nor recorded."""

    def __init__(self, task_id: str, token: int | None, state: str = ""):
        super().__init__(task_id, token, state, reason="attempt already ended")


class RedisUnavailable(GhostlessError):
    """An engine call made for a task (``ctx.stage``, ``ctx.progress``, ``ctx.checkpoint``) failed
    because of Redis (one of REDIS_FAULTS, its ``__cause__``), not because of the task: the attempt
    is released (reason ``redis_error``, no attempt consumed), or left to its lease when even the
    release cannot reach Redis."""

    def __init__(self, call: str, error: BaseException):
        self.call, self.error = call, error
        super().__init__(f"{call} failed: {type(error).__name__}: {error}")


class WrongDispatch(GhostlessError):
    """A job delivered for a dispatch that is no longer current (duplicate delivery)."""

    def __init__(self, task_id: str, dispatch_id: str):
        self.task_id, self.dispatch_id = task_id, dispatch_id
        super().__init__(f"dispatch {dispatch_id!r} of task {task_id!r} is not current")


class UnknownParent(GhostlessError, ValueError):
    def __init__(self, task_id: str):
        self.task_id = task_id
        super().__init__(f"depends_on names task {task_id!r}, which does not exist")


class QuotaExceeded(GhostlessError):
    """The owner's submit quota (engine/core/quota.py) refused the call; nothing was written.

    ``limit`` names the limit reached (``rate``, ``max_unfinished``, ``max_unfinished_bytes``);
    ``retry_after`` is the seconds until the rate allows another call, or None when the call can
    only succeed once some of the owner's unfinished tasks end.
    """

    def __init__(self, owner: str, queue: str, limit: str, retry_after: float | None):
        self.owner, self.queue, self.limit, self.retry_after = owner, queue, limit, retry_after
        wait = f"retry in {retry_after:.1f}s" if retry_after is not None else "wait for tasks to end"
        super().__init__(f"quota of {owner!r} in queue {queue!r} exceeded ({limit}): {wait}")


class UpstreamBusy(GhostlessError):
    """The claim was refused, nothing changed: the task's upstream takes no attempt now. ``park``
    the task for ``wait`` seconds (``Engine.park(task_id, e.wait, e.upstream, e.kind)``)."""

    kind = ""  # the parked task's error_kind, and its reason's prefix

    def __init__(self, task_id: str, upstream: str, wait: float, why: str = ""):
        self.task_id, self.upstream, self.wait = task_id, upstream, wait
        super().__init__(f"upstream {upstream!r} {why}: task {task_id!r} waits {wait:.3f}s")


class BreakerOpen(UpstreamBusy):
    """The claim was refused: the task's upstream circuit breaker is open (nothing changed)."""

    kind = "upstream_open"

    def __init__(self, task_id: str, upstream: str, wait: float):
        super().__init__(task_id, upstream, wait, "is open")


class RateLimited(UpstreamBusy):
    """The claim was refused: the upstream's rate limit has no start left in its window (nothing
    changed); ``wait`` is when its next start slot frees."""

    kind = "rate_limited"

    def __init__(self, task_id: str, upstream: str, wait: float):
        super().__init__(task_id, upstream, wait, "is at its rate limit")


class BadRate(GhostlessError, ValueError):
    """A task type's ``rate`` is not a rate (``"20/s"``, ``"600/min"``, ``"1000/h"``)."""

    def __init__(self, rate: object, why: str):
        self.rate, self.why = rate, why
        super().__init__(f"bad rate {rate!r}: {why}")


class IdempotencyConflict(GhostlessError):
    def __init__(self, key: str, task_id: str):
        self.key, self.task_id = key, task_id
        super().__init__(f"idempotency key {key!r} was used for task {task_id!r} with other arguments")


class PermanentError(GhostlessError):
    """Raise from a task function to fail the task for good (no retry)."""

    def __init__(self, message: str = "", kind: str = "permanent"):
        self.kind = kind
        super().__init__(message)


class RedisSetupError(GhostlessError):
    """The Redis server cannot run ghostless safely (version, eviction policy)."""


class BadRedisURL(GhostlessError, ValueError):
    """A Redis URL ghostless cannot connect with (engine/core/connect.py). The message never
    holds the URL's password."""


class ReplicationTimeout(GhostlessError):
    """``Config.wait_replicas`` replicas did not acknowledge a write within ``Config.wait_timeout``.

    The write DID happen on the primary (the call's effect stands there and later calls see it),
    but a failover now may promote a replica that lacks it. ``reply``: the script's parsed reply
    (for a claim, the lease it took); ``verb``/``task_id`` name the call ('' task: a sweeper batch).
    """

    def __init__(self, verb: str, task_id: str, acked: int, wanted: int, reply=None):
        self.verb, self.task_id, self.acked, self.wanted, self.reply = verb, task_id, acked, wanted, reply
        what = f"{verb} of task {task_id}" if task_id else verb
        super().__init__(
            f"{what}: {acked} of {wanted} replicas acknowledged the write in time; it happened on the "
            "primary but may not survive a failover"
        )


class RedisFull(GhostlessError, redis.exceptions.OutOfMemoryError):
    """Redis refused a write: it reached ``maxmemory`` under ``noeviction``. Nothing was changed by
    the refused call; retry once memory is freed. The redis-py ``OutOfMemoryError`` is ``__cause__``
    (and RedisFull is one too, so handlers of redis-py errors still see it)."""

    def __init__(self, operation: str):
        self.operation = operation
        super().__init__(f"Redis is full (maxmemory reached, noeviction): {operation} refused; retry later")


@contextlib.contextmanager
def refusing_full(operation: str):
    """Turn redis-py's OutOfMemoryError raised inside the block into RedisFull."""
    try:
        yield
    except redis.exceptions.OutOfMemoryError as e:
        raise RedisFull(operation) from e


class WaitTimeout(GhostlessError, TimeoutError):
    """``Engine.wait`` / ``Engine.result``: the task had not ended within the timeout. ``task`` is
    the task as last read (still unfinished); it goes on running."""

    def __init__(self, task_id: str, timeout: float, task=None):
        self.task_id, self.timeout, self.task = task_id, timeout, task
        status = f" (still {task.status.value})" if task is not None else ""
        super().__init__(f"task {task_id} had not ended after {timeout:g} s{status}")


class TaskFailed(GhostlessError):
    """``Engine.result``: the task ended without success: FAILED, TIMEOUT or CANCELLED (``status``).
    ``reason`` and ``error_kind`` are the task's own (the last attempt's error, the timeout, who
    cancelled); ``task`` is the ended task (``task.superseded_by`` names its replacement after an edit)."""

    def __init__(self, task):
        self.task, self.task_id, self.status = task, task.id, task.status
        self.reason, self.error_kind = task.reason, task.error_kind
        kind = f" [{task.error_kind}]" if task.error_kind else ""
        super().__init__(f"task {task.id} ended {task.status.value}{kind}: {task.reason or 'no reason given'}")
