"""The lease holder's calls (the worker side of the Engine): claim, heartbeat, stage, progress,
checkpoint, complete, fail, release, park. Each is one script call carrying the fencing token.
"""

from __future__ import annotations

import json
import logging
import random
import time
import uuid
from typing import TYPE_CHECKING, Any

import redis

from ghostless.core import breakers as breakers_mod, rates as rates_mod

from .clients import heartbeat_client
from .config import ms
from .errors import (
    BreakerOpen,
    Code,
    GhostlessError,
    IllegalTransition,
    RateLimited,
    RedisFull,
    TaskNotFound,
    WrongDispatch,
)
from .keys import TASK_OWN_KEYS, parse_task_id
from .models import Lease
from .states import State
from .text import text, text_or_none
from .validate import duration_ms as _duration_ms, text as _text

if TYPE_CHECKING:
    from .config import Config
    from .dispatch import Dispatcher
    from .keys import Keys, TaskKeys
    from .registry import Registry
    from .scripts import Scripts

log = logging.getLogger("ghostless")
MAX_UNREPORTED = 10_000  # lost-job reports a process keeps while Redis refuses them
CLAIM_TRIES = 3  # calls of one claim: MOVED (the head comes first) once in a quiet queue


class LeaseCalls:
    """Mixed into Engine; uses its redis, keys, registry, scripts, dispatcher."""

    # What Engine sets in __init__ and defines, declared here for the type checker.
    redis: Any
    keys: Keys
    config: Config
    registry: Registry
    scripts: Scripts
    dispatcher: Dispatcher
    _unreported: dict[str, str]

    if TYPE_CHECKING:

        def _keys(self, task_id: str) -> TaskKeys: ...
        def _json(self, what: str, value: Any, limit: int | None = None) -> str: ...
        def dispatch(self, task_id: str) -> str | None: ...
        def _dispatch_in(
            self, task_id: str, queue: str, seen_score: float | None = None, passed: str = ""
        ) -> str | None: ...

    def claim(
        self,
        task_id: str,
        worker: str,
        dispatch_id: str = "",
        claim_id: str | None = None,
        room: float | None = None,
        redispatch: bool = True,
    ) -> Lease:
        """Take the lease of a task for a new attempt (a new, higher fencing token).

        With ``dispatch_id`` (an executor job's delivery: the job was made for ``task_id``), the
        claim takes the head of its queue's ready line instead when the head is of a higher
        priority or returns from a lost attempt, this engine runs its type, and its timeout is at
        most ``room`` (the job's own limit; default: the timeout of ``task_id``). ``Lease.task_id``
        says which (lua/claim.lua). ``task_id`` is then dispatched again at once, at the front of
        the executor's queue, keeping its place in line (``Lease.passed_over``; with
        ``redispatch=False`` the caller does it: ``dispatch_passed``). Without ``dispatch_id``, the
        claim takes ``task_id``.

        Args:
            dispatch_id: the executor job's id; a delivery of an older dispatch is refused.
            claim_id: unique per claim (default: a random one); a resent claim with the same id
                returns the same lease. The lease's calls must carry it (it is half of the fence).

        Raises: TaskNotFound, IllegalTransition (not PENDING/QUEUED), WrongDispatch,
            UnknownTaskType (this engine does not run the task's type; nothing is imported),
            BreakerOpen (the type's upstream breaker is open: nothing changed; ``park`` the task
            ``e.task_id``), RateLimited (its upstream's rate limit has no start left now: nothing
            changed; ``park`` it for ``e.wait``, when its slot frees), TaskExpired (an
            IllegalTransition: the task was past its expiry and never started; the claim cancelled
            it, reason ``expired``), RedisFull or redis-py's ConnectionError/TimeoutError (the job
            given is then reported lost: ``job_lost``, so the sweeper dispatches the task again
            within seconds).
        """
        worker = _text("worker", worker)
        types, free = self._claim_types()
        keys = self._keys(task_id)  # TaskNotFound for an id of no queue
        claim_id = claim_id or uuid.uuid4().hex
        type_name: str | None = None
        if free != types:  # some type has a breaker or a rate limit: the task's settings are needed
            found = self.redis.hget(keys.task, "type")
            if found is None:
                raise TaskNotFound(task_id)
            type_name = text_or_none(found)
        head, last = "", False
        for call in range(CLAIM_TRIES + 1):
            # The head of the line comes first: claim again with its keys and its type's settings
            # (MOVED names it). A last try moves to no other head (the head changed under every
            # try: a busy queue's claims raced this one); it may still ask for the settings of the
            # job's own task when it could not take the head it was given: one more call.
            last = last or call >= CLAIM_TRIES - 1
            reply, tt = self._claim_as(
                keys, task_id, worker, claim_id, dispatch_id, types, free, type_name, head, last, room
            )
            if reply[0] != Code.MOVED:
                break
            head = text(reply[1])
            if not head:  # the job's own task, with its type's settings
                type_name, last = text(reply[2]), True
            elif free != types:
                head_type = text_or_none(self.redis.hget(self.keys.task(head).task, "type"))
                type_name = head_type if head_type in self.registry else type_name
        else:  # never: a last try answers MOVED only once, for the job's own task
            self.job_lost(task_id, dispatch_id)
            raise WrongDispatch(task_id, dispatch_id)
        if reply[0] in (Code.BREAKER_OPEN, Code.RATE_LIMITED):
            assert tt is not None  # a breaker or a limit answers only where tt named its keys
            if len(reply) > 3:
                self.dispatch_passed(text(reply[3]), dispatch_id)
            busy = BreakerOpen if reply[0] == Code.BREAKER_OPEN else RateLimited
            raise busy(text(reply[2]), tt.breaker_name, int(reply[1]) / 1000)
        flat = reply[7]
        lease = Lease(
            task_id=text(reply[8]),
            token=int(reply[1]),
            attempt=int(reply[2]),
            args=json.loads(reply[3]),
            type=reply[4],
            worker=worker,
            lease=int(reply[5]) / 1000,
            max_attempts=int(reply[6]),
            claim_id=claim_id,
            checkpoints={flat[i]: json.loads(flat[i + 1]) for i in range(0, len(flat), 2)},
            passed_over=text(reply[9]) if len(reply) > 9 else None,
        )
        if lease.passed_over and redispatch:
            self.dispatch_passed(lease.passed_over, dispatch_id)
        return lease

    def dispatch_passed(self, task_id: str, spent: str) -> None:
        """Give the task a claim passed over (``Lease.passed_over``: the claim took the head of the
        line with the job ``spent`` made for it) a job again, at the front of the executor's queue:
        it is next. Never raises: if this fails, the sweeper dispatches it within
        ``Config.dispatch_grace`` (the claim set that deadline), keeping its place too."""
        try:
            queue = parse_task_id(task_id)
            if queue is None:
                raise TaskNotFound(task_id)
            self._dispatch_in(task_id, queue, passed=spent)  # its type need not be one this engine runs
        except (GhostlessError, redis.RedisError) as e:
            log.warning("task %s: passed over, not dispatched again yet (the sweeper will): %s", task_id, e)

    def _claim_types(self) -> tuple[str, str]:
        """The types this engine runs and, of them, those with neither a breaker nor a rate limit
        (each as ',a,b,'; ',' for none): a claim may take a task of the second kind without its
        settings."""
        names = [t.name for t in self.registry]
        free = [t.name for t in self.registry if not (t.breaker or t.rate)]
        return "," + ",".join(names) + ",", "," + ",".join(free) + ("," if free else "")

    def _claim_as(self, keys, task_id, worker, claim_id, dispatch_id, types, free, type_name, head, last_try, room):
        """One claim call, with the breaker and rate limit settings of ``type_name`` (if any) and the
        keys of the ``head`` of the ready line (if a MOVED reply named one)."""
        tt = self.registry.get(type_name) if type_name in self.registry else None  # not run here: no settings
        breaker_key, spec, limit_spec = None, "", ""
        limit_keys: tuple[str, ...] = ()
        if tt is not None:
            breaker_key, spec = self._breaker(tt.name)
            limit_keys, limit_spec = self._limit(tt.name)
        try:
            reply = self.scripts.claim(
                keys,
                task_id,
                worker,
                claim_id,
                dispatch_id,
                types,
                breaker_key,
                spec,
                limit_keys,
                limit_spec,
                settings_for=tt.name if tt is not None else "",
                free=free,
                head=head,
                head_keys=[getattr(self.keys.task(head), f) for f in TASK_OWN_KEYS] if head else (),
                last_try=last_try,
                room_ms=ms(room) if room is not None else None,
            )
        except (RedisFull, redis.ConnectionError, redis.TimeoutError):
            if dispatch_id:  # the executor handed this job over: it will not be delivered again
                self.job_lost(task_id, dispatch_id, patience=self.config.dispatch_grace)
            raise
        return reply, tt

    def job_lost(self, task_id: str, dispatch_id: str, patience: float = 0.0) -> bool:
        """Report that the executor job ``dispatch_id`` of a QUEUED task will not run (its enqueue
        or its claim failed): the sweeper looks at the task again within ``Config.dispatch_grace``
        instead of ``requeue_after``. Never raises. While Redis refuses or cannot be reached it
        tries again for up to ``patience`` seconds, then keeps the report for
        ``report_lost_jobs`` (each sweeper tick calls it) and returns False; also False when the
        dispatch is no longer current (claimed, re-dispatched, ended): nothing to report.
        """
        pause, give_up = 0.1, time.monotonic() + patience
        while True:
            try:
                keys = self._keys(task_id)  # TaskNotFound for an id that names no queue
                control = self.keys.queue_key(parse_task_id(task_id) or "", "control")
                reply = self.scripts.dispatch(
                    keys, control, task_id, dispatch_id, ms(self.config.dispatch_grace), rearm=True
                )
                self._unreported.pop(task_id, None)
                return reply[0] == Code.REPLAYED
            except (IllegalTransition, TaskNotFound):
                self._unreported.pop(task_id, None)
                return False
            except (GhostlessError, redis.RedisError) as e:  # RedisFull among them
                if time.monotonic() + pause > give_up:
                    if len(self._unreported) < MAX_UNREPORTED:
                        self._unreported[task_id] = dispatch_id
                    log.warning(
                        "task %s: its job %s is lost and the sweeper could not be told yet (%s)",
                        task_id,
                        dispatch_id,
                        e,
                    )
                    return False
                time.sleep(pause)
                pause = min(2 * pause, 1.0)

    def report_lost_jobs(self) -> int:
        """Report again the lost jobs ``job_lost`` could not (Redis refused); stops at the first
        refusal. Returns how many are still unreported."""
        for task_id, dispatch_id in list(self._unreported.items()):
            self.job_lost(task_id, dispatch_id)
            if task_id in self._unreported:
                break
        return len(self._unreported)

    def lease_for_claim(self, task_id: str, claim_id: str) -> Lease | None:
        """The lease a claim took, while the task is still PROCESSING under it (else None).

        Lets a worker's parent process report on behalf of a work-horse that died. A task that claim
        passed over leads to the head of the line it took (lua/claim.lua: ``passed``), until the
        task is dispatched again.
        """
        row = self.redis.hmget(
            self._keys(task_id).task,
            "status",
            "claim_id",
            "token",
            "attempt",
            "type",
            "worker",
            "lease_ms",
            "max_attempts",
            "passed",
        )
        status, cid, token, attempt, type_name, worker, lease_ms, max_attempts, passed = (text(v) for v in row)
        by, _, head = passed.partition(" ")
        if status == State.QUEUED.value and by == claim_id and head and head != task_id:
            return self.lease_for_claim(head, claim_id)
        if status != State.PROCESSING.value or cid != claim_id:
            return None
        return Lease(
            task_id=task_id,
            token=int(token),
            attempt=int(attempt),
            args=None,
            type=type_name,
            worker=worker,
            lease=int(lease_ms) / 1000,
            max_attempts=int(max_attempts),
            claim_id=claim_id,
        )

    def heartbeat(self, lease: Lease) -> float:
        """Extend the lease. Returns seconds until the task's earliest deadline.

        Sent on a client of its own whose timeouts are bounded by the lease (``heartbeat_client``).
        Raises LeaseLost, TaskCancelled (a LeaseLost) when the task was cancelled, AttemptEnded (a
        LeaseLost, quiet) when the lease's attempt has already reported its outcome, and the
        client's redis errors (a timeout within a third of the lease, or ``Config.wait_timeout``
        when it waits longer)."""
        clients = self.__dict__.setdefault("_heartbeat_clients", {})
        via = clients.get(lease.lease)
        if via is None:
            wait = self.config.wait_timeout if self.config.wait_replicas else 0.0
            via = clients[lease.lease] = heartbeat_client(self.redis, lease.lease, wait)
        reply = self.scripts.heartbeat(self.keys.task(lease.task_id), lease, ms(lease.lease), via=via)
        return int(reply[1]) / 1000

    def stage(self, lease: Lease, name: str) -> None:
        """Enter a declared stage; its deadline (if any) starts now. Raises ValueError, LeaseLost."""
        timeout_ms = self.registry.get(lease.type).stage_timeout_ms(name)
        self.scripts.stage(self.keys.task(lease.task_id), lease, name, timeout_ms)

    def progress(self, lease: Lease, fraction: float, message: str = "") -> None:
        """Report progress (0..1) and a message. Raises ValueError, LeaseLost."""
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 <= fraction <= 1:
            raise ValueError(f"progress must be a number within 0..1, got {fraction!r}")
        self.scripts.progress(self.keys.task(lease.task_id), lease, fraction, _text("message", message, empty=True))

    def checkpoint(self, lease: Lease, key: str, value: Any) -> None:
        """Save a JSON value that later attempts can read (Engine.checkpoints)."""
        self.scripts.checkpoint(
            self.keys.task(lease.task_id), lease, _text("checkpoint key", key), self._json("checkpoint", value)
        )

    def complete(self, lease: Lease, result: Any = None) -> State:
        """Store the result; the task becomes SUCCESS. A repeat with the same lease is a no-op.
        Raises ValueError (not JSON, too big), LeaseLost / TaskCancelled (never overwrites)."""
        result_json = self._json("result", result, self.config.max_result_bytes)
        breaker_key, spec = self._breaker(lease.type)
        reply = self.scripts.complete(self.keys.task(lease.task_id), lease, result_json, breaker_key, spec)
        return State(reply[1])

    def fail(
        self, lease: Lease, error_kind: str, reason: str = "", retryable: bool = True, retry_in: float | None = None
    ) -> State:
        """End the attempt in failure: RETRY_WAITING (retryable, attempts left) or FAILED.

        Error kinds the type declares permanent are never retried. ``retry_in``
        overrides the backoff policy; with 0 the task is dispatched again at once
        (used when the worker, not the task, failed). Returns the new state.
        Raises LeaseLost / TaskCancelled (the outcome is never overwritten).
        """
        tt = self.registry.get(lease.type)
        error_kind = _text("error_kind", error_kind)
        retry = retryable and error_kind not in tt.permanent_errors
        delay = None if retry_in is None else _duration_ms("retry_in", retry_in)
        # Only the task's own retryable failures count against its upstream's breaker.
        breaker_key, spec = self._breaker(lease.type) if retry and retry_in is None else (None, "")
        reply = self.scripts.fail(
            self.keys.task(lease.task_id),
            lease,
            error_kind,
            _text("reason", reason, empty=True),
            retry,
            random.random(),
            delay,
            breaker_key,
            spec,
        )
        state = State(reply[1])
        if state == State.RETRY_WAITING and retry_in == 0 and reply[0] == Code.OK:
            self._retry_now(lease.task_id)
        return state

    def _retry_now(self, task_id: str) -> None:
        reply = self.scripts.promote(self.keys.task(task_id))
        assert reply is not None  # not on a pipeline
        if reply[0] == Code.OK and self.dispatcher.active:
            self.dispatch(task_id)

    def release(self, lease: Lease, reason: str = "released") -> None:
        """Give the task back to PENDING without consuming an attempt (graceful shutdown)."""
        reply = self.scripts.release(self.keys.task(lease.task_id), lease, _text("reason", reason))
        if self.dispatcher.active and reply[0] == Code.OK:
            self.dispatch(lease.task_id)

    def _breaker(self, type_name: str) -> tuple[str | None, str]:
        """(hash key, ARGV spec) of a type's circuit breaker; (None, '') when it has none."""
        tt = self.registry.get(type_name)
        if not tt.breaker:
            return None, ""
        return self.keys.breaker(tt.queue, tt.breaker_name), tt.breaker.spec(tt.breaker_name)

    def _limit(self, type_name: str) -> tuple[tuple[str, ...], str]:
        """(start log and parked set, ARGV spec) of a type's rate limit; ((), '') when it has none."""
        tt = self.registry.get(type_name)
        if tt.rate is None:
            return (), ""
        name = tt.breaker_name
        return (self.keys.rate_log(tt.queue, name), self.keys.rate_parked(tt.queue, name)), tt.rate.spec(name)

    def park(self, task_id: str, wait: float, upstream: str, kind: str = "upstream_open") -> State:
        """Set aside a task whose upstream takes no attempt now (the ``kind`` of UpstreamBusy the
        claim raised): RETRY_WAITING for ``wait`` seconds, no attempt consumed; with
        ``upstream_open``, FAILED instead when its type's breaker policy is to fail fast. With
        ``rate_limited`` the park finds the task's start slot itself (``wait`` is the claim's
        estimate): it waits until then, to the ms."""
        if kind not in ("upstream_open", "rate_limited"):
            raise ValueError(f"kind must be 'upstream_open' or 'rate_limited', got {kind!r}")
        type_name = self.redis.hget(self._keys(task_id).task, "type")
        tt = self.registry.get(text_or_none(type_name))
        fast = tt.breaker is not None and tt.breaker.policy == "fail" and kind == "upstream_open"
        limit_keys, limit_spec = self._limit(tt.name) if kind == "rate_limited" else ((), "")
        reply = self.scripts.park(
            self.keys.task(task_id),
            task_id,
            _duration_ms("wait", wait),
            fast,
            upstream,
            uuid.uuid4().hex,
            kind,
            limit_keys,
            limit_spec,
        )
        return State(reply[1])

    def breakers(self) -> list[dict]:
        """State of every registered type's circuit breaker (dashboard, /metrics)."""
        return breakers_mod.states(self)

    def rate_limits(self) -> list[dict]:
        """Every rate-limited upstream: its rate, starts in the current window, free slots, tasks
        parked by it now and parks so far (dashboard, /metrics; engine/core/rates.py)."""
        return rates_mod.states(self)
