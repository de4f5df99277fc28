"""Chaos soak: many tasks through real fork workers while workers are killed and paused and Redis
restarts or fails over; then a checker compares the engine's records with what the task functions
really did.

    .venv/bin/python -m tests.chaos.soak --tasks 10000        (``make chaos``)
    .venv/bin/python -m tests.chaos.soak --tasks 500 --seed 7
    .venv/bin/python -m tests.chaos.soak --backend cluster --restart-at 0.3,0.6 [--wait-replicas 1] [--lag 0.5]
    .venv/bin/python -m tests.chaos.soak --backend sentinel ...            (``make chaos-cluster``: both)

tests/chaos/test_soak.py runs the CI size (500 tasks) and asserts on the same report;
tests/chaos/test_failover.py a short cluster and a short Sentinel run.

Backends (``--backend``, tests/chaos/backends.py): ``standalone`` is a private redis-server with
appendonly yes, appendfsync always, SIGKILLed and restarted; ``cluster`` a 3-master, 3-replica
Redis Cluster whose masters are SIGKILLed (a replica promoted, the node restarted as a replica),
with the soak's tasks spread over four queues on the three shards; ``sentinel`` a primary, a
replica and three sentinels, the primary SIGKILLed and Sentinel promoting the replica.
``--wait-replicas`` sets Config.wait_replicas in every engine of the run (the driver's, workers',
sweepers'); a build that refuses it there (RedisSetupError) reports "not supported by this build".

What happens:

- A submitter thread submits ``--tasks`` tasks (``--rate`` per second) with idempotency keys, retrying
  a submit whose reply was lost (Redis restart), so the list of submitted ids is exact. Each task gets
  1-3 stages of random length and a mode: ok, transient failure (first 1-2 attempts raise),
  permanent failure, always failing, or overrunning its stage deadline (-> TIMEOUT). A share is
  cancelled by its owner at a random moment.
- ``--workers`` fork workers (``ghostless worker``) and ``--sweepers`` sweepers run throughout.
- Every ``--kill-every`` seconds (random in the range) one SIGKILL: of a work-horse (its parent lives
  and reports ``worker_lost``) or of a whole worker (parent, then horse), which is replaced by a new
  worker. Any worker or sweeper that dies on its own is replaced too, and counted.
- Every ``--pause-every`` seconds a busy worker (its horse only, or parent and horse) gets SIGSTOP for
  longer than the lease (lease + 0.5..1.5 s), then SIGCONT: its lease is reclaimed meanwhile, and the
  paused attempt must not be able to change the task when it wakes up (fencing).
- When ``--restart-at`` shares of the tasks have ended, the backend loses its Redis: SIGKILL and
  restart from the AOF, or a failover (each on the next shard). The rest of the chaos goes on meanwhile.
- At ``--sweeper-kill-at`` shares of the submissions a sweeper is SIGKILLed and replaced.
- At given shares of the submissions (``--snatch-at``) one RQ job is popped the way a worker pops it
  and dropped: a worker that died between dequeue and claim, made certain.
- Chaos stops ``--quiet`` seconds before the drain deadline (last submission + ``--drain-timeout``).

The checker (``check_run``) defines, per submitted task id:

- lost (acknowledged submits lost): its task hash is gone (retention is 7 days: nothing may have
  purged it), although its submit returned.
- stuck: not terminal at the drain deadline (or when the run drained).
- completed twice: the task's history has more than one accepted completion (a transition
  PROCESSING -> SUCCESS). The history is capped (100 entries), so this is cross-checked globally:
  the queue's ``entered:SUCCESS`` counter must equal the number of SUCCESS tasks.
- phantom success: SUCCESS whose accepted token (``ended_token``) has no ``done`` line in the
  side-effect log, or whose stored result names another token: an outcome nobody produced.
- duplicate executions: executions beyond one per claim, i.e. more than one ``start`` line for
  the same (task, fencing token, claim id): "two runs of one claim".
- acknowledged successes undone: a worker's ``complete`` returned (an ``acked`` line), and the final
  record's accepted outcome is not that claim's: a failover lost it, and the work ran again.
- claims lost: a fencing token that two claims got (the first claim lost in a failover, the token
  issued again; told apart by the claim id).
- acknowledged cancels undone: a cancel returned, and the task did not end CANCELLED.
- Those four are zero on one Redis and with wait_replicas. Without wait_replicas a failover may lose
  them (``Report.losses_allowed``): they are measured and reported, not failures.
- zombie executions (informative): executions that wrote a line after a newer attempt of the same task
  had started (a paused or cut-off attempt running on; fencing must make it harmless).
- completions refused (informative): ``done`` executions whose result was not the accepted one.
- stale rejections: the queue's ``stale_rejections`` counter (every refused lease-holder call), and
  the refused ``complete`` calls found in histories.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import random
import signal
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ghostless import Config, Engine, IllegalTransition, RedisSetupError, ReplicationTimeout, TaskNotFound  # noqa: E402
from ghostless.core.keys import BODY_HISTORY  # noqa: E402
from ghostless.core.models import history_entry  # noqa: E402
from ghostless.core.states import TERMINAL, State  # noqa: E402
from ghostless.core.stats import state_counts  # noqa: E402
from tests.chaos.app import WAIT_TIMEOUT, register, type_name  # noqa: E402
from tests.chaos.backends import BACKENDS  # noqa: E402
from tests.support.procs import Proc, app_env, start_sweeper, start_worker  # noqa: E402

APP = "tests.chaos.app:worker_engine"
QUEUE = "chaos"
NON_TERMINAL = [s.value for s in State if s not in TERMINAL]
# A call that raised one of these was not acknowledged (a ReplicationTimeout: not by the replicas):
# the driver retries it (a submit with its idempotency key) or looks again later.
REDIS_DOWN = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.BusyLoadingError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.ClusterError,
    redis.exceptions.RedisClusterException,
    ReplicationTimeout,
)


@dataclass
class SoakConfig:
    tasks: int = 500
    workers: int = 4
    sweepers: int = 2
    seed: int = 1
    rate: float = 15.0  # submissions per second
    lease: float = 2.0
    # Config.requeue_after, scaled down like the lease (default 300 s): how long a QUEUED task whose
    # RQ job was lost (claim refused as not current, horse killed before its claim, job popped by a
    # worker that died) waits before the sweeper dispatches it again.
    requeue_after: float = 10.0
    mean_step: float = 0.06  # mean seconds per stage (exponential, capped at 0.5)
    kill_every: tuple[float, float] = (2.0, 4.0)
    horse_share: float = 0.5  # of kills: the work-horse only (else the whole worker)
    pause_every: tuple[float, float] = (5.0, 9.0)
    pause_extra: tuple[float, float] = (0.5, 1.5)  # a pause lasts lease + this
    # shares of tasks ended at which Redis restarts (standalone) or fails over (cluster, sentinel);
    # > 1: never
    restart_at: float | tuple[float, ...] = 0.4
    snatch_at: tuple = (0.2, 0.5, 0.7)  # shares of tasks submitted at which a job is dropped after dequeue
    sweeper_kill_at: tuple = (0.3, 0.6)  # shares of tasks submitted at which a sweeper is SIGKILLed (replaced)
    cancel_share: float = 0.02
    drain_timeout: float = 120.0  # after the last submission
    quiet: float = 20.0  # chaos stops this long before the drain deadline
    verbose: bool = True
    backend: str = "standalone"  # standalone | cluster | sentinel (tests/chaos/backends.py)
    wait_replicas: int = 0  # Config.wait_replicas of every engine of the run (failover backends)
    lag: float = 0.0  # seconds the replica is held back before a failover (tests/chaos/backends.py)


@dataclass
class Report:
    backend: str = "standalone"
    wait_replicas: int = 0
    not_supported: str = ""  # why this build refused the run's set-up (nothing ran)
    # What a failover may lose when writes do not wait for replicas; problems() counts them unless
    # losses_allowed (a failover backend without wait_replicas), where they are measured instead.
    losses_allowed: bool = False
    acked_successes_undone: list = field(default_factory=list)  # a complete acknowledged, then undone
    claims_lost: int = 0  # claims whose fencing token was issued again to another claim
    cancels_undone: list = field(default_factory=list)  # a cancel acknowledged, the task not CANCELLED
    work_ran_again: int = 0  # tasks whose function ran to its end under more than one claim (informative)
    harness_errors: list = field(default_factory=list)  # a disruption that did not go as planned
    disruptions: list = field(default_factory=list)  # each Redis restart or failover, as it went
    submitted: int = 0
    states: dict = field(default_factory=dict)
    lost: list = field(default_factory=list)
    stuck: list = field(default_factory=list)
    stuck_detail: dict = field(default_factory=dict)  # where each stuck task's executor job is
    completed_twice: list = field(default_factory=list)
    success_counter_excess: int = 0
    phantom_successes: list = field(default_factory=list)
    duplicate_executions: int = 0
    executions: int = 0
    zombie_executions: int = 0
    completions_refused: int = 0
    stale_rejections: int = 0
    stale_completes_in_history: int = 0
    redispatches: int = 0
    snatched: dict = field(default_factory=dict)  # task id -> final state, for jobs dropped after dequeue
    end_reasons: dict = field(default_factory=dict)
    drain_seconds: float | None = None
    last_end_ms: int = 0  # server time (ms) of the last task ending (finished_at)
    started_ms: int = 0  # server time (ms) of the start of the run
    drained: bool = False
    check: list = field(default_factory=list)
    chaos: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    def losses(self) -> list[str]:
        """Acknowledged writes that did not survive: zero unless a failover lost writes no replica
        had (``losses_allowed``: then they are measurements, not problems)."""
        out = []
        if self.lost:
            out.append(f"lost acknowledged submits {len(self.lost)}: {self.lost[:5]}")
        if self.acked_successes_undone:
            out.append(
                f"acknowledged successes undone (the work ran again) {len(self.acked_successes_undone)}: "
                f"{self.acked_successes_undone[:5]}"
            )
        if self.claims_lost:
            out.append(f"claims lost (their token issued again to another claim) {self.claims_lost}")
        if self.cancels_undone:
            out.append(f"acknowledged cancels undone {len(self.cancels_undone)}: {self.cancels_undone[:5]}")
        return out

    def problems(self) -> list[str]:
        """Violations: each must be empty/zero."""
        out = [] if self.losses_allowed else self.losses()
        out += [f"harness: {e}" for e in self.harness_errors]
        if self.stuck:
            out.append(f"stuck {len(self.stuck)}: {self.stuck[:5]}")
        if self.completed_twice or self.success_counter_excess:
            out.append(
                f"completed twice {len(self.completed_twice)}: {self.completed_twice[:5]} "
                f"(entered:SUCCESS exceeds SUCCESS by {self.success_counter_excess})"
            )
        if self.phantom_successes:
            out.append(f"phantom successes {len(self.phantom_successes)}: {self.phantom_successes[:5]}")
        if self.duplicate_executions:
            out.append(f"duplicate executions (same task, token and claim) {self.duplicate_executions}")
        if self.check:
            out.append(f"engine.check(): {self.check[:5]}")
        return out

    def format(self) -> str:
        s = self.states
        mode = f"{self.backend}, wait_replicas={self.wait_replicas}"
        if self.not_supported:
            return f"{mode}: not supported by this build ({self.not_supported})"
        lines = [
            f"{mode}: lost acknowledged submits {len(self.lost)} | acknowledged successes undone (work run "
            f"again) {len(self.acked_successes_undone)} | claims lost {self.claims_lost} | acknowledged "
            f"cancels undone {len(self.cancels_undone)} | tasks whose work ran to the end more than once "
            f"{self.work_ran_again}" + (" (measured: writes do not wait for replicas)" if self.losses_allowed else ""),
            f"submitted {self.submitted}: SUCCESS {s.get('SUCCESS', 0)}, FAILED {s.get('FAILED', 0)}, "
            f"TIMEOUT {s.get('TIMEOUT', 0)}, CANCELLED {s.get('CANCELLED', 0)}"
            + "".join(f", {k} {v}" for k, v in s.items() if k not in ("SUCCESS", "FAILED", "TIMEOUT", "CANCELLED")),
            f"lost {len(self.lost)} | completed twice {len(self.completed_twice)} "
            f"(SUCCESS counter excess {self.success_counter_excess}) | stuck {len(self.stuck)} | "
            f"phantom successes {len(self.phantom_successes)} | duplicate executions {self.duplicate_executions}",
            f"stuck tasks by where their job is: {self.stuck_detail or '-'}",
            f"executions {self.executions} | zombie executions (ran on after a newer attempt started) "
            f"{self.zombie_executions} | completed executions not accepted {self.completions_refused}",
            f"stale rejections (stats) {self.stale_rejections} | stale completes refused (histories) "
            f"{self.stale_completes_in_history} | sweeper re-dispatches of QUEUED tasks {self.redispatches}",
            f"how failed/timed-out tasks ended: {dict(sorted(self.end_reasons.items()))}",
            f"tasks whose RQ job was dropped between dequeue and claim -> state at the end: {self.snatched}",
            f"time to drain: {'%.1f s' % self.drain_seconds if self.drain_seconds is not None else 'NOT DRAINED'}"
            f" (last task ended {(self.last_end_ms - self.started_ms) / 1000:.1f} s after the start)",
            f"chaos: {self.chaos}",
            f"engine.check(): {self.check or 'OK'}",
        ]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


# -- the plan of each task ----------------------------------------------------------------------------
def make_plan(rng: random.Random, mean_step: float) -> tuple[str, dict]:
    stages = [s for s in ("prepare", "render", "upload") if rng.random() < 0.6] or ["render"]
    steps = [[s, round(min(0.5, rng.expovariate(1 / mean_step)), 3)] for s in stages]
    u = rng.random()
    if u < 0.78:
        return "soak", {"steps": steps, "mode": "ok"}
    if u < 0.90:
        return "soak", {"steps": steps, "mode": "transient", "fail_attempts": rng.choice([1, 2])}
    if u < 0.95:
        return "soak", {"steps": steps, "mode": "permanent"}
    if u < 0.99:
        return "soak", {"steps": steps, "mode": "always"}
    if "render" not in stages:
        steps.append(["render", 0.0])
    return "soak_short", {"steps": steps, "mode": "overrun"}


# -- the run ------------------------------------------------------------------------------------------
class Soak:
    def __init__(self, cfg: SoakConfig):
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.ns = f"chaos{uuid.uuid4().hex[:6]}"
        with tempfile.NamedTemporaryFile(prefix="ghostless-chaos-", suffix=".log", delete=False) as f:
            self.log_path = f.name  # the side-effect log (tests/chaos/app.py appends to it)
        if cfg.wait_replicas and cfg.backend == "standalone":
            raise ValueError("wait_replicas needs replicas: run it on the cluster or sentinel backend")
        self.backend = BACKENDS[cfg.backend](lag=cfg.lag)
        self.queues: tuple[str, ...] = self.backend.queues
        self.ids: list[str] = []
        self.ids_lock = threading.Lock()
        self.cancels: list[tuple[float, str]] = []  # (monotonic time, task id)
        self.submitting_done = threading.Event()
        self.last_submit_at: float | None = None
        self.workers: list[Proc] = []
        self.sweepers: list[Proc] = []
        self.paused: dict[int, tuple[float, list[int]]] = {}  # worker pid -> (resume at, pids stopped)
        self.killed: set[int] = set()
        self.all_procs: list[Proc] = []
        self.chaos = collections.Counter()
        self.died: list[str] = []
        self.snatched: list[str] = []  # task ids whose RQ job the driver dropped
        self.cancelled: list[str] = []  # task ids whose cancel was acknowledged
        self.disrupting: threading.Thread | None = None
        self.disruptions: list[str] = []
        self.harness_errors: list[str] = []
        self.kept: set[str] = set()  # logs of processes that died on their own

    def say(self, msg: str) -> None:
        if self.cfg.verbose:
            print(f"[soak {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    # -- processes --------------------------------------------------------------------------------
    def env(self) -> dict:
        return app_env(
            self.backend.url,
            self.ns,
            self.cfg.lease,
            GHOSTLESS_CHAOS_NS=self.ns,
            GHOSTLESS_CHAOS_LOG=self.log_path,
            GHOSTLESS_CHAOS_LEASE=str(self.cfg.lease),
            GHOSTLESS_CHAOS_REQUEUE=str(self.cfg.requeue_after),
            GHOSTLESS_CHAOS_QUEUES=",".join(self.queues),
            GHOSTLESS_CHAOS_WAIT=str(self.cfg.wait_replicas),
        )

    def new_worker(self) -> Proc:
        p = start_worker(self.env(), APP, "fork", name=f"w-{uuid.uuid4().hex[:8]}")
        self.workers.append(p)
        self.all_procs.append(p)
        return p

    def new_sweeper(self) -> Proc:
        p = start_sweeper(self.env(), APP, interval=0.5)
        self.sweepers.append(p)
        self.all_procs.append(p)
        return p

    # -- submitter thread -------------------------------------------------------------------------
    def submit_all(self, engine: Engine) -> None:
        rng = random.Random(self.cfg.seed + 1)
        start = time.monotonic()
        try:
            for i in range(self.cfg.tasks):
                base, args = make_plan(rng, self.cfg.mean_step)
                wait = start + i / self.cfg.rate - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                queue = self.queues[i % len(self.queues)]
                task = self._submit(engine, type_name(base, queue), args, f"soak-{i}")
                with self.ids_lock:
                    self.ids.append(task.id)
                    if rng.random() < self.cfg.cancel_share:
                        self.cancels.append((time.monotonic() + rng.uniform(0, 3), task.id))
        finally:
            self.last_submit_at = time.monotonic()
            self.submitting_done.set()

    def _submit(self, engine, type_name, args, key):
        for attempt in range(600):
            try:
                return engine.submit(type_name, args, owner="soak", idempotency_key=key)
            except REDIS_DOWN as e:
                self.chaos[f"submit retries ({type(e).__name__})"] += 1
                time.sleep(min(1.0, 0.05 * (attempt + 1)))
        raise RuntimeError(f"could not submit {key}: Redis unreachable for minutes")

    # -- chaos ------------------------------------------------------------------------------------
    def busy(self) -> list[tuple[Proc, int]]:
        out = []
        for w in self.workers:
            if w.alive() and w.pid not in self.paused:
                kids = w.children()
                if len(kids) == 1:
                    out.append((w, kids[0]))
        return out

    def kill_one(self) -> None:
        """SIGKILL a busy worker's horse, or the whole busy worker (replaced). Idle workers are left
        alone: killing them tests nothing but RQ's start-up."""
        busy = self.busy()
        if not busy:
            self.chaos["kills skipped (no busy worker)"] += 1
            return
        w, horse = self.rng.choice(busy)
        if self.rng.random() < self.cfg.horse_share:
            _signal(horse, signal.SIGKILL)
            self.chaos["horse SIGKILL"] += 1
            return
        self.killed.add(w.pid)
        _signal(w.pid, signal.SIGKILL)  # the parent first, so nobody reports the horse's death
        _signal(horse, signal.SIGKILL)
        w.popen.wait(10)
        self.workers.remove(w)
        self.new_worker()
        self.chaos["worker SIGKILL (+ replacement)"] += 1

    def kill_sweeper(self) -> None:
        """SIGKILL a sweeper and start another: any copy may die at any moment."""
        victim = next((p for p in self.sweepers if p.alive()), None)
        if victim is None:
            return
        self.killed.add(victim.pid)
        victim.signal(signal.SIGKILL)
        victim.popen.wait(10)
        self.sweepers.remove(victim)
        self.new_sweeper()
        self.chaos["sweeper SIGKILL (+ replacement)"] += 1

    def snatch_one(self, client) -> bool:
        """A worker that took a job and died before its work-horse claimed the task, made certain:
        the driver dequeues one ghostless RQ job the way a worker does (RQ's dequeue_any over the
        worker's lists: LMOVE into RQ's intermediate list for one list, LPOP for several) and drops
        it. Real SIGKILLs land in that window too (a few per hundred kills), but not predictably.
        The engine must notice that such a job will never run (RQDispatcher.job_exists) and dispatch
        the task again after requeue_after; before that was fixed, these tasks stayed QUEUED."""
        from rq import Queue
        from rq.serializers import JSONSerializer

        from ghostless.execution.rq_cluster import ClusterJob, ClusterQueue, RQClusterConnection, is_cluster

        cluster = is_cluster(client)
        # the RQ lists a ghostless worker pops, in its order (one per queue)
        names = [n for q in self.queues for n in rq_names(self.ns, q, cluster)]
        if cluster:  # as a cluster worker pops: LPOP of the first non-empty list
            popped = ClusterQueue.lpop([f"rq:queue:{n}" for n in names], None, connection=RQClusterConnection(client))
            job_id = popped[1].decode() if popped else None
            task_id = ClusterJob.fetch(job_id, connection=client, serializer=JSONSerializer).args[0] if job_id else None
        else:
            queues = [Queue(n, connection=client, serializer=JSONSerializer) for n in names]
            got = Queue.dequeue_any(queues, None, connection=client, serializer=JSONSerializer)
            task_id = got[0].args[0] if got else None
        if task_id:
            self.snatched.append(task_id)
            self.chaos["RQ job dropped between dequeue and claim"] += 1
        return bool(task_id)

    def pause_one(self) -> None:
        busy = self.busy()
        if not busy:
            return
        w, horse = self.rng.choice(busy)
        pids = [horse] if self.rng.random() < 0.5 else [w.pid, horse]
        for pid in pids:
            _signal(pid, signal.SIGSTOP)
        seconds = self.cfg.lease + self.rng.uniform(*self.cfg.pause_extra)
        self.paused[w.pid] = (time.monotonic() + seconds, pids)
        self.chaos["SIGSTOP horse" if len(pids) == 1 else "SIGSTOP worker+horse"] += 1

    def resume_due(self, force: bool = False) -> None:
        now = time.monotonic()
        for wpid, (at, pids) in list(self.paused.items()):
            if force or now >= at:
                for pid in pids:
                    _signal(pid, signal.SIGCONT)
                del self.paused[wpid]

    def replace_dead(self) -> None:
        for group, make, what in (
            (self.workers, self.new_worker, "worker"),
            (self.sweepers, self.new_sweeper, "sweeper"),
        ):
            for p in list(group):
                if not p.alive() and p.pid not in self.killed:
                    group.remove(p)
                    tail = p.output().strip().splitlines()[-3:]
                    self.died.append(
                        f"{what} {p.pid} exited {p.popen.returncode} (log kept: {p.log.name}): {' | '.join(tail)}"
                    )
                    self.kept.add(p.log.name)
                    self.chaos[f"{what} died on its own (+ replacement)"] += 1
                    make()

    def cancel_due(self, engine: Engine) -> None:
        now = time.monotonic()
        with self.ids_lock:
            due = [c for c in self.cancels if c[0] <= now]
            self.cancels = [c for c in self.cancels if c[0] > now]
        for _, tid in due:
            try:
                engine.cancel(tid, by="soak", reason="changed my mind")
                self.chaos["cancels accepted"] += 1
                self.cancelled.append(tid)
            except (IllegalTransition, TaskNotFound):
                self.chaos["cancels of ended tasks"] += 1
            except REDIS_DOWN:
                with self.ids_lock:
                    self.cancels.append((now + 0.5, tid))

    def disrupt(self) -> None:
        """The backend's Redis disruption (a restart, a failover), in a thread: the other chaos
        goes on meanwhile."""
        index = len(self.disruptions) + len(self.harness_errors)

        def run() -> None:
            t0 = time.monotonic()
            try:
                what = self.backend.disrupt(index)
            except Exception as e:  # noqa: BLE001 - reported as a problem of the run
                self.harness_errors.append(f"{self.backend.disruption} {index + 1} failed: {type(e).__name__}: {e}")
                return
            ms = int((time.monotonic() - t0) * 1000)
            self.chaos[self.backend.disruption] += 1
            self.chaos["Redis disruption ms (longest)"] = max(self.chaos["Redis disruption ms (longest)"], ms)
            self.disruptions.append(f"{self.backend.disruption} {index + 1}: {what} ({ms} ms)")
            self.say(self.disruptions[-1])

        self.disrupting = threading.Thread(target=run, daemon=True)
        self.disrupting.start()

    # -- main loop --------------------------------------------------------------------------------
    def run(self) -> Report:
        cfg = self.cfg
        report = Report(backend=cfg.backend, wait_replicas=cfg.wait_replicas)
        report.losses_allowed = cfg.backend != "standalone" and not cfg.wait_replicas
        self.backend.start()
        client = self.backend.client()
        config = Config(requeue_after=cfg.requeue_after, wait_replicas=cfg.wait_replicas, wait_timeout=WAIT_TIMEOUT)
        try:
            engine = register(Engine(client, namespace=self.ns, config=config), cfg.lease, self.queues)
        except RedisSetupError as e:  # e.g. wait_replicas on a cluster, before a build that has it
            report.not_supported = str(e)
            client.close()
            self.backend.close()
            _unlink(self.log_path)
            return report
        counts_keys = [engine.keys.queue_key(q, "counts") for q in self.queues]
        try:
            for _ in range(cfg.sweepers):
                self.new_sweeper()
            for _ in range(cfg.workers):
                self.new_worker()
            t_start = time.monotonic()
            sec, usec = client.time()
            report.started_ms = int(sec) * 1000 + int(usec) // 1000
            submitter = threading.Thread(target=self.submit_all, args=(engine,), daemon=True)
            submitter.start()
            self.say(
                f"{cfg.tasks} tasks at {cfg.rate:g}/s on {cfg.backend} (queues {','.join(self.queues)}, "
                f"wait_replicas={cfg.wait_replicas}), {cfg.workers} fork workers, {cfg.sweepers} sweepers, "
                f"lease {cfg.lease:g}s, seed {cfg.seed}, log {self.log_path}"
            )
            next_kill = t_start + self.rng.uniform(*cfg.kill_every)
            next_pause = t_start + self.rng.uniform(*cfg.pause_every)
            restarts = sorted(x for x in _shares(cfg.restart_at) if x <= 1)
            snatches = sorted(cfg.snatch_at)
            sweeper_kills = sorted(cfg.sweeper_kill_at)
            next_report = t_start + 10
            drained_at = None
            while True:
                now = time.monotonic()
                deadline = (self.last_submit_at + cfg.drain_timeout) if self.submitting_done.is_set() else None
                chaos_on = deadline is None or now < deadline - cfg.quiet
                self.resume_due(force=not chaos_on)
                try:
                    counts = collections.Counter()
                    for key in counts_keys:  # per state: sums of the move counters (stats.state_counts)
                        counts.update(state_counts(client.hgetall(key))["counts"])
                except REDIS_DOWN:
                    time.sleep(0.1)
                    continue
                pending = sum(counts.get(s, 0) for s in NON_TERMINAL)
                ended = sum(counts.get(s.value, 0) for s in TERMINAL)
                # (a failover without wait_replicas may lose submitted tasks: they never end)
                if self.submitting_done.is_set() and pending == 0 and (ended >= len(self.ids) or report.losses_allowed):
                    drained_at = now
                    break
                if deadline is not None and now >= deadline:
                    break
                if chaos_on:
                    if now >= next_kill:
                        self.kill_one()
                        next_kill = now + self.rng.uniform(*cfg.kill_every)
                    if now >= next_pause:
                        self.pause_one()
                        next_pause = now + self.rng.uniform(*cfg.pause_every)
                    if sweeper_kills and len(self.ids) >= sweeper_kills[0] * cfg.tasks:
                        sweeper_kills.pop(0)
                        self.kill_sweeper()
                    if snatches and len(self.ids) >= snatches[0] * cfg.tasks:
                        try:
                            if self.snatch_one(client):  # else the queue was empty: try again soon
                                snatches.pop(0)
                        except REDIS_DOWN:
                            pass
                    idle = self.disrupting is None or not self.disrupting.is_alive()
                    if restarts and idle and ended >= restarts[0] * cfg.tasks:
                        restarts.pop(0)
                        self.disrupt()
                try:
                    self.cancel_due(engine)
                except REDIS_DOWN:
                    pass
                self.replace_dead()
                if now >= next_report:
                    next_report = now + 10
                    in_flight = {k: v for k, v in counts.items() if k in NON_TERMINAL and v}
                    self.say(
                        f"submitted {len(self.ids)}, ended {ended}, in flight {pending} {in_flight}; "
                        f"chaos {dict(self.chaos)}"
                    )
                time.sleep(0.05)
            if self.disrupting:
                self.disrupting.join(120)
            report.drained = drained_at is not None
            report.drain_seconds = (drained_at - t_start) if drained_at else None
            self.resume_due(force=True)
            report.chaos = dict(self.chaos)
            # what the run left behind, read before the workers go (they are idle when drained)
            check_run(engine, list(self.ids), self.log_path, report, self.queues)
            report.cancels_undone = [t for t in self.cancelled if _status(engine, t) != State.CANCELLED.value]
            report.harness_errors = list(self.harness_errors)
            report.disruptions = list(self.disruptions)
            report.notes += self.disruptions + self.died
            report.snatched = {tid: _status(engine, tid) for tid in self.snatched}
            self.say(("drained" if report.drained else "NOT drained") + f"; {len(report.problems())} problem(s)")
        finally:
            self.resume_due(force=True)
            for p in self.all_procs:
                horses = p.children() if p.alive() else []
                p.stop()
                for pid in horses:  # a work-horse is its own process group: Proc.stop misses it
                    _signal(pid, signal.SIGCONT)
                    _signal(pid, signal.SIGKILL)
            keep = bool(report.problems())
            for p in self.all_procs:
                p.log.close()
                if not keep and p.log.name not in self.kept:  # a process that died on its own keeps its log
                    _unlink(p.log.name)
            if keep:
                report.notes.append(
                    f"kept for inspection: side-effect log {self.log_path}, process logs "
                    f"{[p.log.name for p in self.all_procs][:8]}..."
                )
            else:
                _unlink(self.log_path)
            client.close()
            self.backend.close()
        return report


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


# -- the checker ----------------------------------------------------------------------------------------
def read_log(path: str) -> dict[str, list[tuple]]:
    """task id -> [(event, token, attempt, pid, time, claim id)] in file order."""
    out: dict[str, list[tuple]] = collections.defaultdict(list)
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) != 7:
                    continue
                event, tid, token, attempt, pid, at, claim = parts
                out[tid].append((event, int(token), int(attempt), int(pid), float(at), claim))
    except FileNotFoundError:
        pass
    return out


def check_run(engine: Engine, ids: list[str], log_path: str, report: Report, queues=(QUEUE,)) -> Report:
    """Fill ``report`` from the engine's records and the side-effect log (definitions: module doc)."""
    r = engine.redis
    log = read_log(log_path)
    report.submitted = len(ids)
    states: collections.Counter = collections.Counter()
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        pipe = r.pipeline(transaction=False)
        for tid in chunk:
            k = engine.keys.task(tid)
            pipe.hgetall(k.task)
            pipe.lrange(k.body, BODY_HISTORY, -1)
            pipe.lindex(k.body, 1)
        replies = pipe.execute()
        for i, tid in enumerate(chunk):
            h = {a.decode(): b.decode() for a, b in replies[3 * i].items()}
            history = [history_entry(e) for e in replies[3 * i + 1]]
            result = json.loads(replies[3 * i + 2]) if replies[3 * i + 2] else None
            if not h:
                report.lost.append(tid)
                continue
            status = h["status"]
            states[status] += 1
            if status not in NON_TERMINAL:  # ended at its state_since (a task from before kept finished_at too)
                report.last_end_ms = max(report.last_end_ms, int(h.get("finished_at") or h["state_since"]))
            if status in NON_TERMINAL:
                report.stuck.append(f"{tid}:{status}")
                why = _why_stuck(engine, tid, h)
                report.stuck_detail[why] = report.stuck_detail.get(why, 0) + 1
            if status in ("FAILED", "TIMEOUT"):
                why = h.get("error_kind", "") + (":" + h.get("reason", "").split(":")[0] if status == "TIMEOUT" else "")
                report.end_reasons[f"{status}/{why}"] = report.end_reasons.get(f"{status}/{why}", 0) + 1
            successes = [e for e in history if e.get("kind") == "transition" and e.get("to") == "SUCCESS"]
            if len(successes) > 1:
                report.completed_twice.append(tid)
            report.stale_completes_in_history += sum(
                1 for e in history if e.get("kind") == "stale" and e.get("verb") == "complete"
            )
            report.redispatches += sum(
                1 for e in history if e.get("verb") == "dispatch" and e.get("reason") == "redispatch"
            )
            _check_executions(tid, h, result, log.get(tid, []), report)
    report.states = dict(sorted(states.items()))
    stats = engine.stats()
    for queue in queues:
        report.stale_rejections += stats[queue]["stale_rejections"]
    # Moves into SUCCESS counted against the SUCCESS tasks the scan found (no task is purged in a
    # soak): a completion counted twice shows here even when the task's history holds one.
    report.success_counter_excess = sum(stats[q]["entered"]["SUCCESS"] for q in queues) - states["SUCCESS"]
    report.check = engine.check()
    return report


def rq_names(ns: str, queue: str, cluster: bool) -> list[str]:
    """The RQ queue of a ghostless queue, as a list (tagged on a cluster)."""
    from ghostless.execution import rq_dispatch

    return [rq_dispatch.rq_queue_name(ns, queue, tagged=cluster)]


def _why_stuck(engine: Engine, tid: str, h: dict) -> str:
    """Where a stuck task's executor job is: still waiting in an RQ list (a backlog), or popped and
    never claimed (RQ's own status given), or gone."""
    from rq.exceptions import NoSuchJobError
    from rq.job import Job
    from rq.serializers import JSONSerializer

    from ghostless.core.keys import rq_job_id
    from ghostless.execution.rq_cluster import ClusterJob, is_cluster

    status, dispatch_id = h.get("status", ""), h.get("dispatch_id", "")
    if status != "QUEUED" or not dispatch_id:
        return f"{status} (dispatch {dispatch_id or 'none'})"
    r, queue = engine.redis, tid.partition(".")[0]
    cluster = is_cluster(r)
    job_id = rq_job_id(queue, dispatch_id) if cluster else dispatch_id
    for name in rq_names(engine.keys.ns, queue, cluster):
        for key in (f"rq:queue:{name}", f"rq:queue:{name}:intermediate"):
            if r.lpos(key, job_id) is not None:
                return "QUEUED, job waiting in an RQ list" + (" (intermediate)" if key.endswith("intermediate") else "")
    try:
        job_class = ClusterJob if cluster else Job
        job_status = job_class.fetch(job_id, connection=r, serializer=JSONSerializer).get_status()
    except NoSuchJobError:
        return "QUEUED, job gone"
    return f"QUEUED, job popped but never claimed (RQ says {getattr(job_status, 'value', job_status)})"


def _check_executions(tid: str, h: dict, result, lines: list[tuple], report: Report) -> None:
    """An execution is one claim's run: (token, claim id); lines without a claim id (a made-up log)
    tell claims apart by token alone."""

    def claims(event: str) -> list[tuple[int, str]]:
        return [(line[1], line[5] if len(line) > 5 else "") for line in lines if line[0] == event]

    starts = collections.Counter(claims("start"))
    report.executions += sum(starts.values())
    report.duplicate_executions += sum(n - 1 for n in starts.values() if n > 1)
    # a token issued to two claims: the first claim was lost (a failover), the token issued again
    per_token = collections.Counter(tok for tok, _ in starts)
    report.claims_lost += sum(n - 1 for n in per_token.values() if n > 1)
    done = set(claims("done"))
    report.work_ran_again += len(done) > 1
    success = h.get("status") == "SUCCESS"
    # a SUCCESS task's ended token is its token (lua/complete.lua stores it only before 2026-12-05)
    ended_token = h.get("ended_token") or h.get("token") if success else None
    accepted = (int(ended_token), h.get("claim_id", "")) if ended_token else None

    def is_accepted(pair: tuple) -> bool:
        return accepted is not None and pair[0] == accepted[0] and pair[1] in ("", accepted[1])

    produced = any(is_accepted(d) for d in done) and bool(result)
    if success and not (produced and is_accepted((result.get("token"), result.get("claim", "")))):
        report.phantom_successes.append(tid)
    report.completions_refused += sum(1 for d in done if not is_accepted(d))
    if any(not accepted or a != accepted for a in claims("acked")):
        report.acked_successes_undone.append(tid)
    # zombie: a line of token t written after a token > t had started
    newest = 0
    zombies = set()
    for ev, tok, *_ in lines:
        if tok < newest:
            zombies.add(tok)
        if ev == "start":
            newest = max(newest, tok)
    report.zombie_executions += len(zombies)


def _status(engine: Engine, task_id: str) -> str:
    """The task's state, or "gone" (a submit a failover lost)."""
    task = engine.get(task_id)  # None for a task that does not exist
    return "gone" if task is None else task.status.value


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x.strip())


def _shares(at: float | tuple[float, ...]) -> tuple[float, ...]:
    return at if isinstance(at, tuple) else (at,)


def run_soak(cfg: SoakConfig | None = None) -> Report:
    return Soak(cfg or SoakConfig()).run()


def main(argv=None) -> int:
    d = SoakConfig()
    ap = argparse.ArgumentParser(description="ghostless chaos soak (see the module docstring)")
    ap.add_argument("--tasks", type=int, default=int(os.environ.get("CHAOS_TASKS", d.tasks)))
    ap.add_argument("--workers", type=int, default=d.workers)
    ap.add_argument("--sweepers", type=int, default=d.sweepers)
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--rate", type=float, default=d.rate, help="submissions per second")
    ap.add_argument("--lease", type=float, default=d.lease)
    ap.add_argument("--requeue-after", type=float, default=d.requeue_after)
    ap.add_argument("--mean-step", type=float, default=d.mean_step)
    ap.add_argument(
        "--restart-at",
        default=str(d.restart_at),
        help="shares of tasks ended at which Redis restarts or fails over, comma-separated (> 1: never)",
    )
    ap.add_argument("--backend", choices=sorted(BACKENDS), default=d.backend)
    ap.add_argument(
        "--wait-replicas", type=int, default=d.wait_replicas, help="Config.wait_replicas (failover backends)"
    )
    ap.add_argument("--lag", type=float, default=d.lag, help="seconds the replica is held back before a failover")
    ap.add_argument(
        "--drain-timeout",
        type=float,
        default=None,
        help="seconds after the last submission (default: 120, or 300 from 2,000 tasks)",
    )
    ap.add_argument(
        "--snatch-at",
        default=",".join(str(x) for x in d.snatch_at),
        help="shares of submissions at which one RQ job is dropped between dequeue and claim ('' for none)",
    )
    ap.add_argument(
        "--sweeper-kill-at",
        default=",".join(str(x) for x in d.sweeper_kill_at),
        help="shares of submissions at which a sweeper is SIGKILLed and replaced ('' for none)",
    )
    a = ap.parse_args(argv)
    cfg = SoakConfig(
        tasks=a.tasks,
        workers=a.workers,
        sweepers=a.sweepers,
        seed=a.seed,
        rate=a.rate,
        lease=a.lease,
        requeue_after=a.requeue_after,
        mean_step=a.mean_step,
        restart_at=_floats(a.restart_at),
        backend=a.backend,
        wait_replicas=a.wait_replicas,
        lag=a.lag,
        snatch_at=_floats(a.snatch_at),
        sweeper_kill_at=_floats(a.sweeper_kill_at),
        drain_timeout=a.drain_timeout or (300.0 if a.tasks >= 2000 else d.drain_timeout),
    )
    if cfg.backend != "standalone":  # their nodes run without AOF on purpose: the failover is the test
        logging.getLogger("ghostless").addFilter(lambda record: "Redis AOF is off" not in record.getMessage())
    report = run_soak(cfg)
    print(report.format())
    if report.not_supported:
        print("RESULT: NOT SUPPORTED by this build (nothing ran)")
        return 0
    problems = report.problems()
    print("RESULT: " + ("PASS" if not problems else "FAIL\n  " + "\n  ".join(problems)))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
