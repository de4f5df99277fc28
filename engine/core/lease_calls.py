"""The lease holder's calls (the worker side of the Engine) after its claim (claim_calls.py): heartbeat,
stage, progress, checkpoint, complete, fail, release, park. Each is one script call carrying the fencing token.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from typing import TYPE_CHECKING, Any

import redis

from ghostless.core import breakers as breakers_mod, rates as rates_mod

from .clients import heartbeat_client
from .config import ms
from .engine_parts import EngineParts
from .errors import (
    Code,
    GhostlessError,
    IllegalTransition,
    TaskNotFound,
)
from .keys import parse_task_id
from .models import Lease
from .states import State
from .text import text_or_none
from .validate import duration_ms as _duration_ms, text as _text

log = logging.getLogger("ghostless")
MAX_UNREPORTED = 10_000  # lost-job reports a process keeps while Redis refuses them


class LeaseCalls(EngineParts):
    """Mixed into Engine; uses its redis, keys, registry, scripts, dispatcher."""

    _unreported: dict[str, str]  # set by Engine's __init__

    if TYPE_CHECKING:

        def _json(self, what: str, value: Any, limit: int | None = None) -> str: ...

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
