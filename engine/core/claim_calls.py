"""The claim (the worker side of the Engine, first call of an attempt): a job's claim starts its
task or the head of its queue's line (lua/claim.lua), and a task it passed over gets a job again.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

import redis

from .config import ms
from .engine_parts import EngineParts
from .errors import BreakerOpen, Code, GhostlessError, RateLimited, RedisFull, TaskNotFound, WrongDispatch
from .ids import new_claim_id
from .keys import TASK_OWN_KEYS, parse_task_id
from .models import Lease
from .states import State
from .text import text, text_or_none
from .validate import text as _text

log = logging.getLogger("ghostless")
CLAIM_TRIES = 3  # calls of one claim: MOVED (the head comes first) once in a quiet queue


class ClaimCalls(EngineParts):
    """Mixed into Engine; uses its redis, keys, registry, scripts, dispatcher and lease calls."""

    if TYPE_CHECKING:  # the lease calls' (engine/core/lease_calls.py)

        def job_lost(self, task_id: str, dispatch_id: str, patience: float = 0.0) -> bool: ...
        def _breaker(self, type_name: str) -> tuple[str | None, str]: ...
        def _limit(self, type_name: str) -> tuple[tuple[str, ...], str]: ...

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
        claim_id = claim_id or new_claim_id()
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
            passed_over=text(reply[9]) or None,
            traceparent=text(reply[10]),
        )
        if lease.passed_over and redispatch:
            self.dispatch_passed(lease.passed_over, dispatch_id)
        return lease

    def dispatch_passed(self, task_id: str, spent: str) -> None:
        """Give the task a claim passed over (``Lease.passed_over``: the claim took the head of the
        line with the job ``spent`` made for it) a job again, at the front of the executor's queue:
        it is next. Never raises: if this fails, the sweeper dispatches it within
        ``Config.dispatch_grace`` (the claim set that deadline), keeping its place too."""
        if not self.dispatcher.active:  # no executor here: nothing to give it (the sweeper's does)
            return
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
