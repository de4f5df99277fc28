"""Stateful property test: random interleavings of every verb, checked against a reference model.

A Hypothesis ``RuleBasedStateMachine`` drives one Engine with submit (with and without
idempotency keys, replays and conflicts, and under a quota with room for one more task or none),
claim (direct, by a job's delivery, or resent), heartbeat, stage, progress, checkpoint, complete,
fail, release, cancel, edit, retry, dispatch, sweep and time passing, on short leases so that expiry
and retry promotion really happen. Each example runs with no executor (tasks wait in PENDING) or
with an in-memory one (the engine dispatches at once: QUEUED).

Rate limits and expiry are in the model too. One type calls an upstream with a rate limit of 2
starts per 200 ms: its claims start an attempt or are refused (nothing changed) and parked
(RETRY_WAITING, no attempt consumed) — refused only when the window was full or another task was
in line, and no 200 ms window ever holds more than 2 of its starts (checked after every step on
the start times the claims recorded, Redis time). Submits may carry an expiry (``expires_in``): a
task never started that is past it ends CANCELLED, reason expired, by the sweep (it must, once the
server clock is past it when the sweep begins) or by a claim, which then starts nothing; a claim
before it starts the task as usual, and a started task never expires. Whether a claim or a sweep
falls before or after an expiry depends on the clock, so either outcome is accepted in the
milliseconds around it, and the lapse must be recorded at or after the expiry.

A small pure-Python model of each task (status, attempt, current fencing token and dispatch,
owner, superseded links, the last ending call of a lease holder) predicts every deterministic
outcome exactly: the new state of a legal call; IllegalTransition, LeaseLost, TaskCancelled,
TaskNotFound, WrongDispatch or IdempotencyConflict, with nothing changed, for the others.

Only the sweeper depends on time. A task the model knows is due (the server clock has passed its
lease deadline / next_retry_at, waited for with wait_for_server_time) must be expired / promoted;
since wall time also passes between steps, any other PROCESSING or RETRY_WAITING task may or may
not be, and whichever happened must be legal: PROCESSING -> RETRY_WAITING or TIMEOUT with the
reason its deadlines call for (heartbeat_lost, stage_timeout:<stage>, attempt_timeout), a lost
heartbeat retried at once; RETRY_WAITING -> PENDING, never before its backoff.

After every step: engine.check() is clean; every task's state, attempt, token, owner and links
agree with the model; the counters in engine.stats() equal the model's counts, and each queue's owner
counts (unfinished tasks and their args bytes, which quotas read) the model's; each history is a
chain of legal transitions ending in the task's state; a terminal task is frozen (until a manual
retry of FAILED / TIMEOUT; SUCCESS and CANCELLED never change).

Because outcomes depend on wall time, what Hypothesis draws must not: no bundles, no
preconditions, no draws that depend on the model. Rules pick tasks and leases by an integer
index into lists the machine keeps (a rule with nothing to act on does nothing), so replaying a
choice sequence always draws the same shape of data.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path

import fakeredis
import pytest
from hypothesis import HealthCheck, Phase, settings, strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from ghostless import (
    TRANSITIONS,
    Backoff,
    Config,
    Engine,
    IdempotencyConflict,
    IllegalTransition,
    Lease,
    LeaseLost,
    Quota,
    QuotaExceeded,
    Rate,
    RateLimited,
    State,
    TaskCancelled,
    TaskExpired,
    TaskNotFound,
    WrongDispatch,
)
from ghostless.core.errors import AttemptEnded
from ghostless.core.keys import BODY_HISTORY, new_task_id
from ghostless.core.models import history_entries
from ghostless.core.priority import SPAN
from ghostless.core.text import text
from tests.support.fakes import FakeDispatcher
from tests.support.wait import server_ms, wait_for_server_time

ROOT = Path(__file__).resolve().parents[2]
DATABASE = DirectoryBasedExampleDatabase(str(ROOT / ".hypothesis" / "examples"))

P, Q, R, W = State.PENDING, State.QUEUED, State.PROCESSING, State.RETRY_WAITING
S, F, T, C = State.SUCCESS, State.FAILED, State.TIMEOUT, State.CANCELLED

# Three task types on two queues, with short leases, stage deadlines and backoffs (seconds).
# Each declares one stage with a deadline and one without. "limited" calls an upstream whose rate
# limit lets LIMIT.limit attempts start in any LIMIT.period.
TYPES = {
    "quick": dict(
        queue="fastq",
        lease=0.15,
        timeout=0.25,
        max_attempts=2,
        backoff=Backoff.fixed([0.03]),
        stages={"fetch": 0.04, "render": 0},
        permanent_errors=("fatal",),
    ),
    "steady": dict(
        queue="bulkq",
        lease=0.15,
        timeout=30.0,
        max_attempts=3,
        backoff=Backoff.exponential(base=0.02, factor=2, cap=0.06, jitter=0.5),
        stages={"upload": 0.05, "wait": 0},
        permanent_errors=(),
    ),
    "limited": dict(
        queue="fastq",
        lease=0.15,
        timeout=30.0,
        max_attempts=2,
        backoff=Backoff.fixed([0.03]),
        stages={"paint": 0.04, "dry": 0},
        permanent_errors=(),
        upstream="lim",
        breaker=False,
        rate=Rate(2, 0.2),
    ),
}
LIMIT = TYPES["limited"]["rate"]
EXPIRES = st.sampled_from([None, None, 0.05, 0.3])  # submit's expires_in
QUEUES = sorted({t["queue"] for t in TYPES.values()})
OWNERS = st.sampled_from(["alice", "bob"])
WORKERS = st.sampled_from(["w1", "w2"])
ENDING = ("complete", "fail", "release")
INDEX = st.integers(0, 255)  # picks a task / lease / job: taken modulo the number there are
# Which lease a lease-holder call carries: the current lease of a PROCESSING task, an older lease of
# a task claimed again since (a stale token, preferably of a task now PROCESSING under a newer one),
# any lease ever taken, or a lease from a lost timeline: the current token under another claim id
# (what a worker holds after a failover lost its claim and the next claim counted to its token again).
HELD = st.sampled_from(["current", "current", "stale", "any", "lost"])


def ms(seconds: float) -> int:
    return round(seconds * 1000)


def args_size(args: dict) -> int:
    return len(json.dumps(args, sort_keys=True, separators=(",", ":")).encode())


def min_backoff_ms(type_: str, attempt: int) -> int:
    """The shortest retry delay the type's backoff allows after failed attempt ``attempt``."""
    b = TYPES[type_]["backoff"]
    delay = (
        b.schedule[min(attempt, len(b.schedule)) - 1] if b.schedule else min(b.cap, b.base * b.factor ** (attempt - 1))
    )
    return int(ms(delay) * (1 - b.jitter))


def _ahead(score: float, of: float) -> bool:
    """lua/claim.lua ahead(): a ready-line score of a higher priority band, or of the same band and
    returning from a lost attempt (sequence below half the band) when ``of`` is not."""
    band, band_of = score // SPAN, of // SPAN
    if band != band_of:
        return band < band_of
    return score - band * SPAN < SPAN / 2 <= of - band_of * SPAN


@dataclass
class Model:
    """What the test believes about one task."""

    id: str
    type: str
    owner: str
    priority: int
    status: State = P
    attempt: int = 0
    token: int = 0  # the latest fencing token issued (0: never claimed)
    tokens: list = field(default_factory=list)  # every token issued, in order
    lease: Lease | None = None  # the Lease of the latest claim
    claim_id: str = ""  # the claim id of the latest claim
    stage: str = ""
    ended: tuple | None = None  # (token, verb) of the last complete/fail/release; cleared by a claim
    due: bool = False  # the server clock is known to be past its lease deadline / next_retry_at
    supersedes: str = ""
    superseded_by: str = ""
    jobs: int = 0  # executor jobs made for it
    dispatch_id: str = ""  # the dispatch a delivery must carry to claim it ("" once it left QUEUED)
    frozen: tuple | None = None  # snapshot of a terminal task: must not change (until a manual retry)
    stale_calls: int = 0  # refused calls with a stale lease: each leaves a "stale" history entry
    seen: int = 0  # history entries checked so far
    last: tuple = ("", "", 0)  # (to, verb, at) of the last transition in its history
    args_bytes: int = 0  # its args' JSON size: counted against its owner while it is unfinished
    expires_at: int | None = None  # its expiry (ms, server time) while it has never started

    @property
    def queue(self) -> str:
        return TYPES[self.type]["queue"]

    @property
    def max_attempts(self) -> int:
        return TYPES[self.type]["max_attempts"]


class TaskMachine(RuleBasedStateMachine):
    client = None  # set by machine_for()
    steps = 0  # rules run, over all examples

    def __init__(self):
        super().__init__()
        self.redis = type(self).client
        self.redis.flushall()
        self.engine: Engine | None = None  # made by start(), which picks the executor
        self.dispatcher: FakeDispatcher | None = None
        self.model: dict[str, Model] = {}
        self.ids = [new_task_id("fastq")]  # every task id, first a well-formed id of no task
        self.leases: list[tuple[Lease, str]] = []  # every (lease, claim id) taken; most become stale
        self.idem: dict[tuple, tuple] = {}  # (queue, owner, key) -> (task id, type, args)
        self.starts: list[int] = []  # every start of an attempt of the rate-limited upstream (ms)
        self.line: set[str] = set()  # tasks parked by the limit and not claimed since (a superset of its line)

    @property
    def waiting(self) -> State:
        """Where a task waits for a worker: with an executor the engine dispatches it at once."""
        return Q if self.dispatcher else P

    # -- picking ----------------------------------------------------------------------------------
    def _task(self, index: int) -> str:
        return self.ids[index % len(self.ids)]

    def _lease(self, index: int, held: str) -> Lease:
        """A lease of the kind ``held`` names when there is one, else any lease taken so far (or,
        before any claim, a lease of no task)."""
        if held in ("current", "lost"):
            current = sorted(m.id for m in self.model.values() if m.status == R)
            if current:
                lease = self.model[current[index % len(current)]].lease
                return replace(lease, claim_id="lost-timeline") if held == "lost" and lease else lease
        elif held == "stale":
            old = [lease for lease, _ in self.leases if lease.token < self.model[lease.task_id].token]
            old = [lease for lease in old if self.model[lease.task_id].status == R] or old
            if old:
                return old[index % len(old)]
        if self.leases:
            return self.leases[index % len(self.leases)][0]
        return self._ghost_lease()

    def _ghost_lease(self) -> Lease:
        return Lease(
            task_id=self.ids[0], token=1, attempt=1, args={}, type="quick", worker="w0", lease=0.15, max_attempts=2
        )

    # -- checking helpers -------------------------------------------------------------------------
    def _snapshot(self, task_id: str) -> tuple:
        """Everything a call might change about a task: its hash, args, result and checkpoints."""
        k = self.engine.keys.task(task_id)
        pipe = self.redis.pipeline(transaction=True)
        pipe.hgetall(k.task).lrange(k.body, 0, BODY_HISTORY - 1).hgetall(k.checkpoints)
        return tuple(pipe.execute())

    def _stale_count(self, queue: str) -> int:
        return int(self.redis.hget(self.engine.keys.queue_key(queue, "stats"), "stale_rejections") or 0)

    def _history(self, task_id: str) -> list[dict]:
        k = self.engine.keys.task(task_id)
        return history_entries(self.redis.lrange(k.body, BODY_HISTORY, -1), created_ms=self._created(k))

    def _created(self, k) -> int:
        return int(self.redis.hget(k.task, "created_at"))

    def _unchanged(self, task_id: str, call):
        """Run ``call``, which must change nothing about the task; return what it returned."""
        before = self._snapshot(task_id)
        result = call()
        assert self._snapshot(task_id) == before, "a no-op call changed the task"
        return result

    def _refused(self, task_id: str, exc: type, call, stale_queue: str | None = None):
        """``call`` must raise exactly ``exc`` and leave the task as it was."""
        before = self._snapshot(task_id)
        stale = self._stale_count(stale_queue) if stale_queue else 0
        with pytest.raises(exc) as err:
            call()
        assert type(err.value) is exc, f"expected {exc.__name__}, got {type(err.value).__name__}: {err.value}"
        assert self._snapshot(task_id) == before, "a refused call changed the task"
        if stale_queue:
            assert self._stale_count(stale_queue) == stale + 1, "a stale call was not counted"
        return err.value

    def _visible(self, m: Model | None, by: str, admin: bool) -> bool:
        return m is not None and (admin or m.owner == by)

    def _holder_outcome(self, lease: Lease, verb: str) -> str:
        """What a lease-holder call must do: ok | replay | ended | missing | cancelled | lost."""
        m = self.model.get(lease.task_id)
        if m is None:
            return "missing"
        latest = (lease.token, lease.claim_id) == (m.token, m.claim_id)  # the fence is the pair
        if verb in ENDING and latest and m.ended == (lease.token, verb):
            return "replay"  # a resent complete/fail/release: reported, not done twice
        if verb == "heartbeat" and latest and m.ended and m.ended[0] == lease.token:
            return "ended"  # in flight as its own attempt ended: refused quietly
        if m.status == R and latest:
            return "ok"
        if m.status == C and latest:
            return "cancelled"
        return "lost"

    def _holder_refused(self, lease: Lease, outcome: str, call) -> None:
        if outcome == "missing":
            self._refused(lease.task_id, TaskNotFound, call)
            return
        m = self.model[lease.task_id]
        if outcome == "ended":
            stale = self._stale_count(m.queue)
            err = self._refused(lease.task_id, AttemptEnded, call)
            assert self._stale_count(m.queue) == stale, "the ended attempt's heartbeat was counted as stale"
            assert err.state == m.status.value and err.token == lease.token
            return
        m.stale_calls += 1
        exc = TaskCancelled if outcome == "cancelled" else LeaseLost
        err = self._refused(lease.task_id, exc, call, stale_queue=m.queue)
        assert err.state == m.status.value and err.token == lease.token

    def _new_task(self, task, supersedes: str = "", expires_at: int | None = None) -> None:
        assert task.id not in self.model, "a new task reused an existing id"
        assert (task.status, task.attempt, task.token, task.supersedes) == (self.waiting, 0, 0, supersedes)
        if supersedes:  # an edit keeps the request's expiry, if it had not started
            assert (round(task.expires_at * 1000) if task.expires_at else None) == expires_at, task.id
        m = self.model[task.id] = Model(
            id=task.id,
            type=task.type,
            owner=task.owner,
            priority=task.priority,
            supersedes=supersedes,
            status=self.waiting,
            args_bytes=args_size(task.args),
            expires_at=round(task.expires_at * 1000) if task.expires_at else None,
        )
        self.ids.append(task.id)
        if self.dispatcher:
            self._dispatched(m)

    def _back_to_waiting(self, m: Model) -> None:
        """The task returned to PENDING; with an executor, the engine dispatched it (QUEUED)."""
        self._move(m, self.waiting)
        if self.dispatcher:
            self._dispatched(m)

    def _dispatched(self, m: Model) -> None:
        """Exactly one executor job was made for the task, and it is the task's current dispatch."""
        jobs = self.dispatcher.dispatches(m.id)
        assert len(jobs) == m.jobs + 1, f"{m.id}: {len(jobs) - m.jobs} jobs made, expected 1"
        m.jobs, m.dispatch_id = len(jobs), jobs[-1]

    @staticmethod
    def _move(m: Model, status: State) -> None:
        if m.status == Q and status != Q:  # its dispatch goes with it (lua/lib/record.lua QUEUED_FIELDS)
            m.dispatch_id = ""
        m.status, m.due = status, False

    # -- client calls -----------------------------------------------------------------------------
    @initialize(
        executor=st.booleans(),
        tasks=st.lists(st.tuples(st.sampled_from(sorted(TYPES)), OWNERS), min_size=2, max_size=5),
        claims=st.integers(0, 5),
    )
    def start(self, executor, tasks, claims):
        """An engine with or without an executor, and a few tasks, some claimed."""
        type(self).steps += 1
        self.dispatcher = FakeDispatcher() if executor else None
        self.engine = Engine(
            self.redis, namespace="sm", config=Config(history_maxlen=10_000), dispatcher=self.dispatcher, check=False
        )
        for name, spec in TYPES.items():
            self.engine.task(name=name, **spec)(lambda ctx, **kw: None)
        for type_, owner in tasks:
            self._submit(type_, owner, {"n": 0}, None, 0)
        for task_id in self.ids[1 : 1 + claims]:
            self._claim(task_id, "w1")

    @rule(
        type_=st.sampled_from(sorted(TYPES)),
        owner=OWNERS,
        n=st.integers(0, 1),
        key=st.none() | st.sampled_from(["k1", "k2"]),
        priority=st.integers(-2, 2),
        expires=EXPIRES,
    )
    def submit(self, type_, owner, n, key, priority, expires):
        type(self).steps += 1
        self._submit(type_, owner, {"n": n}, key, priority, expires)

    @rule(index=INDEX)
    def replay_submit(self, index):
        """Resend a submit that used an idempotency key, same arguments: the same task comes back."""
        type(self).steps += 1
        if self.idem:
            queue, owner, key = sorted(self.idem)[index % len(self.idem)]
            task_id, type_, args = self.idem[(queue, owner, key)]
            self._submit(type_, owner, args, key, self.model[task_id].priority)

    def _submit(self, type_, owner, args, key, priority, expires=None) -> None:
        queue = TYPES[type_]["queue"]
        known = self.idem.get((queue, owner, key)) if key is not None else None
        call = lambda: self.engine.submit(  # noqa: E731
            type_, args, owner=owner, idempotency_key=key, priority=priority, expires_in=expires
        )
        if known is None:
            task = call()
            assert (task.owner, task.type, task.args, task.priority) == (owner, type_, args, priority)
            self._new_task(task)
            if key is not None:
                self.idem[(queue, owner, key)] = (task.id, type_, args)
        elif known[1:] == (type_, args):
            task = self._unchanged(known[0], call)
            assert task.id == known[0] and task.status == self.model[known[0]].status
        else:
            err = self._refused(known[0], IdempotencyConflict, call)
            assert err.task_id == known[0]

    @rule(type_=st.sampled_from(sorted(TYPES)), owner=OWNERS, headroom=st.integers(0, 1), bytes_limit=st.booleans())
    def submit_under_quota(self, type_, owner, headroom, bytes_limit):
        """Submit with a quota that leaves room for one more task (headroom 1) or none (0): of
        unfinished tasks, or of their args bytes. A refusal writes nothing."""
        type(self).steps += 1
        args = {"n": 0}
        mine = [
            m
            for m in self.model.values()
            if m.queue == TYPES[type_]["queue"] and m.owner == owner and not m.status.terminal
        ]
        if bytes_limit:
            quota = Quota(max_unfinished_bytes=sum(m.args_bytes for m in mine) + args_size(args) - 1 + headroom)
        elif len(mine) + headroom == 0:
            return  # a limit of 0 tasks is no valid quota
        else:
            quota = Quota(max_unfinished=len(mine) + headroom)
        call = lambda: self.engine.submit(type_, args, owner=owner, quota=quota)  # noqa: E731
        if headroom:
            self._new_task(call())
        else:
            before = self.engine.stats()
            with pytest.raises(QuotaExceeded) as refused:
                call()
            assert refused.value.limit == ("max_unfinished_bytes" if bytes_limit else "max_unfinished")
            assert self.engine.stats() == before

    @rule(index=INDEX, by=OWNERS, admin=st.booleans())
    def cancel(self, index, by, admin):
        type(self).steps += 1
        task_id = self._task(index)
        m = self.model.get(task_id)
        call = lambda: self.engine.cancel(task_id, by=by, admin=admin)  # noqa: E731
        if not self._visible(m, by, admin):
            self._refused(task_id, TaskNotFound, call)  # another owner's task looks missing
        elif m.status == C:
            assert self._unchanged(task_id, call) is None  # cancelling a cancelled task: a no-op
        elif m.status.terminal:
            assert self._refused(task_id, IllegalTransition, call).state == m.status.value
        else:
            call()
            self._move(m, C)

    @rule(index=INDEX, by=OWNERS, admin=st.booleans(), n=st.integers(0, 1))
    def edit(self, index, by, admin, n):
        type(self).steps += 1
        task_id = self._task(index)
        m = self.model.get(task_id)
        args = {"n": n, "pad": "x" * (5 * n)}  # of another size than the submit's: the bytes counts follow
        call = lambda: self.engine.edit(task_id, args, by=by, admin=admin)  # noqa: E731
        if not self._visible(m, by, admin):
            self._refused(task_id, TaskNotFound, call)
        elif m.status.terminal:
            assert self._refused(task_id, IllegalTransition, call).state == m.status.value
        else:
            new = call()
            assert (new.owner, new.type, new.args, new.priority) == (m.owner, m.type, args, m.priority)
            self._move(m, C)
            m.superseded_by = new.id
            self._new_task(new, supersedes=task_id, expires_at=m.expires_at)

    @rule(index=INDEX, by=OWNERS, admin=st.booleans())
    def retry(self, index, by, admin):
        type(self).steps += 1
        task_id = self._task(index)
        m = self.model.get(task_id)
        call = lambda: self.engine.retry(task_id, by=by, admin=admin)  # noqa: E731
        if not self._visible(m, by, admin):
            self._refused(task_id, TaskNotFound, call)
        elif m.status not in (F, T):
            assert self._refused(task_id, IllegalTransition, call).state == m.status.value
        else:
            call()
            self._back_to_waiting(m)
            m.attempt, m.stage, m.frozen = 0, "", None

    @rule(index=INDEX)
    def dispatch(self, index):
        """Hand a task to the executor again (what the sweeper does when a job was lost)."""
        type(self).steps += 1
        if not self.dispatcher:
            return
        task_id = self._task(index)
        m = self.model.get(task_id)
        call = lambda: self.engine.dispatch(task_id)  # noqa: E731
        if m is None:
            self._refused(task_id, TaskNotFound, call)
        elif m.status in (P, Q):
            call()
            self._move(m, Q)
            self._dispatched(m)
        else:
            # The script refuses before any job is made (the dispatch id is recorded first).
            assert self._refused(task_id, IllegalTransition, call).state == m.status.value

    # -- worker calls -----------------------------------------------------------------------------
    @rule(index=INDEX, worker=WORKERS)
    def claim(self, index, worker):
        """Claim any task directly (most are not claimable: refused, nothing changes)."""
        type(self).steps += 1
        self._claim(self._task(index), worker)

    @rule(index=INDEX)
    def claim_waiting(self, index):
        """Claim one of the tasks that can be claimed, if any. (One argument, named to sort first:
        Hypothesis draws the first rule more often, and this one keeps leases coming.)"""
        type(self).steps += 1
        waiting = sorted(m.id for m in self.model.values() if m.status in (P, Q))
        if waiting:
            task_id = waiting[index % len(waiting)]
            self._claim(task_id, f"w{index % 2 + 1}", dispatch_id=self.model[task_id].dispatch_id)

    @rule(index=INDEX, late=st.booleans())
    def claim_expiring(self, index, late):
        """Claim a task that has an expiry, as it comes or (late) once it has passed: a claim after
        the expiry cancels the task instead of starting it."""
        type(self).steps += 1
        expiring = sorted(m.id for m in self.model.values() if m.status in (P, Q) and m.expires_at is not None)
        if expiring:
            m = self.model[expiring[index % len(expiring)]]
            if late:
                wait_for_server_time(self.redis, m.expires_at, timeout=5)
            self._claim(m.id, "w1", dispatch_id=m.dispatch_id)

    @rule()
    def claim_every_limited(self):
        """Claim every waiting task of the rate-limited type at once, as busy workers would: the
        limit lets some start and parks the others."""
        type(self).steps += 1
        for task_id in sorted(m.id for m in self.model.values() if m.status in (P, Q) and m.type == "limited"):
            self._claim(task_id, "w2", dispatch_id=self.model[task_id].dispatch_id)

    @rule(index=INDEX, worker=WORKERS)
    def deliver(self, index, worker):
        """An executor job runs: it claims with its dispatch id (a job of an old dispatch is refused)."""
        type(self).steps += 1
        if self.dispatcher and self.dispatcher.enqueued:
            task_id, _, dispatch_id = self.dispatcher.enqueued[index % len(self.dispatcher.enqueued)]
            self._claim(task_id, worker, dispatch_id=dispatch_id)

    @rule(index=INDEX)
    def resend_claim(self, index):
        """A claim sent again with its claim id (a lost reply): the same lease while the task is
        still PROCESSING under that claim; otherwise judged as a new claim."""
        type(self).steps += 1
        if self.leases:
            lease, claim_id = self.leases[index % len(self.leases)]
            m = self.model[lease.task_id]
            if m.status == R and m.claim_id == claim_id:
                again = self._unchanged(m.id, lambda: self.engine.claim(m.id, lease.worker, claim_id=claim_id))
                assert again == m.lease
                assert self.engine.lease_for_claim(m.id, claim_id).token == m.token
            else:
                assert self.engine.lease_for_claim(m.id, claim_id) is None
                self._claim(m.id, lease.worker, claim_id=claim_id)

    def _claim(self, task_id: str, worker: str, claim_id: str | None = None, dispatch_id: str = "") -> None:
        m = self.model.get(task_id)
        claim_id = claim_id or uuid.uuid4().hex
        call = lambda: self.engine.claim(task_id, worker, dispatch_id=dispatch_id, claim_id=claim_id)  # noqa: E731
        if m is not None and dispatch_id and m.status == Q and m.dispatch_id == dispatch_id:
            self._deliver(m, call, claim_id, worker)  # its current job: the claim may take the head instead
        elif m is None:
            self._refused(task_id, TaskNotFound, call)
        elif m.status not in (P, Q):
            assert self._refused(task_id, IllegalTransition, call).state == m.status.value
        elif m.expires_at is not None and m.expires_at <= server_ms(self.redis):
            self._expired_at_claim(m, call)  # before anything else: even a stale delivery
        elif m.expires_at is not None:
            self._claim_before_expiry(m, call, dispatch_id, claim_id, worker)
        elif dispatch_id and dispatch_id != m.dispatch_id:
            assert self._refused(task_id, WrongDispatch, call).dispatch_id == dispatch_id
        elif m.type == "limited":
            self._limited_claim(m, call, claim_id, worker)
        else:
            self._claimed(m, call(), claim_id, worker)

    def _deliver(self, m: Model, call, claim_id: str, worker: str) -> None:
        """A delivery of the task's current job: the claim takes the head of the queue's ready line
        when the head is ahead (a higher priority, or returning from a lost attempt) and it can
        start it here, else the task; a task passed over is dispatched again at once."""
        if m.expires_at is not None and m.expires_at <= server_ms(self.redis):
            return self._expired_at_claim(m, call)  # its own expiry first
        ready = self.engine.keys.task(m.id).ready
        first = self.redis.zrange(ready, 0, 0, withscores=True)
        head = self.model[text(first[0][0])] if first and text(first[0][0]) != m.id else None
        assert head is None or head.status == Q, f"{head.id}: in the ready line while {head.status}"
        ahead = head is not None and _ahead(first[0][1], self.redis.zscore(ready, m.id))
        before, t0 = self._snapshot(m.id), server_ms(self.redis)
        busy = lease = None
        try:
            lease = call()
        except TaskExpired:  # its expiry came as the claim ran
            return self._lapsed(m, "claim")
        except RateLimited as e:
            busy = e
        took = self.model[busy.task_id if busy is not None else lease.task_id]
        assert took is m or (took is head and ahead), f"took {took.id}: neither {m.id} nor the head ahead of it"
        if ahead and head.expires_at is None and (head.type != "limited" or m.type == "limited"):
            assert took is head, f"{m.id}'s job passed over {head.id}, ahead of it in line"
        if took is head:
            self._dispatched(m)  # passed over: a job again (at the front), its place in line kept
        if busy is not None:
            if took is m:
                assert self._snapshot(m.id) == before, "a refused claim changed the task"
            return self._parked(took, busy, t0)
        if took.type == "limited":
            self._started(took, lease, claim_id, worker, t0)
        else:
            self._claimed(took, lease, claim_id, worker)

    def _claim_before_expiry(self, m: Model, call, dispatch_id: str, claim_id: str, worker: str) -> None:
        """A claim as the expiry comes: if it finds the task expired it cancels it, else as usual."""
        try:
            if dispatch_id and dispatch_id != m.dispatch_id:
                assert self._refused(m.id, WrongDispatch, call).dispatch_id == dispatch_id
            elif m.type == "limited":
                self._limited_claim(m, call, claim_id, worker)
            else:
                self._claimed(m, call(), claim_id, worker)
        except TaskExpired:  # raised by the call, before any of the model's checks
            self._lapsed(m, "claim")

    def _expired_at_claim(self, m: Model, call) -> None:
        with pytest.raises(TaskExpired):
            call()
        self._lapsed(m, "claim")

    def _lapsed(self, m: Model, by: str) -> None:
        """The task ended CANCELLED, reason expired, at or after its expiry, never having started."""
        got = self.engine.get(m.id)
        assert (got.status, got.reason, got.error_kind, got.attempt) == (C, "expired", "expired", m.attempt), by
        assert m.expires_at is not None, f"{m.id}: a task without an expiry (or started) lapsed"
        last = self._history(m.id)[-1]
        assert (last["verb"], last["from"], last["to"]) == ("lapse", m.status.value, "CANCELLED"), last
        assert int(last["at"]) >= m.expires_at, f"{m.id}: lapsed {m.expires_at - int(last['at'])} ms early"
        self._move(m, C)

    def _limited_claim(self, m: Model, call, claim_id: str, worker: str) -> None:
        """A claim of the rate-limited type: it starts, or (nothing changed) the worker parks it.
        Refused only when the window was full or another task was in line; allowed otherwise."""
        before, t0 = self._snapshot(m.id), server_ms(self.redis)
        try:
            lease = call()
        except RateLimited as busy:
            assert self._snapshot(m.id) == before, "a refused claim changed the task"
            return self._parked(m, busy, t0)
        self._started(m, lease, claim_id, worker, t0)

    def _parked(self, m: Model, busy: RateLimited, t0: int) -> None:
        """The limit refused the claim of ``m`` (from ``t0``): the worker parks it."""
        t1 = server_ms(self.redis)
        in_window = sum(1 for s in self.starts if s > t0 - ms(LIMIT.period))
        assert in_window >= LIMIT.limit or self.line - {m.id}, f"refused with {in_window} starts, none in line"
        assert (busy.upstream, busy.kind) == ("lim", "rate_limited") and busy.wait > 0
        assert self.engine.park(m.id, busy.wait, busy.upstream, busy.kind) == W
        got = self.engine.get(m.id)
        assert (got.attempt, got.reason) == (m.attempt, "rate_limited: lim")  # the park consumed no attempt
        assert ms(got.next_retry_at) >= t1 - 50 or self.line
        self._move(m, W)
        m.dispatch_id = ""
        self.line.add(m.id)

    def _started(self, m: Model, lease: Lease, claim_id: str, worker: str, t0: int) -> None:
        """The limit let a claim of ``m`` (from ``t0``) start an attempt."""
        t1 = server_ms(self.redis)
        self._claimed(m, lease, claim_id, worker)
        start = ms(self.engine.get(m.id).started_at)
        assert t0 <= start <= t1
        self.starts.append(start)
        self.line.discard(m.id)

    def _claimed(self, m: Model, lease: Lease, claim_id: str, worker: str) -> None:
        assert all(lease.token > old for old in m.tokens), f"fencing token {lease.token} after {m.tokens}"
        assert (lease.attempt, lease.max_attempts, lease.type, lease.worker) == (
            m.attempt + 1,
            m.max_attempts,
            m.type,
            worker,
        )
        assert lease.lease == TYPES[m.type]["lease"]
        self._move(m, R)
        m.attempt, m.token, m.lease, m.stage, m.ended = lease.attempt, lease.token, lease, "", None
        m.tokens.append(lease.token)
        m.claim_id, m.dispatch_id, m.expires_at = claim_id, "", None  # started: it never expires
        self.leases.append((lease, claim_id))

    @rule(index=INDEX, held=HELD)
    def heartbeat(self, index, held):
        type(self).steps += 1
        lease = self._lease(index, held)
        outcome = self._holder_outcome(lease, "heartbeat")
        if outcome != "ok":
            return self._holder_refused(lease, outcome, lambda: self.engine.heartbeat(lease))
        left = self.engine.heartbeat(lease)
        assert left <= lease.lease
        # Still due only if even the extended deadline (stage / attempt) has passed already.
        self.model[lease.task_id].due = left <= 0

    @rule(index=INDEX, held=HELD, which=st.sampled_from([0, 1, 2]))
    def stage(self, index, held, which):
        """Enter the lease's type's stage with a deadline (0), the one without (1), or an undeclared one."""
        type(self).steps += 1
        lease = self._lease(index, held)
        name = [*TYPES[lease.type]["stages"], "nope"][which]
        call = lambda: self.engine.stage(lease, name)  # noqa: E731
        if name == "nope":
            with pytest.raises(ValueError, match="declares no stage"):
                self._unchanged(lease.task_id, call)
            return
        outcome = self._holder_outcome(lease, "stage")
        if outcome != "ok":
            return self._holder_refused(lease, outcome, call)
        m = self.model[lease.task_id]
        if name == m.stage:
            self._unchanged(lease.task_id, call)  # already there: its deadline keeps running
            return
        call()
        m.stage = name
        m.due = False  # the stage deadline was replaced: unknown until time passes again

    @rule(index=INDEX, held=HELD, fraction=st.sampled_from([0.0, 0.5, 1.0]), message=st.sampled_from(["", "halfway"]))
    def progress(self, index, held, fraction, message):
        type(self).steps += 1
        lease = self._lease(index, held)
        outcome = self._holder_outcome(lease, "progress")
        call = lambda: self.engine.progress(lease, fraction, message)  # noqa: E731
        if outcome != "ok":
            return self._holder_refused(lease, outcome, call)
        call()
        got = self.engine.get(lease.task_id)
        assert (got.status, got.progress, got.message) == (R, fraction, message)

    @rule(index=INDEX, held=HELD, key=st.sampled_from(["a", "b"]))
    def checkpoint(self, index, held, key):
        type(self).steps += 1
        lease = self._lease(index, held)
        outcome = self._holder_outcome(lease, "checkpoint")
        value = {"token": lease.token}
        call = lambda: self.engine.checkpoint(lease, key, value)  # noqa: E731
        if outcome != "ok":
            return self._holder_refused(lease, outcome, call)
        before = self.redis.hgetall(self.engine.keys.task(lease.task_id).task)
        call()
        assert self.redis.hgetall(self.engine.keys.task(lease.task_id).task) == before
        assert self.engine.checkpoints(lease.task_id)[key] == value

    @rule(index=INDEX, held=HELD)
    def complete(self, index, held):
        type(self).steps += 1
        lease = self._lease(index, held)
        outcome = self._holder_outcome(lease, "complete")
        call = lambda: self.engine.complete(lease, {"token": lease.token})  # noqa: E731
        m = self.model.get(lease.task_id)
        if outcome == "replay":
            assert self._unchanged(lease.task_id, call) == m.status
        elif outcome != "ok":
            self._holder_refused(lease, outcome, call)
        else:
            assert call() == S
            self._move(m, S)
            m.ended = (lease.token, "complete")
            assert self.engine.get(lease.task_id).result == {"token": lease.token}

    @rule(
        index=INDEX,
        held=HELD,
        kind=st.sampled_from(["boom", "fatal"]),
        retryable=st.booleans(),
        retry_in=st.sampled_from([None, None, 0]),
    )
    def fail(self, index, held, kind, retryable, retry_in):
        type(self).steps += 1
        lease = self._lease(index, held)
        outcome = self._holder_outcome(lease, "fail")
        call = lambda: self.engine.fail(lease, kind, "it broke", retryable=retryable, retry_in=retry_in)  # noqa: E731
        m = self.model.get(lease.task_id)
        if outcome == "replay":
            assert self._unchanged(lease.task_id, call) == m.status
        elif outcome != "ok":
            self._holder_refused(lease, outcome, call)
        else:
            again = retryable and kind not in TYPES[m.type]["permanent_errors"] and m.attempt < m.max_attempts
            assert call() == (W if again else F)
            m.ended = (lease.token, "fail")
            if not again:
                self._move(m, F)
            elif retry_in == 0:
                self._back_to_waiting(m)  # the worker, not the task, failed: promoted at once
            else:
                self._move(m, W)
            got = self.engine.get(lease.task_id)
            assert got.error_kind == kind and (got.next_retry_at is not None) == (m.status == W)

    @rule(index=INDEX, held=HELD)
    def release(self, index, held):
        type(self).steps += 1
        lease = self._lease(index, held)
        outcome = self._holder_outcome(lease, "release")
        call = lambda: self.engine.release(lease, "shutting down")  # noqa: E731
        m = self.model.get(lease.task_id)
        if outcome == "replay":
            assert self._unchanged(lease.task_id, call) is None
        elif outcome != "ok":
            self._holder_refused(lease, outcome, call)
        else:
            call()
            self._back_to_waiting(m)
            m.attempt -= 1  # a release consumes no attempt
            m.ended, m.stage = (lease.token, "release"), ""

    @rule(verb=st.sampled_from(["heartbeat", "stage", "progress", "checkpoint", "complete", "fail", "release"]))
    def holder_call_on_missing_task(self, verb):
        type(self).steps += 1
        ghost = self._ghost_lease()
        call = {
            "heartbeat": lambda: self.engine.heartbeat(ghost),
            "stage": lambda: self.engine.stage(ghost, "fetch"),
            "progress": lambda: self.engine.progress(ghost, 0.5),
            "checkpoint": lambda: self.engine.checkpoint(ghost, "a", 1),
            "complete": lambda: self.engine.complete(ghost),
            "fail": lambda: self.engine.fail(ghost, "boom"),
            "release": lambda: self.engine.release(ghost),
        }[verb]
        self._refused(ghost.task_id, TaskNotFound, call)

    # -- sweeper and time -------------------------------------------------------------------------
    @rule()
    def sweep(self):
        type(self).steps += 1
        self._sweep(1000)

    @rule()
    def sweep_in_batches_of_one(self):
        type(self).steps += 1
        self._sweep(1)

    def _sweep(self, batch: int) -> None:
        t0 = server_ms(self.redis)
        # An attempt's lease is gone from the hash once the attempt ends: read it before the sweep.
        keys = self.engine.keys
        running = [m.id for m in self.model.values() if m.status == R]
        self._lease_until = {tid: int(self.redis.hget(keys.task(tid).task, "lease_until")) for tid in running}
        report = self.engine.sweep(batch)
        expired = timed_out = promoted = lapsed = 0
        for m in list(self.model.values()):
            if m.status.terminal:
                continue  # the invariant checks that nothing else moved
            got = self.engine.get(m.id)
            if m.expires_at is not None and got.status == C:  # never started, past its expiry
                self._lapsed(m, "sweeper")
                lapsed += 1
                continue
            assert m.expires_at is None or m.expires_at > t0, f"{m.id}: past its expiry, the sweep left it"
            if m.status not in (R, W):
                continue
            if got.status == m.status:
                assert not m.due, f"{m.id} was due in {m.status} but the sweep left it"
                continue
            if m.status == R:
                target = W if m.attempt < m.max_attempts else T
                # A retry may fall due within the same tick (at once after a lost heartbeat).
                assert got.status == target or (target == W and got.status == self.waiting), (
                    f"expired {m.id} (attempt {m.attempt}/{m.max_attempts}) went to {got.status}"
                )
                self._check_expiry(m, got)
                expired += 1
                timed_out += target == T
                promoted += got.status == self.waiting
            else:
                assert got.status == self.waiting, f"promoted {m.id} went to {got.status}"
                promoted += 1
            if got.status == self.waiting:
                assert got.next_retry_at is None and got.attempt == m.attempt
                self._back_to_waiting(m)
            else:
                self._move(m, got.status)
        assert (report.expired, report.timed_out, report.promoted, report.lapsed) == (
            expired,
            timed_out,
            promoted,
            lapsed,
        ), report
        assert (report.dispatched, report.refreshed, report.purged) == (promoted if self.dispatcher else 0, 0, 0), (
            report
        )

    def _check_expiry(self, m: Model, got) -> None:
        """The expiry is recorded with the one reason its deadlines allow, and retried as it should be."""
        spec = TYPES[m.type]
        hist = self._history(m.id)
        transitions = [e for e in hist if e["kind"] == "transition"]
        expected = [("PROCESSING", "TIMEOUT", "expire")]
        if got.status != T:
            expected.append(("TIMEOUT", "RETRY_WAITING", "expire"))
        if got.status == self.waiting:
            expected.append(("RETRY_WAITING", "PENDING", "promote"))
            if self.dispatcher:
                expected.append(("PENDING", "QUEUED", "dispatch"))
        tail = transitions[-len(expected) :]
        assert [(e["from"], e["to"], e["verb"]) for e in tail] == expected, tail
        reason = tail[0]["reason"]
        assert got.reason == reason and got.error_kind == "timeout"
        assert all(e.get("reason") == reason for e in tail[:2])
        expire_at = int(tail[0]["at"])
        claim_i = max(i for i, e in enumerate(hist) if e["kind"] == "transition" and e["verb"] == "claim")
        claim = hist[claim_i]
        assert int(claim["token"]) == m.token
        stages = [e for e in hist[claim_i:] if e["kind"] == "stage"]
        assert (stages[-1]["stage"] if stages else "") == m.stage
        stage_limit = ms(spec["stages"].get(m.stage) or 0)
        if expire_at >= int(claim["at"]) + ms(spec["timeout"]):
            assert reason == "attempt_timeout", reason
        elif stage_limit and expire_at >= int(stages[-1]["at"]) + stage_limit:
            assert reason == f"stage_timeout:{m.stage}", reason
        else:
            assert reason == "heartbeat_lost", reason
            lease_until = self._lease_until[m.id]
            assert lease_until <= expire_at, "heartbeat_lost before the lease lapsed"
        if got.status == T:
            return
        if reason == "heartbeat_lost":
            # The worker died, the task did not fail: it is retried at once, in the same tick.
            assert got.status == self.waiting, f"{m.id}: heartbeat_lost left it in {got.status}"
        elif got.status == self.waiting:
            assert int(tail[2]["at"]) - expire_at >= min_backoff_ms(m.type, m.attempt), "promoted too early"
        else:
            assert ms(got.next_retry_at) - expire_at >= min_backoff_ms(m.type, m.attempt)

    @rule()
    def time_passes(self):
        """Wait until the server clock passes every lease deadline and retry time: all are due."""
        type(self).steps += 1
        self._time_passes(None)

    @rule(index=INDEX)
    def time_passes_for_one(self, index):
        """Wait until one task's deadline passes; those with earlier deadlines are due too."""
        type(self).steps += 1
        self._time_passes(index)

    def _time_passes(self, which: int | None) -> None:
        now = server_ms(self.redis)
        deadlines, expiries = {}, {}
        for m in self.model.values():
            if m.expires_at is not None and not m.status.terminal:
                assert m.expires_at <= now + 300, f"{m.id}: expiry {m.expires_at - now} ms away"
                expiries[m.id] = m.expires_at  # not "due": a sweep checks expiries by the clock
            if m.status not in (R, W):
                continue
            got = self.engine.get(m.id)
            at = got.lease_deadline if m.status == R else got.next_retry_at
            assert at is not None, f"{m.id} in {m.status} has no deadline"
            limit = ms(TYPES[m.type]["lease"] if m.status == R else 0.1)
            if m.status == W and m.id in self.line:  # parked until its start slot: up to a period per limit ahead
                limit = ms(LIMIT.period) * (2 + len(self.line) // LIMIT.limit)
            assert ms(at) <= now + limit, f"{m.id}: deadline {ms(at) - now} ms away, more than {limit} ms"
            deadlines[m.id] = ms(at)
        if not deadlines and not expiries:
            return
        ids = sorted(deadlines.keys() | expiries.keys())
        pick = ids[which % len(ids)] if which is not None else None
        until = (
            max([*deadlines.values(), *expiries.values()])
            if pick is None
            else deadlines.get(pick, expiries.get(pick, 0))
        )
        wait_for_server_time(self.redis, until, timeout=5)
        for task_id, at in deadlines.items():
            if at <= until:
                self.model[task_id].due = True

    @rule(millis=st.integers(1, 50))
    def pause(self, millis):
        """A little time passes; nothing becomes known to be due."""
        type(self).steps += 1
        wait_for_server_time(self.redis, server_ms(self.redis) + millis, timeout=5)

    # -- invariants -------------------------------------------------------------------------------
    @invariant()
    def engine_agrees_with_model(self):
        assert self.engine.check() == []
        period = ms(LIMIT.period)  # never more starts of the limited upstream in any window than its limit
        busiest = max((sum(1 for u in self.starts if t <= u < t + period) for t in self.starts), default=0)
        assert busiest <= LIMIT.limit, f"{busiest} starts within {period} ms: {sorted(self.starts)}"
        counts = {q: {s.value: 0 for s in State} for q in QUEUES}
        models = list(self.model.values())
        for m, got in zip(models, self.engine.get_many([m.id for m in models])):
            assert got is not None, f"{m.id} vanished"
            assert got.status == m.status, f"{m.id}: engine {got.status}, model {m.status}"
            assert (got.attempt, got.token, got.owner, got.type, got.priority) == (
                m.attempt,
                m.token,
                m.owner,
                m.type,
                m.priority,
            ), m.id
            assert (got.supersedes, got.superseded_by) == (m.supersedes, m.superseded_by), m.id
            assert m.tokens == sorted(set(m.tokens))  # strictly increasing across claims
            counts[m.queue][m.status.value] += 1
            if m.status.terminal:
                snapshot = self._snapshot(m.id)
                if m.frozen is None:
                    m.frozen = snapshot
                assert snapshot == m.frozen, f"terminal {m.id} ({m.status}) changed"
        stats = self.engine.stats()
        for q in QUEUES:
            assert stats[q]["counts"] == counts[q], q
        self._check_owner_counts(models)
        self._check_histories_and_dispatches(models)

    def _check_owner_counts(self, models: list[Model]) -> None:
        """Each queue's owners hash holds, per owner, the unfinished tasks and their args bytes."""
        for q in QUEUES:
            expected: dict[str, int] = {}
            for m in models:
                if m.queue == q and not m.status.terminal:
                    expected[f"n:{m.owner}"] = expected.get(f"n:{m.owner}", 0) + 1
                    expected[f"b:{m.owner}"] = expected.get(f"b:{m.owner}", 0) + m.args_bytes
            got = {k.decode(): int(v) for k, v in self.redis.hgetall(self.engine.keys.queue_key(q, "owners")).items()}
            assert got == expected, q

    def _check_histories_and_dispatches(self, models: list[Model]) -> None:
        """Each task's history is a chain of legal transitions ending in its state, in time order,
        with one "stale" entry per refused stale call (reading only what the last step added); its
        current dispatch and its executor jobs are the ones the model expects."""
        pipe = self.redis.pipeline(transaction=False)
        for m in models:
            k = self.engine.keys.task(m.id)
            pipe.lrange(k.body, BODY_HISTORY + m.seen, -1).hget(k.task, "dispatch_id").hget(k.task, "created_at")
        replies = pipe.execute()
        for m, entries, dispatch_id, created in zip(models, replies[::3], replies[1::3], replies[2::3]):
            assert (dispatch_id or b"").decode() == m.dispatch_id, f"{m.id}: dispatch {dispatch_id}"
            assert len(self.dispatcher.dispatches(m.id) if self.dispatcher else []) == m.jobs, m.id
            m.seen += len(entries)
            for e in history_entries(entries, created_ms=int(created)):
                to, verb, at = m.last
                assert int(e["at"]) >= at, f"{m.id}: history goes back in time: {e}"
                if e["kind"] == "stale":
                    m.stale_calls -= 1
                    continue
                if e["kind"] != "transition":
                    assert e["kind"] == "stage", e
                    continue
                source = e.get("from", "")
                assert source == to, f"{m.id}: transition {e} does not start from {to!r}"
                edge = (State(source) if source else None, State(e["to"]))
                assert edge in TRANSITIONS[e["verb"]].all_edges(), f"{m.id}: illegal transition {e}"
                if edge == (T, W):
                    assert verb == "expire" and int(e["at"]) == at  # in the same call as PROCESSING -> TIMEOUT
                m.last = (e["to"], e["verb"], int(e["at"]))
            assert m.last[0] == m.status.value, f"{m.id}: history ends in {m.last[0]}, task is {m.status}"
            assert m.stale_calls == 0, f"{m.id}: {m.stale_calls} refused stale calls not in its history"


def machine_for(client, name: str) -> type[TaskMachine]:
    """A machine class bound to ``client`` (Hypothesis builds one instance per example)."""
    return type(name, (TaskMachine,), {"client": client, "steps": 0})


def run(machine: type[TaskMachine], examples: int, steps: int) -> int:
    """Run the machine; returns how many rules ran in all.

    No shrinking: steps take real time, so shrinking would run for minutes (past the test
    timeout), and a replay need not take the same path (a lease may lapse in one run and not in
    the next; Hypothesis then reports the failure as flaky, the original error inside). A failure
    is reported as first found, every step listed.
    """
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            database=DATABASE,
            phases=[Phase.explicit, Phase.reuse, Phase.generate],
            suppress_health_check=[
                HealthCheck.too_slow,
                HealthCheck.filter_too_much,
                HealthCheck.data_too_large,
                HealthCheck.large_base_example,
            ],
        ),
    )
    return machine.steps


def test_state_machine_on_fakeredis():
    client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    try:
        assert run(machine_for(client, "FakeRedisTaskMachine"), examples=15, steps=40) >= 400
    finally:
        client.close()


def run_on(client, name: str, examples: int, steps: int) -> int:
    """``run`` on a real server's ``client``, emptied and closed afterwards."""
    try:
        return run(machine_for(client, name), examples=examples, steps=steps)
    finally:
        client.flushall()
        client.close()


def test_state_machine_on_real_redis(redis_server):
    assert run_on(redis_server.client(), "RealRedisTaskMachine", examples=50, steps=55) >= 2000


def test_state_machine_on_a_redis_cluster(redis_cluster):
    # Fewer examples than on one Redis: the same rules, each key of a task on its queue's shard.
    assert run_on(redis_cluster.client(), "ClusterTaskMachine", examples=20, steps=40) >= 500
